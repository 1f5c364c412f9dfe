//===- RuntimeProgram.cpp - The scheduled step as the runtime's program ---===//
#include "mfsdp/step/RuntimeProgram.h"

#include "mfsdp/runtime/ProgramHooks.h"

#include "InternalError.h"
#include "ParamRefs.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace mfsdp::step {

namespace {
/// `op` as the C view holds it, its parameters at `params`.
mfsdp_program_op viewOf(const ProgramOp &op, const int32_t *params) {
  return {op.kind, op.unit, op.group, op.optimizer, op.onlyRank,
          static_cast<int32_t>(op.params.size()), op.params.empty() ? nullptr : params};
}

/// Points `out.program` at `out.ops` and `hooks`.
void pointProgram(RuntimeProgram::View &out, const std::vector<mfsdp_program_hook> &hooks) {
  out.program.num_ops = static_cast<int32_t>(out.ops.size());
  out.program.ops = out.ops.empty() ? nullptr : out.ops.data();
  out.program.num_hooks = static_cast<int32_t>(hooks.size());
  out.program.hooks = hooks.empty() ? nullptr : hooks.data();
}
} // namespace

void RuntimeProgram::view(View &out) const {
  out.ops.clear();
  out.ops.reserve(ops.size());
  for (const ProgramOp &op : ops)
    out.ops.push_back(viewOf(op, op.params.data()));
  pointProgram(out, hooks);
}

void RuntimeProgram::release(View &out) {
  size_t total = 0;
  for (const ProgramOp &op : ops)
    total += op.params.size();
  out.params.clear();
  out.params.reserve(total); // (never grows below: the ops point into it)
  out.ops.clear();
  out.ops.reserve(ops.size());
  for (const ProgramOp &op : ops) {
    const int32_t *params = out.params.data() + out.params.size();
    out.params.insert(out.params.end(), op.params.begin(), op.params.end());
    out.ops.push_back(viewOf(op, params));
  }
  std::vector<ProgramOp>().swap(ops);
  out.hooks = std::move(hooks);
  hooks.clear();
  pointProgram(out, out.hooks);
}

namespace {

bool isReduction(const Op &op) {
  return op.kind == OpKind::Collective &&
         (op.coll == CollKind::ReduceScatter || op.coll == CollKind::ReduceScatterV ||
          op.coll == CollKind::AllReduce);
}

bool overReplicas(const Op &op) {
  return std::find(op.meshAxes.begin(), op.meshAxes.end(), "dp_replicate") !=
         op.meshAxes.end();
}

/// What a program op is lowered from, as ProgramOp::from says it: a text
/// made only when the program keeps its origins (lowerStepProgram's
/// `origins`), from a fixed prefix and a step op's name.
struct Origin {
  Origin(const char *fixed) : prefix(fixed) {}         // NOLINT: a literal converts
  Origin(const std::string &opName) : name(&opName) {} // NOLINT: a name converts
  Origin(const char *prefix, const std::string &opName) : prefix(prefix), name(&opName) {}
  std::string text() const { return name ? prefix + *name : std::string(prefix); }
  const char *prefix = "";
  const std::string *name = nullptr;
};

class Lowering {
public:
  /// `waitedInHooks`: units whose reduction the forward and backward hooks
  /// already wait for (their waits here would find nothing in flight).
  Lowering(const Step &s, const mfsdp_plan &p, const ParamRefs &refs,
           std::set<int32_t> waitedInHooks = {}, bool origins = true)
      : s(s), p(p), refs(refs), origins(origins), waited(std::move(waitedInHooks)) {}

  RuntimeProgram run() {
    // Each unit's group, from the ops that name both (or a parameter).
    unitGroup.assign(static_cast<size_t>(std::max(p.num_units, 0)), -1);
    for (const Op &op : s.ops) {
      if (op.group < 0)
        continue;
      if (op.unit >= 0 && op.unit < p.num_units && unitGroup[op.unit] < 0)
        unitGroup[op.unit] = static_cast<int32_t>(op.group);
      for (int32_t param : refs.of(op))
        if (param >= 0 && unitGroup[p.params[param].unit] < 0)
          unitGroup[p.params[param].unit] = static_cast<int32_t>(op.group);
    }
    for (size_t u = 0; u < unitGroup.size(); ++u)
      if (unitGroup[u] >= 0)
        groupUnits[unitGroup[u]].push_back(static_cast<int32_t>(u));
    unitParams.assign(unitGroup.size(), {});
    for (int32_t i = 0; i < p.num_params; ++i)
      if (p.params[i].unit >= 0 && p.params[i].unit < p.num_units)
        unitParams[p.params[i].unit].push_back(i);
    stepped.assign(static_cast<size_t>(std::max(p.num_params, 0)), false);
    gathered.assign(unitGroup.size(), false);
    for (size_t i = 0; i < s.ops.size() && out.error.empty(); ++i)
      if (s.ops[i].phase == Phase::Optimizer)
        lower(s.ops[i]);
    if (!out.error.empty())
      return out;
    for (int32_t i = 0; i < p.num_params; ++i)
      if (p.params[i].optimizer != MFSDP_OPT_NONE && !stepped[i]) {
        out.error = "parameter '" + std::string(p.params[i].name) +
                    "' is stepped by no optimizer op of the schedule";
        return out;
      }
    // ZeRO-1/2: every unit's parameters whole again, at the latest at the end.
    if (p.zero < 3) {
      std::vector<bool> hasParams(unitGroup.size(), false);
      for (int32_t i = 0; i < p.num_params; ++i)
        hasParams[p.params[i].unit] = true;
      for (size_t u = 0; u < unitGroup.size(); ++u)
        if (hasParams[u] && !gathered[u])
          add(MFSDP_PROGRAM_GATHER, static_cast<int32_t>(u), unitGroup[u], {},
              "the end of the optimizer phase");
    }
    out.hooks.push_back({MFSDP_HOOK_OPTIMIZER_STEP, -1, 0,
                         static_cast<int32_t>(out.ops.size())});
    return out;
  }

private:
  ProgramOp &add(int32_t kind, int32_t unit, int32_t group,
                 std::vector<int32_t> params, const Origin &from) {
    ProgramOp op;
    op.kind = kind;
    op.unit = unit;
    op.group = group;
    op.params = std::move(params);
    if (origins)
      op.from = from.text();
    out.ops.push_back(std::move(op));
    return out.ops.back();
  }

  /// The units of `group`, in index order.
  const std::vector<int32_t> &unitsOf(int64_t group) const {
    static const std::vector<int32_t> none;
    auto it = groupUnits.find(group);
    return it == groupUnits.end() ? none : it->second;
  }

  /// The parameters `op` names, or false (the error said) if one is not
  /// in the plan.
  bool find(const Op &op, std::vector<int32_t> &params) {
    const ParamSpan ids = refs.of(op);
    for (size_t k = 0; k < ids.size(); ++k) {
      if (ids[k] < 0) {
        out.error = "'" + op.name + "' names parameter '" + op.params[k] +
                    "', which is not in the plan";
        return false;
      }
      params.push_back(ids[k]);
    }
    return true;
  }

  void lowerWait(const Op &wait) {
    if (wait.waitFor < 0 || wait.waitFor >= static_cast<int64_t>(s.ops.size())) {
      out.error = "'" + wait.name + "' waits for op " + std::to_string(wait.waitFor) +
                  ", which is not in the step";
      return;
    }
    const Op &target = s.ops[wait.waitFor];
    // The runtime's optimizer-phase collectives are synchronous, and
    // gathers of the earlier phases are waited by their hooks. HSDP's
    // all-reduce over replicas is part of the wait of the unit's reduction
    // over dp_shard (as in the hooks), which the schedule waits for too.
    if (target.phase == Phase::Optimizer || !isReduction(target) || overReplicas(target))
      return;
    std::vector<int32_t> params;
    if (!find(target, params))
      return;
    std::set<int32_t> units;
    for (int32_t param : params)
      units.insert(p.params[param].unit);
    if (units.empty() && target.unit >= 0 && target.unit < p.num_units)
      units.insert(static_cast<int32_t>(target.unit));
    if (units.empty())
      for (int32_t u : unitsOf(target.group))
        units.insert(u);
    for (int32_t u : units)
      if (waited.insert(u).second)
        add(MFSDP_PROGRAM_WAIT_REDUCTION, u, unitGroup[u], {}, Origin("wait ", target.name));
  }

  void lowerOptimizer(const Op &op) {
    if (op.optimizer != "adamw" && op.optimizer != "sgd" && op.optimizer != "muon") {
      out.error = "'" + op.name + "' runs optimizer kernel '" + op.optimizer +
                  "'; the runtime runs adamw, sgd and muon";
      out.unsupported = true;
      return;
    }
    std::vector<int32_t> params;
    if (!find(op, params))
      return;
    // A group's replicated tensors are stepped by an op that names none.
    if (op.params.empty()) {
      for (int32_t u : unitsOf(op.group))
        for (int32_t i : unitParams[u])
          if (p.params[i].placement == MFSDP_REPLICATE)
            params.push_back(i);
      std::sort(params.begin(), params.end());
    }
    // One op per unit and optimizer, units in order, each in the order of
    // its parameters' first appearance.
    std::map<int32_t, std::vector<std::pair<int32_t, std::vector<int32_t>>>> byUnit;
    for (int32_t param : params) {
      const mfsdp_param_desc &d = p.params[param];
      if (d.optimizer == MFSDP_OPT_NONE)
        continue;
      if (stepped[param]) {
        out.error = "'" + op.name + "' steps parameter '" + d.name +
                    "', which an earlier op of the schedule stepped";
        return;
      }
      stepped[param] = true;
      auto &kinds = byUnit[d.unit];
      auto it = std::find_if(kinds.begin(), kinds.end(),
                             [&](const auto &k) { return k.first == d.optimizer; });
      if (it == kinds.end())
        kinds.push_back({d.optimizer, {param}});
      else
        it->second.push_back(param);
    }
    for (auto &[unit, kinds] : byUnit)
      for (auto &[optimizer, members] : kinds) {
        ProgramOp &k = add(MFSDP_PROGRAM_OPTIMIZER, unit,
                           static_cast<int32_t>(op.group), std::move(members), op.name);
        k.optimizer = optimizer;
        k.onlyRank = static_cast<int32_t>(op.onlyRank);
      }
  }

  void lowerCollective(const Op &op) {
    if (overReplicas(op) && op.coll == CollKind::AllGather) {
      // ns_split: the updated owned Muon matrices over replicas.
      for (int32_t u : unitsOf(op.group)) {
        std::vector<int32_t> members;
        for (int32_t i : unitParams[u])
          if (p.params[i].placement == MFSDP_OWNER && p.params[i].optimizer == MFSDP_OPT_MUON)
            members.push_back(i);
        if (!members.empty())
          add(MFSDP_PROGRAM_BROADCAST_UPDATES, u, static_cast<int32_t>(op.group),
              std::move(members), op.name);
      }
      return;
    }
    if (!overReplicas(op) && p.zero < 3 &&
        (op.coll == CollKind::AllGather || op.coll == CollKind::AllGatherV)) {
      for (int32_t u : unitsOf(op.group))
        if (!gathered[u]) {
          gathered[u] = true;
          add(MFSDP_PROGRAM_GATHER, u, static_cast<int32_t>(op.group), {}, op.name);
        }
      return;
    }
    out.error = "'" + op.name + "' (" + std::string(enumName(op.coll)) +
                ") in the optimizer phase is a collective the runtime does not run "
                "(ZeRO-" + std::to_string(p.zero) + ")";
    out.unsupported = true;
  }

  void lower(const Op &op) {
    switch (op.kind) {
    case OpKind::Alloc:
    case OpKind::Free:
      return;
    case OpKind::Wait:
      return lowerWait(op);
    case OpKind::Optimizer:
      return lowerOptimizer(op);
    case OpKind::Collective:
      return lowerCollective(op);
    case OpKind::Compute:
      if (isShardCopy(op))
        return; // ZeRO-1/2: the GATHER unpacks its staging inside the op
      break;
    }
    out.error = "'" + op.name + "' (" + std::string(opKindName(op.kind)) +
                ") in the optimizer phase is an op the runtime does not run";
    out.unsupported = true;
  }

  const Step &s;
  const mfsdp_plan &p;
  const ParamRefs &refs;
  const bool origins;
  RuntimeProgram out;
  std::vector<int32_t> unitGroup;
  std::unordered_map<int64_t, std::vector<int32_t>> groupUnits;
  std::vector<std::vector<int32_t>> unitParams; // per unit, in index order
  std::vector<bool> stepped, gathered;
  std::set<int32_t> waited;
};

/// The forward and backward hooks of one step (lowerStepProgram).
class HookLowering {
public:
  HookLowering(const Step &s, const mfsdp_plan &p, const ParamRefs &refs,
               const std::vector<std::string> &names, bool origins)
      : s(s), p(p), refs(refs), origins(origins) {
    for (size_t u = 0; u < names.size(); ++u)
      unitIndex.emplace(names[u], static_cast<int32_t>(u));
  }

  /// Each hook's ops, indexed by runtime::hookSlot(unit, hook); "" or what
  /// is wrong with the step (error).
  std::vector<std::vector<ProgramOp>> hooks;
  std::string error;
  bool unsupported = false; // error names an op the runtime does not run

  void run() {
    const int32_t units = std::max(p.num_units, 0);
    // Each gather group's units, in forward order (a group of several is
    // gathered, freed and reduced together: its first unit's pre hooks and
    // its last unit's post hooks run the group's work).
    for (const Op &op : s.ops) {
      if (!isUnitCompute(op))
        continue;
      const int32_t unit = computeUnit(op);
      if (unit < 0 || unit >= units) {
        error = "'" + op.name + "' computes unit " +
                (op.unitName.empty() ? std::to_string(op.unit) : "'" + op.unitName + "'") +
                ", which is not one of the plan's " + std::to_string(units) + " units";
        return;
      }
      std::vector<int32_t> &members = groupUnits[op.group];
      if (std::find(members.begin(), members.end(), unit) == members.end())
        members.push_back(unit);
    }
    groupOf.assign(static_cast<size_t>(units), -1);
    for (const auto &[g, members] : groupUnits)
      for (int32_t u : members)
        groupOf[u] = g;
    // The forward's gathered copies: their free releases the unit. The
    // buffers any gather writes (a gathered buffer, or the staging of
    // copied rows): a copy out of one unpacks it.
    for (const auto &[b, gather] : gatheredCopies(s, isGather))
      if (s.ops[gather].phase == Phase::Forward)
        gatheredBy[b] = s.ops[gather].group;
    for (const Op &op : s.ops)
      if (isGather(op))
        gatherWritten.insert(op.writes.begin(), op.writes.end());
    // The units the runtime stages (row-shard buckets): their gathers land
    // in staging, which the step's copies unpack, and their reductions
    // start from staging, which its copies pack.
    rowBucket = runtime::firstRowBuckets(p);
    // The microbatches: each a forward then a backward, in program order.
    // Their hooks are the same but for the reduction, which only the last
    // runs (the trainer runs the others under no-sync, where a
    // START_REDUCTION reduces nothing): the last microbatch's hooks are
    // the program, and every other one's must be them without reductions.
    std::vector<std::pair<size_t, size_t>> ranges = microbatches();
    if (ranges.empty())
      ranges.push_back({0, 0}); // no forward or backward op: empty hooks
    else if (static_cast<int64_t>(ranges.size()) != std::max<int64_t>(s.microbatches, 1)) {
      error = "the step says " + std::to_string(s.microbatches) +
              " microbatches but its ops run " + std::to_string(ranges.size()) +
              " forward and backward passes";
      return;
    }
    std::vector<std::vector<std::vector<ProgramOp>>> each;
    for (size_t m = 0; m < ranges.size(); ++m) {
      hooks.assign(runtime::hookSlot(units, 0), {});
      reductionWaited.clear();
      lowerRange(ranges[m].first, ranges[m].second);
      if (!error.empty())
        return;
      finishHooks();
      each.push_back(std::move(hooks));
    }
    hooks = std::move(each.back());
    for (size_t m = 0; m + 1 < each.size() && error.empty(); ++m)
      agree(static_cast<int64_t>(m), each[m]);
    if (!error.empty())
      return;
    copiesAroundStaging();
    if (!error.empty())
      return;
    // Every unit's gradients are reduced somewhere.
    std::vector<bool> hasParams(units, false), reduced(units, false);
    for (int32_t i = 0; i < p.num_params; ++i)
      hasParams[p.params[i].unit] = true;
    for (int32_t u = 0; u < units; ++u)
      for (int32_t h : {MFSDP_HOOK_PRE_BACKWARD, MFSDP_HOOK_POST_BACKWARD})
        for (const ProgramOp &op : at(h, u))
          if (op.kind == MFSDP_PROGRAM_START_REDUCTION)
            reduced[op.unit] = true;
    for (int32_t u = 0; u < units; ++u)
      if (hasParams[u] && !reduced[u]) {
        error = "unit " + std::to_string(u) + " ('" + unitName(u) +
                "') has parameters whose gradients no collective of the "
                "schedule's backward reduces";
        return;
      }
  }

private:
  /// [begin, end) of each microbatch's forward and backward ops
  /// (microbatchOf).
  std::vector<std::pair<size_t, size_t>> microbatches() const {
    std::vector<std::pair<size_t, size_t>> out;
    const std::vector<int64_t> of = microbatchOf(s);
    for (size_t i = 0; i < s.ops.size(); ++i) {
      if (s.ops[i].phase == Phase::Optimizer)
        continue;
      if (out.empty() || of[i] >= static_cast<int64_t>(out.size()))
        out.push_back({i, i + 1});
      out.back().second = i + 1;
    }
    return out;
  }

  /// Lowers the forward and backward ops in [begin, end) into `hooks`.
  void lowerRange(size_t begin, size_t end) {
    std::vector<size_t> pending;
    int32_t lastHook = -1, lastUnit = -1; // the post hook of the last compute
    int64_t lastGroup = -1;
    auto flush = [&](int32_t preHook, int32_t preUnit) {
      size_t split = pending.size();
      if (preHook >= 0)
        for (size_t k = 0; k < pending.size(); ++k)
          if (gatherWork(s.ops[pending[k]])) {
            split = k;
            break;
          }
      for (size_t k = 0; k < pending.size() && error.empty(); ++k) {
        const bool pre = k >= split || lastHook < 0;
        lower(s.ops[pending[k]], pre ? preHook : lastHook, pre ? preUnit : lastUnit);
      }
      pending.clear();
    };
    for (size_t i = begin; i < end && error.empty(); ++i) {
      const Op &op = s.ops[i];
      if (op.phase == Phase::Optimizer)
        continue;
      if (!isUnitCompute(op)) {
        pending.push_back(i);
        continue;
      }
      const bool fwd = op.phase == Phase::Forward;
      const int32_t unit = computeUnit(op);
      const int32_t post = fwd ? MFSDP_HOOK_POST_FORWARD : MFSDP_HOOK_POST_BACKWARD;
      if (post == lastHook && op.group == lastGroup) {
        // The same group again (its next unit, or a unit's recomputation
        // then its backward): what lies between goes with the unit before,
        // and the group's post hooks move to this unit.
        for (size_t k : pending)
          lower(s.ops[k], lastHook, lastUnit);
        pending.clear();
        lastUnit = unit;
        continue;
      }
      flush(fwd ? MFSDP_HOOK_PRE_FORWARD : MFSDP_HOOK_PRE_BACKWARD, unit);
      lastHook = post;
      lastUnit = unit;
      lastGroup = op.group;
    }
    if (error.empty() && lastHook >= 0)
      flush(-1, -1);
  }

  /// Every pre hook leaves its unit whole; pre_backward hands out the
  /// gradient buffers. A wait the step does not have (the unit whole
  /// already, in the step's order) is the lowering's own, and so is the
  /// unpack after it of a staged unit: in the step's order both do
  /// nothing, out of it (an evaluation forward) they gather and unpack.
  void finishHooks() {
    std::vector<bool> hasParams(std::max(p.num_units, 0), false);
    for (int32_t i = 0; i < p.num_params; ++i)
      hasParams[p.params[i].unit] = true;
    for (int32_t u = 0; u < p.num_units && error.empty(); ++u) {
      if (!hasParams[u])
        continue;
      for (int32_t h : {MFSDP_HOOK_PRE_FORWARD, MFSDP_HOOK_PRE_BACKWARD}) {
        const bool own = add(h, u, MFSDP_PROGRAM_WAIT_GATHER, u, "the unit whole for its hook");
        if (own && staged(u))
          add(h, u, MFSDP_PROGRAM_UNPACK, u, "unpack of the unit whole for its hook", -1,
              /*always=*/true);
      }
      add(MFSDP_HOOK_PRE_BACKWARD, u, MFSDP_PROGRAM_PLACE_GRADS, u,
          "the unit's gradient buffers");
    }
  }

  /// A staged unit's gathers land in staging and its reduction starts
  /// from staging: in every hook, a copy of the step (an unpack) follows
  /// each wait for its gathers, and one (a pack) comes before each start of
  /// its reduction (the runtime refuses a program without, mfsdp_create).
  void copiesAroundStaging() {
    for (size_t slot = 0; slot < hooks.size() && error.empty(); ++slot) {
      const int32_t hookUnit = static_cast<int32_t>(slot / runtime::kUnitHooks);
      const int32_t hookKind = static_cast<int32_t>(slot % runtime::kUnitHooks);
      std::map<int32_t, bool> unpackDue; // unit -> a wait with no unpack yet
      for (const ProgramOp &op : hooks[slot])
        if (op.kind == MFSDP_PROGRAM_WAIT_GATHER && staged(op.unit))
          unpackDue[op.unit] = true;
        else if (op.kind == MFSDP_PROGRAM_UNPACK)
          unpackDue[op.unit] = false;
      for (const auto &[unit, due] : unpackDue)
        if (due) {
          error = "the step waits for the gathers of " + unitLabel(unit) + " in the " +
                  runtime::hookName(hookKind) + " of unit " + std::to_string(hookUnit) +
                  " but copies nothing out of them after: the library gathers the unit's "
                  "row shards into staging (row-shard buckets), which a copy of the step "
                  "unpacks (build the step with row-layout per_param)";
          return;
        }
      std::set<int32_t> packed;
      for (const ProgramOp &op : hooks[slot]) {
        if (op.kind == MFSDP_PROGRAM_PACK)
          packed.insert(op.unit);
        if (op.kind != MFSDP_PROGRAM_START_REDUCTION || !staged(op.unit) ||
            packed.count(op.unit))
          continue;
        error = "the step starts the reduction of " + unitLabel(op.unit) + " in the " +
                runtime::hookName(hookKind) + " of unit " +
                std::to_string(hookUnit) + " with no copy into it before, in that hook: the "
                "library reduces the unit's row shards from staging (row-shard buckets), "
                "which a copy of the step packs (build the step with row-layout per_param)";
        return;
      }
    }
  }

  /// A copy of the step (`compute` "copy"): out of a gathered buffer, an
  /// unpack of each staged unit of its group; else, out of the gradients,
  /// a pack. A unit the runtime does not stage copies nothing (its one
  /// row-shard parameter, or a library without buckets).
  void lowerCopy(const Op &op, int32_t hook, int32_t hookUnit) {
    if (op.reads.empty()) {
      error = "'" + op.name + "' copies and reads no buffer: the lowering tells an "
              "unpack (it reads a gathered buffer) from a pack (the gradients) by what "
              "it reads";
      return;
    }
    bool unpack = false;
    for (int64_t b : op.reads)
      unpack |= gatherWritten.count(b) > 0;
    const bool forwardHook =
        hook == MFSDP_HOOK_PRE_FORWARD || hook == MFSDP_HOOK_POST_FORWARD;
    if (!unpack && forwardHook) {
      error = "'" + op.name + "' copies gradients (it reads no gathered buffer) in a "
              "forward hook";
      return;
    }
    for (int32_t unit : unitsOf(op))
      if (staged(unit))
        add(hook, hookUnit, unpack ? MFSDP_PROGRAM_UNPACK : MFSDP_PROGRAM_PACK, unit, op.name,
            op.group);
  }

  /// Microbatch `m`'s hooks (`mine`) against the program's (the last
  /// microbatch's, in `hooks`): the same ops in the same order, without
  /// the reductions.
  void agree(int64_t m, const std::vector<std::vector<ProgramOp>> &mine) {
    auto isReductionOp = [](const ProgramOp &op) {
      return op.kind == MFSDP_PROGRAM_START_REDUCTION ||
             op.kind == MFSDP_PROGRAM_WAIT_REDUCTION || op.kind == MFSDP_PROGRAM_PACK;
    };
    auto say = [](const ProgramOp &op) {
      return std::string(runtime::programKindName(op.kind)) + " of unit " +
             std::to_string(op.unit) + " ('" + op.from.str() + "')";
    };
    for (size_t slot = 0; slot < hooks.size(); ++slot) {
      const int32_t unit = static_cast<int32_t>(slot / runtime::kUnitHooks);
      const int32_t hook = static_cast<int32_t>(slot % runtime::kUnitHooks);
      auto where = [&] { // named on error only (unitName searches the step)
        const std::string name = unitName(unit);
        return "microbatch " + std::to_string(m) + "'s " + runtime::hookName(hook) +
               " of unit " + std::to_string(unit) + (name == "?" ? "" : " ('" + name + "')");
      };
      std::vector<const ProgramOp *> want;
      for (const ProgramOp &op : hooks[slot])
        if (!isReductionOp(op))
          want.push_back(&op);
      size_t k = 0;
      for (const ProgramOp &op : mine[slot]) {
        if (isReductionOp(op)) {
          error = where() + " runs " + say(op) +
                  "; only the last microbatch reduces (the others accumulate "
                  "under no-sync)";
          return;
        }
        if (k == want.size() || want[k]->kind != op.kind || want[k]->unit != op.unit) {
          error = where() + " runs " + say(op) + " where the last microbatch's runs " +
                  (k == want.size() ? std::string("nothing more") : say(*want[k])) +
                  ": the microbatches' hooks must agree (one program runs them all)";
          return;
        }
        ++k;
      }
      if (k < want.size()) {
        error = where() + " does not run " + say(*want[k]) +
                ", which the last microbatch's runs: the microbatches' hooks must "
                "agree (one program runs them all)";
        return;
      }
    }
  }

  int32_t computeUnit(const Op &op) const {
    if (op.unit >= 0)
      return static_cast<int32_t>(op.unit);
    auto it = unitIndex.find(op.unitName);
    return it == unitIndex.end() ? -1 : it->second;
  }
  static bool isGather(const Op &op) {
    return op.kind == OpKind::Collective && !overReplicas(op) &&
           (op.coll == CollKind::AllGather || op.coll == CollKind::AllGatherV);
  }
  bool gatherWork(const Op &op) const {
    if (isGather(op))
      return true;
    return op.kind == OpKind::Wait && op.waitFor >= 0 &&
           op.waitFor < static_cast<int64_t>(s.ops.size()) && isGather(s.ops[op.waitFor]);
  }
  /// The units a collective works on: those of the parameters it names,
  /// else its unit, else its group's.
  std::vector<int32_t> unitsOf(const Op &op) const {
    std::vector<int32_t> out;
    auto note = [&](int32_t u) {
      if (u >= 0 && u < p.num_units && std::find(out.begin(), out.end(), u) == out.end())
        out.push_back(u);
    };
    for (int32_t param : refs.of(op))
      if (param >= 0)
        note(p.params[param].unit);
    if (out.empty() && op.unit >= 0)
      note(static_cast<int32_t>(op.unit));
    if (out.empty()) {
      auto it = groupUnits.find(op.group);
      if (it != groupUnits.end())
        for (int32_t u : it->second)
          note(u);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string unitName(int32_t u) const {
    for (const Op &op : s.ops)
      if (isUnitCompute(op) && computeUnit(op) == u && !op.unitName.empty())
        return op.unitName;
    return "?";
  }
  /// "unit N ('name')", or "unit N" where the step names no unit N.
  std::string unitLabel(int32_t u) const {
    const std::string name = unitName(u);
    return "unit " + std::to_string(u) + (name == "?" ? "" : " ('" + name + "')");
  }
  std::vector<ProgramOp> &at(int32_t hook, int32_t unit) {
    return hooks[runtime::hookSlot(unit, hook)];
  }
  /// Adds an op to a hook unless the hook has one of that kind and unit
  /// (false), or always.
  bool add(int32_t hook, int32_t hookUnit, int32_t kind, int32_t unit,
           const Origin &from, int64_t group = -1, bool always = false) {
    std::vector<ProgramOp> &ops = at(hook, hookUnit);
    for (const ProgramOp &op : ops)
      if (!always && op.kind == kind && op.unit == unit)
        return false;
    ProgramOp op;
    op.kind = kind;
    op.unit = unit;
    if (group < 0) // a free or an op of the lowering's own: the unit's group
      group = groupOf[unit];
    op.group = static_cast<int32_t>(group);
    if (origins)
      op.from = from.text();
    ops.push_back(std::move(op));
    return true;
  }

  void lower(const Op &op, int32_t hook, int32_t hookUnit) {
    if (hook < 0)
      return; // nothing computed yet and nothing after: no hook runs it
    const bool forwardHook =
        hook == MFSDP_HOOK_PRE_FORWARD || hook == MFSDP_HOOK_POST_FORWARD;
    const Op *target = &op;
    if (op.kind == OpKind::Wait) {
      if (op.waitFor < 0 || op.waitFor >= static_cast<int64_t>(s.ops.size())) {
        error = "'" + op.name + "' waits for op " + std::to_string(op.waitFor) +
                ", which is not in the step";
        return;
      }
      target = &s.ops[op.waitFor];
    }
    if (op.kind == OpKind::Free) {
      for (int64_t b : op.writes) {
        auto it = gatheredBy.find(b);
        if (it == gatheredBy.end())
          continue;
        auto members = groupUnits.find(it->second);
        if (members != groupUnits.end())
          for (int32_t u : members->second)
            add(hook, hookUnit, MFSDP_PROGRAM_RELEASE, u, op.name, it->second);
      }
      return;
    }
    if (isShardCopy(op)) {
      lowerCopy(op, hook, hookUnit);
      return;
    }
    if (target->kind != OpKind::Collective || overReplicas(*target))
      return; // allocs, compute, HSDP's all-reduce (part of the wait)
    const std::vector<int32_t> units = unitsOf(*target);
    if (units.empty()) {
      error = "'" + target->name + "' works on group " + std::to_string(target->group) +
              ", which computes no unit";
      return;
    }
    const bool gather = isGather(*target);
    if (!gather && !isReduction(*target)) {
      error = "'" + target->name + "' (" + std::string(enumName(target->coll)) +
              ") is a collective the runtime's hooks do not run";
      unsupported = true;
      return;
    }
    if (gather && (target->phase == Phase::Forward) != forwardHook) {
      error = "'" + target->name + "' (" + std::string(enumName(target->phase)) +
              ") falls into a hook of the other phase";
      return;
    }
    const int32_t start = gather ? MFSDP_PROGRAM_START_GATHER : MFSDP_PROGRAM_START_REDUCTION;
    const int32_t wait = gather ? MFSDP_PROGRAM_WAIT_GATHER : MFSDP_PROGRAM_WAIT_REDUCTION;
    // A unit's reductions (its row shards' reduce-scatter, its replicated
    // tensors' all-reduce, ...) start together and land together at the
    // first wait for any of them: later waits lower to nothing.
    auto firstWait = [&](int32_t unit) {
      return gather || reductionWaited.insert(unit).second;
    };
    for (int32_t unit : units) {
      if (op.kind == OpKind::Wait) {
        if (firstWait(unit))
          add(hook, hookUnit, wait, unit, Origin("wait ", target->name), target->group);
        continue;
      }
      add(hook, hookUnit, start, unit, op.name, op.group);
      if (!op.async && firstWait(unit))
        add(hook, hookUnit, wait, unit, op.name, op.group);
    }
  }

public:
  /// The units whose reduction the (last microbatch's) hooks wait for.
  std::set<int32_t> reductionWaited;

private:

  const Step &s;
  const mfsdp_plan &p;
  const ParamRefs &refs;
  const bool origins;
  std::map<int64_t, std::vector<int32_t>> groupUnits;
  std::vector<int64_t> groupOf; // per unit, its gather group (-1: none)
  std::unordered_map<int64_t, int64_t> gatheredBy; // buffer -> group
  std::unordered_set<int64_t> gatherWritten;        // buffers gathers write
  std::vector<int32_t> rowBucket; // per unit, its first row-shard bucket
  bool staged(int32_t unit) const { return rowBucket[unit] >= 0; }
  std::unordered_map<std::string, int32_t> unitIndex;
};

} // namespace

RuntimeProgram lowerStepProgram(const Step &step, const mfsdp_plan &plan,
                                const std::vector<std::string> &unitNames,
                                bool origins) {
  RuntimeProgram out;
  if (!plan.params && plan.num_params > 0) {
    out.error = "the plan has no parameter table";
    return out;
  }
  const ParamRefs refs(step, plan);
  HookLowering hooks(step, plan, refs, unitNames, origins);
  hooks.run();
  // The optimizer step waits for the reductions the hooks do not.
  out = Lowering(step, plan, refs, hooks.reductionWaited, origins).run();
  if (!out.error.empty())
    return out;
  if (!hooks.error.empty()) {
    out.error = hooks.error;
    out.unsupported = hooks.unsupported;
    return out;
  }
  // One array, sized once; each hook's own is freed as it is moved.
  size_t total = out.ops.size();
  for (const std::vector<ProgramOp> &ops : hooks.hooks)
    total += ops.size();
  out.ops.reserve(total);
  for (size_t i = 0; i < hooks.hooks.size(); ++i) {
    const int32_t first = static_cast<int32_t>(out.ops.size());
    for (ProgramOp &op : hooks.hooks[i])
      out.ops.push_back(std::move(op));
    std::vector<ProgramOp>().swap(hooks.hooks[i]);
    out.hooks.push_back({static_cast<int32_t>(i % runtime::kUnitHooks),
                         static_cast<int32_t>(i / runtime::kUnitHooks), first,
                         static_cast<int32_t>(out.ops.size()) - first});
  }
  return out;
}


RuntimeProgram lowerOptimizerProgram(const Step &step, const mfsdp_plan &plan) {
  if (!plan.params && plan.num_params > 0) {
    RuntimeProgram out;
    out.error = "the plan has no parameter table";
    return out;
  }
  const ParamRefs refs(step, plan);
  return Lowering(step, plan, refs).run();
}

} // namespace mfsdp::step

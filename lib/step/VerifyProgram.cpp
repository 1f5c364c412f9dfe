//===- VerifyProgram.cpp - The runtime's program checked against its step -===//
//
// step::verifyProgram replays a lowered program (mfsdp_program) in the
// order the runtime runs its hooks in a training step (every unit's
// pre_forward and post_forward in unit order, every unit's pre_backward and
// post_backward in reverse, then the optimizer step) and checks it against
// the plan and the scheduled step it was lowered from. Plain C++ over the C
// struct, so mfsdp-verify-schedule checks what the library will run, and a
// unit test can corrupt a program one way at a time.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/step/RuntimeProgram.h"

#include "mfsdp/runtime/ProgramHooks.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace mfsdp::step {

namespace {

bool isStepGather(const Op &op) {
  return op.kind == OpKind::Collective && op.phase != Phase::Optimizer &&
         (op.coll == CollKind::AllGather || op.coll == CollKind::AllGatherV) &&
         std::find(op.meshAxes.begin(), op.meshAxes.end(), "dp_replicate") ==
             op.meshAxes.end();
}

class Checker {
public:
  Checker(const Step &s, const mfsdp_plan &p, const mfsdp_program &g,
          const std::vector<std::string> &unitNames)
      : s(s), p(p), g(g), names(unitNames), units(std::max(p.num_units, 0)) {}

  /// The op the first violation is at (-1: none, or the program as a whole).
  int32_t failedOp() const { return errorOp; }

  std::string run() {
    if (!entries())
      return error;
    groupsOfUnits();
    unitParams.assign(static_cast<size_t>(units), {});
    for (int32_t i = 0; i < p.num_params; ++i)
      if (p.params[i].unit >= 0 && p.params[i].unit < units)
        unitParams[p.params[i].unit].push_back(i);
    whole.assign(static_cast<size_t>(units), p.zero < 3);
    gathering.assign(static_cast<size_t>(units), -1);
    reducing.assign(static_cast<size_t>(units), -1);
    landed.assign(static_cast<size_t>(units), false);
    computed.assign(static_cast<size_t>(units), false);
    stepped.assign(static_cast<size_t>(std::max(p.num_params, 0)), 0);
    broadcast.assign(static_cast<size_t>(std::max(p.num_params, 0)), 0);
    gatheredAfter.assign(static_cast<size_t>(units), 0);
    rowBucket = runtime::firstRowBuckets(p);
    unpackDue.assign(static_cast<size_t>(units), -1);
    packed.assign(static_cast<size_t>(units), false);
    // Forward, units in order; backward in reverse; then the optimizer.
    phase = Phase::Forward;
    for (int32_t u = 0; u < units && error.empty(); ++u)
      compute(MFSDP_HOOK_PRE_FORWARD, MFSDP_HOOK_POST_FORWARD, u);
    if (error.empty())
      endPhase();
    if (error.empty()) {
      phase = Phase::Backward;
      std::fill(computed.begin(), computed.end(), false);
      if (p.zero >= 3)
        std::fill(whole.begin(), whole.end(), false); // released after forward
    }
    for (int32_t u = units; u-- > 0 && error.empty();)
      compute(MFSDP_HOOK_PRE_BACKWARD, MFSDP_HOOK_POST_BACKWARD, u);
    if (error.empty())
      endPhase();
    if (error.empty()) {
      phase = Phase::Optimizer;
      if (optimizerEntry >= 0)
        runHook(optimizerEntry);
    }
    if (error.empty())
      finish();
    return error;
  }

private:
  /// Every entry names a hook that exists, once, and ops in range.
  bool entries() {
    entry.assign(runtime::hookSlot(units, 0), -1);
    for (int32_t h = 0; h < g.num_hooks; ++h) {
      const mfsdp_program_hook &k = g.hooks[h];
      const std::string which = "hook entry " + std::to_string(h) + " (" +
                                runtime::hookName(k.hook) + " of unit " +
                                std::to_string(k.unit) + ")";
      if (k.hook < 0 || k.hook > MFSDP_HOOK_OPTIMIZER_STEP)
        return fail(which + " names hook " + std::to_string(k.hook) +
                    ", which is not a hook (0 to 4)");
      if (k.first_op < 0 || k.num_ops < 0 || k.first_op > g.num_ops ||
          k.num_ops > g.num_ops - k.first_op)
        return fail(which + " runs ops [" + std::to_string(k.first_op) + ", " +
                    std::to_string(static_cast<int64_t>(k.first_op) + k.num_ops) +
                    "), outside the program's " + std::to_string(g.num_ops) + " ops");
      if (k.hook == MFSDP_HOOK_OPTIMIZER_STEP) {
        if (k.unit != -1)
          return fail(which + " names unit " + std::to_string(k.unit) +
                      "; the optimizer step's entry names unit -1");
        if (optimizerEntry >= 0)
          return fail(which + " is a second entry for the optimizer step");
        optimizerEntry = h;
        continue;
      }
      if (k.unit < 0 || k.unit >= units)
        return fail(which + " names unit " + std::to_string(k.unit) +
                    ", which is not one of the plan's " + std::to_string(units) +
                    " units");
      int32_t &slot = entry[runtime::hookSlot(k.unit, k.hook)];
      if (slot >= 0)
        return fail(which + " is a second entry for that hook");
      slot = h;
    }
    for (int32_t i = 0; i < g.num_ops; ++i) {
      const mfsdp_program_op &op = g.ops[i];
      if (op.kind < MFSDP_PROGRAM_WAIT_REDUCTION || op.kind > MFSDP_PROGRAM_PACK)
        return fail("op " + std::to_string(i) + " has kind " + std::to_string(op.kind) +
                    ", which is not a program op kind");
      if (op.unit < 0 || op.unit >= units)
        return fail("op " + std::to_string(i) + " (" + runtime::programKindName(op.kind) +
                    ") works on unit " + std::to_string(op.unit) +
                    ", which is not one of the plan's " + std::to_string(units) + " units");
      for (int32_t k = 0; k < op.num_params; ++k)
        if (!op.params || op.params[k] < 0 || op.params[k] >= p.num_params)
          return fail("op " + std::to_string(i) + " (" +
                      runtime::programKindName(op.kind) + ") names parameter " +
                      (op.params ? std::to_string(op.params[k]) : "?") +
                      ", which is not one of the plan's " +
                      std::to_string(p.num_params) + " parameters");
    }
    for (int32_t u = 0; u < units; ++u)
      for (int32_t h = 0; h < runtime::kUnitHooks; ++h)
        if (entry[runtime::hookSlot(u, h)] < 0)
          return fail(std::string(runtime::hookName(h)) + " of unit " + std::to_string(u) +
                      unitLabel(u) + " has no entry: every unit has its four hooks");
    if (optimizerEntry < 0)
      return fail("the program has no entry for the optimizer step");
    return true;
  }

  /// Each unit's gather group, from the step's compute ops; the step's
  /// gathered copies in the order it allocates and frees them.
  void groupsOfUnits() {
    std::unordered_map<std::string, int32_t> byName;
    for (size_t u = 0; u < names.size(); ++u)
      byName.emplace(names[u], static_cast<int32_t>(u));
    groupOf.assign(static_cast<size_t>(units), -1);
    for (const Op &op : s.ops) {
      if (!isUnitCompute(op))
        continue;
      int32_t u = static_cast<int32_t>(op.unit);
      if (u < 0) {
        auto it = byName.find(op.unitName);
        u = it == byName.end() ? -1 : it->second;
      }
      if (u >= 0 && u < units && groupOf[u] < 0)
        groupOf[u] = op.group;
    }
    // The step's gathered copies: buffers a gather over dp_shard fills,
    // by phase, in the order of their allocs (first microbatch) and, for
    // the forward copies, of their frees.
    std::unordered_map<int64_t, std::pair<Phase, int64_t>> copyOf; // buffer
    for (const auto &[b, gather] : gatheredCopies(s, isStepGather))
      copyOf.emplace(b, std::make_pair(s.ops[gather].phase, s.ops[gather].group));
    const std::vector<int64_t> microbatch = microbatchOf(s);
    for (size_t i = 0; i < s.ops.size(); ++i) {
      const Op &op = s.ops[i];
      if (op.phase == Phase::Optimizer || microbatch[i] > 0 ||
          (op.kind != OpKind::Alloc && op.kind != OpKind::Free))
        continue;
      for (int64_t b : op.writes) {
        auto it = copyOf.find(b);
        if (it == copyOf.end())
          continue;
        const auto &[ph, group] = it->second;
        stepGathers[ph == Phase::Backward].insert(group);
        if (op.kind == OpKind::Alloc)
          stepAllocs[ph == Phase::Backward].push_back({group, i});
        else if (ph == Phase::Forward)
          stepFrees.push_back({group, i});
      }
    }
  }

  bool fail(const std::string &message) {
    if (error.empty()) {
      error = message;
      errorOp = curOp;
    }
    return false;
  }

  std::string unitLabel(int32_t u) const {
    return u >= 0 && static_cast<size_t>(u) < names.size() && !names[u].empty()
               ? " ('" + names[u] + "')"
               : "";
  }

  std::string hookLabel(int32_t hook, int32_t unit) const {
    if (hook == MFSDP_HOOK_OPTIMIZER_STEP)
      return "optimizer_step";
    return std::string(runtime::hookName(hook)) + " of unit " + std::to_string(unit) +
           unitLabel(unit);
  }

  /// "<hook>'s <kind> of unit u (op i)": where a violation is.
  std::string at(int32_t i) const {
    const mfsdp_program_op &op = g.ops[i];
    return hookLabel(curHook, curUnit) + ": op " + std::to_string(i) + " (" +
           runtime::programKindName(op.kind) + " of unit " + std::to_string(op.unit) +
           unitLabel(op.unit) + ")";
  }

  void compute(int32_t pre, int32_t post, int32_t u) {
    runHook(entry[runtime::hookSlot(u, pre)]);
    if (!error.empty())
      return;
    if (!unitParams[u].empty() && !whole[u]) {
      fail(hookLabel(pre, u) + " leaves the unit not whole for its " +
           (phase == Phase::Forward ? "forward" : "backward") +
           " compute: no wait_gather of it has run since its copy was " +
           (p.zero >= 3 && phase == Phase::Backward ? "released after forward"
                                                    : "released or never gathered"));
      return;
    }
    if (phase == Phase::Backward && !unitParams[u].empty() && !gradsPlaced[u]) {
      fail(hookLabel(pre, u) + " hands out no gradient buffers (place_grads) before "
                               "the unit's backward compute");
      return;
    }
    computed[u] = true;
    runHook(entry[runtime::hookSlot(u, post)]);
  }

  void runHook(int32_t h) {
    const mfsdp_program_hook &k = g.hooks[h];
    curHook = k.hook;
    curUnit = k.unit;
    const bool unitHook = k.hook != MFSDP_HOOK_OPTIMIZER_STEP;
    const bool backward =
        k.hook == MFSDP_HOOK_PRE_BACKWARD || k.hook == MFSDP_HOOK_POST_BACKWARD;
    for (int32_t i = k.first_op; i < k.first_op + k.num_ops && error.empty(); ++i) {
      const mfsdp_program_op &op = g.ops[i];
      const int32_t u = op.unit;
      curOp = i;
      switch (op.kind) {
      case MFSDP_PROGRAM_START_GATHER:
      case MFSDP_PROGRAM_WAIT_GATHER: {
        if (!unitHook) {
          fail(at(i) + " gathers for a compute hook in the optimizer step");
          break;
        }
        const bool start = op.kind == MFSDP_PROGRAM_START_GATHER;
        if (start && gathering[u] >= 0) {
          fail(at(i) + " starts the unit's gather again; op " +
               std::to_string(gathering[u]) + " started it and nothing has waited for it");
          break;
        }
        if (start && whole[u]) {
          fail(at(i) + " starts a gather of a unit that is whole (gathered and not "
                       "released)");
          break;
        }
        if (!whole[u] && p.zero >= 3)
          allocCopy(i, u);
        if (start) {
          gathering[u] = i;
        } else {
          gathering[u] = -1;
          whole[u] = true;
          if (rowBucket[u] >= 0) {
            unpackDue[u] = i;
            dueUnits.push_back(u);
          }
        }
        break;
      }
      case MFSDP_PROGRAM_UNPACK:
        if (!unitHook) {
          fail(at(i) + " unpacks gathered buckets in the optimizer step");
          break;
        }
        unpackDue[u] = -1;
        break;
      case MFSDP_PROGRAM_PACK:
        if (!backward) {
          fail(at(i) + " packs gradients outside the backward hooks");
          break;
        }
        if (!computed[u]) {
          fail(at(i) + " packs the unit's gradients before its backward compute");
          break;
        }
        packed[u] = true;
        packedUnits.push_back(u);
        break;
      case MFSDP_PROGRAM_RELEASE:
        if (!unitHook || backward) {
          fail(at(i) + " releases a forward copy outside the forward hooks");
          break;
        }
        if (gathering[u] >= 0) {
          fail(at(i) + " releases the unit while its gather (op " +
               std::to_string(gathering[u]) + ") is in flight");
          break;
        }
        if (!computed[u]) {
          fail(at(i) + " releases the unit's copy before its forward compute");
          break;
        }
        if (p.zero >= 3) {
          freeCopy(i, u);
          whole[u] = false;
        }
        break;
      case MFSDP_PROGRAM_PLACE_GRADS:
        if (!backward) {
          fail(at(i) + " hands out gradient buffers outside the backward hooks");
          break;
        }
        gradsPlaced[u] = true;
        break;
      case MFSDP_PROGRAM_START_REDUCTION:
        if (!backward) {
          fail(at(i) + " starts a reduction outside the backward hooks");
          break;
        }
        if (!computed[u]) {
          fail(at(i) + " starts the unit's reduction before its backward compute");
          break;
        }
        if (reducing[u] >= 0 || landed[u]) {
          fail(at(i) + " starts the unit's reduction a second time (op " +
               std::to_string(reducing[u] >= 0 ? reducing[u] : reducedBy[u]) +
               " started it)");
          break;
        }
        if (rowBucket[u] >= 0 && !packed[u]) {
          fail(at(i) + " starts the reduction of row-shard buckets (bucket " +
               std::to_string(rowBucket[u]) +
               ", ...) that no pack of the unit has packed in this hook");
          break;
        }
        packed[u] = false;
        reducing[u] = i;
        break;
      case MFSDP_PROGRAM_WAIT_REDUCTION:
        if (!backward && unitHook) {
          fail(at(i) + " waits for a reduction in a forward hook");
          break;
        }
        if (reducing[u] < 0) {
          fail(at(i) + (landed[u] ? " waits for the unit's reduction a second time"
                                  : " waits for a reduction that no op started"));
          break;
        }
        reducedBy[u] = reducing[u];
        reducing[u] = -1;
        landed[u] = true;
        if (p.zero >= 3)
          whole[u] = false; // the backward copy goes when its reduction lands
        break;
      case MFSDP_PROGRAM_OPTIMIZER:
        optimizer(i);
        break;
      case MFSDP_PROGRAM_BROADCAST_UPDATES:
        if (unitHook) {
          fail(at(i) + " broadcasts updates in a forward or backward hook");
          break;
        }
        // ns_split: each owned matrix goes to the other replicas once it
        // is stepped, once.
        for (int32_t k = 0; k < op.num_params && error.empty(); ++k) {
          const int32_t param = op.params[k];
          const std::string name =
              p.params[param].name ? p.params[param].name : std::to_string(param);
          if (p.params[param].placement != MFSDP_OWNER)
            fail(at(i) + " broadcasts '" + name + "', which is not an owned matrix");
          else if (stepped[param] == 0)
            fail(at(i) + " broadcasts '" + name + "' before any op steps it");
          else if (broadcast[param]++ > 0)
            fail(at(i) + " broadcasts '" + name + "' a second time");
        }
        break;
      case MFSDP_PROGRAM_GATHER:
        if (unitHook) {
          fail(at(i) + " gathers updated parameters in a forward or backward hook");
          break;
        }
        if (p.zero >= 3) {
          fail(at(i) + " gathers updated parameters under ZeRO-3, which gathers at "
                       "the next use");
          break;
        }
        if (gatheredAfter[u]++ > 0) {
          fail(at(i) + " gathers the unit's updated parameters a second time");
          break;
        }
        for (int32_t param : unitParams[u])
          if (p.params[param].optimizer != MFSDP_OPT_NONE && stepped[param] == 0) {
            fail(at(i) + " gathers the unit before its parameter '" +
                 p.params[param].name + "' is stepped");
            break;
          }
        break;
      default:
        break;
      }
    }
    // A gather waited for in this hook is unpacked in it: the compute
    // reads the copies, not the staging.
    for (int32_t u : dueUnits)
      if (error.empty() && unpackDue[u] >= 0) {
        curOp = unpackDue[u];
        fail(at(unpackDue[u]) + " waits for the unit's gather, whose row-shard buckets "
             "(bucket " + std::to_string(rowBucket[u]) +
             ", ...) land in staging, but no unpack of the unit follows in the hook");
      }
    dueUnits.clear();
    for (int32_t u : packedUnits)
      packed[u] = false; // a pack serves the start in its own hook
    packedUnits.clear();
    curOp = -1;
  }

  void optimizer(int32_t i) {
    const mfsdp_program_op &op = g.ops[i];
    if (curHook != MFSDP_HOOK_OPTIMIZER_STEP) {
      fail(at(i) + " runs an optimizer kernel in a forward or backward hook");
      return;
    }
    for (int32_t k = 0; k < op.num_params; ++k) {
      const int32_t param = op.params[k];
      const mfsdp_param_desc &d = p.params[param];
      const std::string name = d.name ? d.name : std::to_string(param);
      if (d.unit != op.unit) {
        fail(at(i) + " steps '" + name + "', a parameter of unit " +
             std::to_string(d.unit));
        return;
      }
      if (d.optimizer != op.optimizer) {
        fail(at(i) + " steps '" + name + "' with optimizer " +
             std::to_string(op.optimizer) + "; the plan steps it with " +
             std::to_string(d.optimizer));
        return;
      }
      if (op.only_rank >= 0 && (d.placement != MFSDP_OWNER || d.owner != op.only_rank)) {
        fail(at(i) + " steps '" + name + "' on dp_shard rank " +
             std::to_string(op.only_rank) + " alone, which does not own it" +
             (d.placement == MFSDP_OWNER ? " (rank " + std::to_string(d.owner) + " does)"
                                         : " (every rank keeps a part)"));
        return;
      }
      if (!landed[d.unit]) {
        fail(at(i) + " steps '" + name + "' before the reduction of its unit lands" +
             (reducing[d.unit] >= 0 ? " (op " + std::to_string(reducing[d.unit]) +
                                          " started it; no op waited for it yet)"
                                    : " (no op reduced it)"));
        return;
      }
      // ns_split and owners: a parameter is stepped on one rank, by one op.
      if (stepped[param]++ > 0) {
        fail(at(i) + " steps '" + name + "' a second time in the step");
        return;
      }
    }
  }

  void allocCopy(int32_t i, int32_t u) {
    const int64_t group = groupOf[u];
    // A group the step gathers nowhere (replicated tensors only: the
    // runtime copies them whole at the wait) has no gathered copy.
    if (!stepGathers[phase == Phase::Backward].count(group))
      return;
    auto &done = allocated[phase == Phase::Backward];
    if (!allocatedSet[phase == Phase::Backward].insert(group).second)
      return; // another unit of the group: one copy
    done.push_back(group);
    const auto &want = stepAllocs[phase == Phase::Backward];
    const size_t k = done.size() - 1;
    if (k >= want.size() || want[k].first != group)
      fail(at(i) + " allocates group " + std::to_string(group) + "'s " +
           (phase == Phase::Backward ? "backward" : "forward") +
           " gathered copy where the step allocates " +
           (k >= want.size() ? std::string("no more")
                             : "group " + std::to_string(want[k].first) + "'s ('" +
                                   s.ops[want[k].second].name + "')"));
  }

  void freeCopy(int32_t i, int32_t u) {
    const int64_t group = groupOf[u];
    if (!stepGathers[0].count(group) || !freedSet.insert(group).second)
      return;
    freed.push_back(group);
    const size_t k = freed.size() - 1;
    if (k >= stepFrees.size() || stepFrees[k].first != group)
      fail(at(i) + " frees group " + std::to_string(group) +
           "'s forward gathered copy where the step frees " +
           (k >= stepFrees.size() ? std::string("no more")
                                  : "group " + std::to_string(stepFrees[k].first) +
                                        "'s ('" + s.ops[stepFrees[k].second].name + "')"));
  }

  /// The end of forward or backward: nothing gathered is left in flight.
  void endPhase() {
    for (int32_t u = 0; u < units; ++u)
      if (gathering[u] >= 0) {
        curOp = gathering[u];
        fail("op " + std::to_string(gathering[u]) + " (start_gather of unit " +
             std::to_string(u) + unitLabel(u) + ") starts a gather that no op of the " +
             (phase == Phase::Forward ? "forward" : "backward") + " hooks waits for");
        return;
      }
    if (phase == Phase::Forward && p.zero >= 3 && freed.size() < stepFrees.size())
      fail("the forward hooks free " + std::to_string(freed.size()) +
           " gathered copies; the step frees " + std::to_string(stepFrees.size()) +
           " (next: '" + s.ops[stepFrees[freed.size()].second].name + "')");
  }

  /// After the optimizer step: every reduction landed, every parameter
  /// stepped once, ZeRO-1/2 units gathered again.
  void finish() {
    for (int32_t u = 0; u < units; ++u) {
      if (reducing[u] >= 0) {
        curOp = reducing[u];
        fail("op " + std::to_string(reducing[u]) + " (start_reduction of unit " +
             std::to_string(u) + unitLabel(u) + ") starts a reduction that no op waits for");
        return;
      }
      if (!unitParams[u].empty() && !landed[u]) {
        fail("no op reduces the gradients of unit " + std::to_string(u) + unitLabel(u));
        return;
      }
      if (p.zero < 3 && !unitParams[u].empty() && gatheredAfter[u] == 0) {
        fail("the optimizer step does not gather unit " + std::to_string(u) +
             unitLabel(u) + "'s updated parameters (ZeRO-" + std::to_string(p.zero) + ")");
        return;
      }
    }
    for (int32_t i = 0; i < p.num_params; ++i)
      if (p.params[i].optimizer != MFSDP_OPT_NONE && stepped[i] == 0) {
        fail("no optimizer op steps parameter '" +
             std::string(p.params[i].name ? p.params[i].name : "?") + "'");
        return;
      }
    // ns_split: a replica steps each owned matrix; the others receive it.
    if (p.ns_split && p.dp_replicate > 1)
      for (int32_t i = 0; i < p.num_params; ++i)
        if (p.params[i].placement == MFSDP_OWNER &&
            p.params[i].optimizer == MFSDP_OPT_MUON && broadcast[i] == 0) {
          fail("under ns_split no op broadcasts the updated '" +
               std::string(p.params[i].name ? p.params[i].name : "?") +
               "' to the other replicas");
          return;
        }
    const size_t bwd = stepAllocs[1].size();
    if (p.zero >= 3 && allocated[1].size() < bwd)
      fail("the backward hooks allocate " + std::to_string(allocated[1].size()) +
           " gathered copies; the step allocates " + std::to_string(bwd) + " (next: '" +
           s.ops[stepAllocs[1][allocated[1].size()].second].name + "')");
  }

  const Step &s;
  const mfsdp_plan &p;
  const mfsdp_program &g;
  const std::vector<std::string> &names;
  const int32_t units;
  std::string error;
  int32_t errorOp = -1;
  std::vector<int32_t> entry; // per hookSlot, its entry (-1: none)
  int32_t optimizerEntry = -1;
  std::vector<int64_t> groupOf;
  std::vector<std::vector<int32_t>> unitParams;
  // The replay's state per unit.
  Phase phase = Phase::Forward;
  int32_t curHook = -1, curUnit = -1, curOp = -1;
  std::vector<bool> whole, landed, computed;
  std::unordered_map<int32_t, bool> gradsPlaced;
  std::unordered_map<int32_t, int32_t> reducedBy;
  std::vector<int32_t> gathering, reducing; // the op in flight, -1: none
  std::vector<int32_t> stepped, broadcast, gatheredAfter;
  // Per unit: a row-shard bucket of it (-1: none); the wait_gather whose
  // unpack is due in the current hook (-1: none); packed in it for the
  // start of its reduction. The units either is set for in this hook.
  std::vector<int32_t> rowBucket, unpackDue, dueUnits, packedUnits;
  std::vector<bool> packed;
  // Gathered copies: the step's (group, op index) and the program's groups.
  std::vector<std::pair<int64_t, size_t>> stepAllocs[2], stepFrees;
  std::vector<int64_t> allocated[2], freed;
  std::unordered_set<int64_t> allocatedSet[2], freedSet, stepGathers[2];
};

} // namespace

ProgramIssue verifyProgram(const Step &step, const mfsdp_plan &plan,
                           const mfsdp_program &program,
                           const std::vector<std::string> &unitNames) {
  if (plan.num_params > 0 && !plan.params)
    return {"the plan has no parameter table", -1};
  if ((program.num_ops > 0 && !program.ops) || (program.num_hooks > 0 && !program.hooks))
    return {"the program has no op or hook table", -1};
  Checker checker(step, plan, program, unitNames);
  ProgramIssue issue;
  issue.message = checker.run();
  issue.op = issue.message.empty() ? -1 : checker.failedOp();
  return issue;
}

} // namespace mfsdp::step

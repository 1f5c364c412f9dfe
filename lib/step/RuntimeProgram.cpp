//===- RuntimeProgram.cpp - The scheduled step as the runtime's program ---===//
#include "mfsdp/step/RuntimeProgram.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>

namespace mfsdp::step {

void RuntimeProgram::view(View &out) const {
  out.ops.clear();
  for (const ProgramOp &op : ops)
    out.ops.push_back({op.kind, op.unit, op.group, op.optimizer, op.onlyRank,
                       static_cast<int32_t>(op.params.size()),
                       op.params.empty() ? nullptr : op.params.data()});
  out.program.num_ops = static_cast<int32_t>(out.ops.size());
  out.program.ops = out.ops.empty() ? nullptr : out.ops.data();
  out.program.num_hooks = static_cast<int32_t>(hooks.size());
  out.program.hooks = hooks.empty() ? nullptr : hooks.data();
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

class Lowering {
public:
  Lowering(const Step &s, const mfsdp_plan &p) : s(s), p(p) {}

  RuntimeProgram run() {
    for (int32_t i = 0; i < p.num_params; ++i)
      if (p.params[i].name)
        index[p.params[i].name] = i;
    // Each unit's group, from the ops that name both (or a parameter).
    unitGroup.assign(static_cast<size_t>(std::max(p.num_units, 0)), -1);
    for (const Op &op : s.ops) {
      if (op.group < 0)
        continue;
      if (op.unit >= 0 && op.unit < p.num_units && unitGroup[op.unit] < 0)
        unitGroup[op.unit] = static_cast<int32_t>(op.group);
      for (const std::string &n : op.params) {
        auto it = index.find(n);
        if (it != index.end() && unitGroup[p.params[it->second].unit] < 0)
          unitGroup[p.params[it->second].unit] = static_cast<int32_t>(op.group);
      }
    }
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
                 std::vector<int32_t> params, const std::string &from) {
    ProgramOp op;
    op.kind = kind;
    op.unit = unit;
    op.group = group;
    op.params = std::move(params);
    op.from = from;
    out.ops.push_back(std::move(op));
    return out.ops.back();
  }

  std::vector<int32_t> unitsOf(int64_t group) const {
    std::vector<int32_t> units;
    for (size_t u = 0; u < unitGroup.size(); ++u)
      if (unitGroup[u] == group)
        units.push_back(static_cast<int32_t>(u));
    return units;
  }

  bool find(const std::string &name, const Op &op, int32_t &param) {
    auto it = index.find(name);
    if (it == index.end()) {
      out.error = "'" + op.name + "' names parameter '" + name +
                  "', which is not in the plan";
      return false;
    }
    param = it->second;
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
    // gathers of the earlier phases are waited by their hooks.
    if (target.phase == Phase::Optimizer || !isReduction(target))
      return;
    std::set<int32_t> units;
    for (const std::string &n : target.params) {
      int32_t param = -1;
      if (!find(n, target, param))
        return;
      units.insert(p.params[param].unit);
    }
    if (units.empty() && target.unit >= 0 && target.unit < p.num_units)
      units.insert(static_cast<int32_t>(target.unit));
    if (units.empty())
      for (int32_t u : unitsOf(target.group))
        units.insert(u);
    for (int32_t u : units)
      if (waited.insert(u).second)
        add(MFSDP_PROGRAM_WAIT_REDUCTION, u, unitGroup[u], {}, "wait " + target.name);
  }

  void lowerOptimizer(const Op &op) {
    if (op.optimizer != "adamw" && op.optimizer != "sgd" && op.optimizer != "muon") {
      out.error = "'" + op.name + "' runs optimizer kernel '" + op.optimizer +
                  "'; the runtime runs adamw, sgd and muon";
      return;
    }
    std::vector<int32_t> params;
    for (const std::string &n : op.params) {
      int32_t param = -1;
      if (!find(n, op, param))
        return;
      params.push_back(param);
    }
    // A group's replicated tensors are stepped by an op that names none.
    if (op.params.empty())
      for (int32_t i = 0; i < p.num_params; ++i)
        if (p.params[i].placement == MFSDP_REPLICATE &&
            unitGroup[p.params[i].unit] == op.group)
          params.push_back(i);
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
        for (int32_t i = 0; i < p.num_params; ++i)
          if (p.params[i].unit == u && p.params[i].placement == MFSDP_OWNER &&
              p.params[i].optimizer == MFSDP_OPT_MUON)
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
      break;
    }
    out.error = "'" + op.name + "' (" + std::string(opKindName(op.kind)) +
                ") in the optimizer phase is an op the runtime does not run";
  }

  const Step &s;
  const mfsdp_plan &p;
  RuntimeProgram out;
  std::unordered_map<std::string, int32_t> index;
  std::vector<int32_t> unitGroup;
  std::vector<bool> stepped, gathered;
  std::set<int32_t> waited;
};

} // namespace

RuntimeProgram lowerOptimizerProgram(const Step &step, const mfsdp_plan &plan) {
  if (!plan.params && plan.num_params > 0) {
    RuntimeProgram out;
    out.error = "the plan has no parameter table";
    return out;
  }
  return Lowering(step, plan).run();
}

} // namespace mfsdp::step

//===- Program.cpp - The compiled step's program, checked against the plan ===//
//
// mfsdp_plan.program is the scheduled sched.step lowered by the compiler:
// per hook its ops in the schedule's order (runtime.h). mfsdp_create checks
// it against the plan before anything runs, so the executor (Optimizer.cpp)
// and the hooks' executor (Execute.cpp) can trust every index they read.
//
//===----------------------------------------------------------------------===//
#include "Step.h"

#include "mfsdp/runtime/ProgramHooks.h"

#include <algorithm>
#include <string>
#include <vector>

using mfsdp::runtime::hookName;
using mfsdp::runtime::programKindName;

const mfsdp_program_hook *mfsdp::rt::optimizerHook(const mfsdp_plan &plan) {
  return mfsdp::runtime::optimizerStepEntry(plan.program);
}

namespace {

/// What is wrong with the ops of a forward or backward hook entry ("" when
/// nothing); `reduced` counts each unit's MFSDP_PROGRAM_START_REDUCTION.
/// `rowBucket` has per unit a row-shard bucket of it (-1: none): such a
/// unit's gathers are unpacked and its gradients packed by ops of their
/// own, in the hook that waits for the gather or starts the reduction.
std::string hookOpsProblem(const mfsdp_plan &plan, const mfsdp_program_hook &k,
                           std::vector<int32_t> &reduced,
                           const std::vector<int32_t> &rowBucket) {
  const mfsdp_program &g = *plan.program;
  const bool backward =
      k.hook == MFSDP_HOOK_PRE_BACKWARD || k.hook == MFSDP_HOOK_POST_BACKWARD;
  const std::string hook =
      std::string(hookName(k.hook)) + "(" + std::to_string(k.unit) + ")";
  std::vector<int32_t> unpackDue, packed; // units
  auto has = [](const std::vector<int32_t> &v, int32_t u) {
    return std::find(v.begin(), v.end(), u) != v.end();
  };
  auto drop = [](std::vector<int32_t> &v, int32_t u) {
    v.erase(std::remove(v.begin(), v.end(), u), v.end());
  };
  for (int32_t i = k.first_op; i < k.first_op + k.num_ops; ++i) {
    const mfsdp_program_op &op = g.ops[i];
    const std::string where = "op " + std::to_string(i) + " (" + programKindName(op.kind) +
                              ", unit " + std::to_string(op.unit) + ") of " +
                              hookName(k.hook) + "(" + std::to_string(k.unit) + "): ";
    switch (op.kind) {
    case MFSDP_PROGRAM_START_GATHER:
    case MFSDP_PROGRAM_WAIT_GATHER:
    case MFSDP_PROGRAM_RELEASE:
      break;
    case MFSDP_PROGRAM_UNPACK:
      break;
    case MFSDP_PROGRAM_PLACE_GRADS:
    case MFSDP_PROGRAM_START_REDUCTION:
    case MFSDP_PROGRAM_WAIT_REDUCTION:
    case MFSDP_PROGRAM_PACK:
      if (!backward)
        return where + "a forward hook runs no gradient work";
      break;
    default:
      return where + "kind " + std::to_string(op.kind) +
             " is not one a forward or backward hook runs; expected start_gather "
             "(4), wait_gather (5), release (6), place_grads (7), start_reduction "
             "(8), wait_reduction (0), unpack (9) or pack (10)";
    }
    if (op.unit < 0 || op.unit >= plan.num_units)
      return where + "unit out of range; the plan has " + std::to_string(plan.num_units) +
             " units";
    if (op.num_params != 0 || op.only_rank != -1)
      return where + "names parameters or a rank; it works on the unit on every rank";
    const int32_t bucket = rowBucket[op.unit];
    switch (op.kind) {
    case MFSDP_PROGRAM_WAIT_GATHER:
      if (bucket >= 0 && !has(unpackDue, op.unit))
        unpackDue.push_back(op.unit);
      break;
    case MFSDP_PROGRAM_UNPACK:
      drop(unpackDue, op.unit);
      break;
    case MFSDP_PROGRAM_PACK:
      if (!has(packed, op.unit))
        packed.push_back(op.unit);
      break;
    case MFSDP_PROGRAM_START_REDUCTION:
      ++reduced[op.unit];
      if (bucket >= 0 && !has(packed, op.unit))
        return where + "unit " + std::to_string(op.unit) + "'s row-shard buckets (bucket " +
               std::to_string(bucket) + ", ...) are reduced from packed staging, but no "
               "pack of the unit comes before this start in " + hook +
               " (a library built before MFSDP_PROGRAM_PACK: rebuild it)";
      drop(packed, op.unit);
      break;
    default:
      break;
    }
  }
  if (!unpackDue.empty())
    return "op " + std::to_string(k.first_op + k.num_ops - 1) + " of " + hook +
           ": the hook waits for the gathers of unit " + std::to_string(unpackDue.front()) +
           ", whose row-shard buckets (bucket " +
           std::to_string(rowBucket[unpackDue.front()]) +
           ", ...) land in staging, but no unpack of the unit follows in the hook (a "
           "library built before MFSDP_PROGRAM_UNPACK: rebuild it)";
  return "";
}

} // namespace

std::string mfsdp::rt::programProblem(const mfsdp_plan &plan) {
  const mfsdp_program &g = *plan.program;
  const std::string prefix = "invalid program: ";
  if (g.num_ops < 0 || (g.num_ops > 0 && !g.ops))
    return prefix + std::to_string(g.num_ops) + " ops" +
           (g.ops ? "" : " and no ops table") + "; expected 0 or more in ops";
  if (g.num_hooks < 0 || (g.num_hooks > 0 && !g.hooks))
    return prefix + std::to_string(g.num_hooks) + " hooks" +
           (g.hooks ? "" : " and no hooks table") + "; expected 0 or more in hooks";
  for (int32_t i = 0; i < plan.num_params; ++i)
    if (plan.params[i].unit < 0 || plan.params[i].unit >= plan.num_units)
      return ""; // the parameter table's own check names it
  const mfsdp_program_hook *opt = nullptr;
  std::vector<int32_t> seen(mfsdp::runtime::hookSlot(plan.num_units, 0), 0);
  std::vector<int32_t> reduced(plan.num_units, 0);
  const std::vector<int32_t> rowBucket = mfsdp::runtime::firstRowBuckets(plan);
  bool hooks = false;
  for (int32_t h = 0; h < g.num_hooks; ++h) {
    const mfsdp_program_hook &k = g.hooks[h];
    const std::string where = "hook entry " + std::to_string(h) + " (" +
                              hookName(k.hook) + "): ";
    if (k.hook < MFSDP_HOOK_PRE_FORWARD || k.hook > MFSDP_HOOK_OPTIMIZER_STEP)
      return prefix + where + "unknown hook " + std::to_string(k.hook) +
             "; expected an mfsdp_hook (0 to 4)";
    if (k.first_op < 0 || k.num_ops < 0 || k.first_op > g.num_ops - k.num_ops)
      return prefix + where + "ops [" + std::to_string(k.first_op) + ", +" +
             std::to_string(k.num_ops) + ") out of the " + std::to_string(g.num_ops) +
             " ops";
    if (k.hook != MFSDP_HOOK_OPTIMIZER_STEP) {
      if (k.unit < 0 || k.unit >= plan.num_units)
        return prefix + where + "unit " + std::to_string(k.unit) +
               " out of range; the plan has " + std::to_string(plan.num_units) + " units";
      if (seen[mfsdp::runtime::hookSlot(k.unit, k.hook)]++)
        return prefix + where + "a second entry for unit " + std::to_string(k.unit);
      const std::string problem = hookOpsProblem(plan, k, reduced, rowBucket);
      if (!problem.empty())
        return prefix + problem;
      hooks = true;
      continue;
    }
    if (k.unit != -1)
      return prefix + where + "unit " + std::to_string(k.unit) +
             "; the optimizer step has unit -1";
    if (opt)
      return prefix + where + "a second entry for the optimizer step";
    opt = &k;
  }
  if (hooks) {
    // A program that runs the backward hooks reduces every unit's
    // gradients there (else an optimizer step would wait for ever).
    std::vector<bool> hasParams(plan.num_units, false);
    for (int32_t p = 0; p < plan.num_params; ++p)
      hasParams[plan.params[p].unit] = true;
    for (int32_t u = 0; u < plan.num_units; ++u)
      if (hasParams[u] && !reduced[u])
        return prefix + "no backward hook reduces the gradients of unit " +
               std::to_string(u);
  }
  if (!opt)
    return "";
  std::vector<int32_t> stepped(plan.num_params, 0), gathered(plan.num_units, 0);
  for (int32_t i = opt->first_op; i < opt->first_op + opt->num_ops; ++i) {
    const mfsdp_program_op &op = g.ops[i];
    const std::string where = "op " + std::to_string(i) + " (" + programKindName(op.kind) +
                              ", unit " + std::to_string(op.unit) + ", group " +
                              std::to_string(op.group) + "): ";
    if (op.kind < MFSDP_PROGRAM_WAIT_REDUCTION || op.kind > MFSDP_PROGRAM_GATHER)
      return prefix + where + "kind " + std::to_string(op.kind) +
             " is not one the optimizer step runs; expected wait_reduction (0), "
             "optimizer (1), broadcast_updates (2) or gather (3)";
    if (op.unit < 0 || op.unit >= plan.num_units)
      return prefix + where + "unit out of range; the plan has " +
             std::to_string(plan.num_units) + " units";
    if (op.num_params < 0 || (op.num_params > 0 && !op.params))
      return prefix + where + std::to_string(op.num_params) + " params" +
             (op.params ? "" : " and no params table");
    if (op.only_rank < -1 || op.only_rank >= plan.dp_shard)
      return prefix + where + "only_rank " + std::to_string(op.only_rank) +
             "; expected -1 or a dp_shard rank below " + std::to_string(plan.dp_shard);
    const bool withParams =
        op.kind == MFSDP_PROGRAM_OPTIMIZER || op.kind == MFSDP_PROGRAM_BROADCAST_UPDATES;
    if (!withParams && op.num_params != 0)
      return prefix + where + "names " + std::to_string(op.num_params) +
             " params; a " + programKindName(op.kind) + " names none (it works on the unit)";
    if (op.kind == MFSDP_PROGRAM_OPTIMIZER && op.optimizer != MFSDP_OPT_ADAMW &&
        op.optimizer != MFSDP_OPT_SGD && op.optimizer != MFSDP_OPT_MUON)
      return prefix + where + "optimizer " + std::to_string(op.optimizer) +
             "; expected MFSDP_OPT_ADAMW (1), MFSDP_OPT_SGD (2) or MFSDP_OPT_MUON (3)";
    for (int32_t k = 0; k < op.num_params; ++k) {
      const int32_t p = op.params[k];
      if (p < 0 || p >= plan.num_params)
        return prefix + where + "parameter index " + std::to_string(p) +
               " out of range; the plan has " + std::to_string(plan.num_params);
      const mfsdp_param_desc &d = plan.params[p];
      const std::string name = "parameter '" + std::string(d.name ? d.name : "?") + "'";
      if (d.unit != op.unit)
        return prefix + where + name + " is of unit " + std::to_string(d.unit);
      if (op.kind == MFSDP_PROGRAM_BROADCAST_UPDATES) {
        if (d.placement != MFSDP_OWNER || d.optimizer != MFSDP_OPT_MUON)
          return prefix + where + name + " is no owned Muon matrix";
        continue;
      }
      if (d.optimizer != op.optimizer)
        return prefix + where + name + " is stepped by optimizer " +
               std::to_string(d.optimizer) + ", not " + std::to_string(op.optimizer);
      if (op.only_rank >= 0 && (d.placement != MFSDP_OWNER || d.owner != op.only_rank))
        return prefix + where + name + " is not owned by dp_shard rank " +
               std::to_string(op.only_rank);
      if (stepped[p]++)
        return prefix + where + name + " is stepped twice";
    }
    if (op.kind == MFSDP_PROGRAM_GATHER) {
      if (plan.zero >= 3)
        return prefix + where + "a gather of updated parameters under ZeRO-3, "
                                "which gathers at the next use";
      if (gathered[op.unit]++)
        return prefix + where + "unit " + std::to_string(op.unit) + " gathered twice";
    }
  }
  std::vector<bool> hasParams(plan.num_units, false);
  for (int32_t p = 0; p < plan.num_params; ++p) {
    const mfsdp_param_desc &d = plan.params[p];
    hasParams[d.unit] = true;
    if (d.optimizer != MFSDP_OPT_NONE && !stepped[p])
      return prefix + "the optimizer step never steps parameter '" +
             std::string(d.name ? d.name : "?") + "'";
  }
  if (plan.zero < 3)
    for (int32_t u = 0; u < plan.num_units; ++u)
      if (hasParams[u] && !gathered[u])
        return prefix + "the optimizer step never gathers unit " + std::to_string(u) +
               " (ZeRO-" + std::to_string(plan.zero) + " keeps parameters whole)";
  return "";
}

//===- Optimizer.cpp - The optimizer step ---------------------------------===//
//
// AdamW and SGD on the shards this rank keeps, one fused call per group
// (Backend::adamwMulti / sgdMulti over the group's tensors), Muon on the
// matrices it owns, one by one (under ns_split on one dp_replicate
// replica, which broadcasts the updated master to the others); then the
// gathered copies are refreshed.
// The program's optimizer step (mfsdp_plan.program) in the schedule's
// order, each group's update as soon as its reduction has landed; a plan
// built by hand without one runs the derived one (DefaultProgram.h): every
// reduction waited for first, then the parameters in table order.
//
//===----------------------------------------------------------------------===//
#include "Step.h"

#include <string>
#include <vector>

using namespace mfsdp::rt;

namespace {

/// The kernels' hyperparameters from a parameter's.
AdamWHyper adamwHyper(const mfsdp_hparams &h) {
  return {h.lr, h.beta1, h.beta2, h.eps, h.weight_decay};
}
SGDHyper sgdHyper(const mfsdp_hparams &h) {
  return {h.lr, h.momentum, h.weight_decay, h.nesterov != 0};
}
MuonHyper muonHyper(const mfsdp_hparams &h) {
  MuonHyper muon;
  muon.lr = h.lr;
  muon.momentum = h.momentum;
  muon.weightDecay = h.weight_decay;
  muon.nesterov = h.nesterov != 0;
  muon.ns = {h.ns_steps, h.ns_a, h.ns_b, h.ns_c, h.ns_eps,
             h.ns_norm == MFSDP_NS_NORM_CLAMP ? NsNorm::Clamp : NsNorm::AddEps,
             static_cast<NsPrecision>(h.ns_precision)};
  muon.scale = static_cast<MuonScale>(h.adjust_lr);
  return muon;
}

} // namespace

mfsdp_status mfsdp_step::checkReduced(const char *call, bool inFlight) {
  // A reduction in flight is a new one: its unit's gradients land when
  // the program waits for them.
  const bool pending = inFlight && !reducing.empty();
  for (int32_t u = 0; u < plan.num_units; ++u) {
    if (unitParams[u].empty() || (inFlight && reductionInFlight(u)))
      continue; // nothing to reduce, nothing to consume; or landing
    if (stepped && !pending)
      return fail(MFSDP_ERROR_ORDER,
                  std::string(call) + ": no gradients were reduced since the "
                                      "last optimizer_step, which consumed them "
                                      "(run a backward first)");
    if (state[u] != UnitState::Idle || !reduced[u])
      return fail(MFSDP_ERROR_ORDER, std::string(call) +
                                         " before the gradients of unit " +
                                         std::to_string(u) +
                                         " were reduced (post_backward "
                                         "without no-sync)");
  }
  return MFSDP_OK;
}

mfsdp_status mfsdp_step::setUnusedGrads(int32_t rule) {
  const bool valid = rule == MFSDP_UNUSED_STEP || rule == MFSDP_UNUSED_SKIP;
  // How many ranks ask for each rule, and for none that exists: every rank
  // sees the same counts, so every rank fails (or none) alike.
  double votes[3] = {rule == MFSDP_UNUSED_STEP ? 1.0 : 0.0,
                     rule == MFSDP_UNUSED_SKIP ? 1.0 : 0.0, valid ? 0.0 : 1.0};
  if (auto s = comm(backend->allReduceDoubles(Group::Shard, votes, 3),
                    "the all-reduce of the unused-gradient rule over dp_shard"))
    return s;
  if (R > 1)
    if (auto s = comm(backend->allReduceDoubles(Group::Replicate, votes, 3),
                      "the all-reduce of the unused-gradient rule over dp_replicate"))
      return s;
  if (!valid)
    return fail(MFSDP_ERROR_INVALID,
                "set_unused_grads: rule " + std::to_string(rule) +
                    " is not MFSDP_UNUSED_STEP (0) or MFSDP_UNUSED_SKIP (1)");
  if (votes[2] > 0 || (votes[0] > 0 && votes[1] > 0))
    return fail(MFSDP_ERROR_INVALID,
                "set_unused_grads: the ranks ask for different rules (" +
                    std::to_string(int64_t(votes[0])) + " MFSDP_UNUSED_STEP, " +
                    std::to_string(int64_t(votes[1])) + " MFSDP_UNUSED_SKIP, " +
                    std::to_string(int64_t(votes[2])) +
                    " neither); every rank must pass the same");
  skipUnused = rule == MFSDP_UNUSED_SKIP;
  return MFSDP_OK;
}

mfsdp_status mfsdp_step::chooseStepped() {
  std::vector<double> seen;
  if (skipUnused) {
    // How many ranks gave each parameter a gradient: over dp_shard, then
    // the replicas (every rank's backward is a part of the global batch).
    seen.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i)
      seen[i] = params[i].gradSeen ? 1.0 : 0.0;
    const int64_t n = static_cast<int64_t>(seen.size());
    if (auto s = comm(backend->allReduceDoubles(Group::Shard, seen.data(), n),
                      "the all-reduce of which parameters got gradients over dp_shard"))
      return s;
    if (R > 1)
      if (auto s = comm(backend->allReduceDoubles(Group::Replicate, seen.data(), n),
                        "the all-reduce of which parameters got gradients over "
                        "dp_replicate"))
        return s;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    ParamState &ps = params[i];
    ps.skipped = skipUnused && seen[i] == 0;
    ps.gradSeen = false;
    if (!ps.skipped && ps.desc.optimizer != MFSDP_OPT_NONE)
      ++ps.steps;
  }
  return MFSDP_OK;
}

namespace {

/// Whether this rank steps `ps` now: it keeps some of it, an optimizer
/// steps it, and (under ns_split) this is the replica that steps it; a
/// parameter this rank keeps without a reduced gradient is
/// MFSDP_ERROR_ORDER.
mfsdp_status stepsNow(mfsdp_step *step, const ParamState &ps, bool &now) {
  now = false;
  if (!ps.ownsAny || ps.desc.optimizer == MFSDP_OPT_NONE || ps.skipped)
    return MFSDP_OK;
  if (!ps.gradReduced)
    return step->fail(MFSDP_ERROR_ORDER,
                      "parameter '" + ps.name + "' has no reduced gradient");
  // ns_split: another replica may step it and send the result.
  now = step->stepsHere(ps);
  return MFSDP_OK;
}

/// One optimizer kernel on `ps`, if this rank steps it now (stepsNow):
/// Muon's matrices always (Newton-Schulz is per matrix), AdamW and SGD
/// only on the per-parameter path (setFusedOptimizer(false)).
mfsdp_status stepParam(mfsdp_step *step, ParamState &ps) {
  bool now = false;
  if (auto s = stepsNow(step, ps, now); s || !now)
    return s;
  Backend &b = *step->backend;
  step->about(-1, static_cast<int32_t>(&ps - step->params.data()));
  const int64_t n = ps.localCount;
  int rc = 0;
  switch (ps.desc.optimizer) {
  case MFSDP_OPT_ADAMW:
    rc = b.adamwStep(ps.master, ps.gradShard, ps.m, ps.v, n, adamwHyper(ps.hparams),
                     ps.steps);
    ++step->work.perParamOptimizerCalls;
    break;
  case MFSDP_OPT_SGD:
    rc = b.sgdStep(ps.master, ps.gradShard, ps.m, n, sgdHyper(ps.hparams), ps.steps);
    ++step->work.perParamOptimizerCalls;
    break;
  case MFSDP_OPT_MUON:
    rc = b.muonStep(ps.master, ps.gradShard, ps.m, ps.desc.rows, ps.desc.cols,
                    muonHyper(ps.hparams), step->muonScratch);
    ++step->work.muonSteps;
    break;
  default:
    break;
  }
  if (rc == 0)
    return MFSDP_OK;
  return step->device(rc, "the optimizer step of '" + ps.name + "'");
}

/// "the fused AdamW step of 3 parameters ('a', 'b', 'c')", for messages.
std::string fusedWhat(const mfsdp_step *step, const char *optimizer,
                      const std::vector<int32_t> &ids) {
  std::string what = std::string("the fused ") + optimizer + " step of " +
                     std::to_string(ids.size()) + " parameter" +
                     (ids.size() == 1 ? "" : "s") + " (";
  for (size_t k = 0; k < ids.size() && k < 4; ++k)
    what += (k ? ", '" : "'") + step->params[ids[k]].name + "'";
  return what + (ids.size() > 4 ? ", ...)" : ")");
}

/// The optimizer kernels of `params` (n indices into the table: a program
/// op's parameters, or the whole table): the AdamW parameters this rank
/// steps in one fused call (Backend::adamwMulti), the SGD ones in another,
/// each with its own hyperparameters; Muon's matrices one by one, in their
/// order. Every parameter is checked (stepsNow) before any kernel runs.
mfsdp_status stepParams(mfsdp_step *step, const int32_t *params, int32_t n) {
  if (!step->fusedOptimizer) {
    for (int32_t k = 0; k < n; ++k)
      if (auto s = stepParam(step, step->params[params[k]]))
        return s;
    return MFSDP_OK;
  }
  std::vector<AdamWTensor> adamw;
  std::vector<SGDTensor> sgd;
  std::vector<int32_t> adamwIds, sgdIds, muonIds;
  for (int32_t k = 0; k < n; ++k) {
    ParamState &ps = step->params[params[k]];
    bool now = false;
    if (auto s = stepsNow(step, ps, now))
      return s;
    if (!now)
      continue;
    switch (ps.desc.optimizer) {
    case MFSDP_OPT_ADAMW:
      adamw.push_back({ps.master, ps.gradShard, ps.m, ps.v, ps.localCount,
                       adamwHyper(ps.hparams), ps.steps});
      adamwIds.push_back(params[k]);
      break;
    case MFSDP_OPT_SGD:
      sgd.push_back({ps.master, ps.gradShard, ps.m, ps.localCount, sgdHyper(ps.hparams),
                     ps.steps});
      sgdIds.push_back(params[k]);
      break;
    default:
      muonIds.push_back(params[k]);
      break;
    }
  }
  Backend &b = *step->backend;
  auto fused = [&](const char *optimizer, const std::vector<int32_t> &ids, auto call) {
    if (ids.empty())
      return MFSDP_OK;
    step->about(-1, -1);
    if (step->trace)
      step->trace->aboutParams(ids);
    const int rc = call();
    ++step->work.fusedOptimizerCalls;
    step->work.fusedOptimizerTensors += static_cast<int64_t>(ids.size());
    return rc == 0 ? MFSDP_OK : step->device(rc, fusedWhat(step, optimizer, ids));
  };
  if (auto s = fused("AdamW", adamwIds, [&] {
        return b.adamwMulti(adamw.data(), static_cast<int64_t>(adamw.size()));
      }))
    return s;
  if (auto s = fused("SGD", sgdIds, [&] {
        return b.sgdMulti(sgd.data(), static_cast<int64_t>(sgd.size()));
      }))
    return s;
  for (int32_t p : muonIds)
    if (auto s = stepParam(step, step->params[p]))
      return s;
  return MFSDP_OK;
}

/// ns_split: the updated masters of `split` (owned matrices this rank keeps)
/// from the replica that stepped each to the same owner on the others, all
/// issued together so their latencies overlap.
mfsdp_status broadcastUpdates(mfsdp_step *step, const std::vector<ParamState *> &split) {
  if (split.empty())
    return MFSDP_OK;
  std::vector<BroadcastPart> updates;
  for (ParamState *ps : split)
    updates.push_back({ps->master, ps->localCount, ps->nsReplica});
  if (auto s = step->comm(step->backend->broadcastMany(Group::Replicate, updates),
                          ("the broadcasts of " + std::to_string(updates.size()) +
                           " updated matrices over replicas")
                              .c_str()))
    return s;
  ++step->work.nsSplitBroadcastCalls;
  for (ParamState *ps : split)
    ++(step->stepsHere(*ps) ? step->work.nsSplitSends : step->work.nsSplitReceives);
  return MFSDP_OK;
}

/// The optimizer step as the program says (runtime.h,
/// mfsdp_program): its ops in their order, each group's kernels as soon as
/// its gradients have landed, while the reductions still in flight (those
/// the last post_backward hooks left running) go on until an op waits for
/// them.
mfsdp_status runProgram(mfsdp_step *step, const mfsdp_program_hook &hook) {
  const mfsdp_program &g = *step->plan.program;
  // Waits for `unit`'s reduction if it is in flight (every unit's with
  // unit < 0); the step has consumed the gradients all the same.
  auto land = [&](int32_t unit) {
    if (unit < 0 ? step->reducing.empty() : !step->reductionInFlight(unit))
      return MFSDP_OK;
    mfsdp_status s = step->completeReduction(unit);
    step->stepped = true;
    return s;
  };
  for (int32_t i = hook.first_op; i < hook.first_op + hook.num_ops; ++i) {
    const mfsdp_program_op &op = g.ops[i];
    // Whatever the op, the gradients it reads have landed first, on every
    // rank, also those that do not run it: the ranks wait at the same op.
    if (auto s = land(op.unit))
      return s;
    if (op.only_rank >= 0 && op.only_rank != step->shardRank)
      continue;
    switch (op.kind) {
    case MFSDP_PROGRAM_WAIT_REDUCTION:
      break;
    case MFSDP_PROGRAM_OPTIMIZER:
      if (!step->reducing.empty())
        ++step->work.overlappedKernels;
      if (auto s = stepParams(step, op.params, op.num_params))
        return s;
      break;
    case MFSDP_PROGRAM_BROADCAST_UPDATES: {
      std::vector<ParamState *> split;
      for (int32_t k = 0; k < op.num_params; ++k) {
        ParamState &ps = step->params[op.params[k]];
        if (ps.ownsAny && ps.nsReplica >= 0)
          split.push_back(&ps);
      }
      if (auto s = broadcastUpdates(step, split))
        return s;
      break;
    }
    case MFSDP_PROGRAM_GATHER:
      step->about(-1, -1);
      for (int32_t p : step->unitParams[op.unit])
        step->releaseFull(step->params[p]);
      if (auto s = step->gather(op.unit))
        return s;
      break;
    default:
      break; // refused by mfsdp_create
    }
  }
  // A reduction no op waited for (a unit without stepped parameters).
  if (auto s = land(-1))
    return s;
  // ZeRO-3 gathers at the next use; ZeRO-1/2 units were gathered above.
  step->about(-1, -1);
  if (step->plan.zero >= 3)
    for (ParamState &ps : step->params)
      step->releaseFull(ps);
  return step->finish();
}

} // namespace

void mfsdp::rt::setFusedOptimizer(mfsdp_step *step, bool fused) {
  if (step)
    step->fusedOptimizer = fused;
}

mfsdp_status mfsdp::rt::optimizerStep(mfsdp_step *step) {
  if (!step)
    return MFSDP_ERROR_INVALID;
  // The reductions in flight are left running: the program waits for them.
  if (auto st = step->enter(/*keepReduction=*/true))
    return st;
  if (auto st = step->checkReduced("optimizer_step", /*inFlight=*/true))
    return st;
  // The reduced gradients are consumed from here on, even if a kernel
  // fails below: a second step would move what was stepped again.
  step->stepped = true;
  ++step->steps;
  if (auto st = step->chooseStepped())
    return st;
  // mfsdp_create completed the program with an optimizer step where the
  // plan's had none (DefaultProgram.h).
  return runProgram(step, *mfsdp::rt::optimizerHook(step->plan));
}

//===- Optimizer.cpp - The optimizer step ---------------------------------===//
//
// AdamW and SGD on the shards this rank keeps, Muon on the matrices it
// owns (under ns_split on one dp_replicate replica, which broadcasts the
// updated master to the others); then the gathered copies are refreshed.
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

mfsdp_status mfsdp_step::checkReduced(const char *call) {
  for (int32_t u = 0; u < plan.num_units; ++u) {
    if (unitParams[u].empty())
      continue; // nothing to reduce, nothing to consume
    if (stepped)
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

mfsdp_status mfsdp::rt::optimizerStep(mfsdp_step *step) {
  if (!step)
    return MFSDP_ERROR_INVALID;
  if (auto st = step->enter())
    return st;
  if (auto st = step->checkReduced("optimizer_step"))
    return st;
  // The reduced gradients are consumed from here on, even if a kernel
  // fails below: a second step would move what was stepped again.
  step->stepped = true;
  ++step->steps;
  const mfsdp_plan &p = step->plan;
  Backend &b = *step->backend;
  for (ParamState &ps : step->params) {
    if (!ps.ownsAny || ps.desc.optimizer == MFSDP_OPT_NONE)
      continue;
    if (!ps.gradReduced)
      return step->fail(MFSDP_ERROR_ORDER, "parameter '" + ps.name +
                                               "' has no reduced gradient");
    if (!step->stepsHere(ps))
      continue; // ns_split: another replica steps it and sends the result
    step->about(-1, static_cast<int32_t>(&ps - step->params.data()));
    const int64_t n = ps.localCount;
    int rc = 0;
    switch (ps.desc.optimizer) {
    case MFSDP_OPT_ADAMW:
      rc = b.adamwStep(ps.master, ps.gradShard, ps.m, ps.v, n, adamwHyper(ps.hparams),
                       step->steps);
      break;
    case MFSDP_OPT_SGD:
      rc = b.sgdStep(ps.master, ps.gradShard, ps.m, n, sgdHyper(ps.hparams), step->steps);
      break;
    case MFSDP_OPT_MUON:
      rc = b.muonStep(ps.master, ps.gradShard, ps.m, ps.desc.rows, ps.desc.cols,
                      muonHyper(ps.hparams), step->muonScratch);
      ++step->work.muonSteps;
      break;
    default:
      break;
    }
    if (auto s = step->device(rc, "the optimizer step of '" + ps.name + "'"))
      return s;
  }
  // ns_split: every replica has stepped its share of the owned matrices;
  // now each updated master goes from its replica to the same owner on
  // the others (in table order on every rank), all of them issued
  // together so their latencies overlap.
  std::vector<ParamState *> split;
  std::vector<BroadcastPart> updates;
  for (ParamState &ps : step->params)
    if (ps.ownsAny && ps.nsReplica >= 0) {
      split.push_back(&ps);
      updates.push_back({ps.master, ps.localCount, ps.nsReplica});
    }
  if (!updates.empty()) {
    if (auto s = step->comm(b.broadcastMany(Group::Replicate, updates),
                            ("the broadcasts of " + std::to_string(updates.size()) +
                             " updated matrices over replicas")
                                .c_str()))
      return s;
    ++step->work.nsSplitBroadcastCalls;
  }
  for (ParamState *ps : split)
    ++(step->stepsHere(*ps) ? step->work.nsSplitSends : step->work.nsSplitReceives);
  // Gathered copies are stale now: ZeRO-1/2 keep parameters whole, so
  // gather the updated ones; ZeRO-3 gathers at the next use.
  step->about(-1, -1);
  for (ParamState &ps : step->params)
    step->releaseFull(ps);
  if (p.zero < 3)
    for (int32_t u = 0; u < p.num_units; ++u)
      if (auto st = step->gather(u))
        return st;
  return step->finish();
}

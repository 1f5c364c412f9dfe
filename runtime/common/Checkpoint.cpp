//===- Checkpoint.cpp - Parameters and optimizer state in and out ---------===//
//
// load / store of a parameter's fp32 master or optimizer state as the
// whole tensor on the host: this rank's part scattered in, every rank's
// gathered out through the memory plan's staging buffer.
//
//===----------------------------------------------------------------------===//
#include "CheckpointCommon.h"
#include "Step.h"

#include <string>
#include <vector>

using namespace mfsdp::rt;

mfsdp_status mfsdp_step::scatterWhole(const ParamState &ps, const float *full,
                                      float *local) {
  if (ps.localCount == 0)
    return MFSDP_OK;
  if (ps.desc.placement == MFSDP_BLOCK_SHARD) {
    // This rank's blocks, packed on the host.
    std::vector<float> packed(static_cast<size_t>(ps.localCount));
    host::packBlocks(full, packed.data(), ps.grid, ps.grid.firstBlockOf(shardRank),
                     ps.grid.blocksOf(shardRank));
    return device(backend->copyFromHost(local, packed.data(), ps.localCount),
                  "copy from the host");
  }
  const float *from = full;
  if (ps.desc.placement == MFSDP_ROW_SHARD)
    from += shardRank * ps.chunkRows * ps.desc.cols;
  return device(backend->copyFromHost(local, from, ps.localCount),
                "copy from the host");
}

mfsdp_status mfsdp_step::storeWhole(const ParamState &ps, const float *local, float *full,
                                    mfsdp_status mine, int32_t fromReplica,
                                    bool *collectivesDone) {
  // A replicated parameter is whole on every rank: no collective at all.
  if (collectivesDone)
    *collectivesDone = ps.desc.placement == MFSDP_REPLICATE && fromReplica < 0;
  float *whole = nullptr;
  mfsdp_status placed = mine;
  if (!placed)
    placed = place(memory ? memory->staging : -1, ps.fullSize, whole,
                   "the staging buffer for storing '" + ps.name + "'");
  // What failed on one rank before the collectives (its arguments, its
  // staging buffer) fails the call on every rank: none waits alone in a
  // gather the failing rank skips.
  placed = mfsdp::rt::ckpt::agree(this, placed, ("storing '" + ps.name + "'").c_str());
  if (placed) {
    if (whole)
      backend->release(whole);
    return placed;
  }
  if (ps.desc.placement == MFSDP_BLOCK_SHARD) {
    // The packed blocks of every rank, put in place on the host (the
    // staging buffer is the only whole-tensor buffer a store takes).
    mfsdp_status s = gatherPacked(ps, local, whole);
    std::vector<float> packed(static_cast<size_t>(ps.fullSize));
    if (!s && collectivesDone)
      *collectivesDone = true;
    if (!s)
      s = device(backend->copyToHost(packed.data(), whole, ps.fullSize),
                 "copy to the host");
    backend->release(whole);
    if (!s)
      host::unpackBlocks(packed.data(), full, ps.grid, 0, ps.grid.blocks());
    return s;
  }
  mfsdp_status s = fromReplica < 0 || fromReplica == replicaRank
                       ? gatherWhole(ps, local, whole)
                       : MFSDP_OK;
  if (!s && fromReplica >= 0)
    s = comm(backend->broadcast(Group::Replicate, whole, ps.elements(), fromReplica),
             "broadcast over replicas");
  if (!s && collectivesDone)
    *collectivesDone = true;
  if (!s)
    s = device(backend->copyToHost(full, whole, ps.elements()), "copy to the host");
  backend->release(whole);
  return s;
}

/// Whether a per-parameter call can start: a runtime that is not usable
/// (not created, or stopped: both agreed by every rank) refuses it on
/// every rank alike; what entering finds beyond that (a device error, a
/// prefetched gather's or a reduction's failure) is this rank's alone and
/// goes into `mine`, to be agreed before any collective.
static mfsdp_status ready(mfsdp_step *step, mfsdp_status &mine) {
  if (auto s = step->usable())
    return s;
  mine = step->enter();
  return MFSDP_OK;
}

/// `mine`, or the error of a NULL whole tensor for call `what`.
static mfsdp_status withTensor(mfsdp_step *step, mfsdp_status mine, const void *full,
                               const std::string &what) {
  if (!mine && !full)
    return step->fail(MFSDP_ERROR_INVALID, what + ": the whole tensor's pointer is NULL");
  return mine;
}

/// The ranks agree on `mine` (this rank's start, and its tensor's
/// pointer) before a per-parameter call writes or gathers anything.
static mfsdp_status agreeStart(mfsdp_step *step, mfsdp_status mine, const void *full,
                               const std::string &what) {
  return ckpt::agree(step, withTensor(step, mine, full, what), ("starting " + what).c_str());
}

/// After a per-parameter load wrote this rank's part (`local`) or
/// gathered the loaded tensor (`gathering`): the ranks agree; a failure
/// anywhere leaves the tensor partly loaded, and the runtime stops on
/// every rank rather than train on it.
static mfsdp_status commitParam(mfsdp_step *step, mfsdp_status local, const std::string &what,
                                bool gathering = false) {
  const std::string doing = gathering ? "gathering the loaded tensor of " : "writing ";
  if (auto s = ckpt::agree(step, local, (doing + what).c_str())) {
    step->stoppedBy = what + (gathering ? " failed while it gathered the loaded tensor ("
                                        : " failed while it wrote the tensor (") +
                      step->error + "), which is partly loaded";
    return s;
  }
  return MFSDP_OK;
}

mfsdp_status mfsdp::rt::loadParam(mfsdp_step *step, int32_t param, const float *full) {
  if (!step)
    return MFSDP_ERROR_INVALID;
  mfsdp_status mine = MFSDP_OK;
  if (auto st = ready(step, mine))
    return st;
  if (auto st = step->checkParam(param))
    return st;
  ParamState &ps = step->params[param];
  const std::string what = "mfsdp_load_param of '" + ps.name + "'";
  if (auto st = agreeStart(step, mine, full, what))
    return st;
  if (auto st = commitParam(step, step->scatterWhole(ps, full, ps.master), what))
    return st;
  step->releaseFull(ps);
  // ZeRO-1/2 keep the gathered copy: it follows the loaded master.
  if (step->plan.zero < 3)
    if (auto st = commitParam(step, step->gather(ps.desc.unit), what, true))
      return st;
  return step->finish();
}

mfsdp_status mfsdp::rt::storeParam(mfsdp_step *step, int32_t param, float *full) {
  if (!step)
    return MFSDP_ERROR_INVALID;
  mfsdp_status mine = MFSDP_OK;
  if (auto st = ready(step, mine))
    return st;
  if (auto st = step->checkParam(param))
    return st;
  const ParamState &ps = step->params[param];
  mine = withTensor(step, mine, full, "mfsdp_store_param of '" + ps.name + "'");
  // The fp32 masters, whole (not the compute copy, which may be bf16).
  return step->storeWhole(ps, ps.master, full, mine);
}

static mfsdp_status stateOf(mfsdp_step *step, int32_t param, int32_t which,
                            float *&state) {
  if (auto st = step->checkParam(param))
    return st;
  ParamState &ps = step->params[param];
  const int32_t opt = ps.desc.optimizer;
  if (which == MFSDP_STATE_EXP_AVG && opt != MFSDP_OPT_NONE) {
    state = ps.m;
    return MFSDP_OK;
  }
  if (which == MFSDP_STATE_EXP_AVG_SQ && opt == MFSDP_OPT_ADAMW) {
    state = ps.v;
    return MFSDP_OK;
  }
  return step->fail(MFSDP_ERROR_INVALID,
                    "parameter " + std::to_string(param) + " ('" + ps.name +
                        "') has " + optimizerName(opt) +
                        ", which keeps no state " + std::to_string(which) +
                        " (exp_avg = 0 for AdamW, SGD and Muon; exp_avg_sq = "
                        "1 for AdamW)");
}

mfsdp_status mfsdp::rt::loadState(mfsdp_step *step, int32_t param, int32_t which,
                                   const float *full) {
  if (!step)
    return MFSDP_ERROR_INVALID;
  mfsdp_status mine = MFSDP_OK;
  if (auto st = ready(step, mine))
    return st;
  float *state = nullptr;
  if (auto s = stateOf(step, param, which, state))
    return s;
  const std::string what = "mfsdp_load_state of '" + step->params[param].name + "'";
  if (auto st = agreeStart(step, mine, full, what))
    return st;
  return commitParam(step, step->scatterWhole(step->params[param], full, state), what);
}

mfsdp_status mfsdp::rt::storeState(mfsdp_step *step, int32_t param, int32_t which,
                                    float *full) {
  if (!step)
    return MFSDP_ERROR_INVALID;
  mfsdp_status mine = MFSDP_OK;
  if (auto st = ready(step, mine))
    return st;
  float *state = nullptr;
  if (auto s = stateOf(step, param, which, state))
    return s;
  // Under ns_split the momentum is current only on the replica that steps
  // the matrix (the others keep the buffer but never update it).
  const ParamState &ps = step->params[param];
  mine = withTensor(step, mine, full, "mfsdp_store_state of '" + ps.name + "'");
  return step->storeWhole(ps, state, full, mine, ps.nsReplica);
}

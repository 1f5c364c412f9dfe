//===- Placement.cpp - Buffers in the arena -------------------------------===//
//
// Where each buffer lives: at the offset the library's static memory plan
// chose (an occupied place is a hook-order error naming who holds it), or,
// without a plan, anywhere in an arena sized for every buffer at once; the
// gradient buffers a plan keeps only during a unit's backward.
//
//===----------------------------------------------------------------------===//
#include "Step.h"

#include <algorithm>
#include <string>

using namespace mfsdp::rt;

std::string mfsdp_step::occupant(int64_t lo, int64_t hi) const {
  auto overlaps = [&](const float *buf, int64_t at, int64_t count) {
    const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
    return buf && at >= 0 && count > 0 && at < hi && lo < at + bytes;
  };
  for (const ParamState &ps : params) {
    const std::string unit = " (unit " + std::to_string(ps.desc.unit) + ")";
    if (overlaps(ps.full, ps.fullAt, ps.fullFloats()))
      return "the gathered '" + ps.name + "'" + unit;
    if (overlaps(ps.grad, ps.at.grad, ps.gradFloats()))
      return "the gradient of '" + ps.name + "'" + unit;
    if (overlaps(ps.master, ps.at.master, ps.localSize) ||
        overlaps(ps.m, ps.at.exp_avg, ps.localSize) ||
        overlaps(ps.v, ps.at.exp_avg_sq, ps.localSize) ||
        overlaps(ps.gradShard, ps.at.grad_shard, ps.localSize))
      return "the sharded state of '" + ps.name + "'";
  }
  return "";
}

mfsdp_status mfsdp_step::place(int64_t offset, int64_t count, float *&out,
                               const std::string &what) {
  if (!memory || count <= 0)
    return allocate(count, out, what);
  if (offset < 0)
    return fail(MFSDP_ERROR_PLAN, "the library's memory plan has no place for " +
                                      what);
  if (backend->allocateAt(offset, count, out) == 0)
    return MFSDP_OK;
  const std::string reason = backend->lastError();
  const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
  const std::string who = occupant(offset, offset + bytes);
  if (who.empty())
    return fail(MFSDP_ERROR_PLAN, "the library's memory plan does not fit this "
                                  "runtime: no room for " + what + " at arena "
                                  "offset " + std::to_string(offset) + ": " +
                                  reason);
  return fail(MFSDP_ERROR_ORDER,
              "the memory plan puts " + what + " at arena bytes [" +
                  std::to_string(offset) + ", " + std::to_string(offset + bytes) +
                  "), which " + who +
                  " still holds: the plan has one unit's gathered parameters "
                  "and gradients live at a time" +
                  (prefetching() ? std::string(" (and the next unit's gathered "
                                               "copy, prefetched)")
                                 : std::string()) +
                  ", forward in unit order and "
                  "backward in reverse (finish that unit's hooks first)");
}

mfsdp_status mfsdp_step::blockStaging(const ParamState &ps, float *&out,
                                      const char *why) {
  return place(memory ? memory->staging : -1, ps.fullSize, out,
               std::string("the staging buffer for ") + why + " the blocks of '" +
                   ps.name + "'");
}

void mfsdp_step::release(int32_t unit) {
  if (plan.zero < 3)
    return;
  // A gather landed in staging and never unpacked goes with the copies.
  for (int32_t b : unitBuckets[unit])
    if (buckets[b].unpackDue) {
      setUnpackDue(buckets[b], false);
      releaseStaging(buckets[b]);
    }
  for (int32_t p : unitParams[unit])
    releaseFull(params[p]);
}

mfsdp_status mfsdp_step::releaseAhead() {
  if (plan.zero < 3)
    return MFSDP_OK;
  for (int32_t u = 0; u < plan.num_units; ++u) {
    // (An idle unit whose reduction is in flight keeps its backward copy
    // until the reduction lands: that one is not ahead.)
    if (state[u] != UnitState::Idle || reductionInFlight(u))
      continue;
    bool held = gatherPending(u);
    for (int32_t p : unitParams[u])
      held |= params[p].full != nullptr;
    if (!held)
      continue;
    mfsdp_status s = completePrefetch(u);
    release(u);
    if (s)
      return s;
  }
  return MFSDP_OK;
}

int64_t mfsdp_step::arenaBytes() const {
  auto bytes = [](int64_t count) {
    return Arena::roundUp(count * static_cast<int64_t>(sizeof(float)));
  };
  int64_t total = 0, largestFull = 0, scratch = 0, largestBlocks = 0;
  for (const ParamState &ps : params) {
    total += bytes(ps.localSize) * (2 + (ps.desc.optimizer != MFSDP_OPT_NONE) +
                                    (ps.desc.optimizer == MFSDP_OPT_ADAMW));
    total += bytes(ps.fullFloats()) + bytes(ps.gradFloats()); // copy, gradient
    largestFull = std::max(largestFull, ps.fullSize);
    if (ps.desc.placement == MFSDP_BLOCK_SHARD) // its staging buffer
      largestBlocks = std::max(largestBlocks, ps.fullSize);
    if (ps.ownsAny && ps.desc.optimizer == MFSDP_OPT_MUON)
      scratch = std::max(scratch, backend->muonScratch(ps.desc.rows, ps.desc.cols));
  }
  return total + bytes(largestFull) + bytes(largestBlocks) + bytes(scratch);
}

mfsdp_status mfsdp_step::placeGrads(int32_t unit) {
  about(-1, -1);
  if (gradsKept()) {
    // A kept bf16 gradient widened by its last reduction is the trainer's
    // bf16 again.
    for (int32_t p : unitParams[unit])
      if (auto s = narrowGrad(params[p]))
        return s;
    return MFSDP_OK;
  }
  for (int32_t p : unitParams[unit])
    if (params[p].gradReduced)
      // The freed gradient cannot be added to: a second backward would
      // replace the reduced gradient instead of adding to it.
      return fail(MFSDP_ERROR_ORDER,
                  "the gradients of unit " + std::to_string(unit) +
                      " were already reduced in this step, and this "
                      "library's memory plan frees them after the "
                      "reduction: call zero_grad (after optimizer_step) "
                      "before the next backward, or accumulate microbatches "
                      "with no-sync in a library built with --accumulate");
  for (int32_t p : unitParams[unit])
    if (auto s = placeGrad(params[p]))
      return s;
  return MFSDP_OK;
}

mfsdp_status mfsdp_step::placeGrad(ParamState &ps) {
  if (ps.grad)
    return MFSDP_OK;
  ps.gradWide = false;
  if (ps.gradInImage()) {
    const BucketState &bs = buckets[ps.imageOf];
    ParamState &first = params[bs.members.front()];
    if (!first.grad) {
      const int64_t floats = (bs.span + 1) / 2;
      if (auto s = place(first.at.grad, floats, first.grad,
                         "the gradients of bucket " + std::to_string(ps.imageOf) +
                             " (unit " + std::to_string(bs.unit) + ")"))
        return s;
      if (auto s = device(backend->zero(first.grad, floats), "zero-fill")) {
        backend->release(first.grad);
        first.grad = nullptr;
        return s;
      }
    }
    ps.grad = reinterpret_cast<float *>(reinterpret_cast<uint16_t *>(first.grad) + ps.imageAt);
    return MFSDP_OK;
  }
  if (auto s = place(ps.at.grad, ps.gradFloats(), ps.grad,
                     "the gradient of '" + ps.name + "'"))
    return s;
  if (auto s = device(backend->zero(ps.grad, ps.gradFloats()), "zero-fill")) {
    backend->release(ps.grad);
    ps.grad = nullptr;
    return s;
  }
  return MFSDP_OK;
}

void mfsdp_step::releaseGrad(ParamState &ps) {
  if (!ps.gradInImage() || ps.imageAt == 0) // a view frees nothing
    backend->release(ps.grad);
  ps.grad = nullptr;
  ps.gradLive = false;
  ps.gradWide = false;
}

void mfsdp_step::releaseGrads(int32_t unit) {
  if (gradsKept())
    return;
  for (int32_t p : unitParams[unit])
    releaseGrad(params[p]);
}

mfsdp_status mfsdp_step::allocateKept(ParamState &ps) {
  const int32_t opt = ps.desc.optimizer;
  struct Kept {
    float *&buf;
    int64_t count;
    const char *what;
    int64_t offset;
  } kept[] = {
      {ps.master, ps.localSize, "master", ps.at.master},
      {ps.m, opt != MFSDP_OPT_NONE ? ps.localSize : 0, "exp_avg", ps.at.exp_avg},
      {ps.v, opt == MFSDP_OPT_ADAMW ? ps.localSize : 0, "exp_avg_sq",
       ps.at.exp_avg_sq},
      {ps.gradShard, ps.localSize, "reduced gradient", ps.at.grad_shard},
  };
  for (Kept &k : kept) {
    if (auto s = place(k.offset, k.count, k.buf,
                       std::string("the ") + k.what + " of '" + ps.name + "'"))
      return s;
    if (auto s = device(backend->zero(k.buf, k.count), "zero-fill"))
      return s;
  }
  // Gradients the plan keeps all run (else live from pre_backward to
  // post_backward only).
  if (gradsKept())
    return placeGrad(ps);
  return MFSDP_OK;
}

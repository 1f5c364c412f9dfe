//===- Pipeline.cpp - Prefetched gathers, overlapped reductions -----------===//
//
// The program's hooks start gathers ahead of their waits and leave
// reductions running (MFSDP_PROGRAM_START_GATHER, START_REDUCTION) until
// an op waits for them; a call outside the hooks waits for both first
// (enter), so no collective is left unwaited and every rank waits in the
// same order.
//
//===----------------------------------------------------------------------===//
#include "Step.h"

#include <string>
#include <vector>

using namespace mfsdp::rt;

mfsdp_status mfsdp_step::completeReduction(int32_t unit) {
  std::vector<Started> started;
  std::vector<int32_t> units;
  if (unit < 0) {
    started.swap(reduceStarted);
    units.swap(reducing);
  } else {
    // This unit's, in the order they were started; the others stay in
    // flight.
    std::vector<Started> others;
    for (const Started &st : reduceStarted)
      (st.unit == unit ? started : others).push_back(st);
    reduceStarted.swap(others);
    std::vector<int32_t> rest;
    for (int32_t u : reducing)
      (u == unit ? units : rest).push_back(u);
    reducing.swap(rest);
  }
  const float scale = 1.f / static_cast<float>(S * R);
  mfsdp_status first = MFSDP_OK;
  std::string firstError;
  for (const Started &st : started) {
    about(st.bucket, st.param);
    const std::string what =
        (st.bucket >= 0 ? "the reduction of bucket " + std::to_string(st.bucket)
                        : "the reduction of '" + params[st.param].name + "'") +
        " (unit " + std::to_string(st.unit) + ")";
    mfsdp_status s = comm(backend->wait(st.handle), what.c_str());
    ++work.reduceWaits;
    if (st.bucket >= 0)
      releaseStaging(buckets[st.bucket]);
    // HSDP: the shard reduction has landed; the all-reduce over replicas
    // of what this rank keeps follows (every rank calls it, with nothing
    // when it keeps nothing). It is called even after a failure, so
    // every rank issues the same sequence and no rank's all-reduce pairs
    // with another entry's on its replicas; the step has failed anyway.
    if (st.bf16.on) {
      // The reduce dtype bf16: the trainer's buffer widened back, the
      // replicas' all-reduce in bf16, the kept span widened to fp32.
      s = finishBF16After(s, st.bf16, what);
    } else if (R > 1) {
      float *span = nullptr;
      int64_t count = 0;
      if (st.bucket >= 0) {
        shardSpan(buckets[st.bucket], span, count);
      } else {
        span = params[st.param].gradShard;
        count = params[st.param].localCount;
      }
      const std::string waitError = s ? error : std::string();
      const mfsdp_status r =
          comm(backend->allReduce(Group::Replicate, span, count),
               ("the all-reduce over replicas after " + what).c_str());
      if (!s)
        s = r;
      else
        error = waitError; // the first failure is the one to report
    }
    const std::vector<int32_t> one{st.param};
    for (int32_t p : st.bucket >= 0 ? buckets[st.bucket].members : one) {
      ParamState &ps = params[p];
      if (!s)
        s = device(backend->scale(ps.gradShard, ps.localCount, scale), "scaling");
      if (!s)
        ps.gradReduced = true;
    }
    if (s && !first) {
      first = s;
      firstError = error;
    }
  }
  for (int32_t u : units) {
    if (!first)
      markReduced(u);
    release(u);
    releaseGrads(u);
  }
  if (first)
    error = firstError;
  return first;
}

mfsdp_status mfsdp_step::startGather(int32_t unit, bool forBackward) {
  if (gatherPending(unit))
    return MFSDP_OK; // started already
  for (int32_t b : unitBuckets[unit]) {
    if (bucketGathered(b))
      continue;
    CommHandle handle = 0;
    about(b, -1);
    if (auto s = gatherBucket(b, forBackward, &handle))
      return s;
    prefetchStarted.push_back({-1, b, handle, unit});
    ++work.prefetchStarts;
  }
  for (int32_t p : unitParams[unit]) {
    ParamState &ps = params[p];
    if (ps.full || ps.bucket >= 0 || (ps.desc.placement != MFSDP_ROW_SHARD &&
                    ps.desc.placement != MFSDP_OWNER))
      continue;
    ps.fullAt = forBackward ? ps.at.full_backward : ps.at.full;
    if (auto s = place(ps.fullAt, ps.fullFloats(), ps.full,
                       "the prefetched '" + ps.name + "'" +
                           (forBackward ? " for backward" : "")))
      return s;
    CommHandle handle = 0;
    about(-1, p);
    if (mfsdp_status s = gatherCompute(ps, &handle)) {
      releaseFull(ps);
      return s;
    }
    prefetchStarted.push_back({p, -1, handle, unit});
    ++work.prefetchStarts;
  }
  return MFSDP_OK;
}

mfsdp_status mfsdp_step::completePrefetch(int32_t unit, bool defer) {
  std::vector<Started> started;
  if (unit < 0) {
    started.swap(prefetchStarted);
  } else {
    // This unit's, in the order they were started; the others stay.
    std::vector<Started> others;
    for (const Started &st : prefetchStarted)
      (st.unit == unit ? started : others).push_back(st);
    prefetchStarted.swap(others);
  }
  mfsdp_status first = MFSDP_OK;
  std::string firstError;
  for (const Started &st : started) {
    mfsdp_status s = MFSDP_OK;
    about(st.bucket, st.param);
    if (st.bucket >= 0) {
      s = comm(backend->wait(st.handle),
               ("the prefetched all-gather of bucket " + std::to_string(st.bucket))
                   .c_str());
      s = finishBucketGather(st.bucket, s, defer);
    } else {
      ParamState &ps = params[st.param];
      s = comm(backend->wait(st.handle),
               ("the prefetched all-gather of '" + ps.name + "'").c_str());
      if (s)
        releaseFull(ps);
    }
    ++work.prefetchWaits;
    if (s && !first) {
      first = s;
      firstError = error;
    }
  }
  if (first)
    error = firstError;
  return first;
}

mfsdp_status mfsdp_step::enter(bool keepReduction, bool keepGathers) {
  if (auto s = usable())
    return s;
  if (auto s = device(backend->afterTrainer(), "ordering after the trainer's stream"))
    return s;
  // A gather prefetched by the last hook is complete before anything
  // else runs (the collectives of every rank stay in one order).
  mfsdp_status s = keepGathers ? MFSDP_OK : completePrefetch();
  if (!keepReduction) {
    mfsdp_status r = completeReduction();
    if (!s)
      s = r;
  }
  return s;
}

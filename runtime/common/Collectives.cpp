//===- Collectives.cpp - A unit's gathers and reductions ------------------===//
//
// A unit's parameters gathered (row shards and owned matrices by one
// collective each, block shards through a staging buffer, replicated
// tensors copied) and its gradients reduced into the shards this rank
// keeps (averaged over the data-parallel ranks; HSDP adds an all-reduce
// over dp_replicate). Buckets (Buckets.cpp) take one collective for all
// their members.
//
//===----------------------------------------------------------------------===//
#include "Step.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

using namespace mfsdp::rt;

mfsdp_status mfsdp_step::gatherWhole(const ParamState &ps, const float *local,
                                     float *full) {
  switch (ps.desc.placement) {
  case MFSDP_ROW_SHARD:
    return comm(backend->allGather(Group::Shard, local, full, ps.localSize),
                "all-gather");
  case MFSDP_OWNER: {
    std::vector<int64_t> counts(S, 0);
    counts[ps.desc.owner] = ps.elements();
    return comm(backend->allGatherV(Group::Shard, ps.ownsAny ? local : nullptr,
                                    full, counts),
                "all-gather-v");
  }
  case MFSDP_BLOCK_SHARD: {
    // Every rank's packed blocks into a staging buffer, then each block
    // to its place in the whole tensor.
    float *packed = nullptr;
    if (auto s = blockStaging(ps, packed, "gathering"))
      return s;
    mfsdp_status s = gatherPacked(ps, local, packed);
    if (!s)
      s = device(backend->unpackBlocks(packed, full, ps.grid, 0, ps.grid.blocks()),
                 "unpacking the blocks of '" + ps.name + "'");
    backend->release(packed);
    return s;
  }
  default:
    return device(backend->copy(full, local, ps.elements()), "copy");
  }
}

mfsdp_status mfsdp_step::gatherCompute(ParamState &ps, CommHandle *handle) {
  const int64_t n = ps.elements();
  const bool collective = ps.desc.placement == MFSDP_ROW_SHARD ||
                          ps.desc.placement == MFSDP_OWNER ||
                          ps.desc.placement == MFSDP_BLOCK_SHARD;
  if (collective)
    work.gatherBytes += ps.fullSize * ps.computeBytes();
  if (!ps.bf16()) {
    if (!handle)
      return gatherWhole(ps, ps.master, ps.full);
    if (ps.desc.placement == MFSDP_ROW_SHARD)
      return comm(backend->startAllGather(Group::Shard, ps.master, ps.full, ps.localSize,
                                          *handle),
                  "starting the all-gather");
    std::vector<int64_t> counts(S, 0);
    counts[ps.desc.owner] = n;
    return comm(backend->startAllGatherV(Group::Shard, ps.ownsAny ? ps.master : nullptr,
                                         ps.full, counts, *handle),
                "starting the all-gather-v");
  }
  // bf16: this rank's fp32 part rounded into its place of the gathered
  // buffer, which the all-gather then fills in place, 2 bytes an element.
  uint16_t *full = ps.fullBF16();
  const std::string cast = "casting '" + ps.name + "' to bf16";
  switch (ps.desc.placement) {
  case MFSDP_ROW_SHARD: {
    uint16_t *mine = full + shardRank * ps.localSize;
    if (auto s = device(backend->castToBF16(ps.master, mine, ps.localSize), cast))
      return s;
    return comm(backend->allGatherBF16(Group::Shard, mine, full,
                                       std::vector<int64_t>(S, ps.localSize), handle),
                "all-gather (bf16)");
  }
  case MFSDP_OWNER: {
    std::vector<int64_t> counts(S, 0);
    counts[ps.desc.owner] = n;
    if (ps.ownsAny)
      if (auto s = device(backend->castToBF16(ps.master, full, n), cast))
        return s;
    return comm(backend->allGatherBF16(Group::Shard, ps.ownsAny ? full : nullptr, full,
                                       counts, handle),
                "all-gather-v (bf16)");
  }
  case MFSDP_BLOCK_SHARD: {
    // Every rank's packed blocks in bf16 in the staging buffer, then each
    // block to its place in the whole tensor (one strided copy a block).
    float *staging = nullptr;
    if (auto s = blockStaging(ps, staging, "gathering"))
      return s;
    uint16_t *packed = reinterpret_cast<uint16_t *>(staging);
    int64_t at = 0;
    for (int64_t r = 0; r < shardRank; ++r)
      at += ps.blockCounts[r];
    mfsdp_status s = MFSDP_OK;
    if (ps.ownsAny)
      s = device(backend->castToBF16(ps.master, packed + at, ps.blockCounts[shardRank]),
                 cast);
    if (!s)
      s = comm(backend->allGatherBF16(Group::Shard, ps.ownsAny ? packed + at : nullptr,
                                      packed, ps.blockCounts, nullptr),
               "all-gather-v of blocks (bf16)");
    const BlockGrid &g = ps.grid;
    for (int64_t i = 0; !s && i < g.blocks(); ++i)
      s = device(backend->copy2DBF16(full + g.wholeOffset(g.blockAt(i), 0), g.cols,
                                     packed + i * g.blockElems(), g.blockCols, g.blockCols,
                                     g.blockRows),
                 "unpacking the blocks of '" + ps.name + "'");
    backend->release(staging);
    return s;
  }
  default:
    return device(backend->castToBF16(ps.master, full, n), cast);
  }
}

namespace {
/// The chunks [first, first + count) of an in-place widening of n bf16
/// elements at element n of a buffer into n floats at its start: chunk
/// [d, d + len) writes 16-bit elements [2d, 2d + 2len), below the first
/// bf16 element not yet read (n + d) when len <= (n - d) / 2; the last
/// element reads its own source before writing it.
std::vector<std::pair<int64_t, int64_t>> wideningChunks(int64_t n) {
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (int64_t d = 0; d < n;) {
    const int64_t len = std::max<int64_t>((n - d) / 2, 1);
    chunks.push_back({d, len});
    d += len;
  }
  return chunks;
}

/// The 16-bit elements of the upper half of n floats at buf (null for null).
uint16_t *upperHalf(float *buf, int64_t n) {
  return buf ? reinterpret_cast<uint16_t *>(buf) + n : nullptr;
}
} // namespace

mfsdp_status mfsdp_step::widenInPlace(float *buf, int64_t n, const std::string &what) {
  if (!buf)
    return MFSDP_OK;
  for (auto [d, len] : wideningChunks(n))
    if (auto s = device(backend->castFromBF16(upperHalf(buf, n) + d, buf + d, len), what))
      return s;
  return MFSDP_OK;
}

mfsdp_status mfsdp_step::narrowInPlace(float *buf, int64_t n, const std::string &what) {
  if (!buf)
    return MFSDP_OK;
  // The widening's chunks in reverse: each reads floats no later chunk
  // wrote over, and writes where no float still to be read lies.
  const auto chunks = wideningChunks(n);
  for (auto it = chunks.rbegin(); it != chunks.rend(); ++it)
    if (auto s = device(backend->castToBF16(buf + it->first, upperHalf(buf, n) + it->first,
                                            it->second),
                        what))
      return s;
  return MFSDP_OK;
}

mfsdp_status mfsdp_step::widenGrad(ParamState &ps) {
  if (!ps.bf16() || ps.gradWide || !ps.grad)
    return MFSDP_OK;
  if (ps.halfGrad)
    // Its buffer has room for the bf16 elements only (BufferSizes.h:
    // halfGradient); no path of a bf16 reduction widens it.
    return fail(MFSDP_ERROR_PLAN, "the gradient of '" + ps.name +
                                      "' is kept in bf16 at 2 bytes an element "
                                      "and cannot be widened to fp32 in place");
  if (auto s = widenInPlace(ps.grad, ps.fullSize, "widening the gradient of '" + ps.name + "'"))
    return s;
  ps.gradWide = true;
  return MFSDP_OK;
}

mfsdp_status mfsdp_step::narrowGrad(ParamState &ps) {
  if (!ps.gradWide || !ps.grad)
    return MFSDP_OK;
  if (auto s = narrowInPlace(ps.grad, ps.fullSize,
                             "narrowing the gradient of '" + ps.name + "'"))
    return s;
  ps.gradWide = false;
  return MFSDP_OK;
}

mfsdp_status mfsdp_step::finishBF16(const BF16Reduction &r, const std::string &what) {
  mfsdp_status s = MFSDP_OK;
  if (r.send)
    s = widenInPlace(r.send, r.sendCount, "widening back the gradient sent by " + what);
  if (R > 1) {
    // Every rank calls it, with nothing when it keeps nothing, and after
    // a failure too (the same sequence on every rank); the first failure
    // is the one to report.
    const std::string before = s ? error : std::string();
    const mfsdp_status a =
        comm(backend->allReduceBF16(Group::Replicate, upperHalf(r.recv, r.recvCount),
                                    r.recvCount, nullptr),
             ("the all-reduce over replicas (bf16) after " + what).c_str());
    if (!s)
      s = a;
    else
      error = before;
  }
  if (!s)
    s = widenInPlace(r.recv, r.recvCount, "widening the reduced gradient of " + what);
  return s;
}

mfsdp_status mfsdp_step::reduceParamBF16(int32_t p) {
  bool async = true; // started, but for block shards packed in staging
  ParamState &ps = params[p];
  const int64_t n = ps.elements();
  const std::string what = "'" + ps.name + "'";
  // What is sent: a bf16 compute copy's gradient as the trainer wrote it
  // (gradBF16(); narrowed again if a reduction widened it), any other
  // gradient narrowed in place and widened back once sent; block shards
  // and replicated tensors from a buffer of the runtime's.
  float *send = nullptr;
  const uint16_t *from = nullptr; // the bf16 elements sent (null: send's upper half)
  int64_t total = 0;
  bool restore = false;
  float *staging = nullptr; // block shards packed in the shared staging buffer
  std::vector<int64_t> counts;
  BF16Reduction r;
  r.on = true;
  r.recv = ps.gradShard;
  switch (ps.desc.placement) {
  case MFSDP_ROW_SHARD:
  case MFSDP_OWNER:
    send = ps.grad;
    if (ps.desc.placement == MFSDP_ROW_SHARD) {
      total = S * ps.localSize; // padded with zeros to S whole chunks
      counts.assign(S, ps.localSize);
    } else {
      total = n;
      counts.assign(S, 0);
      counts[ps.desc.owner] = n;
      r.recv = ps.ownsAny ? ps.gradShard : nullptr;
    }
    if (ps.bf16()) {
      if (auto s = narrowGrad(ps))
        return s;
      from = ps.gradBF16(); // sent as the trainer wrote it
    } else {
      restore = true;
    }
    break;
  case MFSDP_BLOCK_SHARD: {
    // Started: packed by rank into the unit's gathered copy where that may
    // hold it (packsBlocksInCopy), as the fp32 reduction does; else into
    // the staging buffer, and reduced from there at once.
    if (auto s = widenGrad(ps))
      return s;
    if (async && packsBlocksInCopy(ps)) {
      send = ps.full;
    } else {
      if (auto s = blockStaging(ps, staging, "reducing"))
        return s;
      send = staging;
      async = false;
    }
    if (auto s = device(backend->packBlocks(ps.grad, send, ps.grid, 0, ps.grid.blocks()),
                        "packing the blocks of " + what)) {
      backend->release(staging);
      return s;
    }
    total = n;
    counts = ps.blockCounts;
    r.recv = ps.ownsAny ? ps.gradShard : nullptr;
    break;
  }
  default:
    // Reduced in the shard buffer, so the trainer's gradient (kept for
    // accumulation) is never summed twice; a bf16 one kept at 2 bytes an
    // element is copied as it is into the upper half, where the fp32
    // gradient is narrowed below.
    total = n;
    if (ps.halfGrad) {
      if (auto s = device(backend->copy2DBF16(upperHalf(ps.gradShard, n), n,
                                              ps.gradBF16(), n, n, 1),
                          "copy"))
        return s;
      break;
    }
    if (auto s = widenGrad(ps))
      return s;
    if (auto s = device(backend->copy(ps.gradShard, ps.grad, n), "copy"))
      return s;
  }
  r.recvCount = counts.empty() ? n : counts[shardRank];
  const bool narrow = send && !(ps.bf16() && send == ps.grad);
  if (narrow)
    if (auto s = narrowInPlace(send, total, "narrowing the gradient of " + what + " to bf16")) {
      backend->release(staging);
      return s;
    }
  if (restore) {
    r.send = send;
    r.sendCount = total;
  }
  if (!send && !ps.halfGrad)
    if (auto s = narrowInPlace(ps.gradShard, n, "narrowing the gradient of " + what + " to bf16"))
      return s;
  if (!from)
    from = upperHalf(send, total);
  CommHandle handle = 0;
  const int rc =
      send ? backend->reduceScatterBF16(Group::Shard, from,
                                        upperHalf(r.recv, r.recvCount), counts,
                                        async ? &handle : nullptr)
           : backend->allReduceBF16(Group::Shard, upperHalf(ps.gradShard, n), n,
                                    async ? &handle : nullptr);
  int64_t sent = send ? 0 : n;
  for (int64_t c : counts)
    sent += c;
  work.reduceBytes += 2 * sent;
  mfsdp_status s = comm(rc, ((async ? "starting the bf16 reduction of "
                                    : "the bf16 reduction of ") + what).c_str());
  if (!s && async) {
    reduceStarted.push_back({p, -1, handle, ps.desc.unit, r});
    ++work.reduceStarts;
    return MFSDP_OK;
  }
  backend->release(staging);
  // After a synchronous failure too, as completeReduction does: the
  // trainer's buffer is widened back, and every rank issues the same
  // all-reduce over replicas, in the same place (no replica waits for one
  // that never comes); the first failure is the one reported. (A start
  // that failed, with others in flight, is not finished here: its
  // all-reduce would come before theirs on this rank only.)
  if (!s || !async)
    s = finishBF16After(s, r, what);
  if (!s)
    s = device(backend->scale(ps.gradShard, ps.localCount,
                              1.f / static_cast<float>(S * R)),
               "scaling");
  if (!s)
    ps.gradReduced = true;
  return s;
}

mfsdp_status mfsdp_step::gatherPacked(const ParamState &ps, const float *local,
                                      float *packed) {
  return comm(backend->allGatherV(Group::Shard, ps.ownsAny ? local : nullptr,
                                  packed, ps.blockCounts),
              "all-gather-v of blocks");
}

mfsdp_status mfsdp_step::gather(int32_t unit, bool forBackward, bool defer) {
  for (int32_t b : unitBuckets[unit]) {
    about(b, -1);
    if (!bucketGathered(b))
      if (auto s = gatherBucket(b, forBackward, nullptr, defer))
        return s;
  }
  for (int32_t p : unitParams[unit]) {
    ParamState &ps = params[p];
    if (ps.full || ps.bucket >= 0)
      continue;
    ps.fullAt = forBackward ? ps.at.full_backward : ps.at.full;
    if (auto s = place(ps.fullAt, ps.fullFloats(), ps.full,
                       "the gathered '" + ps.name + "'" +
                           (forBackward ? " for backward" : "")))
      return s;
    about(-1, p);
    if (mfsdp_status s = gatherCompute(ps, nullptr)) {
      backend->release(ps.full);
      ps.full = nullptr;
      return s;
    }
  }
  return MFSDP_OK;
}

mfsdp_status mfsdp_step::reduce(int32_t unit) {
  const float scale = 1.f / static_cast<float>(S * R);
  for (int32_t b : unitBuckets[unit]) {
    CommHandle handle = 0;
    about(b, -1);
    BF16Reduction bf16;
    if (auto s = reduceBF16() ? reduceBucketBF16(b, handle, bf16) : reduceBucket(b, handle))
      return s;
    reduceStarted.push_back({-1, b, handle, unit, bf16});
    ++work.reduceStarts;
  }
  for (int32_t p : unitParams[unit]) {
    ParamState &ps = params[p];
    if (ps.bucket >= 0)
      continue;
    about(-1, p);
    if (reduceBF16()) {
      if (auto s = reduceParamBF16(p))
        return s;
      continue;
    }
    const int64_t n = ps.elements();
    // bf16: reduced in fp32 (widened exactly from the trainer's bf16).
    if (auto s = widenGrad(ps))
      return s;
    // A block shard's gradient is packed by rank into the unit's gathered
    // copy where that may hold it (packsBlocksInCopy; the shared staging
    // buffer may not: the next unit's gather may use it); else it goes
    // through the staging buffer at once.
    const bool packInCopy = packsBlocksInCopy(ps);
    // Every placement sends the whole (padded) gradient once.
    work.reduceBytes +=
        4 * (ps.desc.placement == MFSDP_ROW_SHARD ? S * ps.localSize : n);
    if (ps.desc.placement != MFSDP_BLOCK_SHARD || packInCopy) {
      CommHandle handle = 0;
      int rc = 0;
      if (packInCopy) {
        if (auto s = device(backend->packBlocks(ps.grad, ps.full, ps.grid, 0,
                                                ps.grid.blocks()),
                            "packing the blocks of '" + ps.name + "'"))
          return s;
        rc = backend->startReduceScatterV(Group::Shard, ps.full,
                                          ps.ownsAny ? ps.gradShard : nullptr,
                                          ps.blockCounts, handle);
      } else if (ps.desc.placement == MFSDP_ROW_SHARD) {
        rc = backend->startReduceScatter(Group::Shard, ps.grad, ps.gradShard,
                                         ps.localSize, handle);
      } else if (ps.desc.placement == MFSDP_OWNER) {
        std::vector<int64_t> counts(S, 0);
        counts[ps.desc.owner] = n;
        rc = backend->startReduceScatterV(Group::Shard, ps.grad,
                                          ps.ownsAny ? ps.gradShard : nullptr,
                                          counts, handle);
      } else {
        if (auto s = device(backend->copy(ps.gradShard, ps.grad, n), "copy"))
          return s;
        rc = backend->startAllReduce(Group::Shard, ps.gradShard, n, handle);
      }
      if (auto s = comm(rc, "starting the reduction"))
        return s;
      reduceStarted.push_back({p, -1, handle, unit});
      ++work.reduceStarts;
      continue;
    }
    // A block shard without a copy to pack into (ZeRO-1/2's copy is the
    // parameter itself): the whole gradient packed by rank through the
    // staging buffer, then each rank's blocks reduced to it, at once.
    {
      float *packed = nullptr;
      if (auto s = blockStaging(ps, packed, "reducing"))
        return s;
      mfsdp_status s =
          device(backend->packBlocks(ps.grad, packed, ps.grid, 0, ps.grid.blocks()),
                 "packing the blocks of '" + ps.name + "'");
      if (!s)
        s = comm(backend->reduceScatterV(Group::Shard, packed,
                                         ps.ownsAny ? ps.gradShard : nullptr,
                                         ps.blockCounts),
                 "reduce-scatter-v of blocks");
      backend->release(packed);
      if (s)
        return s;
    }
    if (R > 1) {
      // Every rank calls it, with nothing when it keeps nothing.
      if (auto s = comm(backend->allReduce(Group::Replicate, ps.gradShard,
                                           ps.localCount),
                        "all-reduce over replicas"))
        return s;
    }
    if (auto s = device(backend->scale(ps.gradShard, ps.localCount, scale),
                        "scaling"))
      return s;
    ps.gradReduced = true;
  }
  return MFSDP_OK;
}

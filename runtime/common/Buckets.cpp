//===- Buckets.cpp - The bucket engine ------------------------------------===//
//
// A bucket of the plan (mfsdp_bucket) is gathered and reduced by one
// collective: row shards through a staging buffer holding every rank's
// chunk (packed and unpacked by the plan's kernels, or by strided copies),
// owned matrices straight between the members' buffers, which the memory
// plan lays out in one piece.
//
//===----------------------------------------------------------------------===//
#include "Step.h"

#include <string>
#include <vector>

using namespace mfsdp::rt;

/// A row-shard bucket's gradients packed by rank into its reduce staging
/// buffer (placed): the plan's kernel, which writes the whole buffer, gaps
/// included, or one strided copy per member after zeroing the gaps.
mfsdp_status mfsdp_step::packGradients(int32_t b, BucketState &bs) {
  mfsdp_status s = MFSDP_OK;
  if (bs.kernels.pack) {
    std::vector<const float *> grad;
    for (int32_t p : bs.members)
      grad.push_back(params[p].grad);
    Trace::Span span = Trace::kernel(trace.get(), "pack");
    return device(bs.kernels.pack(grad.data(), bs.staging, backend->kernelStream()),
                  "the plan's pack kernel of bucket " + std::to_string(b));
  }
  if (bs.gaps)
    s = device(backend->zero(bs.staging, S * bs.chunk), "zero-fill");
  for (size_t j = 0; !s && j < bs.members.size(); ++j) {
    ParamState &ps = params[bs.members[j]];
    s = device(backend->copy2D(bs.staging + bs.rel[j], bs.chunk, ps.grad, ps.localSize,
                               ps.localSize, S),
               "packing bucket " + std::to_string(b));
  }
  return s;
}

mfsdp_status mfsdp_step::placeStaging(BucketState &bs, int which,
                                      const std::string &what) {
  const int64_t at[3] = {bs.stagingAt.gather, bs.stagingAt.gather_backward,
                         bs.stagingAt.reduce};
  bs.stagingAtNow = at[which];
  // A bf16 bucket's gathers stage bf16 chunks, and a bf16 reduction bf16
  // gradients (the memory plan's half).
  const int64_t elements = S * bs.chunk;
  const bool half = which < 2 ? bs.bf16 : reduceBF16();
  return place(at[which], half ? (elements + 1) / 2 : elements, bs.staging, what);
}

mfsdp_status mfsdp_step::gatherBucket(int32_t b, bool forBackward, CommHandle *handle,
                                      bool defer) {
  BucketState &bs = buckets[b];
  const std::string what = "bucket " + std::to_string(b) + " (unit " +
                           std::to_string(bs.unit) + ")";
  for (int32_t p : bs.members)
    releaseFull(params[p]);
  const bool image = !bs.rows && bs.bf16;
  for (int32_t p : bs.members) {
    ParamState &ps = params[p];
    ps.fullAt = forBackward ? ps.at.full_backward : ps.at.full;
    if (image && ps.imageAt > 0) {
      // A view into the image the first member holds.
      ps.full = reinterpret_cast<float *>(params[bs.members.front()].fullBF16() +
                                          ps.imageAt);
      continue;
    }
    if (auto s = place(ps.fullAt, image ? (bs.span + 1) / 2 : ps.fullFloats(), ps.full,
                       image ? "the gathered " + what + (forBackward ? " for backward" : "")
                             : "the gathered '" + ps.name + "'" +
                                   (forBackward ? " for backward" : ""))) {
      for (int32_t q : bs.members)
        releaseFull(params[q]);
      return s;
    }
  }
  ParamState &first = params[bs.members.front()];
  int rc = 0;
  if (bs.rows) {
    if (auto s = placeStaging(bs, forBackward && plan.zero >= 3 ? 1 : 0,
                              "the gather staging of " + what)) {
      for (int32_t q : bs.members)
        releaseFull(params[q]);
      return s;
    }
    if (bs.bf16) {
      // This rank's chunk cast to bf16 at its place in the staging buffer,
      // then all-gathered in place.
      uint16_t *staging = reinterpret_cast<uint16_t *>(bs.staging);
      uint16_t *mine = staging + shardRank * bs.chunk;
      if (auto s = device(backend->castToBF16(first.master, mine, bs.chunk),
                          "casting " + what + " to bf16")) {
        releaseStaging(bs);
        for (int32_t q : bs.members)
          releaseFull(params[q]);
        return s;
      }
      rc = backend->allGatherBF16(Group::Shard, mine, staging,
                                  std::vector<int64_t>(S, bs.chunk), handle);
    } else {
      rc = handle ? backend->startAllGather(Group::Shard, first.master, bs.staging,
                                            bs.chunk, *handle)
                  : backend->allGather(Group::Shard, first.master, bs.staging, bs.chunk);
    }
    work.gatherBytes += S * bs.chunk * (bs.bf16 ? 2 : 4);
  } else if (bs.bf16) {
    // The image: every owner's span in bf16 where its floats lie in the
    // fp32 layout (this rank's masters cast there first), gathered in
    // place; each member's copy is its place in it.
    uint16_t *packed = first.fullBF16();
    int64_t at = 0;
    for (int64_t r = 0; r < shardRank; ++r)
      at += bs.counts[r];
    if (bs.firstMine >= 0)
      if (auto s = device(backend->castToBF16(params[bs.firstMine].master, packed + at,
                                              bs.mine),
                          "casting " + what + " to bf16")) {
        for (int32_t q : bs.members)
          releaseFull(params[q]);
        return s;
      }
    rc = backend->allGatherBF16(Group::Shard, bs.firstMine >= 0 ? packed + at : nullptr,
                                packed, bs.counts, handle);
    work.gatherBytes += bs.span * 2;
  } else {
    const float *send = bs.firstMine >= 0 ? params[bs.firstMine].master : nullptr;
    rc = handle ? backend->startAllGatherV(Group::Shard, send, first.full, bs.counts,
                                           *handle)
                : backend->allGatherV(Group::Shard, send, first.full, bs.counts);
    work.gatherBytes += bs.span * 4;
  }
  ++work.bucketGathers;
  mfsdp_status s = comm(rc, ((handle ? "starting the all-gather of "
                                     : "the all-gather of ") + what).c_str());
  if (s || !handle)
    return finishBucketGather(b, s, defer);
  return MFSDP_OK;
}

mfsdp_status mfsdp_step::finishBucketGather(int32_t b, mfsdp_status s, bool defer) {
  BucketState &bs = buckets[b];
  if (!s && bs.rows && defer) {
    // The program unpacks it (MFSDP_PROGRAM_UNPACK, next in the hook).
    setUnpackDue(bs, true);
    return MFSDP_OK;
  }
  if (!s && bs.rows)
    return unpackBucket(b);
  return endBucketGather(bs, s);
}

mfsdp_status mfsdp_step::endBucketGather(BucketState &bs, mfsdp_status s) {
  if (bs.rows)
    releaseStaging(bs);
  if (s)
    for (int32_t p : bs.members)
      releaseFull(params[p]);
  return s;
}

mfsdp_status mfsdp_step::unpackBucket(int32_t b) {
  BucketState &bs = buckets[b];
  setUnpackDue(bs, false);
  mfsdp_status s = MFSDP_OK;
  for (int32_t p : bs.members)
    if (!s && !params[p].full)
      s = fail(MFSDP_ERROR_ORDER, "unpacking bucket " + std::to_string(b) + ": '" +
                                      params[p].name +
                                      "' has no gathered copy (released before the unpack)");
  if (!s && bs.kernels.unpack && !bs.bf16) {
    // The plan's kernel: one pass with the bucket's constants.
    std::vector<float *> full;
    for (int32_t p : bs.members)
      full.push_back(params[p].full);
    Trace::Span span = Trace::kernel(trace.get(), "unpack");
    s = device(bs.kernels.unpack(bs.staging, full.data(), backend->kernelStream()),
               "the plan's unpack kernel of bucket " + std::to_string(b));
  }
  const std::string unpacking = "unpacking bucket " + std::to_string(b);
  const uint16_t *packed = reinterpret_cast<const uint16_t *>(bs.staging);
  for (size_t j = 0; j < bs.members.size(); ++j) {
    ParamState &ps = params[bs.members[j]];
    if (!s && bs.bf16)
      // (The plan's kernels are fp32's.)
      s = device(backend->copy2DBF16(ps.fullBF16(), ps.localSize, packed + bs.rel[j],
                                     bs.chunk, ps.localSize, S),
                 unpacking);
    else if (!s && !bs.kernels.unpack)
      s = device(backend->copy2D(ps.full, ps.localSize, bs.staging + bs.rel[j],
                                 bs.chunk, ps.localSize, S),
                 unpacking);
  }
  return endBucketGather(bs, s);
}

mfsdp_status mfsdp_step::packBucket(int32_t b) {
  BucketState &bs = buckets[b];
  if (!bs.rows || bs.packed)
    return MFSDP_OK;
  const std::string what = "bucket " + std::to_string(b) + " (unit " +
                           std::to_string(bs.unit) + ")";
  if (!reduceBF16())
    for (int32_t p : bs.members)
      if (auto s = widenGrad(params[p]))
        return s;
  if (auto s = placeStaging(bs, 2, "the reduce staging of " + what))
    return s;
  mfsdp_status s = MFSDP_OK;
  if (!reduceBF16()) {
    s = packGradients(b, bs);
  } else {
    // The members' gradients packed by rank straight into the bf16 staging
    // buffer (half an fp32 one): an fp32 gradient rounded on the way, a
    // bf16 one (the trainer's, never widened) copied as it is.
    uint16_t *packed = reinterpret_cast<uint16_t *>(bs.staging);
    if (bs.gaps)
      s = device(backend->zero(bs.staging, (S * bs.chunk + 1) / 2), "zero-fill");
    const std::string packing = "packing " + what + " in bf16";
    for (size_t j = 0; !s && j < bs.members.size(); ++j) {
      ParamState &ps = params[bs.members[j]];
      if (ps.bf16() && !ps.gradWide)
        s = device(backend->copy2DBF16(packed + bs.rel[j], bs.chunk, ps.gradBF16(),
                                       ps.localSize, ps.localSize, S),
                   packing);
      else
        s = device(backend->castToBF16Strided(packed + bs.rel[j], bs.chunk, ps.grad,
                                              ps.localSize, ps.localSize, S),
                   packing);
    }
  }
  if (s) {
    releaseStaging(bs);
    return s;
  }
  bs.packed = true;
  return MFSDP_OK;
}

mfsdp_status mfsdp_step::packedForReduction(int32_t b) {
  BucketState &bs = buckets[b];
  // The program packs in an op of its own before the start.
  if (!bs.packed)
    return fail(MFSDP_ERROR_PLAN,
                "the reduction of bucket " + std::to_string(b) + " (unit " +
                    std::to_string(bs.unit) +
                    ") starts before the program packed it (MFSDP_PROGRAM_PACK)");
  bs.packed = false; // the staging is the collective's now
  return MFSDP_OK;
}

mfsdp_status mfsdp_step::reduceBucketBF16(int32_t b, CommHandle &handle,
                                          BF16Reduction &r) {
  BucketState &bs = buckets[b];
  const std::string what = "bucket " + std::to_string(b) + " (unit " +
                           std::to_string(bs.unit) + ")";
  if (!bs.rows && !bs.bf16)
    for (int32_t p : bs.members)
      if (auto s = widenGrad(params[p]))
        return s;
  ParamState &first = params[bs.members.front()];
  r = BF16Reduction{};
  r.on = true;
  shardSpan(bs, r.recv, r.recvCount);
  float *send = nullptr;
  const uint16_t *from = nullptr;
  int64_t total = 0;
  std::vector<int64_t> counts;
  if (bs.rows) {
    // Packed by the program's MFSDP_PROGRAM_PACK.
    if (auto s = packedForReduction(b))
      return s;
    total = S * bs.chunk;
    counts.assign(S, bs.chunk);
    from = reinterpret_cast<const uint16_t *>(bs.staging);
  } else if (bs.bf16) {
    // bf16 gradients: the image, sent as the trainer wrote it.
    total = bs.span;
    counts = bs.counts;
    from = first.gradBF16();
  } else {
    // The members' gradients, one span in owner order, narrowed in place
    // and widened back (exactly) once sent.
    send = first.grad;
    total = bs.span;
    counts = bs.counts;
    if (auto s = narrowInPlace(send, total, "narrowing " + what + " to bf16"))
      return s;
    r.send = send;
    r.sendCount = total;
  }
  if (!from)
    from = reinterpret_cast<const uint16_t *>(send) + total;
  uint16_t *to = r.recv ? reinterpret_cast<uint16_t *>(r.recv) + r.recvCount : nullptr;
  const int rc = backend->reduceScatterBF16(Group::Shard, from, to, counts, &handle);
  ++work.bucketReductions;
  work.reduceBytes += 2 * total;
  mfsdp_status s = comm(rc, ("starting the bf16 reduce-scatter of " + what).c_str());
  // Started: the staging is released and `r` finished by completeReduction.
  // A start that failed, with others in flight, is not finished here: its
  // all-reduce over replicas would come before theirs on this rank only.
  if (s && bs.rows)
    releaseStaging(bs);
  return s;
}

mfsdp_status mfsdp_step::reduceBucket(int32_t b, CommHandle &handle) {
  BucketState &bs = buckets[b];
  const std::string what = "bucket " + std::to_string(b) + " (unit " +
                           std::to_string(bs.unit) + ")";
  if (bs.rows) {
    // Packed by the program's MFSDP_PROGRAM_PACK.
    if (auto s = packedForReduction(b))
      return s;
  } else {
    for (int32_t p : bs.members)
      if (auto s = widenGrad(params[p]))
        return s;
  }
  ParamState &first = params[bs.members.front()];
  float *shards = nullptr; // this rank's grad_shard span
  int64_t count = 0;
  shardSpan(bs, shards, count);
  const int rc =
      bs.rows ? backend->startReduceScatter(Group::Shard, bs.staging, shards, count, handle)
              : backend->startReduceScatterV(Group::Shard, first.grad, shards, bs.counts,
                                             handle);
  ++work.bucketReductions;
  work.reduceBytes += 4 * (bs.rows ? S * bs.chunk : bs.span);
  mfsdp_status s = comm(rc, ("starting the reduce-scatter of " + what).c_str());
  // Started: the staging is released by completeReduction.
  if (s && bs.rows)
    releaseStaging(bs);
  return s;
}

mfsdp_status mfsdp_step::layOutBuckets() {
  unitBuckets.assign(plan.num_units, {});
  if (plan.num_buckets == 0 && !plan.buckets)
    return MFSDP_OK;
  auto bad = [&](std::string why) {
    return fail(MFSDP_ERROR_PLAN, "invalid plan: " + why);
  };
  if (plan.num_buckets < 0 || (plan.num_buckets > 0 && !plan.buckets))
    return bad("num_buckets is " + std::to_string(plan.num_buckets) +
               " with buckets " + (plan.buckets ? "set" : "NULL"));
  if (!memory || !memory->buckets)
    return bad("buckets need the static memory plan, with their staging "
               "offsets (mfsdp_memory_plan.buckets), which lays their "
               "members out in one piece");
  auto off = [](int64_t bytes) { return bytes / static_cast<int64_t>(sizeof(float)); };
  for (int32_t b = 0; b < plan.num_buckets; ++b) {
    const mfsdp_bucket &k = plan.buckets[b];
    const std::string name = "bucket " + std::to_string(b);
    if (k.unit < 0 || k.unit >= plan.num_units || k.num_params < 1 || !k.params ||
        (k.placement != MFSDP_ROW_SHARD && k.placement != MFSDP_OWNER))
      return bad(name + " needs a unit in [0, " + std::to_string(plan.num_units) +
                 "), members, and placement MFSDP_ROW_SHARD or MFSDP_OWNER");
    BucketState bs;
    bs.unit = k.unit;
    bs.rows = k.placement == MFSDP_ROW_SHARD;
    bs.stagingAt = memory->buckets[b];
    const mfsdp_bucket_kernels *table =
        backend->device().device_type == kDLCUDA ? plan.cuda_kernels : plan.host_kernels;
    if (table)
      bs.kernels = table[b];
    for (int32_t j = 0; j < k.num_params; ++j) {
      const int32_t p = k.params[j];
      if (p < 0 || p >= plan.num_params)
        return bad(name + " names parameter " + std::to_string(p) + ", out of range");
      ParamState &ps = params[p];
      if (ps.bucket >= 0)
        return bad("'" + ps.name + "' is in bucket " + std::to_string(ps.bucket) +
                   " and in " + name);
      if (ps.desc.unit != k.unit || ps.desc.placement != k.placement)
        return bad("'" + ps.name + "' (unit " + std::to_string(ps.desc.unit) +
                   ") is in " + name + " of unit " + std::to_string(k.unit) +
                   " and another placement or unit");
      if (!bs.rows && j > 0 && params[bs.members.back()].desc.owner > ps.desc.owner)
        return bad(name + " is not ordered by owner at '" + ps.name + "'");
      if (j > 0 && ps.bf16() != bs.bf16)
        return bad(name + " mixes fp32 and bf16 compute copies ('" + ps.name + "')");
      bs.bf16 = ps.bf16();
      ps.bucket = b;
      bs.members.push_back(p);
    }
    // Offsets relative to the first member, in floats; each kind's must
    // repeat the reference layout.
    auto rel = [&](int32_t p, int64_t mfsdp_param_offsets::*f, int32_t base) {
      return off(params[p].at.*f - params[base].at.*f);
    };
    const int32_t m0 = bs.members.front();
    int64_t end = 0;
    // Each member starts where the one before it ends, rounded up to the
    // arena's alignment: the gap between them belongs to the one before
    // (its arena block), so no other buffer can lie there, and a
    // collective over the bucket's span reads and writes only its own.
    auto next = [](int64_t floats) {
      return Arena::roundUp(floats * static_cast<int64_t>(sizeof(float))) /
             static_cast<int64_t>(sizeof(float));
    };
    if (bs.rows) {
      for (int32_t p : bs.members) {
        const int64_t r = rel(p, &mfsdp_param_offsets::master, m0);
        if (r != next(end) || rel(p, &mfsdp_param_offsets::grad_shard, m0) != r)
          return bad("the memory plan does not lay out " + name +
                     "'s masters and reduced gradients in one piece, in order, "
                     "each at the aligned end of the one before, at the same "
                     "distances ('" + params[p].name + "')");
        bs.gaps |= r != end;
        bs.rel.push_back(r);
        end = r + params[p].localSize;
      }
      bs.chunk = end;
      if (bs.stagingAt.gather < 0 || bs.stagingAt.reduce < 0 ||
          (plan.zero >= 3 && bs.stagingAt.gather_backward < 0))
        return bad("the memory plan has no staging buffers for " + name);
    } else {
      bs.counts.assign(S, 0);
      std::vector<int64_t> start(S, -1);
      // bf16 copies: the image, each member's copy at half its distance in
      // the fp32 layout (the bf16 element where its float lies); under a
      // bf16 reduction its gradient too.
      const int64_t copyScale = bs.bf16 ? 2 : 1;
      const int64_t gradScale = bs.bf16 && reduceBF16() ? 2 : 1;
      for (int32_t p : bs.members) {
        ParamState &ps = params[p];
        const int64_t r = rel(p, &mfsdp_param_offsets::grad, m0) * gradScale;
        const int32_t o = ps.desc.owner;
        if (start[o] < 0)
          start[o] = r;
        if (r != next(end) || rel(p, &mfsdp_param_offsets::full, m0) * copyScale != r ||
            (plan.zero >= 3 &&
             rel(p, &mfsdp_param_offsets::full_backward, m0) * copyScale != r))
          return bad("the memory plan does not lay out " + name +
                     "'s gathered copies and gradients in one piece, in owner "
                     "order, each at the aligned end of the one before, at the "
                     "same distances" +
                     (bs.bf16 ? std::string(" (bf16 copies: half the bytes)") : "") +
                     " ('" + ps.name + "')");
        if (bs.bf16) {
          ps.imageOf = static_cast<int32_t>(buckets.size());
          ps.imageAt = r;
        }
        end = r + ps.elements();
      }
      bs.span = end;
      // Each owner's span runs from its first member to the next owner's.
      int64_t next = end;
      for (int32_t o = static_cast<int32_t>(S) - 1; o >= 0; --o)
        if (start[o] >= 0) {
          bs.counts[o] = next - start[o];
          next = start[o];
        }
      for (int32_t p : bs.members) {
        const ParamState &ps = params[p];
        const int32_t o = ps.desc.owner;
        int32_t firstOfOwner = -1;
        for (int32_t q : bs.members)
          if (params[q].desc.owner == o) {
            firstOfOwner = q;
            break;
          }
        const int64_t r = rel(p, &mfsdp_param_offsets::grad, m0) * gradScale - start[o];
        if (rel(p, &mfsdp_param_offsets::master, firstOfOwner) != r ||
            rel(p, &mfsdp_param_offsets::grad_shard, firstOfOwner) != r)
          return bad("the memory plan does not lay out owner " + std::to_string(o) +
                     "'s masters and reduced gradients of " + name +
                     " as they lie in its gathered copy ('" + ps.name + "')");
        if (o == shardRank && bs.firstMine < 0)
          bs.firstMine = p;
      }
      bs.mine = bs.counts[shardRank];
    }
    unitBuckets[k.unit].push_back(b);
    buckets.push_back(std::move(bs));
  }
  return MFSDP_OK;
}

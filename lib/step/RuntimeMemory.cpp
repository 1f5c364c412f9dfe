//===- RuntimeMemory.cpp - The step runtime's static memory plan ----------===//
#include "mfsdp/step/RuntimeMemory.h"

#include "mfsdp/runtime/BufferSizes.h"
#include "mfsdp/step/Schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace mfsdp::step {

namespace {

enum Kind { Master, ExpAvg, ExpAvgSq, GradShard, Full, FullBackward, Grad, NumKinds };
const char *const kKindNames[NumKinds] = {
    "master", "exp_avg", "exp_avg_sq", "grad_shard", "full", "full (backward)",
    "grad"};

int64_t &field(mfsdp_param_offsets &o, int k) {
  switch (k) {
  case Master:
    return o.master;
  case ExpAvg:
    return o.exp_avg;
  case ExpAvgSq:
    return o.exp_avg_sq;
  case GradShard:
    return o.grad_shard;
  case Full:
    return o.full;
  case FullBackward:
    return o.full_backward;
  default:
    return o.grad;
  }
}

} // namespace

RuntimeMemoryPlan planRuntimeMemory(const mfsdp_plan &plan, bool keepGrads,
                                    int64_t alignment, int32_t prefetch) {
  RuntimeMemoryPlan out;
  out.keepGrads = keepGrads;
  out.prefetch = prefetch;
  if (prefetch != 0 && prefetch != 1) {
    out.error = "prefetch depth " + std::to_string(prefetch) + " (expected 0 or 1)";
    return out;
  }
  const int64_t S = plan.dp_shard;
  if (S < 1 || plan.num_params < 0 || plan.num_units < 0 ||
      (plan.num_params > 0 && !plan.params) || alignment < 1) {
    out.error = "invalid plan: dp_shard, counts or parameter table";
    return out;
  }
  const bool zero3 = plan.zero >= 3;
  Step s;
  s.name = "runtime memory";
  s.world = S;
  // buffer index per parameter and kind (-1: none).
  std::vector<std::array<int64_t, NumKinds>> index(plan.num_params);
  std::vector<std::vector<int32_t>> unitParams(plan.num_units);
  int64_t largestWhole = 0;
  bool blockShards = false;
  std::vector<bool> secondCopy; // per buffer: ZeRO-3's backward gather
  for (int32_t i = 0; i < plan.num_params; ++i) {
    const mfsdp_param_desc &d = plan.params[i];
    index[i].fill(-1);
    if (d.unit < 0 || d.unit >= plan.num_units || d.rows < 1 || d.cols < 1 ||
        (d.placement == MFSDP_OWNER && (d.owner < 0 || d.owner >= S))) {
      out.error = fmt::format("invalid plan entry for parameter {} ('{}')", i,
                              d.name ? d.name : "");
      return out;
    }
    unitParams[d.unit].push_back(i);
    // Sizes on the rank that holds the most (owners: the owner; block
    // shards: rank 0, which keeps the most blocks).
    const int64_t holder = d.placement == MFSDP_OWNER ? d.owner : 0;
    blockShards |= d.placement == MFSDP_BLOCK_SHARD;
    const runtime::BufferFloats f = runtime::bufferFloats(d, S, holder);
    // ZeRO-1/2 keep one gathered copy all step; ZeRO-3 gathers one for
    // forward and one for backward, each with its own lifetime.
    const int64_t floats[NumKinds] = {f.master,    f.expAvg, f.expAvgSq,
                                      f.gradShard, f.full,   zero3 ? f.full : 0,
                                      f.grad};
    // The staging buffer holds a whole (padded) tensor.
    largestWhole = std::max(largestWhole, f.full);
    for (int k = 0; k < NumKinds; ++k) {
      if (floats[k] <= 0)
        continue;
      Buffer b;
      b.name = fmt::format("{} {}", d.name ? d.name : "", kKindNames[k]);
      b.bytes = static_cast<double>(floats[k]) * sizeof(float);
      const bool local = k < Full;
      b.persistent = local || (k == Full && !zero3) || (k == Grad && keepGrads);
      b.onlyRank = local && d.placement == MFSDP_OWNER ? d.owner : -1;
      index[i][k] = static_cast<int64_t>(s.buffers.size());
      s.buffers.push_back(std::move(b));
      secondCopy.push_back(k == FullBackward);
    }
  }
  int64_t staging = -1;
  if (largestWhole > 0) {
    Buffer b;
    b.name = "staging";
    b.bytes = static_cast<double>(largestWhole) * sizeof(float);
    // Block shards reorder their packed blocks through it in every gather
    // and reduction, inside the hooks: then it is kept all run.
    b.persistent = blockShards;
    staging = static_cast<int64_t>(s.buffers.size());
    s.buffers.push_back(std::move(b));
    secondCopy.push_back(false);
  }
  auto op = [&](OpKind kind, int64_t buffer) {
    if (buffer < 0 || s.buffers[buffer].persistent)
      return;
    Op o;
    o.kind = kind;
    o.name = kind == OpKind::Alloc ? "alloc" : "free";
    o.writes = {buffer};
    s.ops.push_back(std::move(o));
  };
  // Forward, units in order; backward in reverse, a unit's gathered copy
  // (the recomputation's or the backward gather's) and its gradients
  // together; then a load or store outside the hooks. With prefetch (ZeRO-3)
  // the next unit's copy is allocated in the current unit's pre-hook:
  // forward unit u + 1's at pre_forward(u), backward unit u - 1's at
  // pre_backward(u); and unit u's gradients and backward copy stay live
  // until post_backward(u - 1), while its reduction overlaps that backward.
  const bool ahead = prefetch == 1 && zero3;
  const int32_t N = plan.num_units;
  for (int32_t u = 0; u < N; ++u) {
    if (!ahead || u == 0)
      for (int32_t p : unitParams[u])
        op(OpKind::Alloc, index[p][Full]);
    if (ahead && u + 1 < N)
      for (int32_t p : unitParams[u + 1])
        op(OpKind::Alloc, index[p][Full]);
    for (int32_t p : unitParams[u])
      op(OpKind::Free, index[p][Full]);
  }
  for (int32_t u = N; u-- > 0;) {
    for (int32_t p : unitParams[u]) {
      if (!ahead || u == N - 1)
        op(OpKind::Alloc, index[p][FullBackward]);
      op(OpKind::Alloc, index[p][Grad]);
    }
    if (ahead && u > 0)
      for (int32_t p : unitParams[u - 1])
        op(OpKind::Alloc, index[p][FullBackward]);
    // With prefetch the reduction of unit u runs until post_backward(u - 1)
    // (which waits for it before starting its own): unit u's backward copy
    // and gradients are freed there, unit 0's after the backward.
    const int32_t freed = ahead ? u + 1 : u;
    if (freed < N)
      for (int32_t p : unitParams[freed]) {
        op(OpKind::Free, index[p][FullBackward]);
        op(OpKind::Free, index[p][Grad]);
      }
  }
  if (ahead && N > 0)
    for (int32_t p : unitParams[0]) {
      op(OpKind::Free, index[p][FullBackward]);
      op(OpKind::Free, index[p][Grad]);
    }
  op(OpKind::Alloc, staging);
  op(OpKind::Free, staging);

  MemoryPlan placed = planMemory(s, alignment);
  out.params.resize(plan.num_params);
  for (int32_t i = 0; i < plan.num_params; ++i) {
    for (int k = 0; k < NumKinds; ++k)
      field(out.params[i], k) =
          index[i][k] >= 0 ? s.buffers[index[i][k]].offset : -1;
    if (!zero3) // one gathered copy for the whole step
      out.params[i].full_backward = out.params[i].full;
  }
  out.staging = staging >= 0 ? s.buffers[staging].offset : -1;
  auto rounded = [&](double bytes) {
    const int64_t b = static_cast<int64_t>(bytes);
    return (b + alignment - 1) / alignment * alignment;
  };
  out.arenaBytes.assign(S, 0);
  out.unsharedBytes.assign(S, 0);
  for (int64_t r = 0; r < S; ++r) {
    out.arenaBytes[r] = static_cast<int64_t>(placed.arenaBytes[r]);
    for (size_t b = 0; b < s.buffers.size(); ++b)
      if (!secondCopy[b] && (s.buffers[b].onlyRank < 0 || s.buffers[b].onlyRank == r))
        out.unsharedBytes[r] += rounded(s.buffers[b].bytes);
  }
  return out;
}

} // namespace mfsdp::step

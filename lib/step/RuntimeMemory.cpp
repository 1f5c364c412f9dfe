//===- RuntimeMemory.cpp - The step runtime's static memory plan ----------===//
#include "mfsdp/step/RuntimeMemory.h"

#include "mfsdp/runtime/BufferSizes.h"
#include "mfsdp/runtime/DefaultProgram.h"
#include "mfsdp/runtime/ProgramHooks.h"
#include "mfsdp/step/Schedule.h"

#include "ParamNames.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <string_view>
#include <unordered_map>

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

int64_t field(const mfsdp_param_offsets &o, int k) {
  return field(const_cast<mfsdp_param_offsets &>(o), k);
}

} // namespace

RuntimeMemoryPlan planRuntimeMemory(const mfsdp_plan &plan, bool keepGrads,
                                    int64_t alignment, int32_t prefetch,
                                    const mfsdp_program *program,
                                    const mfsdp_memory_plan *given) {
  RuntimeMemoryPlan out;
  if (given) {
    if (given->num_shard_ranks != plan.dp_shard || !given->arena_bytes ||
        (plan.num_params > 0 && !given->params)) {
      out.error = fmt::format("the given memory plan is for {} dp_shard ranks (the plan "
                              "has {}) or lacks its arena or offsets",
                              given->num_shard_ranks, plan.dp_shard);
      return out;
    }
    if (keepGrads && !given->keep_grads && plan.zero >= 2) {
      out.error = "the given memory plan frees each unit's gradients once they are "
                  "reduced, but this library keeps them between microbatches "
                  "(accumulation): plan it with gradients kept";
      return out;
    }
    keepGrads = keepGrads || given->keep_grads;
  }
  out.keepGrads = keepGrads || plan.zero < 2;
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
  // The buffers and the order the program allocates and frees them in.
  BufferEvents s;
  s.world = S;
  auto rounded = [&](int64_t bytes) {
    return (bytes + alignment - 1) / alignment * alignment;
  };
  // Buffer index per parameter and kind (-1: none) and the parameter's byte
  // offset in it (members of a bucket share one buffer per kind).
  std::vector<std::array<int64_t, NumKinds>> index(plan.num_params);
  std::vector<std::array<int64_t, NumKinds>> within(plan.num_params);
  std::vector<std::vector<int32_t>> unitParams(plan.num_units);
  int64_t largestWhole = 0;
  bool blockShards = false;
  std::vector<bool> secondCopy; // per buffer: ZeRO-3's backward gather
  std::vector<bool> ofBucket;   // per buffer: a bucket's members' (named so)
  // Buffers are named only for a message (s.describe, below): a large
  // model's library has millions.
  auto addBuffer = [&](int64_t bytes, bool persistent, int64_t onlyRank, bool second) {
    Buffer b;
    b.bytes = static_cast<double>(bytes);
    b.persistent = persistent;
    b.onlyRank = onlyRank;
    s.buffers.push_back(std::move(b));
    secondCopy.push_back(second);
    ofBucket.push_back(false);
    return static_cast<int64_t>(s.buffers.size()) - 1;
  };
  std::vector<runtime::BufferFloats> sizes(plan.num_params);
  for (int32_t i = 0; i < plan.num_params; ++i) {
    const mfsdp_param_desc &d = plan.params[i];
    index[i].fill(-1);
    within[i].fill(0);
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
    sizes[i] = runtime::bufferFloats(d, S, holder);
    // The staging buffer holds a whole (padded) tensor.
    largestWhole = std::max(largestWhole, sizes[i].full);
  }
  // A bf16 compute copy takes 2 bytes an element (ceil(n / 2) floats; in
  // an owner bucket, the bucket's copies are one bf16 image of its fp32
  // layout, below). So does its gradient buffer when it is reduced in bf16
  // (runtime::halfGradient); an fp32 reduction widens the bf16 gradient to
  // fp32 in place, in a buffer of fp32's size.
  auto kindFloats = [&](int32_t i, int k) {
    const runtime::BufferFloats &f = sizes[i];
    const int64_t copy =
        plan.params[i].compute_dtype == MFSDP_COMPUTE_BF16 ? (f.full + 1) / 2 : f.full;
    const int64_t grad =
        runtime::gradientFloats(f, runtime::halfGradient(plan.params[i], plan.reduce_dtype));
    // ZeRO-1/2 keep one gathered copy all step; ZeRO-3 gathers one for
    // forward and one for backward, each with its own lifetime.
    const int64_t floats[NumKinds] = {f.master,    f.expAvg, f.expAvgSq,
                                      f.gradShard, copy,     zero3 ? copy : 0,
                                      grad};
    return floats[k];
  };
  // ZeRO-1 keeps the gradients whole all step (only the optimizer state is
  // sharded), as the plan report counts them.
  const bool gradsWhole = keepGrads || plan.zero < 2;
  auto persistentKind = [&](int k) {
    return k < Full || (k == Full && !zero3) || (k == Grad && gradsWhole);
  };
  // A piece of `bytes` (a bucket's members' or a unit's buffer of a kind)
  // and where it starts in the buffer it lies in: its own buffer, or, when
  // planning, for a persistent kind, a pool. Persistent buffers live all
  // step alike, so every piece of a kind on the same ranks (every rank's,
  // or one owner's) goes into one buffer, in the order they come, each at
  // an aligned offset: a large model's plan then places a few hundred
  // buffers rather than millions (an owner's state, a unit and rank each).
  // A given plan is checked piece by piece (nothing pooled), so a plan
  // that places the pieces apart fits as well as one that pools them.
  const bool pooled = !given;
  std::vector<int64_t> pools(pooled ? static_cast<size_t>(S + 1) * NumKinds : 0, -1);
  std::unordered_map<int64_t, int> poolKind; // pool buffer -> kind
  auto piece = [&](int kind, int64_t bytes, int64_t onlyRank,
                   bool second) -> std::pair<int64_t, int64_t> {
    if (!pooled || !persistentKind(kind))
      return {addBuffer(bytes, persistentKind(kind), onlyRank, second), 0};
    int64_t &pool = pools[static_cast<size_t>(onlyRank + 1) * NumKinds + kind];
    if (pool < 0) {
      pool = addBuffer(0, true, onlyRank, false);
      poolKind.emplace(pool, kind);
    }
    // (Each piece at an aligned offset: a half-size bf16 image need not
    // end on one.)
    const int64_t base = rounded(static_cast<int64_t>(s.buffers[pool].bytes));
    s.buffers[pool].bytes = static_cast<double>(base + bytes);
    return {pool, base};
  };

  // Buckets: each member's buffers of the kinds the bucket's collectives
  // read or write in one piece lie in one buffer, in bucket order (row
  // shards: master and grad_shard; owners: full, full_backward and grad,
  // and each owner's master and grad_shard), every member at an aligned
  // offset, so that the gaps are the same wherever the layout repeats.
  // Row-shard buckets get staging buffers for every rank's chunk.
  const int32_t B = plan.num_buckets > 0 && plan.buckets ? plan.num_buckets : 0;
  std::vector<int32_t> bucketOf(plan.num_params, -1);
  std::vector<std::array<int64_t, 3>> staged(B, {-1, -1, -1});
  for (int32_t b = 0; b < B; ++b) {
    const mfsdp_bucket &k = plan.buckets[b];
    if (k.num_params < 1 || !k.params ||
        (k.placement != MFSDP_ROW_SHARD && k.placement != MFSDP_OWNER)) {
      out.error = fmt::format("invalid bucket {}: expected members and a "
                              "placement MFSDP_ROW_SHARD or MFSDP_OWNER", b);
      return out;
    }
    for (int32_t j = 0; j < k.num_params; ++j) {
      const int32_t i = k.params[j];
      std::string why;
      if (i < 0 || i >= plan.num_params)
        why = "is out of range";
      else if (bucketOf[i] >= 0)
        why = fmt::format("is in another bucket ({})", bucketOf[i]);
      else if (plan.params[i].unit != k.unit)
        why = fmt::format("is of another unit ({}, the bucket's {})",
                          plan.params[i].unit, k.unit);
      else if (plan.params[i].placement != k.placement)
        why = "has another placement than the bucket's";
      else if (k.placement == MFSDP_OWNER && j > 0 &&
               plan.params[k.params[j - 1]].owner > plan.params[i].owner)
        why = "is out of owner order (owner buckets go by owner)";
      if (!why.empty()) {
        out.error = fmt::format("invalid bucket {}: member {} (parameter {}) {}", b, j,
                                i, why);
        return out;
      }
      bucketOf[i] = b;
    }
    const bool rows = k.placement == MFSDP_ROW_SHARD;
    // An owner bucket of bf16 copies (all or none) lays its gathered copies
    // out as a bf16 image of the fp32 layout: each member at the bf16
    // element where its float lies in the fp32 layout, so that every
    // owner's span (its masters cast in one piece) is gathered in place in
    // half the bytes; the runtime places the image as one block. Under a
    // bf16 reduction its gradients are such an image too, reduced as they
    // lie into every owner's reduced gradients.
    const bool image = !rows && plan.params[k.params[0]].compute_dtype == MFSDP_COMPUTE_BF16;
    auto group = [&](int kind, int64_t onlyRank) {
      const bool half =
          image && (kind == Full || kind == FullBackward ||
                    (kind == Grad && plan.reduce_dtype == MFSDP_REDUCE_BF16));
      int64_t bytes = 0;
      for (int32_t j = 0; j < k.num_params; ++j) {
        const int32_t i = k.params[j];
        if (onlyRank >= 0 && plan.params[i].owner != onlyRank)
          continue;
        within[i][kind] = half ? bytes / 2 : bytes;
        const int64_t floats = kindFloats(i, kind) > 0 && half
                                   ? (kind == Grad ? sizes[i].grad : sizes[i].full)
                                   : kindFloats(i, kind);
        bytes += rounded(floats * static_cast<int64_t>(sizeof(float)));
      }
      if (half)
        bytes /= 2;
      if (bytes == 0)
        return bytes;
      const auto [buffer, base] = piece(kind, bytes, onlyRank, kind == FullBackward);
      if (!poolKind.count(buffer))
        ofBucket[buffer] = true;
      for (int32_t j = 0; j < k.num_params; ++j) {
        const int32_t i = k.params[j];
        if (onlyRank < 0 || plan.params[i].owner == onlyRank) {
          index[i][kind] = buffer;
          within[i][kind] += base;
        }
      }
      return bytes;
    };
    if (rows) {
      const int64_t chunk = group(Master, -1);
      group(GradShard, -1);
      // A bucket of bf16 copies (all or none) gathers every rank's chunk in
      // bf16: half the bytes. Its reduction stages the gradients in the
      // reduce dtype: fp32, or bf16 (half) packed by a rounding copy.
      const int64_t gathered =
          plan.params[k.params[0]].compute_dtype == MFSDP_COMPUTE_BF16 ? S * chunk / 2
                                                                       : S * chunk;
      const int64_t reduced =
          plan.reduce_dtype == MFSDP_REDUCE_BF16 ? S * chunk / 2 : S * chunk;
      staged[b][0] = addBuffer(gathered, false, -1, false);
      if (zero3)
        staged[b][1] = addBuffer(gathered, false, -1, true);
      staged[b][2] = addBuffer(reduced, false, -1, false);
    } else {
      // Each owner's own state, owners in rank order (the members go by
      // owner): a rank that owns no member has none.
      for (int32_t j = 0; j < k.num_params; ++j) {
        const int64_t r = plan.params[k.params[j]].owner;
        if (j > 0 && plan.params[k.params[j - 1]].owner == r)
          continue;
        group(Master, r);
        group(GradShard, r);
      }
      group(Full, -1);
      group(FullBackward, -1);
      group(Grad, -1);
    }
  }
  // The other parameters: a unit's buffers of one kind (on one rank, for an
  // owner's own state) lie in one piece, each member at an aligned offset.
  // They live alike (the program gathers, frees and reduces a unit whole),
  // so one buffer a unit and kind places them as well as one a parameter
  // would, with a tenth of the buffers and lifetimes on a large model.
  std::vector<std::pair<int64_t, int32_t>> members; // (only rank, parameter)
  for (int32_t u = 0; u < plan.num_units; ++u) {
    for (int k = 0; k < NumKinds; ++k) {
      members.clear();
      for (int32_t i : unitParams[u]) {
        if (kindFloats(i, k) <= 0 || index[i][k] >= 0)
          continue;
        const mfsdp_param_desc &d = plan.params[i];
        members.push_back({k < Full && d.placement == MFSDP_OWNER ? d.owner : -1, i});
      }
      std::stable_sort(members.begin(), members.end(),
                       [](const auto &a, const auto &b) { return a.first < b.first; });
      for (size_t first = 0; first < members.size();) {
        const int64_t rank = members[first].first;
        size_t end = first;
        int64_t bytes = 0;
        for (; end < members.size() && members[end].first == rank; ++end) {
          const int32_t i = members[end].second;
          within[i][k] = bytes;
          bytes += rounded(kindFloats(i, k) * static_cast<int64_t>(sizeof(float)));
        }
        const auto [buffer, base] = piece(k, bytes, rank, k == FullBackward);
        for (size_t j = first; j < end; ++j) {
          index[members[j].second][k] = buffer;
          within[members[j].second][k] += base;
        }
        first = end;
      }
    }
  }
  int64_t staging = -1;
  if (largestWhole > 0)
    // Block shards reorder their packed blocks through it in every gather
    // and reduction, inside the hooks: then it is kept all run.
    staging = addBuffer(largestWhole * static_cast<int64_t>(sizeof(float)), blockShards,
                        -1, false);
  // A buffer's name, worked out from what it holds: "staging", "bucket 3
  // reduce staging", "bucket 3 master" (a bucket's members' buffer of a
  // kind, on one owner's rank for its own state), "<parameter> grad" (a
  // unit's buffer of a kind with one member), "unit 5 master on rank 2"
  // or "unit 5 full" (with several).
  s.describe = [&](size_t at) -> std::string {
    const int64_t buffer = static_cast<int64_t>(at);
    if (buffer == staging)
      return "staging";
    static const char *const stagingNames[3] = {"gather staging", "backward gather staging",
                                                "reduce staging"};
    if (auto it = poolKind.find(buffer); it != poolKind.end()) {
      const int64_t rank = s.buffers[at].onlyRank;
      return rank >= 0 ? fmt::format("{} on rank {}", kKindNames[it->second], rank)
                       : std::string(kKindNames[it->second]);
    }
    for (int32_t b = 0; b < B; ++b)
      for (int j = 0; j < 3; ++j)
        if (staged[b][j] == buffer)
          return fmt::format("bucket {} {}", b, stagingNames[j]);
    for (int32_t i = 0; i < plan.num_params; ++i)
      for (int k = 0; k < NumKinds; ++k) {
        if (index[i][k] != buffer)
          continue;
        if (ofBucket[at])
          return fmt::format("bucket {} {}", bucketOf[i], kKindNames[k]);
        const int32_t u = plan.params[i].unit;
        const int64_t members = std::count_if(
            unitParams[u].begin(), unitParams[u].end(),
            [&](int32_t p) { return index[p][k] == buffer; });
        const int64_t rank = s.buffers[at].onlyRank;
        if (members == 1)
          return fmt::format("{} {}", plan.params[i].name ? plan.params[i].name : "",
                             kKindNames[k]);
        return rank >= 0 ? fmt::format("unit {} {} on rank {}", u, kKindNames[k], rank)
                         : fmt::format("unit {} {}", u, kKindNames[k]);
      }
    return "?";
  };
  // Allocated and freed once however many members name a shared buffer.
  std::vector<bool> live(s.buffers.size(), false);
  auto op = [&](OpKind kind, int64_t buffer) {
    if (buffer < 0 || s.buffers[buffer].persistent ||
        live[buffer] == (kind == OpKind::Alloc))
      return;
    live[buffer] = kind == OpKind::Alloc;
    s.events.push_back({kind == OpKind::Alloc, buffer});
  };
  // A parameter's gathered copy (kind Full or FullBackward) or gradient,
  // and its bucket's staging buffer for that kind: the gather's (forward
  // or backward) or the reduction's. The runtime holds a gather's staging
  // from the gather's start to its unpack (Buckets.cpp: gatherBucket,
  // unpackBucket) and a reduction's from the pack to the reduction's
  // landing; the copies and gradients as long as the unit needs them.
  auto own = [&](OpKind kind, int32_t p, int k) { op(kind, index[p][k]); };
  auto stagingOf = [&](OpKind kind, int32_t p, int k) {
    if (bucketOf[p] >= 0)
      op(kind, staged[bucketOf[p]][k == Full ? 0 : k == FullBackward ? 1 : 2]);
  };
  auto both = [&](OpKind kind, int32_t p, int k) {
    own(kind, p, k);
    stagingOf(kind, p, k);
  };
  // Forward, units in order; backward in reverse; then the optimizer step:
  // the lifetimes the program gives (a plan without one runs the program
  // the runtime derives, runtime/DefaultProgram.h, with the same prefetch),
  // its hooks replayed in a training step's order, each op's buffers
  // allocated or freed as the runtime's executor does
  // (runtime/common/Execute.cpp). With prefetch (ZeRO-3) the next unit's
  // copy is allocated in the current unit's pre-hook: forward unit u + 1's
  // at pre_forward(u), backward unit u - 1's at pre_backward(u); and unit
  // u's gradients and backward copy stay live until its reduction is
  // waited for, post_backward(u - 1), while it overlaps that backward.
  const int32_t N = plan.num_units;
  std::unique_ptr<runtime::OwnedProgram> completed =
      runtime::completeProgram(plan, program, prefetch == 1 && zero3);
  program = &completed->program;
  const std::vector<int32_t> entry = runtime::hookEntries(*program, N);
  const mfsdp_program_hook *optimizerHook = runtime::optimizerStepEntry(program);
  std::vector<int32_t> inFlight; // units whose reductions are in flight
  // A unit's reduction lands (its backward copy and gradients freed)
  // where the runtime waits for it: a WAIT_REDUCTION of that unit, or
  // any other op on the unit (Execute.cpp, Optimizer.cpp); the others
  // stay in flight.
  auto land = [&](int32_t u) {
    auto it = std::find(inFlight.begin(), inFlight.end(), u);
    if (it == inFlight.end())
      return;
    inFlight.erase(it);
    for (int32_t p : unitParams[u]) {
      both(OpKind::Free, p, FullBackward);
      both(OpKind::Free, p, Grad);
    }
  };
  auto landAll = [&]() {
    while (!inFlight.empty())
      land(inFlight.front());
  };
  auto run = [&](const mfsdp_program_hook &k) {
    const bool backward =
        k.hook == MFSDP_HOOK_PRE_BACKWARD || k.hook == MFSDP_HOOK_POST_BACKWARD;
    const int copy = backward ? FullBackward : Full;
    for (int32_t i = k.first_op; i < k.first_op + k.num_ops; ++i) {
      const mfsdp_program_op &o = program->ops[i];
      if (o.unit < 0 || o.unit >= N)
        continue;
      if (o.kind != MFSDP_PROGRAM_START_REDUCTION && o.kind != MFSDP_PROGRAM_PACK)
        land(o.unit);
      switch (o.kind) {
      case MFSDP_PROGRAM_START_GATHER:
      case MFSDP_PROGRAM_WAIT_GATHER:
        for (int32_t p : unitParams[o.unit])
          both(OpKind::Alloc, p, copy);
        break;
      case MFSDP_PROGRAM_UNPACK:
        // The gather's chunks are in the copies: its staging goes.
        for (int32_t p : unitParams[o.unit])
          stagingOf(OpKind::Free, p, copy);
        break;
      case MFSDP_PROGRAM_GATHER:
        // The optimizer step's gather of the updated rows (ZeRO-1/2): it
        // gathers into staging and unpacks at once.
        for (int32_t p : unitParams[o.unit])
          stagingOf(OpKind::Alloc, p, Full);
        for (int32_t p : unitParams[o.unit])
          stagingOf(OpKind::Free, p, Full);
        break;
      case MFSDP_PROGRAM_RELEASE:
        for (int32_t p : unitParams[o.unit])
          both(OpKind::Free, p, copy);
        break;
      case MFSDP_PROGRAM_PLACE_GRADS:
        for (int32_t p : unitParams[o.unit])
          own(OpKind::Alloc, p, Grad);
        break;
      case MFSDP_PROGRAM_PACK:
        // The gradients packed into the reduction's staging.
        for (int32_t p : unitParams[o.unit])
          stagingOf(OpKind::Alloc, p, Grad);
        break;
      case MFSDP_PROGRAM_START_REDUCTION:
        if (std::find(inFlight.begin(), inFlight.end(), o.unit) == inFlight.end())
          inFlight.push_back(o.unit);
        break;
      default:
        break;
      }
    }
  };
  auto runHook = [&](int32_t u, int32_t hook) {
    if (const int32_t h = entry[runtime::hookSlot(u, hook)]; h >= 0)
      run(program->hooks[h]);
  };
  for (int32_t u = 0; u < N; ++u)
    for (int32_t h : {MFSDP_HOOK_PRE_FORWARD, MFSDP_HOOK_POST_FORWARD})
      runHook(u, h);
  for (int32_t u = N; u-- > 0;)
    for (int32_t h : {MFSDP_HOOK_PRE_BACKWARD, MFSDP_HOOK_POST_BACKWARD})
      runHook(u, h);
  if (optimizerHook)
    run(*optimizerHook);
  landAll();
  op(OpKind::Alloc, staging);
  op(OpKind::Free, staging);

  // The placement: planMemory's, or the given plan's offsets and arena.
  MemoryPlan placed;
  if (!given) {
    placed = planMemory(s, alignment);
  } else {
    constexpr int64_t unset = std::numeric_limits<int64_t>::min();
    std::vector<int64_t> at(s.buffers.size(), unset);
    // `buffer` (which holds `what` at `within` bytes) is at `offset - within`.
    // `what` names the member, made only for a message (a million members
    // on a large step).
    auto take = [&](int64_t buffer, int64_t offset, int64_t inside,
                    const auto &what) {
      if (offset < 0) {
        out.error = fmt::format("the given memory plan has no place for {} (offset {})",
                                what(), offset);
        return false;
      }
      const int64_t start = offset - inside;
      if (at[buffer] == unset) {
        at[buffer] = start;
      } else if (at[buffer] != start) {
        out.error = fmt::format(
            "the given memory plan puts {} at {}, but buffer '{}', which holds it {} bytes "
            "in, lies at {} by its other members",
            what(), offset, s.nameOf(static_cast<size_t>(buffer)), inside, at[buffer]);
        return false;
      }
      return true;
    };
    for (int32_t i = 0; i < plan.num_params; ++i) {
      const char *name = plan.params[i].name ? plan.params[i].name : "";
      for (int k = 0; k < NumKinds; ++k) {
        const int64_t o = field(given->params[i], k);
        auto what = [&] {
          return fmt::format("parameter {} ('{}')'s {}", i, name, kKindNames[k]);
        };
        if (index[i][k] >= 0) {
          if (!take(index[i][k], o, within[i][k], what))
            return out;
          continue;
        }
        // No buffer of that kind: the plan says so (-1); without ZeRO-3
        // the backward copy is the forward one.
        const int64_t expected = k == FullBackward && !zero3 ? given->params[i].full : -1;
        if (o != expected) {
          out.error = fmt::format("the given memory plan places {} at {}, which this "
                                  "library has no buffer for (expected {})",
                                  what(), o, expected);
          return out;
        }
      }
    }
    if (staging >= 0 ? !take(staging, given->staging, 0,
                             [] { return std::string("the staging buffer"); })
                     : given->staging != -1) {
      if (out.error.empty())
        out.error = fmt::format("the given memory plan places a staging buffer at {}, "
                                "which this library has none of",
                                given->staging);
      return out;
    }
    if (B > 0 && !given->buckets) {
      out.error = "the given memory plan has no bucket staging for the plan's buckets";
      return out;
    }
    for (int32_t b = 0; b < B; ++b) {
      const mfsdp_bucket_offsets &g = given->buckets[b];
      const int64_t offsets[3] = {g.gather, g.gather_backward, g.reduce};
      const char *const what[3] = {"gather staging", "backward gather staging",
                                   "reduce staging"};
      for (int j = 0; j < 3; ++j) {
        auto name = [&] { return fmt::format("bucket {}'s {}", b, what[j]); };
        if (staged[b][j] >= 0 ? !take(staged[b][j], offsets[j], 0, name)
                              : offsets[j] != -1) {
          if (out.error.empty())
            out.error = fmt::format("the given memory plan places {} at {}, which this "
                                    "library has none of",
                                    name(), offsets[j]);
          return out;
        }
      }
    }
    placed.arenaBytes.assign(S, 0);
    for (int64_t r = 0; r < S; ++r)
      placed.arenaBytes[r] = static_cast<double>(given->arena_bytes[r]);
    for (size_t b = 0; b < s.buffers.size(); ++b) {
      Buffer &buf = s.buffers[b];
      if (at[b] == unset) {
        out.error = fmt::format("the given memory plan has no place for buffer '{}'",
                                s.nameOf(b));
        return out;
      }
      buf.offset = at[b];
      for (int64_t r = 0; r < S; ++r) {
        if (buf.onlyRank >= 0 && buf.onlyRank != r)
          continue;
        const int64_t end = at[b] + static_cast<int64_t>(buf.bytes);
        if (end > given->arena_bytes[r]) {
          out.error = fmt::format("the given memory plan puts buffer '{}' ({} bytes at "
                                  "{}) past the end of rank {}'s arena ({} bytes)",
                                  s.nameOf(b), static_cast<int64_t>(buf.bytes), at[b], r,
                                  given->arena_bytes[r]);
          return out;
        }
      }
    }
  }
  // What the library will run with, checked before it is written: no two
  // buffers live at once share a byte (verifyPlacement, independent of the
  // placement), and every parameter's part of a shared (bucket) buffer
  // lies inside it.
  if (std::vector<ScheduleIssue> issues = verifyPlacement(s, 1); !issues.empty()) {
    out.error = "the memory plan is unsound: " + issues.front().message;
    return out;
  }
  for (int32_t i = 0; i < plan.num_params; ++i)
    for (int k = 0; k < NumKinds; ++k) {
      if (index[i][k] < 0)
        continue;
      const Buffer &buf = s.buffers[index[i][k]];
      // Its elements' bytes: a bf16 copy (and a gradient reduced in bf16)
      // 2 an element, wherever it lies (an owner bucket's bf16 image).
      const bool bf16 = plan.params[i].compute_dtype == MFSDP_COMPUTE_BF16;
      const int64_t bytes =
          k == Full || k == FullBackward
              ? sizes[i].full * (bf16 ? 2 : 4)
          : k == Grad
              ? sizes[i].grad *
                    (runtime::halfGradient(plan.params[i], plan.reduce_dtype) ? 2 : 4)
              : kindFloats(i, k) * 4;
      if (within[i][k] < 0 || within[i][k] + bytes > static_cast<int64_t>(buf.bytes)) {
        out.error = fmt::format("the memory plan is unsound: parameter {}'s {} ({} bytes at "
                                "{}) does not lie inside buffer '{}' ({} bytes)",
                                i, kKindNames[k], bytes, within[i][k],
                                s.nameOf(static_cast<size_t>(index[i][k])),
                                static_cast<int64_t>(buf.bytes));
        return out;
      }
    }
  out.params.resize(plan.num_params);
  for (int32_t i = 0; i < plan.num_params; ++i) {
    for (int k = 0; k < NumKinds; ++k)
      field(out.params[i], k) =
          index[i][k] >= 0 ? s.buffers[index[i][k]].offset + within[i][k] : -1;
    if (!zero3) // one gathered copy for the whole step
      out.params[i].full_backward = out.params[i].full;
  }
  out.staging = staging >= 0 ? s.buffers[staging].offset : -1;
  for (int32_t b = 0; b < B; ++b) {
    mfsdp_bucket_offsets o{-1, -1, -1};
    int64_t *at[3] = {&o.gather, &o.gather_backward, &o.reduce};
    for (int j = 0; j < 3; ++j)
      if (staged[b][j] >= 0)
        *at[j] = s.buffers[staged[b][j]].offset;
    out.buckets.push_back(o);
  }
  out.arenaBytes.assign(S, 0);
  out.unsharedBytes.assign(S, 0);
  // The bytes of the buffers every rank has, and of each rank's own.
  int64_t everyRank = 0;
  for (size_t b = 0; b < s.buffers.size(); ++b) {
    if (secondCopy[b])
      continue;
    const int64_t bytes = rounded(static_cast<int64_t>(s.buffers[b].bytes));
    if (s.buffers[b].onlyRank < 0)
      everyRank += bytes;
    else if (s.buffers[b].onlyRank < S)
      out.unsharedBytes[s.buffers[b].onlyRank] += bytes;
  }
  for (int64_t r = 0; r < S; ++r) {
    out.arenaBytes[r] = static_cast<int64_t>(placed.arenaBytes[r]);
    out.unsharedBytes[r] += everyRank;
  }
  return out;
}

std::vector<RuntimeBucket> runtimeBuckets(const Step &step, const mfsdp_plan &plan,
                                          double limitBytes, int64_t maxMembers,
                                          int64_t alignment) {
  const int64_t S = std::max<int32_t>(plan.dp_shard, 1);
  // Whatever the limit, a bucket's flat buffer stays within what one
  // collective can address on every backend (MPI counts and displacements
  // are ints): a larger bucket would fail mid-step, not at create.
  const double addressable =
      static_cast<double>(std::numeric_limits<int32_t>::max()) * sizeof(float);
  limitBytes = limitBytes > 0 ? std::min(limitBytes, addressable) : addressable;
  // A member's bytes in its bucket's flat buffer.
  auto flatBytes = [&](int32_t p) {
    const mfsdp_param_desc &d = plan.params[p];
    const runtime::BufferFloats f = runtime::bufferFloats(d, S, 0);
    const int64_t floats = d.placement == MFSDP_ROW_SHARD ? f.master : f.full;
    const int64_t bytes = (floats * static_cast<int64_t>(sizeof(float)) + alignment - 1) /
                          alignment * alignment;
    return static_cast<double>(d.placement == MFSDP_ROW_SHARD ? S * bytes : bytes);
  };
  const ParamNames byName(plan);
  std::vector<bool> taken(plan.num_params, false);
  std::vector<RuntimeBucket> out;
  int32_t at = -1; // the parameter named last
  for (const Op &op : step.ops) {
    if (op.kind != OpKind::Collective || op.params.size() < 2 ||
        (op.coll != CollKind::ReduceScatter && op.coll != CollKind::ReduceScatterV &&
         op.coll != CollKind::AllReduce) ||
        op.meshAxes != std::vector<std::string>{"dp_shard"})
      continue;
    // ZeRO-1 all-reduces the gradients (the runtime reduce-scatters them
    // all the same): the members' placement says which bucket.
    int32_t placement =
        op.coll == CollKind::ReduceScatter ? MFSDP_ROW_SHARD : MFSDP_OWNER;
    if (op.coll == CollKind::AllReduce) {
      const int32_t first = byName.find(op.params.front());
      if (first < 0)
        continue;
      placement = plan.params[first].placement;
      if (placement != MFSDP_ROW_SHARD && placement != MFSDP_OWNER)
        continue;
    }
    std::map<int32_t, RuntimeBucket> perUnit;
    for (const std::string &name : op.params) {
      at = byName.find(name, at);
      if (at < 0 || taken[at])
        continue;
      const mfsdp_param_desc &d = plan.params[at];
      if (d.placement != placement)
        continue;
      RuntimeBucket &b = perUnit[d.unit];
      b.unit = d.unit;
      b.placement = placement;
      b.params.push_back(at);
    }
    for (auto &[unit, whole] : perUnit) {
      // Runs within the limits, in order.
      std::vector<RuntimeBucket> runs;
      double bytes = 0;
      for (int32_t p : whole.params) {
        const double mine = flatBytes(p);
        if (mine > limitBytes)
          continue; // alone: no staging for a tensor this large
        if (runs.empty() || bytes + mine > limitBytes ||
            static_cast<int64_t>(runs.back().params.size()) >= maxMembers) {
          runs.push_back({whole.unit, whole.placement, {}});
          bytes = 0;
        }
        runs.back().params.push_back(p);
        bytes += mine;
      }
      for (RuntimeBucket &b : runs) {
        if (b.params.size() < 2)
          continue;
        if (placement == MFSDP_OWNER)
          std::stable_sort(b.params.begin(), b.params.end(), [&](int32_t x, int32_t y) {
            return plan.params[x].owner < plan.params[y].owner;
          });
        for (int32_t p : b.params)
          taken[p] = true;
        out.push_back(std::move(b));
      }
    }
  }
  return out;
}

std::vector<mfsdp_bucket> bucketViews(const std::vector<RuntimeBucket> &buckets) {
  std::vector<mfsdp_bucket> out;
  for (const RuntimeBucket &b : buckets)
    out.push_back({b.unit, b.placement, static_cast<int32_t>(b.params.size()),
                   b.params.data()});
  return out;
}

} // namespace mfsdp::step

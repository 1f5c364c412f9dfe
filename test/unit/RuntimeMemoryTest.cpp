//===- RuntimeMemoryTest.cpp - The runtime's static memory plan -----------===//
//
// Exact arenas worked out by hand for small plans, and an independent
// replay of the hook protocol checking that no two buffers live at the
// same time share a byte.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/BufferSizes.h"
#include "mfsdp/step/RuntimeMemory.h"

#include <cstring>

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace mfsdp;

namespace {

/// Floats of a gathered copy as the runtime places it: bf16 ones 2 bytes
/// an element (no owner buckets in these plans).
int64_t copyFloats(const mfsdp_param_desc &d, const runtime::BufferFloats &f) {
  return d.compute_dtype == MFSDP_COMPUTE_BF16 ? (f.full + 1) / 2 : f.full;
}

/// Floats of a gradient buffer as the runtime places it: a bf16 one 2 bytes
/// an element under the reduce dtype bf16 (no owner buckets in these plans).
int64_t gradFloats(const mfsdp_plan &plan, const mfsdp_param_desc &d,
                   const runtime::BufferFloats &f) {
  const bool half = d.compute_dtype == MFSDP_COMPUTE_BF16 &&
                    plan.reduce_dtype == MFSDP_REDUCE_BF16 &&
                    d.placement != MFSDP_BLOCK_SHARD;
  return half ? (f.grad + 1) / 2 : f.grad;
}

mfsdp_param_desc param(const char *name, int64_t rows, int64_t cols,
                       int32_t unit, int32_t placement = MFSDP_ROW_SHARD,
                       int32_t owner = 0, int32_t optimizer = MFSDP_OPT_ADAMW) {
  mfsdp_param_desc d{};
  d.name = name;
  d.rows = rows;
  d.cols = cols;
  d.unit = unit;
  d.placement = placement;
  d.owner = owner;
  d.optimizer = optimizer;
  return d;
}

mfsdp_plan planOf(const std::vector<mfsdp_param_desc> &params, int32_t shards,
                  int32_t zero, int32_t units) {
  mfsdp_plan p = MFSDP_PLAN_INITIALIZER;
  p.zero = zero;
  p.dp_shard = shards;
  p.dp_replicate = 1;
  p.world = shards;
  p.num_units = units;
  p.num_params = static_cast<int32_t>(params.size());
  p.params = params.data();
  return p;
}

struct Live {
  int64_t lo, hi;
  std::string what;
};

/// Replays the protocol (forward units in order, backward in reverse, then
/// a store) on dp_shard rank `rank`, placing each buffer at its offset, and
/// returns the first clash of two live buffers ("" if none) and the
/// highest byte used.
std::string replay(const mfsdp_plan &plan, const step::RuntimeMemoryPlan &m,
                   int64_t rank, int64_t &highest) {
  std::vector<Live> live;
  highest = 0;
  std::string clash;
  auto add = [&](int64_t at, int64_t floats, std::string what) {
    if (floats <= 0)
      return;
    Live l{at, at + floats * 4, std::move(what)};
    if (at < 0 && clash.empty())
      clash = l.what + " has no place";
    for (const Live &o : live)
      if (l.lo < o.hi && o.lo < l.hi && clash.empty())
        clash = l.what + " overlaps " + o.what;
    highest = std::max(highest, l.hi);
    live.push_back(l);
  };
  auto drop = [&](const std::string &what) {
    for (size_t i = 0; i < live.size(); ++i)
      if (live[i].what == what) {
        live.erase(live.begin() + i);
        return;
      }
  };
  const bool zero3 = plan.zero >= 3;
  for (int32_t i = 0; i < plan.num_params; ++i) {
    const runtime::BufferFloats f =
        runtime::bufferFloats(plan.params[i], plan.dp_shard, rank);
    const mfsdp_param_offsets &o = m.params[i];
    const std::string n = plan.params[i].name;
    add(o.master, f.master, n + " master");
    add(o.exp_avg, f.expAvg, n + " m");
    add(o.exp_avg_sq, f.expAvgSq, n + " v");
    add(o.grad_shard, f.gradShard, n + " grad shard");
    if (!zero3)
      add(o.full, copyFloats(plan.params[i], f), n + " full");
    if (m.keepGrads)
      add(o.grad, gradFloats(plan, plan.params[i], f), n + " grad");
  }
  // A unit's gathered copies (ZeRO-3), forward or backward, come and go
  // separately from its gradients, so prefetch can take them early.
  auto gathered = [&](int32_t u, bool backward, bool live) {
    if (!zero3)
      return;
    for (int32_t i = 0; i < plan.num_params; ++i) {
      if (plan.params[i].unit != u)
        continue;
      const std::string n = std::string(plan.params[i].name) + " gathered";
      if (!live) {
        drop(n);
        continue;
      }
      const runtime::BufferFloats f =
          runtime::bufferFloats(plan.params[i], plan.dp_shard, rank);
      add(backward ? m.params[i].full_backward : m.params[i].full,
          copyFloats(plan.params[i], f), n);
    }
  };
  auto grads = [&](int32_t u, bool live) {
    if (m.keepGrads)
      return;
    for (int32_t i = 0; i < plan.num_params; ++i) {
      if (plan.params[i].unit != u)
        continue;
      const std::string n = std::string(plan.params[i].name) + " grad";
      if (live)
        add(m.params[i].grad,
            gradFloats(plan, plan.params[i],
                       runtime::bufferFloats(plan.params[i], plan.dp_shard, rank)),
            n);
      else
        drop(n);
    }
  };
  // A row-shard bucket's staging buffer (0: forward gather, 1: backward
  // gather, 2: reduction) while the runtime uses it: from the collective's
  // start to its completion. Its size is dp_shard chunks, a chunk the span
  // of the members' masters.
  auto staged = [&](int32_t u, int which, bool live) {
    for (int32_t b = 0; b < plan.num_buckets; ++b) {
      const mfsdp_bucket &k = plan.buckets[b];
      if (k.unit != u || k.placement != MFSDP_ROW_SHARD)
        continue;
      const std::string n = "bucket " + std::to_string(b) + " staging " +
                            std::to_string(which);
      if (!live) {
        drop(n);
        continue;
      }
      const int32_t first = k.params[0], last = k.params[k.num_params - 1];
      const int64_t chunk =
          (m.params[last].master - m.params[first].master) / 4 +
          runtime::bufferFloats(plan.params[last], plan.dp_shard, rank).master;
      const int64_t at[3] = {m.buckets[b].gather, m.buckets[b].gather_backward,
                             m.buckets[b].reduce};
      // A bf16 reduction stages bf16 gradients: half the floats.
      const bool half = which == 2 && plan.reduce_dtype == MFSDP_REDUCE_BF16;
      add(at[which], half ? (plan.dp_shard * chunk + 1) / 2 : plan.dp_shard * chunk, n);
    }
  };
  auto briefly = [&](int32_t u, int which) {
    staged(u, which, true);
    staged(u, which, false);
  };
  // The runtime with prefetch 1: pre_forward(u) has unit u gathered (by
  // the prefetch of pre_forward(u - 1), except unit 0) and starts gathering
  // unit u + 1; pre_backward(u) has unit u's backward copy (prefetched by
  // pre_backward(u + 1), except the last unit), places its gradients and
  // starts unit u - 1's backward gather.
  const bool ahead = m.prefetch == 1;
  const int32_t n = plan.num_units;
  // Gathers the hook waits for use their staging briefly; a prefetch's
  // stays until the next call completes it.
  for (int32_t u = 0; u < n; ++u) {
    if (!ahead || u == 0) {
      gathered(u, false, true);
      if (zero3)
        briefly(u, 0);
    }
    if (ahead && u + 1 < n) {
      gathered(u + 1, false, true);
      staged(u + 1, 0, true);
    }
    // post_forward(u): the prefetch completes first.
    if (ahead && u + 1 < n)
      staged(u + 1, 0, false);
    gathered(u, false, false);
  }
  for (int32_t u = n; u-- > 0;) {
    if (!ahead || u == n - 1) {
      gathered(u, true, true);
      if (zero3)
        briefly(u, 1);
    }
    grads(u, true);
    if (ahead && u > 0) {
      gathered(u - 1, true, true);
      staged(u - 1, 1, true);
    }
    // post_backward(u): the prefetch completes first. With prefetch 1 it
    // then waits for unit u + 1's reduction (overlapped with this
    // backward), which releases unit u + 1's backward copy, gradients and
    // reduce staging, and leaves unit u's running; without, unit u's
    // reduction runs here.
    if (ahead && u > 0)
      staged(u - 1, 1, false);
    if (ahead && u + 1 < n) {
      staged(u + 1, 2, false);
      gathered(u + 1, true, false);
      grads(u + 1, false);
    }
    if (ahead) {
      staged(u, 2, true);
    } else {
      briefly(u, 2);
      gathered(u, true, false);
      grads(u, false);
    }
  }
  if (ahead && n > 0) { // unit 0's reduction, waited for by the next call
    staged(0, 2, false);
    gathered(0, true, false);
    grads(0, false);
  }
  // ZeRO-1/2 gather every unit again after the optimizer step (and loads
  // gather): the staging of each in turn, nothing transient live.
  if (!zero3)
    for (int32_t u = 0; u < n; ++u)
      briefly(u, 0);
  // A store stages a whole tensor, padded as the runtime gathers it.
  int64_t largest = 0;
  for (int32_t i = 0; i < plan.num_params; ++i)
    largest = std::max(largest, plan.params[i].placement == MFSDP_ROW_SHARD
                                    ? (plan.params[i].rows + plan.dp_shard - 1) /
                                          plan.dp_shard * plan.dp_shard *
                                          plan.params[i].cols
                                    : plan.params[i].rows * plan.params[i].cols);
  add(m.staging, largest, "staging");
  return clash;
}

// Three units of one 4x64 AdamW row shard on 2 ranks, ZeRO-3: each rank
// keeps 2 rows (128 floats, 512 B) of master, m, v and reduced gradient
// (6144 B for the three); a gathered copy, a backward copy and a gradient
// are 1024 B each and at most two are live at once (a unit's backward copy
// and gradient): 2048 B shared by all units. 8192 B in all, against
// 3 x (2048 + 1024 gathered + 1024 gradient) + 1024 staging = 13312 B with
// nothing shared.
TEST(RuntimeMemory, ZeroThreeSharesOneUnitsSpace) {
  std::vector<mfsdp_param_desc> ps = {param("a", 4, 64, 0), param("b", 4, 64, 1),
                                      param("c", 4, 64, 2)};
  mfsdp_plan plan = planOf(ps, 2, 3, 3);
  step::RuntimeMemoryPlan m = step::planRuntimeMemory(plan, false);
  ASSERT_TRUE(m.error.empty()) << m.error;
  ASSERT_EQ(m.arenaBytes.size(), 2u);
  EXPECT_EQ(m.arenaBytes[0], 8192);
  EXPECT_EQ(m.arenaBytes[1], 8192);
  EXPECT_EQ(m.unsharedBytes[0], 13312);
  EXPECT_EQ(m.unsharedBytes[1], 13312);
  for (int64_t r = 0; r < 2; ++r) {
    int64_t highest = 0;
    EXPECT_EQ(replay(plan, m, r, highest), "");
    EXPECT_LE(highest, m.arenaBytes[r]);
  }
  for (const mfsdp_param_offsets &o : m.params) {
    EXPECT_EQ(o.master % 256, 0);
    EXPECT_NE(o.full, -1);
    EXPECT_NE(o.full_backward, -1);
  }
}

// bf16 compute copies: the same plan with each gathered copy in 2 bytes an
// element (512 B) and the gradient buffer still fp32-sized (1024 B: the
// reduction widens it in place): one unit's backward copy and gradient,
// 1536 B, shared by all units, above the 6144 B of state: 7680 B, against
// 8192 B with fp32 copies.
/// Three 4x64 bf16 row shards, one a unit, on 2 ranks under ZeRO-3.
std::vector<mfsdp_param_desc> threeBF16RowShards() {
  std::vector<mfsdp_param_desc> ps = {param("a", 4, 64, 0), param("b", 4, 64, 1),
                                      param("c", 4, 64, 2)};
  for (mfsdp_param_desc &d : ps)
    d.compute_dtype = MFSDP_COMPUTE_BF16;
  return ps;
}

/// Plans `plan` (no accumulation) and expects `arena` bytes on both of its
/// 2 ranks, each replaying without a clash within them.
void expectArena(const mfsdp_plan &plan, int64_t arena) {
  step::RuntimeMemoryPlan m = step::planRuntimeMemory(plan, false);
  ASSERT_TRUE(m.error.empty()) << m.error;
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_EQ(m.arenaBytes[r], arena) << "rank " << r;
    int64_t highest = 0;
    EXPECT_EQ(replay(plan, m, r, highest), "");
    EXPECT_LE(highest, m.arenaBytes[r]);
  }
}

TEST(RuntimeMemory, BF16CopiesTakeHalfThePlace) {
  std::vector<mfsdp_param_desc> ps = threeBF16RowShards();
  expectArena(planOf(ps, 2, 3, 3), 7680);
}

// The reduce dtype bf16 with bf16 compute copies: the gradient buffers hold
// the trainer's bf16 gradients as they are (the reduction sends them
// without widening), 2 bytes an element too: 512 B, so one unit's backward
// copy and gradient take 1024 B over the 6144 B of state: 7168 B, against
// 7680 B with an fp32 reduction. A block shard's gradient keeps fp32's
// size (its reduction packs the blocks through fp32), and so does every
// gradient kept for accumulation under the fp32 reduction.
TEST(RuntimeMemory, BF16GradientsTakeHalfThePlaceUnderABF16Reduction) {
  std::vector<mfsdp_param_desc> ps = threeBF16RowShards();
  mfsdp_plan plan = planOf(ps, 2, 3, 3);
  plan.reduce_dtype = MFSDP_REDUCE_BF16;
  expectArena(plan, 7168);
  // Kept for accumulation: three 512 B gradients against three of 1024 B.
  step::RuntimeMemoryPlan kept = step::planRuntimeMemory(plan, true);
  ASSERT_TRUE(kept.error.empty()) << kept.error;
  plan.reduce_dtype = MFSDP_REDUCE_F32;
  step::RuntimeMemoryPlan keptF32 = step::planRuntimeMemory(plan, true);
  ASSERT_TRUE(keptF32.error.empty()) << keptF32.error;
  EXPECT_EQ(keptF32.arenaBytes[0] - kept.arenaBytes[0], 3 * 512);
  int64_t highest = 0;
  plan.reduce_dtype = MFSDP_REDUCE_BF16;
  EXPECT_EQ(replay(plan, kept, 0, highest), "");
  EXPECT_LE(highest, kept.arenaBytes[0]);

  // Block shards: 8x64 in 4x32 blocks on 2 ranks; the gradient is 2048 B
  // whatever the reduce dtype.
  std::vector<mfsdp_param_desc> blocks = {param("w", 8, 64, 0, MFSDP_BLOCK_SHARD)};
  blocks[0].block_rows = 4;
  blocks[0].block_cols = 32;
  blocks[0].compute_dtype = MFSDP_COMPUTE_BF16;
  mfsdp_plan bp = planOf(blocks, 2, 3, 1);
  bp.reduce_dtype = MFSDP_REDUCE_BF16;
  step::RuntimeMemoryPlan bm = step::planRuntimeMemory(bp, false);
  ASSERT_TRUE(bm.error.empty()) << bm.error;
  bp.reduce_dtype = MFSDP_REDUCE_F32;
  step::RuntimeMemoryPlan bmF32 = step::planRuntimeMemory(bp, false);
  ASSERT_TRUE(bmF32.error.empty()) << bmF32.error;
  EXPECT_EQ(bm.arenaBytes[0], bmF32.arenaBytes[0]);
}

// An owner bucket of bf16 copies: its gathered copies are one bf16 image of
// the members' fp32 layout, each member at the bf16 element where its
// gradient's float lies, so the bucket's copy takes half the bytes of the
// fp32 one. w0 (8x8, owner 0) and w1 (16x8, owner 1) on 2 ranks under
// ZeRO-2 (copies kept all step): gradients at 0 and 256 B (64 floats,
// aligned), copies at 0 and 128 B; the copy is 384 B against 768, so 512 B
// of arena blocks against 768 on each rank, and no arena grows.
TEST(RuntimeMemory, BF16OwnerBucketCopiesAreAHalfSizeImage) {
  std::vector<mfsdp_param_desc> ps = {
      param("w0", 8, 8, 0, MFSDP_OWNER, 0, MFSDP_OPT_MUON),
      param("w1", 16, 8, 0, MFSDP_OWNER, 1, MFSDP_OPT_MUON)};
  const std::vector<int32_t> members = {0, 1};
  const mfsdp_bucket bucket{0, MFSDP_OWNER, 2, members.data()};
  mfsdp_plan plan = planOf(ps, 2, 2, 1);
  plan.num_buckets = 1;
  plan.buckets = &bucket;
  step::RuntimeMemoryPlan fp32 = step::planRuntimeMemory(plan, false);
  ASSERT_TRUE(fp32.error.empty()) << fp32.error;
  for (mfsdp_param_desc &d : ps)
    d.compute_dtype = MFSDP_COMPUTE_BF16;
  step::RuntimeMemoryPlan bf16 = step::planRuntimeMemory(plan, false);
  ASSERT_TRUE(bf16.error.empty()) << bf16.error;
  EXPECT_EQ(fp32.params[1].full - fp32.params[0].full, 256);
  EXPECT_EQ(bf16.params[1].grad - bf16.params[0].grad, 256);
  EXPECT_EQ(bf16.params[1].full - bf16.params[0].full, 128);
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_EQ(fp32.unsharedBytes[r] - bf16.unsharedBytes[r], 256) << "rank " << r;
    EXPECT_LE(bf16.arenaBytes[r], fp32.arenaBytes[r]) << "rank " << r;
  }
  // Reduced in bf16, the gradients are such an image too: 384 B against
  // 768, at 0 and 128 B.
  plan.reduce_dtype = MFSDP_REDUCE_BF16;
  step::RuntimeMemoryPlan halfGrads = step::planRuntimeMemory(plan, false);
  ASSERT_TRUE(halfGrads.error.empty()) << halfGrads.error;
  EXPECT_EQ(halfGrads.params[1].grad - halfGrads.params[0].grad, 128);
  EXPECT_EQ(halfGrads.params[1].full - halfGrads.params[0].full, 128);
  for (int64_t r = 0; r < 2; ++r)
    EXPECT_EQ(bf16.unsharedBytes[r] - halfGrads.unsharedBytes[r], 256) << "rank " << r;
}

// Pooled pieces start at aligned offsets: under ZeRO-2 the gathered copies
// live all step, so two units' owner buckets of bf16 copies share one
// buffer, and the first bucket's half-size image (384 B) does not end on
// 256. The second starts at 512 and keeps its members' distance.
TEST(RuntimeMemory, PooledPiecesStayAligned) {
  std::vector<mfsdp_param_desc> ps = {
      param("w0", 8, 8, 0, MFSDP_OWNER, 0, MFSDP_OPT_MUON),
      param("w1", 16, 8, 0, MFSDP_OWNER, 1, MFSDP_OPT_MUON),
      param("v0", 8, 8, 1, MFSDP_OWNER, 0, MFSDP_OPT_MUON),
      param("v1", 16, 8, 1, MFSDP_OWNER, 1, MFSDP_OPT_MUON)};
  for (mfsdp_param_desc &d : ps)
    d.compute_dtype = MFSDP_COMPUTE_BF16;
  const std::vector<int32_t> first = {0, 1}, second = {2, 3};
  const mfsdp_bucket buckets[2] = {{0, MFSDP_OWNER, 2, first.data()},
                                   {1, MFSDP_OWNER, 2, second.data()}};
  mfsdp_plan plan = planOf(ps, 2, 2, 2);
  plan.num_buckets = 2;
  plan.buckets = buckets;
  const step::RuntimeMemoryPlan m = step::planRuntimeMemory(plan, false);
  ASSERT_TRUE(m.error.empty()) << m.error;
  EXPECT_EQ(m.params[2].full - m.params[0].full, 512);
  EXPECT_EQ(m.params[3].full - m.params[2].full, 128);
  for (const mfsdp_param_offsets &o : m.params)
    EXPECT_EQ(o.master % 256, 0);
  EXPECT_EQ(m.params[0].full % 256, 0);
  EXPECT_EQ(m.params[2].full % 256, 0);
  for (int64_t r = 0; r < 2; ++r) {
    int64_t highest = 0;
    EXPECT_EQ(replay(plan, m, r, highest), "") << "rank " << r;
    EXPECT_LE(highest, m.arenaBytes[r]);
  }
}

// Keeping gradients for accumulation: they no longer share space with each
// other; ZeRO-2: one gathered copy for the whole step.
TEST(RuntimeMemory, KeptGradientsAndZeroTwo) {
  std::vector<mfsdp_param_desc> ps = {param("a", 4, 64, 0), param("b", 4, 64, 1),
                                      param("c", 4, 64, 2)};
  mfsdp_plan plan = planOf(ps, 2, 3, 3);
  step::RuntimeMemoryPlan kept = step::planRuntimeMemory(plan, true);
  ASSERT_TRUE(kept.error.empty());
  EXPECT_TRUE(kept.keepGrads);
  // 6144 state + 3072 gradients + at least one 1024 B gathered copy.
  EXPECT_GE(kept.arenaBytes[0], 6144 + 3072 + 1024);
  int64_t highest = 0;
  EXPECT_EQ(replay(plan, kept, 0, highest), "");

  mfsdp_plan two = planOf(ps, 2, 2, 3);
  step::RuntimeMemoryPlan z2 = step::planRuntimeMemory(two, false);
  ASSERT_TRUE(z2.error.empty());
  for (const mfsdp_param_offsets &o : z2.params)
    EXPECT_EQ(o.full_backward, o.full);
  // 6144 state + 3072 gathered copies kept + 1024 for one unit's gradient
  // (the staging buffer shares it).
  EXPECT_EQ(z2.arenaBytes[0], 6144 + 3072 + 1024);
  EXPECT_EQ(replay(two, z2, 1, highest), "");
}

// Owners: the owned matrix's state exists on its owner only, so the other
// rank's arena may be smaller; every rank replays without a clash.
TEST(RuntimeMemory, OwnersAndMixedUnits) {
  std::vector<mfsdp_param_desc> ps = {
      param("emb", 16, 32, 0), param("w0", 32, 32, 1, MFSDP_OWNER, 1, MFSDP_OPT_MUON),
      param("n0", 32, 1, 1, MFSDP_REPLICATE), param("w1", 32, 64, 2, MFSDP_OWNER, 0,
                                                    MFSDP_OPT_MUON),
      param("head", 10, 32, 3, MFSDP_ROW_SHARD, 0, MFSDP_OPT_SGD)};
  mfsdp_plan plan = planOf(ps, 2, 3, 4);
  step::RuntimeMemoryPlan m = step::planRuntimeMemory(plan, false);
  ASSERT_TRUE(m.error.empty()) << m.error;
  for (int64_t r = 0; r < 2; ++r) {
    int64_t highest = 0;
    EXPECT_EQ(replay(plan, m, r, highest), "") << "rank " << r;
    EXPECT_LE(highest, m.arenaBytes[r]);
    EXPECT_LT(m.arenaBytes[r], m.unsharedBytes[r]);
  }
  EXPECT_EQ(m.params[1].exp_avg_sq, -1); // Muon keeps no second moment
  EXPECT_EQ(m.params[4].exp_avg_sq, -1); // nor does SGD
}

// State lives all step: the planner lays every unit's state of a kind on
// the same ranks (every rank's row shards, or one owner's matrices) out as
// one buffer, in unit order, so that a large model's plan places a few
// buffers a rank rather than one a unit. A given plan is checked piece by
// piece: one that places the units' state apart fits as well. 2 ranks,
// ZeRO-3; w0 and w1 (32x32, 4096 B) both owned by rank 1; a0 and a1
// (16x32 row shards, 1024 B a rank).
TEST(RuntimeMemory, StateOfAKindLiesInOnePiece) {
  std::vector<mfsdp_param_desc> ps = {
      param("w0", 32, 32, 0, MFSDP_OWNER, 1, MFSDP_OPT_MUON), param("a0", 16, 32, 0),
      param("w1", 32, 32, 1, MFSDP_OWNER, 1, MFSDP_OPT_MUON), param("a1", 16, 32, 1)};
  mfsdp_plan plan = planOf(ps, 2, 3, 2);
  const step::RuntimeMemoryPlan m = step::planRuntimeMemory(plan, false);
  ASSERT_TRUE(m.error.empty()) << m.error;
  for (int64_t r = 0; r < 2; ++r) {
    int64_t highest = 0;
    EXPECT_EQ(replay(plan, m, r, highest), "") << "rank " << r;
    EXPECT_LE(highest, m.arenaBytes[r]);
  }
  EXPECT_EQ(m.params[2].master, m.params[0].master + 4096);
  EXPECT_EQ(m.params[2].exp_avg, m.params[0].exp_avg + 4096);
  EXPECT_EQ(m.params[2].grad_shard, m.params[0].grad_shard + 4096);
  EXPECT_EQ(m.params[3].master, m.params[1].master + 1024);
  EXPECT_EQ(m.params[3].exp_avg_sq, m.params[1].exp_avg_sq + 1024);

  // The owner's masters swapped: apart from each other's order, taken.
  step::RuntimeMemoryPlan apart = m;
  std::swap(apart.params[0].master, apart.params[2].master);
  const mfsdp_memory_plan given = apart.view();
  const step::RuntimeMemoryPlan taken =
      step::planRuntimeMemory(plan, false, 256, 0, nullptr, &given);
  ASSERT_TRUE(taken.error.empty()) << taken.error;
  EXPECT_EQ(taken.params[0].master, m.params[2].master);
  // Both at one place: refused.
  step::RuntimeMemoryPlan clash = m;
  clash.params[2].master = clash.params[0].master;
  const mfsdp_memory_plan clashing = clash.view();
  EXPECT_NE(step::planRuntimeMemory(plan, false, 256, 0, nullptr, &clashing)
                .error.find("unsound"),
            std::string::npos);
}

// The largest tensor an uneven row shard: 5 rows on 2 ranks are gathered
// as 6 (3 per rank), so the staging buffer holds 6 x 64 floats (1536 B),
// not 5 x 64. ZeRO-2 with kept gradients: the staging buffer is the only
// transient one, at the end of the arena.
TEST(RuntimeMemory, StagingHoldsThePaddedTensor) {
  std::vector<mfsdp_param_desc> ps = {param("v", 5, 64, 0)};
  mfsdp_plan plan = planOf(ps, 2, 2, 1);
  step::RuntimeMemoryPlan m = step::planRuntimeMemory(plan, true);
  ASSERT_TRUE(m.error.empty()) << m.error;
  EXPECT_GE(m.arenaBytes[0] - m.staging, 1536);
  int64_t highest = 0;
  EXPECT_EQ(replay(plan, m, 1, highest), "");
  EXPECT_LE(highest, m.arenaBytes[1]);
}

// Gather prefetch: three units of one 4x64 AdamW row shard on 2 ranks,
// ZeRO-3. Forward holds two units' copies (2048 B). Backward, with the
// reductions overlapped: pre_backward(2) holds c's backward copy and
// gradient and b's prefetched copy (3072 B); pre_backward(1) adds b's
// gradient and a's prefetched copy while c's copy and gradient stay for
// c's reduction in flight (5 x 1024 = 5120 B, the peak); post_backward(1)
// waits for c's, leaving 3072 B, and pre_backward(0) adds a's gradient
// (4096 B). 6144 B of state + 5120 = 11264 B. The replay
// with prefetch finds a clash in the plan made without it (the lifetimes
// really differ), none in the plan made for it.
TEST(RuntimeMemory, PrefetchHoldsTwoUnitsCopies) {
  std::vector<mfsdp_param_desc> ps = {param("a", 4, 64, 0), param("b", 4, 64, 1),
                                      param("c", 4, 64, 2)};
  mfsdp_plan plan = planOf(ps, 2, 3, 3);
  step::RuntimeMemoryPlan m = step::planRuntimeMemory(plan, false, 256, 1);
  ASSERT_TRUE(m.error.empty()) << m.error;
  EXPECT_EQ(m.prefetch, 1);
  EXPECT_EQ(m.view().prefetch, 1);
  EXPECT_EQ(m.arenaBytes[0], 11264);
  EXPECT_EQ(m.arenaBytes[1], 11264);
  EXPECT_EQ(m.unsharedBytes[0], 13312);
  for (int64_t r = 0; r < 2; ++r) {
    int64_t highest = 0;
    EXPECT_EQ(replay(plan, m, r, highest), "") << "rank " << r;
    EXPECT_LE(highest, m.arenaBytes[r]);
  }
  // Consecutive units' forward copies, and backward copies, apart.
  for (size_t u = 0; u + 1 < m.params.size(); ++u) {
    EXPECT_NE(m.params[u].full, m.params[u + 1].full);
    EXPECT_NE(m.params[u].full_backward, m.params[u + 1].full_backward);
  }

  step::RuntimeMemoryPlan without = step::planRuntimeMemory(plan, false);
  ASSERT_TRUE(without.error.empty());
  EXPECT_EQ(without.prefetch, 0);
  EXPECT_EQ(without.view().prefetch, 0);
  without.prefetch = 1; // replayed as if the runtime prefetched
  int64_t highest = 0;
  EXPECT_NE(replay(plan, without, 0, highest), "");

  // With kept gradients, and with owners and a replicated tensor.
  step::RuntimeMemoryPlan kept = step::planRuntimeMemory(plan, true, 256, 1);
  ASSERT_TRUE(kept.error.empty());
  EXPECT_EQ(replay(plan, kept, 1, highest), "");
  std::vector<mfsdp_param_desc> mixed = {
      param("emb", 16, 32, 0), param("w0", 32, 32, 1, MFSDP_OWNER, 1, MFSDP_OPT_MUON),
      param("n0", 32, 1, 1, MFSDP_REPLICATE), param("w1", 32, 64, 2, MFSDP_OWNER, 0,
                                                    MFSDP_OPT_MUON),
      param("head", 10, 32, 3, MFSDP_ROW_SHARD, 0, MFSDP_OPT_SGD)};
  mfsdp_plan mixedPlan = planOf(mixed, 2, 3, 4);
  step::RuntimeMemoryPlan mm = step::planRuntimeMemory(mixedPlan, false, 256, 1);
  ASSERT_TRUE(mm.error.empty()) << mm.error;
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_EQ(replay(mixedPlan, mm, r, highest), "") << "rank " << r;
    EXPECT_LE(highest, mm.arenaBytes[r]);
  }
}

// ZeRO-1/2 keep the gathered copies all step: prefetch changes no place.
TEST(RuntimeMemory, PrefetchUnderZeroTwoChangesNothing) {
  std::vector<mfsdp_param_desc> ps = {param("a", 4, 64, 0), param("b", 4, 64, 1)};
  mfsdp_plan plan = planOf(ps, 2, 2, 2);
  step::RuntimeMemoryPlan a = step::planRuntimeMemory(plan, false);
  step::RuntimeMemoryPlan b = step::planRuntimeMemory(plan, false, 256, 1);
  ASSERT_TRUE(a.error.empty() && b.error.empty());
  EXPECT_EQ(a.arenaBytes, b.arenaBytes);
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(a.params[i].full, b.params[i].full);
    EXPECT_EQ(a.params[i].grad, b.params[i].grad);
  }
}

TEST(RuntimeMemory, InvalidPlans) {
  {
    std::vector<mfsdp_param_desc> one = {param("a", 4, 64, 0)};
    mfsdp_plan p = planOf(one, 2, 3, 1);
    EXPECT_NE(step::planRuntimeMemory(p, false, 256, 2).error.find("prefetch"),
              std::string::npos);
  }
  std::vector<mfsdp_param_desc> ps = {param("a", 4, 64, 5)};
  mfsdp_plan plan = planOf(ps, 2, 3, 1);
  EXPECT_NE(step::planRuntimeMemory(plan, false).error, "");
  ps = {param("w", 4, 4, 0, MFSDP_OWNER, 2)}; // owner 2 of 2 ranks
  plan = planOf(ps, 2, 3, 1);
  EXPECT_NE(step::planRuntimeMemory(plan, false).error.find("'w'"), std::string::npos);
  plan.dp_shard = 0;
  EXPECT_NE(step::planRuntimeMemory(plan, false).error, "");
}

} // namespace

// Buckets (mfsdp_bucket): a row-shard bucket's masters and reduced
// gradients lie in one piece, each member at an aligned offset, the same
// distances in both, with staging for every rank's chunk (forward and
// backward gathers, the reduction); an owner bucket's gathered copies and
// gradients lie in owner order, and each owner's masters as they lie in its
// span of the gathered copy. 2 ranks, ZeRO-3.
/// Unit 0: a row-shard bucket (a, b) and an owner bucket (w1 on rank 0, w0
/// and w2 on rank 1, in owner order); unit 1: c alone. 2 ranks, ZeRO-3.
struct TwoBucketPlan {
  TwoBucketPlan() {
    plan = planOf(ps, 2, 3, 2);
    buckets[0] = {0, MFSDP_ROW_SHARD, 2, rows.data()};
    buckets[1] = {0, MFSDP_OWNER, 3, owners.data()};
    plan.num_buckets = 2;
    plan.buckets = buckets;
  }
  TwoBucketPlan(const TwoBucketPlan &) = delete;
  TwoBucketPlan &operator=(const TwoBucketPlan &) = delete;

  std::vector<mfsdp_param_desc> ps = {
      param("a", 4, 64, 0), param("b", 3, 10, 0),
      param("w0", 8, 8, 0, MFSDP_OWNER, 1, MFSDP_OPT_MUON),
      param("w1", 8, 16, 0, MFSDP_OWNER, 0, MFSDP_OPT_MUON),
      param("w2", 4, 8, 0, MFSDP_OWNER, 1, MFSDP_OPT_MUON),
      param("c", 4, 64, 1)};
  const std::vector<int32_t> rows = {0, 1}, owners = {3, 2, 4};
  mfsdp_bucket buckets[2];
  mfsdp_plan plan;
};

TEST(RuntimeMemory, BucketsLieInOnePiece) {
  const TwoBucketPlan two;
  const mfsdp_plan &plan = two.plan;
  step::RuntimeMemoryPlan m = step::planRuntimeMemory(plan, false);
  ASSERT_TRUE(m.error.empty()) << m.error;
  const std::vector<mfsdp_param_offsets> &o = m.params;
  // a: 2 rows x 64 = 512 B per rank; b: 2 rows x 10 = 80 B, aligned to 256.
  EXPECT_EQ(o[1].master - o[0].master, 512);
  EXPECT_EQ(o[1].grad_shard - o[0].grad_shard, 512);
  ASSERT_EQ(m.buckets.size(), 2u);
  EXPECT_GE(m.buckets[0].gather, 0);
  EXPECT_GE(m.buckets[0].gather_backward, 0);
  EXPECT_GE(m.buckets[0].reduce, 0);
  EXPECT_EQ(m.buckets[1].gather, -1);
  EXPECT_EQ(m.buckets[1].reduce, -1);
  // Owner order w1 (rank 0, 512 B), w0 (rank 1, 256 B), w2 (rank 1, 128 B
  // aligned to 256): gathered copies, backward copies and gradients alike.
  EXPECT_EQ(o[2].full - o[3].full, 512);
  EXPECT_EQ(o[4].full - o[2].full, 256);
  for (int k = 0; k < 2; ++k) {
    auto at = [&](int32_t i) { return k ? o[i].grad : o[i].full_backward; };
    EXPECT_EQ(at(2) - at(3), 512);
    EXPECT_EQ(at(4) - at(2), 256);
  }
  // Owner 1's masters and reduced gradients: w0 then w2, as in its span.
  EXPECT_EQ(o[4].master - o[2].master, 256);
  EXPECT_EQ(o[4].grad_shard - o[2].grad_shard, 256);
  // Unbucketed c keeps its own buffers; nothing clashes on either rank.
  for (int64_t r = 0; r < 2; ++r) {
    int64_t highest = 0;
    EXPECT_EQ(replay(plan, m, r, highest), "") << "rank " << r;
    EXPECT_LE(highest, m.arenaBytes[r]);
  }
  // The view hands the staging offsets to the runtime.
  EXPECT_EQ(m.view().buckets, m.buckets.data());
}

// A plan made before (the one mfsdp-plan-memory records on the sched.step)
// is taken as it is once it fits the library's buffers, and refused,
// saying where, when it does not: two buffers live at once on one byte, a
// bucket member out of its place beside the others, a buffer past the
// arena, a buffer the library does not have, gradients freed that must be
// kept. Buckets of both kinds on 2 ranks, ZeRO-3 (TwoBucketPlan).
static bool contains(const std::string &text, const char *part) {
  return text.find(part) != std::string::npos;
}

TEST(RuntimeMemory, GivenPlanIsTakenOnceItFits) {
  const TwoBucketPlan two;
  const mfsdp_plan &plan = two.plan;
  const step::RuntimeMemoryPlan m = step::planRuntimeMemory(plan, false);
  ASSERT_TRUE(m.error.empty()) << m.error;

  // Taken: the same offsets, arena and staging, whatever planMemory would
  // choose now. A larger arena than needed is kept as given.
  step::RuntimeMemoryPlan copy = m;
  copy.arenaBytes[1] += 4096;
  const mfsdp_memory_plan given = copy.view();
  const step::RuntimeMemoryPlan taken =
      step::planRuntimeMemory(plan, false, 256, 0, nullptr, &given);
  ASSERT_TRUE(taken.error.empty()) << taken.error;
  EXPECT_EQ(taken.arenaBytes, copy.arenaBytes);
  EXPECT_EQ(taken.staging, m.staging);
  ASSERT_EQ(taken.params.size(), m.params.size());
  for (size_t i = 0; i < m.params.size(); ++i)
    EXPECT_EQ(std::memcmp(&taken.params[i], &m.params[i], sizeof(mfsdp_param_offsets)), 0)
        << "parameter " << i;
  ASSERT_EQ(taken.buckets.size(), 2u);
  EXPECT_EQ(taken.buckets[0].gather, m.buckets[0].gather);
  EXPECT_EQ(taken.buckets[0].reduce, m.buckets[0].reduce);

  auto refused = [&](auto change) {
    step::RuntimeMemoryPlan bad = m;
    change(bad);
    const mfsdp_memory_plan view = bad.view();
    return step::planRuntimeMemory(plan, false, 256, 0, nullptr, &view).error;
  };
  // c's master on a's: both persistent.
  EXPECT_PRED2(contains, refused([](step::RuntimeMemoryPlan &p) { p.params[5].master = p.params[0].master; }),
               "unsound");
  // b 256 bytes further from a than the row bucket lays them out.
  EXPECT_PRED2(contains, refused([](step::RuntimeMemoryPlan &p) { p.params[1].master += 256; }),
               "parameter 1 ('b')'s master");
  EXPECT_PRED2(contains, refused([](step::RuntimeMemoryPlan &p) { p.arenaBytes[0] = 1024; }),
               "past the end of rank 0's arena (1024 bytes)");
  // The owner bucket has no gather staging.
  EXPECT_PRED2(contains, refused([](step::RuntimeMemoryPlan &p) { p.buckets[1].gather = 0; }),
               "bucket 1's gather staging at 0, which this library has none of");
  EXPECT_PRED2(contains, refused([](step::RuntimeMemoryPlan &p) { p.params[5].grad = -1; }),
               "no place for parameter 5 ('c')'s grad");
  EXPECT_PRED2(contains, refused([](step::RuntimeMemoryPlan &p) { p.arenaBytes.pop_back(); }),
               "for 1 dp_shard ranks (the plan has 2)");
  // Gradients freed after each reduction, where the library keeps them.
  const mfsdp_memory_plan freeing = m.view();
  EXPECT_PRED2(contains, step::planRuntimeMemory(plan, true, 256, 0, nullptr, &freeing).error,
               "frees each unit's gradients");
  // A plan that keeps them is taken for a library that need not.
  const step::RuntimeMemoryPlan kept = step::planRuntimeMemory(plan, true);
  ASSERT_TRUE(kept.error.empty()) << kept.error;
  const mfsdp_memory_plan keeping = kept.view();
  const step::RuntimeMemoryPlan keptTaken =
      step::planRuntimeMemory(plan, false, 256, 0, nullptr, &keeping);
  ASSERT_TRUE(keptTaken.error.empty()) << keptTaken.error;
  EXPECT_TRUE(keptTaken.keepGrads);
  EXPECT_EQ(keptTaken.arenaBytes, kept.arenaBytes);
}

// The reduce dtype bf16: a row-shard bucket's reduction packs its
// gradients straight into a bf16 staging buffer, half the fp32 one, and the
// arena shrinks by that half where the staging is at the peak (the
// backward of a unit whose gradients, gathered copy and reduce staging are
// all live). 2 ranks, ZeRO-3, one bucket of two 64x64 matrices.
// The library's buffers are named only when a message needs one, from what
// they hold: a bucket's buffer of a kind (on an owner's rank for its own
// state), a bucket's staging, a unit's buffer of a kind with several
// members on an owner's rank, and one with one member by the parameter.
TEST(RuntimeMemory, RefusalsNameTheBuffer) {
  const TwoBucketPlan two;
  const mfsdp_plan &plan = two.plan;
  const step::RuntimeMemoryPlan m = step::planRuntimeMemory(plan, false);
  ASSERT_TRUE(m.error.empty()) << m.error;
  auto refused = [&](auto change) {
    step::RuntimeMemoryPlan bad = m;
    change(bad);
    const mfsdp_memory_plan view = bad.view();
    return step::planRuntimeMemory(plan, false, 256, 0, nullptr, &view).error;
  };
  // w2 (owner 1) away from w0 in owner 1's master of the owner bucket.
  EXPECT_PRED2(contains, refused([](step::RuntimeMemoryPlan &p) { p.params[4].master += 256; }),
               "but buffer 'bucket 1 master', which holds it");
  // w2 away from w0 in owner 1's momentum (their unit's, not bucketed).
  EXPECT_PRED2(contains,
               refused([](step::RuntimeMemoryPlan &p) { p.params[4].exp_avg += 256; }),
               "but buffer 'unit 0 exp_avg on rank 1', which holds it");
  // The row bucket's gather staging on c's master.
  EXPECT_PRED2(contains,
               refused([](step::RuntimeMemoryPlan &p) { p.buckets[0].gather = p.params[5].master; }),
               "buffer 'bucket 0 gather staging' at bytes");
  EXPECT_PRED2(contains,
               refused([](step::RuntimeMemoryPlan &p) { p.buckets[0].gather = p.params[5].master; }),
               "overlaps 'c master' at");
  // w1 alone on rank 0: its momentum past the end of the arena.
  EXPECT_PRED2(contains, refused([](step::RuntimeMemoryPlan &p) {
                 p.params[3].exp_avg = p.arenaBytes[0];
               }),
               "puts buffer 'w1 exp_avg'");
}

TEST(RuntimeMemory, BF16ReductionStagesHalf) {
  std::vector<mfsdp_param_desc> ps = {param("a", 64, 64, 0), param("b", 64, 64, 0)};
  mfsdp_plan plan = planOf(ps, 2, 3, 1);
  const std::vector<int32_t> rows = {0, 1};
  const mfsdp_bucket bucket{0, MFSDP_ROW_SHARD, 2, rows.data()};
  plan.num_buckets = 1;
  plan.buckets = &bucket;
  step::RuntimeMemoryPlan fp32 = step::planRuntimeMemory(plan, false);
  ASSERT_TRUE(fp32.error.empty()) << fp32.error;
  plan.reduce_dtype = MFSDP_REDUCE_BF16;
  step::RuntimeMemoryPlan bf16 = step::planRuntimeMemory(plan, false);
  ASSERT_TRUE(bf16.error.empty()) << bf16.error;
  // The staging: 2 ranks x (32 + 32 rows x 64) floats = 32 KiB in fp32,
  // 16 KiB in bf16; it is live with the copies and gradients (2 x 32 KiB)
  // and the persistent masters, state and reduced gradients.
  EXPECT_EQ(fp32.arenaBytes[0] - bf16.arenaBytes[0], 16384);
  for (int64_t r = 0; r < 2; ++r) {
    int64_t highest = 0;
    EXPECT_EQ(replay(plan, bf16, r, highest), "") << "rank " << r;
    EXPECT_LE(highest, bf16.arenaBytes[r]);
  }
}

// A row-shard bucket's gather staging lives from the gather's start to its
// unpack, and its reduce staging from the pack to the reduction's landing,
// as the runtime holds them (runtime/common/Buckets.cpp): the buckets of
// different units share one place. Under ZeRO-2 the gathered copies are
// kept all step, and the staging once was too (every bucket's at once).
// 2 ranks, two units, each a bucket of two 64x64 matrices.
TEST(RuntimeMemory, BucketStagingLivesFromGatherToUnpack) {
  std::vector<mfsdp_param_desc> ps = {param("a", 64, 64, 0), param("b", 64, 64, 0),
                                      param("c", 64, 64, 1), param("d", 64, 64, 1)};
  const std::vector<int32_t> first = {0, 1}, second = {2, 3};
  const mfsdp_bucket buckets[2] = {{0, MFSDP_ROW_SHARD, 2, first.data()},
                                   {1, MFSDP_ROW_SHARD, 2, second.data()}};
  for (int32_t zero : {2, 3}) {
    mfsdp_plan plan = planOf(ps, 2, zero, 2);
    plan.num_buckets = 2;
    plan.buckets = buckets;
    step::RuntimeMemoryPlan m = step::planRuntimeMemory(plan, false);
    ASSERT_TRUE(m.error.empty()) << m.error;
    ASSERT_EQ(m.buckets.size(), 2u);
    EXPECT_EQ(m.buckets[0].gather, m.buckets[1].gather) << "ZeRO-" << zero;
    EXPECT_EQ(m.buckets[0].reduce, m.buckets[1].reduce) << "ZeRO-" << zero;
    // What the arena holds: per rank 4 masters, states and reduced
    // gradients of 32 x 64 floats (persistent); the copies (ZeRO-2: all
    // four kept; ZeRO-3: one unit's, forward or backward), one unit's
    // gradients, and one staging buffer of 2 x 32 x 64 floats at a time.
    const int64_t shard = 32 * 64 * 4, whole = 64 * 64 * 4, chunk = 2 * shard;
    const int64_t persistent = 4 * 4 * shard;
    const int64_t kept = zero == 2 ? 4 * whole : 0;
    EXPECT_LE(m.arenaBytes[0], persistent + kept + 2 * 2 * whole + 2 * chunk)
        << "ZeRO-" << zero;
  }
}

// Buckets the runtime could not run are refused with what is wrong.
TEST(RuntimeMemory, BadBucketsAreRefused) {
  std::vector<mfsdp_param_desc> ps = {
      param("a", 4, 64, 0), param("b", 4, 64, 1),
      param("w0", 8, 8, 0, MFSDP_OWNER, 1, MFSDP_OPT_MUON),
      param("w1", 8, 8, 0, MFSDP_OWNER, 0, MFSDP_OPT_MUON)};
  mfsdp_plan plan = planOf(ps, 2, 3, 2);
  struct Case {
    std::vector<int32_t> members;
    int32_t placement;
    const char *says;
  } cases[] = {
      {{0, 1}, MFSDP_ROW_SHARD, "of another unit"},       // a and b: two units
      {{0, 0}, MFSDP_ROW_SHARD, "in another bucket"},     // a twice
      {{2, 3}, MFSDP_OWNER, "out of owner order"},        // owner 1 before 0
      {{0, 2}, MFSDP_ROW_SHARD, "another placement"},     // a row shard and an owner
      {{0, 9}, MFSDP_ROW_SHARD, "out of range"},
      {{0}, MFSDP_REPLICATE, "placement MFSDP_ROW_SHARD or MFSDP_OWNER"},
  };
  for (const Case &c : cases) {
    const mfsdp_bucket bucket{0, c.placement, static_cast<int32_t>(c.members.size()),
                              c.members.data()};
    plan.num_buckets = 1;
    plan.buckets = &bucket;
    step::RuntimeMemoryPlan m = step::planRuntimeMemory(plan, false);
    EXPECT_NE(m.error.find(c.says), std::string::npos) << m.error;
  }
}

// A collective of the step program over dp_shard carrying `names`.
static void addCollective(step::Step &s, step::CollKind kind, std::vector<std::string> names) {
  step::Op op;
  op.kind = step::OpKind::Collective;
  op.coll = kind;
  op.meshAxes = {"dp_shard"};
  op.params = std::move(names);
  s.ops.push_back(op);
}

// The step program's bucketed reductions become the runtime's buckets:
// split by unit, owner members in owner order, one member alone is no
// bucket, parameters the plan does not have are left out, and a parameter
// is in its first bucket only.
TEST(RuntimeMemory, BucketsFromTheStepProgram) {
  std::vector<mfsdp_param_desc> ps = {
      param("a", 4, 64, 0), param("b", 4, 64, 0), param("c", 4, 64, 1),
      param("w0", 8, 8, 0, MFSDP_OWNER, 1, MFSDP_OPT_MUON),
      param("w1", 8, 8, 0, MFSDP_OWNER, 0, MFSDP_OPT_MUON)};
  mfsdp_plan plan = planOf(ps, 2, 3, 2);
  step::Step s;
  auto coll = [&](step::CollKind k, std::vector<std::string> names) {
    addCollective(s, k, std::move(names));
  };
  coll(step::CollKind::ReduceScatter, {"a", "tp_only", "b", "c"});
  coll(step::CollKind::ReduceScatterV, {"w0", "w1"});
  coll(step::CollKind::ReduceScatter, {"a", "b"}); // again: already bucketed
  coll(step::CollKind::AllGather, {"c", "a"});     // gathers are not read
  std::vector<step::RuntimeBucket> b = step::runtimeBuckets(s, plan);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].unit, 0);
  EXPECT_EQ(b[0].placement, MFSDP_ROW_SHARD);
  EXPECT_EQ(b[0].params, (std::vector<int32_t>{0, 1})); // c alone in unit 1
  EXPECT_EQ(b[1].placement, MFSDP_OWNER);
  EXPECT_EQ(b[1].params, (std::vector<int32_t>{4, 3})); // w1 (owner 0) first
  std::vector<mfsdp_bucket> v = step::bucketViews(b);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[1].num_params, 2);
  EXPECT_EQ(v[1].params, b[1].params.data());
}

// Buckets stay within the size limit: a unit's members are cut, in order,
// into runs whose flat buffer fits; a tensor larger than the limit is left
// alone, and a run of one is no bucket. On 2 ranks a 4x64 row shard keeps
// 2 rows (512 B) per rank, so its flat buffer (2 chunks) is 1024 B; a
// 64x64 one is 16384 B; owned 8x8 and 8x16 matrices are 256 B and 512 B.
TEST(RuntimeMemory, BucketsWithinTheLimit) {
  std::vector<mfsdp_param_desc> ps = {
      param("a", 4, 64, 0),  param("b", 4, 64, 0), param("e", 64, 64, 0),
      param("c", 4, 64, 0),  param("d", 4, 64, 0),
      param("w0", 8, 8, 0, MFSDP_OWNER, 1, MFSDP_OPT_MUON),
      param("w1", 8, 16, 0, MFSDP_OWNER, 0, MFSDP_OPT_MUON)};
  mfsdp_plan plan = planOf(ps, 2, 3, 1);
  step::Step s;
  auto coll = [&](step::CollKind k, std::vector<std::string> names) {
    addCollective(s, k, std::move(names));
  };
  coll(step::CollKind::ReduceScatter, {"a", "b", "e", "c", "d"});
  coll(step::CollKind::ReduceScatterV, {"w0", "w1"});
  auto members = [](const std::vector<step::RuntimeBucket> &b) {
    std::vector<std::vector<int32_t>> out;
    for (const step::RuntimeBucket &k : b)
      out.push_back(k.params);
    return out;
  };
  using M = std::vector<std::vector<int32_t>>;
  // No limit: one bucket of each placement (w1, owner 0, first).
  EXPECT_EQ(members(step::runtimeBuckets(s, plan)), (M{{0, 1, 2, 3, 4}, {6, 5}}));
  // 2048 B: a and b fill one, e is alone, c and d fill the next; the
  // owners' 768 B fit.
  EXPECT_EQ(members(step::runtimeBuckets(s, plan, 2048)), (M{{0, 1}, {3, 4}, {6, 5}}));
  // 3000 B: c would make the first 3072 B, so it starts the next.
  EXPECT_EQ(members(step::runtimeBuckets(s, plan, 3000)), (M{{0, 1}, {3, 4}, {6, 5}}));
  // 600 B: every row shard is alone, and so is each owned matrix.
  EXPECT_TRUE(step::runtimeBuckets(s, plan, 600).empty());
  // At most 3 members, no byte limit: e stays in.
  EXPECT_EQ(members(step::runtimeBuckets(s, plan, 0, 3)), (M{{0, 1, 2}, {3, 4}, {6, 5}}));
  // Whatever the limit, the memory plan lays every bucket out in one piece.
  for (double limit : {0.0, 2048.0, 3000.0}) {
    std::vector<step::RuntimeBucket> b = step::runtimeBuckets(s, plan, limit);
    std::vector<mfsdp_bucket> v = step::bucketViews(b);
    plan.num_buckets = static_cast<int32_t>(v.size());
    plan.buckets = v.data();
    step::RuntimeMemoryPlan m = step::planRuntimeMemory(plan, false);
    EXPECT_TRUE(m.error.empty()) << "limit " << limit << ": " << m.error;
    for (int64_t r = 0; r < 2; ++r) {
      int64_t highest = 0;
      EXPECT_EQ(replay(plan, m, r, highest), "") << "limit " << limit << ", rank " << r;
      EXPECT_LE(highest, m.arenaBytes[r]);
    }
    plan.num_buckets = 0;
    plan.buckets = nullptr;
  }
}

// Even without a size limit a bucket stays within what one collective can
// address (INT32_MAX floats, 8 GiB): two owned 40000x40000 matrices
// (6.4 GB each) are no bucket, two 30000x30000 ones (3.6 GB each) are.
TEST(RuntimeMemory, BucketsStayAddressable) {
  for (int64_t n : {40000, 30000}) {
    std::vector<mfsdp_param_desc> ps = {
        param("w0", n, n, 0, MFSDP_OWNER, 0, MFSDP_OPT_MUON),
        param("w1", n, n, 0, MFSDP_OWNER, 1, MFSDP_OPT_MUON)};
    mfsdp_plan plan = planOf(ps, 2, 3, 1);
    step::Step s;
    addCollective(s, step::CollKind::ReduceScatterV, {"w0", "w1"});
    EXPECT_EQ(step::runtimeBuckets(s, plan).size(), n == 30000 ? 1u : 0u) << n;
  }
}

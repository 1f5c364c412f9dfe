//===- RuntimeMemoryTest.cpp - The runtime's static memory plan -----------===//
//
// Exact arenas worked out by hand for small plans, and an independent
// replay of the hook protocol checking that no two buffers live at the
// same time share a byte.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/BufferSizes.h"
#include "mfsdp/step/RuntimeMemory.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace mfsdp;

namespace {

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
  mfsdp_plan p{};
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
      add(o.full, f.full, n + " full");
    if (m.keepGrads)
      add(o.grad, f.grad, n + " grad");
  }
  auto unit = [&](int32_t u, bool backward) {
    for (int32_t i = 0; i < plan.num_params; ++i) {
      if (plan.params[i].unit != u)
        continue;
      const runtime::BufferFloats f =
          runtime::bufferFloats(plan.params[i], plan.dp_shard, rank);
      const std::string n = plan.params[i].name;
      if (zero3)
        add(backward ? m.params[i].full_backward : m.params[i].full, f.full,
            n + " gathered");
      if (backward && !m.keepGrads)
        add(m.params[i].grad, f.grad, n + " grad");
    }
    for (int32_t i = 0; i < plan.num_params; ++i) {
      if (plan.params[i].unit != u)
        continue;
      drop(std::string(plan.params[i].name) + " gathered");
      if (backward && !m.keepGrads)
        drop(std::string(plan.params[i].name) + " grad");
    }
  };
  for (int32_t u = 0; u < plan.num_units; ++u)
    unit(u, false);
  for (int32_t u = plan.num_units; u-- > 0;)
    unit(u, true);
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

TEST(RuntimeMemory, InvalidPlans) {
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

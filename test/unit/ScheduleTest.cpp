//===- ScheduleTest.cpp - Step building and schedule transformations ------===//
#include "mfsdp/step/Builder.h"
#include "mfsdp/step/Schedule.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace mfsdp;
using namespace mfsdp::step;

namespace {

Buffer buffer(std::string name, double bytes, bool persistent = false,
              int64_t onlyRank = -1) {
  Buffer b;
  b.name = std::move(name);
  b.bytes = bytes;
  b.persistent = persistent;
  b.onlyRank = onlyRank;
  return b;
}

Op alloc(int64_t b) {
  Op op;
  op.kind = OpKind::Alloc;
  op.name = "alloc";
  op.writes = {b};
  return op;
}
Op freeOp(int64_t b, Phase phase = Phase::Forward) {
  Op op;
  op.kind = OpKind::Free;
  op.phase = phase;
  op.name = "free";
  op.writes = {b};
  return op;
}
Op collective(CollKind kind, int64_t src, int64_t dst, double bytes,
              int64_t group, Phase phase = Phase::Forward) {
  Op op;
  op.kind = OpKind::Collective;
  op.coll = kind;
  op.phase = phase;
  op.name = "coll";
  op.meshAxes = {"dp_shard"};
  op.ranks = 2;
  op.collBytes = bytes;
  op.group = group;
  op.reads = {src};
  op.writes = {dst};
  if (kind == CollKind::AllGatherV || kind == CollKind::ReduceScatterV)
    op.chunks = {bytes / 2, bytes / 2};
  return op;
}
Op compute(std::string name, int64_t group, std::vector<int64_t> reads,
           std::vector<int64_t> writes, Phase phase = Phase::Forward) {
  Op op;
  op.kind = OpKind::Compute;
  op.phase = phase;
  op.compute = phase == Phase::Forward ? "forward" : "backward";
  op.name = std::move(name);
  op.group = group;
  op.flops = 1e9;
  op.reads = std::move(reads);
  op.writes = std::move(writes);
  return op;
}

size_t indexOf(const Step &s, const std::string &name) {
  for (size_t i = 0; i < s.ops.size(); ++i)
    if (s.ops[i].name == name)
      return i;
  return s.ops.size();
}

TEST(Schedule, BucketingMergesCollectivesIssuedTogether) {
  Step s;
  s.world = 2;
  s.buffers = {buffer("shard", 8, true), buffer("owned", 0, true),
               buffer("gathered", 64)};
  s.ops = {alloc(0), alloc(1), alloc(2),
           collective(CollKind::AllGather, 0, 2, 8, 0),
           collective(CollKind::AllGatherV, 1, 2, 16, 0),
           collective(CollKind::AllGather, 0, 2, 8, 0),
           collective(CollKind::AllGatherV, 1, 2, 32, 0),
           compute("forward", 0, {2}, {})};
  Step limited = s;
  EXPECT_EQ(bucketCollectives(s, 0), 2);
  ASSERT_EQ(s.ops.size(), 6u);
  EXPECT_EQ(s.ops[3].coll, CollKind::AllGather);
  EXPECT_DOUBLE_EQ(s.ops[3].collBytes, 16);
  EXPECT_EQ(s.ops[4].coll, CollKind::AllGatherV);
  EXPECT_DOUBLE_EQ(s.ops[4].collBytes, 48);
  // Owner chunks add up rank by rank.
  EXPECT_EQ(s.ops[4].chunks, (std::vector<double>{24, 24}));
  // A 40-byte limit keeps the two owner gathers apart.
  EXPECT_EQ(bucketCollectives(limited, 40), 1);
  EXPECT_EQ(limited.ops.size(), 7u);
}

TEST(Schedule, BucketingNeverCrossesCompute) {
  Step s;
  s.world = 2;
  s.buffers = {buffer("shard", 8, true), buffer("g", 64)};
  s.ops = {alloc(0), alloc(1), collective(CollKind::AllGather, 0, 1, 8, 0),
           compute("forward", 0, {1}, {}),
           collective(CollKind::AllGather, 0, 1, 8, 0)};
  EXPECT_EQ(bucketCollectives(s, 0), 0);
}

/// Two groups, forward then backward, as the builder lays them out.
Step twoGroups() {
  Step s;
  s.world = 2;
  s.buffers = {buffer("shard", 8, true),    buffer("grad shard", 8, true),
               buffer("gathered 0 f", 16),  buffer("gathered 1 f", 16),
               buffer("gathered 1 b", 16),  buffer("grads 1", 16),
               buffer("gathered 0 b", 16),  buffer("grads 0", 16)};
  s.ops = {alloc(0), alloc(1),
           alloc(2), collective(CollKind::AllGather, 0, 2, 16, 0),
           compute("forward 0", 0, {2}, {}), freeOp(2),
           alloc(3), collective(CollKind::AllGather, 0, 3, 16, 1),
           compute("forward 1", 1, {3}, {}), freeOp(3),
           alloc(4), collective(CollKind::AllGather, 0, 4, 16, 1, Phase::Backward),
           alloc(5), compute("backward 1", 1, {4}, {5}, Phase::Backward),
           freeOp(4, Phase::Backward),
           collective(CollKind::ReduceScatter, 5, 1, 16, 1, Phase::Backward),
           freeOp(5, Phase::Backward),
           alloc(6), collective(CollKind::AllGather, 0, 6, 16, 0, Phase::Backward),
           alloc(7), compute("backward 0", 0, {6}, {7}, Phase::Backward),
           freeOp(6, Phase::Backward),
           collective(CollKind::ReduceScatter, 7, 1, 16, 0, Phase::Backward),
           freeOp(7, Phase::Backward)};
  for (size_t i = 0; i < s.ops.size(); ++i)
    if (s.ops[i].kind == OpKind::Collective)
      s.ops[i].name = "coll " + std::to_string(i);
  return s;
}

TEST(Schedule, OverlapPrefetchesAndWaitsBeforeUse) {
  Step s = twoGroups();
  ASSERT_TRUE(verifySchedule(s, 0).empty());
  scheduleOverlap(s, OverlapOptions{});
  EXPECT_TRUE(verifySchedule(s, 0).empty());
  // Every collective is async and waited for exactly once.
  int64_t collectives = 0, waits = 0;
  for (const Op &op : s.ops) {
    collectives += op.kind == OpKind::Collective;
    waits += op.kind == OpKind::Wait;
    if (op.kind == OpKind::Collective) {
      EXPECT_TRUE(op.async);
    }
  }
  EXPECT_EQ(collectives, 6);
  EXPECT_EQ(waits, 6);
  // Forward prefetch: group 1's gather is issued before group 0's compute.
  EXPECT_LT(indexOf(s, "coll 7"), indexOf(s, "forward 0"));
  // Backward: group 0's gather is issued before group 1's backward, hence
  // before group 1's reduction on the same communicator.
  EXPECT_LT(indexOf(s, "coll 18"), indexOf(s, "backward 1"));
  EXPECT_LT(indexOf(s, "coll 18"), indexOf(s, "coll 15"));
  // The unreduced gradients of group 1 are freed only after the next
  // compute, so their reduction overlaps it.
  size_t reduce1 = indexOf(s, "coll 15");
  size_t freeGrads1 = s.ops.size();
  for (size_t i = reduce1; i < s.ops.size(); ++i)
    if (s.ops[i].kind == OpKind::Free && s.ops[i].writes == std::vector<int64_t>{5})
      freeGrads1 = i;
  EXPECT_GT(freeGrads1, indexOf(s, "backward 0"));
}

// HSDP: a unit's all-reduce over replicas (communicator 1) reads and
// writes what its reduce-scatter (communicator 0) writes. Another stream
// does not order it after the reduce-scatter, so the schedule runs it
// right after the reduce-scatter's wait, synchronously, as the runtime
// does inside that wait; the reduce-scatter still overlaps the next
// unit's backward.
TEST(Schedule, ReplicaAllReduceRunsAfterItsShardReduction) {
  Step s;
  s.world = 2;
  s.buffers = {buffer("grads 1", 16), buffer("shard 1", 8, true), buffer("grads 0", 16),
               buffer("shard 0", 8, true)};
  auto reduce = [](int64_t from, int64_t to, int64_t group) {
    Op rs = collective(CollKind::ReduceScatter, from, to, 16, group, Phase::Backward);
    rs.name = "reduce_scatter " + std::to_string(group);
    return rs;
  };
  auto overReplicas = [](int64_t shard, int64_t group) {
    Op ar = collective(CollKind::AllReduce, shard, shard, 8, group, Phase::Backward);
    ar.name = "all_reduce " + std::to_string(group) + " over replicas";
    ar.meshAxes = {"dp_replicate"};
    ar.comm = 1;
    return ar;
  };
  s.ops = {alloc(0), compute("backward 1", 1, {}, {0}, Phase::Backward), reduce(0, 1, 1),
           overReplicas(1, 1), alloc(2), compute("backward 0", 0, {}, {2}, Phase::Backward),
           reduce(2, 3, 0), overReplicas(3, 0)};
  scheduleOverlap(s, OverlapOptions{});
  EXPECT_TRUE(verifySchedule(s, 0).empty());
  for (int group : {0, 1}) {
    const std::string g = std::to_string(group);
    const size_t rs = indexOf(s, "reduce_scatter " + g);
    const size_t wait = indexOf(s, "wait reduce_scatter " + g);
    const size_t ar = indexOf(s, "all_reduce " + g + " over replicas");
    ASSERT_LT(ar, s.ops.size());
    EXPECT_LT(rs, wait);
    EXPECT_EQ(ar, wait + 1) << "group " << group;
    EXPECT_FALSE(s.ops[ar].async) << "group " << group;
  }
  // Unit 1's reduction still overlaps unit 0's backward.
  EXPECT_GT(indexOf(s, "wait reduce_scatter 1"), indexOf(s, "backward 0"));

  // Started while the reduce-scatter is in flight, it is a race the
  // verifier names.
  Step race;
  race.world = 2;
  race.buffers = {buffer("grads", 16), buffer("shard", 8, true)};
  Op rs = reduce(0, 1, 0);
  rs.async = true;
  Op ar = overReplicas(1, 0);
  ar.async = true;
  Op waitRs, waitAr;
  waitRs.kind = waitAr.kind = OpKind::Wait;
  waitRs.waitFor = 2;
  waitAr.waitFor = 3;
  race.ops = {alloc(0), compute("backward", 0, {}, {0}, Phase::Backward), rs, ar, waitRs,
              waitAr};
  const std::vector<ScheduleIssue> issues = verifySchedule(race, 0);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].op, 3);
  EXPECT_EQ(issues[0].message,
            "'all_reduce 0 over replicas' (communicator 1) uses 'shard' while "
            "'reduce_scatter 0' (communicator 0) is in flight on it: another stream, not "
            "ordered before its wait");
}

// A gather group's units reduce one after the other: a limit that opens a
// new bucket for the second unit's reduce-scatter keeps its all-reduce
// over replicas out of the first unit's (which would move it before the
// reduce-scatter whose result it carries).
TEST(Schedule, BucketingKeepsAnAllReduceAfterItsReduceScatter) {
  Step s;
  s.world = 2;
  s.buffers = {buffer("grads", 32), buffer("shards", 16, true)};
  auto rs = [](const char *p) {
    Op op = collective(CollKind::ReduceScatter, 0, 1, 16, 0, Phase::Backward);
    op.name = std::string("reduce_scatter ") + p;
    op.params = {p};
    return op;
  };
  auto ar = [](const char *p) {
    Op op = collective(CollKind::AllReduce, 1, 1, 4, 0, Phase::Backward);
    op.name = std::string("all_reduce ") + p;
    op.params = {p};
    op.meshAxes = {"dp_replicate"};
    op.comm = 1;
    return op;
  };
  s.ops = {alloc(0), compute("backward", 0, {}, {0}, Phase::Backward), rs("a"), ar("a"),
           rs("b"), ar("b")};
  Step unlimited = s;
  // 20 bytes: the reduce-scatters (16 each) in two buckets, the
  // all-reduces (4 each) would fit in one.
  EXPECT_EQ(bucketCollectives(s, 20), 0);
  ASSERT_EQ(s.ops.size(), 6u);
  EXPECT_EQ(s.ops[2].name, "reduce_scatter a");
  EXPECT_EQ(s.ops[3].name, "all_reduce a");
  EXPECT_EQ(s.ops[4].name, "reduce_scatter b");
  EXPECT_EQ(s.ops[5].name, "all_reduce b");
  // Without a limit both pairs merge, each bucket after the one it needs.
  EXPECT_EQ(bucketCollectives(unlimited, 0), 2);
  ASSERT_EQ(unlimited.ops.size(), 4u);
  EXPECT_EQ(unlimited.ops[2].coll, CollKind::ReduceScatter);
  EXPECT_EQ(unlimited.ops[3].coll, CollKind::AllReduce);
  EXPECT_EQ(unlimited.ops[3].params, (std::vector<std::string>{"a", "b"}));
}

TEST(Schedule, PrefetchRespectsTheInflightCap) {
  Step s = twoGroups();
  OverlapOptions o;
  o.maxInflightBytes = 20; // two 16-byte gathered buffers do not fit
  scheduleOverlap(s, o);
  EXPECT_GT(indexOf(s, "coll 7"), indexOf(s, "forward 0"));
  EXPECT_TRUE(verifySchedule(s, 0).empty());
}

TEST(Schedule, MemoryPlanSharesSpaceBetweenDisjointLifetimes) {
  Step s = twoGroups();
  MemoryPlan plan = planMemory(s, 1);
  ASSERT_EQ(plan.arenaBytes.size(), 2u);
  // Persistent 8 + 8; at most one 16-byte gathered buffer plus one 16-byte
  // gradient buffer live at once in this synchronous program: 48 bytes.
  EXPECT_DOUBLE_EQ(plan.peakBytes[0], 8 + 8 + 16 + 16);
  EXPECT_DOUBLE_EQ(plan.arenaBytes[0], plan.peakBytes[0]);
  // No two buffers live at once overlap in the arena.
  for (size_t a = 0; a < s.buffers.size(); ++a)
    for (size_t b = a + 1; b < s.buffers.size(); ++b)
      if (s.buffers[a].persistent && s.buffers[b].persistent) {
        EXPECT_TRUE(s.buffers[a].offset + 8 <= s.buffers[b].offset ||
                    s.buffers[b].offset + 8 <= s.buffers[a].offset);
      }
}

TEST(Schedule, MemoryPlanKeepsOwnerBuffersPerRank) {
  Step s;
  s.world = 2;
  s.buffers = {buffer("owned r0", 100, true, 0), buffer("owned r1", 60, true, 1)};
  s.ops = {alloc(0), alloc(1)};
  s.ops[0].onlyRank = 0;
  s.ops[1].onlyRank = 1;
  MemoryPlan plan = planMemory(s, 1);
  EXPECT_DOUBLE_EQ(plan.peakBytes[0], 100);
  EXPECT_DOUBLE_EQ(plan.peakBytes[1], 60);
  // Different ranks' buffers may share offsets.
  EXPECT_EQ(s.buffers[0].offset, 0);
  EXPECT_EQ(s.buffers[1].offset, 0);
}

TEST(Schedule, VerifierFindsRacesAndDeadlocks) {
  Step s;
  s.world = 2;
  s.buffers = {buffer("shard", 8, true), buffer("gathered", 16)};
  Op gather = collective(CollKind::AllGather, 0, 1, 16, 0);
  gather.async = true;
  gather.name = "gather";
  Op wait;
  wait.kind = OpKind::Wait;
  wait.waitFor = 2;
  s.ops = {alloc(0), alloc(1), gather, compute("early", 0, {1}, {}), wait,
           freeOp(1), compute("late", 0, {1}, {})};
  auto issues = verifySchedule(s, 0);
  ASSERT_EQ(issues.size(), 2u);
  EXPECT_EQ(issues[0].op, 3);
  EXPECT_NE(issues[0].message.find("before the wait of 'gather'"), std::string::npos);
  EXPECT_EQ(issues[1].op, 6);
  EXPECT_NE(issues[1].message.find("after it was freed"), std::string::npos);

  // A collective only one rank issues deadlocks the communicator.
  Step d;
  d.world = 2;
  d.buffers = {buffer("shard", 8, true)};
  Op c = collective(CollKind::AllReduce, 0, 0, 8, 0);
  c.onlyRank = 1;
  d.ops = {alloc(0), c};
  issues = verifySchedule(d, 0);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_NE(issues[0].message.find("deadlock"), std::string::npos);

  // The memory cap.
  Step m = twoGroups();
  issues = verifySchedule(m, 10);
  ASSERT_FALSE(issues.empty());
  EXPECT_NE(issues.back().message.find("over the memory cap"), std::string::npos);
}

TEST(Schedule, BuilderZeroLevels) {
  planner::Problem pr;
  pr.units = {{"u0"}};
  planner::Param w;
  w.name = "w";
  w.shape = {8, 4};
  w.kind = "linear";
  w.unit = 0;
  w.elemBytes = 4;
  w.placement = planner::PlacementKind::RowShard;
  w.optim = planner::Optim::AdamW;
  pr.params = {w};
  planner::Options o;
  o.shard = 2;
  o.hw = *planner::findHardwareProfile("a100");
  planner::Decisions d;
  std::vector<UnitCost> costs = {{10, 20, 4, false}};
  for (int64_t zero : {1, 2, 3}) {
    o.zero = zero;
    Step s = buildStep(pr, o, d, costs, BuildOptions{}, "t");
    int64_t gathers = 0, reduceScatters = 0, allReduces = 0;
    for (const Op &op : s.ops) {
      if (op.kind != OpKind::Collective)
        continue;
      gathers += op.coll == CollKind::AllGather;
      reduceScatters += op.coll == CollKind::ReduceScatter;
      allReduces += op.coll == CollKind::AllReduce;
    }
    // ZeRO-3 gathers for forward and backward; ZeRO-1/2 gather the updated
    // parameters once. Every level reduce-scatters the gradients (ZeRO-1
    // into whole gradient buffers: each rank steps its own part only).
    EXPECT_EQ(gathers, zero == 3 ? 2 : 1) << zero;
    EXPECT_EQ(reduceScatters, 1) << zero;
    EXPECT_EQ(allReduces, 0) << zero;
    EXPECT_TRUE(verifySchedule(s, 0).empty()) << zero;
  }
}

} // namespace

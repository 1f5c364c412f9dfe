//===- OptimizerOrderTest.cpp - The optimizer phase's group order ---------===//
//
// Expected orders and times are worked out by hand in comments, on a round
// profile (1 TFLOP/s, 10 GB/s inside a node, no latencies).
//
//===----------------------------------------------------------------------===//
#include "mfsdp/cost/OptimizerOrder.h"
#include "mfsdp/step/Schedule.h"

#include "RoundProfile.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace mfsdp;
using namespace mfsdp::step;

namespace {

constexpr double kTol = 1e-12;

cost::SimProfile round() { return test::roundProfile(); }

Buffer buffer(std::string name, bool persistent) {
  Buffer b;
  b.name = std::move(name);
  b.bytes = 64;
  b.persistent = persistent;
  return b;
}

Op make(OpKind kind, Phase phase, std::string name, int64_t group,
        std::vector<int64_t> reads, std::vector<int64_t> writes,
        double flops = 0) {
  Op op;
  op.kind = kind;
  op.phase = phase;
  op.name = std::move(name);
  op.group = group;
  op.reads = std::move(reads);
  op.writes = std::move(writes);
  op.flops = flops;
  if (kind == OpKind::Compute)
    op.compute = phase == Phase::Forward ? "forward" : "backward";
  return op;
}

Op collective(CollKind kind, Phase phase, int64_t group, int64_t src,
              int64_t dst) {
  Op op = make(OpKind::Collective, phase, "coll g" + std::to_string(group),
               group, {src}, {dst});
  op.coll = kind;
  op.meshAxes = {"dp_shard"};
  op.ranks = 2;
  op.collBytes = 2e9; // (W-1)/W * 2e9 B / 10 GB/s = 0.1 s
  return op;
}

/// Two ranks, three groups. Forward: gather group 0 (0.1 s) and its compute
/// (0.1 s). Backward: groups 2, 1, 0 (0.1 s each), each followed by its
/// reduction (0.1 s) into its own gradient shard. Optimizer: one op per
/// group (0.1 s), in group order.
Step threeGroups() {
  Step s;
  s.name = "three";
  s.world = 2;
  // 0 shard, 1 gathered g0, 2..4 grads g0..g2, 5..7 grad shards g0..g2.
  s.buffers = {buffer("shard", true),     buffer("gathered g0", false),
               buffer("grads g0", false), buffer("grads g1", false),
               buffer("grads g2", false), buffer("grad shard g0", true),
               buffer("grad shard g1", true), buffer("grad shard g2", true)};
  auto alloc = [](int64_t b, Phase ph) {
    return make(OpKind::Alloc, ph, "alloc", -1, {}, {b});
  };
  auto free = [](int64_t b, Phase ph) {
    return make(OpKind::Free, ph, "free", -1, {}, {b});
  };
  const Phase F = Phase::Forward, B = Phase::Backward, O = Phase::Optimizer;
  s.ops = {alloc(1, F), collective(CollKind::AllGather, F, 0, 0, 1),
           make(OpKind::Compute, F, "forward g0", 0, {1}, {}, 1e11),
           free(1, F)};
  for (int64_t g = 2; g >= 0; --g) {
    s.ops.push_back(alloc(2 + g, B));
    s.ops.push_back(make(OpKind::Compute, B, "backward g" + std::to_string(g),
                         g, {}, {2 + g}, 1e11));
    s.ops.push_back(collective(CollKind::ReduceScatter, B, g, 2 + g, 5 + g));
    s.ops.push_back(free(2 + g, B));
  }
  for (int64_t g = 0; g < 3; ++g)
    s.ops.push_back(make(OpKind::Optimizer, O, "opt g" + std::to_string(g), g,
                         {5 + g}, {0}, 1e11));
  return s;
}

std::vector<std::string> optimizerOrder(const Step &s) {
  std::vector<std::string> names;
  for (const Op &op : s.ops)
    if (op.kind == OpKind::Optimizer)
      names.push_back(op.name);
  return names;
}

std::vector<std::string> names(std::initializer_list<int> groups) {
  std::vector<std::string> v;
  for (int g : groups)
    v.push_back("opt g" + std::to_string(g));
  return v;
}

TEST(OptimizerOrder, FillThenFirstUnitsFirst) {
  auto order = [](int64_t fill) {
    Step s = threeGroups();
    OverlapOptions o;
    o.optimizerFill = fill;
    scheduleOverlap(s, o);
    EXPECT_TRUE(verifySchedule(s, 0).empty());
    return optimizerOrder(s);
  };
  EXPECT_EQ(order(-1), names({2, 1, 0})); // landing order
  EXPECT_EQ(order(0), names({0, 1, 2}));  // first units first
  EXPECT_EQ(order(1), names({2, 0, 1}));
  EXPECT_EQ(order(2), names({2, 1, 0}));
  EXPECT_EQ(order(7), names({2, 1, 0})); // more than there are groups
}

TEST(OptimizerOrder, SimulatorPicksTheFillThatHidesTheNextGather) {
  // Forward: gather [0, 0.1], forward g0 [0.1, 0.2]. Backward: g2 [0.2,
  // 0.3], its reduction [0.3, 0.4]; g1 [0.3, 0.4], reduction [0.4, 0.5];
  // g0 [0.4, 0.5], reduction [0.5, 0.6].
  //  landing (g2 g1 g0): [0.5, 0.6] [0.6, 0.7] [0.7, 0.8]: ends 0.8, g0
  //    ready 0.8, nothing of the next gather hidden: 0.8.
  //  fill 0 (g0 g1 g2): waits for g0's reduction: [0.6, 0.7] [0.7, 0.8]
  //    [0.8, 0.9]: ends 0.9, g0 ready 0.7, 0.1 s hidden: 0.8.
  //  fill 1 (g2 g0 g1): [0.5, 0.6] [0.6, 0.7] [0.7, 0.8]: ends 0.8, g0
  //    ready 0.7, 0.1 s hidden: 0.7. The best.
  cost::OrderChoice c =
      cost::chooseOptimizerFill(threeGroups(), OverlapOptions{}, round());
  ASSERT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.fill, 1);
  ASSERT_EQ(c.candidates.size(), 5u); // -1, 0, 1, 2, 3
  EXPECT_EQ(c.candidates[0].fill, -1);
  EXPECT_NEAR(c.candidates[0].stepSeconds, 0.8, kTol);
  EXPECT_NEAR(c.candidates[0].firstGroupReady, 0.8, kTol);
  EXPECT_NEAR(c.candidates[0].steadyStepSeconds, 0.8, kTol);
  EXPECT_NEAR(c.candidates[1].stepSeconds, 0.9, kTol);
  EXPECT_NEAR(c.candidates[1].firstGroupReady, 0.7, kTol);
  EXPECT_NEAR(c.candidates[1].steadyStepSeconds, 0.8, kTol);
  EXPECT_NEAR(c.candidates[2].stepSeconds, 0.8, kTol);
  EXPECT_NEAR(c.candidates[2].firstGroupReady, 0.7, kTol);
  EXPECT_NEAR(c.candidates[2].steadyStepSeconds, 0.7, kTol);
  // maxFill bounds the candidates.
  c = cost::chooseOptimizerFill(threeGroups(), OverlapOptions{}, round(), 0);
  ASSERT_TRUE(c.ok);
  EXPECT_EQ(c.candidates.size(), 2u);
  EXPECT_EQ(c.fill, 0); // ties landing's 0.8 and is ready earlier
}

TEST(OptimizerOrder, InvalidProfileIsAnError) {
  cost::SimProfile bad = round();
  bad.gemmFlops = 0;
  cost::OrderChoice c =
      cost::chooseOptimizerFill(threeGroups(), OverlapOptions{}, bad);
  EXPECT_FALSE(c.ok);
  EXPECT_FALSE(c.error.empty());
}

// scheduleOverlap is prepareOverlap (what no optimizer order changes) then
// finishOverlap; the search prepares once and finishes a copy per
// candidate, so the two must give the same program for every option.
TEST(OptimizerOrder, PrepareThenFinishIsScheduleOverlap) {
  for (int64_t prefetch : {0, 1, 2})
    for (bool separate : {false, true})
      for (int64_t fill : {-1, 0, 1, 2, 3}) {
        OverlapOptions o;
        o.prefetch = prefetch;
        o.separateGatherComm = separate;
        o.optimizerFill = fill;
        Step whole = threeGroups();
        scheduleOverlap(whole, o);
        Step parts = threeGroups();
        prepareOverlap(parts, o);
        finishOverlap(parts, o);
        SCOPED_TRACE(testing::Message() << "prefetch " << prefetch << " separate "
                                        << separate << " fill " << fill);
        ASSERT_EQ(parts.ops.size(), whole.ops.size());
        for (size_t i = 0; i < whole.ops.size(); ++i) {
          EXPECT_EQ(parts.ops[i].name, whole.ops[i].name) << "op " << i;
          EXPECT_EQ(parts.ops[i].kind, whole.ops[i].kind) << "op " << i;
          EXPECT_EQ(parts.ops[i].async, whole.ops[i].async) << "op " << i;
          EXPECT_EQ(parts.ops[i].comm, whole.ops[i].comm) << "op " << i;
          EXPECT_EQ(parts.ops[i].waitFor, whole.ops[i].waitFor) << "op " << i;
          EXPECT_EQ(parts.ops[i].reads, whole.ops[i].reads) << "op " << i;
          EXPECT_EQ(parts.ops[i].writes, whole.ops[i].writes) << "op " << i;
        }
      }
}

// The search simulates copies without names; its candidates must be those
// of scheduling and simulating the whole step for each fill.
TEST(OptimizerOrder, SearchMatchesSchedulingEachCandidateInFull) {
  for (int64_t prefetch : {0, 1}) {
    OverlapOptions o;
    o.prefetch = prefetch;
    cost::OrderChoice c = cost::chooseOptimizerFill(threeGroups(), o, round());
    ASSERT_TRUE(c.ok) << c.error;
    ASSERT_EQ(c.candidates.size(), 5u);
    for (const cost::OrderCandidate &got : c.candidates) {
      Step s = threeGroups();
      OverlapOptions each = o;
      each.optimizerFill = got.fill;
      scheduleOverlap(s, each);
      cost::SimOptions so;
      so.timings = false;
      cost::SimResult want = cost::simulate(s, round(), so);
      ASSERT_TRUE(want.ok) << want.error;
      EXPECT_EQ(got.stepSeconds, want.stepSeconds) << "fill " << got.fill;
      EXPECT_EQ(got.firstGroupReady, want.firstGroupReady) << "fill " << got.fill;
      EXPECT_EQ(got.steadyStepSeconds, want.steadyStepSeconds) << "fill " << got.fill;
    }
  }
}

// The search schedules the ops before the optimizer phase once and only
// the optimizer phase per fill: each result must be the step a whole
// schedule of that fill makes (the reductions still in flight when the
// optimizer phase starts, waited in it, are restored for every fill).
TEST(OptimizerOrder, EachFillSchedulesAsAWholeSchedule) {
  auto same = [](const Step &a, const Step &b) {
    ASSERT_EQ(a.ops.size(), b.ops.size());
    for (size_t i = 0; i < a.ops.size(); ++i) {
      const Op &x = a.ops[i], &y = b.ops[i];
      EXPECT_EQ(x.name, y.name) << "op " << i;
      EXPECT_EQ(x.kind, y.kind) << "op " << i;
      EXPECT_EQ(x.phase, y.phase) << "op " << i;
      EXPECT_EQ(x.group, y.group) << "op " << i;
      EXPECT_EQ(x.async, y.async) << "op " << i;
      EXPECT_EQ(x.waitFor, y.waitFor) << "op " << i;
      EXPECT_EQ(x.reads, y.reads) << "op " << i;
      EXPECT_EQ(x.writes, y.writes) << "op " << i;
    }
  };
  const std::vector<int64_t> fills = {-1, 0, 1, 2, 7, 0};
  Step prepared = threeGroups();
  prepareOverlap(prepared, OverlapOptions{});
  std::vector<int64_t> visited;
  bool waitsInOptimizer = false;
  finishOverlapEach(
      prepared, OverlapOptions{}, fills.front(),
      [&](int64_t fill, const Step &got) -> std::optional<int64_t> {
        visited.push_back(fill);
        Step want = threeGroups();
        OverlapOptions o;
        o.optimizerFill = fill;
        scheduleOverlap(want, o);
        same(got, want);
        for (const Op &op : got.ops)
          waitsInOptimizer |=
              op.kind == OpKind::Wait && op.phase == Phase::Optimizer;
        if (visited.size() == fills.size())
          return std::nullopt;
        return fills[visited.size()];
      });
  EXPECT_EQ(visited, fills);
  EXPECT_TRUE(waitsInOptimizer); // the case the restored state is for
  EXPECT_EQ(optimizerOrder(prepared), names({0, 1, 2})); // the last fill's
}

// The search on the step itself leaves it scheduled for the fill it
// chose, as scheduling a fresh step with that fill does, and chooses as
// the search on a copy does.
TEST(OptimizerOrder, SearchInPlaceLeavesTheChosenSchedule) {
  Step s = threeGroups();
  cost::OrderChoice c = cost::scheduleOptimizerFill(s, OverlapOptions{}, round());
  ASSERT_TRUE(c.ok) << c.error;
  cost::OrderChoice copy =
      cost::chooseOptimizerFill(threeGroups(), OverlapOptions{}, round());
  EXPECT_EQ(c.fill, copy.fill);
  EXPECT_EQ(c.candidates.size(), copy.candidates.size());
  Step want = threeGroups();
  OverlapOptions o;
  o.optimizerFill = c.fill;
  scheduleOverlap(want, o);
  ASSERT_EQ(s.ops.size(), want.ops.size());
  for (size_t i = 0; i < s.ops.size(); ++i) {
    EXPECT_EQ(s.ops[i].name, want.ops[i].name) << "op " << i;
    EXPECT_EQ(s.ops[i].waitFor, want.ops[i].waitFor) << "op " << i;
    EXPECT_EQ(s.ops[i].async, want.ops[i].async) << "op " << i;
  }
  EXPECT_EQ(optimizerOrder(s), names({2, 0, 1})); // fill 1, the best
}

// A step the simulator refuses: the error names the buffer, as simulating
// the scheduled step itself does, though the search simulates copies
// without names.
TEST(OptimizerOrder, ErrorNamesWhatTheStepNames) {
  Step bad = threeGroups();
  bad.buffers[3].bytes = -64; // "grads g1"
  cost::OrderChoice c = cost::chooseOptimizerFill(bad, OverlapOptions{}, round());
  EXPECT_FALSE(c.ok);
  Step s = bad;
  scheduleOverlap(s, OverlapOptions{});
  EXPECT_EQ(c.error, cost::simulate(s, round()).error);
  EXPECT_NE(c.error.find("'grads g1'"), std::string::npos) << c.error;
}

} // namespace

// The optimizer-order search simulates the ops its candidates share once
// (cost::PrefixSimulator): every candidate's result equals a whole
// simulation of it, field by field, also where one rank runs ops of its
// own (a Muon owner's) and candidates resume from the shared state.
TEST(OptimizerOrder, PrefixSimulationEqualsWholeSimulation) {
  for (bool owner : {false, true}) {
    Step prepared = threeGroups();
    if (owner)
      for (Op &op : prepared.ops)
        if (op.kind == OpKind::Optimizer && op.group == 1)
          op.onlyRank = 1;
    prepareOverlap(prepared, OverlapOptions{});
    cost::SimOptions so;
    so.timings = false;
    size_t shared = 0;
    std::unique_ptr<cost::PrefixSimulator> sim;
    int visits = 0;
    finishOverlapEach(
        prepared, OverlapOptions{}, -1,
        [&](int64_t fill, const Step &got) -> std::optional<int64_t> {
          if (!sim)
            sim = std::make_unique<cost::PrefixSimulator>(round(), so, shared);
          const cost::SimResult a = sim->simulate(got);
          const cost::SimResult b = cost::simulate(got, round(), so);
          EXPECT_TRUE(a.ok && b.ok) << a.error << b.error;
          EXPECT_EQ(a.stepSeconds, b.stepSeconds) << "fill " << fill;
          EXPECT_EQ(a.steadyStepSeconds, b.steadyStepSeconds) << "fill " << fill;
          EXPECT_EQ(a.firstGroupReady, b.firstGroupReady) << "fill " << fill;
          EXPECT_EQ(a.firstComputeWait, b.firstComputeWait) << "fill " << fill;
          EXPECT_EQ(a.commBusy, b.commBusy) << "fill " << fill;
          EXPECT_EQ(a.peakBytes, b.peakBytes) << "fill " << fill;
          EXPECT_EQ(a.rankStepSeconds, b.rankStepSeconds) << "fill " << fill;
          EXPECT_EQ(a.rankPeakBytes, b.rankPeakBytes) << "fill " << fill;
          EXPECT_EQ(a.optimizer.end, b.optimizer.end) << "fill " << fill;
          EXPECT_EQ(a.issues, b.issues) << "fill " << fill;
          ++visits;
          return fill < 2 ? std::optional<int64_t>(fill + 1) : std::nullopt;
        },
        &shared);
    EXPECT_EQ(visits, 4);
    EXPECT_GT(shared, 0u);
  }
}

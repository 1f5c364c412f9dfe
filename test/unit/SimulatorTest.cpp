//===- SimulatorTest.cpp - Cost model and step simulator, by hand ---------===//
//
// Every expected value is worked out by hand in a comment from the round
// profile `P` below, not computed by the code under test.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/cost/Simulator.h"
#include "mfsdp/planner/OwnerAssignment.h"
#include "mfsdp/runtime/Kernels.h"

#include "RoundProfile.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

using namespace mfsdp;
using namespace mfsdp::cost;
using step::CollKind;
using step::Op;
using step::OpKind;
using step::Phase;
using step::Step;

namespace {

// Round numbers (RoundProfile.h): 1 TFLOP/s, 100 GB/s HBM, 10 GB/s inside
// a node, 1 GB/s between nodes, no launch or latency costs.
SimProfile P() { return test::roundProfile(); }

constexpr double kTol = 1e-12;

Op compute(double flops, double bytes = 0, Phase ph = Phase::Forward,
           int64_t onlyRank = -1, const std::string &name = "compute") {
  Op op;
  op.kind = OpKind::Compute;
  op.phase = ph;
  op.name = name;
  op.flops = flops;
  op.bytes = bytes;
  op.onlyRank = onlyRank;
  return op;
}

Op optimizer(double flops, double bytes = 0, int64_t onlyRank = -1) {
  Op op = compute(flops, bytes, Phase::Optimizer, onlyRank, "optimizer");
  op.kind = OpKind::Optimizer;
  return op;
}

Op coll(CollKind kind, int64_t ranks, double collBytes, bool async = false,
        int64_t comm = 0, Phase ph = Phase::Forward) {
  Op op;
  op.kind = OpKind::Collective;
  op.phase = ph;
  op.name = std::string(mfsdp::enumName(kind));
  op.coll = kind;
  op.ranks = ranks;
  op.collBytes = collBytes;
  op.async = async;
  op.comm = comm;
  op.meshAxes = {"dp_shard"};
  return op;
}

Op wait(int64_t waitFor, Phase ph = Phase::Forward) {
  Op op;
  op.kind = OpKind::Wait;
  op.phase = ph;
  op.name = "wait";
  op.waitFor = waitFor;
  return op;
}

Op mem(OpKind kind, int64_t buffer, int64_t onlyRank = -1) {
  Op op;
  op.kind = kind;
  op.name = kind == OpKind::Alloc ? "alloc" : "free";
  op.writes = {buffer};
  op.onlyRank = onlyRank;
  return op;
}

Step program(int64_t world, std::vector<Op> ops) {
  Step s;
  s.name = "test";
  s.world = world;
  s.ops = std::move(ops);
  return s;
}

//===----------------------------------------------------------------------===//
// Cost model
//===----------------------------------------------------------------------===//

TEST(CostModel, ComputeIsFlopsOrBytesBound) {
  // 2e12 FLOPs / 1e12 = 2 s; 1e10 B / 1e11 = 0.1 s -> 2 s.
  EXPECT_NEAR(computeSeconds(compute(2e12, 1e10), P()), 2.0, kTol);
  // 1e9 FLOPs = 1 ms; 5e10 B / 1e11 = 0.5 s -> 0.5 s.
  EXPECT_NEAR(computeSeconds(compute(1e9, 5e10), P()), 0.5, kTol);
  // Optimizer ops use the same formula.
  EXPECT_NEAR(computeSeconds(optimizer(0, 3e11), P()), 3.0, kTol);
  // Launch overhead is added once: 1 ms + 2 s.
  SimProfile p = P();
  p.launchSeconds = 1e-3;
  EXPECT_NEAR(computeSeconds(compute(2e12, 1e10), p), 2.001, kTol);
  // An empty op costs the launch only.
  EXPECT_NEAR(computeSeconds(compute(0, 0), p), 1e-3, kTol);
  // Efficiencies: 50% GEMM, 50% HBM: 2e12 / 0.5e12 = 4 s vs
  // 5e11 / 0.5e11 = 10 s -> 10 s.
  p = P();
  p.gemmEfficiency = 0.5;
  p.hbmEfficiency = 0.5;
  EXPECT_NEAR(computeSeconds(compute(2e12, 5e11), p), 10.0, kTol);
  // Not a compute op: 0.
  EXPECT_EQ(computeSeconds(wait(0), P()), 0.0);
  EXPECT_EQ(computeSeconds(coll(CollKind::AllGather, 4, 1e9), P()), 0.0);
}

TEST(CostModel, SmallGemmsFallOffInEfficiency) {
  SimProfile p = P();
  p.gemmEfficiency = 0.5;
  p.smallGemmFlops = 1e9;
  // 1 GFLOP: eff = 0.5 * 1e9 / (1e9 + 1e9) = 0.25 -> 1e9 / 0.25e12 = 4 ms,
  // twice the 2 ms it would take at the large-GEMM efficiency.
  EXPECT_NEAR(computeSeconds(compute(1e9), p), 4e-3, kTol);
  // 1e15 FLOPs: eff = 0.5 * 1e15 / (1e15 + 1e9); time = (1e15 + 1e9) /
  // 0.5e12 = 2000.002 s, about the large-GEMM 2000 s.
  EXPECT_NEAR(computeSeconds(compute(1e15), p), 2000.002, 1e-9);
  // 1e8 FLOPs: (1e8 + 1e9) / 0.5e12 = 2.2 ms (eff = 0.5/11).
  EXPECT_NEAR(computeSeconds(compute(1e8), p), 2.2e-3, kTol);

  // The shipped profiles: a 1 GFLOP kernel runs at half the large-GEMM
  // efficiency, i.e. takes 2e9 / (peak * eff) plus the launch.
  for (const char *name : {"a100", "h100"}) {
    const SimProfile *q = planner::findHardwareProfile(name);
    ASSERT_NE(q, nullptr) << name;
    double expect = q->launchSeconds + 2e9 / (q->gemmFlops * q->gemmEfficiency);
    EXPECT_NEAR(computeSeconds(compute(1e9), *q), expect, 1e-15) << name;
  }
}

TEST(CostModel, CollectiveDurations) {
  // W = 4, 4e9 bytes, 1e10 B/s: (W-1)/W * 4e9 / 1e10 = 0.75 * 0.4 = 0.3 s.
  EXPECT_NEAR(collectiveSeconds(coll(CollKind::AllGather, 4, 4e9), P()), 0.3,
              kTol);
  EXPECT_NEAR(collectiveSeconds(coll(CollKind::ReduceScatter, 4, 4e9), P()),
              0.3, kTol);
  // All-reduce: two passes, 0.6 s.
  EXPECT_NEAR(collectiveSeconds(coll(CollKind::AllReduce, 4, 4e9), P()), 0.6,
              kTol);
  // All-gather-v with chunks {1, 2, 0.5, 0.5} GB (sum 4 GB), as grouped
  // ring broadcasts: the busiest link carries every chunk but the smallest,
  // (4 - 0.5) GB / 1e10 = 0.35 s.
  Op agv = coll(CollKind::AllGatherV, 4, 4e9);
  agv.chunks = {1e9, 2e9, 0.5e9, 0.5e9};
  EXPECT_NEAR(collectiveSeconds(agv, P()), 0.35, kTol);
  Op rsv = coll(CollKind::ReduceScatterV, 4, 4e9);
  rsv.chunks = {0.5e9, 0.5e9, 0.5e9, 2.5e9};
  EXPECT_NEAR(collectiveSeconds(rsv, P()), 0.35, kTol);
  // One owner holds everything: one ring broadcast of the whole buffer,
  // 4e9 / 1e10 = 0.4 s (the all-gather of even chunks: 0.3 s).
  Op one = coll(CollKind::AllGatherV, 4, 4e9);
  one.chunks = {0, 4e9, 0, 0};
  EXPECT_NEAR(collectiveSeconds(one, P()), 0.4, kTol);
  // Even chunks given: the all-gather's (W-1)/W, 0.3 s.
  Op even = coll(CollKind::ReduceScatterV, 4, 4e9);
  even.chunks = {1e9, 1e9, 1e9, 1e9};
  EXPECT_NEAR(collectiveSeconds(even, P()), 0.3, kTol);
  // No chunks: even, 3 * 1e9 / 1e10 = 0.3 s (same as the all-gather).
  EXPECT_NEAR(collectiveSeconds(coll(CollKind::ReduceScatterV, 4, 4e9), P()),
              0.3, kTol);
  // W = 1: no time, whatever the size.
  for (CollKind k :
       {CollKind::AllGather, CollKind::ReduceScatter, CollKind::AllReduce,
        CollKind::AllGatherV, CollKind::ReduceScatterV})
    EXPECT_EQ(collectiveSeconds(coll(k, 1, 4e9), P()), 0.0);
  // Not a collective: 0.
  EXPECT_EQ(collectiveSeconds(compute(1e12), P()), 0.0);
}

TEST(CostModel, InterNodeBandwidth) {
  // Flagged inter-node: 0.75 * 4e9 / 1e9 = 3 s.
  Op ag = coll(CollKind::AllGather, 4, 4e9);
  ag.interNode = true;
  EXPECT_NEAR(collectiveSeconds(ag, P()), 3.0, kTol);
  // 16 ranks on 8-GPU nodes cross nodes even without the flag:
  // 15/16 * 16e9 / 1e9 = 15 s.
  EXPECT_NEAR(collectiveSeconds(coll(CollKind::AllGather, 16, 16e9), P()), 15.0,
              kTol);
  // 8 ranks fit in one node: 7/8 * 8e9 / 1e10 = 0.7 s.
  EXPECT_NEAR(collectiveSeconds(coll(CollKind::AllGather, 8, 8e9), P()), 0.7,
              kTol);
  // h100-ib places one DP rank per node: any group of 2+ ranks is inter-node.
  const SimProfile *ib = planner::findHardwareProfile("h100-ib");
  ASSERT_NE(ib, nullptr);
  EXPECT_TRUE(isInterNode(coll(CollKind::AllGather, 2, 1), *ib));
  const SimProfile *h100 = planner::findHardwareProfile("h100");
  ASSERT_NE(h100, nullptr);
  EXPECT_FALSE(isInterNode(coll(CollKind::AllGather, 8, 1), *h100));
  EXPECT_TRUE(isInterNode(coll(CollKind::AllGather, 16, 1), *h100));
}

TEST(CostModel, LatencyTerms) {
  SimProfile p = P();
  p.collBaseSeconds = 10e-6;
  p.intraHopSeconds = 2e-6;
  p.interHopSeconds = 5e-6;
  // Empty all-gather over 4 ranks: 10 + 3 * 2 = 16 us.
  EXPECT_NEAR(collectiveSeconds(coll(CollKind::AllGather, 4, 0), p), 16e-6,
              kTol);
  // All-reduce: 2 * 3 = 6 hops: 10 + 12 = 22 us.
  EXPECT_NEAR(collectiveSeconds(coll(CollKind::AllReduce, 4, 0), p), 22e-6,
              kTol);
  // Inter-node all-gather: 10 + 3 * 5 = 25 us.
  Op ag = coll(CollKind::AllGather, 4, 0);
  ag.interNode = true;
  EXPECT_NEAR(collectiveSeconds(ag, p), 25e-6, kTol);
  // Latency plus bandwidth: 16 us + 0.3 s.
  EXPECT_NEAR(collectiveSeconds(coll(CollKind::ReduceScatter, 4, 4e9), p),
              0.3 + 16e-6, kTol);
  // All-gather-v: 16 us + (4 - 0.5) GB / 1e10 = 0.35 s.
  Op agv = coll(CollKind::AllGatherV, 4, 4e9);
  agv.chunks = {1e9, 2e9, 0.5e9, 0.5e9};
  EXPECT_NEAR(collectiveSeconds(agv, p), 0.35 + 16e-6, kTol);
  // W = 1 costs nothing, not even the base latency.
  EXPECT_EQ(collectiveSeconds(coll(CollKind::AllReduce, 1, 0), p), 0.0);
}

TEST(CostModel, OpSecondsDispatches) {
  EXPECT_NEAR(opSeconds(compute(1e12), P()), 1.0, kTol);
  EXPECT_NEAR(opSeconds(coll(CollKind::AllGather, 2, 2e10), P()), 1.0, kTol);
  SimProfile p = P();
  p.launchSeconds = 1;
  EXPECT_EQ(opSeconds(wait(0), p), 0.0);
  EXPECT_EQ(opSeconds(mem(OpKind::Alloc, 0), p), 0.0);
  EXPECT_EQ(opSeconds(mem(OpKind::Free, 0), p), 0.0);
}

//===----------------------------------------------------------------------===//
// Simulation: streams, issue events, waits
//===----------------------------------------------------------------------===//

// All-gather of 2e10 bytes over 2 ranks: 1/2 * 2e10 / 1e10 = 1 s.
constexpr double kOneSecondAG = 2e10;

TEST(Simulate, SynchronousAllGatherBlocksCompute) {
  Step s =
      program(2, {coll(CollKind::AllGather, 2, kOneSecondAG), compute(1e12)});
  SimResult r = simulate(s, P());
  ASSERT_TRUE(r.ok) << r.error;
  // AG [0, 1]; compute waits for it: [1, 2].
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NEAR(r.timings[rank][0].start, 0, kTol);
    EXPECT_NEAR(r.timings[rank][0].end, 1, kTol);
    EXPECT_NEAR(r.timings[rank][1].start, 1, kTol);
    EXPECT_NEAR(r.timings[rank][1].end, 2, kTol);
  }
  EXPECT_NEAR(r.stepSeconds, 2, kTol);
  EXPECT_NEAR(r.computeBusy, 1, kTol);
  EXPECT_NEAR(r.exposedComm, 1, kTol);
  EXPECT_NEAR(r.commBusy, 1, kTol);
}

TEST(Simulate, AsyncAllGatherOverlapsAndWaitBlocksOnlyIfRunning) {
  // Compute longer than the gather: AG [0, 1], compute [0, 2], the wait at
  // 2 finds it done ([2, 2]), compute [2, 3]. Nothing exposed.
  {
    Step s = program(2, {coll(CollKind::AllGather, 2, kOneSecondAG, true),
                         compute(2e12), wait(0), compute(1e12)});
    SimResult r = simulate(s, P());
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_NEAR(r.timings[0][1].start, 0, kTol);
    EXPECT_NEAR(r.timings[0][2].start, 2, kTol);
    EXPECT_NEAR(r.timings[0][2].end, 2, kTol);
    EXPECT_NEAR(r.timings[0][3].start, 2, kTol);
    EXPECT_NEAR(r.stepSeconds, 3, kTol);
    EXPECT_NEAR(r.computeBusy, 3, kTol);
    EXPECT_NEAR(r.exposedComm, 0, kTol);
    EXPECT_TRUE(r.issues.empty());
  }
  // Compute shorter: compute [0, 0.5], the wait blocks [0.5, 1] for the
  // remainder of the gather, compute [1, 2]. Exposed 0.5 s.
  {
    Step s = program(2, {coll(CollKind::AllGather, 2, kOneSecondAG, true),
                         compute(0.5e12), wait(0), compute(1e12)});
    SimResult r = simulate(s, P());
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_NEAR(r.timings[1][2].start, 0.5, kTol);
    EXPECT_NEAR(r.timings[1][2].end, 1, kTol);
    EXPECT_NEAR(r.timings[1][3].start, 1, kTol);
    EXPECT_NEAR(r.stepSeconds, 2, kTol);
    EXPECT_NEAR(r.computeBusy, 1.5, kTol);
    EXPECT_NEAR(r.exposedComm, 0.5, kTol);
    EXPECT_NEAR(r.forward.exposedComm, 0.5, kTol);
  }
}

TEST(Simulate, CollectiveWaitsForTheComputeIssuedBeforeIt) {
  // compute [0, 1]; the async AG is issued after it, so it starts at 1 and
  // ends at 2; the compute after it runs [1, 3]; the wait at 3 is free.
  Step s = program(2, {compute(1e12),
                       coll(CollKind::AllGather, 2, kOneSecondAG, true),
                       compute(2e12), wait(1)});
  SimResult r = simulate(s, P());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_NEAR(r.timings[0][1].start, 1, kTol);
  EXPECT_NEAR(r.timings[0][1].end, 2, kTol);
  EXPECT_NEAR(r.timings[0][2].start, 1, kTol);
  EXPECT_NEAR(r.timings[0][3].end, 3, kTol);
  EXPECT_NEAR(r.stepSeconds, 3, kTol);
}

TEST(Simulate, OneCommunicatorSerializesTwoOverlap) {
  // Same comm: [0, 1] then [1, 2]; the waits end at 1 and 2.
  {
    Step s =
        program(2, {coll(CollKind::AllGather, 2, kOneSecondAG, true, 0),
                    coll(CollKind::ReduceScatter, 2, kOneSecondAG, true, 0),
                    wait(0), wait(1)});
    SimResult r = simulate(s, P());
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_NEAR(r.timings[0][1].start, 1, kTol);
    EXPECT_NEAR(r.timings[0][1].end, 2, kTol);
    EXPECT_NEAR(r.timings[0][2].end, 1, kTol);
    EXPECT_NEAR(r.timings[0][3].end, 2, kTol);
    EXPECT_NEAR(r.stepSeconds, 2, kTol);
    EXPECT_NEAR(r.commBusy, 2, kTol);
  }
  // Comms 0 and 1: both [0, 1]; the step takes 1 s, the streams 2 s of work.
  {
    Step s =
        program(2, {coll(CollKind::AllGather, 2, kOneSecondAG, true, 0),
                    coll(CollKind::ReduceScatter, 2, kOneSecondAG, true, 1),
                    wait(0), wait(1)});
    SimResult r = simulate(s, P());
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_NEAR(r.timings[0][1].start, 0, kTol);
    EXPECT_NEAR(r.timings[0][1].end, 1, kTol);
    EXPECT_NEAR(r.stepSeconds, 1, kTol);
    EXPECT_NEAR(r.commBusy, 2, kTol);
  }
  // A synchronous collective behind an async one on the same comm waits for
  // the stream: AG async [0, 1], compute [0, 0.25], sync RS starts at 1 and
  // ends at 2 and holds the compute stream until then.
  {
    Step s =
        program(2, {coll(CollKind::AllGather, 2, kOneSecondAG, true, 0),
                    compute(0.25e12),
                    coll(CollKind::ReduceScatter, 2, kOneSecondAG, false, 0),
                    compute(1e12), wait(0)});
    SimResult r = simulate(s, P());
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_NEAR(r.timings[0][2].start, 1, kTol);
    EXPECT_NEAR(r.timings[0][3].start, 2, kTol);
    EXPECT_NEAR(r.stepSeconds, 3, kTol);
    EXPECT_NEAR(r.exposedComm, 3 - 1.25, kTol);
  }
}

TEST(Simulate, OwnerWorkOnOneRankDelaysTheNextCollective) {
  // Rank 0 owns 3 s of optimizer work, rank 1 owns 1 s; both then run a
  // shared 1 s op: rank 0 [3, 4], rank 1 [1, 2]. The all-gather after them
  // starts when the slower rank issues it: [4, 5]. Rank 1 then runs 2 s of
  // its own: [5, 7].
  Step s = program(
      2,
      {optimizer(3e12, 0, 0), optimizer(1e12, 0, 1), optimizer(1e12),
       coll(CollKind::AllGather, 2, kOneSecondAG, false, 0, Phase::Optimizer),
       optimizer(2e12, 0, 1)});
  SimResult r = simulate(s, P());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.timings[0][1].start, -1);
  EXPECT_EQ(r.timings[0][1].end, -1);
  EXPECT_EQ(r.timings[1][0].start, -1);
  EXPECT_EQ(r.timings[0][4].start, -1);
  EXPECT_NEAR(r.timings[0][2].start, 3, kTol);
  EXPECT_NEAR(r.timings[1][2].start, 1, kTol);
  EXPECT_NEAR(r.timings[0][3].start, 4, kTol);
  EXPECT_NEAR(r.timings[1][3].start, 4, kTol);
  EXPECT_NEAR(r.timings[1][3].end, 5, kTol);
  EXPECT_NEAR(r.timings[1][4].start, 5, kTol);
  EXPECT_NEAR(r.timings[1][4].end, 7, kTol);
  ASSERT_EQ(r.rankStepSeconds.size(), 2u);
  EXPECT_NEAR(r.rankStepSeconds[0], 5, kTol);
  EXPECT_NEAR(r.rankStepSeconds[1], 7, kTol);
  EXPECT_NEAR(r.stepSeconds, 7, kTol);
  EXPECT_EQ(r.slowestRank, 1);
  // Busy: rank 0 3 + 1 = 4 s, rank 1 1 + 1 + 2 = 4 s. On rank 1 the step
  // is 7 s, so 3 s exposed (waiting for rank 0, then the gather).
  EXPECT_NEAR(r.rankComputeBusy[0], 4, kTol);
  EXPECT_NEAR(r.rankComputeBusy[1], 4, kTol);
  EXPECT_NEAR(r.computeBusy, 4, kTol);
  EXPECT_NEAR(r.exposedComm, 3, kTol);
  // The optimizer phase is the whole step; its slowest rank is 1: [0, 7].
  EXPECT_EQ(r.optimizer.rank, 1);
  EXPECT_NEAR(r.optimizer.begin, 0, kTol);
  EXPECT_NEAR(r.optimizer.end, 7, kTol);
  EXPECT_NEAR(r.optimizer.computeBusy, 4, kTol);
  EXPECT_NEAR(r.optimizer.exposedComm, 3, kTol);
  EXPECT_EQ(r.forward.rank, -1);
}

TEST(Simulate, RanksNoOpNamesAreSimulatedAsOne) {
  // World 6: ranks 1 and 4 own optimizer work and rank 4 a persistent
  // buffer; the other four ranks run the same ops and are simulated once.
  // The reference names every rank with an op of no cost at the end (the
  // round profile has no launch cost), so each rank is simulated on its
  // own; every per-rank figure must be the same.
  Step s = program(
      6, {mem(OpKind::Alloc, 1), coll(CollKind::AllGather, 6, 3e9, true),
          compute(2e12), wait(1), compute(1e12, 0, Phase::Backward),
          mem(OpKind::Alloc, 2, 1), optimizer(3e12, 0, 1),
          mem(OpKind::Free, 2, 1), mem(OpKind::Free, 1),
          coll(CollKind::ReduceScatter, 6, 6e9, true, 1, Phase::Backward),
          optimizer(2e12, 0, 4), wait(9, Phase::Optimizer), optimizer(1e12),
          // Freed twice on rank 4 only: one issue, named on rank 4.
          mem(OpKind::Alloc, 3, 4), mem(OpKind::Free, 3, 4),
          mem(OpKind::Free, 3, 4), optimizer(1e12)});
  s.ops[2].group = s.ops[12].group = 7;
  s.buffers = {{"shard", 100, true, -1},
               {"gathered", 1000, false, -1},
               {"owner scratch", 500, false, -1},
               {"owner twice", 50, false, -1},
               {"owner state", 300, true, 4}};
  const size_t n = s.ops.size();
  Step every = s;
  for (int64_t rank = 0; rank < s.world; ++rank)
    every.ops.push_back(optimizer(0, 0, rank));
  SimResult r = simulate(s, P()), ref = simulate(every, P());
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_TRUE(ref.ok) << ref.error;
  // Not a step where the classes cannot differ: the ranks do.
  EXPECT_NE(ref.rankComputeBusy[0], ref.rankComputeBusy[1]);
  EXPECT_NE(ref.rankPeakBytes[0], ref.rankPeakBytes[4]);
  EXPECT_EQ(r.rankStepSeconds, ref.rankStepSeconds);
  EXPECT_EQ(r.rankComputeBusy, ref.rankComputeBusy);
  EXPECT_EQ(r.rankPeakBytes, ref.rankPeakBytes);
  EXPECT_EQ(r.stepSeconds, ref.stepSeconds);
  EXPECT_EQ(r.slowestRank, ref.slowestRank);
  EXPECT_EQ(r.peakBytes, ref.peakBytes);
  EXPECT_EQ(r.firstGroupReady, ref.firstGroupReady);
  EXPECT_EQ(r.steadyStepSeconds, ref.steadyStepSeconds);
  for (const auto &[a, b] : {std::pair{&r.forward, &ref.forward},
                             {&r.backward, &ref.backward},
                             {&r.optimizer, &ref.optimizer}}) {
    EXPECT_EQ(a->rank, b->rank);
    EXPECT_EQ(a->begin, b->begin);
    EXPECT_EQ(a->end, b->end);
    EXPECT_EQ(a->computeBusy, b->computeBusy);
    EXPECT_EQ(a->exposedComm, b->exposedComm);
  }
  ASSERT_EQ(r.issues.size(), 1u);
  EXPECT_EQ(r.issues, ref.issues);
  EXPECT_NE(r.issues[0].find("on rank 4"), std::string::npos) << r.issues[0];
  ASSERT_EQ(r.timings.size(), 6u);
  for (int64_t rank = 0; rank < s.world; ++rank)
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(r.timings[rank][i].start, ref.timings[rank][i].start)
          << "rank " << rank << " op " << i;
      EXPECT_EQ(r.timings[rank][i].end, ref.timings[rank][i].end)
          << "rank " << rank << " op " << i;
    }
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

TEST(Simulate, PeakMemoryPersistentTransientAndOwnerOnly) {
  Step s =
      program(2, {mem(OpKind::Alloc, 1), compute(1e12), mem(OpKind::Alloc, 3),
                  mem(OpKind::Alloc, 2, 1), mem(OpKind::Free, 1),
                  mem(OpKind::Free, 2, 1), mem(OpKind::Free, 3)});
  s.buffers = {{"shard", 100, true, -1},
               {"gathered", 1000, false, -1},
               {"owner scratch", 500, false, -1},
               {"activations", 300, false, -1},
               {"never allocated", 1e6, false, -1}};
  SimResult r = simulate(s, P());
  ASSERT_TRUE(r.ok) << r.error;
  // Rank 0: 100 persistent; +1000 = 1100; +300 = 1400 (peak); -1000 = 400;
  // -300 = 100. The owner scratch is rank 1's only.
  // Rank 1: 1100; 1400; +500 = 1900 (peak); 900; 400; 100.
  // The never-allocated buffer never counts.
  ASSERT_EQ(r.rankPeakBytes.size(), 2u);
  EXPECT_EQ(r.rankPeakBytes[0], 1400);
  EXPECT_EQ(r.rankPeakBytes[1], 1900);
  EXPECT_EQ(r.peakBytes, 1900);
  EXPECT_TRUE(r.issues.empty());
}

TEST(Simulate, MemoryMistakesAreIssuesNotErrors) {
  // Buffer 1 freed twice, buffer 2 never freed.
  Step s = program(1, {mem(OpKind::Alloc, 1), mem(OpKind::Alloc, 2),
                       mem(OpKind::Free, 1), mem(OpKind::Free, 1)});
  s.buffers = {{"state", 10, true, -1},
               {"twice", 1000, false, -1},
               {"leak", 200, false, -1}};
  SimResult r = simulate(s, P());
  ASSERT_TRUE(r.ok) << r.error;
  // 10; 1010; 1210 (peak); 210; the second free is ignored: still 210.
  EXPECT_EQ(r.peakBytes, 1210);
  ASSERT_EQ(r.issues.size(), 2u);
  EXPECT_NE(r.issues[0].find("second time"), std::string::npos) << r.issues[0];
  EXPECT_NE(r.issues[1].find("never freed"), std::string::npos) << r.issues[1];
}

//===----------------------------------------------------------------------===//
// Phases
//===----------------------------------------------------------------------===//

TEST(Simulate, PhaseStats) {
  Step s = program(
      2, {// forward: sync AG [0, 1], compute [1, 2]
          coll(CollKind::AllGather, 2, kOneSecondAG), compute(1e12),
          // backward: async AG issued at 2: [2, 3]; compute [2, 2.5];
          // wait [2.5, 3]; compute [3, 4]
          coll(CollKind::AllGather, 2, kOneSecondAG, true, 0, Phase::Backward),
          compute(0.5e12, 0, Phase::Backward), wait(2, Phase::Backward),
          compute(1e12, 0, Phase::Backward),
          // optimizer: [4, 6]
          optimizer(2e12)});
  SimResult r = simulate(s, P());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_NEAR(r.forward.begin, 0, kTol);
  EXPECT_NEAR(r.forward.end, 2, kTol);
  EXPECT_NEAR(r.forward.computeBusy, 1, kTol);
  EXPECT_NEAR(r.forward.exposedComm, 1, kTol);
  EXPECT_NEAR(r.backward.begin, 2, kTol);
  EXPECT_NEAR(r.backward.end, 4, kTol);
  EXPECT_NEAR(r.backward.computeBusy, 1.5, kTol);
  EXPECT_NEAR(r.backward.exposedComm, 0.5, kTol);
  EXPECT_NEAR(r.optimizer.begin, 4, kTol);
  EXPECT_NEAR(r.optimizer.end, 6, kTol);
  EXPECT_NEAR(r.optimizer.computeBusy, 2, kTol);
  EXPECT_NEAR(r.optimizer.exposedComm, 0, kTol);
  EXPECT_EQ(r.forward.rank, 0);
  // Whole step: 6 s, 4.5 s busy, 1.5 s exposed.
  EXPECT_NEAR(r.stepSeconds, 6, kTol);
  EXPECT_NEAR(r.computeBusy, 4.5, kTol);
  EXPECT_NEAR(r.exposedComm, 1.5, kTol);
  EXPECT_NEAR(r.commBusy, 2, kTol);
  EXPECT_EQ(&r.phase(Phase::Backward), &r.backward);
}

TEST(Simulate, InterleavedPhasesDoNotCountEachOthersComputeAsExposed) {
  // forward [0, 1], optimizer [1, 3], forward [3, 4]: the forward span is
  // [0, 4] with 2 s of its own compute, but the other 2 s were optimizer
  // compute, not waiting: nothing exposed.
  Step s = program(1, {compute(1e12), optimizer(2e12), compute(1e12)});
  SimResult r = simulate(s, P());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_NEAR(r.forward.end - r.forward.begin, 4, kTol);
  EXPECT_NEAR(r.forward.computeBusy, 2, kTol);
  EXPECT_NEAR(r.forward.exposedComm, 0, kTol);
}

//===----------------------------------------------------------------------===//
// Validation
//===----------------------------------------------------------------------===//

TEST(Simulate, FirstGroupReadyAndSteadyState) {
  auto inGroup = [](Op op, int64_t group) {
    op.group = group;
    return op;
  };
  Step s = program(
      2, {inGroup(coll(CollKind::AllGather, 2, kOneSecondAG, true), 0),
          wait(0), inGroup(compute(1e12), 0),
          inGroup(optimizer(2e12), 1), inGroup(optimizer(1e12, 0, 1), 0),
          inGroup(optimizer(2e12), 2)});
  SimResult r = simulate(s, P());
  ASSERT_TRUE(r.ok) << r.error;
  // AG [0, 1]; the forward compute of group 0 waits for it: [1, 2].
  // Optimizer g1 [2, 4] on both ranks; g0 on rank 1 only [4, 5]; g2 [4, 6]
  // on rank 0 and [5, 7] on rank 1. The step ends at 7.
  EXPECT_EQ(r.firstGroup, 0);
  EXPECT_NEAR(r.firstComputeWait, 1, kTol);
  EXPECT_NEAR(r.stepSeconds, 7, kTol);
  // Group 0 is updated everywhere at 5; the next step's first gather (1 s)
  // issued then ends before this step does (2 s later): all of it hidden.
  EXPECT_NEAR(r.firstGroupReady, 5, kTol);
  EXPECT_NEAR(r.steadyStepSeconds, 6, kTol);
  // With no optimizer work for group 0 it is ready only at the end.
  s.ops[4].group = 3;
  r = simulate(s, P());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_NEAR(r.firstGroupReady, r.stepSeconds, kTol);
  EXPECT_NEAR(r.steadyStepSeconds, r.stepSeconds, kTol);
}

TEST(Simulate, FirstComputeIsAUnitsNotACopy) {
  // A per_param group's shard copy comes first in program order, before
  // the gather's wait (here it reads nothing): the first compute whose
  // wait decides the steady state is the unit's, which waits for the
  // gather (1 s), not the copy (no wait).
  auto inGroup = [](Op op, int64_t group) {
    op.group = group;
    return op;
  };
  Op copy = inGroup(compute(0, 0), 0);
  copy.compute = "copy";
  Op unit = inGroup(compute(1e12), 0);
  unit.compute = "forward";
  Step s = program(2, {copy, inGroup(coll(CollKind::AllGather, 2, kOneSecondAG, true), 0),
                       wait(1), unit, inGroup(optimizer(2e12), 0)});
  SimResult r = simulate(s, P());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.firstGroup, 0);
  EXPECT_NEAR(r.firstComputeWait, 1, 1e-4);
}

TEST(Simulate, ValidationErrors) {
  {
    // A kernel the cost model cannot price (a GEMM of no rows) would count
    // as no time: refused, naming the op and the kernel.
    Op c = compute(1e12);
    c.kernels = {UnitKernel::gemm(64, 64, 1, 1), UnitKernel{KernelKind::Gemm, {64, 0, 1}, 1}};
    c.kernelTokens = 128;
    Step s = program(1, {c});
    SimResult r = simulate(s, P());
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("kernel 1:"), std::string::npos) << r.error;
  }
  {
    // Wait on a compute op.
    Step s = program(2, {compute(1e12), wait(0)});
    SimResult r = simulate(s, P());
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("not a collective"), std::string::npos) << r.error;
  }
  {
    // Wait on a later op.
    Step s = program(2, {wait(1), coll(CollKind::AllGather, 2, 1, true)});
    SimResult r = simulate(s, P());
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("earlier"), std::string::npos) << r.error;
  }
  {
    // Wait index out of range.
    Step s = program(2, {wait(-1)});
    EXPECT_FALSE(simulate(s, P()).ok);
  }
  {
    // Alloc of a buffer that does not exist.
    Step s = program(2, {mem(OpKind::Alloc, 3)});
    s.buffers = {{"only", 1, false, -1}};
    SimResult r = simulate(s, P());
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("out of range"), std::string::npos) << r.error;
  }
  {
    // A read of a buffer that does not exist.
    Op op = compute(1);
    op.reads = {0};
    EXPECT_FALSE(simulate(program(1, {op}), P()).ok);
  }
  {
    // Free naming no buffer.
    Op op = mem(OpKind::Free, 0);
    op.writes.clear();
    EXPECT_FALSE(simulate(program(1, {op}), P()).ok);
  }
  {
    // A collective on one rank only; onlyRank beyond the world.
    Op c = coll(CollKind::AllGather, 2, 1);
    c.onlyRank = 0;
    EXPECT_FALSE(simulate(program(2, {c}), P()).ok);
    EXPECT_FALSE(
        simulate(program(2, {compute(1, 0, Phase::Forward, 2)}), P()).ok);
  }
  {
    // Chunks that do not match the group; negative FLOPs; world 0.
    Op v = coll(CollKind::AllGatherV, 4, 4);
    v.chunks = {1, 1, 2};
    EXPECT_FALSE(simulate(program(4, {v}), P()).ok);
    EXPECT_FALSE(simulate(program(1, {compute(-1)}), P()).ok);
    EXPECT_FALSE(simulate(program(0, {}), P()).ok);
  }
  {
    // A profile that cannot time anything.
    SimProfile p = P();
    p.gemmFlops = 0;
    SimResult r = simulate(program(1, {compute(1)}), p);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("gemmFlops"), std::string::npos) << r.error;
  }
  // Failures still render and trace without crashing.
  Step bad = program(2, {compute(1e12), wait(0)});
  SimResult r = simulate(bad, P());
  EXPECT_NE(renderText(bad, r, P()).find("cannot simulate"), std::string::npos);
  nlohmann::json j = nlohmann::json::parse(chromeTrace(bad, r));
  EXPECT_TRUE(j["traceEvents"].empty());
  EXPECT_TRUE(j["otherData"].contains("error"));
}

TEST(Simulate, SuspiciousButSimulable) {
  // Chunks that do not sum to collBytes, an async collective never waited.
  Op v = coll(CollKind::AllGatherV, 2, 10, true);
  v.chunks = {1, 2};
  SimResult r = simulate(program(2, {v}), P());
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.issues.size(), 2u);
  EXPECT_NE(r.issues[0].find("chunks sum"), std::string::npos);
  EXPECT_NE(r.issues[1].find("never waited"), std::string::npos);
}

TEST(Simulate, EmptyStep) {
  SimResult r = simulate(program(3, {}), P());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.stepSeconds, 0);
  EXPECT_EQ(r.rankStepSeconds.size(), 3u);
  EXPECT_EQ(r.timings.size(), 3u);
}

//===----------------------------------------------------------------------===//
// Floors
//===----------------------------------------------------------------------===//

TEST(Floors, OptimizerFloorOnTwoRanks) {
  // Rank 0 owns 3e12 FLOPs + 1e11 B: 3 + 1 = 4 s. Rank 1 owns 1e12 FLOPs +
  // 5e11 B: 1 + 5 = 6 s. Both run 1e12 FLOPs: +1 s. Compute ops do not
  // count. Floor = max(5, 7) = 7 s.
  Step s = program(2, {compute(5e12), optimizer(3e12, 1e11, 0),
                       optimizer(1e12, 5e11, 1), optimizer(1e12)});
  EXPECT_NEAR(optimizerFloorSeconds(s, P()), 7, kTol);
  // Peak rates only: efficiencies and launch overhead do not change it.
  SimProfile p = P();
  p.gemmEfficiency = 0.5;
  p.hbmEfficiency = 0.5;
  p.launchSeconds = 1;
  p.smallGemmFlops = 1e9;
  EXPECT_NEAR(optimizerFloorSeconds(s, p), 7, kTol);
  // An optimizer op stands for separate kernels, so the simulation adds its
  // FLOP and byte terms: after the shared 5 s compute, rank 0 runs 3 + 1 +
  // 1 = 5 s and rank 1 runs 1 + 5 + 1 = 7 s, exactly the floor.
  SimResult r = simulate(s, P());
  ASSERT_TRUE(r.ok);
  EXPECT_NEAR(r.rankStepSeconds[0], 5 + 5, kTol);
  EXPECT_NEAR(r.rankStepSeconds[1], 5 + 7, kTol);
}

TEST(Floors, NewtonSchulzPricedAtItsPrecision) {
  // The runtime's Newton-Schulz is priced at fp32Flops x nsFp32Efficiency
  // or, with nsBf16, gemmFlops x nsBf16Efficiency; torch.optim.Muon's (the
  // baselines' torchNs) at gemmFlops x nsTorchEfficiency whatever the
  // runtime's precision. Floors take the same peaks without efficiencies.
  SimProfile p = P();
  p.gemmFlops = 4e12;
  p.fp32Flops = 1e12;
  p.nsFp32Efficiency = 0.5;  // 0.5e12 FLOP/s
  p.nsBf16Efficiency = 0.25; // 1e12 FLOP/s
  p.nsTorchEfficiency = 0.5; // 2e12 FLOP/s
  Op torch = optimizer(1e12);
  torch.torchNs = true;
  Step mine = program(1, {optimizer(1e12)});
  Step theirs = program(1, {torch});
  auto seconds = [&](const Step &s) {
    SimResult r = simulate(s, p);
    EXPECT_TRUE(r.ok) << r.error;
    return r.stepSeconds;
  };
  EXPECT_NEAR(seconds(mine), 2, kTol);
  EXPECT_NEAR(optimizerFloorSeconds(mine, p), 1, kTol);
  EXPECT_NEAR(optimizerSustainedFloorSeconds(mine, p), 2, kTol);
  EXPECT_NEAR(seconds(theirs), 0.5, kTol);
  EXPECT_NEAR(optimizerFloorSeconds(theirs, p), 0.25, kTol);
  p.nsBf16 = true;
  EXPECT_NEAR(seconds(mine), 1, kTol);
  EXPECT_NEAR(optimizerFloorSeconds(mine, p), 0.25, kTol);
  EXPECT_NEAR(seconds(theirs), 0.5, kTol);
  // A profile without an fp32 rate cannot price fp32 Newton-Schulz.
  p.fp32Flops = 0;
  EXPECT_NE(validateProfile(p).find("fp32Flops must be positive"), std::string::npos);
  p.fp32Flops = 1e12;
  p.nsTorchEfficiency = 1.5;
  EXPECT_NE(validateProfile(p).find("nsTorchEfficiency must be in (0, 1]"),
            std::string::npos);
}

TEST(Floors, NewtonSchulzOnH100AgainstMeasured) {
  // The H100 profile's Newton-Schulz rates and times per kernel were fitted
  // on two square matrices, 4096x4096 and 1024x1024 (5 iterations, measured
  // on one H100 80GB HBM3 on 2026-11-27: docs/benchmarks.md, "CUDA
  // optimizer kernels against PyTorch's"). The two 4096x14336 shapes
  // measured in the same run are held out: each precision's prediction
  // (kernels x time per kernel + FLOPs / rate) within 10% of its
  // measurement. torch.optim.Muon's (the larger of its kernels x time per
  // kernel and FLOPs / rate) has its rate fitted on 4096x4096 and its time
  // per kernel on 1024x1024; the large shapes are held out.
  SimProfile h = *planner::findHardwareProfile("h100");
  struct Measured {
    int64_t rows, cols;
    double fp32Ms, bf16Ms, torchMs;
    bool fitted;
  } runs[] = {{4096, 4096, 31.274, 2.956, 3.567, true},
              {1024, 1024, 0.996, 0.348, 0.519, true},
              {4096, 14336, 84.834, 7.779, 9.359, false},
              {14336, 4096, 84.980, 7.941, 9.627, false}};
  for (const Measured &m : runs) {
    const double ours = planner::newtonSchulzFlops(m.rows, m.cols, 5);
    const double torchFlops = planner::newtonSchulzGemmFlops(m.rows, m.cols, 5);
    auto predicted = [&](bool bf16) {
      h.nsBf16 = bf16;
      const auto precision = bf16 ? rt::NsPrecision::BF16 : rt::NsPrecision::FP32;
      return (static_cast<double>(rt::newtonSchulzKernels(m.rows, m.cols, 5, precision)) *
                  planner::nsKernelSeconds(h) +
              ours / planner::nsFlopsRate(h)) *
             1e3;
    };
    const double torchPredicted =
        std::max(torchFlops / (h.gemmFlops * h.nsTorchEfficiency),
                 static_cast<double>(planner::torchNewtonSchulzKernels(5)) *
                     h.nsTorchKernelSeconds) *
        1e3;
    const double tol = m.fitted ? 0.01 : 0.10;
    EXPECT_NEAR(predicted(false) / m.fp32Ms, 1, tol) << m.rows << "x" << m.cols << " fp32";
    EXPECT_NEAR(predicted(true) / m.bf16Ms, 1, tol) << m.rows << "x" << m.cols << " bf16";
    EXPECT_NEAR(torchPredicted / m.torchMs, 1, m.cols == m.rows ? 0.005 : 0.10)
        << m.rows << "x" << m.cols << " torch";
  }
  // torch's: the bf16 copy, norm, clamp and div_, then an mm and two addmm
  // (a copy and a GEMM each) a step; its whole step adds the momentum's
  // two lerps and the update's mul_ and add_.
  EXPECT_EQ(planner::torchNewtonSchulzKernels(5), 29);
  EXPECT_EQ(planner::torchMuonKernels(5), 33);
  // The kernels counted are those of runtime/cuda/Kernels.cu: 4 around the
  // iterations, 2 strips + 5 an iteration (two symmetric products of one
  // GEMM a strip and a mirror, two copies, one GEMM); strips of 512 rows in
  // fp32 and 1024 in bf16 at this side.
  EXPECT_EQ(rt::newtonSchulzKernels(4096, 4096, 5, rt::NsPrecision::FP32), 4 + 5 * (16 + 5));
  EXPECT_EQ(rt::newtonSchulzKernels(4096, 14336, 5, rt::NsPrecision::BF16), 4 + 5 * (8 + 5));
  EXPECT_EQ(rt::newtonSchulzKernels(1024, 1024, 5, rt::NsPrecision::BF16), 4 + 5 * (4 + 5));
}

// A Muon owner's optimizer op pays its Newton-Schulz kernels' time beside
// the FLOPs; torch.optim.Muon's (torch_ns) the larger of its launches' time
// and the FLOPs'.
TEST(Floors, NewtonSchulzKernelsPriced) {
  SimProfile h = *planner::findHardwareProfile("h100");
  Op op;
  op.kind = OpKind::Optimizer;
  op.phase = Phase::Optimizer;
  op.flops = 1e9;
  const double without = computeSeconds(op, h);
  op.nsKernels = 100;
  EXPECT_NEAR(computeSeconds(op, h) - without, 100 * h.nsFp32KernelSeconds, 1e-12);
  h.nsBf16 = true;
  const double bf16Without = [&] {
    Op o = op;
    o.nsKernels = 0;
    return computeSeconds(o, h);
  }();
  EXPECT_NEAR(computeSeconds(op, h) - bf16Without, 100 * h.nsBf16KernelSeconds, 1e-12);
  // torch.optim.Muon's kernels are launched by the host while the GPU
  // works: its op takes the larger of the two, not their sum.
  op.torchNs = true;
  op.flops = 1e12;
  Op torchOp = op;
  torchOp.nsKernels = 0;
  const double gpu = computeSeconds(torchOp, h);
  op.nsKernels = 2;
  ASSERT_LT(2 * h.nsTorchKernelSeconds, gpu);
  EXPECT_DOUBLE_EQ(computeSeconds(op, h), gpu);
  op.nsKernels = 1000;
  ASSERT_GT(1000 * h.nsTorchKernelSeconds, gpu);
  EXPECT_DOUBLE_EQ(computeSeconds(op, h), 1000 * h.nsTorchKernelSeconds);
  // A negative time per kernel is refused, as any profile override is.
  h.nsTorchKernelSeconds = -1e-6;
  EXPECT_NE(validateProfile(h).find("nsTorchKernelSeconds must be non-negative"),
            std::string::npos);
}

// The trainer's activations: the buffers forward and recomputing compute
// ops write, live from alloc to free; gathered copies and gradients (the
// step library's) are not counted, and a rank's own buffers count on the
// rank that holds the most.
TEST(Memory, ActivationPeak) {
  auto writing = [](const char *kind, Phase ph, std::vector<int64_t> writes) {
    Op op = compute(1e9, 0, ph);
    op.compute = kind;
    op.writes = std::move(writes);
    return op;
  };
  // 0: gathered copy, 1-2: activations of two units, 3: gradients,
  // 4: an activation of rank 1 only, 5: rank 0's.
  Step s = program(2, {mem(OpKind::Alloc, 0), mem(OpKind::Alloc, 1),
                       writing("forward", Phase::Forward, {1}), mem(OpKind::Alloc, 2),
                       writing("forward", Phase::Forward, {2}), mem(OpKind::Alloc, 4, 1),
                       mem(OpKind::Alloc, 5, 0), writing("recompute", Phase::Backward, {4, 5}),
                       mem(OpKind::Free, 4, 1), mem(OpKind::Free, 5, 0), mem(OpKind::Free, 2),
                       mem(OpKind::Alloc, 3), writing("backward", Phase::Backward, {3}),
                       mem(OpKind::Free, 1), mem(OpKind::Free, 3), mem(OpKind::Free, 0)});
  const double bytes[] = {1000, 10, 20, 5000, 7, 3};
  const int64_t only[] = {-1, -1, -1, -1, 1, 0};
  for (size_t b = 0; b < 6; ++b) {
    step::Buffer buf;
    buf.name = "b" + std::to_string(b);
    buf.bytes = bytes[b];
    buf.onlyRank = only[b];
    s.buffers.push_back(buf);
  }
  // Both units' activations and rank 1's recomputed one: 10 + 20 + 7.
  EXPECT_DOUBLE_EQ(activationPeakBytes(s), 37);
  // Without activations, nothing.
  EXPECT_DOUBLE_EQ(activationPeakBytes(program(1, {mem(OpKind::Alloc, 0)})), 0);
}

TEST(Floors, ComputeFloorPerPhase) {
  // Forward: 2e12 everywhere + 1e12 on rank 1 = 3 s. Backward: 4e12 = 4 s;
  // its bytes do not count.
  Step s = program(2, {compute(2e12), compute(1e12, 0, Phase::Forward, 1),
                       compute(4e12, 1e15, Phase::Backward),
                       coll(CollKind::AllGather, 2, 1e12)});
  EXPECT_NEAR(computeFloorSeconds(s, P(), Phase::Forward), 3, kTol);
  EXPECT_NEAR(computeFloorSeconds(s, P(), Phase::Backward), 4, kTol);
  EXPECT_NEAR(computeFloorSeconds(s, P(), Phase::Optimizer), 0, kTol);
}

//===----------------------------------------------------------------------===//
// Output
//===----------------------------------------------------------------------===//

Step traceProgram() {
  Step s = program(2, {mem(OpKind::Alloc, 0), compute(1e12),
                       coll(CollKind::AllGather, 2, kOneSecondAG, true, 1),
                       wait(2), mem(OpKind::Free, 0), optimizer(1e12, 0, 1)});
  s.name = "trace \"quoted\"";
  s.ops[1].name = "forward \"layers.0\"\n";
  s.ops[2].params = {"layers.0.w", "layers.0.b"};
  s.ops[2].group = 0;
  s.ops[5].params = {"layers.0.w"};
  s.ops[5].optimizer = "muon";
  s.buffers = {{"gathered", 64, false, -1}, {"state", 8, true, -1}};
  return s;
}

TEST(Output, ChromeTraceParsesAndHasOneEventPerOpAndRank) {
  Step s = traceProgram();
  SimResult r = simulate(s, P());
  ASSERT_TRUE(r.ok) << r.error;
  std::string text = chromeTrace(s, r);
  nlohmann::json j = nlohmann::json::parse(text);
  ASSERT_TRUE(j["traceEvents"].is_array());
  int x = 0, c = 0, m = 0;
  for (const auto &e : j["traceEvents"]) {
    std::string ph = e["ph"];
    if (ph == "X") {
      ++x;
      EXPECT_TRUE(e["args"].contains("phase"));
      EXPECT_TRUE(e["args"].contains("flops"));
      EXPECT_TRUE(e["args"].contains("bytes"));
      EXPECT_TRUE(e["args"].contains("collBytes"));
    }
    c += ph == "C";
    m += ph == "M";
  }
  // X: rank 0 runs compute, all-gather, wait (3); rank 1 also its
  // optimizer op (4). C: per rank the initial sample + alloc + free (3).
  // M: per rank process name, sort index, compute thread, comm 1 thread.
  EXPECT_EQ(x, 7);
  EXPECT_EQ(c, 6);
  EXPECT_EQ(m, 8);
  // The compute op on rank 0: [0, 1 s] = 0 .. 1e6 us on thread 0 with its
  // name unescaped; the gather on thread 1 + comm = 2.
  bool sawCompute = false, sawGather = false;
  for (const auto &e : j["traceEvents"]) {
    if (e["ph"] != "X" || e["pid"] != 0)
      continue;
    if (e["name"] == "forward \"layers.0\"\n") {
      sawCompute = true;
      EXPECT_EQ(e["tid"], 0);
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 0);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1e6);
      EXPECT_EQ(e["args"]["phase"], "forward");
      EXPECT_DOUBLE_EQ(e["args"]["flops"].get<double>(), 1e12);
    }
    if (e["name"] == "all_gather") {
      sawGather = true;
      EXPECT_EQ(e["tid"], 2);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1e6);
      EXPECT_DOUBLE_EQ(e["args"]["collBytes"].get<double>(), kOneSecondAG);
      // What it carries, for comparing orders with the runtime's trace.
      EXPECT_EQ(e["args"]["params"],
                nlohmann::json::array({"layers.0.w", "layers.0.b"}));
      EXPECT_EQ(e["args"]["group"], 0);
      EXPECT_EQ(e["args"]["unit"], -1);
    }
  }
  EXPECT_TRUE(sawCompute);
  EXPECT_TRUE(sawGather);
  // The optimizer kernel on rank 1 names its kernel and parameter.
  bool sawOptimizer = false;
  for (const auto &e : j["traceEvents"])
    if (e["ph"] == "X" && e["pid"] == 1 && e["args"]["kind"] == "optimizer") {
      sawOptimizer = true;
      EXPECT_EQ(e["args"]["optimizer"], "muon");
      EXPECT_EQ(e["args"]["params"], nlohmann::json::array({"layers.0.w"}));
    }
  EXPECT_TRUE(sawOptimizer);
  // The live-bytes counter: 8 persistent, 72 after the alloc, 8 after free.
  std::vector<double> live;
  for (const auto &e : j["traceEvents"])
    if (e["ph"] == "C" && e["pid"] == 0)
      live.push_back(e["args"]["bytes"].get<double>());
  EXPECT_EQ(live, (std::vector<double>{8, 72, 8}));
  // One rank only: 3 X events.
  nlohmann::json one = nlohmann::json::parse(chromeTrace(s, r, 1));
  int x1 = 0;
  for (const auto &e : one["traceEvents"])
    x1 += e["ph"] == "X";
  EXPECT_EQ(x1, 3);
  EXPECT_EQ(one["otherData"]["step"], "trace \"quoted\"");
}

TEST(Output, Deterministic) {
  Step s = traceProgram();
  const SimProfile *a100 = planner::findHardwareProfile("a100");
  ASSERT_NE(a100, nullptr);
  SimResult r1 = simulate(s, *a100), r2 = simulate(s, *a100);
  EXPECT_EQ(chromeTrace(s, r1), chromeTrace(s, r2));
  EXPECT_EQ(renderText(s, r1, *a100), renderText(s, r2, *a100));
}

TEST(Output, TextLabelsEveryTimePredicted) {
  Step s = traceProgram();
  SimResult r = simulate(s, P());
  ASSERT_TRUE(r.ok) << r.error;
  std::string text = renderText(s, r, P());
  std::istringstream in(text);
  std::string line;
  int timed = 0;
  while (std::getline(in, line)) {
    if (line.find(" ms") == std::string::npos)
      continue;
    ++timed;
    EXPECT_NE(line.find("predicted"), std::string::npos) << line;
  }
  // forward, backward, optimizer, total, per rank, comm, floor, and the
  // floor lines of the two phases that have ops (forward, optimizer).
  EXPECT_EQ(timed, 9) << text;
  // Forward on rank 1: compute [0, 1], async gather [1, 2] (issued after
  // it), wait [1, 2]: 2 s span, 1 s compute, 1 s exposed (100%).
  EXPECT_NE(text.find("2000.000 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("100.0% of compute"), std::string::npos) << text;
  EXPECT_NE(text.find("peak memory"), std::string::npos) << text;
  // No allocator reserve in the profile: no reserved line; with one, the
  // reserved peak is the allocated peak times it.
  EXPECT_EQ(text.find("peak reserved"), std::string::npos) << text;
  SimProfile reserving = P();
  reserving.allocatorReserve = 1.25;
  SimResult rr = simulate(s, reserving);
  ASSERT_TRUE(rr.ok) << rr.error;
  ASSERT_GT(rr.peakBytes, 0);
  EXPECT_DOUBLE_EQ(rr.peakReservedBytes, 1.25 * rr.peakBytes);
  EXPECT_NE(renderText(s, rr, reserving).find("peak reserved"), std::string::npos);
}

TEST(Output, PhaseAgainstItsFloor) {
  // Two ranks: both run 1e12 FLOPs of forward, rank 1 another 1e12 alone,
  // and the optimizer streams 1e11 bytes on each. Floors at peak (1 TFLOP/s,
  // 100 GB/s): forward 1 s and 2 s, mean 1.5 s; at half the GEMM peak rank
  // 1 takes 4 s: 1.5 floor + 0.5 imbalance + 2 below peak, no comm.
  Step s;
  s.name = "gap";
  s.world = 2;
  s.ops = {compute(1e12), compute(1e12, 0, Phase::Forward, 1), optimizer(0, 1e11)};
  SimProfile p = P();
  p.gemmEfficiency = 0.5;
  SimResult r = simulate(s, p);
  ASSERT_TRUE(r.ok) << r.error;
  PhaseGap f = phaseGap(s, r, p, Phase::Forward);
  EXPECT_EQ(f.rank, 1);
  EXPECT_NEAR(f.span, 4.0, kTol);
  EXPECT_NEAR(f.floor, 1.5, kTol);
  EXPECT_NEAR(f.imbalance, 0.5, kTol);
  EXPECT_NEAR(f.belowPeak, 2.0, kTol);
  EXPECT_NEAR(f.exposedComm, 0.0, kTol);
  EXPECT_NEAR(f.floor + f.imbalance + f.belowPeak + f.exposedComm, f.span, kTol);
  // The optimizer is memory-bound at full HBM efficiency: at its floor.
  PhaseGap o = phaseGap(s, r, p, Phase::Optimizer);
  EXPECT_NEAR(o.floor, 1.0, kTol);
  EXPECT_NEAR(o.span, 1.0, kTol);
  EXPECT_NEAR(o.belowPeak + o.imbalance + o.exposedComm, 0.0, kTol);
  EXPECT_NEAR(o.nsKernels, 0.0, kTol);
  // No backward ops: nothing to say.
  EXPECT_EQ(phaseGap(s, r, p, Phase::Backward).rank, -1);
  std::string text = renderText(s, r, p);
  EXPECT_NE(text.find("forward    predicted    4000.000 ms = floor 1500.000 + "
                      "imbalance 500.000 + below peak 2000.000 + exposed comm "
                      "0.000 ms (floor / predicted 37.5%)"),
            std::string::npos)
      << text;
}

// The optimizer's gap on its slowest rank names the Newton-Schulz
// kernels' latency, part of what runs below peak: an owner on rank 1 with
// 100 kernels of 1 ms each.
TEST(Output, NewtonSchulzKernelsInTheGap) {
  Step s;
  s.name = "kernels";
  s.world = 2;
  Op owner = optimizer(1e12, 0, 1);
  owner.nsKernels = 100;
  s.ops = {optimizer(0, 1e11), owner};
  SimProfile p = P();
  p.nsFp32KernelSeconds = 1e-3;
  SimResult r = simulate(s, p);
  ASSERT_TRUE(r.ok) << r.error;
  PhaseGap o = phaseGap(s, r, p, Phase::Optimizer);
  EXPECT_EQ(o.rank, 1);
  EXPECT_NEAR(o.nsKernels, 0.1, kTol);
  EXPECT_LE(o.nsKernels, o.belowPeak + kTol);
  EXPECT_NEAR(o.floor + o.imbalance + o.belowPeak + o.exposedComm, o.span, kTol);
  const std::string text = renderText(s, r, p);
  EXPECT_NE(text.find("below peak includes 100.000 ms of Newton-Schulz kernel latency "
                      "(1000.0 us a kernel in fp32)"),
            std::string::npos)
      << text;
}

TEST(Profiles, ShippedProfiles) {
  for (const char *name : {"a100", "h100", "h100-ib", "a100-pcie", "h100-pcie"}) {
    const SimProfile *p = planner::findHardwareProfile(name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_EQ(validateProfile(*p), "") << name;
  }
  EXPECT_EQ(planner::findHardwareProfile("tpu"), nullptr);
  const SimProfile *a100 = planner::findHardwareProfile("a100");
  EXPECT_EQ(a100->gemmFlops, 312e12);
  EXPECT_EQ(a100->hbmBytes, 2039e9);
  const SimProfile *h100 = planner::findHardwareProfile("h100");
  EXPECT_EQ(h100->gemmFlops, 989e12);
  EXPECT_EQ(h100->hbmBytes, 3350e9);
  EXPECT_EQ(validateProfile(P()), "");
}

TEST(Profiles, PCIePartsGatherAtPCIeRates) {
  // A 1 GB all-gather over 8 ranks of one node: the PCIe parts move it at
  // their NCCL bus rate over PCIe, the SXM parts over NVLink; a model that
  // is comm-bound on PCIe must not be predicted at NVLink speed.
  const SimProfile *sxm = planner::findHardwareProfile("a100");
  const SimProfile *pcie = planner::findHardwareProfile("a100-pcie");
  const SimProfile *h100pcie = planner::findHardwareProfile("h100-pcie");
  ASSERT_TRUE(sxm && pcie && h100pcie);
  Op gather = coll(CollKind::AllGather, 8, 1e9);
  const double bytesMoved = 7.0 / 8.0 * 1e9;
  EXPECT_NEAR(collectiveSeconds(gather, *pcie),
              pcie->collBaseSeconds + 7 * pcie->intraHopSeconds +
                  bytesMoved / 12e9,
              1e-9);
  EXPECT_GT(collectiveSeconds(gather, *pcie) / collectiveSeconds(gather, *sxm), 15);
  EXPECT_NEAR(collectiveSeconds(gather, *h100pcie),
              h100pcie->collBaseSeconds + 7 * h100pcie->intraHopSeconds +
                  bytesMoved / 24e9,
              1e-9);
  EXPECT_EQ(pcie->gemmFlops, 312e12);
  EXPECT_EQ(pcie->hbmBytes, 1935e9);
  EXPECT_EQ(h100pcie->gemmFlops, 756e12);
}

TEST(StepNames, Names) {
  EXPECT_EQ(step::opKindName(OpKind::Collective), "collective");
  EXPECT_EQ(mfsdp::enumName(Phase::Backward), "backward");
  EXPECT_EQ(mfsdp::enumName(CollKind::ReduceScatterV), "reduce_scatter_v");
}

} // namespace

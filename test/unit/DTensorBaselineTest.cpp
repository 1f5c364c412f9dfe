//===- DTensorBaselineTest.cpp - baseline=fsdp2-dtensor, by hand -----------===//
//
// torch.optim.Muon's Newton-Schulz on a Shard(0) DTensor: the strategies
// DTensor's sharding propagation picks for each matmul, and the simulated
// optimizer phase of a small step. Every expected value is worked out by
// hand in a comment (DTensor's strategy costs in microseconds from
// _collective_utils.py's formulas, our cost model's seconds from the round
// profile below), not computed by the code under test.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/cost/Simulator.h"
#include "mfsdp/step/Builder.h"
#include "mfsdp/step/Schedule.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace mfsdp;
using namespace mfsdp::step;

namespace {

constexpr double MiB = 1024.0 * 1024;
using DP = DPlacement;

// DTensor's cost formulas for W = 8 inside one host (87.7 GB/s, 0.6 us per
// hop, 6.6 us base), x in GiB:
//   all-gather / reduce-scatter(x) = 10.8 + 9977.2 x   (0.875 x / 87.7e-6)
//   all-reduce(x)                  = 15.0 + 19954.4 x
//   Shard->Shard of a shard of x   = all-gather(x) + 1
// 4 MiB = 1/256 GiB -> 49.77; 16 MiB -> 166.69; 32 MiB -> 322.59;
// 128 MiB -> 1257.95; all-reduce of 32 MiB -> 638.58.

TEST(DTensorNewtonSchulz, SquareMatrixKeepsRowShards) {
  // q/k/v/o of the seed model: 4096 x 4096 bf16 (32 MiB), X Shard(0).
  std::vector<DTensorNsOp> ops = dtensorNewtonSchulz(4096, 4096, 8, 2);
  ASSERT_EQ(ops.size(), 1u + 3 * 2 + 1);
  // The norm: one all-reduce of a bf16 scalar.
  EXPECT_EQ(ops[0].op, "normalise");
  ASSERT_EQ(ops[0].redistributes.size(), 1u);
  EXPECT_EQ(ops[0].redistributes[0].coll, CollKind::AllReduce);
  EXPECT_EQ(ops[0].redistributes[0].collBytes, 2);
  const double gemm = 2.0 * 4096 * 4096 * 4096 / 8; // every matmul, split 8 ways
  for (int it = 0; it < 2; ++it) {
    const DTensorNsOp &a = ops[1 + 3 * it], &b = ops[2 + 3 * it],
                      &x = ops[3 + 3 * it];
    // X @ X^T, X Shard(0), X^T Shard(1). Strategies: [R|R,R] 2 x 322.59;
    // [P|S1,S0] 2 x (49.77 + 1) = 101.5; [S0|S0,R] 322.59; [S1|R,S1]
    // 322.59. Split k: two all-to-alls of X's 4 MiB shard, A Partial.
    EXPECT_EQ(a.op, "X @ X^T");
    EXPECT_EQ(a.out, DP::Partial);
    ASSERT_EQ(a.redistributes.size(), 2u);
    for (const DTensorRedistribute &r : a.redistributes) {
      EXPECT_TRUE(r.allToAll);
      EXPECT_EQ(r.collBytes, 4 * MiB);
    }
    EXPECT_EQ(a.redistributes[0].from, DP::Shard0);
    EXPECT_EQ(a.redistributes[0].to, DP::Shard1);
    EXPECT_EQ(a.redistributes[1].from, DP::Shard1);
    EXPECT_EQ(a.redistributes[1].to, DP::Shard0);
    EXPECT_DOUBLE_EQ(a.flops, gemm);
    EXPECT_EQ(a.outBytes, 32 * MiB); // a full-size partial sum on every rank
    // addmm(A, A, A), all Partial: [R] 3 x 638.58; [P|P,S1,S0] 2 x 322.59;
    // [S0] 2 x 322.59 + 638.58; [S1] the same. Two reduce-scatters of A.
    EXPECT_EQ(b.out, DP::Partial);
    ASSERT_EQ(b.redistributes.size(), 2u);
    EXPECT_EQ(b.redistributes[0].coll, CollKind::ReduceScatter);
    EXPECT_EQ(b.redistributes[0].to, DP::Shard1);
    EXPECT_EQ(b.redistributes[1].coll, CollKind::ReduceScatter);
    EXPECT_EQ(b.redistributes[1].to, DP::Shard0);
    EXPECT_EQ(b.redistributes[0].collBytes, 32 * MiB);
    EXPECT_DOUBLE_EQ(b.flops, gemm);
    // addmm(X, B, X): [R] 322.59 + 638.58 + 322.59; [P] self Shard->Partial
    // is banned; [S0|S0,S0,R] 0 + 322.59 + 322.59 = 645.18; [S1|S1,R,S1]
    // 50.77 + 638.58 + 50.77 = 740.12. Reduce-scatter B, all-gather X.
    EXPECT_EQ(x.out, DP::Shard0);
    ASSERT_EQ(x.redistributes.size(), 2u);
    EXPECT_EQ(x.redistributes[0].operand, "B");
    EXPECT_EQ(x.redistributes[0].coll, CollKind::ReduceScatter);
    EXPECT_EQ(x.redistributes[0].to, DP::Shard0);
    EXPECT_EQ(x.redistributes[1].operand, "X");
    EXPECT_EQ(x.redistributes[1].coll, CollKind::AllGather);
    EXPECT_FALSE(x.redistributes[1].allToAll);
    EXPECT_EQ(x.redistributes[1].collBytes, 32 * MiB);
    EXPECT_DOUBLE_EQ(x.flops, gemm);
  }
  // The result is Shard(0) already: the update needs no redistribution.
  EXPECT_EQ(ops.back().op, "update");
  EXPECT_TRUE(ops.back().redistributes.empty());
}

TEST(DTensorNewtonSchulz, TallMatrixIsTransposedToColumnShards) {
  // The seed's first MLP matrix, 16384 x 4096: transposed, X = 4096 x 16384
  // Shard(1) (128 MiB, 16 MiB per rank).
  std::vector<DTensorNsOp> ops = dtensorNewtonSchulz(16384, 4096, 8, 1);
  ASSERT_EQ(ops.size(), 5u);
  // X @ X^T: X Shard(1), X^T Shard(0) is exactly [P|S1,S0]: cost 0.
  EXPECT_EQ(ops[1].out, DP::Partial);
  EXPECT_TRUE(ops[1].redistributes.empty());
  EXPECT_DOUBLE_EQ(ops[1].flops, 2.0 * 4096 * 16384 * 4096 / 8);
  // addmm(A, A, A) as for the square matrix: two reduce-scatters of A.
  EXPECT_EQ(ops[2].out, DP::Partial);
  EXPECT_EQ(ops[2].redistributes.size(), 2u);
  // addmm(X, B, X), X Shard(1): [R] 1257.95 + 638.58 + 1257.95; [S0]
  // (166.69 + 1) + 322.59 + 1257.95 = 1748.2; [S1|S1,R,S1] 0 + 638.58 + 0.
  // One all-reduce of B (32 MiB); X stays Shard(1).
  EXPECT_EQ(ops[3].out, DP::Shard1);
  ASSERT_EQ(ops[3].redistributes.size(), 1u);
  EXPECT_EQ(ops[3].redistributes[0].coll, CollKind::AllReduce);
  EXPECT_EQ(ops[3].redistributes[0].collBytes, 32 * MiB);
  EXPECT_DOUBLE_EQ(ops[3].flops, 2.0 * 4096 * 4096 * 16384 / 8);
  // Transposed back, Shard(1) becomes the parameter's Shard(0).
  EXPECT_TRUE(ops[4].redistributes.empty());
}

TEST(DTensorNewtonSchulz, WideMatrixMovesToColumnShards) {
  // The seed's second MLP matrix, 4096 x 16384: not transposed, X Shard(0).
  std::vector<DTensorNsOp> ops = dtensorNewtonSchulz(4096, 16384, 8, 2);
  ASSERT_EQ(ops.size(), 8u);
  // Iteration 0, X @ X^T: [P] 2 x (166.69 + 1) = 335.4 against 1257.95 for
  // the others: two all-to-alls of the 16 MiB shard.
  EXPECT_EQ(ops[1].out, DP::Partial);
  ASSERT_EQ(ops[1].redistributes.size(), 2u);
  EXPECT_EQ(ops[1].redistributes[0].collBytes, 16 * MiB);
  // addmm(X, B, X): [S0] 0 + 322.59 + 1257.95 = 1580.5; [S1] self and X
  // Shard(0)->Shard(1) 167.69 each + all-reduce of B 638.58 = 973.96.
  EXPECT_EQ(ops[3].out, DP::Shard1);
  ASSERT_EQ(ops[3].redistributes.size(), 3u);
  EXPECT_TRUE(ops[3].redistributes[0].allToAll); // self
  EXPECT_EQ(ops[3].redistributes[1].coll, CollKind::AllReduce);
  EXPECT_TRUE(ops[3].redistributes[2].allToAll); // mat2
  // Iteration 1 starts from Shard(1): like the transposed matrix, X @ X^T
  // needs nothing and addmm(X, B, X) one all-reduce of B.
  EXPECT_TRUE(ops[4].redistributes.empty());
  EXPECT_EQ(ops[5].redistributes.size(), 2u);
  ASSERT_EQ(ops[6].redistributes.size(), 1u);
  EXPECT_EQ(ops[6].redistributes[0].coll, CollKind::AllReduce);
  // param.add_ needs the update back in Shard(0): one all-to-all.
  ASSERT_EQ(ops[7].redistributes.size(), 1u);
  EXPECT_TRUE(ops[7].redistributes[0].allToAll);
  EXPECT_EQ(ops[7].redistributes[0].from, DP::Shard1);
  EXPECT_EQ(ops[7].redistributes[0].to, DP::Shard0);
  EXPECT_EQ(ops[7].redistributes[0].collBytes, 16 * MiB);
}

// Round numbers, as in SimulatorTest: 1 TFLOP/s, 100 GB/s HBM, 10 GB/s in
// a node, no launch, latency or small-kernel costs.
cost::SimProfile round() {
  cost::SimProfile p;
  p.name = "round";
  p.gemmFlops = 1e12;
  p.gemmEfficiency = 1;
  p.smallGemmFlops = 0;
  p.hbmBytes = 1e11;
  p.hbmEfficiency = 1;
  p.launchSeconds = 0;
  p.intraBusBytes = 1e10;
  p.interBusBytes = 1e9;
  p.intraHopSeconds = 0;
  p.interHopSeconds = 0;
  p.collBaseSeconds = 0;
  p.gpusPerNode = 8;
  return p;
}

TEST(DTensorBaseline, OptimizerPhaseByHand) {
  // One f32 8 x 4 matrix row-sharded over 2 ranks, one Newton-Schulz step.
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
  o.zero = 3;
  o.nsSteps = 1;
  o.hw = *planner::findHardwareProfile("a100");
  planner::Decisions d;
  std::vector<UnitCost> costs = {{10, 20, 4, false}};
  BuildOptions b;
  b.gatheredMuon = true;
  b.dtensorMuon = true;
  b.gatheredMuonParams = {"w"};
  Step s = buildStep(pr, o, d, costs, b, "t");
  EXPECT_TRUE(verifySchedule(s, 0).empty());

  std::vector<std::string> kinds;
  for (const Op &op : s.ops)
    if (op.phase == Phase::Optimizer && op.kind == OpKind::Collective)
      kinds.push_back(std::string(collKindName(op.coll)));
  // The norm's all-reduce; A Partial -> Shard(1), Shard(0); B Partial ->
  // Replicate. X = w^T is 4 x 8 Shard(1): X @ X^T needs nothing.
  EXPECT_EQ(kinds, (std::vector<std::string>{"all_reduce", "reduce_scatter",
                                             "reduce_scatter", "all_reduce"}));

  cost::SimResult r = cost::simulate(s, round());
  ASSERT_TRUE(r.ok) << r.error;
  // Serial, 16 elements per rank, bf16 Newton-Schulz:
  //   momentum: 16 x (4 + 2 x 4) = 192 B / 1e11          1.92e-9
  //   norm all-reduce, 2 B: 2 x 1/2 x 2 / 1e10            0.20e-9
  //   normalise: read + write X's 32 B shard, 64 B        0.64e-9
  //   X @ X^T: 2 x 4 x 8 x 4 / 2 = 128 FLOP               0.128e-9
  //   2 reduce-scatters of A (4 x 4 x 2 = 32 B): 2 x 1/2 x 32 / 1e10  3.2e-9
  //   addmm(A, A, A): 2 x 4 x 4 x 4 / 2 = 64 FLOP         0.064e-9
  //   all-reduce of B: 2 x 1/2 x 32 / 1e10                3.2e-9
  //   addmm(X, B, X) [S1|S1,R,S1]: 2 x 4 x 4 x 8 / 2      0.128e-9
  //   update: 16 x (4 + 2 x 4 + 2 x 4) - 192 = 128 B      1.28e-9
  // total 10.76e-9 s.
  EXPECT_NEAR(r.optimizer.span(), 10.76e-9, 1e-15);
}

} // namespace

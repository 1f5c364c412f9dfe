//===- DTensorBaselineTest.cpp - baseline=fsdp2-dtensor(-mm), by hand ------===//
//
// torch.optim.Muon's Newton-Schulz on a Shard(0) DTensor, in its addmm form
// and its use_addmm=False (mm plus pointwise) form: the strategies
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

#include "RoundProfile.h"

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

// The use_addmm=False form (DTensorForm::Mm): per iteration
//   A = X @ X^T; bA = b * A; cA = c * A; cAA = cA @ A; B = bA + cAA;
//   aX = a * X; BX = B @ X; X = aX + BX.
// The matmuls take the cheapest mm strategy as above (no `self`, so a
// Partial output is allowed for B @ X too); the pointwise ops follow the
// operand with the most shards: b * A and c * A keep A's Partial,
// bA + cAA (Partial + Partial) stays Partial, aX + BX (Shard + Partial)
// reduce-scatters BX to aX's Shard.

TEST(DTensorNewtonSchulzMm, SquareMatrix) {
  std::vector<DTensorNsOp> ops =
      dtensorNewtonSchulz(4096, 4096, 8, 2, true, DTensorForm::Mm);
  ASSERT_EQ(ops.size(), 1u + 8 * 2 + 1);
  EXPECT_EQ(ops[0].op, "normalise");
  ASSERT_EQ(ops[0].redistributes.size(), 1u);
  const double gemm = 2.0 * 4096 * 4096 * 4096 / 8;
  for (int it = 0; it < 2; ++it) {
    const DTensorNsOp *o = &ops[1 + 8 * it];
    // X @ X^T as in the addmm form: two all-to-alls of the 4 MiB shard
    // (101.5 against 322.59), A a 32 MiB Partial.
    EXPECT_EQ(o[0].op, "X @ X^T");
    EXPECT_EQ(o[0].result, "A");
    EXPECT_EQ(o[0].out, DP::Partial);
    ASSERT_EQ(o[0].redistributes.size(), 2u);
    EXPECT_TRUE(o[0].redistributes[0].allToAll);
    EXPECT_EQ(o[0].redistributes[0].collBytes, 4 * MiB);
    EXPECT_DOUBLE_EQ(o[0].flops, gemm);
    EXPECT_EQ(o[0].bytes, 0);
    // b * A, c * A: Partial stays Partial, nothing moves; each reads and
    // writes the full 32 MiB partial sum: 64 MiB.
    for (int k : {1, 2}) {
      EXPECT_EQ(o[k].out, DP::Partial);
      EXPECT_TRUE(o[k].redistributes.empty());
      EXPECT_EQ(o[k].bytes, 64 * MiB);
      EXPECT_EQ(o[k].flops, 0);
    }
    EXPECT_EQ(o[1].op, "b * A");
    EXPECT_EQ(o[2].op, "c * A");
    // cA @ A, both Partial: [R] 2 x 638.58; [P|S1,S0] 2 x 322.59 = 645.18;
    // [S0] and [S1] 322.59 + 638.58. Two reduce-scatters, cA to Shard(1)
    // and A to Shard(0); cAA Partial.
    EXPECT_EQ(o[3].op, "cA @ A");
    EXPECT_EQ(o[3].out, DP::Partial);
    ASSERT_EQ(o[3].redistributes.size(), 2u);
    EXPECT_EQ(o[3].redistributes[0].operand, "cA");
    EXPECT_EQ(o[3].redistributes[0].coll, CollKind::ReduceScatter);
    EXPECT_EQ(o[3].redistributes[0].to, DP::Shard1);
    EXPECT_EQ(o[3].redistributes[1].operand, "A");
    EXPECT_EQ(o[3].redistributes[1].coll, CollKind::ReduceScatter);
    EXPECT_EQ(o[3].redistributes[1].to, DP::Shard0);
    EXPECT_EQ(o[3].redistributes[1].collBytes, 32 * MiB);
    EXPECT_DOUBLE_EQ(o[3].flops, gemm);
    // bA + cAA: Partial + Partial, nothing moves; 3 x 32 MiB.
    EXPECT_EQ(o[4].op, "bA + cAA");
    EXPECT_EQ(o[4].result, "B");
    EXPECT_EQ(o[4].out, DP::Partial);
    EXPECT_TRUE(o[4].redistributes.empty());
    EXPECT_EQ(o[4].bytes, 96 * MiB);
    // a * X on the 4 MiB Shard(0) shard: 8 MiB.
    EXPECT_EQ(o[5].op, "a * X");
    EXPECT_EQ(o[5].out, DP::Shard0);
    EXPECT_EQ(o[5].bytes, 8 * MiB);
    // B @ X, B Partial, X Shard(0): [R] 638.58 + 322.59; [P|S1,S0]
    // 322.59 + 0; [S0] 322.59 + 322.59; [S1] 638.58 + 50.77. Split k: one
    // reduce-scatter of B, BX a 32 MiB Partial (no `self` bans it here).
    EXPECT_EQ(o[6].op, "B @ X");
    EXPECT_EQ(o[6].out, DP::Partial);
    ASSERT_EQ(o[6].redistributes.size(), 1u);
    EXPECT_EQ(o[6].redistributes[0].operand, "B");
    EXPECT_EQ(o[6].redistributes[0].coll, CollKind::ReduceScatter);
    EXPECT_EQ(o[6].redistributes[0].to, DP::Shard1);
    EXPECT_DOUBLE_EQ(o[6].flops, gemm);
    EXPECT_EQ(o[6].outBytes, 32 * MiB);
    // aX + BX: aX (Shard(0)) has the most shards, BX is reduce-scattered to
    // Shard(0) (32 MiB); X stays Shard(0). 3 x 4 MiB.
    EXPECT_EQ(o[7].op, "aX + BX");
    EXPECT_EQ(o[7].result, "X");
    EXPECT_EQ(o[7].out, DP::Shard0);
    ASSERT_EQ(o[7].redistributes.size(), 1u);
    EXPECT_EQ(o[7].redistributes[0].operand, "BX");
    EXPECT_EQ(o[7].redistributes[0].coll, CollKind::ReduceScatter);
    EXPECT_EQ(o[7].redistributes[0].from, DP::Partial);
    EXPECT_EQ(o[7].redistributes[0].to, DP::Shard0);
    EXPECT_EQ(o[7].redistributes[0].collBytes, 32 * MiB);
    EXPECT_EQ(o[7].bytes, 12 * MiB);
  }
  EXPECT_EQ(ops.back().op, "update");
  EXPECT_TRUE(ops.back().redistributes.empty());
}

TEST(DTensorNewtonSchulzMm, TallMatrixReduceScattersAFullSizePartial) {
  // 16384 x 4096, transposed: X = 4096 x 16384 Shard(1) (16 MiB shard).
  std::vector<DTensorNsOp> ops =
      dtensorNewtonSchulz(16384, 4096, 8, 1, true, DTensorForm::Mm);
  ASSERT_EQ(ops.size(), 1u + 8 + 1);
  // X @ X^T is [P|S1,S0] as it stands; cA @ A two reduce-scatters.
  EXPECT_TRUE(ops[1].redistributes.empty());
  EXPECT_EQ(ops[4].redistributes.size(), 2u);
  // a * X on the 16 MiB shard.
  EXPECT_EQ(ops[6].out, DP::Shard1);
  EXPECT_EQ(ops[6].bytes, 32 * MiB);
  // B @ X, B Partial (32 MiB), X Shard(1) (128 MiB): [R] 638.58 + 1257.95;
  // [P|S1,S0] 322.59 + (166.69 + 1) = 490.28; [S0] 322.59 + 1257.95;
  // [S1|R,S1] 638.58 + 0. Split k: reduce-scatter B, all-to-all X to
  // Shard(0); BX a 128 MiB Partial on every rank. (The addmm form's
  // [S1] all-reduce of B is not chosen: there `self` banned [P].)
  const DTensorNsOp &bx = ops[7];
  EXPECT_EQ(bx.op, "B @ X");
  EXPECT_EQ(bx.out, DP::Partial);
  ASSERT_EQ(bx.redistributes.size(), 2u);
  EXPECT_EQ(bx.redistributes[0].coll, CollKind::ReduceScatter);
  EXPECT_EQ(bx.redistributes[0].collBytes, 32 * MiB);
  EXPECT_TRUE(bx.redistributes[1].allToAll);
  EXPECT_EQ(bx.redistributes[1].from, DP::Shard1);
  EXPECT_EQ(bx.redistributes[1].to, DP::Shard0);
  EXPECT_EQ(bx.redistributes[1].collBytes, 16 * MiB);
  EXPECT_DOUBLE_EQ(bx.flops, 2.0 * 4096 * 4096 * 16384 / 8);
  EXPECT_EQ(bx.outBytes, 128 * MiB);
  // aX + BX: BX reduce-scattered to Shard(1), 128 MiB; 3 x 16 MiB.
  const DTensorNsOp &nx = ops[8];
  EXPECT_EQ(nx.out, DP::Shard1);
  ASSERT_EQ(nx.redistributes.size(), 1u);
  EXPECT_EQ(nx.redistributes[0].coll, CollKind::ReduceScatter);
  EXPECT_EQ(nx.redistributes[0].to, DP::Shard1);
  EXPECT_EQ(nx.redistributes[0].collBytes, 128 * MiB);
  EXPECT_EQ(nx.bytes, 48 * MiB);
  // Shard(1) transposed back is the parameter's Shard(0).
  EXPECT_TRUE(ops[9].redistributes.empty());
}

TEST(DTensorNewtonSchulzMm, WideMatrixKeepsRowShards) {
  // 4096 x 16384, X Shard(0). B @ X: [P|S1,S0] 322.59 + 0 against [S1]
  // 638.58 + 167.69 and [S0] 322.59 + 1257.95: X is never moved to
  // Shard(1) (the addmm form's [S1] switch), so every iteration repeats
  // X @ X^T's two all-to-alls, and the update needs nothing.
  std::vector<DTensorNsOp> ops =
      dtensorNewtonSchulz(4096, 16384, 8, 2, true, DTensorForm::Mm);
  ASSERT_EQ(ops.size(), 18u);
  for (int it = 0; it < 2; ++it) {
    const DTensorNsOp *o = &ops[1 + 8 * it];
    ASSERT_EQ(o[0].redistributes.size(), 2u);
    EXPECT_EQ(o[0].redistributes[0].collBytes, 16 * MiB);
    ASSERT_EQ(o[6].redistributes.size(), 1u);
    EXPECT_EQ(o[6].out, DP::Partial);
    ASSERT_EQ(o[7].redistributes.size(), 1u);
    EXPECT_EQ(o[7].redistributes[0].to, DP::Shard0);
    EXPECT_EQ(o[7].redistributes[0].collBytes, 128 * MiB);
    EXPECT_EQ(o[7].out, DP::Shard0);
  }
  EXPECT_TRUE(ops.back().redistributes.empty());
}

TEST(DTensorNewtonSchulzMm, TinyMatrixKeepsRowShardsAndGathers) {
  // 4 x 8 over 4 ranks: every estimate is latency (all-gather 8.4 us,
  // all-to-all 9.4). X @ X^T [S0] gathers X^T; cA @ A: [P] 9.4 (all-to-all
  // of cA), [S0|S0,R] 8.4 (all-gather A), so [S0]; B @ X likewise gathers
  // X. The pointwise ops see Shard(0) everywhere and move nothing: the same
  // collectives as the addmm form.
  std::vector<DTensorNsOp> ops =
      dtensorNewtonSchulz(4, 8, 4, 1, true, DTensorForm::Mm);
  ASSERT_EQ(ops.size(), 10u);
  std::vector<std::string> moved;
  for (const DTensorNsOp &o : ops)
    for (const DTensorRedistribute &r : o.redistributes)
      moved.push_back(r.operand + " " + std::string(mfsdp::enumName(r.coll)));
  EXPECT_EQ(moved, (std::vector<std::string>{"norm all_reduce",
                                             "X^T all_gather", "A all_gather",
                                             "X all_gather"}));
  for (const DTensorNsOp &o : ops) {
    if (o.op != "normalise" && o.op != "update") {
      EXPECT_EQ(o.out, DP::Shard0) << o.op;
    }
  }
  // bA + cAA on 1-row shards of a 4 x 4 bf16 matrix: 3 x 8 B.
  EXPECT_EQ(ops[5].bytes, 24);
}

// Round numbers (RoundProfile.h): 1 TFLOP/s, 100 GB/s HBM, 10 GB/s in a
// node, no launch, latency or small-kernel costs.
cost::SimProfile round() { return test::roundProfile(); }

/// One f32 8 x 4 matrix row-sharded over 2 ranks, one Newton-Schulz step,
/// in the DTensor baseline of the given form; checked by the verifier.
Step oneMatrixDTensorStep(DTensorForm form) {
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
  b.dtensorForm = form;
  b.gatheredMuonParams = {"w"};
  Step s = buildStep(pr, o, d, costs, b, "t");
  EXPECT_TRUE(verifySchedule(s, 0).empty());
  return s;
}

/// The kinds of the optimizer phase's collectives, in order.
std::vector<std::string> optimizerCollectives(const Step &s) {
  std::vector<std::string> kinds;
  for (const Op &op : s.ops)
    if (op.phase == Phase::Optimizer && op.kind == OpKind::Collective)
      kinds.push_back(std::string(mfsdp::enumName(op.coll)));
  return kinds;
}

TEST(DTensorBaseline, OptimizerPhaseByHand) {
  // One f32 8 x 4 matrix row-sharded over 2 ranks, one Newton-Schulz step.
  Step s = oneMatrixDTensorStep(DTensorForm::Addmm);
  std::vector<std::string> kinds = optimizerCollectives(s);
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

TEST(DTensorBaseline, OptimizerPhaseByHandMm) {
  // The same matrix and step in the use_addmm=False form.
  Step s = oneMatrixDTensorStep(DTensorForm::Mm);
  std::vector<std::string> kinds = optimizerCollectives(s);
  // W = 2, DTensor's estimates (all latency: all-gather and reduce-scatter
  // 7.2 us, all-reduce 7.8, all-to-all 8.2). X = w^T, 4 x 8 Shard(1):
  // X @ X^T [P] for free. cA @ A, both Partial 4 x 4: [P] 2 x 7.2 against
  // 15.6 and 15.0: two reduce-scatters. B @ X: [R] 7.8 + 7.2; [P] 7.2 +
  // 8.2; [S0] 7.2 + 7.2; [S1|R,S1] 7.8 + 0: all-reduce B, BX Shard(1), and
  // aX + BX (Shard(1) + Shard(1)) moves nothing.
  EXPECT_EQ(kinds, (std::vector<std::string>{"all_reduce", "reduce_scatter",
                                             "reduce_scatter", "all_reduce"}));

  cost::SimResult r = cost::simulate(s, round());
  ASSERT_TRUE(r.ok) << r.error;
  // The addmm form's 10.76e-9 s (same collectives and GEMM FLOPs) plus the
  // pointwise ops at 1e11 B/s, bf16:
  //   b * A, c * A: A Partial, 32 B read + 32 B written     2 x 0.64e-9
  //   bA + cAA: 3 x 32 B                                    0.96e-9
  //   a * X: X's 32 B shard read and written                0.64e-9
  //   aX + BX: 3 x 32 B                                     0.96e-9
  // 10.76e-9 + 3.84e-9 = 14.60e-9 s.
  EXPECT_NEAR(r.optimizer.span(), 14.60e-9, 1e-15);
}

} // namespace

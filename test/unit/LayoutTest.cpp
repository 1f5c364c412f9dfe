//===- LayoutTest.cpp - The layout planner and its accounting -------------===//
#include "mfsdp/planner/Layout.h"

#include <gtest/gtest.h>

using namespace mfsdp::planner;

namespace {

Param param(std::string name, std::vector<int64_t> shape, std::string kind,
            int64_t unit, int64_t elemBytes = 2) {
  Param p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.kind = std::move(kind);
  p.unit = unit;
  p.elemBytes = elemBytes;
  return p;
}

Options options(PolicyKind policy, int64_t shard, int64_t replicate = 1) {
  Options o;
  o.policy = policy;
  o.shard = shard;
  o.replicate = replicate;
  o.hw = *findHardwareProfile("a100");
  return o;
}

TEST(Layout, Classify) {
  EXPECT_EQ(classify(param("e", {8, 4}, "embedding", 0)), Role::Embedding);
  EXPECT_EQ(classify(param("h", {8, 4}, "output", 0)), Role::OutputHead);
  EXPECT_EQ(classify(param("w", {8, 4}, "linear", 0)), Role::HiddenMatrix);
  EXPECT_EQ(classify(param("b", {8}, "linear", 0)), Role::Bias);
  EXPECT_EQ(classify(param("n", {8}, "norm", 0)), Role::Norm);
  EXPECT_EQ(classify(param("r", {4, 8}, "router", 0)), Role::Router);
  EXPECT_EQ(classify(param("x", {4, 8}, "expert", 0)), Role::Expert);
  EXPECT_EQ(classify(param("s", {1}, "other", 0)), Role::OneD);
  EXPECT_EQ(classify(param("c", {2, 3, 4}, "other", 0)), Role::Other);
  Param ext = param("x", {4, 8}, "expert", 0);
  ext.external = true;
  EXPECT_EQ(classify(ext), Role::External);
  Param tied = param("h", {8, 4}, "output", -1);
  tied.tied = true;
  EXPECT_EQ(classify(tied), Role::Tied);
}

// The padding cases of test/Passes/assign-layouts-row-layout.mlir, by hand.
TEST(Layout, Padding) {
  Param a = param("a", {4, 750}, "linear", 0, 4);  // 4 rows of 3000 B
  Param b = param("b", {4, 250}, "linear", 0, 4);  // 4 rows of 1000 B
  EXPECT_DOUBLE_EQ(perParamPadding({&a, &b}, 4), 0);
  // Contiguous shards 3000 | 3000 | 6000 | 4000: every shard padded to 6000.
  EXPECT_DOUBLE_EQ(flatPadding({&a, &b}, 4), 8000);
  Param c = param("c", {6, 250}, "linear", 0, 4);  // 6 rows of 1000 B
  Param d = param("d", {3, 100}, "linear", 0, 4);  // 3 rows of 400 B
  // torch.chunk: c pads 2 rows, d 1 row.
  EXPECT_DOUBLE_EQ(perParamPadding({&c, &d}, 4), 2 * 1000 + 400);
  EXPECT_DOUBLE_EQ(flatPadding({&c, &d}, 4), 800);
  // One rank: nothing to pad.
  EXPECT_DOUBLE_EQ(flatPadding({&c, &d}, 1), 0);
  EXPECT_DOUBLE_EQ(perParamPadding({&c, &d}, 1), 0);
}

TEST(Layout, PoliciesPickOptimizersAndPlacements) {
  Problem pr;
  pr.units = {{"u0"}, {"u1"}};
  pr.params = {param("embed", {64, 16}, "embedding", 0),
               param("q", {16, 16}, "linear", 0),
               param("q.bias", {16}, "linear", 0),
               param("router", {4, 16}, "router", 1),
               param("norm", {16}, "norm", 1, 4)};
  struct Want {
    PolicyKind policy;
    std::vector<Optim> optims;
    std::vector<PlacementKind> placements;
  };
  const auto A = Optim::AdamW, M = Optim::Muon, S = Optim::SGD;
  const auto R = PlacementKind::RowShard, O = PlacementKind::Owner;
  for (const Want &w :
       {Want{PolicyKind::AdamW, {A, A, A, A, A}, {R, R, R, R, R}},
        Want{PolicyKind::SGD, {S, S, S, S, S}, {R, R, R, R, R}},
        Want{PolicyKind::Muon, {M, M, A, M, A}, {O, O, R, O, R}},
        Want{PolicyKind::MixedMuonAdamW, {A, M, A, A, A}, {R, O, R, R, R}}}) {
    Problem p = pr;
    Decisions d;
    PlanError err;
    ASSERT_TRUE(planLayouts(p, options(w.policy, 4), d, err)) << err.message;
    for (size_t i = 0; i < p.params.size(); ++i) {
      EXPECT_EQ(p.params[i].optim, w.optims[i])
          << mfsdp::enumName(w.policy) << " " << p.params[i].name;
      EXPECT_EQ(p.params[i].placement, w.placements[i])
          << mfsdp::enumName(w.policy) << " " << p.params[i].name;
    }
  }
}

TEST(Layout, ImpossibleRequests) {
  Problem pr;
  pr.units = {{"u"}};
  pr.params = {param("w", {8, 4}, "linear", 0), param("n", {4}, "norm", 0)};
  Options o = options(PolicyKind::MixedMuonAdamW, 2);
  o.muonInclude = {"n"};
  Decisions d;
  PlanError err;
  Problem p = pr;
  EXPECT_FALSE(planLayouts(p, o, d, err));
  EXPECT_EQ(err.param, 1);
  EXPECT_NE(err.message.find("Muon needs a 2-D matrix"), std::string::npos);

  // Block shards leaving a rank without a block.
  p = pr;
  o = options(PolicyKind::AdamW, 4);
  o.blockShape = {4, 4};
  EXPECT_FALSE(planLayouts(p, o, d, err));
  EXPECT_EQ(err.param, 0);
  EXPECT_NE(err.message.find("makes 2 blocks of 4x4 for 4 ranks"), std::string::npos);

  // An owner pinned outside the mesh.
  p = pr;
  p.params[0].pinned = true;
  p.params[0].placement = PlacementKind::Owner;
  p.params[0].ownerRank = 5;
  EXPECT_FALSE(planLayouts(p, options(PolicyKind::Muon, 4), d, err));
  EXPECT_NE(err.message.find("outside the mesh: dp_shard has 4 ranks"), std::string::npos);
}

// test/Passes/plan-report.mlir's model, accounted by hand: two f32 8x4
// matrices on owners 0 and 1 and a 4-element norm row-sharded, ZeRO-3.
TEST(Layout, AccountByHand) {
  Problem pr;
  pr.units = {{"u0"}, {"u1"}};
  pr.params = {param("w1", {8, 4}, "linear", 0, 4),
               param("w2", {8, 4}, "linear", 1, 4),
               param("n", {4}, "norm", 1, 4)};
  Options o = options(PolicyKind::MixedMuonAdamW, 2);
  Decisions d;
  PlanError err;
  ASSERT_TRUE(planLayouts(pr, o, d, err)) << err.message;
  EXPECT_EQ(pr.params[0].ownerRank, 0);
  EXPECT_EQ(pr.params[1].ownerRank, 1);
  Report r = account(pr, o, d);
  ASSERT_EQ(r.ranks.size(), 2u);
  for (const RankStats &rs : r.ranks) {
    EXPECT_DOUBLE_EQ(rs.paramBytes, 32 * 4 + 2 * 4);
    EXPECT_DOUBLE_EQ(rs.gradBytes, 32 * 4 + 2 * 4);
    EXPECT_DOUBLE_EQ(rs.masterBytes, 0); // f32 parameters are their master
    EXPECT_DOUBLE_EQ(rs.optimBytes, 32 * 4 + 2 * 8);
    // 5 steps of 3 s^2 l + s^3 (s = 4, l = 8): the symmetric products.
    EXPECT_DOUBLE_EQ(rs.nsFlops, 5 * (3 * 16 * 8 + 64));
    EXPECT_DOUBLE_EQ(rs.commBytes.at("all_gather"), 2 * 0.5 * 16);
    EXPECT_DOUBLE_EQ(rs.commBytes.at("reduce_scatter"), 0.5 * 16);
    EXPECT_DOUBLE_EQ(rs.commBytes.at("all_gather_v"), 2 * 128);
    EXPECT_DOUBLE_EQ(rs.commBytes.at("reduce_scatter_v"), 128);
  }
  EXPECT_DOUBLE_EQ(r.optimMax, r.optimMean);
  EXPECT_DOUBLE_EQ(r.fanoutMax, 1);

  // bf16 parameters add a 4-byte fp32 master per element on the owner.
  for (Param &p : pr.params)
    p.elemBytes = 2;
  Report half = account(pr, o, d);
  EXPECT_DOUBLE_EQ(half.ranks[0].masterBytes, 32 * 4 + 2 * 4);
}

TEST(Layout, HsdpSplitsNewtonSchulzWhenItPays) {
  Problem big;
  big.units = {{"u"}};
  big.params = {param("up", {16384, 4096}, "linear", 0),
                param("down", {4096, 16384}, "linear", 0)};
  Options o = options(PolicyKind::Muon, 2, 2);
  Decisions d;
  PlanError err;
  ASSERT_TRUE(planLayouts(big, o, d, err));
  // ~350 ms of fp32 Newton-Schulz per matrix on A100 against 134 MB over
  // 25 GB/s.
  EXPECT_TRUE(d.nsSplit) << d.nsSplitReason;
  Report r = account(big, o, d);
  EXPECT_GT(r.ranks[0].commBytes["ns_split_all_gather"], 0);

  // A 64x64 matrix: its Newton-Schulz is 39 kernels (the profile's 6.3 us
  // each in bf16, 10.7 us in fp32), far longer than one broadcast of its
  // update over the replicas (collective base + one hop, 15 us): splitting
  // pays in either precision.
  Problem small;
  small.units = {{"u"}};
  small.params = {param("w", {64, 64}, "linear", 0)};
  o.hw.nsBf16 = true;
  ASSERT_TRUE(planLayouts(small, o, d, err));
  EXPECT_TRUE(d.nsSplit) << d.nsSplitReason;
  o.hw.nsBf16 = false;
  ASSERT_TRUE(planLayouts(small, o, d, err));
  EXPECT_TRUE(d.nsSplit) << d.nsSplitReason;
  // Priced by its 5.2 MFLOP alone (no time per kernel), it takes less than
  // the broadcast's latency in either precision: not split.
  Options flopsOnly = o;
  flopsOnly.hw.nsFp32KernelSeconds = flopsOnly.hw.nsBf16KernelSeconds = 0;
  for (bool bf16 : {true, false}) {
    flopsOnly.hw.nsBf16 = bf16;
    ASSERT_TRUE(planLayouts(small, flopsOnly, d, err));
    EXPECT_FALSE(d.nsSplit) << d.nsSplitReason;
  }
  o.hw.nsBf16 = true;
  o.hw.nsBf16KernelSeconds = 0;
  o.nsSplit = Options::Split::On;
  ASSERT_TRUE(planLayouts(small, o, d, err));
  EXPECT_TRUE(d.nsSplit);
  EXPECT_NE(d.nsSplitReason.find("forced"), std::string::npos);
}

TEST(Layout, GroupsRespectTheGatheredBytesCap) {
  // 8 units of 2 matrices (2 KiB each unit) on 8 ranks: uncapped, groups of
  // 4 units; capped at 4 KiB, groups of 2.
  Problem pr;
  for (int u = 0; u < 8; ++u) {
    pr.units.push_back({"u" + std::to_string(u)});
    pr.params.push_back(param("a" + std::to_string(u), {16, 32}, "linear", u));
    pr.params.push_back(param("b" + std::to_string(u), {16, 32}, "linear", u));
  }
  Options o = options(PolicyKind::Muon, 8);
  Decisions d;
  PlanError err;
  Problem p = pr;
  ASSERT_TRUE(planLayouts(p, o, d, err));
  std::vector<int64_t> groups;
  for (const Unit &u : p.units)
    groups.push_back(u.group);
  EXPECT_EQ(groups, (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 1}));
  p = pr;
  o.groupMaxBytes = 4096;
  ASSERT_TRUE(planLayouts(p, o, d, err));
  groups.clear();
  for (const Unit &u : p.units)
    groups.push_back(u.group);
  EXPECT_EQ(groups, (std::vector<int64_t>{0, 0, 1, 1, 2, 2, 3, 3}));
}

} // namespace

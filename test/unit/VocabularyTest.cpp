//===- VocabularyTest.cpp - The shared enums and their name tables --------===//
#include "mfsdp/Vocabulary.h"
#include "mfsdp/planner/Hardware.h"
#include "mfsdp/runtime.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

using namespace mfsdp;

namespace {

// Every value of E is spelled, spelled once, and reads back as itself.
template <typename E> void expectRoundTrip() {
  std::set<std::string> seen;
  const auto values = enumValues<E>();
  ASSERT_FALSE(values.empty());
  for (E v : values) {
    std::string_view name = enumName(v);
    EXPECT_NE(name, "?");
    EXPECT_FALSE(name.empty());
    EXPECT_TRUE(seen.insert(std::string(name)).second)
        << "'" << name << "' spells two values";
    std::optional<E> back = parseEnum<E>(name);
    ASSERT_TRUE(back.has_value()) << name;
    EXPECT_EQ(*back, v) << name;
  }
}

// Nothing outside the table is accepted: not the empty string, not another
// case, not a near miss.
template <typename E> void expectRefused(std::initializer_list<const char *> bad) {
  EXPECT_FALSE(parseEnum<E>("").has_value());
  for (const char *s : bad)
    EXPECT_FALSE(parseEnum<E>(s).has_value()) << s;
}

} // namespace

TEST(Vocabulary, EveryValueRoundTrips) {
  expectRoundTrip<Placement>();
  expectRoundTrip<Optimizer>();
  expectRoundTrip<ComputeDType>();
  expectRoundTrip<NsNorm>();
  expectRoundTrip<AdjustLr>();
  expectRoundTrip<PolicyKind>();
  expectRoundTrip<MuonScale>();
  expectRoundTrip<RowLayout>();
  expectRoundTrip<DType>();
  expectRoundTrip<ModuleKind>();
  expectRoundTrip<CollKind>();
  expectRoundTrip<Phase>();
  expectRoundTrip<PolicyOption>();
  expectRoundTrip<RowMode>();
  expectRoundTrip<NsSplit>();
  expectRoundTrip<OwnerStrategy>();
  expectRoundTrip<GatherComm>();
  expectRoundTrip<OptimizerOrder>();
  expectRoundTrip<StepBaseline>();
}

TEST(Vocabulary, UnknownSpellingsAreRefused) {
  expectRefused<Placement>({"row-shard", "RowShard", "shard"});
  expectRefused<PolicyKind>({"ADAMW", "adam", "lion", "graph"});
  expectRefused<PolicyOption>({"Graph", "lion"});
  expectRefused<DType>({"bf17", "fp32", "float32", "f8e4m3"});
  expectRefused<ModuleKind>({"Linear", "mlp"});
  expectRefused<MuonScale>({"spectral_unclamped", "match-rms-adamw"});
  expectRefused<RowMode>({"per-param", "perparam"});
  expectRefused<OwnerStrategy>({"Balanced", "round-robin", "best"});
  expectRefused<OptimizerOrder>({"first_units", "random"});
  expectRefused<StepBaseline>({"fsdp1", "dtensor"});
  expectRefused<CollKind>({"allgather", "all-gather"});
}

// The spellings users write (graph files, pass options, printed IR) stay
// what they were.
TEST(Vocabulary, Spellings) {
  EXPECT_EQ(enumName(Placement::RowShard), "row_shard");
  EXPECT_EQ(enumName(Placement::BlockShard), "block_shard");
  EXPECT_EQ(enumName(Optimizer::AdamW), "adamw");
  EXPECT_EQ(enumName(PolicyKind::MixedMuonAdamW), "mixed_muon_adamw");
  EXPECT_EQ(enumName(MuonScale::MatchRmsAdamW), "match_rms_adamw");
  EXPECT_EQ(enumName(DType::F8E4M3), "f8e4m3fn");
  EXPECT_EQ(enumName(ModuleKind::Output), "output");
  EXPECT_EQ(enumName(CollKind::ReduceScatterV), "reduce_scatter_v");
  EXPECT_EQ(enumName(Phase::Backward), "backward");
  EXPECT_EQ(enumName(RowMode::PerParam), "per_param");
  EXPECT_EQ(enumName(OwnerStrategy::RoundRobin), "round_robin");
  EXPECT_EQ(enumName(OptimizerOrder::FirstUnits), "first-units");
  EXPECT_EQ(enumName(StepBaseline::FSDP2DTensorMm), "fsdp2-dtensor-mm");
  EXPECT_EQ(enumName(StepBaseline::FSDP2Rows), "fsdp2-rows");
  EXPECT_EQ(enumName(static_cast<PolicyKind>(17)), "?");
  // Generated C code names the ABI's enumerators.
  EXPECT_STREQ(enumCName(Placement::BlockShard), "MFSDP_BLOCK_SHARD");
  EXPECT_STREQ(enumCName(Optimizer::None), "MFSDP_OPT_NONE");
  EXPECT_STREQ(enumCName(ComputeDType::BF16), "MFSDP_COMPUTE_BF16");
  EXPECT_STREQ(enumCName(static_cast<Optimizer>(9)), "?");
}

TEST(Vocabulary, Messages) {
  EXPECT_EQ(enumSpellings<RowMode>(), "auto, per_param or flat");
  EXPECT_EQ(enumSpellings<DType>(", "), "f64, f32, bf16, f16, f8e4m3fn, f8e5m2");
  EXPECT_EQ(unknownEnumMessage<OwnerStrategy>("best"),
            "unknown owner strategy 'best'; expected balanced, matrixfsdp or "
            "round_robin");
}

// The C ABI keeps its values; the C++ enums carry the same ones.
TEST(Vocabulary, CAbiValues) {
  EXPECT_EQ(MFSDP_ROW_SHARD, 0);
  EXPECT_EQ(MFSDP_OWNER, 1);
  EXPECT_EQ(MFSDP_REPLICATE, 2);
  EXPECT_EQ(MFSDP_BLOCK_SHARD, 3);
  EXPECT_EQ(static_cast<int>(Placement::BlockShard), MFSDP_BLOCK_SHARD);
  EXPECT_EQ(MFSDP_OPT_MUON, 3);
  EXPECT_EQ(static_cast<int>(Optimizer::Muon), MFSDP_OPT_MUON);
  EXPECT_EQ(MFSDP_COMPUTE_BF16, 1);
  EXPECT_EQ(MFSDP_NS_NORM_CLAMP, 1);
  EXPECT_EQ(MFSDP_ADJUST_LR_SPECTRAL_UNCLAMPED, 2);
  EXPECT_EQ(static_cast<int>(AdjustLr::Original), MFSDP_ADJUST_LR_ORIGINAL);
  EXPECT_EQ(static_cast<int>(MuonScale::Original), MFSDP_ADJUST_LR_ORIGINAL);
  EXPECT_EQ(policyOf(PolicyOption::Graph), std::nullopt);
  EXPECT_EQ(policyOf(PolicyOption::Muon), PolicyKind::Muon);
  EXPECT_EQ(policyOf(PolicyOption::MixedMuonAdamW), PolicyKind::MixedMuonAdamW);
}

TEST(Vocabulary, OneHardwareRegistry) {
  EXPECT_EQ(planner::hardwareProfileNames(), "a100, h100, h100-ib, a100-pcie or h100-pcie");
  std::set<std::string> names;
  for (const planner::HardwareProfile &p : planner::hardwareProfiles()) {
    EXPECT_TRUE(names.insert(p.name).second) << p.name;
    EXPECT_EQ(planner::findHardwareProfile(p.name), &p);
    // Both the planner's link rates and the simulator's bus rates are set.
    EXPECT_GT(p.intraBytes, 0) << p.name;
    EXPECT_GT(p.interBytes, 0) << p.name;
    EXPECT_GT(p.intraBusBytes, 0) << p.name;
    EXPECT_GT(p.interBusBytes, 0) << p.name;
  }
  EXPECT_EQ(planner::findHardwareProfile("tpu"), nullptr);
  EXPECT_EQ(planner::findHardwareProfile("A100"), nullptr);
  EXPECT_EQ(planner::unknownHardwareMessage("tpu"),
            "unknown hardware profile 'tpu'; expected a100, h100, h100-ib, a100-pcie or h100-pcie");
  // h100-ib is the h100 with one data-parallel rank per node.
  const planner::HardwareProfile *ib = planner::findHardwareProfile("h100-ib");
  const planner::HardwareProfile *h100 = planner::findHardwareProfile("h100");
  ASSERT_TRUE(ib && h100);
  EXPECT_EQ(ib->gpusPerNode, 1);
  EXPECT_EQ(ib->interBytes, h100->interBytes);
}

//===- NameListTest.cpp - An op's shared parameter list --------------------===//
#include "mfsdp/step/Builder.h"
#include "mfsdp/step/Schedule.h"
#include "mfsdp/step/Step.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace mfsdp::step;

namespace {

/// The step of two AdamW matrices on row shards over dp_shard = 2, ZeRO-3:
/// `w` in unit 0 and `v` in unit `unitOfV` (0 or 1).
Step twoMatrices(int64_t unitOfV) {
  mfsdp::planner::Problem pr;
  std::vector<UnitCost> costs;
  for (int64_t u = 0; u <= unitOfV; ++u) {
    pr.units.push_back({"u" + std::to_string(u)});
    costs.push_back({10, 20, 4, false});
  }
  mfsdp::planner::Param w;
  w.name = "w";
  w.shape = {8, 4};
  w.kind = "linear";
  w.unit = 0;
  w.elemBytes = 4;
  w.placement = mfsdp::planner::PlacementKind::RowShard;
  w.optim = mfsdp::planner::Optim::AdamW;
  mfsdp::planner::Param v = w;
  v.name = "v";
  v.unit = unitOfV;
  pr.params = {w, v};
  mfsdp::planner::Options o;
  o.shard = 2;
  o.zero = 3;
  o.hw = *mfsdp::planner::findHardwareProfile("a100");
  return buildStep(pr, o, mfsdp::planner::Decisions{}, costs, BuildOptions{}, "t");
}

// Copies share the names; a change copies them first, so no other op sees it.
TEST(NameList, SharedUntilChanged) {
  NameList a = std::vector<std::string>{"w", "b"};
  NameList b = a;
  EXPECT_TRUE(a.sameList(b));
  b.push_back("n");
  EXPECT_FALSE(a.sameList(b));
  EXPECT_EQ(a.names(), (std::vector<std::string>{"w", "b"}));
  EXPECT_EQ(b.names(), (std::vector<std::string>{"w", "b", "n"}));
  NameList c = a;
  c.insert(c.begin() + 1, b.begin() + 2, b.end());
  EXPECT_EQ(c.names(), (std::vector<std::string>{"w", "n", "b"}));
  EXPECT_EQ(a.names(), (std::vector<std::string>{"w", "b"}));
  // Equal names compare equal, shared or not; the empty list has none.
  EXPECT_EQ(a, NameList({"w", "b"}));
  EXPECT_NE(a, c);
  NameList none;
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none, NameList(std::vector<std::string>{}));
  EXPECT_EQ(none.begin(), none.end());
  c.clear();
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(a.size(), 2u);
}

// The step builder gives a unit's gathers, its reduction and its optimizer
// one list where they carry the same parameters.
TEST(NameList, BuilderSharesAUnitsList) {
  Step s = twoMatrices(0);
  std::vector<const Op *> carrying;
  for (const Op &op : s.ops)
    if (!op.params.empty())
      carrying.push_back(&op);
  // Forward and backward gathers, the reduction and the AdamW step.
  ASSERT_EQ(carrying.size(), 4u);
  for (const Op *op : carrying) {
    EXPECT_EQ(op->params.names(), (std::vector<std::string>{"w", "v"})) << op->name;
    EXPECT_TRUE(op->params.sameList(carrying.front()->params)) << op->name;
  }
}

// Lists of the same names in the same order become one (the first op's);
// another order is another list. Bucketing ends with this, so that a
// unit's gathers and reduction, bucketed apart, share their members' list.
TEST(NameList, EqualListsShared) {
  Step s;
  Op a, b, c, d;
  a.params = std::vector<std::string>{"w", "v"};
  b.params = std::vector<std::string>{"w", "v"};
  c.params = std::vector<std::string>{"v", "w"};
  d.params = a.params; // already the same list
  s.ops = {a, b, c, d, Op()};
  ASSERT_FALSE(s.ops[0].params.sameList(s.ops[1].params));
  EXPECT_EQ(shareNameLists(s), 1);
  EXPECT_TRUE(s.ops[1].params.sameList(s.ops[0].params));
  EXPECT_FALSE(s.ops[2].params.sameList(s.ops[0].params));
  EXPECT_TRUE(s.ops[3].params.sameList(s.ops[0].params));
  EXPECT_EQ(s.ops[1].params.names(), (std::vector<std::string>{"w", "v"}));
  EXPECT_TRUE(s.ops[4].params.empty());
}

// Chunks are shared by copies until one changes them: the change copies
// them first, so no other op sees it; reading never copies.
TEST(Chunks, SharedUntilChanged) {
  Chunks a = std::vector<double>{1, 2};
  Chunks b = a;
  EXPECT_EQ(&a.values(), &b.values());
  EXPECT_EQ(b[1], 2);
  EXPECT_EQ(&a.values(), &b.values());
  b.add(1, 3);
  EXPECT_NE(&a.values(), &b.values());
  EXPECT_EQ(a, (std::vector<double>{1, 2}));
  EXPECT_EQ(b, (std::vector<double>{1, 5}));
  Chunks c = a;
  c.push_back(4);
  EXPECT_EQ(a.size(), 2u);
  EXPECT_EQ(c, (std::vector<double>{1, 2, 4}));
  c.assign(3, 0.0);
  EXPECT_EQ(c, (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(a, Chunks({1, 2}));
  EXPECT_NE(a, c);
  Chunks none;
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.begin(), none.end());
  none.assign(0, 1.0);
  EXPECT_TRUE(none.empty());
}


// A word is kept once: equal text, one pointer; it compares with strings by
// value and reads as one.
TEST(Word, KeptOnceComparedByText) {
  Word a = std::string("forward");
  Word b = "forward";
  Word c = std::string_view("backward");
  EXPECT_EQ(&a.str(), &b.str());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_TRUE(a == "forward");
  EXPECT_TRUE("forward" == a);
  EXPECT_TRUE(a == std::string("forward"));
  EXPECT_TRUE(a != "backward");
  EXPECT_TRUE(std::string("x") != a);
  EXPECT_EQ("unit " + a, "unit forward");
  EXPECT_EQ(a + "!", "forward!");
  const std::string &text = a;
  EXPECT_EQ(text, "forward");
  EXPECT_EQ(std::string_view(c), "backward");
  Word none, alsoNone = "", fromNull = static_cast<const char *>(nullptr);
  EXPECT_TRUE(fromNull.empty());
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none, alsoNone);
  EXPECT_EQ(none, "");
  EXPECT_EQ(none.size(), 0u);
  EXPECT_TRUE(c < a);
}

// The ops of one step over one mesh axis share its list.
TEST(NameList, CollectivesShareTheirAxes) {
  Step s = twoMatrices(1);
  const Op *first = nullptr;
  size_t collectives = 0;
  for (const Op &op : s.ops) {
    if (op.kind != OpKind::Collective)
      continue;
    ++collectives;
    EXPECT_EQ(op.meshAxes.names(), std::vector<std::string>{"dp_shard"});
    if (!first)
      first = &op;
    EXPECT_TRUE(op.meshAxes.sameList(first->meshAxes)) << op.name;
  }
  EXPECT_GE(collectives, 6u);
}

} // namespace

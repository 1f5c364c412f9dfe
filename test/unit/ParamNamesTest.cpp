//===- ParamNamesTest.cpp - A plan's parameters by name --------------------===//
//
// lib/step's private index of a plan's parameters by name: the first
// parameter of each name, whatever the hint, and none for a name the plan
// does not have.
//
//===----------------------------------------------------------------------===//
#include "../../lib/step/ParamNames.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using mfsdp::step::ParamNames;

namespace {

/// A plan whose parameters carry `names` (nullptr: a nameless one).
struct NamedPlan {
  explicit NamedPlan(const std::vector<const char *> &names) {
    for (const char *n : names) {
      mfsdp_param_desc d{};
      d.name = n;
      descs.push_back(d);
    }
    plan.params = descs.empty() ? nullptr : descs.data();
    plan.num_params = static_cast<int32_t>(descs.size());
  }
  std::vector<mfsdp_param_desc> descs;
  mfsdp_plan plan{};
};

// Intent: a name given twice resolves to its first parameter, from the
// table and from the scan near the hint alike; prefixes of a name are
// other names.
TEST(ParamNames, FirstOfEachNameWhateverTheHint) {
  NamedPlan p({"a.w", "a.w2", "b", "a.w", nullptr, "a"});
  const ParamNames names(p.plan);
  EXPECT_EQ(names.find("a.w"), 0);
  EXPECT_EQ(names.find("a.w2"), 1);
  EXPECT_EQ(names.find("b"), 2);
  EXPECT_EQ(names.find("a"), 5);
  // Near the hint: "a.w" at 3 is a second of its name, so the table's 0.
  EXPECT_EQ(names.find("a.w", 2), 0);
  EXPECT_EQ(names.find("a", 2), 5);
  EXPECT_EQ(names.find("a.w2", 0), 1);
  // A hint past the name: found all the same.
  EXPECT_EQ(names.find("a.w", 4), 0);
}

// Intent: a name the plan lacks is -1, including the prefix or extension
// of one it has and the empty name; an empty plan has none.
TEST(ParamNames, MissingNamesAreNone) {
  NamedPlan p({"layer.0.w", "layer.1.w"});
  const ParamNames names(p.plan);
  EXPECT_EQ(names.find("layer.0"), -1);
  EXPECT_EQ(names.find("layer.0.w.x"), -1);
  EXPECT_EQ(names.find(""), -1);
  EXPECT_EQ(names.find("layer.2.w", 1), -1);
  NamedPlan empty({});
  EXPECT_EQ(ParamNames(empty.plan).find("x"), -1);
  EXPECT_EQ(ParamNames(empty.plan).find("x", 0), -1);
}

// Intent: on a plan of many names (the table's probing and collisions),
// every name is found at its index from any hint, and a near miss is not.
TEST(ParamNames, ManyNamesEachFound) {
  std::vector<std::string> text;
  for (int i = 0; i < 5000; ++i)
    text.push_back("layers." + std::to_string(i / 7) + ".p" + std::to_string(i % 7));
  std::vector<const char *> raw;
  for (const std::string &t : text)
    raw.push_back(t.c_str());
  NamedPlan p(raw);
  const ParamNames names(p.plan);
  for (int i = 0; i < 5000; ++i) {
    EXPECT_EQ(names.find(text[i]), i) << text[i];
    EXPECT_EQ(names.find(text[i], i > 0 ? i - 1 : -1), i) << text[i];
    EXPECT_EQ(names.find(text[i], (i * 37) % 5000), i) << text[i];
  }
  EXPECT_EQ(names.find("layers.0.p7"), -1);
  EXPECT_EQ(names.find("layers.714.p3", 4990), -1);
}

} // namespace

//===- GraphTest.cpp - The graph format: read, write, validate, locate ----===//
#include "mfsdp/graph/Graph.h"

#include <gtest/gtest.h>

using namespace mfsdp::graph;

namespace {

Graph tinyGraph() {
  Graph g;
  g.model = "tiny";
  g.seqLen = 128;
  g.params.push_back({"embed.weight", {16, 8}, DType::BF16, "embed",
                      ModuleKind::Embedding, true, "", {}});
  g.params.push_back({"block.w", {8, 8}, DType::F32, "block", ModuleKind::Linear,
                      true, "", {}});
  g.params.push_back({"block.experts.0.w", {4, 8}, DType::BF16,
                      "block.experts.0", ModuleKind::Expert, true, "", {"ep"}});
  g.params.push_back({"head.weight", {16, 8}, DType::BF16, "head",
                      ModuleKind::Output, true, "embed.weight", {}});
  g.units.push_back({"embed", {"embed.weight"}, {0, 0, 0, false}});
  g.units.push_back({"block",
                     {"block.w", "block.experts.0.w"},
                     {1.25e6, 2.5e6, 4096, true}});
  Mesh m;
  m.dims = {{"dp_shard", 2}, {"ep", 2}};
  g.mesh = m;
  Policy p;
  p.kind = PolicyKind::MixedMuonAdamW;
  p.zero = 2;
  p.adamw = AdamW{3e-4, 0.9, 0.95, 1e-8, 0.1};
  p.muon = Muon{0.02, 0.95, 0.01, true, 5, MuonScale::Original};
  g.policy = p;
  return g;
}

TEST(Graph, WriteThenParseIsLossless) {
  Graph g = tinyGraph();
  std::string text = writeGraph(g);
  Graph back;
  Diagnostic d;
  ASSERT_TRUE(parseGraph(text, back, d)) << d.format("tiny.json");
  EXPECT_EQ(g, back);
  EXPECT_EQ(text, writeGraph(back));
}

TEST(Graph, DoublesSurviveTheRoundTrip) {
  Graph g = tinyGraph();
  g.units[1].cost.fwdFlopsPerToken = 0.1 + 0.2; // not exactly 0.3
  g.units[1].cost.activationBytesPerToken = 1.0 / 3.0;
  Graph back;
  Diagnostic d;
  ASSERT_TRUE(parseGraph(writeGraph(g), back, d));
  EXPECT_EQ(back.units[1].cost.fwdFlopsPerToken, 0.1 + 0.2);
  EXPECT_EQ(back.units[1].cost.activationBytesPerToken, 1.0 / 3.0);
}

// The spellings themselves are checked in VocabularyTest.cpp.
TEST(Graph, DTypeBytes) {
  EXPECT_EQ(dtypeBytes(DType::BF16), 2);
  EXPECT_EQ(dtypeBytes(DType::F8E4M3), 1);
}

// Each case breaks one invariant and expects the pointer of the culprit.
struct BadCase {
  const char *what;
  void (*edit)(Graph &);
  const char *pointer;
  const char *message;
};

TEST(Graph, ValidateNamesTheCulprit) {
  const BadCase cases[] = {
      {"duplicate param",
       [](Graph &g) { g.params[1].name = "embed.weight"; }, "/params/1/name",
       "duplicate parameter"},
      {"zero dim", [](Graph &g) { g.params[1].shape = {8, 0}; },
       "/params/1/shape/1", "expected a positive dimension, got 0"},
      {"param in two units",
       [](Graph &g) { g.units[1].params.push_back("embed.weight"); },
       "/units/1/params/2", "already in a unit (at /units/0/params/0)"},
      {"param in none", [](Graph &g) { g.units[1].params.pop_back(); },
       "/params/2", "is in no unit"},
      {"tied param in a unit",
       [](Graph &g) { g.units[1].params.push_back("head.weight"); },
       "/units/1/params/2", "has no storage of its own"},
      {"tie to unknown", [](Graph &g) { g.params[3].tiedTo = "nope"; },
       "/params/3/tied_to", "unknown parameter 'nope'"},
      {"tie shape mismatch", [](Graph &g) { g.params[3].shape = {8, 16}; },
       "/params/3/tied_to", "same shape and dtype"},
      {"unknown unit param", [](Graph &g) { g.units[0].params[0] = "ghost"; },
       "/units/0/params/0", "unknown parameter 'ghost'"},
      {"owned by dp", [](Graph &g) { g.params[2].ownedBy = {"dp_shard"}; },
       "/params/2/owned_by/0", "data-parallel dim"},
      {"owned by absent dim", [](Graph &g) { g.params[2].ownedBy = {"tp"}; },
       "/params/2/owned_by/0", "not a dim of the mesh"},
      {"mesh without dp_shard",
       [](Graph &g) { g.mesh->dims[0].name = "dp"; }, "/mesh/dims",
       "expected a 'dp_shard' dim"},
      {"device ids not a permutation",
       [](Graph &g) { g.mesh->deviceIds = {0, 1, 1, 3}; },
       "/mesh/device_ids/2", "repeated"},
      {"muon steps", [](Graph &g) { g.policy->muon->nsSteps = 0; },
       "/policy/muon/ns_steps", "expected 1 to 1000 Newton-Schulz steps, got 0"},
      {"muon steps past an int", [](Graph &g) { g.policy->muon->nsSteps = INT64_MAX; },
       "/policy/muon/ns_steps", "expected 1 to 1000"},
      {"adamw beta", [](Graph &g) { g.policy->adamw->beta2 = 1.0; },
       "/policy/adamw/beta2", "[0, 1)"},
      {"negative cost",
       [](Graph &g) { g.units[1].cost.bwdFlopsPerToken = -1; },
       "/units/1/cost/bwd_flops_per_token", "non-negative"},
      {"empty unit", [](Graph &g) { g.units[0].params.clear(); },
       "/units/0/params", "at least one parameter"},
  };
  for (const BadCase &c : cases) {
    Graph g = tinyGraph();
    c.edit(g);
    Diagnostic d;
    EXPECT_FALSE(validate(g, d)) << c.what;
    EXPECT_EQ(d.pointer, c.pointer) << c.what;
    EXPECT_NE(d.message.find(c.message), std::string::npos)
        << c.what << ": " << d.message;
  }
}

TEST(Graph, ParseReportsLineAndColumn) {
  const char *text = R"({
  "format": "mfsdp.graph",
  "version": 1,
  "model": "m",
  "params": [
    {"name": "w", "shape": [4, -2], "dtype": "f32", "module": "l", "kind": "linear"}
  ],
  "units": []
})";
  Graph g;
  Diagnostic d;
  ASSERT_FALSE(parseGraph(text, g, d));
  EXPECT_EQ(d.pointer, "/params/0/shape/1");
  EXPECT_EQ(d.line, 6);
  EXPECT_EQ(d.column, 32);
  EXPECT_EQ(d.format("m.json"),
            "m.json:6:32: error: /params/0/shape/1: expected a positive "
            "dimension, got -2");
}

TEST(Graph, ParseErrorsOfTheJsonItself) {
  Graph g;
  Diagnostic d;
  ASSERT_FALSE(parseGraph("{\n  \"format\": \"mfsdp.graph\",\n  oops\n}", g, d));
  EXPECT_EQ(d.line, 3);
  EXPECT_NE(d.message.find("invalid JSON"), std::string::npos);
  ASSERT_FALSE(parseGraph("", g, d));
  EXPECT_NE(d.message.find("invalid JSON"), std::string::npos);
}

TEST(Graph, LocatePointer) {
  const char *text = "{\"a\": [1, {\"b/c\": 2, \"d\": [3, 4]}], \"e\": 5}";
  EXPECT_EQ(locatePointer(text, ""), std::make_pair(1, 1));
  EXPECT_EQ(locatePointer(text, "/a"), std::make_pair(1, 7));
  EXPECT_EQ(locatePointer(text, "/a/1/b~1c"), std::make_pair(1, 19));
  EXPECT_EQ(locatePointer(text, "/a/1/d/1"), std::make_pair(1, 31));
  EXPECT_EQ(locatePointer(text, "/e"), std::make_pair(1, 42));
  // An absent member points at the deepest value that exists.
  EXPECT_EQ(locatePointer(text, "/a/1/zz"), std::make_pair(1, 11));
}

TEST(Graph, FindAndSizes) {
  Graph g = tinyGraph();
  ASSERT_NE(g.findParam("block.w"), nullptr);
  EXPECT_EQ(g.findParam("block.w")->bytes(), 8 * 8 * 4);
  EXPECT_EQ(g.findParam("missing"), nullptr);
  EXPECT_EQ(g.mesh->worldSize(), 4);
  EXPECT_TRUE(g.params[2].isExternal());
}

} // namespace

namespace {
TEST(Graph, IndexPointersAgreesWithLocatePointer) {
  Graph g;
  g.model = "m";
  g.params.push_back({"a/b~c", {2, 3}, DType::F32, "x", ModuleKind::Linear,
                      true, "", {}});
  g.units.push_back({"u", {"a/b~c"}, {}});
  std::string text = writeGraph(g);
  auto index = indexPointers(text, 3);
  ASSERT_FALSE(index.empty());
  for (const char *p : {"", "/params", "/params/0", "/params/0/name",
                        "/params/0/shape", "/units/0", "/units/0/params"})
    EXPECT_EQ(index.at(p), locatePointer(text, p)) << p;
  EXPECT_EQ(index.count("/params/0/shape/0"), 0u); // deeper than asked
  EXPECT_TRUE(indexPointers("{\"a\": [1, ", 2).empty());
}
} // namespace

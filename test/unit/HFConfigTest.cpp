//===- HFConfigTest.cpp - graphFromHFConfig and generateGraph -------------===//
//
// The expected parameter lists below are written out by hand from the
// transformers modeling files (module registration order of
// modeling_{llama,mistral,qwen2,qwen3,qwen3_moe,mixtral,deepseek_v3}.py, of
// 5.x by default and of 4.x for the Transformers4 tests), not computed by the
// code under test.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/graph/HFConfig.h"
#include "mfsdp/graph/Generate.h"
#include "mfsdp/graph/Graph.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using namespace mfsdp::graph;

namespace {

using Shape = std::vector<int64_t>;
using Expected = std::vector<std::pair<std::string, Shape>>;

/// examples/hf, found from the MFSDP_SOURCE_DIR macro or environment
/// variable, from this file's path, or from the working directory.
std::string examplesDir() {
  std::vector<std::string> candidates;
#ifdef MFSDP_SOURCE_DIR
  candidates.push_back(std::string(MFSDP_SOURCE_DIR) + "/examples/hf");
#endif
  if (const char *env = std::getenv("MFSDP_SOURCE_DIR"))
    candidates.push_back(std::string(env) + "/examples/hf");
  std::string file = __FILE__;
  auto cut = file.rfind("test/unit/");
  if (cut != std::string::npos)
    candidates.push_back(file.substr(0, cut) + "examples/hf");
  for (const char *rel : {"examples/hf", "../examples/hf", "../../examples/hf",
                          "../../../examples/hf"})
    candidates.push_back(rel);
  for (const auto &c : candidates) {
    std::ifstream probe(c + "/tiny-llama.json");
    if (probe)
      return c;
  }
  return "examples/hf";
}

std::string readExample(const std::string &name) {
  std::ifstream in(examplesDir() + "/" + name);
  EXPECT_TRUE(in.good()) << "cannot open examples/hf/" << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Graph load(const std::string &text, HFImportOptions opts = {}) {
  Graph g;
  Diagnostic d;
  EXPECT_TRUE(graphFromHFConfig(text, opts, g, d))
      << d.pointer << ": " << d.message;
  return g;
}

Graph loadExample(const std::string &name, HFImportOptions opts = {}) {
  return load(readExample(name), opts);
}

/// Parameters whose names start with `prefix`, in graph order.
Expected paramsWithPrefix(const Graph &g, const std::string &prefix) {
  Expected out;
  for (const auto &p : g.params)
    if (p.name.rfind(prefix, 0) == 0)
      out.emplace_back(p.name, p.shape);
  return out;
}

/// Parameters that are not in a decoder layer, in graph order.
Expected topLevel(const Graph &g) {
  Expected out;
  for (const auto &p : g.params)
    if (p.name.rfind("model.layers.", 0) != 0)
      out.emplace_back(p.name, p.shape);
  return out;
}

/// Total parameter count, counting tied parameters once.
int64_t totalParams(const Graph &g) {
  int64_t n = 0;
  for (const auto &p : g.params)
    if (p.tiedTo.empty())
      n += p.numElements();
  return n;
}

Expected withPrefix(const std::string &prefix, const Expected &rel) {
  Expected out;
  for (const auto &[n, s] : rel)
    out.emplace_back(prefix + n, s);
  return out;
}

void expectSame(const Expected &got, const Expected &want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first) << "at index " << i;
    EXPECT_EQ(got[i].second, want[i].second) << "shape of " << want[i].first;
  }
}

const Unit *findUnit(const Graph &g, const std::string &name) {
  for (const auto &u : g.units)
    if (u.name == name)
      return &u;
  return nullptr;
}

void expectValid(const Graph &g) {
  Diagnostic d;
  EXPECT_TRUE(validate(g, d)) << d.pointer << ": " << d.message;
}

/// Top level of an untied model with vocab 256 and hidden 64.
const Expected kTinyTopUntied = {
    {"model.embed_tokens.weight", {256, 64}},
    {"model.norm.weight", {64}},
    {"lm_head.weight", {256, 64}},
};

//===----------------------------------------------------------------------===//
// Per-architecture names and shapes
//===----------------------------------------------------------------------===//

TEST(HFConfig, SupportedArchitectures) {
  std::vector<std::string> want = {"llama",      "mistral",   "qwen2",
                                   "qwen3",      "qwen3_moe", "mixtral",
                                   "deepseek_v3"};
  EXPECT_EQ(supportedHFArchitectures(), want);
}

TEST(HFConfig, TinyLlama) {
  Graph g = loadExample("tiny-llama.json");
  // LlamaDecoderLayer: self_attn (q,k,v,o), mlp (gate,up,down),
  // input_layernorm, post_attention_layernorm. hd = 64/4 = 16, kv = 2.
  expectSame(paramsWithPrefix(g, "model.layers.0."),
             {{"model.layers.0.self_attn.q_proj.weight", {64, 64}},
              {"model.layers.0.self_attn.k_proj.weight", {32, 64}},
              {"model.layers.0.self_attn.v_proj.weight", {32, 64}},
              {"model.layers.0.self_attn.o_proj.weight", {64, 64}},
              {"model.layers.0.mlp.gate_proj.weight", {128, 64}},
              {"model.layers.0.mlp.up_proj.weight", {128, 64}},
              {"model.layers.0.mlp.down_proj.weight", {64, 128}},
              {"model.layers.0.input_layernorm.weight", {64}},
              {"model.layers.0.post_attention_layernorm.weight", {64}}});
  expectSame(topLevel(g), kTinyTopUntied);
  EXPECT_EQ(g.params.size(), 3u + 2u * 9u);
  EXPECT_EQ(g.model, "tiny-llama");
  EXPECT_EQ(g.seqLen, 4096);

  // Units in forward order.
  ASSERT_EQ(g.units.size(), 4u);
  EXPECT_EQ(g.units[0].name, "model.embed_tokens");
  EXPECT_EQ(g.units[0].params,
            std::vector<std::string>{"model.embed_tokens.weight"});
  EXPECT_EQ(g.units[1].name, "model.layers.0");
  EXPECT_EQ(g.units[1].params.size(), 9u);
  EXPECT_EQ(g.units[2].name, "model.layers.1");
  EXPECT_EQ(g.units[3].name, "lm_head");
  EXPECT_EQ(g.units[3].params,
            (std::vector<std::string>{"model.norm.weight", "lm_head.weight"}));

  // Kinds, modules, dtype.
  const Param *q = g.findParam("model.layers.1.self_attn.q_proj.weight");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->module, "model.layers.1.self_attn.q_proj");
  EXPECT_EQ(q->kind, ModuleKind::Linear);
  EXPECT_EQ(q->dtype, DType::BF16);
  EXPECT_TRUE(q->requiresGrad);
  EXPECT_EQ(g.findParam("model.embed_tokens.weight")->kind,
            ModuleKind::Embedding);
  EXPECT_EQ(g.findParam("lm_head.weight")->kind, ModuleKind::Output);
  EXPECT_EQ(g.findParam("model.norm.weight")->kind, ModuleKind::Norm);
  EXPECT_EQ(g.findParam("model.norm.weight")->module, "model.norm");
  EXPECT_EQ(g.findParam("model.layers.0.input_layernorm.weight")->kind,
            ModuleKind::Norm);
  EXPECT_TRUE(g.findParam("lm_head.weight")->tiedTo.empty());
  expectValid(g);
}

TEST(HFConfig, LlamaBiases) {
  // attention_bias adds q/k/v/o biases, mlp_bias gate/up/down biases; in
  // named_parameters() a Linear lists weight then bias.
  Graph g = load(R"({"model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 256, "attention_bias": true,
    "mlp_bias": true})");
  expectSame(paramsWithPrefix(g, "model.layers.0."),
             {{"model.layers.0.self_attn.q_proj.weight", {64, 64}},
              {"model.layers.0.self_attn.q_proj.bias", {64}},
              {"model.layers.0.self_attn.k_proj.weight", {32, 64}},
              {"model.layers.0.self_attn.k_proj.bias", {32}},
              {"model.layers.0.self_attn.v_proj.weight", {32, 64}},
              {"model.layers.0.self_attn.v_proj.bias", {32}},
              {"model.layers.0.self_attn.o_proj.weight", {64, 64}},
              {"model.layers.0.self_attn.o_proj.bias", {64}},
              {"model.layers.0.mlp.gate_proj.weight", {128, 64}},
              {"model.layers.0.mlp.gate_proj.bias", {128}},
              {"model.layers.0.mlp.up_proj.weight", {128, 64}},
              {"model.layers.0.mlp.up_proj.bias", {128}},
              {"model.layers.0.mlp.down_proj.weight", {64, 128}},
              {"model.layers.0.mlp.down_proj.bias", {64}},
              {"model.layers.0.input_layernorm.weight", {64}},
              {"model.layers.0.post_attention_layernorm.weight", {64}}});
  EXPECT_EQ(g.findParam("model.layers.0.self_attn.q_proj.bias")->module,
            "model.layers.0.self_attn.q_proj");
  // No torch_dtype and no _name_or_path: bf16 and the model_type.
  EXPECT_EQ(g.findParam("model.norm.weight")->dtype, DType::BF16);
  EXPECT_EQ(g.model, "llama");
  expectValid(g);
}

TEST(HFConfig, TinyMistral) {
  // "head_dim": null means hidden / heads; one KV head; never biases.
  Graph g = loadExample("tiny-mistral.json");
  expectSame(paramsWithPrefix(g, "model.layers.1."),
             {{"model.layers.1.self_attn.q_proj.weight", {64, 64}},
              {"model.layers.1.self_attn.k_proj.weight", {16, 64}},
              {"model.layers.1.self_attn.v_proj.weight", {16, 64}},
              {"model.layers.1.self_attn.o_proj.weight", {64, 64}},
              {"model.layers.1.mlp.gate_proj.weight", {128, 64}},
              {"model.layers.1.mlp.up_proj.weight", {128, 64}},
              {"model.layers.1.mlp.down_proj.weight", {64, 128}},
              {"model.layers.1.input_layernorm.weight", {64}},
              {"model.layers.1.post_attention_layernorm.weight", {64}}});
  expectSame(topLevel(g), kTinyTopUntied);
  expectValid(g);
}

TEST(HFConfig, TinyQwen2Tied) {
  // Qwen2Attention: q/k/v with bias, o_proj without.
  Graph g = loadExample("tiny-qwen2.json");
  expectSame(paramsWithPrefix(g, "model.layers.0."),
             {{"model.layers.0.self_attn.q_proj.weight", {64, 64}},
              {"model.layers.0.self_attn.q_proj.bias", {64}},
              {"model.layers.0.self_attn.k_proj.weight", {32, 64}},
              {"model.layers.0.self_attn.k_proj.bias", {32}},
              {"model.layers.0.self_attn.v_proj.weight", {32, 64}},
              {"model.layers.0.self_attn.v_proj.bias", {32}},
              {"model.layers.0.self_attn.o_proj.weight", {64, 64}},
              {"model.layers.0.mlp.gate_proj.weight", {128, 64}},
              {"model.layers.0.mlp.up_proj.weight", {128, 64}},
              {"model.layers.0.mlp.down_proj.weight", {64, 128}},
              {"model.layers.0.input_layernorm.weight", {64}},
              {"model.layers.0.post_attention_layernorm.weight", {64}}});
  expectSame(topLevel(g), kTinyTopUntied);

  // Tied: lm_head.weight is an alias of the embedding, in no unit.
  const Param *head = g.findParam("lm_head.weight");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->tiedTo, "model.embed_tokens.weight");
  EXPECT_EQ(head->kind, ModuleKind::Output);
  EXPECT_EQ(head->dtype, g.findParam("model.embed_tokens.weight")->dtype);
  for (const auto &u : g.units)
    for (const auto &p : u.params)
      EXPECT_NE(p, "lm_head.weight")
          << "tied lm_head.weight in unit " << u.name;
  const Unit *lm = findUnit(g, "lm_head");
  ASSERT_TRUE(lm);
  EXPECT_EQ(lm->params, std::vector<std::string>{"model.norm.weight"});
  EXPECT_EQ(g.units.back().name, "lm_head");
  expectValid(g);
}

TEST(HFConfig, TinyQwen3) {
  // head_dim 32 != 64 / 4; q_norm and k_norm [head_dim] after o_proj.
  Graph g = loadExample("tiny-qwen3.json");
  expectSame(paramsWithPrefix(g, "model.layers.0."),
             {{"model.layers.0.self_attn.q_proj.weight", {128, 64}},
              {"model.layers.0.self_attn.k_proj.weight", {64, 64}},
              {"model.layers.0.self_attn.v_proj.weight", {64, 64}},
              {"model.layers.0.self_attn.o_proj.weight", {64, 128}},
              {"model.layers.0.self_attn.q_norm.weight", {32}},
              {"model.layers.0.self_attn.k_norm.weight", {32}},
              {"model.layers.0.mlp.gate_proj.weight", {128, 64}},
              {"model.layers.0.mlp.up_proj.weight", {128, 64}},
              {"model.layers.0.mlp.down_proj.weight", {64, 128}},
              {"model.layers.0.input_layernorm.weight", {64}},
              {"model.layers.0.post_attention_layernorm.weight", {64}}});
  EXPECT_EQ(g.findParam("model.layers.0.self_attn.q_norm.weight")->kind,
            ModuleKind::Norm);
  EXPECT_EQ(g.findParam("model.layers.0.self_attn.k_norm.weight")->module,
            "model.layers.0.self_attn.k_norm");
  EXPECT_EQ(g.findParam("lm_head.weight")->tiedTo, "model.embed_tokens.weight");
  expectValid(g);
}

TEST(HFConfig, Qwen3DefaultHeadDimIs128) {
  // Qwen3Config defaults head_dim to 128; attention_bias adds q/k/v/o biases.
  Graph g = load(R"({"model_type": "qwen3", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 256, "attention_bias": true})");
  expectSame(paramsWithPrefix(g, "model.layers.0.self_attn."),
             {{"model.layers.0.self_attn.q_proj.weight", {512, 64}},
              {"model.layers.0.self_attn.q_proj.bias", {512}},
              {"model.layers.0.self_attn.k_proj.weight", {256, 64}},
              {"model.layers.0.self_attn.k_proj.bias", {256}},
              {"model.layers.0.self_attn.v_proj.weight", {256, 64}},
              {"model.layers.0.self_attn.v_proj.bias", {256}},
              {"model.layers.0.self_attn.o_proj.weight", {64, 512}},
              {"model.layers.0.self_attn.o_proj.bias", {64}},
              {"model.layers.0.self_attn.q_norm.weight", {128}},
              {"model.layers.0.self_attn.k_norm.weight", {128}}});
}

TEST(HFConfig, TinyQwen3Moe) {
  // Layer 0 is in mlp_only_layers (dense, intermediate_size); layer 1 is
  // sparse: Qwen3MoeSparseMoeBlock registers gate, then experts.
  Graph g = loadExample("tiny-qwen3-moe.json");
  const Expected attn = {{"self_attn.q_proj.weight", {64, 64}},
                         {"self_attn.k_proj.weight", {32, 64}},
                         {"self_attn.v_proj.weight", {32, 64}},
                         {"self_attn.o_proj.weight", {64, 64}},
                         {"self_attn.q_norm.weight", {16}},
                         {"self_attn.k_norm.weight", {16}}};
  Expected l0 = withPrefix("model.layers.0.", attn);
  for (auto e : Expected{{"mlp.gate_proj.weight", {128, 64}},
                         {"mlp.up_proj.weight", {128, 64}},
                         {"mlp.down_proj.weight", {64, 128}},
                         {"input_layernorm.weight", {64}},
                         {"post_attention_layernorm.weight", {64}}})
    l0.emplace_back("model.layers.0." + e.first, e.second);
  expectSame(paramsWithPrefix(g, "model.layers.0."), l0);

  // transformers 5: Qwen3MoeSparseMoeBlock registers experts (fused
  // gate_up_proj [4, 64, 64], down_proj [4, 64, 32]), then the router.
  expectSame(paramsWithPrefix(g, "model.layers.1."),
             {{"model.layers.1.self_attn.q_proj.weight", {64, 64}},
              {"model.layers.1.self_attn.k_proj.weight", {32, 64}},
              {"model.layers.1.self_attn.v_proj.weight", {32, 64}},
              {"model.layers.1.self_attn.o_proj.weight", {64, 64}},
              {"model.layers.1.self_attn.q_norm.weight", {16}},
              {"model.layers.1.self_attn.k_norm.weight", {16}},
              {"model.layers.1.mlp.experts.gate_up_proj.0.gate", {32, 64}},
              {"model.layers.1.mlp.experts.gate_up_proj.0.up", {32, 64}},
              {"model.layers.1.mlp.experts.gate_up_proj.1.gate", {32, 64}},
              {"model.layers.1.mlp.experts.gate_up_proj.1.up", {32, 64}},
              {"model.layers.1.mlp.experts.gate_up_proj.2.gate", {32, 64}},
              {"model.layers.1.mlp.experts.gate_up_proj.2.up", {32, 64}},
              {"model.layers.1.mlp.experts.gate_up_proj.3.gate", {32, 64}},
              {"model.layers.1.mlp.experts.gate_up_proj.3.up", {32, 64}},
              {"model.layers.1.mlp.experts.down_proj.0", {64, 32}},
              {"model.layers.1.mlp.experts.down_proj.1", {64, 32}},
              {"model.layers.1.mlp.experts.down_proj.2", {64, 32}},
              {"model.layers.1.mlp.experts.down_proj.3", {64, 32}},
              {"model.layers.1.mlp.gate.weight", {4, 64}},
              {"model.layers.1.input_layernorm.weight", {64}},
              {"model.layers.1.post_attention_layernorm.weight", {64}}});
  expectSame(topLevel(g), kTinyTopUntied);
  EXPECT_EQ(g.findParam("model.layers.1.mlp.gate.weight")->kind,
            ModuleKind::Router);
  EXPECT_EQ(g.findParam("model.layers.1.mlp.gate.weight")->module,
            "model.layers.1.mlp.gate");
  // Every split matrix keeps the fused tensor's module, kind and dtype.
  for (const char *n : {"model.layers.1.mlp.experts.gate_up_proj.2.up",
                        "model.layers.1.mlp.experts.down_proj.3"}) {
    const Param *p = g.findParam(n);
    ASSERT_TRUE(p) << n;
    EXPECT_EQ(p->kind, ModuleKind::Expert) << n;
    EXPECT_EQ(p->module, "model.layers.1.mlp.experts") << n;
    EXPECT_EQ(p->dtype, DType::BF16) << n;
    EXPECT_TRUE(p->requiresGrad) << n;
  }
  EXPECT_EQ(g.findParam("model.layers.0.mlp.gate_proj.weight")->kind,
            ModuleKind::Linear);
  // The matrices are in their layer's unit, in parameter order.
  const Unit *u1 = findUnit(g, "model.layers.1");
  ASSERT_TRUE(u1);
  std::vector<std::string> inOrder;
  for (const auto &p : g.params)
    if (p.name.rfind("model.layers.1.", 0) == 0)
      inOrder.push_back(p.name);
  EXPECT_EQ(u1->params, inOrder);
  expectValid(g);
}

TEST(HFConfig, Qwen3MoeSparseStep) {
  // decoder_sparse_step 2: layers 1 and 3 are sparse, 0 and 2 dense.
  Graph g = load(R"({"model_type": "qwen3_moe", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
    "vocab_size": 256, "num_experts": 2, "num_experts_per_tok": 1,
    "moe_intermediate_size": 32, "decoder_sparse_step": 2, "head_dim": 16})");
  EXPECT_TRUE(g.findParam("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_TRUE(g.findParam("model.layers.1.mlp.gate.weight"));
  EXPECT_TRUE(g.findParam("model.layers.2.mlp.down_proj.weight"));
  EXPECT_TRUE(g.findParam("model.layers.3.mlp.experts.down_proj.1"));
  EXPECT_FALSE(g.findParam("model.layers.2.mlp.gate.weight"));
  // No intermediate_size needed when every layer is sparse.
  Graph all = load(R"({"model_type": "qwen3_moe", "hidden_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256,
    "num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 32})");
  EXPECT_TRUE(all.findParam("model.layers.0.mlp.experts.gate_up_proj.0.gate"));
}

TEST(HFConfig, TinyMixtral) {
  // transformers 5: the block is `mlp` (4.x: block_sparse_moe); router,
  // then experts: gate_up_proj [4, 256, 64] and down_proj [4, 64, 128].
  Graph g = loadExample("tiny-mixtral.json");
  Expected want = {
      {"model.layers.0.self_attn.q_proj.weight", {64, 64}},
      {"model.layers.0.self_attn.k_proj.weight", {32, 64}},
      {"model.layers.0.self_attn.v_proj.weight", {32, 64}},
      {"model.layers.0.self_attn.o_proj.weight", {64, 64}},
      {"model.layers.0.mlp.gate.weight", {4, 64}},
      {"model.layers.0.mlp.experts.gate_up_proj.0.gate", {128, 64}},
      {"model.layers.0.mlp.experts.gate_up_proj.0.up", {128, 64}},
      {"model.layers.0.mlp.experts.gate_up_proj.1.gate", {128, 64}},
      {"model.layers.0.mlp.experts.gate_up_proj.1.up", {128, 64}},
      {"model.layers.0.mlp.experts.gate_up_proj.2.gate", {128, 64}},
      {"model.layers.0.mlp.experts.gate_up_proj.2.up", {128, 64}},
      {"model.layers.0.mlp.experts.gate_up_proj.3.gate", {128, 64}},
      {"model.layers.0.mlp.experts.gate_up_proj.3.up", {128, 64}},
      {"model.layers.0.mlp.experts.down_proj.0", {64, 128}},
      {"model.layers.0.mlp.experts.down_proj.1", {64, 128}},
      {"model.layers.0.mlp.experts.down_proj.2", {64, 128}},
      {"model.layers.0.mlp.experts.down_proj.3", {64, 128}},
      {"model.layers.0.input_layernorm.weight", {64}},
      {"model.layers.0.post_attention_layernorm.weight", {64}}};
  expectSame(paramsWithPrefix(g, "model.layers.0."), want);
  expectSame(topLevel(g), kTinyTopUntied);
  EXPECT_EQ(g.findParam("model.layers.0.mlp.gate.weight")->kind,
            ModuleKind::Router);
  EXPECT_EQ(g.findParam("model.layers.1.mlp.experts.down_proj.3")->kind,
            ModuleKind::Expert);
  EXPECT_TRUE(paramsWithPrefix(g, "model.layers.0.block_sparse_moe").empty());
  expectValid(g);
}

TEST(HFConfig, TinyDeepseekV3) {
  // H 64, heads 4, q_lora 16, kv_lora 8, nope 8, rope 4 (qk_head_dim 12),
  // v_head 8, 4 routed experts + 1 shared (moe_inter 32), first layer dense.
  Graph g = loadExample("tiny-deepseek-v3.json");
  const Expected attn = {{"self_attn.q_a_proj.weight", {16, 64}},
                         {"self_attn.q_a_layernorm.weight", {16}},
                         {"self_attn.q_b_proj.weight", {48, 16}},
                         {"self_attn.kv_a_proj_with_mqa.weight", {12, 64}},
                         {"self_attn.kv_a_layernorm.weight", {8}},
                         {"self_attn.kv_b_proj.weight", {64, 8}},
                         {"self_attn.o_proj.weight", {64, 32}}};
  Expected l0 = withPrefix("model.layers.0.", attn);
  for (auto e : Expected{{"mlp.gate_proj.weight", {128, 64}},
                         {"mlp.up_proj.weight", {128, 64}},
                         {"mlp.down_proj.weight", {64, 128}},
                         {"input_layernorm.weight", {64}},
                         {"post_attention_layernorm.weight", {64}}})
    l0.emplace_back("model.layers.0." + e.first, e.second);
  expectSame(paramsWithPrefix(g, "model.layers.0."), l0);

  // DeepseekV3MoE registers experts (fused in transformers 5), then gate,
  // then shared_experts.
  expectSame(paramsWithPrefix(g, "model.layers.1."),
             {{"model.layers.1.self_attn.q_a_proj.weight", {16, 64}},
              {"model.layers.1.self_attn.q_a_layernorm.weight", {16}},
              {"model.layers.1.self_attn.q_b_proj.weight", {48, 16}},
              {"model.layers.1.self_attn.kv_a_proj_with_mqa.weight", {12, 64}},
              {"model.layers.1.self_attn.kv_a_layernorm.weight", {8}},
              {"model.layers.1.self_attn.kv_b_proj.weight", {64, 8}},
              {"model.layers.1.self_attn.o_proj.weight", {64, 32}},
              {"model.layers.1.mlp.experts.gate_up_proj.0.gate", {32, 64}},
              {"model.layers.1.mlp.experts.gate_up_proj.0.up", {32, 64}},
              {"model.layers.1.mlp.experts.gate_up_proj.1.gate", {32, 64}},
              {"model.layers.1.mlp.experts.gate_up_proj.1.up", {32, 64}},
              {"model.layers.1.mlp.experts.gate_up_proj.2.gate", {32, 64}},
              {"model.layers.1.mlp.experts.gate_up_proj.2.up", {32, 64}},
              {"model.layers.1.mlp.experts.gate_up_proj.3.gate", {32, 64}},
              {"model.layers.1.mlp.experts.gate_up_proj.3.up", {32, 64}},
              {"model.layers.1.mlp.experts.down_proj.0", {64, 32}},
              {"model.layers.1.mlp.experts.down_proj.1", {64, 32}},
              {"model.layers.1.mlp.experts.down_proj.2", {64, 32}},
              {"model.layers.1.mlp.experts.down_proj.3", {64, 32}},
              {"model.layers.1.mlp.gate.weight", {4, 64}},
              {"model.layers.1.mlp.shared_experts.gate_proj.weight", {32, 64}},
              {"model.layers.1.mlp.shared_experts.up_proj.weight", {32, 64}},
              {"model.layers.1.mlp.shared_experts.down_proj.weight", {64, 32}},
              {"model.layers.1.input_layernorm.weight", {64}},
              {"model.layers.1.post_attention_layernorm.weight", {64}}});
  expectSame(topLevel(g), kTinyTopUntied);
  EXPECT_FALSE(g.findParam("model.layers.1.mlp.gate.e_score_correction_bias"));
  EXPECT_EQ(g.findParam("model.layers.1.mlp.gate.weight")->kind,
            ModuleKind::Router);
  EXPECT_EQ(g.findParam("model.layers.1.mlp.gate.weight")->module,
            "model.layers.1.mlp.gate");
  EXPECT_EQ(
      g.findParam("model.layers.1.mlp.shared_experts.up_proj.weight")->kind,
      ModuleKind::Linear);
  EXPECT_EQ(g.findParam("model.layers.1.mlp.experts.gate_up_proj.0.up")->kind,
            ModuleKind::Expert);
  EXPECT_EQ(g.findParam("model.layers.0.self_attn.kv_a_layernorm.weight")->kind,
            ModuleKind::Norm);
  EXPECT_EQ(g.findParam("model.layers.0.self_attn.q_a_layernorm.weight")->kind,
            ModuleKind::Norm);
  expectValid(g);
}

TEST(HFConfig, DeepseekV3WithoutQLoraAndWithBias) {
  // q_lora_rank null: a plain q_proj. attention_bias: biases on q_a_proj
  // (absent here), kv_a_proj_with_mqa and o_proj only. Two shared experts
  // double the shared intermediate size; moe_layer_freq 2 makes layer 1
  // dense again.
  Graph g = load(R"({"model_type": "deepseek_v3", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
    "vocab_size": 256, "q_lora_rank": null, "kv_lora_rank": 8,
    "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
    "n_routed_experts": 2, "n_shared_experts": 2, "num_experts_per_tok": 1,
    "moe_intermediate_size": 32, "first_k_dense_replace": 0,
    "moe_layer_freq": 2, "attention_bias": true})");
  expectSame(paramsWithPrefix(g, "model.layers.0."),
             {{"model.layers.0.self_attn.q_proj.weight", {48, 64}},
              {"model.layers.0.self_attn.kv_a_proj_with_mqa.weight", {12, 64}},
              {"model.layers.0.self_attn.kv_a_proj_with_mqa.bias", {12}},
              {"model.layers.0.self_attn.kv_a_layernorm.weight", {8}},
              {"model.layers.0.self_attn.kv_b_proj.weight", {64, 8}},
              {"model.layers.0.self_attn.o_proj.weight", {64, 32}},
              {"model.layers.0.self_attn.o_proj.bias", {64}},
              {"model.layers.0.mlp.experts.gate_up_proj.0.gate", {32, 64}},
              {"model.layers.0.mlp.experts.gate_up_proj.0.up", {32, 64}},
              {"model.layers.0.mlp.experts.gate_up_proj.1.gate", {32, 64}},
              {"model.layers.0.mlp.experts.gate_up_proj.1.up", {32, 64}},
              {"model.layers.0.mlp.experts.down_proj.0", {64, 32}},
              {"model.layers.0.mlp.experts.down_proj.1", {64, 32}},
              {"model.layers.0.mlp.gate.weight", {2, 64}},
              {"model.layers.0.mlp.shared_experts.gate_proj.weight", {64, 64}},
              {"model.layers.0.mlp.shared_experts.up_proj.weight", {64, 64}},
              {"model.layers.0.mlp.shared_experts.down_proj.weight", {64, 64}},
              {"model.layers.0.input_layernorm.weight", {64}},
              {"model.layers.0.post_attention_layernorm.weight", {64}}});
  EXPECT_TRUE(g.findParam("model.layers.1.mlp.gate_proj.weight"));
  EXPECT_TRUE(g.findParam("model.layers.2.mlp.gate.weight"));
  // q_a_proj gets the bias too when q_lora_rank is set.
  Graph q = load(R"({"model_type": "deepseek_v3", "hidden_size": 64,
    "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 256,
    "q_lora_rank": 16, "kv_lora_rank": 8, "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 4, "v_head_dim": 8, "n_routed_experts": 2,
    "n_shared_experts": 0, "num_experts_per_tok": 1,
    "moe_intermediate_size": 32, "first_k_dense_replace": 0,
    "attention_bias": true})");
  expectSame(paramsWithPrefix(q, "model.layers.0.self_attn.q_"),
             {{"model.layers.0.self_attn.q_a_proj.weight", {16, 64}},
              {"model.layers.0.self_attn.q_a_proj.bias", {16}},
              {"model.layers.0.self_attn.q_a_layernorm.weight", {16}},
              {"model.layers.0.self_attn.q_b_proj.weight", {48, 16}}});
  // n_shared_experts 0: no shared expert at all.
  EXPECT_TRUE(paramsWithPrefix(q, "model.layers.0.mlp.shared_experts").empty());
}

//===----------------------------------------------------------------------===//
// transformers 4.x names (transformersVersion = 4)
//===----------------------------------------------------------------------===//

HFImportOptions transformers4() {
  HFImportOptions o;
  o.transformersVersion = 4;
  return o;
}

TEST(HFConfig, Transformers4Qwen3Moe) {
  // Qwen3MoeSparseMoeBlock of 4.x: gate, then experts.{j}.{gate,up,down}_proj.
  Graph g = loadExample("tiny-qwen3-moe.json", transformers4());
  Expected want = {{"model.layers.1.mlp.gate.weight", {4, 64}}};
  for (int j = 0; j < 4; ++j) {
    const std::string e = "model.layers.1.mlp.experts." + std::to_string(j);
    want.push_back({e + ".gate_proj.weight", {32, 64}});
    want.push_back({e + ".up_proj.weight", {32, 64}});
    want.push_back({e + ".down_proj.weight", {64, 32}});
  }
  expectSame(paramsWithPrefix(g, "model.layers.1.mlp."), want);
  EXPECT_EQ(g.findParam("model.layers.1.mlp.experts.2.up_proj.weight")->module,
            "model.layers.1.mlp.experts.2.up_proj");
  EXPECT_EQ(g.findParam("model.layers.1.mlp.experts.2.up_proj.weight")->kind,
            ModuleKind::Expert);
  expectValid(g);
}

TEST(HFConfig, Transformers4Mixtral) {
  // MixtralSparseMoeBlock of 4.x: block_sparse_moe.gate, then each expert's
  // w1 [I, H], w2 [H, I], w3 [I, H].
  Graph g = loadExample("tiny-mixtral.json", transformers4());
  Expected want = {{"model.layers.0.block_sparse_moe.gate.weight", {4, 64}}};
  for (int j = 0; j < 4; ++j) {
    const std::string e =
        "model.layers.0.block_sparse_moe.experts." + std::to_string(j);
    want.push_back({e + ".w1.weight", {128, 64}});
    want.push_back({e + ".w2.weight", {64, 128}});
    want.push_back({e + ".w3.weight", {128, 64}});
  }
  expectSame(paramsWithPrefix(g, "model.layers.0.block_sparse_moe."), want);
  EXPECT_TRUE(paramsWithPrefix(g, "model.layers.0.mlp").empty());
  EXPECT_EQ(
      g.findParam("model.layers.1.block_sparse_moe.experts.3.w2.weight")->kind,
      ModuleKind::Expert);
  expectValid(g);
}

TEST(HFConfig, Transformers4DeepseekV3) {
  // DeepseekV3MoE of 4.x: experts.{j}.{gate,up,down}_proj, gate, shared.
  Graph g = loadExample("tiny-deepseek-v3.json", transformers4());
  Expected want;
  for (int j = 0; j < 4; ++j) {
    const std::string e = "model.layers.1.mlp.experts." + std::to_string(j);
    want.push_back({e + ".gate_proj.weight", {32, 64}});
    want.push_back({e + ".up_proj.weight", {32, 64}});
    want.push_back({e + ".down_proj.weight", {64, 32}});
  }
  want.push_back({"model.layers.1.mlp.gate.weight", {4, 64}});
  want.push_back(
      {"model.layers.1.mlp.shared_experts.gate_proj.weight", {32, 64}});
  want.push_back(
      {"model.layers.1.mlp.shared_experts.up_proj.weight", {32, 64}});
  want.push_back(
      {"model.layers.1.mlp.shared_experts.down_proj.weight", {64, 32}});
  expectSame(paramsWithPrefix(g, "model.layers.1.mlp."), want);
  expectValid(g);
}

/// Elements and bytes of one unit (tied parameters are in no unit).
struct UnitSize {
  int64_t elements = 0, bytes = 0;
  std::multiset<Shape> shapes;
  bool operator==(const UnitSize &o) const {
    return elements == o.elements && bytes == o.bytes && shapes == o.shapes;
  }
};

std::map<std::string, UnitSize> unitSizes(const Graph &g) {
  std::map<std::string_view, const Param *> byName;
  for (const auto &p : g.params)
    byName[p.name] = &p;
  std::map<std::string, UnitSize> out;
  for (const auto &u : g.units) {
    UnitSize &s = out[u.name];
    for (const auto &n : u.params) {
      const Param *p = byName.at(n);
      s.elements += p->numElements();
      s.bytes += p->numElements() * dtypeBytes(p->dtype);
      s.shapes.insert(p->shape);
    }
  }
  return out;
}

TEST(HFConfig, BothLayoutsHoldTheSameMatricesForEveryExample) {
  // transformers 5 only renames and reorders the routed experts' matrices:
  // for every bundled config, the same tensors, elements and bytes, unit by
  // unit, the same costs, and the same ownership.
  int configs = 0;
  for (const auto &entry : std::filesystem::directory_iterator(examplesDir())) {
    if (entry.path().extension() != ".json")
      continue;
    const std::string file = entry.path().filename().string();
    HFImportOptions four = transformers4(), five;
    four.expertsOwnedBy = five.expertsOwnedBy = "ep";
    Graph g4 = loadExample(file, four), g5 = loadExample(file, five);
    EXPECT_EQ(g4.params.size(), g5.params.size()) << file;
    EXPECT_EQ(totalParams(g4), totalParams(g5)) << file;
    EXPECT_TRUE(unitSizes(g4) == unitSizes(g5)) << file;
    ASSERT_EQ(g4.units.size(), g5.units.size()) << file;
    for (size_t i = 0; i < g4.units.size(); ++i) {
      EXPECT_EQ(g4.units[i].name, g5.units[i].name) << file;
      EXPECT_TRUE(g4.units[i].cost == g5.units[i].cost)
          << file << " " << g4.units[i].name;
    }
    size_t owned4 = 0, owned5 = 0;
    for (const auto &p : g4.params)
      owned4 += !p.ownedBy.empty();
    for (const auto &p : g5.params)
      owned5 += !p.ownedBy.empty();
    EXPECT_EQ(owned4, owned5) << file;
    expectValid(g5);
    ++configs;
  }
  EXPECT_EQ(configs, 16);
}

//===----------------------------------------------------------------------===//
// Real models: parameter totals
//===----------------------------------------------------------------------===//

TEST(HFConfig, Llama3_8BTotal) {
  // Per layer: attn 4096*4096*2 + 1024*4096*2 = 41,943,040;
  // mlp 3*14336*4096 = 176,160,768; norms 8,192 -> 218,112,000.
  // 32 layers = 6,979,584,000; embed + lm_head 2*128256*4096 = 1,050,673,152;
  // final norm 4,096. Total 8,030,261,248 (the published count).
  Graph g = loadExample("llama-3-8b.json");
  EXPECT_EQ(totalParams(g), 8'030'261'248);
  EXPECT_EQ(g.model, "meta-llama/Meta-Llama-3-8B");
  EXPECT_EQ(g.units.size(), 34u);
  EXPECT_EQ(g.params.size(), 32u * 9u + 3u);
  expectValid(g);
}

TEST(HFConfig, Mistral7BTotal) {
  // Same layers as Llama-3-8B (218,112,000 each, 32 of them) with a 32000
  // vocabulary: 6,979,584,000 + 2*32000*4096 + 4096 = 7,241,732,096.
  Graph g = loadExample("mistral-7b.json");
  EXPECT_EQ(totalParams(g), 7'241'732'096);
  expectValid(g);
}

TEST(HFConfig, Mixtral8x7BTotal) {
  // Per layer: attn 41,943,040; 8 experts * 3*14336*4096 = 1,409,286,144;
  // router 8*4096 = 32,768; norms 8,192 -> 1,451,270,144; * 32 =
  // 46,440,644,608; + 2*32000*4096 + 4096 = 46,702,792,704 (published).
  Graph g = loadExample("mixtral-8x7b.json");
  EXPECT_EQ(totalParams(g), 46'702'792'704);
  expectValid(g);
}

TEST(HFConfig, Qwen2_5_0_5BTotal) {
  // hd 64. Per layer: q 896*896+896, k/v 128*896+128 each, o 896*896 ->
  // 1,836,160; mlp 3*4864*896 = 13,074,432; norms 1,792 -> 14,912,384;
  // * 24 = 357,897,216; embed 151936*896 = 136,134,656 (tied: once);
  // norm 896. Total 494,032,768 (published "0.49B", 494M).
  Graph g = loadExample("qwen2-0.5b.json");
  EXPECT_EQ(totalParams(g), 494'032'768);
  EXPECT_EQ(g.findParam("lm_head.weight")->tiedTo, "model.embed_tokens.weight");
  expectValid(g);
}

TEST(HFConfig, Qwen3_0_6BTotal) {
  // hd 128. Per layer: q 2048*1024, k/v 1024*1024 each, o 1024*2048 ->
  // 6,291,456; q/k norm 256; mlp 3*3072*1024 = 9,437,184; norms 2,048 ->
  // 15,730,944; * 28 = 440,466,432; embed 151936*1024 = 155,582,464 (tied);
  // norm 1,024. Total 596,049,920 (published, tied counted once).
  Graph g = loadExample("qwen3-0.6b.json");
  EXPECT_EQ(totalParams(g), 596'049'920);
  expectValid(g);
}

TEST(HFConfig, Qwen3_30B_A3BTotal) {
  // hd 128. Per layer: q 4096*2048, k/v 512*2048 each, o 2048*4096 ->
  // 18,874,368; q/k norm 256; 128 experts * 3*768*2048 = 603,979,776;
  // router 128*2048 = 262,144; norms 4,096 -> 623,120,640; * 48 =
  // 29,909,790,720; embed + lm_head 2*151936*2048 = 622,329,856; norm 2,048.
  // Total 30,532,122,624 (published "30.5B").
  Graph g = loadExample("qwen3-30b-a3b.json");
  EXPECT_EQ(totalParams(g), 30'532'122'624);
  EXPECT_EQ(paramsWithPrefix(g, "model.layers.47.mlp.experts.").size(),
            128u * 3u);
  expectValid(g);
}

TEST(HFConfig, DeepseekV3Total) {
  // MLA attention per layer: q_a 1536*7168 = 11,010,048; q_a_ln 1,536;
  // q_b 128*192*1536 = 37,748,736; kv_a 576*7168 = 4,128,768; kv_a_ln 512;
  // kv_b 128*256*512 = 16,777,216; o 7168*16384 = 117,440,512
  // -> 187,107,328; layer norms 14,336.
  // Dense layer (3): + 3*18432*7168 = 396,361,728 -> 583,483,392 each.
  // MoE layer (58): + 256*3*2048*7168 = 11,274,289,152 routed, router
  // 256*7168 = 1,835,008, shared 3*2048*7168 = 44,040,192 ->
  // 11,507,286,016 each.
  // 3*583,483,392 + 58*11,507,286,016 = 669,173,039,104; embed + lm_head
  // 2*129280*7168 = 1,853,358,080; norm 7,168. Total 671,026,404,352.
  // The published 671,026,419,200 (without the MTP layer) also counts the
  // 58 * 256 = 14,848 elements of e_score_correction_bias, a buffer that
  // named_parameters() does not list.
  Graph g = loadExample("deepseek-v3.json");
  EXPECT_EQ(totalParams(g), 671'026'404'352);
  EXPECT_EQ(totalParams(g) + 58 * 256, 671'026'419'200);
  EXPECT_TRUE(g.findParam("model.layers.2.mlp.down_proj.weight"));
  EXPECT_TRUE(g.findParam("model.layers.3.mlp.experts.down_proj.255"));
  EXPECT_FALSE(g.findParam("model.layers.61.input_layernorm.weight"));
  expectValid(g);
}

//===----------------------------------------------------------------------===//
// Options: ownership, dtype, costs
//===----------------------------------------------------------------------===//

TEST(HFConfig, ExpertParallelOwnershipMarksRoutedExpertsOnly) {
  HFImportOptions o;
  o.expertsOwnedBy = "ep";
  for (const char *file :
       {"tiny-mixtral.json", "tiny-qwen3-moe.json", "tiny-deepseek-v3.json"}) {
    Graph g = loadExample(file, o);
    size_t owned = 0;
    for (const auto &p : g.params) {
      bool routed = p.name.find(".experts.") != std::string::npos;
      if (routed) {
        EXPECT_EQ(p.ownedBy, std::vector<std::string>{"ep"}) << p.name;
        EXPECT_EQ(p.kind, ModuleKind::Expert) << p.name;
        ++owned;
      } else {
        EXPECT_TRUE(p.ownedBy.empty()) << p.name;
        EXPECT_NE(p.kind, ModuleKind::Expert) << p.name;
      }
    }
    EXPECT_EQ(owned, std::string(file) == "tiny-mixtral.json" ? 2u * 4u * 3u
                                                              : 1u * 4u * 3u)
        << file;
  }
  // Without the option nothing is owned.
  Graph g = loadExample("tiny-mixtral.json");
  for (const auto &p : g.params)
    EXPECT_TRUE(p.ownedBy.empty()) << p.name;
}

TEST(HFConfig, DTypeAndModelName) {
  HFImportOptions o;
  o.dtype = "f32";
  o.modelName = "mine";
  Graph g = loadExample("tiny-llama.json", o);
  EXPECT_EQ(g.model, "mine");
  for (const auto &p : g.params)
    EXPECT_EQ(p.dtype, DType::F32) << p.name;
  Graph h = load(R"({"model_type": "mistral", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
    "num_key_value_heads": 4, "vocab_size": 256, "torch_dtype": "float16"})");
  EXPECT_EQ(h.findParam("lm_head.weight")->dtype, DType::F16);
}

TEST(HFConfig, UnitCosts) {
  HFImportOptions o;
  o.seqLen = 1024;
  Graph g = loadExample("tiny-llama.json", o);
  EXPECT_EQ(g.seqLen, 1024);
  // Layer matmul weights: 64*64 + 2*32*64 + 64*64 + 3*128*64 = 36,864.
  // fwd = 2*36864 + 2*1024*4*(16+16)*0.5 = 73,728 + 131,072 = 204,800.
  // activation = 16*64 + 2*(64 + 32 + 32) + 4*64 + 4*4 + 8*128 = 2,576
  // bytes (the eager modules' saved tensors).
  const Unit *l0 = findUnit(g, "model.layers.0");
  ASSERT_TRUE(l0);
  EXPECT_DOUBLE_EQ(l0->cost.fwdFlopsPerToken, 204800.0);
  EXPECT_DOUBLE_EQ(l0->cost.bwdFlopsPerToken, 409600.0);
  EXPECT_DOUBLE_EQ(l0->cost.activationBytesPerToken, 2576.0);
  EXPECT_FALSE(l0->cost.recompute);
  const Unit *embed = findUnit(g, "model.embed_tokens");
  EXPECT_DOUBLE_EQ(embed->cost.fwdFlopsPerToken, 0.0);
  EXPECT_DOUBLE_EQ(embed->cost.activationBytesPerToken, 0.0);
  const Unit *head = findUnit(g, "lm_head");
  EXPECT_DOUBLE_EQ(head->cost.fwdFlopsPerToken, 2.0 * 256 * 64);
  EXPECT_DOUBLE_EQ(head->cost.bwdFlopsPerToken, 4.0 * 256 * 64);
  EXPECT_DOUBLE_EQ(head->cost.activationBytesPerToken, 8.0 * 64 + 12.0 * 256);

  // MoE: router + top-2 of 4 experts. Mixtral layer weights:
  // attn 12,288 + router 4*64 = 256 + 2 * 3*128*64 = 49,152 -> 61,696.
  Graph m = loadExample("tiny-mixtral.json", o);
  const Unit *ml = findUnit(m, "model.layers.1");
  EXPECT_DOUBLE_EQ(ml->cost.fwdFlopsPerToken, 2.0 * 61696 + 131072.0);
  EXPECT_DOUBLE_EQ(ml->cost.activationBytesPerToken,
                   16.0 * 64 + 2 * (64 + 32 + 32) + 4 * 64 + 4 * 4 + 8 * (2 * 128));

  // DeepSeek MoE layer: attention weights 16*64 + 48*16 + 12*64 + 64*8 +
  // 64*32 = 5,120; 2 routed experts 2*3*32*64 = 12,288; router 256; shared
  // 3*32*64 = 6,144 -> 23,808. Scores: 2*1024*4*(12+8)*0.5 = 81,920.
  // Activation: 16*64 + 2*(4*12 + 4*12 + 4*8) + 4*(4*8) + 4*4 +
  // 8*(2*32 + 32) = 1,024 + 256 + 128 + 16 + 768 = 2,192.
  Graph d = loadExample("tiny-deepseek-v3.json", o);
  const Unit *dl = findUnit(d, "model.layers.1");
  EXPECT_DOUBLE_EQ(dl->cost.fwdFlopsPerToken, 2.0 * 23808 + 81920.0);
  EXPECT_DOUBLE_EQ(dl->cost.activationBytesPerToken, 2192.0);

  o.recompute = true;
  Graph r = loadExample("tiny-llama.json", o);
  const Unit *rl = findUnit(r, "model.layers.1");
  EXPECT_TRUE(rl->cost.recompute);
  EXPECT_DOUBLE_EQ(rl->cost.activationBytesPerToken, 128.0);
  EXPECT_DOUBLE_EQ(rl->cost.fwdFlopsPerToken, 204800.0);
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

struct ErrorCase {
  const char *text;
  const char *pointer;
  const char *message; // a part of the expected message
};

const char *kBase = R"("hidden_size": 64, "intermediate_size": 128,
  "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256)";

std::string llamaWith(const std::string &extra) {
  return std::string("{\"model_type\": \"llama\", ") + kBase +
         (extra.empty() ? "" : ", " + extra) + "}";
}

void expectError(const std::string &text, const std::string &pointer,
                 const std::string &part, HFImportOptions opts = {}) {
  Graph g;
  g.model = "untouched";
  Diagnostic d;
  EXPECT_FALSE(graphFromHFConfig(text, opts, g, d)) << text;
  EXPECT_EQ(d.pointer, pointer) << text << "\n" << d.message;
  EXPECT_NE(d.message.find(part), std::string::npos)
      << "message '" << d.message << "' lacks '" << part << "'";
  EXPECT_EQ(g.model, "untouched") << "output graph written on failure";
}

TEST(HFConfig, KeyValueHeadsDefaultToTheConfigClass) {
  // Without num_key_value_heads transformers uses the config class's default
  // (Mistral/Mixtral 8, Qwen2/Qwen3 32, Qwen3-MoE 4, Llama the heads); null
  // means num_attention_heads. 64 heads of 16: k_proj is kv * 16 rows.
  struct Case {
    const char *type;
    int64_t kv;
  } cases[] = {{"llama", 64}, {"mistral", 8}, {"mixtral", 8},
               {"qwen2", 32}, {"qwen3", 32},  {"qwen3_moe", 4}};
  for (const auto &c : cases) {
    std::string body = std::string(R"({"model_type": ")") + c.type +
                       R"(", "hidden_size": 1024, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 64, "head_dim": 16,
      "vocab_size": 256, "num_local_experts": 2, "num_experts": 2,
      "num_experts_per_tok": 1, "moe_intermediate_size": 32)";
    Graph g = load(body + "}");
    const Param *k = g.findParam("model.layers.0.self_attn.k_proj.weight");
    ASSERT_TRUE(k) << c.type;
    EXPECT_EQ(k->shape, (Shape{c.kv * 16, 1024})) << c.type;
    Graph n = load(body + R"(, "num_key_value_heads": null})");
    EXPECT_EQ(n.findParam("model.layers.0.self_attn.k_proj.weight")->shape,
              (Shape{64 * 16, 1024}))
        << c.type << " with null";
  }
  // A default that does not divide the heads says where it came from.
  expectError(R"({"model_type": "qwen2", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "vocab_size": 256})",
              "/num_key_value_heads",
              "missing, so Qwen2Config's default 32, which does not divide "
              "num_attention_heads (4)");
  // MLA has no key/value heads: DeepseekV3Config's default 128 is harmless.
  Graph d = load(R"({"model_type": "deepseek_v3", "hidden_size": 64,
    "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 256,
    "q_lora_rank": 16, "kv_lora_rank": 8, "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 4, "v_head_dim": 8, "n_routed_experts": 2,
    "n_shared_experts": 0, "num_experts_per_tok": 1,
    "moe_intermediate_size": 32, "first_k_dense_replace": 0})");
  EXPECT_EQ(d.findParam("model.layers.0.self_attn.kv_b_proj.weight")->shape,
            (Shape{4 * (8 + 8), 8}));
}

TEST(HFConfig, ErrorInvalidJson) {
  expectError("{\"model_type\": \"llama\",", "", "parse error");
  expectError("", "", "parse error");
  Graph g;
  Diagnostic d;
  EXPECT_FALSE(graphFromHFConfig("{\n  \"a\": 1,\n  x\n}", {}, g, d));
  EXPECT_EQ(d.line, 3);
  EXPECT_EQ(d.column, 3);
}

TEST(HFConfig, ErrorHasLineAndColumn) {
  Graph g;
  Diagnostic d;
  EXPECT_FALSE(graphFromHFConfig("{\n  \"model_type\": \"llama\",\n"
                                 "  \"hidden_size\": -3\n}",
                                 {}, g, d));
  EXPECT_EQ(d.pointer, "/hidden_size");
  EXPECT_EQ(d.line, 3);
  EXPECT_GT(d.column, 1);
}

TEST(HFConfig, ErrorTopLevelNotObject) {
  expectError("[1, 2]", "", "expected a JSON object");
}

TEST(HFConfig, ErrorMissingField) {
  expectError(R"({"model_type": "llama", "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256})",
              "/hidden_size", "missing required field 'hidden_size'");
  expectError(R"({"hidden_size": 64})", "/model_type",
              "missing required field 'model_type'");
  expectError(R"({"model_type": "llama", "hidden_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256})",
              "/intermediate_size", "missing required field");
}

TEST(HFConfig, ErrorNonPositive) {
  expectError(R"({"model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": -3, "vocab_size": 256})",
              "/num_attention_heads", "expected a positive integer, got -3");
  expectError(R"({"model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 0,
    "num_attention_heads": 4, "vocab_size": 256})",
              "/num_hidden_layers", "expected a positive integer, got 0");
}

TEST(HFConfig, ErrorWrongType) {
  expectError(R"({"model_type": "llama", "hidden_size": "64",
    "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "vocab_size": 256})",
              "/hidden_size", "expected a positive integer, got \"64\"");
  expectError(R"({"model_type": "llama", "hidden_size": 64.5,
    "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "vocab_size": 256})",
              "/hidden_size", "expected a positive integer, got 64.5");
  expectError(llamaWith(R"("tie_word_embeddings": "yes")"),
              "/tie_word_embeddings", "expected true or false");
  expectError(R"({"model_type": 7})", "/model_type", "expected a string");
  expectError(llamaWith(R"("architectures": "LlamaForCausalLM")"),
              "/architectures", "expected an array");
  expectError(llamaWith(R"("torch_dtype": "int4")"), "/torch_dtype",
              "unsupported torch_dtype 'int4'");
}

TEST(HFConfig, ErrorUnknownModelType) {
  expectError(
      R"({"model_type": "gpt2", "n_embd": 768})", "/model_type",
      "unsupported model_type 'gpt2'; supported: llama, mistral, qwen2, "
      "qwen3, qwen3_moe, mixtral, deepseek_v3");
}

TEST(HFConfig, ErrorHiddenNotDivisibleByHeads) {
  expectError(R"({"model_type": "mistral", "hidden_size": 66,
    "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256})",
              "/hidden_size", "not divisible by num_attention_heads 4");
  // An explicit head_dim makes it fine.
  Graph g = load(R"({"model_type": "mistral", "hidden_size": 66,
    "intermediate_size": 128, "num_hidden_layers": 1,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
    "head_dim": 16})");
  EXPECT_EQ(g.findParam("model.layers.0.self_attn.o_proj.weight")->shape,
            (Shape{66, 64}));
}

TEST(HFConfig, ErrorHeadsNotDivisibleByKvHeads) {
  expectError(llamaWith(R"("num_key_value_heads": 3)"), "/num_key_value_heads",
              "expected a divisor of num_attention_heads (4), got 3");
}

TEST(HFConfig, ErrorTooManyExpertsPerToken) {
  expectError(R"({"model_type": "mixtral", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 256,
    "num_local_experts": 4, "num_experts_per_tok": 5})",
              "/num_experts_per_tok",
              "expected at most num_local_experts (4), got 5");
  expectError(R"({"model_type": "qwen3_moe", "hidden_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256,
    "num_experts": 2, "num_experts_per_tok": 3, "moe_intermediate_size": 8})",
              "/num_experts_per_tok",
              "expected at most num_experts (2), got 3");
}

TEST(HFConfig, ErrorArchSpecificFields) {
  expectError(R"({"model_type": "deepseek_v3", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "vocab_size": 256, "q_lora_rank": 16, "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 4, "v_head_dim": 8, "n_routed_experts": 4,
    "n_shared_experts": 1, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "first_k_dense_replace": 1})",
              "/kv_lora_rank", "missing required field 'kv_lora_rank'");
  expectError(R"({"model_type": "mixtral", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 256,
    "num_experts_per_tok": 2})",
              "/num_local_experts", "missing required field");
  expectError(R"({"model_type": "qwen3_moe", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "vocab_size": 256, "num_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "mlp_only_layers": [0, 7]})",
              "/mlp_only_layers/1", "below num_hidden_layers (2), got 7");
  expectError(R"({"model_type": "deepseek_v3", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "vocab_size": 256, "q_lora_rank": "16", "kv_lora_rank": 8,
    "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
    "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "first_k_dense_replace": 1})",
              "/q_lora_rank", "expected a positive integer or null");
}

TEST(HFConfig, ErrorTooLarge) {
  expectError(llamaWith(R"("num_key_value_heads": 99999999999)"),
              "/num_key_value_heads", "at most 2147483647");
  expectError(R"({"model_type": "mixtral", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2000000,
    "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 256,
    "num_local_experts": 64, "num_experts_per_tok": 2})",
              "/num_hidden_layers", "parameter tensors");
}

TEST(HFConfig, ErrorOptions) {
  HFImportOptions o;
  o.dtype = "int8";
  expectError(readExample("tiny-llama.json"), "",
              "unsupported dtype option 'int8'", o);
  HFImportOptions s;
  s.seqLen = 0;
  expectError(readExample("tiny-llama.json"), "", "sequence length", s);
  HFImportOptions v;
  v.transformersVersion = 3;
  expectError(readExample("tiny-llama.json"), "",
              "unsupported transformers version option 3; expected 4 or 5", v);
}

TEST(HFConfig, NoExceptionEscapesOnTruncatedOrMutatedInput) {
  // Every prefix of a valid config, and every single-character mutation of
  // its first 300 bytes, must come back as true/false without throwing.
  std::string text = readExample("tiny-deepseek-v3.json");
  for (size_t n = 0; n < text.size(); ++n) {
    Graph g;
    Diagnostic d;
    bool ok = graphFromHFConfig(std::string_view(text).substr(0, n), {}, g, d);
    EXPECT_FALSE(ok && n + 2 < text.size()) << n;
  }
  const char repl[] = {'-', '0', '"', '{', 'x', '\xff', '9'};
  for (size_t i = 0; i < std::min<size_t>(text.size(), 300); ++i)
    for (char c : repl) {
      std::string t = text;
      t[i] = c;
      Graph g;
      Diagnostic d;
      graphFromHFConfig(t, {}, g, d);
    }
  SUCCEED();
}

//===----------------------------------------------------------------------===//
// generateGraph
//===----------------------------------------------------------------------===//

TEST(Generate, HFArchsMatchTheirConfig) {
  for (const auto &arch : supportedHFArchitectures()) {
    GenSpec s;
    s.arch = arch;
    s.kvHeads = 2;
    bool moe =
        arch == "mixtral" || arch == "qwen3_moe" || arch == "deepseek_v3";
    if (moe) {
      s.experts = 4;
      s.moeIntermediate = arch == "mixtral" ? 0 : 32;
    }
    if (arch == "deepseek_v3") {
      s.sharedExperts = 1;
      s.denseLayers = 1;
    }
    s.expertsOwnedBy = moe ? "ep" : "";
    for (int version : {5, 4}) {
      s.transformers = version;
      Graph g;
      Diagnostic d;
      ASSERT_TRUE(generateGraph(s, g, d))
          << arch << ": " << d.pointer << " " << d.message;
      std::string cfg = generatedHFConfig(s);
      ASSERT_FALSE(cfg.empty()) << arch;
      HFImportOptions o;
      o.expertsOwnedBy = s.expertsOwnedBy;
      o.transformersVersion = version;
      Graph h = load(cfg, o);
      EXPECT_TRUE(g == h) << arch << " " << version;
      EXPECT_EQ(g.model, arch);
      EXPECT_EQ(g.units.size(), 4u) << arch;
      expectValid(g);
    }
  }
}

TEST(Generate, DeepseekRanks) {
  // hidden 64, heads 4: hd 16 -> rope 8, nope 8, v 16; q_lora 16, kv_lora 8.
  GenSpec s;
  s.arch = "deepseek_v3";
  s.experts = 2;
  s.topK = 1;
  s.layers = 1;
  Graph g;
  Diagnostic d;
  ASSERT_TRUE(generateGraph(s, g, d)) << d.message;
  expectSame(paramsWithPrefix(g, "model.layers.0.self_attn."),
             {{"model.layers.0.self_attn.q_a_proj.weight", {16, 64}},
              {"model.layers.0.self_attn.q_a_layernorm.weight", {16}},
              {"model.layers.0.self_attn.q_b_proj.weight", {64, 16}},
              {"model.layers.0.self_attn.kv_a_proj_with_mqa.weight", {16, 64}},
              {"model.layers.0.self_attn.kv_a_layernorm.weight", {8}},
              {"model.layers.0.self_attn.kv_b_proj.weight", {96, 8}},
              {"model.layers.0.self_attn.o_proj.weight", {64, 64}}});
}

TEST(Generate, GptBench) {
  GenSpec s;
  s.arch = "gpt_bench";
  s.layers = 2;
  s.hidden = 64;
  s.heads = 4;
  s.intermediate = 256;
  s.vocab = 100;
  s.seqLen = 512;
  s.name = "bench";
  Graph g;
  Diagnostic d;
  ASSERT_TRUE(generateGraph(s, g, d)) << d.message;
  EXPECT_EQ(g.model, "bench");
  EXPECT_EQ(g.seqLen, 512);
  expectSame(paramsWithPrefix(g, "layers.1."),
             {{"layers.1.norm1.weight", {64}},
              {"layers.1.norm1.bias", {64}},
              {"layers.1.attn.q_proj.weight", {64, 64}},
              {"layers.1.attn.k_proj.weight", {64, 64}},
              {"layers.1.attn.v_proj.weight", {64, 64}},
              {"layers.1.attn.o_proj.weight", {64, 64}},
              {"layers.1.norm2.weight", {64}},
              {"layers.1.norm2.bias", {64}},
              {"layers.1.mlp.up_proj.weight", {256, 64}},
              {"layers.1.mlp.down_proj.weight", {64, 256}}});
  EXPECT_EQ(g.params.front().name, "embed.weight");
  EXPECT_EQ(g.params.front().shape, (Shape{100, 64}));
  EXPECT_EQ(g.params.back().name, "head.weight");
  EXPECT_EQ(g.params.back().kind, ModuleKind::Output);
  ASSERT_EQ(g.units.size(), 4u);
  EXPECT_EQ(g.units[0].name, "embed");
  EXPECT_EQ(g.units[1].name, "layers.0");
  EXPECT_EQ(g.units[3].name, "head");
  EXPECT_EQ(g.findParam("layers.0.norm1.bias")->kind, ModuleKind::Norm);
  EXPECT_EQ(g.findParam("layers.0.norm1.bias")->module, "layers.0.norm1");
  // fwd = 2*(4*64*64 + 2*256*64) + 2*512*4*(16+16)*0.5 = 98,304 + 65,536.
  EXPECT_DOUBLE_EQ(g.units[1].cost.fwdFlopsPerToken, 163840.0);
  EXPECT_DOUBLE_EQ(g.units[1].cost.bwdFlopsPerToken, 327680.0);
  EXPECT_DOUBLE_EQ(g.units[1].cost.activationBytesPerToken,
                   2.0 * (9 * 64 + 4 * 256));
  expectValid(g);

  // Without a vocabulary: layers only.
  s.vocab = 0;
  ASSERT_TRUE(generateGraph(s, g, d)) << d.message;
  EXPECT_EQ(g.units.size(), 2u);
  EXPECT_EQ(g.params.size(), 20u);
  expectValid(g);
}

TEST(Generate, Errors) {
  auto expectBad = [](GenSpec s, const std::string &pointer,
                      const std::string &part) {
    Graph g;
    Diagnostic d;
    EXPECT_FALSE(generateGraph(s, g, d));
    EXPECT_EQ(d.pointer, pointer) << d.message;
    EXPECT_NE(d.message.find(part), std::string::npos) << d.message;
  };
  GenSpec s;
  s.arch = "gpt2";
  expectBad(s, "/arch", "unsupported arch 'gpt2'");
  s = GenSpec{};
  s.heads = -1;
  expectBad(s, "/heads", "expected a positive integer, got -1");
  s = GenSpec{};
  s.hidden = 65;
  expectBad(s, "/hidden", "multiple of heads");
  s = GenSpec{};
  s.kvHeads = 3;
  expectBad(s, "/kvHeads", "divisor of heads");
  s = GenSpec{};
  s.arch = "mixtral";
  expectBad(s, "/experts", "expected experts > 0");
  s.experts = 4;
  s.topK = 5;
  expectBad(s, "/topK", "[1, experts = 4]");
  s = GenSpec{};
  s.experts = 4;
  expectBad(s, "/experts", "llama has no experts");
  s = GenSpec{};
  s.dtype = "int3";
  expectBad(s, "/dtype", "unsupported dtype 'int3'");
  s = GenSpec{};
  s.arch = "gpt_bench";
  s.tie = true;
  expectBad(s, "/tie", "gpt_bench");
  s = GenSpec{};
  s.seqLen = 0;
  expectBad(s, "/seqLen", "positive");
  s = GenSpec{};
  s.transformers = 6;
  expectBad(s, "/transformers", "expected 4 or 5, got 6");
  s = GenSpec{};
  s.arch = "mixtral";
  s.experts = 65536;
  s.layers = 1000;
  expectBad(s, "/layers", "parameter tensors");
}

} // namespace

//===- Generate.cpp - Synthetic model graphs from a few sizes -------------===//
//
// Hugging Face architectures: the spec is turned into the config.json of that
// model_type and imported with graphFromHFConfig(), so a generated graph is
// exactly the graph of that config. Choices made for the generated configs:
//
//   all:          head_dim = hidden / heads (written explicitly, so qwen3's
//                 default of 128 never applies), num_key_value_heads =
//                 kvHeads (or heads), tie_word_embeddings = tie,
//                 torch_dtype from dtype. Imported with the parameter names
//                 of transformers `transformers` (5: fused experts written
//                 as their matrices; 4: one module per expert).
//   mixtral:      num_local_experts = experts, experts use intermediate
//                 (moeIntermediate must be 0 or equal to it), no shared
//                 experts, no dense layers.
//   qwen3_moe:    num_experts = experts, moe_intermediate_size =
//                 moeIntermediate (or intermediate), decoder_sparse_step = 1,
//                 mlp_only_layers = [0, denseLayers), no shared experts.
//   deepseek_v3:  MLA with hd = hidden / heads (hd >= 2):
//                 qk_rope_head_dim = hd / 2, qk_nope_head_dim = hd - hd / 2,
//                 v_head_dim = hd, q_lora_rank = max(1, hidden / 4),
//                 kv_lora_rank = max(1, hidden / 8); n_routed_experts =
//                 experts, n_shared_experts = sharedExperts,
//                 first_k_dense_replace = denseLayers, moe_layer_freq = 1.
//
// "gpt_bench" (the MatrixFSDP benchmark harness model, no HF config): per
// layer i, in this order
//   layers.{i}.norm1.weight [H], layers.{i}.norm1.bias [H]        (LayerNorm)
//   layers.{i}.attn.{q,k,v,o}_proj.weight [H, H]                  (MHA)
//   layers.{i}.norm2.weight [H], layers.{i}.norm2.bias [H]
//   layers.{i}.mlp.up_proj.weight [I, H], layers.{i}.mlp.down_proj.weight [H,
//   I]
// in unit "layers.{i}"; with vocab > 0 also embed.weight [V, H] first (unit
// "embed") and head.weight [V, H] (kind Output, unit "head") last. Costs use
// the formulas of HFConfig.cpp with a 2-matrix GELU MLP:
//   fwd = 2 * (4*H*H + 2*I*H) + 2 * s * heads * (2 * H/heads) * 0.5,
//   bwd = 2 * fwd, activation bytes = 2 * (6*H + H + 2*H + 4*I)
//   (2 * H with recompute); head: fwd = 2*V*H, activation 2*H + 4*V.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/graph/Generate.h"

#include "mfsdp/graph/HFConfig.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <optional>

#if defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND)
#define MFSDP_GEN_EXCEPTIONS 1
#else
#define MFSDP_GEN_EXCEPTIONS 0
#endif

namespace mfsdp::graph {

namespace {

using ojson = nlohmann::ordered_json;

constexpr int64_t kMaxDim = (int64_t(1) << 31) - 1;
constexpr int64_t kMaxLayers = 100'000;

bool fail(Diagnostic &d, std::string pointer, std::string message) {
  d = Diagnostic{};
  d.pointer = std::move(pointer);
  d.message = std::move(message);
  return false;
}

bool isHF(const std::string &arch) {
  const auto &a = supportedHFArchitectures();
  return std::find(a.begin(), a.end(), arch) != a.end();
}
bool isMoE(const std::string &arch) {
  return arch == "mixtral" || arch == "qwen3_moe" || arch == "deepseek_v3";
}

std::optional<DType> specDType(const std::string &s) {
  if (s == "bfloat16")
    return DType::BF16;
  if (s == "float32")
    return DType::F32;
  if (s == "float16")
    return DType::F16;
  if (s == "float64")
    return DType::F64;
  return mfsdp::parseEnum<mfsdp::DType>(s);
}

const char *torchDType(DType t) {
  switch (t) {
  case DType::F32:
    return "float32";
  case DType::F16:
    return "float16";
  case DType::F64:
    return "float64";
  default:
    return "bfloat16";
  }
}

/// Checks the spec; the pointer names the GenSpec field.
bool checkSpec(const GenSpec &s, Diagnostic &d) {
  std::string archs;
  for (const auto &a : supportedHFArchitectures())
    archs += a + ", ";
  archs += "gpt_bench";
  if (!isHF(s.arch) && s.arch != "gpt_bench")
    return fail(
        d, "/arch",
        fmt::format("unsupported arch '{}'; supported: {}", s.arch, archs));

  auto positive = [&](int64_t v, const char *field, int64_t max = kMaxDim) {
    if (v <= 0)
      return fail(d, fmt::format("/{}", field),
                  fmt::format("expected a positive integer, got {}", v));
    if (v > max)
      return fail(d, fmt::format("/{}", field),
                  fmt::format("expected a positive integer at most {}, got {}",
                              max, v));
    return true;
  };
  auto nonneg = [&](int64_t v, const char *field, int64_t max = kMaxDim) {
    if (v < 0)
      return fail(d, fmt::format("/{}", field),
                  fmt::format("expected a non-negative integer, got {}", v));
    if (v > max)
      return fail(
          d, fmt::format("/{}", field),
          fmt::format("expected an integer at most {}, got {}", max, v));
    return true;
  };

  if (!positive(s.layers, "layers", kMaxLayers) ||
      !positive(s.hidden, "hidden") || !positive(s.heads, "heads"))
    return false;
  if (s.hidden % s.heads != 0)
    return fail(d, "/hidden",
                fmt::format("expected a multiple of heads ({}), got {}",
                            s.heads, s.hidden));
  if (!nonneg(s.kvHeads, "kvHeads"))
    return false;
  if (s.kvHeads > 0 && s.heads % s.kvHeads != 0)
    return fail(d, "/kvHeads",
                fmt::format("expected 0 or a divisor of heads ({}), got {}",
                            s.heads, s.kvHeads));
  if (!positive(s.intermediate, "intermediate"))
    return false;
  if (s.arch == "gpt_bench") {
    if (!nonneg(s.vocab, "vocab"))
      return false;
  } else if (!positive(s.vocab, "vocab")) {
    return false;
  }
  if (!nonneg(s.experts, "experts", 65536) ||
      !nonneg(s.moeIntermediate, "moeIntermediate") ||
      !nonneg(s.sharedExperts, "sharedExperts", 1024) ||
      !nonneg(s.denseLayers, "denseLayers"))
    return false;

  if (isMoE(s.arch)) {
    if (s.experts == 0)
      return fail(
          d, "/experts",
          fmt::format("{} is a mixture of experts; expected experts > 0",
                      s.arch));
    if (s.topK <= 0 || s.topK > s.experts)
      return fail(
          d, "/topK",
          fmt::format("expected an integer in [1, experts = {}], got {}",
                      s.experts, s.topK));
    if (s.arch != "deepseek_v3" && s.sharedExperts != 0)
      return fail(d, "/sharedExperts",
                  fmt::format("{} has no shared experts; expected 0, got {}",
                              s.arch, s.sharedExperts));
    if (s.arch == "mixtral" && s.denseLayers != 0)
      return fail(d, "/denseLayers",
                  fmt::format("mixtral has no dense layers; expected 0, got {}",
                              s.denseLayers));
    if (s.arch == "mixtral" && s.moeIntermediate != 0 &&
        s.moeIntermediate != s.intermediate)
      return fail(
          d, "/moeIntermediate",
          fmt::format("mixtral experts use intermediate ({}); expected 0 "
                      "or {}, got {}",
                      s.intermediate, s.intermediate, s.moeIntermediate));
    if (s.denseLayers > s.layers)
      return fail(d, "/denseLayers",
                  fmt::format("expected at most layers ({}), got {}", s.layers,
                              s.denseLayers));
    if (s.arch == "deepseek_v3" && s.hidden / s.heads < 2)
      return fail(d, "/heads",
                  fmt::format("deepseek_v3 needs hidden / heads >= 2 to split "
                              "the head into rope and nope parts; got {} / {}",
                              s.hidden, s.heads));
    int64_t moeI = s.moeIntermediate ? s.moeIntermediate : s.intermediate;
    if (s.arch == "deepseek_v3" && s.sharedExperts * moeI > kMaxDim)
      return fail(d, "/sharedExperts",
                  fmt::format("sharedExperts * moeIntermediate must be at most "
                              "{}, got {}",
                              kMaxDim, s.sharedExperts * moeI));
  } else {
    const char *kind = s.arch == "gpt_bench" ? "gpt_bench" : s.arch.c_str();
    if (s.experts != 0)
      return fail(d, "/experts",
                  fmt::format("{} has no experts; expected 0 (use mixtral, "
                              "qwen3_moe or deepseek_v3), got {}",
                              kind, s.experts));
    if (s.sharedExperts != 0)
      return fail(d, "/sharedExperts",
                  fmt::format("{} has no experts; expected 0, got {}", kind,
                              s.sharedExperts));
    if (s.denseLayers != 0)
      return fail(d, "/denseLayers",
                  fmt::format("{} has only dense layers; expected 0, got {}",
                              kind, s.denseLayers));
  }
  if (s.arch == "gpt_bench") {
    if (s.kvHeads != 0 && s.kvHeads != s.heads)
      return fail(d, "/kvHeads",
                  fmt::format("gpt_bench uses multi-head attention; expected 0 "
                              "or heads ({}), got {}",
                              s.heads, s.kvHeads));
    if (s.tie)
      return fail(d, "/tie",
                  "gpt_bench has no tied embeddings (its head unit would have "
                  "no parameter of its own); expected false");
  }
  if (!specDType(s.dtype))
    return fail(
        d, "/dtype",
        fmt::format("unsupported dtype '{}'; expected bf16, f16, f32 or "
                    "f64",
                    s.dtype));
  if (s.seqLen <= 0)
    return fail(d, "/seqLen",
                fmt::format("expected a positive integer, got {}", s.seqLen));
  if (s.transformers != 4 && s.transformers != 5)
    return fail(d, "/transformers",
                fmt::format("expected 4 or 5, got {}", s.transformers));
  if (s.expertsOwnedBy == "dp_shard" || s.expertsOwnedBy == "dp_replicate")
    return fail(d, "/expertsOwnedBy",
                fmt::format("'{}' is a data-parallel dim; expected the "
                            "expert-parallel mesh dim (e.g. 'ep')",
                            s.expertsOwnedBy));
  return true;
}

ojson hfConfig(const GenSpec &s) {
  const int64_t kv = s.kvHeads ? s.kvHeads : s.heads;
  const int64_t hd = s.hidden / s.heads;
  const int64_t moeI = s.moeIntermediate ? s.moeIntermediate : s.intermediate;
  const char *cls = "LlamaForCausalLM";
  if (s.arch == "mistral")
    cls = "MistralForCausalLM";
  else if (s.arch == "qwen2")
    cls = "Qwen2ForCausalLM";
  else if (s.arch == "qwen3")
    cls = "Qwen3ForCausalLM";
  else if (s.arch == "qwen3_moe")
    cls = "Qwen3MoeForCausalLM";
  else if (s.arch == "mixtral")
    cls = "MixtralForCausalLM";
  else if (s.arch == "deepseek_v3")
    cls = "DeepseekV3ForCausalLM";

  ojson c = ojson::object();
  c["architectures"] = ojson::array({cls});
  c["model_type"] = s.arch;
  if (!s.name.empty())
    c["_name_or_path"] = s.name;
  c["hidden_size"] = s.hidden;
  c["intermediate_size"] = s.intermediate;
  c["num_hidden_layers"] = s.layers;
  c["num_attention_heads"] = s.heads;
  c["num_key_value_heads"] = kv;
  c["vocab_size"] = s.vocab;
  c["tie_word_embeddings"] = s.tie;
  c["torch_dtype"] = torchDType(*specDType(s.dtype));
  if (s.arch != "deepseek_v3")
    c["head_dim"] = hd;
  if (s.arch == "mixtral") {
    c["num_local_experts"] = s.experts;
    c["num_experts_per_tok"] = s.topK;
  } else if (s.arch == "qwen3_moe") {
    c["num_experts"] = s.experts;
    c["num_experts_per_tok"] = s.topK;
    c["moe_intermediate_size"] = moeI;
    c["decoder_sparse_step"] = 1;
    ojson dense = ojson::array();
    for (int64_t i = 0; i < s.denseLayers; ++i)
      dense.push_back(i);
    c["mlp_only_layers"] = dense;
  } else if (s.arch == "deepseek_v3") {
    c["q_lora_rank"] = std::max<int64_t>(1, s.hidden / 4);
    c["kv_lora_rank"] = std::max<int64_t>(1, s.hidden / 8);
    c["qk_rope_head_dim"] = hd / 2;
    c["qk_nope_head_dim"] = hd - hd / 2;
    c["v_head_dim"] = hd;
    c["n_routed_experts"] = s.experts;
    c["n_shared_experts"] = s.sharedExperts;
    c["num_experts_per_tok"] = s.topK;
    c["moe_intermediate_size"] = moeI;
    c["first_k_dense_replace"] = s.denseLayers;
    c["moe_layer_freq"] = 1;
  }
  return c;
}

/// Config field -> GenSpec field, to report import problems on the spec.
std::string specPointer(const std::string &configPointer) {
  static const std::map<std::string, std::string> m = {
      {"/hidden_size", "/hidden"},
      {"/intermediate_size", "/intermediate"},
      {"/num_hidden_layers", "/layers"},
      {"/num_attention_heads", "/heads"},
      {"/num_key_value_heads", "/kvHeads"},
      {"/vocab_size", "/vocab"},
      {"/num_local_experts", "/experts"},
      {"/num_experts", "/experts"},
      {"/n_routed_experts", "/experts"},
      {"/num_experts_per_tok", "/topK"},
      {"/moe_intermediate_size", "/moeIntermediate"},
      {"/n_shared_experts", "/sharedExperts"},
      {"/first_k_dense_replace", "/denseLayers"},
      {"/torch_dtype", "/dtype"},
  };
  auto it = m.find(configPointer);
  if (it != m.end())
    return it->second;
  if (configPointer.rfind("/mlp_only_layers", 0) == 0)
    return "/denseLayers";
  return configPointer;
}

bool generateHF(const GenSpec &s, Graph &out, Diagnostic &d) {
  std::string text = hfConfig(s).dump(2);
  HFImportOptions o;
  o.seqLen = s.seqLen;
  o.recompute = s.recompute;
  o.expertsOwnedBy = s.expertsOwnedBy;
  o.dtype = s.dtype;
  o.modelName = s.name;
  o.transformersVersion = static_cast<int>(s.transformers);
  Diagnostic cd;
  if (!graphFromHFConfig(text, o, out, cd)) {
    d = cd;
    d.pointer = specPointer(cd.pointer);
    d.message = "generated config: " + cd.message;
    return false;
  }
  return true;
}

bool generateBench(const GenSpec &s, Graph &out) {
  const DType dt = *specDType(s.dtype);
  const int64_t H = s.hidden, I = s.intermediate, V = s.vocab;
  Graph g;
  g.model = s.name.empty() ? "gpt_bench" : s.name;
  g.seqLen = s.seqLen;
  std::vector<std::string> *unit = nullptr;
  auto add = [&](const std::string &module, const char *leaf,
                 std::vector<int64_t> shape, ModuleKind kind) {
    Param p;
    p.name = module + "." + leaf;
    p.shape = std::move(shape);
    p.dtype = dt;
    p.module = module;
    p.kind = kind;
    p.requiresGrad = true;
    if (unit)
      unit->push_back(p.name);
    g.params.push_back(std::move(p));
  };

  if (V > 0) {
    Unit u;
    u.name = "embed";
    unit = &u.params;
    add("embed", "weight", {V, H}, ModuleKind::Embedding);
    g.units.push_back(std::move(u));
  }
  const double dH = static_cast<double>(H), dI = static_cast<double>(I);
  const double s_ = static_cast<double>(s.seqLen);
  const double heads = static_cast<double>(s.heads);
  const double hd = dH / heads;
  for (int64_t i = 0; i < s.layers; ++i) {
    Unit u;
    u.name = fmt::format("layers.{}", i);
    unit = &u.params;
    const std::string L = u.name;
    add(L + ".norm1", "weight", {H}, ModuleKind::Norm);
    add(L + ".norm1", "bias", {H}, ModuleKind::Norm);
    for (const char *proj : {"q_proj", "k_proj", "v_proj", "o_proj"})
      add(fmt::format("{}.attn.{}", L, proj), "weight", {H, H},
          ModuleKind::Linear);
    add(L + ".norm2", "weight", {H}, ModuleKind::Norm);
    add(L + ".norm2", "bias", {H}, ModuleKind::Norm);
    add(L + ".mlp.up_proj", "weight", {I, H}, ModuleKind::Linear);
    add(L + ".mlp.down_proj", "weight", {H, I}, ModuleKind::Linear);
    const double weights = 4.0 * dH * dH + 2.0 * dI * dH;
    u.cost.fwdFlopsPerToken =
        2.0 * weights + 2.0 * s_ * heads * (2.0 * hd) * 0.5;
    u.cost.bwdFlopsPerToken = 2.0 * u.cost.fwdFlopsPerToken;
    u.cost.activationBytesPerToken =
        2.0 * (6.0 * dH + dH + 2.0 * dH + 4.0 * dI);
    if (s.recompute) {
      u.cost.activationBytesPerToken = 2.0 * dH;
      u.cost.recompute = true;
    }
    g.units.push_back(std::move(u));
  }
  if (V > 0) {
    Unit u;
    u.name = "head";
    unit = &u.params;
    add("head", "weight", {V, H}, ModuleKind::Output);
    const double dV = static_cast<double>(V);
    u.cost.fwdFlopsPerToken = 2.0 * dV * dH;
    u.cost.bwdFlopsPerToken = 2.0 * u.cost.fwdFlopsPerToken;
    u.cost.activationBytesPerToken = 2.0 * dH + 4.0 * dV;
    g.units.push_back(std::move(u));
  }
  out = std::move(g);
  return true;
}

} // namespace

std::string generatedHFConfig(const GenSpec &spec) {
#if MFSDP_GEN_EXCEPTIONS
  try {
#endif
    Diagnostic d;
    if (!isHF(spec.arch) || !checkSpec(spec, d))
      return {};
    return hfConfig(spec).dump(2);
#if MFSDP_GEN_EXCEPTIONS
  } catch (...) {
    return {};
  }
#endif
}

bool generateGraph(const GenSpec &spec, Graph &out, Diagnostic &diag) {
#if MFSDP_GEN_EXCEPTIONS
  try {
#endif
    if (!checkSpec(spec, diag))
      return false;
    if (spec.arch == "gpt_bench")
      return generateBench(spec, out);
    return generateHF(spec, out, diag);
#if MFSDP_GEN_EXCEPTIONS
  } catch (const std::exception &e) {
    return fail(
        diag, "",
        fmt::format("internal error generating the graph: {}", e.what()));
  } catch (...) {
    return fail(diag, "", "internal error generating the graph");
  }
#endif
}

} // namespace mfsdp::graph

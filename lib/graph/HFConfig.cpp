//===- HFConfig.cpp - Model graphs from Hugging Face config.json ----------===//
//
// Builds the graph that `named_parameters()` of the transformers
// implementation of a model would list, from its config.json alone: of
// transformers 5 (5.0 to 5.2x) by default, of 4.x (4.51 to 4.57) with
// HFImportOptions::transformersVersion = 4. The two differ only in the
// routed experts of MoE layers (below).
//
// Parameters (names, order, shapes) follow the module registration order of
// modeling_{llama,mistral,qwen2,qwen3,qwen3_moe,mixtral,deepseek_v3}.py:
//
//   model.embed_tokens.weight                         [vocab, H]
//   model.layers.{i}.self_attn.*                      (see below)
//   model.layers.{i}.mlp.* | block_sparse_moe.*       (see below)
//   model.layers.{i}.input_layernorm.weight           [H]
//   model.layers.{i}.post_attention_layernorm.weight  [H]
//   model.norm.weight                                 [H]
//   lm_head.weight                                    [vocab, H]
//
//   GQA attention (all but deepseek_v3): q_proj [heads*hd, H],
//   k_proj/v_proj [kv*hd, H], o_proj [H, heads*hd], then q_norm/k_norm [hd]
//   for qwen3 and qwen3_moe. Biases: llama attention_bias (q,k,v,o); qwen2
//   q,k,v always; qwen3/qwen3_moe attention_bias (q,k,v,o); mistral and
//   mixtral none. head_dim is the config's "head_dim" when present and not
//   null, else hidden_size / num_attention_heads -- except qwen3, whose
//   Qwen3Config has head_dim = 128 by default, so an absent/null head_dim
//   means 128 there, as transformers would build it. kv is
//   num_key_value_heads; absent, it is the config class's default, as
//   transformers reads it (LlamaConfig: num_attention_heads; MistralConfig
//   and MixtralConfig 8; Qwen2Config and Qwen3Config 32; Qwen3MoeConfig 4;
//   DeepseekV3Config 128, unused by MLA); null means num_attention_heads
//   (the classes' fallback for None; transformers 5's strict MistralConfig,
//   MixtralConfig and Qwen3MoeConfig refuse null).
//
//   MLA attention (deepseek_v3): [q_proj | q_a_proj, q_a_layernorm, q_b_proj],
//   kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj.
//
//   Dense MLP: gate_proj [I, H], up_proj [I, H], down_proj [H, I] (llama
//   mlp_bias adds biases).
//
//   MoE layers, transformers 5: the routed experts are one module,
//   mlp.experts, holding gate_up_proj [E, 2I, H] (expert e's gate rows, then
//   its up rows: linear(x, gate_up_proj[e]).chunk(2, dim=-1)) and down_proj
//   [E, H, I]. The graph writes each fused tensor as its matrices, one 2-D
//   parameter each, so that Muon orthogonalises every expert's matrices on
//   their own (docs/graph-format.md, "Fused experts"):
//     mlp.experts.gate_up_proj.{e}.gate [I, H], mlp.experts.gate_up_proj.{e}.up
//     [I, H] for e = 0..E-1 (e-major), then mlp.experts.down_proj.{e} [H, I],
//   module "...mlp.experts", kind expert. The router is mlp.gate.weight
//   [E, H] (a TopKRouter module). Order: mixtral (its block is now `mlp`)
//   gate, experts; qwen3_moe experts, gate; deepseek_v3 experts, gate
//   (e_score_correction_bias is a buffer, left out), shared_experts.* with
//   moe_intermediate_size * n_shared_experts.
//
//   MoE layers, transformers 4: mixtral block_sparse_moe.gate [E, H], then
//   experts.{j}.w1 [I, H], w2 [H, I], w3 [I, H]. qwen3_moe mlp.gate [E, H],
//   then mlp.experts.{j}.{gate,up,down}_proj. deepseek_v3
//   mlp.experts.{j}.{gate,up,down}_proj, then mlp.gate.weight [E, H], then
//   mlp.shared_experts.*.
//
//   Either way the same matrices, so parameter counts and bytes agree.
//   deepseek_v3 layer i is MoE when i >= first_k_dense_replace and
//   i % moe_layer_freq == 0 (transformers itself ignores moe_layer_freq; the
//   published configs all use 1, where the two agree).
//
//   Tied embeddings keep "lm_head.weight" as an alias: tiedTo
//   "model.embed_tokens.weight", placed in no unit.
//
// Units, in forward order: "model.embed_tokens", "model.layers.{i}",
// "lm_head" (model.norm.weight, plus lm_head.weight unless tied).
//
// A decoder layer's parameters, cost and kernels are built in
// HFLayers.cpp, which gives the cost model.
//
// nlohmann/json is used only in this file; every exception is caught here
// and turned into a Diagnostic, and the code checks each value's type before
// reading it so it does not depend on exceptions for control flow.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/graph/HFConfig.h"
#include "mfsdp/graph/TextLimits.h"
#include "HFArch.h"
#include "JsonText.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>

#if defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND)
#define MFSDP_HF_EXCEPTIONS 1
#else
#define MFSDP_HF_EXCEPTIONS 0
#endif

namespace mfsdp::graph {

using hf::Arch;
using hf::Builder;
using hf::LayerWork;
using hf::MoEStyle;

namespace {

using json = nlohmann::json;

/// Largest accepted size of one config dimension.
constexpr int64_t kMaxDim = (int64_t(1) << 31) - 1;
/// Largest number of parameter tensors a config may produce.
constexpr int64_t kMaxParamTensors = 10'000'000;

/// Function-local so that other translation units' static initializers can
/// call supportedHFArchitectures() safely.
const std::vector<std::string> &archList() {
  static const std::vector<std::string> archs = {
      "llama",     "mistral", "qwen2",      "qwen3",
      "qwen3_moe", "mixtral", "deepseek_v3"};
  return archs;
}

std::string joinArchs() {
  const auto &archs = archList();
  std::string s;
  for (size_t i = 0; i < archs.size(); ++i)
    s += (i ? ", " : "") + archs[i];
  return s;
}

/// A short rendering of a JSON value for messages.
std::string show(const json &v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60)
    s = s.substr(0, 57) + "...";
  return s;
}

std::string typeName(const json &v) { return jsonTypeName(v.type()); }

std::string pointerTo(std::string_view key) { return "/" + jsonPointerToken(key); }

/// Reads typed fields of the config object. The first problem is recorded
/// in the Diagnostic; after that every accessor returns a harmless default
/// (1 for sizes) so that callers can read all fields and check ok() once.
class Fields {
public:
  Fields(const json &obj, Diagnostic &diag) : obj_(obj), diag_(diag) {}

  bool ok() const { return !failed_; }

  bool error(std::string pointer, std::string message) {
    if (!failed_) {
      diag_ = Diagnostic{};
      diag_.pointer = std::move(pointer);
      diag_.message = std::move(message);
      failed_ = true;
    }
    return false;
  }

  /// The value of `key` when present and not null.
  const json *get(const std::string &key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null())
      return nullptr;
    return &*it;
  }

  /// Whether `key` is in the object at all (null included).
  bool present(const std::string &key) const {
    return obj_.find(key) != obj_.end();
  }

  /// Required integer >= `min` (min is 0 or 1).
  int64_t reqInt(const std::string &key, int64_t min = 1) {
    const json *v = get(key);
    if (!v) {
      error(pointerTo(key), fmt::format("missing required field '{}' "
                                        "(expected {})",
                                        key, what(min)));
      return min;
    }
    return toInt(*v, pointerTo(key), min);
  }

  /// Optional integer >= `min`; absent or null gives `def`.
  int64_t optInt(const std::string &key, int64_t def, int64_t min = 1) {
    const json *v = get(key);
    return v ? toInt(*v, pointerTo(key), min) : def;
  }

  /// Required key whose value is a positive integer or null.
  std::optional<int64_t> reqIntOrNull(const std::string &key) {
    auto it = obj_.find(key);
    if (it == obj_.end()) {
      error(pointerTo(key),
            fmt::format("missing required field '{}' (expected a positive "
                        "integer or null)",
                        key));
      return 1;
    }
    if (it->is_null())
      return std::nullopt;
    if (!isInteger(*it)) {
      error(pointerTo(key), fmt::format("expected a positive integer or null, "
                                        "got {}",
                                        show(*it)));
      return 1;
    }
    return toInt(*it, pointerTo(key), 1);
  }

  bool optBool(const std::string &key, bool def) {
    const json *v = get(key);
    if (!v)
      return def;
    if (!v->is_boolean()) {
      error(pointerTo(key),
            fmt::format("expected true or false, got {}", show(*v)));
      return def;
    }
    return v->get<bool>();
  }

  /// Optional array of integers in [0, limit); pointer of each element.
  std::set<int64_t> optIndexList(const std::string &key, int64_t limit) {
    std::set<int64_t> out;
    const json *v = get(key);
    if (!v)
      return out;
    if (!v->is_array()) {
      error(
          pointerTo(key),
          fmt::format("expected an array of layer indices, got {}", show(*v)));
      return out;
    }
    for (size_t i = 0; i < v->size(); ++i) {
      const json &e = (*v)[i];
      std::string at = fmt::format("{}/{}", pointerTo(key), i);
      int64_t idx = toInt(e, at, 0);
      if (!ok())
        return out;
      if (idx >= limit) {
        error(at, fmt::format("expected a layer index below num_hidden_layers "
                              "({}), got {}",
                              limit, idx));
        return out;
      }
      out.insert(idx);
    }
    return out;
  }

  static bool isInteger(const json &v) {
    return v.is_number_integer() || v.is_number_unsigned();
  }

private:
  static std::string what(int64_t min) {
    return min >= 1 ? "a positive integer" : "a non-negative integer";
  }

  int64_t toInt(const json &v, const std::string &at, int64_t min) {
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(kMaxDim)) {
        error(at, fmt::format("expected {} at most {}, got {}", what(min),
                              kMaxDim, show(v)));
        return min;
      }
      if (static_cast<int64_t>(u) < min) {
        error(at, fmt::format("expected {}, got {}", what(min), show(v)));
        return min;
      }
      return static_cast<int64_t>(u);
    }
    if (v.is_number_integer()) {
      int64_t i = v.get<int64_t>();
      if (i < min) {
        error(at, fmt::format("expected {}, got {}", what(min), show(v)));
        return min;
      }
      if (i > kMaxDim) {
        error(at, fmt::format("expected {} at most {}, got {}", what(min),
                              kMaxDim, show(v)));
        return min;
      }
      return i;
    }
    error(at, fmt::format("expected {}, got {}", what(min), show(v)));
    return min;
  }

  const json &obj_;
  Diagnostic &diag_;
  bool failed_ = false;
};

/// The transformers config class of a model_type, for messages.
const char *configClass(const std::string &t) {
  if (t == "llama")
    return "LlamaConfig";
  if (t == "mistral")
    return "MistralConfig";
  if (t == "qwen2")
    return "Qwen2Config";
  if (t == "qwen3")
    return "Qwen3Config";
  if (t == "qwen3_moe")
    return "Qwen3MoeConfig";
  if (t == "mixtral")
    return "MixtralConfig";
  return "DeepseekV3Config";
}

/// num_key_value_heads when config.json leaves it out: the config class's
/// default (configuration_*.py of transformers 4.5x and 5.x alike).
int64_t defaultKvHeads(const std::string &t, int64_t heads) {
  if (t == "mistral" || t == "mixtral")
    return 8;
  if (t == "qwen2" || t == "qwen3")
    return 32;
  if (t == "qwen3_moe")
    return 4;
  if (t == "deepseek_v3")
    return 128;
  return heads; // llama
}

bool readArch(const json &root, Fields &f, Arch &a) {
  const json *mt = f.get("model_type");
  if (!mt)
    return f.error("/model_type",
                   fmt::format("missing required field 'model_type' (expected "
                               "one of: {})",
                               joinArchs()));
  if (!mt->is_string())
    return f.error("/model_type",
                   fmt::format("expected a string naming the architecture, got "
                               "{}",
                               show(*mt)));
  a.type = mt->get<std::string>();
  if (std::find(archList().begin(), archList().end(), a.type) ==
      archList().end())
    return f.error("/model_type",
                   fmt::format("unsupported model_type '{}'; supported: {}",
                               a.type, joinArchs()));

  // "architectures" is accepted, not required; when present it must be a
  // list of class names.
  if (const json *archs = f.get("architectures")) {
    if (!archs->is_array())
      return f.error("/architectures",
                     fmt::format("expected an array of class names, got {}",
                                 show(*archs)));
    for (size_t i = 0; i < archs->size(); ++i)
      if (!(*archs)[i].is_string())
        return f.error(fmt::format("/architectures/{}", i),
                       fmt::format("expected a class name string, got {}",
                                   show((*archs)[i])));
  }

  const std::string &t = a.type;
  a.H = f.reqInt("hidden_size");
  a.layers = f.reqInt("num_hidden_layers");
  a.heads = f.reqInt("num_attention_heads");
  a.vocab = f.reqInt("vocab_size");
  a.tie = f.optBool("tie_word_embeddings", false);
  if (!f.ok())
    return false;
  const bool kvGiven = f.present("num_key_value_heads");
  a.kvHeads = f.optInt("num_key_value_heads",
                       kvGiven ? a.heads : defaultKvHeads(t, a.heads));
  if (!f.ok())
    return false;

  a.mla = t == "deepseek_v3";
  // MLA has no key/value heads of its own (K and V are `heads` wide after
  // kv_b_proj), so only GQA needs them to divide the heads.
  if (!a.mla && a.heads % a.kvHeads != 0)
    return f.error(
        "/num_key_value_heads",
        kvGiven ? fmt::format("expected a divisor of num_attention_heads "
                              "({}), got {}",
                              a.heads, a.kvHeads)
                : fmt::format("missing, so {}'s default {}, which does not "
                              "divide num_attention_heads ({}); expected "
                              "num_key_value_heads in the config",
                              configClass(t), a.kvHeads, a.heads));
  if (!a.mla) {
    const json *hd = f.get("head_dim");
    if (hd) {
      a.headDim = f.reqInt("head_dim");
    } else if (t == "qwen3") {
      a.headDim = 128; // Qwen3Config default
    } else {
      if (a.H % a.heads != 0)
        return f.error(
            "/hidden_size",
            fmt::format("hidden_size {} is not divisible by "
                        "num_attention_heads {}; expected a multiple "
                        "of it (or an explicit head_dim)",
                        a.H, a.heads));
      a.headDim = a.H / a.heads;
    }
    if (t == "llama") {
      a.qkvBias = a.oBias = f.optBool("attention_bias", false);
      a.mlpBias = f.optBool("mlp_bias", false);
    } else if (t == "qwen2") {
      a.qkvBias = true;
    } else if (t == "qwen3" || t == "qwen3_moe") {
      a.qkvBias = a.oBias = f.optBool("attention_bias", false);
      a.qkNorm = true;
    }
  } else {
    a.qLora = f.reqIntOrNull("q_lora_rank");
    a.kvLora = f.reqInt("kv_lora_rank");
    a.qkNope = f.reqInt("qk_nope_head_dim");
    a.qkRope = f.reqInt("qk_rope_head_dim");
    a.vHead = f.reqInt("v_head_dim");
    a.attnBias = f.optBool("attention_bias", false);
  }
  if (!f.ok())
    return false;

  // Every layer has at least 9 parameter tensors; refuse absurd layer
  // counts before allocating per-layer state (the exact bound is below).
  if (a.layers > kMaxParamTensors / 9)
    return f.error("/num_hidden_layers",
                   fmt::format("the model would have more than {} parameter "
                               "tensors; expected a smaller num_hidden_layers "
                               "(got {})",
                               kMaxParamTensors, a.layers));
  a.sparse.assign(static_cast<size_t>(a.layers), false);
  if (t == "mixtral") {
    a.moe = MoEStyle::Mixtral;
    a.experts = f.reqInt("num_local_experts");
    a.topK = f.reqInt("num_experts_per_tok");
    a.inter = f.reqInt("intermediate_size");
    a.moeInter = a.inter;
    a.sparse.assign(static_cast<size_t>(a.layers), true);
    if (f.ok() && a.topK > a.experts)
      return f.error("/num_experts_per_tok",
                     fmt::format("expected at most num_local_experts ({}), got "
                                 "{}",
                                 a.experts, a.topK));
    a.inter = 0; // no dense layer
  } else if (t == "qwen3_moe") {
    a.moe = MoEStyle::Qwen3Moe;
    a.experts = f.reqInt("num_experts", 0);
    int64_t step = f.optInt("decoder_sparse_step", 1);
    std::set<int64_t> mlpOnly = f.optIndexList("mlp_only_layers", a.layers);
    if (!f.ok())
      return false;
    if (a.experts > 0) {
      a.topK = f.reqInt("num_experts_per_tok");
      a.moeInter = f.reqInt("moe_intermediate_size");
      if (f.ok() && a.topK > a.experts)
        return f.error("/num_experts_per_tok",
                       fmt::format("expected at most num_experts ({}), got {}",
                                   a.experts, a.topK));
    }
    bool anyDense = false;
    for (int64_t i = 0; i < a.layers; ++i) {
      bool s = a.experts > 0 && !mlpOnly.count(i) && (i + 1) % step == 0;
      a.sparse[static_cast<size_t>(i)] = s;
      anyDense |= !s;
    }
    if (anyDense)
      a.inter = f.reqInt("intermediate_size");
  } else if (t == "deepseek_v3") {
    a.moe = MoEStyle::DeepSeek;
    a.experts = f.reqInt("n_routed_experts");
    a.topK = f.reqInt("num_experts_per_tok");
    a.moeInter = f.reqInt("moe_intermediate_size");
    a.shared = f.reqInt("n_shared_experts", 0);
    int64_t firstDense = f.reqInt("first_k_dense_replace", 0);
    int64_t freq = f.optInt("moe_layer_freq", 1);
    if (!f.ok())
      return false;
    if (a.topK > a.experts)
      return f.error(
          "/num_experts_per_tok",
          fmt::format("expected at most n_routed_experts ({}), got {}",
                      a.experts, a.topK));
    bool anyDense = false;
    for (int64_t i = 0; i < a.layers; ++i) {
      bool s = i >= firstDense && i % freq == 0;
      a.sparse[static_cast<size_t>(i)] = s;
      anyDense |= !s;
    }
    if (anyDense)
      a.inter = f.reqInt("intermediate_size");
  } else {
    a.inter = f.reqInt("intermediate_size");
  }
  if (!f.ok())
    return false;

  // Bound the size of what we are about to build.
  int64_t perExpert = a.moe == MoEStyle::None ? 0 : 3;
  int64_t tensorsPerLayer = 32 + a.experts * perExpert;
  if (a.layers > kMaxParamTensors / tensorsPerLayer)
    return f.error("/num_hidden_layers",
                   fmt::format("the model would have more than {} parameter "
                               "tensors; expected a smaller num_hidden_layers "
                               "(got {})",
                               kMaxParamTensors, a.layers));
  (void)root;
  return true;
}

std::optional<DType> dtypeFromString(std::string_view s) {
  if (s == "bfloat16")
    return DType::BF16;
  if (s == "float32" || s == "float")
    return DType::F32;
  if (s == "float16" || s == "half")
    return DType::F16;
  if (s == "float64" || s == "double")
    return DType::F64;
  return mfsdp::parseEnum<mfsdp::DType>(s);
}

bool pickDType(const HFImportOptions &opts, Fields &f, DType &out) {
  if (!opts.dtype.empty()) {
    auto d = dtypeFromString(opts.dtype);
    if (!d)
      return f.error("", fmt::format("unsupported dtype option '{}'; expected "
                                     "bf16, f16, f32, f64 (or bfloat16, "
                                     "float16, float32)",
                                     opts.dtype));
    out = *d;
    return true;
  }
  // transformers >= 4.56 writes "dtype", older versions "torch_dtype".
  for (const char *key : {"torch_dtype", "dtype"}) {
    const json *v = f.get(key);
    if (!v)
      continue;
    if (!v->is_string())
      return f.error(pointerTo(key),
                     fmt::format("expected a dtype name such as \"bfloat16\", "
                                 "got {}",
                                 show(*v)));
    std::string s = v->get<std::string>();
    if (s == "auto") {
      out = DType::BF16;
      return true;
    }
    auto d = dtypeFromString(s);
    if (!d)
      return f.error(pointerTo(key),
                     fmt::format("unsupported {} '{}'; expected bfloat16, "
                                 "float16 or float32",
                                 key, s));
    out = *d;
    return true;
  }
  out = DType::BF16;
  return true;
}

bool build(const json &root, const HFImportOptions &opts, Graph &out,
           Diagnostic &diag) {
  if (!root.is_object()) {
    diag = Diagnostic{};
    diag.pointer = "";
    diag.message = fmt::format("expected a JSON object at the top level of "
                               "config.json, got {}",
                               typeName(root));
    return false;
  }
  Fields f(root, diag);
  if (opts.seqLen <= 0)
    return f.error("", fmt::format("expected a positive sequence length "
                                   "option, got {}",
                                   opts.seqLen));
  if (opts.expertsOwnedBy == "dp_shard" ||
      opts.expertsOwnedBy == "dp_replicate")
    return f.error("", fmt::format("experts cannot be owned by the "
                                   "data-parallel dim '{}'; expected an "
                                   "expert-parallel mesh dim such as 'ep'",
                                   opts.expertsOwnedBy));
  if (opts.transformersVersion != 4 && opts.transformersVersion != 5)
    return f.error("", fmt::format("unsupported transformers version option "
                                   "{}; expected 4 or 5",
                                   opts.transformersVersion));
  Arch a;
  a.transformers = opts.transformersVersion;
  if (!readArch(root, f, a))
    return false;
  DType dt = DType::BF16;
  if (!pickDType(opts, f, dt))
    return false;

  std::string model = opts.modelName;
  if (model.empty()) {
    if (const json *n = f.get("_name_or_path");
        n && n->is_string() && !n->get<std::string>().empty())
      model = n->get<std::string>();
    else
      model = a.type;
  }

  Graph g;
  g.model = model;
  g.seqLen = opts.seqLen;
  Builder b{g, dt, {}, nullptr};
  if (!opts.expertsOwnedBy.empty())
    b.ownedExperts = {opts.expertsOwnedBy};

  const double H = static_cast<double>(a.H);
  const double V = static_cast<double>(a.vocab);

  // Embedding.
  Unit embed;
  embed.name = "model.embed_tokens";
  b.unit = &embed.params;
  b.add("model.embed_tokens", "weight", {a.vocab, a.H}, ModuleKind::Embedding);
  // The lookup reads and writes a bf16 row per token.
  embed.cost.kernels = {UnitKernel::memory(4.0 * H)};
  g.units.push_back(std::move(embed));

  // Decoder layers.
  for (int64_t i = 0; i < a.layers; ++i) {
    Unit u;
    u.name = fmt::format("model.layers.{}", i);
    b.unit = &u.params;
    const size_t first = g.params.size();
    LayerWork w = buildLayer(b, a, i);
    u.cost = layerCost(a, w, opts);
    u.cost.kernels = layerKernels(g.params, first, a, w, opts);
    g.units.push_back(std::move(u));
  }

  // Final norm and output head.
  Unit head;
  head.name = "lm_head";
  b.unit = &head.params;
  b.norm("model.norm", a.H);
  if (a.tie)
    b.unit = nullptr;
  b.add("lm_head", "weight", {a.vocab, a.H}, ModuleKind::Output);
  if (a.tie)
    g.params.back().tiedTo = "model.embed_tokens.weight";
  head.cost.fwdFlopsPerToken = 2.0 * V * H;
  head.cost.bwdFlopsPerToken = 2.0 * head.cost.fwdFlopsPerToken;
  // Saved: the final norm's (6H) and the output projection's input (2H),
  // and the loss's log-softmax in fp32 (4V); while the loss runs backward
  // two fp32 gradients of the logits live beside it (8V), counted here so
  // that the peak at the head's backward holds them.
  head.cost.activationBytesPerToken = 8.0 * H + 12.0 * V;
  // The final RMSNorm, the output GEMM and the loss over fp32 logits
  // (transformers' ForCausalLMLoss: the upcast 6 bytes per logit, then
  // cross_entropy's log-softmax, two reads and a write, 12; three kernels).
  head.cost.kernels = {UnitKernel::memory(36.0 * H, 0, 7), UnitKernel::gemm(a.vocab, a.H),
                       UnitKernel::memory(18.0 * V, 0, 3)};
  g.units.push_back(std::move(head));

  out = std::move(g);
  return true;
}

} // namespace

const std::vector<std::string> &supportedHFArchitectures() {
  return archList();
}

bool graphFromHFConfig(std::string_view text, const HFImportOptions &opts,
                       Graph &out, Diagnostic &diag) {
  if (std::optional<TextProblem> p = checkJsonText(text)) {
    diag = Diagnostic{};
    diag.line = p->line;
    diag.column = p->column;
    diag.message = std::move(p->message);
    return false;
  }
#if MFSDP_HF_EXCEPTIONS
  try {
    json root;
    try {
      root = json::parse(text.begin(), text.end());
    } catch (const json::parse_error &e) {
      diag = invalidJson(text, e.what(), e.byte);
      return false;
    }
    if (build(root, opts, out, diag))
      return true;
    if (!diag.pointer.empty()) {
      auto [line, col] = locatePointer(text, diag.pointer);
      diag.line = line;
      diag.column = col;
    }
    return false;
  } catch (const std::exception &e) {
    diag = Diagnostic{};
    diag.pointer = "";
    diag.message =
        fmt::format("internal error reading config.json: {}", e.what());
    return false;
  } catch (...) {
    diag = Diagnostic{};
    diag.pointer = "";
    diag.message = "internal error reading config.json";
    return false;
  }
#else
  json root = json::parse(text.begin(), text.end(), nullptr,
                          /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    diag = Diagnostic{};
    diag.pointer = "";
    diag.message = "invalid JSON: parse error: config.json is not valid JSON";
    return false;
  }
  if (build(root, opts, out, diag))
    return true;
  if (!diag.pointer.empty()) {
    auto [line, col] = locatePointer(text, diag.pointer);
    diag.line = line;
    diag.column = col;
  }
  return false;
#endif
}

} // namespace mfsdp::graph

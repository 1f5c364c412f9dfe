//===- HFArch.h - A Hugging Face model's architecture, and its layers -*- C++ -*-===//
//
// Private to lib/graph: the architecture HFConfig.cpp reads from a
// config.json, and what HFLayers.cpp builds from it for each decoder layer
// (its parameters, cost and kernels).
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_LIB_GRAPH_HFARCH_H
#define MFSDP_LIB_GRAPH_HFARCH_H

#include "mfsdp/graph/Graph.h"
#include "mfsdp/graph/HFConfig.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mfsdp::graph::hf {

enum class MoEStyle { None, Mixtral, Qwen3Moe, DeepSeek };

/// Everything the graph depends on, read and checked from the config.
struct Arch {
  std::string type;
  int64_t H = 0, layers = 0, heads = 0, kvHeads = 0, vocab = 0;
  int64_t inter = 0; // dense MLP intermediate size (0 when no dense layer)
  bool tie = false;

  // GQA attention.
  bool mla = false;
  int64_t headDim = 0;
  bool qkvBias = false, oBias = false, qkNorm = false, mlpBias = false;

  // MLA attention.
  std::optional<int64_t> qLora;
  int64_t kvLora = 0, qkNope = 0, qkRope = 0, vHead = 0;
  bool attnBias = false;

  // MoE.
  MoEStyle moe = MoEStyle::None;
  int64_t experts = 0, topK = 0, moeInter = 0, shared = 0;
  std::vector<bool> sparse; // per layer

  /// The transformers major version whose names to write (4 or 5).
  int transformers = 5;

  int64_t qkHeadDim() const { return mla ? qkNope + qkRope : headDim; }
  int64_t vHeadDim() const { return mla ? vHead : headDim; }
};

/// Appends parameters to a graph and to the current unit.
struct Builder {
  Graph &g;
  DType dtype;
  std::vector<std::string> ownedExperts;
  std::vector<std::string> *unit = nullptr;

  void add(const std::string &module, std::string_view leaf,
           std::vector<int64_t> shape, ModuleKind kind) {
    Param p;
    p.name = module + "." + std::string(leaf);
    p.shape = std::move(shape);
    p.dtype = dtype;
    p.module = module;
    p.kind = kind;
    p.requiresGrad = true;
    if (kind == ModuleKind::Expert)
      p.ownedBy = ownedExperts;
    if (unit)
      unit->push_back(p.name);
    g.params.push_back(std::move(p));
  }

  /// nn.Linear(in, out, bias): weight [out, in], bias [out]. Returns the
  /// weight's element count.
  int64_t linear(const std::string &module, int64_t out, int64_t in, bool bias,
                 ModuleKind kind = ModuleKind::Linear) {
    add(module, "weight", {out, in}, kind);
    if (bias)
      add(module, "bias", {out}, kind);
    return out * in;
  }

  void norm(const std::string &module, int64_t dim) {
    add(module, "weight", {dim}, ModuleKind::Norm);
  }
};

/// Matmul weight elements a token goes through in one layer, and the MLP
/// intermediate width it activates.
struct LayerWork {
  double activeWeights = 0;
  double activeInter = 0;
};

/// Adds decoder layer `i`'s parameters (module registration order) to `b`'s
/// graph and unit.
LayerWork buildLayer(Builder &b, const Arch &a, int64_t i);

/// A decoder layer's FLOPs and saved activations per token (the cost model
/// in HFLayers.cpp).
UnitCost layerCost(const Arch &a, const LayerWork &w, const HFImportOptions &opts);

/// A decoder layer's kernels per token, from its parameters params[first..].
std::vector<UnitKernel> layerKernels(const std::vector<Param> &params, size_t first,
                                     const Arch &a, const LayerWork &w,
                                     const HFImportOptions &opts);

} // namespace mfsdp::graph::hf

#endif // MFSDP_LIB_GRAPH_HFARCH_H

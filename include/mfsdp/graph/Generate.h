//===- Generate.h - Synthetic model graphs from a few sizes -----*- C++ -*-===//
//
// Generates the graph of a model of a given architecture and size without a
// config.json: for the Hugging Face architectures it writes the config.json
// that model_type would have and imports it with graphFromHFConfig(), so the
// two never disagree; "gpt_bench" is the model of the MatrixFSDP benchmark
// harness (LayerNorm, MHA, GELU MLP), which has no Hugging Face config.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_GRAPH_GENERATE_H
#define MFSDP_GRAPH_GENERATE_H

#include "mfsdp/graph/Graph.h"

#include <cstdint>
#include <string>

namespace mfsdp::graph {

struct GenSpec {
  /// Any name of supportedHFArchitectures(), or "gpt_bench".
  std::string arch = "llama";
  int64_t layers = 2, hidden = 64, heads = 4, kvHeads = 0 /*0: = heads*/,
          intermediate = 128, vocab = 256;
  /// Routed experts (mixtral, qwen3_moe, deepseek_v3 need > 0), experts per
  /// token, expert intermediate size (0: = intermediate), shared experts
  /// (deepseek_v3 only) and leading dense layers (qwen3_moe: mlp_only_layers
  /// 0..denseLayers-1; deepseek_v3: first_k_dense_replace).
  int64_t experts = 0, topK = 2, moeIntermediate = 0 /*0: = intermediate*/,
          sharedExperts = 0, denseLayers = 0;
  bool tie = false;
  std::string expertsOwnedBy, dtype = "bf16", name;
  int64_t seqLen = 4096;
  bool recompute = false;
  /// HF architectures: the transformers major version whose parameter names
  /// the graph has (5: fused experts written as their matrices; 4).
  int64_t transformers = 5;
};

/// Builds the graph `spec` describes. On a bad spec returns false and fills
/// `diag` with the pointer "/<field>" of the offending GenSpec field.
bool generateGraph(const GenSpec &spec, Graph &out, Diagnostic &diag);

/// The config.json generateGraph() imports for an HF architecture (empty for
/// gpt_bench or an invalid spec). Exposed for tools and tests.
std::string generatedHFConfig(const GenSpec &spec);

} // namespace mfsdp::graph

#endif // MFSDP_GRAPH_GENERATE_H

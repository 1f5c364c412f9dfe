//===- HFConfig.h - Model graphs from Hugging Face config.json --*- C++ -*-===//
//
// Builds the graph that exporting the transformers implementation of a model
// would give: parameter names as in `named_parameters()` (of transformers 5
// by default, 4 on request), shapes from the config (GQA, MLA, experts), tied
// embeddings where the config says so, one unit per decoder layer plus an
// embedding unit and an output-head unit.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_GRAPH_HFCONFIG_H
#define MFSDP_GRAPH_HFCONFIG_H

#include "mfsdp/graph/Graph.h"

namespace mfsdp::graph {

struct HFImportOptions {
  /// Sequence length the per-token compute estimates assume.
  int64_t seqLen = 4096;
  /// Mark units as recomputed in backward (activation checkpointing).
  bool recompute = false;
  /// Mark routed experts as owned by this mesh dim (empty: FSDP manages them).
  std::string expertsOwnedBy;
  /// Parameter dtype; empty means the config's torch_dtype, else bf16.
  std::string dtype;
  /// Model name; empty means the config's `_name_or_path` or model_type.
  std::string modelName;
  /// The transformers major version whose parameters to write: 5 (routed
  /// experts fused into 3-D gate_up_proj / down_proj tensors, written as
  /// their matrices) or 4 (one module per expert).
  int transformersVersion = 5;
};

/// Architectures understood by graphFromHFConfig().
const std::vector<std::string> &supportedHFArchitectures();

/// Parses `text` as a config.json and builds its graph. On failure returns
/// false and fills `diag` with the JSON pointer of the offending field.
bool graphFromHFConfig(std::string_view text, const HFImportOptions &opts,
                       Graph &out, Diagnostic &diag);

} // namespace mfsdp::graph

#endif // MFSDP_GRAPH_HFCONFIG_H

//===- Graph.h - The exported model graph, as plain C++ ---------*- C++ -*-===//
//
// The in-memory form of an exported model graph (docs/graph-format.md): the
// parameters, the units in forward execution order, and optionally a mesh and
// an optimizer policy. It is independent of MLIR; the importer turns it into
// the plan dialect and the exporter turns the plan dialect back into it.
//
// Nothing in this header throws. Readers report the first problem as a
// Diagnostic holding a JSON pointer, a line and column, and what was expected.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_GRAPH_GRAPH_H
#define MFSDP_GRAPH_GRAPH_H

#include "mfsdp/Kernel.h"
#include "mfsdp/Vocabulary.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mfsdp::graph {

inline constexpr std::string_view kFormatTag = "mfsdp.graph";
inline constexpr int kFormatVersion = 1;

// The graph format's enums and their spellings are the shared vocabulary
// (mfsdp/Vocabulary.h): enumName(x), parseEnum<DType>("bf16"), ...
using ::mfsdp::DType;
using ::mfsdp::dtypeBytes;
using ::mfsdp::ModuleKind;
using ::mfsdp::MuonScale;
using ::mfsdp::PolicyKind;

struct Param {
  std::string name;           // fully qualified, as named_parameters() gives it
  std::vector<int64_t> shape; // global shape
  DType dtype = DType::F32;
  std::string module;         // module path ("model.layers.0.self_attn.q_proj")
  ModuleKind kind = ModuleKind::Other;
  bool requiresGrad = true;
  std::string tiedTo;                 // empty unless tied to another parameter
  std::vector<std::string> ownedBy;   // TP/EP mesh dims that own it (external)

  int64_t numElements() const;
  int64_t bytes() const { return numElements() * dtypeBytes(dtype); }
  bool isExternal() const { return !ownedBy.empty(); }
  bool operator==(const Param &o) const;
};

/// Compute estimates of one unit, per token of a sequence of Graph::seqLen.
struct UnitCost {
  double fwdFlopsPerToken = 0;
  double bwdFlopsPerToken = 0;        // without recomputation
  double activationBytesPerToken = 0; // saved for backward
  bool recompute = false;             // activation checkpointing re-runs fwd
  /// The forward's kernels per token (mfsdp/Kernel.h), for the cost
  /// model's per-op roofline; empty: the FLOP counts above priced as one.
  std::vector<UnitKernel> kernels;
  bool operator==(const UnitCost &o) const;
};

struct Unit {
  std::string name;
  std::vector<std::string> params;
  UnitCost cost;
  bool operator==(const Unit &o) const;
};

struct MeshDim {
  std::string name;
  int64_t size = 1;
  bool operator==(const MeshDim &o) const;
};

struct Mesh {
  std::vector<MeshDim> dims;     // row-major rank order: last dim fastest
  std::vector<int64_t> deviceIds; // optional explicit order, a permutation
  int64_t worldSize() const;
  const MeshDim *find(std::string_view name) const;
  bool operator==(const Mesh &o) const;
};

struct AdamW {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.01;
  bool operator==(const AdamW &o) const;
};
struct SGD {
  double lr = 1e-2, momentum = 0.0, weightDecay = 0.0;
  bool nesterov = false;
  bool operator==(const SGD &o) const;
};
struct Muon {
  double lr = 2e-2, momentum = 0.95, weightDecay = 0.01;
  bool nesterov = true;
  int64_t nsSteps = 5;
  MuonScale scale = MuonScale::MatchRmsAdamW;
  NsPrecision nsPrecision = NsPrecision::FP32;
  bool operator==(const Muon &o) const;
};

struct Policy {
  PolicyKind kind = PolicyKind::AdamW;
  int64_t zero = 3;
  std::optional<AdamW> adamw;
  std::optional<SGD> sgd;
  std::optional<Muon> muon;
  bool operator==(const Policy &o) const;
};

struct Graph {
  std::string model;
  int64_t seqLen = 0; // sequence length the unit costs assume; 0 if unknown
  std::vector<Param> params;
  std::vector<Unit> units; // forward execution order
  std::optional<Mesh> mesh;
  std::optional<Policy> policy;

  const Param *findParam(std::string_view name) const;
  bool operator==(const Graph &o) const;
};

/// Where a problem is and what was expected.
struct Diagnostic {
  std::string pointer; // JSON pointer ("/params/17/shape/1"), may be empty
  int line = 0;        // 1-based, 0 if unknown
  int column = 0;      // 1-based, 0 if unknown
  std::string message;
  /// "<file>:<line>:<col>: error: <pointer>: <message>".
  std::string format(std::string_view file) const;
};

/// Checks the invariants that no JSON structure can express: unique names,
/// every parameter in exactly one unit (tied ones in none), existing and
/// consistent tie targets, mesh dims, owning dims. Fills `diag` with the JSON
/// pointer of the first offending value and returns false on failure.
bool validate(const Graph &g, Diagnostic &diag);

/// Parses a graph in format version 1. On failure returns false and fills
/// `diag` (with line and column located in `text`).
bool parseGraph(std::string_view text, Graph &out, Diagnostic &diag);

/// Writes `g` as format version 1 JSON, two-space indented.
std::string writeGraph(const Graph &g);

/// Line and column (1-based) of the value at JSON `pointer` in `text`; the
/// deepest existing prefix when the pointer names something absent. Returns
/// {0, 0} when `text` cannot be scanned.
std::pair<int, int> locatePointer(std::string_view text, std::string_view pointer);

/// Line and column (1-based) of the byte at `offset` in `text`.
std::pair<int, int> lineColumnOf(std::string_view text, size_t offset);

/// The diagnostic for a nlohmann/json parse error: its message without the
/// exception prefix, at the line and column it names.
Diagnostic invalidJson(std::string_view text, std::string what, size_t byte);

/// Line and column of every value at most `maxDepth` levels deep, keyed by
/// JSON pointer, in one pass over `text` (for locating many values at once).
/// Empty when `text` cannot be scanned.
std::unordered_map<std::string, std::pair<int, int>>
indexPointers(std::string_view text, int maxDepth);

} // namespace mfsdp::graph

#endif // MFSDP_GRAPH_GRAPH_H

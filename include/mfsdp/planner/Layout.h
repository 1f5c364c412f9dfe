//===- Layout.h - Choosing how every parameter lives on the ranks -*- C++ -*-===//
//
// The layout planner, as plain C++: classify parameters, pick each one's
// optimizer from the policy, place it (row shard, block shard, matrix owner,
// replicate; external ones stay with their TP/EP owners), choose each unit's
// row layout and gather group, balance matrix owners (OwnerAssignment.h),
// decide whether HSDP replicas split Newton-Schulz. `account()` then costs a
// placed model per rank: memory by kind, optimizer work, bytes moved per
// collective kind, imbalance against lower bounds. mfsdp-assign-layouts and
// mfsdp-plan-report are thin passes over these two functions.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_PLANNER_LAYOUT_H
#define MFSDP_PLANNER_LAYOUT_H

#include "mfsdp/Vocabulary.h"
#include "mfsdp/planner/Hardware.h"
#include "mfsdp/planner/OwnerAssignment.h"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace mfsdp::planner {

/// What a parameter is, for choosing its optimizer and placement.
enum class Role {
  HiddenMatrix, // 2-D weight of a linear layer
  Embedding,
  OutputHead,
  Norm,
  Bias,   // 1-D parameter of a linear layer
  Router, // MoE gate
  Expert, // routed expert matrix managed by FSDP
  OneD,   // any other 1-D tensor
  Other,  // rank >= 3
  External,
  Tied,
};
std::string_view roleName(Role r);

// Optimizers, placements, row layouts and policies are the shared
// vocabulary (mfsdp/Vocabulary.h), spelled with enumName / parseEnum.
using Optim = ::mfsdp::Optimizer;
using PlacementKind = ::mfsdp::Placement;
using ::mfsdp::NsSplit;
using ::mfsdp::PolicyKind;
using ::mfsdp::RowLayout;
using ::mfsdp::RowMode;

struct Param {
  std::string name;
  std::vector<int64_t> shape;
  int64_t elemBytes = 2; // parameter dtype size
  std::string kind;      // module kind as in the graph format ("linear", ...)
  int64_t unit = -1;     // unit index; -1 when tied
  bool tied = false, external = false, frozen = false;
  std::vector<std::string> externalAxes;

  // Planning results; a placement given on input is a pin and is kept.
  Role role = Role::Other;
  PlacementKind placement = PlacementKind::None;
  bool pinned = false;
  int64_t ownerRank = 0;           // Owner
  int64_t rowDim = 0;              // RowShard
  std::vector<int64_t> block;      // BlockShard
  Optim optim = Optim::None;

  int64_t numElements() const;
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
};

struct Unit {
  std::string name;
  int64_t group = 0;
  RowLayout layout = RowLayout::Flat;
};

struct Problem {
  std::vector<Param> params;
  std::vector<Unit> units; // forward order; Param::unit indexes it
};

struct Options {
  PolicyKind policy = PolicyKind::AdamW;
  int64_t zero = 3;
  int64_t shard = 1;     // dp_shard size S
  int64_t replicate = 1; // dp_replicate size R
  bool shardIntraNode = true; // the dp_shard group sits inside a node
  // What goes to Muon under mixed_muon_adamw (and which 2-D roles under muon).
  bool muonEmbedding = false, muonHead = false, muonRouter = false;
  std::vector<std::string> muonInclude; // parameters forced to Muon
  using RowMode = ::mfsdp::RowMode;
  // per_param: what the step runtime runs (flat is planned only; the
  // library refuses it).
  RowMode rowMode = RowMode::PerParam;
  std::vector<int64_t> blockShape; // non-empty: block-shard AdamW matrices
  OwnerStrategy strategy = OwnerStrategy::Balanced;
  int64_t groupUnits = 0; // 0: auto; 1: every unit alone; N: N units a group
  /// Auto grouping stops adding units once a group would gather more than
  /// this many bytes (a group is gathered at once).
  double groupMaxBytes = 8.0 * (1ull << 30);
  using Split = ::mfsdp::NsSplit;
  Split nsSplit = Split::Auto;
  int64_t nsSteps = 5;
  double sgdMomentum = 0;
  double replicateUnderBytes = 0; // replicate tensors smaller than this
  bool fp32Master = true; // fp32 masters for parameters narrower than f32
  HardwareProfile hw;
};

/// Decisions that are not per parameter.
struct Decisions {
  bool nsSplit = false;
  std::string nsSplitReason;
  OwnerResult owners; // statistics of the owner assignment
};

struct PlanError {
  int64_t param = -1; // index into Problem::params, or -1
  int64_t unit = -1;  // index into Problem::units, or -1
  std::string message;
};

/// Bytes per element of the fp32 master copy (0 for f32 parameters).
double masterBytesPerElem(const Param &p, const Options &opts);
/// Bytes per element of optimizer state (AdamW 8, Muon 4, SGD 4 with momentum).
double stateBytesPerElem(Optim o, const Options &opts);
/// Elementwise bytes an optimizer step moves per element of `p`.
double optimBytesPerElem(const Param &p, const Options &opts);

/// Classifies a parameter from its module kind, rank, tie and ownership.
Role classify(const Param &p);

/// Plans every parameter that is not pinned, and every unit. Returns false
/// with `err` set for an impossible request (Muon on a non-matrix, a pin
/// that does not fit the mesh, block shards that leave ranks empty, ...).
bool planLayouts(Problem &problem, const Options &options, Decisions &out,
                 PlanError &err);

/// Whether HSDP replicas should split the Newton-Schulz work of the placed
/// owners (Options::nsSplit forces it either way), with the cost model's
/// reasoning in `reason`.
bool decideNsSplit(const Problem &problem, const Options &options,
                   std::string &reason);

//===----------------------------------------------------------------------===//
// Accounting and the plan report
//===----------------------------------------------------------------------===//

struct RankStats {
  int64_t ownedMatrices = 0;
  std::vector<std::string> owned; // names of owned matrices
  double nsFlops = 0;
  double paramBytes = 0, gradBytes = 0, masterBytes = 0, optimBytes = 0;
  double optimSeconds = 0;
  std::map<std::string, double> commBytes; // per collective kind, per step
  double memory() const { return paramBytes + gradBytes + masterBytes + optimBytes; }
};

struct UnitStats {
  std::string name;
  int64_t group = 0;
  RowLayout layout = RowLayout::Flat;
  bool hasRowShards = false;
  double paddingPerParam = 0, paddingFlat = 0; // bytes per gather
  double copyBytesPerParam = 0;                // bytes copied per step
  std::string reason;
};

struct Report {
  /// The graph reported on (renderJson's `graph`, when not empty).
  std::string graph;
  PolicyKind policy = PolicyKind::AdamW;
  int64_t zero = 3, shard = 1, replicate = 1;
  std::string hardware;
  /// Newton-Schulz of the owned Muon matrices: steps and precision (the
  /// graph's #plan.muon), as the optimizer times are priced.
  int64_t nsSteps = 5;
  NsPrecision nsPrecision = NsPrecision::FP32;
  std::vector<RankStats> ranks; // one per dp_shard rank
  std::vector<UnitStats> units;
  int64_t groups = 0;
  std::map<std::string, int64_t> optimizerCounts; // "muon" -> tensors
  std::map<std::string, int64_t> placementCounts;
  // Imbalance: max over ranks / mean over ranks.
  double optimMax = 0, optimMean = 0;
  /// Among the j*S+1 costliest owner matrices some rank holds j+1: the
  /// largest such forced sum, plus the work every rank shares.
  double optimIndivisibleBound = 0;
  double optimBound = 0; // max(mean, indivisible bound)
  double memMax = 0, memMean = 0;
  double fanoutMax = 1, fanoutMean = 1; // over gather groups with owners
  bool nsSplit = false;
  std::string nsSplitReason;
  struct ExternalParam {
    std::string name;
    std::vector<std::string> axes;
    double bytes = 0;
  };
  std::vector<ExternalParam> externals;
};

/// Costs a placed problem (every managed parameter has a placement).
Report account(const Problem &problem, const Options &options,
               const Decisions &decisions);

/// Human-readable report.
std::string renderText(const Report &r);
/// The same as JSON (documented in docs/plan-report.md).
std::string renderJson(const Report &r);

/// Helpers shared with tests: bytes of padding when a unit's row shards are
/// laid out per parameter (torch.chunk) or flat (row-aligned, equal shards);
/// with `elemBytes` > 0, every element counted at that size instead of its
/// parameter's (the same layout in a reduce dtype).
double perParamPadding(const std::vector<const Param *> &params, int64_t world,
                       int64_t elemBytes = 0);
double flatPadding(const std::vector<const Param *> &params, int64_t world,
                   int64_t elemBytes = 0);

} // namespace mfsdp::planner

#endif // MFSDP_PLANNER_LAYOUT_H

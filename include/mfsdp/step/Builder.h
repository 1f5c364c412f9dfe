//===- Builder.h - Build one training step from a plan ----------*- C++ -*-===//
//
// Turns a placed model (planner::Problem after planLayouts) into the step
// program every rank runs: per gather group, gathers before use (ZeRO-3:
// again for backward), the trainer's forward, backward and recomputation,
// frees, gradient reduction (reduce-scatter for row shards, reduce to the
// owners for owner layouts, all-reduce over dp_replicate for HSDP),
// accumulation over microbatches, optimizer kernels per group, and for
// ZeRO-1/2 the all-gather of updated parameters. All collectives are
// synchronous and one per group and kind; bucketing and overlap come later.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_STEP_BUILDER_H
#define MFSDP_STEP_BUILDER_H

#include "mfsdp/planner/Layout.h"
#include "mfsdp/step/Step.h"

#include <string>
#include <string_view>
#include <vector>

namespace mfsdp::step {

struct UnitCost {
  double fwdFlopsPerToken = 0, bwdFlopsPerToken = 0, actBytesPerToken = 0;
  bool recompute = false;
  /// The forward's kernels per token (mfsdp/Kernel.h), shared by the
  /// unit's compute ops for the cost model; may be empty.
  KernelList kernels;
};

/// The two forms of `_zeropower_via_newtonschulz` in torch/optim/_muon.py:
/// Addmm, the only one of torch 2.9 and `use_addmm=True` later
/// (`B = addmm(A, A, A, beta=b, alpha=c)`, `X = addmm(X, B, X, beta=a)`);
/// Mm, the `use_addmm=False` default of later releases
/// (`B = b * A + c * A @ A`, `X = a * X + B @ X`: two mm and five pointwise
/// ops per iteration).
enum class DTensorForm { Addmm, Mm };

struct BuildOptions {
  int64_t tokens = 4096;     // tokens per rank per microbatch
  int64_t microbatches = 1;
  /// Baseline "fsdp2": Muon matrices stay row-sharded; the optimizer
  /// all-gathers each one's gradient and every rank runs Newton-Schulz on
  /// the whole matrix (FSDP2 with torch.optim.Muon on DTensor shards, as the
  /// gathered baseline).
  bool gatheredMuon = false;
  /// Parameters whose optimizer is Muon in the gathered baseline (names).
  std::vector<std::string> gatheredMuonParams;
  /// Baseline "fsdp2-dtensor" (with gatheredMuon): instead of gathering,
  /// torch.optim.Muon runs on the DTensor row shards and DTensor's sharding
  /// propagation splits each Newton-Schulz matmul across the ranks, with the
  /// redistributions that dtensorNewtonSchulz() derives, serialised with
  /// the compute.
  bool dtensorMuon = false;
  /// Which form of torch.optim.Muon's Newton-Schulz the DTensor baseline
  /// replays (DTensorForm); "fsdp2-dtensor-mm" selects Mm.
  DTensorForm dtensorForm = DTensorForm::Addmm;
  /// FSDP2's copies: every per_param unit copies its row shards into and
  /// out of the collective buffers, a unit of one row-shard parameter too
  /// (the baselines). Off, a unit copies only where the step runtime
  /// stages, a unit of two or more row-shard parameters (a lone one is
  /// gathered into its parameter and reduced from its gradient in place).
  bool fsdp2Copies = false;
  /// Bytes an element of the gradient reductions put on the wire (the
  /// reduce dtype: 4 for fp32, 2 for bf16); 0: each parameter's own dtype.
  int64_t reduceElemBytes = 0;
};

/// DTensor placements of a 2-D tensor on a 1-D mesh.
enum class DPlacement { Replicate, Shard0, Shard1, Partial };
std::string_view dplacementName(DPlacement p);

/// One DTensor redistribution of an operand before an op: what runs at run
/// time (Shard->Replicate all-gather, Shard(i)->Shard(j) all-to-all,
/// Partial->Replicate all-reduce, Partial->Shard reduce-scatter;
/// Replicate->anything is a local slice and is not listed).
struct DTensorRedistribute {
  std::string operand; // "X", "X^T", "A", "B", "update", "norm"; in the
                       // Mm form also "cA" and "BX" (see DTensorNsOp)
  DPlacement from = DPlacement::Replicate, to = DPlacement::Replicate;
  CollKind coll = CollKind::AllGather;
  bool allToAll = false; // Shard(i) -> Shard(j); coll = AllGather of the
                         // same per-rank volume (see collBytes)
  /// Bytes for the cost model: the full tensor for all-gather,
  /// reduce-scatter and all-reduce; for an all-to-all one rank's shard
  /// (each rank sends (W-1)/W of it, as an all-gather of that size does).
  double collBytes = 0;
  double localBytes = 0; // the operand's bytes on one rank afterwards
};

/// One op of torch.optim.Muon's Newton-Schulz under DTensor, in program
/// order: the norm, then per iteration the form's ops, then "update"
/// (param.add_ of the result). Addmm form: "X @ X^T", "addmm(A, A, A)",
/// "addmm(X, B, X)". Mm form: "X @ X^T" (result A), "b * A" (bA),
/// "c * A" (cA), "cA @ A" (cAA), "bA + cAA" (B), "a * X" (aX), "B @ X"
/// (BX), "aX + BX" (the next X).
struct DTensorNsOp {
  std::string op;
  int64_t iteration = -1;  // -1: before / after the iterations
  std::vector<DTensorRedistribute> redistributes; // before the op
  /// The strategy DTensor chose: placements of output and inputs.
  DPlacement out = DPlacement::Replicate;
  std::vector<DPlacement> inputs;
  double flops = 0;      // GEMM FLOPs on the busiest rank
  double outBytes = 0;   // the output's bytes on one rank
  /// Mm form: the tensors read (in argument order; "X^T" is a view of X)
  /// and the one written; pointwise ops' bytes read and written on one
  /// rank (0 for matmuls).
  std::vector<std::string> args;
  std::string result;
  double bytes = 0;
};

/// torch.optim.Muon's Newton-Schulz (addmm form) on a bf16 DTensor of shape
/// rows x cols sharded Shard(0) over `world` ranks of a 1-D mesh: X is
/// transposed when rows > cols, then each matmul takes the strategy
/// DTensor's sharding propagation picks (mm/addmm strategies of
/// torch/distributed/tensor/_ops/_matrix_ops.py, costed by
/// redistribute_cost of _collective_utils.py with its own topology
/// constants, ties to the first strategy). docs/benchmarks.md has the
/// derivation.
/// `form` Mm replays the `use_addmm=False` form: the matmuls as above
/// (mm strategies), the pointwise ops by pointwise_strategy of
/// torch/distributed/tensor/_ops/_pointwise_ops.py: the output follows the
/// operand with the most shards; a scalar multiple of a Partial stays
/// Partial, Partial + Partial stays Partial, and Shard + Partial
/// reduce-scatters the Partial operand to the Shard.
std::vector<DTensorNsOp> dtensorNewtonSchulz(int64_t rows, int64_t cols,
                                             int64_t world, int64_t nsSteps,
                                             bool intraNode = true,
                                             DTensorForm form = DTensorForm::Addmm);

/// Builds the step. `units` parallels problem.units.
Step buildStep(const planner::Problem &problem, const planner::Options &options,
               const planner::Decisions &decisions,
               const std::vector<UnitCost> &units, const BuildOptions &build,
               const std::string &name);

} // namespace mfsdp::step

#endif // MFSDP_STEP_BUILDER_H

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

namespace mfsdp::step {

struct UnitCost {
  double fwdFlopsPerToken = 0, bwdFlopsPerToken = 0, actBytesPerToken = 0;
  bool recompute = false;
};

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
};

/// Builds the step. `units` parallels problem.units.
Step buildStep(const planner::Problem &problem, const planner::Options &options,
               const planner::Decisions &decisions,
               const std::vector<UnitCost> &units, const BuildOptions &build,
               const std::string &name);

} // namespace mfsdp::step

#endif // MFSDP_STEP_BUILDER_H

//===- Autotune.h - Choosing schedule options with the cost model -*- C++ -*-===//
//
// Searches, per plan, the options the cost model says matter most for step
// time: the HSDP split of the data-parallel ranks (dp_replicate x
// dp_shard), the bucket size and the gather prefetch depth. Each candidate
// runs the default pipeline on a copy of the module and is simulated; the
// one with the shortest predicted steady-state step whose predicted peak
// memory fits the cap wins. Coordinate search: the split first (at the
// given bucket size and prefetch), then bucket size x prefetch on the best
// split, so the cost is (splits + buckets x prefetches) pipeline runs.
//
// Every time here is a PREDICTION of the cost model (lib/cost), not a
// measurement; the search is only as good as the model.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_PASSES_AUTOTUNE_H
#define MFSDP_PASSES_AUTOTUNE_H

#include "mfsdp/cost/Simulator.h"

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mfsdp {

struct AutotuneCandidate {
  std::string mesh;        // the mesh option tried ("dp_replicate=2,dp_shard=4")
  double bucketMB = 0;     // bucket-mb (0: no limit)
  int64_t prefetch = 1;    // prefetch
  bool ok = false;         // planned and simulated
  std::string error;       // why not (first diagnostic), when !ok
  double stepSeconds = 0;  // predicted step
  double steadySeconds = 0; // predicted steady-state step (the objective)
  double peakBytes = 0;    // predicted peak per rank
  bool fits = false;       // peakBytes <= the cap

  /// The options to append to a `--mfsdp-pipeline` string for it.
  std::string options() const;
};

struct AutotuneResult {
  std::string error;                 // why no search ran (bad options, no mesh)
  std::vector<AutotuneCandidate> tried; // in the order tried; [0] the defaults
  int64_t best = -1;                 // index in `tried`; -1: none fits
  double capBytes = 0;               // the memory cap used
};

/// Searches around `pipeline` (a `--mfsdp-pipeline` options string; its
/// mesh, bucket-mb and prefetch are the defaults the result is compared
/// with) for `module` (one plan.graph, not yet planned) on `profile`.
/// `capBytes` > 0 caps the predicted peak per rank; 0 takes the profile's
/// HBM capacity. The module is not changed.
/// `bucketsMB` are the bucket sizes tried (besides the pipeline's own).
AutotuneResult autotune(mlir::ModuleOp module, const std::string &pipeline,
                        const cost::SimProfile &profile, double capBytes = 0,
                        std::vector<double> bucketsMB = {0, 25, 100, 400});

/// The search as a table: every candidate with its predicted step, steady
/// step and peak, the winner marked, and the predicted gain of the winner
/// over the defaults. Every time is labelled predicted.
std::string renderAutotune(const AutotuneResult &r);

} // namespace mfsdp

#endif // MFSDP_PASSES_AUTOTUNE_H

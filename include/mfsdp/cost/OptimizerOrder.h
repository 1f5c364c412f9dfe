//===- OptimizerOrder.h - Choosing the optimizer phase's order ---*- C++ -*-===//
//
// The optimizer phase can run its groups in the order their reductions land
// (the last group first: no kernel waits for a reduction) or first unit
// first (the group the next step gathers first is ready early, so that
// gather overlaps the rest of the phase). The best order fills the wait for
// the last reduction with a few groups in landing order and then runs the
// rest first unit first; how many is a question for the cost model.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_COST_OPTIMIZERORDER_H
#define MFSDP_COST_OPTIMIZERORDER_H

#include "mfsdp/cost/Simulator.h"
#include "mfsdp/step/Schedule.h"

#include <string>
#include <vector>

namespace mfsdp::cost {

struct OrderCandidate {
  int64_t fill = -1;              // OverlapOptions::optimizerFill
  double stepSeconds = 0;         // predicted, this step alone
  double firstGroupReady = 0;     // predicted
  double steadyStepSeconds = 0;   // predicted, see SimResult
};

struct OrderChoice {
  bool ok = false;
  std::string error;                     // the simulator's, if !ok
  int64_t fill = -1;                     // the chosen optimizerFill
  std::vector<OrderCandidate> candidates; // in the order tried
};

/// Schedules a copy of `unscheduled` (a built, bucketed step) with `options`
/// for each optimizerFill in {-1, 0, 1, ..., min(groups, maxFill)},
/// simulates each on `profile`, and picks the lowest steadyStepSeconds; on
/// ties (within 1e-9 s) the earlier firstGroupReady, then the one tried
/// first.
OrderChoice chooseOptimizerFill(const step::Step &unscheduled,
                                const step::OverlapOptions &options,
                                const SimProfile &profile,
                                int64_t maxFill = 8);

/// chooseOptimizerFill on `s` itself, without a copy: schedules `s`
/// (step::scheduleOverlap) with `options` and the chosen optimizerFill,
/// the candidates scheduled from one shared schedule of the ops before the
/// optimizer phase. When a candidate cannot be simulated, `ok` is false,
/// `error` the simulator's and `s` is scheduled for that candidate.
OrderChoice scheduleOptimizerFill(step::Step &s,
                                  const step::OverlapOptions &options,
                                  const SimProfile &profile,
                                  int64_t maxFill = 8);

} // namespace mfsdp::cost

#endif // MFSDP_COST_OPTIMIZERORDER_H

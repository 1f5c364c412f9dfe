//===- RuntimeProgram.h - The scheduled step as the runtime's program -*- C++ -*-===//
//
// Lowers a scheduled step program (after mfsdp-schedule-overlap and
// mfsdp-plan-memory) into the table the runtime executes (mfsdp_program in
// runtime.h). So far the optimizer phase: the waits for reductions still in
// flight, each group's optimizer kernels, the ns_split broadcasts and the
// ZeRO-1/2 gathers of the updated parameters, in the schedule's order.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_STEP_RUNTIMEPROGRAM_H
#define MFSDP_STEP_RUNTIMEPROGRAM_H

#include "mfsdp/runtime.h"
#include "mfsdp/step/Step.h"

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace mfsdp::step {

/// One op of the runtime's program, its parameters owned.
struct ProgramOp {
  int32_t kind = MFSDP_PROGRAM_OPTIMIZER;
  int32_t unit = -1;
  int32_t group = -1;
  int32_t optimizer = MFSDP_OPT_NONE;
  int32_t onlyRank = -1;
  std::vector<int32_t> params;
  std::string from; // the sched op it was lowered from (its name)
};

/// The runtime's program: ops and the ranges of the hooks it covers.
struct RuntimeProgram {
  std::vector<ProgramOp> ops;
  std::vector<mfsdp_program_hook> hooks;
  std::string error; // set when the step cannot be lowered

  /// The C view (mfsdp_plan::program); valid while this object and the
  /// returned storage live and neither changes.
  struct View {
    std::vector<mfsdp_program_op> ops;
    mfsdp_program program{};
  };
  void view(View &out) const;
};

/// The optimizer phase of `step` as the runtime's program for `plan` (its
/// parameters found by name):
///  - a Wait for a gradient reduction of an earlier phase: one
///    MFSDP_PROGRAM_WAIT_REDUCTION per unit the reduction carries;
///  - an Optimizer op (adamw, sgd, muon): per unit of its parameters (of
///    the group's replicated tensors when it names none), one
///    MFSDP_PROGRAM_OPTIMIZER per optimizer they are stepped by, with the
///    op's only_rank;
///  - the all-gather of updated owned matrices over dp_replicate (ns_split):
///    MFSDP_PROGRAM_BROADCAST_UPDATES per unit of the group;
///  - a gather of updated parameters over dp_shard (ZeRO-1/2):
///    MFSDP_PROGRAM_GATHER per unit of the group, once per unit.
/// Allocs and frees lower to nothing (the memory plan placed the buffers).
/// Under ZeRO-1/2 a unit that the schedule gathers nowhere (replicated
/// tensors only) is gathered at the end. Fails (error) on an op it does
/// not know, a parameter not in the plan, or a parameter stepped twice.
RuntimeProgram lowerOptimizerProgram(const Step &step, const mfsdp_plan &plan);

} // namespace mfsdp::step

#endif // MFSDP_STEP_RUNTIMEPROGRAM_H

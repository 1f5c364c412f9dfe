//===- ScheduleStages.h - The schedule passes on an in-memory step -*- C++ -*-===//
//
// What each schedule pass does to a step already read from its sched.step:
// the passes (mfsdp-bucket-collectives, mfsdp-schedule-overlap,
// mfsdp-plan-memory, mfsdp-verify-schedule) read the step, run their stage
// and write it back; mfsdp-schedule-step, which the default pipeline runs,
// reads the step once, runs the four stages on it and writes it once, with
// the same result as the four passes in a row; and
// mfsdp-build-and-schedule-step, the default pipeline's, builds the step
// and schedules it before it is ever written.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_PASSES_SCHEDULESTAGES_H
#define MFSDP_PASSES_SCHEDULESTAGES_H

#include "passes/Passes.h"
#include "dialects/plan/PlanOps.h"

#include "mfsdp/step/Schedule.h"
#include "mfsdp/step/Step.h"

#include <optional>
#include <string>
#include <vector>

namespace mfsdp {

/// The step of one planned graph as mfsdp-build-step builds it (before it
/// is written); fails with a diagnostic on `graph` or its options.
mlir::FailureOr<step::Step> buildStage(plan::GraphOp graph,
                                       const BuildStepOptions &options);

/// Records on `op` the dtype every gradient reduction of its step counts
/// (mfsdp-build-step's reduce-dtype): f32 or bf16 as `reduce_dtype`,
/// nothing for param (each parameter its own dtype).
void recordReduceDtype(sched::StepOp op, ReduceDTypeOption dtype);

/// mfsdp-schedule-step's four stages on `s`, whose sched.step `op` has an
/// empty body: bucket, overlap, plan memory, verify, then `s` written into
/// `op` (each op released as it is written; an op whose origin indexes
/// `locations` gets that location, the others `op`'s) with its memory plan
/// and the verifier's findings. Fails with the stages' diagnostics.
mlir::LogicalResult scheduleStages(sched::StepOp op, step::Step &&s,
                                   const ScheduleStepOptions &options,
                                   llvm::ArrayRef<mlir::Location> locations);

/// Buckets the collectives of `s`; fails with a diagnostic on `op` when
/// the options are invalid.
mlir::LogicalResult bucketStage(sched::StepOp op, step::Step &s,
                                const BucketCollectivesOptions &options);

/// Splits the collectives of `s` into async starts and waits, prefetches
/// and orders the optimizer; fails with a diagnostic on `op` when the
/// options are invalid, the step is already scheduled or cannot be
/// simulated.
mlir::LogicalResult overlapStage(sched::StepOp op, step::Step &s,
                                 const ScheduleOverlapOptions &options);

/// Records `plan` (arena and peak bytes per rank) on `op`, whose body
/// already holds the planned step.
void setMemoryPlan(sched::StepOp op, const step::MemoryPlan &plan);

/// Verifies `s`, which `op`'s body holds op for op: each issue becomes an
/// error on its op (or on `op`). Fails when there is any.
mlir::LogicalResult verifyStage(sched::StepOp op, const step::Step &s,
                                const VerifyScheduleOptions &options);

/// verifyStage in two halves, so that the step can be checked before it is
/// written (and released as it is): what is wrong with `s` (its schedule,
/// then the runtime program it lowers to), found without a diagnostic...
struct VerifyFindings {
  std::vector<step::ScheduleIssue> issues;
  std::optional<std::string> program; // an error on the step op
};
VerifyFindings checkStage(sched::StepOp op, const step::Step &s,
                          const VerifyScheduleOptions &options);
/// ...and reported once `op`'s body holds the step op for op.
mlir::LogicalResult reportStage(sched::StepOp op, const VerifyFindings &f);

} // namespace mfsdp

#endif // MFSDP_PASSES_SCHEDULESTAGES_H

//===- ScheduleStages.h - The schedule passes on an in-memory step -*- C++ -*-===//
//
// What each schedule pass does to a step already read from its sched.step:
// the passes (mfsdp-bucket-collectives, mfsdp-schedule-overlap,
// mfsdp-plan-memory, mfsdp-verify-schedule) read the step, run their stage
// and write it back; mfsdp-schedule-step reads the step once, runs the
// four stages on it and writes it once, with the same result as the four
// passes in a row; and
// mfsdp-build-and-schedule-step builds the step and schedules it before it
// is ever written (the default pipeline runs it as a stage of
// mfsdp-plan-and-schedule-step, passes/PlanStages.h).
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_PASSES_SCHEDULESTAGES_H
#define MFSDP_PASSES_SCHEDULESTAGES_H

#include "passes/Passes.h"
#include "dialects/plan/PlanOps.h"
#include "dialects/plan/PlannerBridge.h"

#include "mfsdp/cost/Simulator.h"
#include "mfsdp/step/RuntimeMemory.h"
#include "mfsdp/step/Schedule.h"
#include "mfsdp/step/Step.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mfsdp {

/// The step of one planned graph as mfsdp-build-step builds it (before it
/// is written); fails with a diagnostic on `graph` or its options.
/// `planned`: the graph as readGraph reads it, given by the caller that
/// has it (the layout stage before), else read here.
mlir::FailureOr<step::Step> buildStage(plan::GraphOp graph,
                                       const BuildStepOptions &options,
                                       BridgedGraph *planned = nullptr);

/// Records on `op` the dtype every gradient reduction of its step counts
/// (mfsdp-build-step's reduce-dtype): f32 or bf16 as `reduce_dtype`,
/// nothing for param (each parameter its own dtype).
void recordReduceDtype(sched::StepOp op, ReduceDTypeOption dtype);

/// The Newton-Schulz precision a pass plans or prices with: `recorded`
/// (what the graph's #plan.muon or the step's ns_precision says; nullopt:
/// nothing recorded, fp32) unless `option` names one. An option that
/// contradicts a recorded precision is an error on `at` from `pass`: the
/// step library runs the recorded one, and a plan priced at another would
/// be wrong without a word.
mlir::FailureOr<NsPrecision> resolveNsPrecision(mlir::Operation *at, llvm::StringRef pass,
                                                NsPrecisionOption option,
                                                std::optional<NsPrecision> recorded,
                                                llvm::StringRef recordedWhere);

/// The precision `op` is priced at (resolveNsPrecision against its
/// ns_precision), recorded on it as `ns_precision` when an option names
/// bf16 for a step that records none (so that the step library refuses a
/// graph that runs another).
mlir::FailureOr<NsPrecision> stepNsPrecision(sched::StepOp op, llvm::StringRef pass,
                                             NsPrecisionOption option);

/// Records `precision` on `op` (`ns_precision`, only when bf16: without
/// it a step runs fp32).
void recordNsPrecision(sched::StepOp op, NsPrecision precision);

/// `profile` pricing Newton-Schulz at the precision `op` records (fp32
/// without `ns_precision`), as the schedule priced it.
cost::SimProfile stepProfile(sched::StepOp op, cost::SimProfile profile);

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
/// With `planLibraryMemory`, once the program checks out, `libraryMemory`
/// makes the step library's memory plan over it when called (after the step
/// is written and its op array released: the plan needs only the program);
/// a step that records one has it checked instead.
struct VerifyFindings {
  std::vector<step::ScheduleIssue> issues;
  std::optional<std::string> program; // an error on the step op
  std::function<std::optional<step::RuntimeMemoryPlan>()> libraryMemory;
};
/// `keepGrads` and `buckets` are mfsdp-plan-memory's `accumulate` and
/// `buckets` for that plan.
VerifyFindings checkStage(sched::StepOp op, const step::Step &s,
                          const VerifyScheduleOptions &options,
                          bool planLibraryMemory = false, bool keepGrads = false,
                          bool buckets = true);
/// The step library's memory plan for `s`, the planned step of `op`
/// (mfsdp-plan-memory): its buffers placed over the lifetimes of the
/// program the library lowers `s` to, gradients kept with `keepGrads` or
/// microbatches, with the step's buckets or (without `buckets`) one
/// collective per parameter; nothing where no library can be built from
/// the module (the emitter then says why).
std::optional<step::RuntimeMemoryPlan> libraryMemoryStage(sched::StepOp op,
                                                          const step::Step &s,
                                                          bool keepGrads, bool buckets);
/// ...and reported once `op`'s body holds the step op for op.
mlir::LogicalResult reportStage(sched::StepOp op, const VerifyFindings &f);

} // namespace mfsdp

#endif // MFSDP_PASSES_SCHEDULESTAGES_H

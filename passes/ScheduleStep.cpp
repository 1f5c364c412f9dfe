//===- ScheduleStep.cpp - mfsdp-schedule-step -----------------------------===//
#include "passes/Passes.h"
#include "passes/ScheduleStages.h"
#include "dialects/sched/StepBridge.h"

#include "mfsdp/emit/RuntimePlan.h"
#include "mfsdp/step/Schedule.h"

namespace mfsdp {
#define GEN_PASS_DEF_SCHEDULESTEP
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;

LogicalResult mfsdp::scheduleStages(sched::StepOp op, step::Step &&s,
                                    const ScheduleStepOptions &options,
                                    ArrayRef<Location> locations) {
  BucketCollectivesOptions bucket;
  bucket.bucketMB = options.bucketMB;
  ScheduleOverlapOptions overlap;
  overlap.prefetch = options.prefetch;
  overlap.maxInflightMB = options.maxInflightMB;
  overlap.gatherComm = options.gatherComm;
  overlap.optimizerOrder = options.optimizerOrder;
  overlap.hardware = options.hardware;
  overlap.nsPrecision = options.nsPrecision;
  VerifyScheduleOptions verify;
  verify.memoryCapMB = options.memoryCapMB;
  if (failed(bucketStage(op, s, bucket)) || failed(overlapStage(op, s, overlap)))
    return failure();
  step::MemoryPlan plan = step::planMemory(s);
  // Checked before it is written, so that each op is released as it is
  // written; the findings are reported on the written ops.
  // The check also places the step library's buffers (as
  // mfsdp-plan-memory does), over the program it has lowered.
  recordRuntimeMemory(op, nullptr);
  VerifyFindings findings = checkStage(op, s, verify, /*planLibraryMemory=*/true,
                                       options.accumulate, options.buckets);
  // Ops a stage made keep the step's location, and a wait its
  // collective's, as when each pass writes and the next one reads.
  if (failed(rewriteStep(op, std::move(s), locations)))
    return failure();
  // Its ops are written and gone; the rest (buffers, names) goes too,
  // before the library's memory plan.
  { step::Step written = std::move(s); }
  setMemoryPlan(op, plan);
  if (findings.libraryMemory) {
    std::optional<step::RuntimeMemoryPlan> library = findings.libraryMemory();
    findings.libraryMemory = nullptr; // the program goes
    recordRuntimeMemory(op, library ? &*library : nullptr);
  }
  return reportStage(op, findings);
}

namespace {
struct ScheduleStepPass : public mfsdp::impl::ScheduleStepBase<ScheduleStepPass> {
  using Base::Base;
  void runOnOperation() override {
    sched::StepOp op = getOperation();
    step::Step s;
    SmallVector<Location> locations;
    if (failed(readStep(op, s, &locations)))
      return signalPassFailure();
    // The body is written anew from `s`: drop the old one now rather than
    // hold both through the stages (on large steps the IR is the larger).
    op.getBody().front().clear();
    ScheduleStepOptions options;
    options.bucketMB = bucketMB;
    options.prefetch = prefetch;
    options.maxInflightMB = maxInflightMB;
    options.gatherComm = gatherComm;
    options.optimizerOrder = optimizerOrder;
    options.hardware = hardware;
    options.nsPrecision = nsPrecision;
    options.memoryCapMB = memoryCapMB;
    options.accumulate = accumulate;
    options.buckets = buckets;
    if (failed(scheduleStages(op, std::move(s), options, locations)))
      return signalPassFailure();
  }
};
} // namespace

//===- ScheduleStep.cpp - mfsdp-schedule-step -----------------------------===//
#include "passes/Passes.h"
#include "passes/ScheduleStages.h"
#include "dialects/sched/StepBridge.h"

#include "mfsdp/step/Schedule.h"

namespace mfsdp {
#define GEN_PASS_DEF_SCHEDULESTEP
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;

namespace {
struct ScheduleStepPass : public mfsdp::impl::ScheduleStepBase<ScheduleStepPass> {
  using Base::Base;
  void runOnOperation() override {
    BucketCollectivesOptions bucket;
    bucket.bucketMB = bucketMB;
    ScheduleOverlapOptions overlap;
    overlap.prefetch = prefetch;
    overlap.maxInflightMB = maxInflightMB;
    overlap.gatherComm = gatherComm;
    overlap.optimizerOrder = optimizerOrder;
    overlap.hardware = hardware;
    VerifyScheduleOptions verify;
    verify.memoryCapMB = memoryCapMB;

    sched::StepOp op = getOperation();
    step::Step s;
    SmallVector<Location> locations;
    if (failed(readStep(op, s, &locations)))
      return signalPassFailure();
    // The body is written anew from `s`: drop the old one now rather than
    // hold both through the stages (on large steps the IR is the larger).
    op.getBody().front().clear();
    if (failed(bucketStage(op, s, bucket)) ||
        failed(overlapStage(op, s, overlap)))
      return signalPassFailure();
    step::MemoryPlan plan = step::planMemory(s);
    // Checked before it is written, so that each op is released as it is
    // written; the findings are reported on the written ops.
    VerifyFindings findings = checkStage(op, s, verify);
    // Ops a stage made keep the step's location, and a wait its
    // collective's, as when each pass writes and the next one reads.
    if (failed(rewriteStep(op, std::move(s), locations)))
      return signalPassFailure();
    setMemoryPlan(op, plan);
    if (failed(reportStage(op, findings)))
      return signalPassFailure();
  }
};
} // namespace

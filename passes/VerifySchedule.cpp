//===- VerifySchedule.cpp - mfsdp-verify-schedule -------------------------===//
#include "passes/Passes.h"
#include "passes/ScheduleStages.h"
#include "dialects/sched/StepBridge.h"

#include "mfsdp/step/Schedule.h"

namespace mfsdp {
#define GEN_PASS_DEF_VERIFYSCHEDULE
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;

LogicalResult mfsdp::verifyStage(sched::StepOp op, const step::Step &s,
                                 const VerifyScheduleOptions &options) {
  bool failedAny = false;
  SmallVector<Operation *> ops;
  for (Operation &child : op.getBody().front())
    ops.push_back(&child);
  for (const step::ScheduleIssue &issue : step::verifySchedule(
           s, static_cast<double>(options.memoryCapMB) * 1024 * 1024)) {
    Operation *at = issue.op >= 0 && issue.op < static_cast<int64_t>(ops.size())
                        ? ops[issue.op]
                        : op.getOperation();
    at->emitError(issue.message);
    failedAny = true;
  }
  return failure(failedAny);
}

namespace {
struct VerifySchedulePass
    : public mfsdp::impl::VerifyScheduleBase<VerifySchedulePass> {
  using Base::Base;
  void runOnOperation() override {
    sched::StepOp op = getOperation();
    step::Step s;
    if (failed(readStep(op, s)))
      return signalPassFailure();
    VerifyScheduleOptions options;
    options.memoryCapMB = memoryCapMB;
    if (failed(verifyStage(op, s, options)))
      return signalPassFailure();
    markAllAnalysesPreserved();
  }
};
} // namespace

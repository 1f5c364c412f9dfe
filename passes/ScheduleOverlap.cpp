//===- ScheduleOverlap.cpp - mfsdp-schedule-overlap -----------------------===//
#include "passes/Passes.h"
#include "passes/ScheduleStages.h"
#include "dialects/sched/StepBridge.h"

#include "mfsdp/cost/OptimizerOrder.h"
#include "mfsdp/step/Schedule.h"

namespace mfsdp {
#define GEN_PASS_DEF_SCHEDULEOVERLAP
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;

LogicalResult mfsdp::overlapStage(sched::StepOp op, step::Step &s,
                                  const ScheduleOverlapOptions &options) {
  if (options.prefetch < 0 || options.maxInflightMB < 0)
    return emitOptionError(op.getContext(), "mfsdp-schedule-overlap",
                           options.prefetch < 0 ? "prefetch" : "max-inflight-mb")
           << "expected 0 or more, got "
           << (options.prefetch < 0 ? options.prefetch : options.maxInflightMB);
  const cost::SimProfile *found = planner::findHardwareProfile(options.hardware);
  if (!found)
    return op.emitError(planner::unknownHardwareMessage(options.hardware));
  cost::SimProfile profile = *found;
  FailureOr<NsPrecision> precision =
      stepNsPrecision(op, "mfsdp-schedule-overlap", options.nsPrecision);
  if (failed(precision))
    return failure();
  profile.nsBf16 = *precision == NsPrecision::BF16;
  step::OverlapOptions o;
  o.prefetch = options.prefetch;
  o.maxInflightBytes = static_cast<double>(options.maxInflightMB) * 1024 * 1024;
  o.separateGatherComm = options.gatherComm == GatherComm::Separate;
  for (const step::Op &x : s.ops)
    if (x.kind == step::OpKind::Collective && x.async)
      return op.emitError("is already scheduled (it has async collectives)");
  if (options.optimizerOrder == OptimizerOrder::FirstUnits) {
    // Schedules `s` with the fill the simulator picks, without a copy.
    cost::OrderChoice choice = cost::scheduleOptimizerFill(s, o, profile);
    if (!choice.ok)
      return op.emitError("cannot simulate the step to order its optimizer: ")
             << choice.error;
    return success();
  }
  step::scheduleOverlap(s, o);
  return success();
}

namespace {
struct ScheduleOverlapPass
    : public mfsdp::impl::ScheduleOverlapBase<ScheduleOverlapPass> {
  using Base::Base;
  void runOnOperation() override {
    ScheduleOverlapOptions options;
    options.prefetch = prefetch;
    options.maxInflightMB = maxInflightMB;
    options.gatherComm = gatherComm;
    options.optimizerOrder = optimizerOrder;
    options.hardware = hardware;
    options.nsPrecision = nsPrecision;
    sched::StepOp op = getOperation();
    step::Step s;
    SmallVector<Location> locations;
    if (failed(readStep(op, s, &locations)) ||
        failed(overlapStage(op, s, options)) ||
        failed(rewriteStep(op, s, locations)))
      return signalPassFailure();
  }
};
} // namespace

//===- ScheduleOverlap.cpp - mfsdp-schedule-overlap -----------------------===//
#include "passes/Passes.h"
#include "dialects/sched/StepBridge.h"

#include "mfsdp/cost/OptimizerOrder.h"
#include "mfsdp/step/Schedule.h"

namespace mfsdp {
#define GEN_PASS_DEF_SCHEDULEOVERLAP
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;

namespace {
struct ScheduleOverlapPass
    : public mfsdp::impl::ScheduleOverlapBase<ScheduleOverlapPass> {
  using Base::Base;
  void runOnOperation() override {
    step::OverlapOptions o;
    if (prefetch < 0 || maxInflightMB < 0) {
      getOperation().emitError("prefetch and max-inflight-mb must be >= 0");
      return signalPassFailure();
    }
    const cost::SimProfile *profile = planner::findHardwareProfile(hardware);
    if (!profile) {
      getOperation().emitError(planner::unknownHardwareMessage(hardware));
      return signalPassFailure();
    }
    o.prefetch = prefetch;
    o.maxInflightBytes = static_cast<double>(maxInflightMB) * 1024 * 1024;
    o.separateGatherComm = gatherComm == GatherComm::Separate;
    sched::StepOp op = getOperation();
    step::Step s;
    SmallVector<Location> locations;
    if (failed(readStep(op, s, &locations)))
      return signalPassFailure();
    for (const step::Op &x : s.ops)
      if (x.kind == step::OpKind::Collective && x.async) {
        op.emitError("is already scheduled (it has async collectives)");
        return signalPassFailure();
      }
    step::OverlapOptions so = o;
    if (optimizerOrder == OptimizerOrder::FirstUnits) {
      cost::OrderChoice choice = cost::chooseOptimizerFill(s, o, *profile);
      if (!choice.ok) {
        op.emitError("cannot simulate the step to order its optimizer: ")
            << choice.error;
        return signalPassFailure();
      }
      so.optimizerFill = choice.fill;
    }
    step::scheduleOverlap(s, so);
    if (failed(rewriteStep(op, s, locations)))
      return signalPassFailure();
  }
};
} // namespace

//===- PlanMemory.cpp - mfsdp-plan-memory ---------------------------------===//
#include "passes/Passes.h"
#include "passes/StepBridge.h"

#include "mfsdp/step/Schedule.h"

namespace mfsdp {
#define GEN_PASS_DEF_PLANMEMORY
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;

namespace {
struct PlanMemoryPass : public mfsdp::impl::PlanMemoryBase<PlanMemoryPass> {
  using Base::Base;
  void runOnOperation() override {
    SmallVector<sched::StepOp> steps(getOperation().getOps<sched::StepOp>());
    for (sched::StepOp op : steps) {
      step::Step s;
      if (failed(readStep(op, s)))
        return signalPassFailure();
      step::MemoryPlan plan = step::planMemory(s);
      OpBuilder b(op);
      sched::StepOp fresh = writeStep(b, op.getLoc(), s);
      fresh.setArenaBytesAttr(b.getDenseF64ArrayAttr(plan.arenaBytes));
      fresh.setPeakBytesAttr(b.getDenseF64ArrayAttr(plan.peakBytes));
      op.erase();
    }
  }
};
} // namespace

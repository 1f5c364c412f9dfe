//===- PlanMemory.cpp - mfsdp-plan-memory ---------------------------------===//
#include "passes/Passes.h"
#include "dialects/sched/StepBridge.h"

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
    sched::StepOp op = getOperation();
    step::Step s;
    SmallVector<Location> locations;
    if (failed(readStep(op, s, &locations)))
      return signalPassFailure();
    step::MemoryPlan plan = step::planMemory(s);
    if (failed(rewriteStep(op, s, locations)))
      return signalPassFailure();
    Builder b(op.getContext());
    op.setArenaBytesAttr(b.getDenseF64ArrayAttr(plan.arenaBytes));
    op.setPeakBytesAttr(b.getDenseF64ArrayAttr(plan.peakBytes));
  }
};
} // namespace

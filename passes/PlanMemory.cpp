//===- PlanMemory.cpp - mfsdp-plan-memory ---------------------------------===//
#include "passes/Passes.h"
#include "passes/ScheduleStages.h"
#include "dialects/sched/StepBridge.h"

#include "mfsdp/emit/RuntimePlan.h"
#include "mfsdp/step/Schedule.h"

#include <cmath>

namespace mfsdp {
#define GEN_PASS_DEF_PLANMEMORY
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;

void mfsdp::setMemoryPlan(sched::StepOp op, const step::MemoryPlan &plan) {
  // Offsets and sizes are whole bytes; the planner keeps them in doubles.
  auto whole = [](const std::vector<double> &bytes) {
    SmallVector<int64_t> out;
    for (double v : bytes)
      out.push_back(static_cast<int64_t>(std::llround(v)));
    return out;
  };
  Builder b(op.getContext());
  op.setArenaBytesAttr(b.getDenseI64ArrayAttr(whole(plan.arenaBytes)));
  op.setPeakBytesAttr(b.getDenseI64ArrayAttr(whole(plan.peakBytes)));
}

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
    // The step library's own buffers, over the lifetimes of the program
    // the step lowers to (which needs the offsets just planned).
    recordRuntimeMemory(op, nullptr);
    std::optional<step::RuntimeMemoryPlan> library =
        libraryMemoryStage(op, s, accumulate, buckets);
    if (failed(rewriteStep(op, s, locations)))
      return signalPassFailure();
    setMemoryPlan(op, plan);
    recordRuntimeMemory(op, library ? &*library : nullptr);
  }
};
} // namespace

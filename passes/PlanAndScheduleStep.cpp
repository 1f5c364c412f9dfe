//===- PlanAndScheduleStep.cpp - mfsdp-plan-and-schedule-step -------------===//
//
// mfsdp-assign-layouts on every graph of the module, then
// mfsdp-build-and-schedule-step, in one pass: the pass manager verifies the
// module once, after both (two passes verified each graph after its
// layouts as well: on a graph of 100,000 units, 0.75 s). The layout stage
// writes only the planner's decisions, which hold the verifier's rules by
// construction (placements over the mesh's dims, groups 0.. in unit
// order); the module's verification after this pass checks them all the
// same. The step stage takes each graph's planner problem from its layout
// stage (readBackAfterWrite) instead of reading the graph again.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"
#include "passes/PlanStages.h"

namespace mfsdp {
#define GEN_PASS_DEF_PLANANDSCHEDULESTEP
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;

namespace {

struct PlanAndScheduleStepPass
    : public WithStepOptions<WithLayoutOptions<
          mfsdp::impl::PlanAndScheduleStepBase<PlanAndScheduleStepPass>>> {
  using WithStepOptions::WithStepOptions;

  void runOnOperation() override {
    SmallVector<plan::GraphOp> graphs(getOperation().getOps<plan::GraphOp>());
    // Every graph's layouts first, each graph's errors reported (as the
    // layout pass, nested on graphs, does), and no step built if one fails.
    // Each graph's planner problem is kept from its layouts for its step:
    // what reading the graph again would give (readBackAfterWrite).
    const AssignLayoutsOptions layouts = layoutOptions();
    std::vector<BridgedGraph> planned(graphs.size());
    bool ok = true;
    for (auto [g, b] : llvm::zip(graphs, planned))
      ok &= succeeded(assignLayoutsStage(g, layouts, &b));
    if (!ok)
      return signalPassFailure();
    const BuildAndScheduleStepOptions step = stepOptions();
    for (auto [g, b] : llvm::zip(graphs, planned))
      if (failed(buildAndScheduleStage(g, step, &b)))
        return signalPassFailure();
  }
};

} // namespace

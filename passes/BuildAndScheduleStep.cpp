//===- BuildAndScheduleStep.cpp - mfsdp-build-and-schedule-step -----------===//
//
// mfsdp-build-step and mfsdp-schedule-step with the step kept in memory
// between them: each graph's step is built (buildStage), a sched.step with
// an empty body put after the graph, and the schedule stages run on the
// step before it is written into that body once (scheduleStages).
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"
#include "passes/PlanStages.h"
#include "passes/ScheduleStages.h"
#include "dialects/plan/PlanOps.h"
#include "dialects/plan/PlannerBridge.h"
#include "dialects/sched/StepBridge.h"

namespace mfsdp {
#define GEN_PASS_DEF_BUILDANDSCHEDULESTEP
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;

LogicalResult mfsdp::buildAndScheduleStage(plan::GraphOp graph,
                                           const BuildAndScheduleStepOptions &o,
                                           BridgedGraph *planned) {
  constexpr StringLiteral kPass = "mfsdp-build-and-schedule-step";
  BuildStepOptions build;
  build.tokens = o.tokens;
  build.microbatches = o.microbatches;
  build.baseline = o.baseline;
  build.nsSteps = o.nsSteps;
  build.reduceDtype = o.reduceDtype;
  FailureOr<step::Step> s = buildStage(graph, build, planned);
  // The stages see the step as mfsdp-schedule-step reads it from what
  // mfsdp-build-step writes (an alloc's phase, whole byte counts, buffers
  // in alloc order): the same schedule as the two passes in a row.
  if (failed(s) || failed(asWritten(*s, graph, graph.getLoc())))
    return failure();
  // The step op first, empty (the stages report on it), named and bound
  // to the graph's mesh as mfsdp-build-step writes it.
  step::Step header;
  header.name = s->name;
  header.world = s->world;
  header.tokens = s->tokens;
  header.microbatches = s->microbatches;
  OpBuilder builder(graph.getContext());
  builder.setInsertionPointAfter(graph);
  FailureOr<sched::StepOp> op = writeStep(builder, graph.getLoc(), header);
  if (failed(op))
    return failure();
  op->setMeshAttr(SymbolRefAttr::get(
      graph.getSymNameAttr(),
      {FlatSymbolRefAttr::get(graph.getMesh().getSymNameAttr())}));
  recordReduceDtype(*op, build.reduceDtype);
  FailureOr<NsPrecision> precision =
      resolveNsPrecision(graph, kPass, o.nsPrecision, graphNsPrecision(graph),
                         "the graph's #plan.muon");
  if (failed(precision))
    return failure();
  recordNsPrecision(*op, *precision);
  ScheduleStepOptions schedule;
  schedule.bucketMB = o.bucketMB;
  schedule.prefetch = o.prefetch;
  schedule.maxInflightMB = o.maxInflightMB;
  schedule.gatherComm = o.gatherComm;
  schedule.optimizerOrder = o.optimizerOrder;
  schedule.hardware = o.hardware;
  schedule.nsPrecision = o.nsPrecision;
  schedule.memoryCapMB = o.memoryCapMB;
  schedule.accumulate = o.accumulate;
  schedule.buckets = o.buckets;
  // Every op gets the step's location, as when mfsdp-build-step writes
  // them all at the graph's and mfsdp-schedule-step keeps them.
  return scheduleStages(*op, std::move(*s), schedule, {});
}

namespace {

struct BuildAndScheduleStepPass
    : public WithStepOptions<
          mfsdp::impl::BuildAndScheduleStepBase<BuildAndScheduleStepPass>> {
  using WithStepOptions::WithStepOptions;

  void runOnOperation() override {
    SmallVector<plan::GraphOp> graphs(getOperation().getOps<plan::GraphOp>());
    const BuildAndScheduleStepOptions options = stepOptions();
    for (plan::GraphOp g : graphs)
      if (failed(buildAndScheduleStage(g, options)))
        return signalPassFailure();
  }
};

} // namespace

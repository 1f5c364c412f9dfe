//===- Pipeline.cpp - The default mfsdp pipeline --------------------------===//
#include "passes/Pipeline.h"
#include "passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

InFlightDiagnostic mfsdp::emitOptionError(MLIRContext *ctx, StringRef pass,
                                          StringRef option) {
  InFlightDiagnostic d = emitError(UnknownLoc::get(ctx));
  d << "option " << option << " of " << pass << ": ";
  return d;
}

void mfsdp::buildDefaultPipeline(OpPassManager &pm, const PipelineOptions &o) {
  AssignLayoutsOptions layouts;
  layouts.policy = o.policy;
  layouts.zero = o.zero;
  layouts.mesh = o.mesh;
  layouts.world = o.world;
  layouts.ownerStrategy = o.ownerStrategy;
  layouts.groupUnits = o.groupUnits;
  layouts.rowLayout = o.rowLayout;
  layouts.nsSplit = o.nsSplit;
  layouts.fp32Master = o.fp32Master;
  layouts.nsSteps = o.nsSteps;
  layouts.hardware = o.hardware;
  // Layouts are chosen graph by graph and each step is scheduled on its own
  // (in parallel when the module holds several); building a step adds an op
  // beside its graph, so that pass runs on the module.
  pm.addNestedPass<plan::GraphOp>(createAssignLayouts(layouts));
  BuildStepOptions step;
  step.tokens = o.tokens;
  step.microbatches = o.microbatches;
  step.baseline = o.baseline;
  step.reduceDtype = o.reduceDtype;
  step.nsSteps = o.nsSteps;
  pm.addPass(createBuildStep(step));
  // The four schedule passes run as one, on the step read once (the
  // same result as mfsdp-bucket-collectives, mfsdp-schedule-overlap,
  // mfsdp-plan-memory and mfsdp-verify-schedule in a row).
  ScheduleStepOptions schedule;
  schedule.bucketMB = o.bucketMB;
  schedule.prefetch = o.prefetch;
  schedule.maxInflightMB = o.maxInflightMB;
  schedule.gatherComm = o.gatherComm;
  schedule.optimizerOrder = o.optimizerOrder;
  schedule.hardware = o.hardware;
  schedule.memoryCapMB = o.memoryCapMB;
  pm.addNestedPass<sched::StepOp>(createScheduleStep(schedule));
}

void mfsdp::registerDefaultPipeline() {
  PassPipelineRegistration<PipelineOptions>(
      "mfsdp-pipeline",
      "Plan layouts, build the step, bucket, overlap, plan memory and verify",
      buildDefaultPipeline);
}

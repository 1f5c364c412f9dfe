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
  layouts.nsPrecision = o.nsPrecision;
  // Layouts are chosen graph by graph and each step is scheduled on its own
  // (in parallel when the module holds several); building a step adds an op
  // beside its graph, so that pass runs on the module.
  pm.addNestedPass<plan::GraphOp>(createAssignLayouts(layouts));
  // The step is built and scheduled (bucketed, overlapped, memory-planned
  // and verified) before it is written, once: the same result as
  // mfsdp-build-step and mfsdp-schedule-step in a row (which runs the four
  // schedule passes as one), without writing the step and reading it back.
  BuildAndScheduleStepOptions step;
  step.tokens = o.tokens;
  step.microbatches = o.microbatches;
  step.baseline = o.baseline;
  step.reduceDtype = o.reduceDtype;
  step.nsSteps = o.nsSteps;
  step.bucketMB = o.bucketMB;
  step.prefetch = o.prefetch;
  step.maxInflightMB = o.maxInflightMB;
  step.gatherComm = o.gatherComm;
  step.optimizerOrder = o.optimizerOrder;
  step.hardware = o.hardware;
  step.nsPrecision = o.nsPrecision;
  step.memoryCapMB = o.memoryCapMB;
  step.accumulate = o.accumulate;
  step.buckets = o.buckets;
  pm.addPass(createBuildAndScheduleStep(step));
}

void mfsdp::registerDefaultPipeline() {
  PassPipelineRegistration<PipelineOptions>(
      "mfsdp-pipeline",
      "Plan layouts, build the step, bucket, overlap, plan memory and verify",
      buildDefaultPipeline);
}

//===- Pipeline.cpp - The default mfsdp pipeline --------------------------===//
#include "passes/Pipeline.h"
#include "passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

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
  step.nsSteps = o.nsSteps;
  pm.addPass(createBuildStep(step));
  BucketCollectivesOptions bucket;
  bucket.bucketMB = o.bucketMB;
  OpPassManager &steps = pm.nest<sched::StepOp>();
  steps.addPass(createBucketCollectives(bucket));
  ScheduleOverlapOptions overlap;
  overlap.prefetch = o.prefetch;
  overlap.maxInflightMB = o.maxInflightMB;
  overlap.gatherComm = o.gatherComm;
  overlap.optimizerOrder = o.optimizerOrder;
  overlap.hardware = o.hardware;
  steps.addPass(createScheduleOverlap(overlap));
  steps.addPass(createPlanMemory());
  VerifyScheduleOptions verify;
  verify.memoryCapMB = o.memoryCapMB;
  steps.addPass(createVerifySchedule(verify));
}

void mfsdp::registerDefaultPipeline() {
  PassPipelineRegistration<PipelineOptions>(
      "mfsdp-pipeline",
      "Plan layouts, build the step, bucket, overlap, plan memory and verify",
      buildDefaultPipeline);
}

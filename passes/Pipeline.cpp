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
  pm.addPass(createAssignLayouts(layouts));
  BuildStepOptions step;
  step.tokens = o.tokens;
  step.microbatches = o.microbatches;
  step.baseline = o.baseline;
  step.nsSteps = o.nsSteps;
  pm.addPass(createBuildStep(step));
  BucketCollectivesOptions bucket;
  bucket.bucketMB = o.bucketMB;
  pm.addPass(createBucketCollectives(bucket));
  ScheduleOverlapOptions overlap;
  overlap.prefetch = o.prefetch;
  overlap.maxInflightMB = o.maxInflightMB;
  overlap.gatherComm = o.gatherComm;
  overlap.optimizerOrder = o.optimizerOrder;
  overlap.hardware = o.hardware;
  pm.addPass(createScheduleOverlap(overlap));
  pm.addPass(createPlanMemory());
  VerifyScheduleOptions verify;
  verify.memoryCapMB = o.memoryCapMB;
  pm.addPass(createVerifySchedule(verify));
}

void mfsdp::registerDefaultPipeline() {
  PassPipelineRegistration<PipelineOptions>(
      "mfsdp-pipeline",
      "Plan layouts, build the step, bucket, overlap, plan memory and verify",
      buildDefaultPipeline);
}

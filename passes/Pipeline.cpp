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
  // Layouts are chosen graph by graph, then each graph's step is built and
  // scheduled (bucketed, overlapped, memory-planned and verified) before it
  // is written, once: the same result as mfsdp-assign-layouts,
  // mfsdp-build-step and mfsdp-schedule-step in a row (which runs the four
  // schedule passes as one), without writing the step and reading it back,
  // and with the module verified once, after all of it.
  PlanAndScheduleStepOptions p;
  p.policy = o.policy;
  p.zero = o.zero;
  p.mesh = o.mesh;
  p.world = o.world;
  p.muonEmbedding = o.muonEmbedding;
  p.muonHead = o.muonHead;
  p.muonRouter = o.muonRouter;
  p.muonInclude.assign(o.muonInclude.begin(), o.muonInclude.end());
  p.blockShard.assign(o.blockShard.begin(), o.blockShard.end());
  p.groupMaxMB = o.groupMaxMB;
  p.replicateUnder = o.replicateUnder;
  p.ownerStrategy = o.ownerStrategy;
  p.groupUnits = o.groupUnits;
  p.rowLayout = o.rowLayout;
  p.nsSplit = o.nsSplit;
  p.fp32Master = o.fp32Master;
  p.nsSteps = o.nsSteps;
  p.hardware = o.hardware;
  p.nsPrecision = o.nsPrecision;
  p.tokens = o.tokens;
  p.microbatches = o.microbatches;
  p.baseline = o.baseline;
  p.reduceDtype = o.reduceDtype;
  p.bucketMB = o.bucketMB;
  p.prefetch = o.prefetch;
  p.maxInflightMB = o.maxInflightMB;
  p.gatherComm = o.gatherComm;
  p.optimizerOrder = o.optimizerOrder;
  p.memoryCapMB = o.memoryCapMB;
  p.accumulate = o.accumulate;
  p.buckets = o.buckets;
  pm.addPass(createPlanAndScheduleStep(p));
}

void mfsdp::registerDefaultPipeline() {
  PassPipelineRegistration<PipelineOptions>(
      "mfsdp-pipeline",
      "Plan layouts, build the step, bucket, overlap, plan memory and verify",
      buildDefaultPipeline);
}

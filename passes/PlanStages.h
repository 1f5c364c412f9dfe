//===- PlanStages.h - Layouts and the step as stages of one pass -*- C++ -*-===//
//
// mfsdp-assign-layouts and mfsdp-build-and-schedule-step as functions of
// their options, so that mfsdp-plan-and-schedule-step (the pass the default
// pipeline runs) runs both without the pass manager verifying the graph in
// between; and the options of each as its pass holds them (the generated
// bases declare them, so each pass that has them derives through these).
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_PASSES_PLANSTAGES_H
#define MFSDP_PASSES_PLANSTAGES_H

#include "passes/Passes.h"
#include "dialects/plan/PlanOps.h"
#include "dialects/plan/PlannerBridge.h"

namespace mfsdp {

/// mfsdp-assign-layouts on `graph`: fails with that pass's diagnostics.
/// With `planned`, leaves there the graph as readGraph would read it back
/// (readBackAfterWrite), for buildAndScheduleStage.
mlir::LogicalResult assignLayoutsStage(plan::GraphOp graph,
                                       const AssignLayoutsOptions &options,
                                       BridgedGraph *planned = nullptr);

/// mfsdp-build-and-schedule-step on one planned `graph` of its module:
/// fails with that pass's diagnostics. `planned`: the graph as
/// assignLayoutsStage left it, taken instead of reading the graph again.
mlir::LogicalResult buildAndScheduleStage(plan::GraphOp graph,
                                          const BuildAndScheduleStepOptions &options,
                                          BridgedGraph *planned = nullptr);

/// A pass whose generated base `PassBase` declares mfsdp-assign-layouts's
/// options, with them as assignLayoutsStage takes them.
template <typename PassBase> class WithLayoutOptions : public PassBase {
public:
  using PassBase::PassBase;

protected:
  AssignLayoutsOptions layoutOptions() const {
    AssignLayoutsOptions o;
    o.policy = this->policy;
    o.zero = this->zero;
    o.mesh = this->mesh;
    o.world = this->world;
    o.muonEmbedding = this->muonEmbedding;
    o.muonHead = this->muonHead;
    o.muonRouter = this->muonRouter;
    o.muonInclude.assign(this->muonInclude.begin(), this->muonInclude.end());
    o.rowLayout = this->rowLayout;
    o.blockShard.assign(this->blockShard.begin(), this->blockShard.end());
    o.ownerStrategy = this->ownerStrategy;
    o.groupUnits = this->groupUnits;
    o.groupMaxMB = this->groupMaxMB;
    o.nsSplit = this->nsSplit;
    o.hardware = this->hardware;
    o.nsPrecision = this->nsPrecision;
    o.replicateUnder = this->replicateUnder;
    o.nsSteps = this->nsSteps;
    o.fp32Master = this->fp32Master;
    return o;
  }
};

/// A pass whose generated base `PassBase` declares
/// mfsdp-build-and-schedule-step's options, with them as
/// buildAndScheduleStage takes them.
template <typename PassBase> class WithStepOptions : public PassBase {
public:
  using PassBase::PassBase;

protected:
  BuildAndScheduleStepOptions stepOptions() const {
    BuildAndScheduleStepOptions o;
    o.tokens = this->tokens;
    o.microbatches = this->microbatches;
    o.baseline = this->baseline;
    o.nsSteps = this->nsSteps;
    o.reduceDtype = this->reduceDtype;
    o.bucketMB = this->bucketMB;
    o.prefetch = this->prefetch;
    o.maxInflightMB = this->maxInflightMB;
    o.gatherComm = this->gatherComm;
    o.optimizerOrder = this->optimizerOrder;
    o.hardware = this->hardware;
    o.nsPrecision = this->nsPrecision;
    o.memoryCapMB = this->memoryCapMB;
    o.accumulate = this->accumulate;
    o.buckets = this->buckets;
    return o;
  }
};

} // namespace mfsdp

#endif // MFSDP_PASSES_PLANSTAGES_H

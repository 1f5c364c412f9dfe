//===- PlannerBridge.h - plan IR <-> the plain C++ layout planner -*- C++ -*-===//
//
// Shared by mfsdp-assign-layouts and mfsdp-plan-report: reads a plan.graph
// into planner::Problem (placements present on input become pins) and
// writes planning results back.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_DIALECTS_PLAN_PLANNERBRIDGE_H
#define MFSDP_DIALECTS_PLAN_PLANNERBRIDGE_H

#include "dialects/plan/PlanOps.h"
#include "mfsdp/planner/Layout.h"

#include "llvm/ADT/SmallVector.h"

namespace mfsdp {

struct BridgedGraph {
  planner::Problem problem;
  llvm::SmallVector<plan::ParamOp> params; // parallel to problem.params
  llvm::SmallVector<plan::UnitOp> units;   // parallel to problem.units
};

/// Reads `graph`. Units come in index order; placements on input are pins.
BridgedGraph readGraph(plan::GraphOp graph);

/// Mesh sizes and node locality of a mesh op.
struct MeshShape {
  int64_t shard = 1, replicate = 1, world = 1;
  bool shardIntraNode = true;
};
MeshShape meshShape(plan::MeshOp mesh, int64_t gpusPerNode);

/// Fills policy, ZeRO, mesh, Newton-Schulz steps and precision
/// (opts.hw.nsBf16) and SGD momentum of `opts` from the graph's plan.policy,
/// its parameters' #plan.muon and plan.mesh (the mesh must exist).
void optionsFromGraph(plan::GraphOp graph, planner::Options &opts);

/// The precision the graph's Muon runs Newton-Schulz in (#plan.muon
/// ns_precision: a Muon parameter's, else the policy's); nullopt where the
/// graph has no #plan.muon.
std::optional<NsPrecision> graphNsPrecision(plan::GraphOp graph);

/// Writes placements, optimizers, row layouts, groups and the policy.
void writeGraph(plan::GraphOp graph, const BridgedGraph &bridged,
                const planner::Options &opts,
                const planner::Decisions &decisions);

} // namespace mfsdp

#endif // MFSDP_DIALECTS_PLAN_PLANNERBRIDGE_H

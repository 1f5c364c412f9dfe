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

/// Turns `bridged`, just written by writeGraph, into what readGraph reads
/// from the graph now, without reading it: every placement written is a
/// pin, the fields of other placements than a parameter's at their
/// defaults, a unit without row shards in the default row layout. The
/// step builder of mfsdp-plan-and-schedule-step takes the planned graph so
/// (on 100,000 units, reading it again took 0.38 s).
void readBackAfterWrite(BridgedGraph &bridged);

/// Whether `a` and `b` read the same graph the same way: the same ops and
/// every field of their parameters and units equal. Builds with assertions
/// check with it that readBackAfterWrite gives what readGraph reads.
bool sameReading(const BridgedGraph &a, const BridgedGraph &b);

} // namespace mfsdp

#endif // MFSDP_DIALECTS_PLAN_PLANNERBRIDGE_H

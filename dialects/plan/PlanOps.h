//===- PlanOps.h - The plan dialect's operations ----------------*- C++ -*-===//
#ifndef MFSDP_DIALECTS_PLAN_PLANOPS_H
#define MFSDP_DIALECTS_PLAN_PLANOPS_H

#include "dialects/QuietProperties.h"
#include "dialects/plan/PlanDialect.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/RegionKindInterface.h"
#include "mlir/IR/SymbolTable.h"

namespace mfsdp::plan {
class MeshOp;
class PolicyOp;
} // namespace mfsdp::plan

#define GET_OP_CLASSES
#include "dialects/plan/PlanOps.h.inc"

namespace mfsdp::plan {
/// How many plan.param and plan.unit ops `graph` holds: what its readers
/// size their tables by before filling them (on a large graph a table that
/// grows as it fills is copied, and fresh memory touched, each time).
struct GraphSizes {
  size_t params = 0;
  size_t units = 0;
};
GraphSizes graphSizes(GraphOp graph);
} // namespace mfsdp::plan

#endif // MFSDP_DIALECTS_PLAN_PLANOPS_H

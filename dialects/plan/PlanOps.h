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

#endif // MFSDP_DIALECTS_PLAN_PLANOPS_H

//===- SchedOps.h - The sched dialect's operations --------------*- C++ -*-===//
#ifndef MFSDP_DIALECTS_SCHED_SCHEDOPS_H
#define MFSDP_DIALECTS_SCHED_SCHEDOPS_H

#include "dialects/sched/SchedDialect.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"

#define GET_OP_CLASSES
#include "dialects/sched/SchedOps.h.inc"

#endif // MFSDP_DIALECTS_SCHED_SCHEDOPS_H

//===- SchedDialect.h - The sched dialect and its types ---------*- C++ -*-===//
#ifndef MFSDP_DIALECTS_SCHED_SCHEDDIALECT_H
#define MFSDP_DIALECTS_SCHED_SCHEDDIALECT_H

#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/Types.h"

#include "dialects/sched/SchedOpsDialect.h.inc"
#include "dialects/sched/SchedEnums.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/sched/SchedTypes.h.inc"

#endif // MFSDP_DIALECTS_SCHED_SCHEDDIALECT_H

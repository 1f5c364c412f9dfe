//===- SchedDialect.cpp - The sched dialect -------------------------------===//
#include "dialects/sched/SchedOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mfsdp::sched;

#include "dialects/sched/SchedOpsDialect.cpp.inc"
#include "dialects/sched/SchedEnums.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/sched/SchedTypes.cpp.inc"

void SchedDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/sched/SchedOps.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/sched/SchedTypes.cpp.inc"
      >();
}

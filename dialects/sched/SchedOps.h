//===- SchedOps.h - The sched dialect's operations --------------*- C++ -*-===//
#ifndef MFSDP_DIALECTS_SCHED_SCHEDOPS_H
#define MFSDP_DIALECTS_SCHED_SCHEDOPS_H

#include "dialects/QuietProperties.h"
#include "dialects/sched/SchedDialect.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mfsdp::sched {

/// The trainer's state and the communicators' streams: what orders compute,
/// optimizer kernels, collectives and waits beyond their buffers.
struct ProgramOrderResource
    : public mlir::SideEffects::Resource::Base<ProgramOrderResource> {
  llvm::StringRef getName() final { return "sched::ProgramOrder"; }
};

class CollectiveOpInterface;
namespace detail {
/// The verifier of CollectiveOpInterface.
mlir::LogicalResult verifyCollective(mlir::Operation *op);
} // namespace detail

} // namespace mfsdp::sched

#include "dialects/sched/SchedInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/sched/SchedOps.h.inc"

#endif // MFSDP_DIALECTS_SCHED_SCHEDOPS_H

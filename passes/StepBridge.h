//===- StepBridge.h - sched IR <-> step::Step ----------------------*- C++ -*-===//
//
// The schedule passes read a sched.step into the plain C++ step program,
// transform it with the algorithms of lib/step, and write it back.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_PASSES_STEPBRIDGE_H
#define MFSDP_PASSES_STEPBRIDGE_H

#include "dialects/sched/SchedOps.h"
#include "mfsdp/step/Step.h"

#include "mlir/IR/Builders.h"

namespace mfsdp {

/// Reads a step op. Fails (with a diagnostic) on ops it does not know.
mlir::LogicalResult readStep(sched::StepOp op, step::Step &out);

/// Creates a sched.step for `s` at the builder's insertion point.
sched::StepOp writeStep(mlir::OpBuilder &builder, mlir::Location loc,
                        const step::Step &s);

/// Replaces `op` with a sched.step for `s`.
void replaceStep(sched::StepOp op, const step::Step &s);

} // namespace mfsdp

#endif // MFSDP_PASSES_STEPBRIDGE_H

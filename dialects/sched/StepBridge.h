//===- StepBridge.h - sched IR <-> step::Step ----------------------*- C++ -*-===//
//
// The schedule passes, the code generator and the simulator read a
// sched.step into the plain C++ step program of lib/step (transformed there
// by plain algorithms) and write it back. The bridge keeps each op's
// location: step::Op::origin indexes the locations read, and transformations
// carry it along with the op.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_DIALECTS_SCHED_STEPBRIDGE_H
#define MFSDP_DIALECTS_SCHED_STEPBRIDGE_H

#include "dialects/plan/PlanOps.h"
#include "dialects/sched/SchedOps.h"
#include "mfsdp/step/Step.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallVector.h"

namespace mfsdp {

/// Reads a step op into `out`; each op's `origin` is its index in the body.
/// When `locations` is given it receives the location of every op, indexed
/// by origin. Fails with a diagnostic on an op that is not a sched op.
mlir::LogicalResult
readStep(sched::StepOp op, step::Step &out,
         llvm::SmallVectorImpl<mlir::Location> *locations = nullptr);

/// Creates a sched.step for `s` at the builder's insertion point. An op
/// whose origin indexes `locations` gets that location, a wait made by a
/// transformation the location of its collective, any other op `loc`.
/// Fails with a diagnostic, creating nothing, if `s` names a kind the
/// dialect does not have or refers to a buffer or op it does not hold.
mlir::FailureOr<sched::StepOp>
writeStep(mlir::OpBuilder &builder, mlir::Location loc, const step::Step &s,
          llvm::ArrayRef<mlir::Location> locations = {});
/// The same, releasing each op of `s` once it is written (as rewriteStep
/// with a step to consume). On failure `s` is unchanged.
mlir::FailureOr<sched::StepOp>
writeStep(mlir::OpBuilder &builder, mlir::Location loc, step::Step &&s,
          llvm::ArrayRef<mlir::Location> locations = {});

/// Rewrites `op` in place to hold `s` (its body, world, tokens and
/// microbatches; a memory plan it carried no longer holds and is dropped):
/// how a pass anchored on sched.step writes its result. Fails as writeStep
/// does, leaving `op` unchanged.
mlir::LogicalResult rewriteStep(sched::StepOp op, const step::Step &s,
                                llvm::ArrayRef<mlir::Location> locations);

/// The same, releasing each op of `s` once it is written (its kind, wait
/// and origin are kept; the buffers stay): on large steps the step and its
/// IR are the two largest things alive. On failure `s` is unchanged.
mlir::LogicalResult rewriteStep(sched::StepOp op, step::Step &&s,
                                llvm::ArrayRef<mlir::Location> locations);

/// Makes `s` what writing it (writeStep) and reading it back (readStep)
/// would give, without the IR: what a pass that schedules a step it built
/// itself runs on, so that its result is that of the passes in a row. The
/// kernels of compute ops come from `graph` (the graph the step is built
/// for), as readStep finds them through the step's mesh. Fails as
/// writeStep does (with its diagnostic, at `loc`), leaving `s` unchanged,
/// when `s` cannot be written.
mlir::LogicalResult asWritten(step::Step &s, plan::GraphOp graph, mlir::Location loc);

} // namespace mfsdp

#endif // MFSDP_DIALECTS_SCHED_STEPBRIDGE_H

//===- EmitStep.h - Planned IR to the source of a step library --*- C++ -*-===//
//
// Lowers a planned plan.graph (layouts assigned) to the C source of a step
// library: the plan's constants (every parameter's shape, unit, placement,
// owner rank and optimizer; the mesh; the ZeRO level; the optimizer
// hyperparameters) and the plan hash, compiled against the runtime's C ABI
// (include/mfsdp/runtime.h). See docs/runtime.md.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_EMIT_EMITSTEP_H
#define MFSDP_EMIT_EMITSTEP_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/Support/raw_ostream.h"

namespace mfsdp {

/// Writes the C source of the step library for the single plan.graph of
/// `module`. Fails, with an error on the offending op, when the graph is not
/// planned or uses what the step runtime does not run yet (parameters owned
/// by TP/EP, block shards, mesh dims other than dp_shard and dp_replicate,
/// per-parameter hyperparameters that differ).
mlir::LogicalResult emitStepLibrarySource(mlir::ModuleOp module,
                                          llvm::raw_ostream &os);

/// Registers --emit-step-c for mfsdp-translate.
void registerEmitTranslations();

} // namespace mfsdp

#endif // MFSDP_EMIT_EMITSTEP_H

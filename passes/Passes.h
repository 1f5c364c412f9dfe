//===- Passes.h - mfsdp passes ----------------------------------*- C++ -*-===//
#ifndef MFSDP_PASSES_PASSES_H
#define MFSDP_PASSES_PASSES_H

#include "dialects/plan/PlanOps.h"
#include "dialects/sched/SchedDialect.h"
#include "dialects/sched/SchedOps.h"
#include "passes/VocabularyOptions.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mfsdp {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// An error in the value of `option` of `pass` (e.g. "mfsdp-build-step",
/// "tokens"): reported with no place in the input, which is not at fault,
/// as "<unknown>:0: error: option tokens of mfsdp-build-step: ...".
mlir::InFlightDiagnostic emitOptionError(mlir::MLIRContext *ctx,
                                         llvm::StringRef pass,
                                         llvm::StringRef option);

} // namespace mfsdp

#endif // MFSDP_PASSES_PASSES_H

//===- EmitStep.h - Planned IR to the source of a step library --*- C++ -*-===//
//
// Lowers a planned plan.graph (layouts assigned) to the C source of a step
// library: the plan's constants (every parameter's shape, unit, placement,
// owner rank and optimizer; the mesh; the ZeRO level; the optimizer
// hyperparameters; the static memory plan of the runtime's buffers) and the
// plan hash, compiled against the runtime's C ABI
// (include/mfsdp/runtime.h). See docs/runtime.md.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_EMIT_EMITSTEP_H
#define MFSDP_EMIT_EMITSTEP_H

#include "mfsdp/Vocabulary.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>

namespace mfsdp {

/// Writes the C source of the step library for the single plan.graph of
/// `module`. Fails, with an error on the offending op, when the graph is not
/// planned or uses what the step runtime does not run yet (parameters owned
/// by TP/EP, mesh dims other than dp_shard and dp_replicate,
/// per-parameter hyperparameters that differ).
struct EmitStepOptions {
  /// Keep gradient buffers between microbatches (no-sync accumulation);
  /// otherwise the memory plan gives each unit's gradients space only
  /// during its backward and the runtime refuses no-sync. A module whose
  /// sched.step accumulates microbatches (mfsdp-build-step{microbatches=N})
  /// keeps them whatever this says: its program runs the earlier
  /// microbatches under no-sync.
  bool accumulate = false;
  /// Gather prefetch depth (0 or 1; mfsdp_memory_plan::prefetch): with 1,
  /// under ZeRO-3, the memory plan gives two units' gathered copies room at
  /// once so the runtime gathers the next unit while the trainer computes
  /// the current one.
  int prefetch = 0;
  /// The runtime's buckets (from the module's bucketed sched.step, if any)
  /// stay within this many bytes of flat buffer each (0: no limit); a
  /// larger tensor is left alone (step::runtimeBuckets). Unset: the limit
  /// the step was bucketed with (its `bucket_bytes`), else 25 MiB; set, it
  /// must equal the step's (libraryBucketBytes).
  std::optional<double> bucketBytes;
  /// Whether the runtime's buckets are taken from the module's sched.step;
  /// false: one collective per parameter (the step still gives the
  /// optimizer step's program).
  bool buckets = true;
  /// The dtype the library's runtime reduces gradients in
  /// (mfsdp_plan::reduce_dtype). Unset: the dtype the module's sched.step
  /// counts its reductions in (its `reduce_dtype`; without one, each
  /// parameter's own, which must then be one dtype for all), f32 for a
  /// module without a step. Set, it must be the step's.
  std::optional<ReduceDType> reduceDtype;
};

/// With `cuda`, the library's CUDA source (the row-shard buckets' pack and
/// unpack kernels, specialised with their constants, and C launchers for
/// them) goes there, and the C source refers to the launchers
/// (mfsdp_plan::cuda_kernels): the two are built into one library. Without
/// it the library has the host kernels only.
mlir::LogicalResult emitStepLibrarySource(mlir::ModuleOp module,
                                          llvm::raw_ostream &os,
                                          const EmitStepOptions &options = {},
                                          llvm::raw_ostream *cuda = nullptr);

/// Registers --emit-step-c for mfsdp-translate.
void registerEmitTranslations();

} // namespace mfsdp

#endif // MFSDP_EMIT_EMITSTEP_H

//===- RuntimePlan.h - A planned plan.graph as the runtime's plan -*- C++ -*-===//
//
// The runtime's plan (mfsdp_plan, runtime.h) of a planned plan.graph
// (layouts assigned), with the storage its pointers point into: what a
// step library states, built once for the emitter and for
// mfsdp-verify-schedule.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_EMIT_RUNTIMEPLAN_H
#define MFSDP_EMIT_RUNTIMEPLAN_H

#include "dialects/plan/PlanOps.h"
#include "dialects/sched/SchedOps.h"
#include "mfsdp/emit/EmitStep.h"
#include "mfsdp/runtime.h"
#include "mfsdp/step/RuntimeMemory.h"
#include "mfsdp/step/RuntimeProgram.h"

#include "mlir/Support/LLVM.h"
#include "llvm/Support/Allocator.h"

#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace mfsdp {

/// mfsdp_plan and what it points into (so neither copies nor moves: the
/// names and tables are addressed by `plan`). buildRuntimePlan sets only
/// the constants the graph states: no buckets, program, memory plan or hash.
struct RuntimePlan {
  RuntimePlan() = default;
  RuntimePlan(const RuntimePlan &) = delete;
  RuntimePlan &operator=(const RuntimePlan &) = delete;

  mfsdp_plan plan{};
  plan::MeshOp mesh;
  plan::PolicyOp policy;
  std::vector<plan::UnitOp> units;     // in index order
  std::vector<std::string> unitNames;  // their symbols, in index order
  std::vector<mfsdp_param_desc> descs; // plan.params
  std::vector<mfsdp_mesh_dim> meshDims;
  std::deque<std::string> meshNames; // storage for the C strings
  /// Storage for the parameters' names (C strings, one allocation for
  /// many: a large model has a million).
  llvm::BumpPtrAllocator nameStorage;
  /// Parameters the outer stack keeps (#plan.external): not in the table.
  int64_t numExternal = 0;
  std::vector<std::string> externalDims;
  /// The runtime's buckets (setLibraryBuckets) and their C view, which
  /// plan.buckets points into.
  std::vector<step::RuntimeBucket> buckets;
  std::vector<mfsdp_bucket> bucketViews;
};

/// Everything a step library states (what the emitter writes): the runtime
/// plan of the module's one plan.graph, with the reduce dtype and the
/// buckets of its sched.step (if any); the program lowered from that step
/// once it is scheduled and its memory planned, checked against it
/// (step::verifyProgram); the static memory plan of the runtime's buffers
/// over the program's lifetimes: the one the step records
/// (mfsdp-plan-memory's `runtime_*`), checked to fit them (a library
/// without a program: planned here over the derived program's,
/// step::planRuntimeMemory); and the plan's hash. `plan` points into
/// it, so it neither copies nor moves.
struct LibraryPlan {
  LibraryPlan() = default;
  LibraryPlan(const LibraryPlan &) = delete;
  LibraryPlan &operator=(const LibraryPlan &) = delete;

  plan::GraphOp graph;
  RuntimePlan runtime;
  /// The program (with withProgram) and its C view (plan.program).
  bool withProgram = false;
  step::RuntimeProgram program;
  step::RuntimeProgram::View programView;
  /// The step runs several microbatches: the gradients are kept.
  bool accumulates = false;
  /// The memory plan and its C view (plan.memory).
  step::RuntimeMemoryPlan memory;
  mfsdp_memory_plan memoryView{};
};

/// Fills `out` for `module` with `options` (the emitter's). Fails, with an
/// error at the op concerned, where the emitter would: no single plan.graph
/// or sched.step, a graph the runtime does not run, a step whose program
/// does not run as scheduled, options that contradict the step, a
/// scheduled step that records no memory plan of the library or one that
/// does not fit it, a memory plan that cannot be made. `scheduled`, if
/// given, is the module's sched.step as readStep read it (the caller's
/// copy, not read again).
mlir::LogicalResult buildLibraryPlan(mlir::ModuleOp module, const EmitStepOptions &options,
                                     LibraryPlan &out,
                                     const step::Step *scheduled = nullptr);

/// Fills `out` from `graph`. Fails, with an error on the offending op, when
/// the graph is not planned or uses what the step runtime does not run
/// (parameters row-sharded on another dim, block shards over other axes,
/// placements or dtypes it does not run, per-parameter hyperparameters
/// that differ, no fp32 masters).
mlir::LogicalResult buildRuntimePlan(plan::GraphOp graph, RuntimePlan &out);

/// The most bytes of flat buffer the step library's runtime buckets hold
/// (step::runtimeBuckets; 0: no limit) for the module's sched.step `step`
/// (null: none): the limit its collectives were bucketed with
/// (`bucket_bytes`), which a `requested` limit must equal; without either,
/// 25 MiB, the emitter's default. So the emitter and mfsdp-verify-schedule
/// lower a step with the same buckets. Fails with an error on `step` when
/// the two differ.
mlir::FailureOr<double> libraryBucketBytes(sched::StepOp step,
                                           std::optional<double> requested);

/// The step library's buckets of `s` (step::runtimeBuckets within
/// `limitBytes`, libraryBucketBytes) into `rp`, its plan pointing at them:
/// the program packs and unpacks the units with row-shard buckets.
void setLibraryBuckets(RuntimePlan &rp, const step::Step &s, double limitBytes);

/// The dtype the step library reduces gradients in for the module's
/// sched.step `step` (null: none) over the parameters `descs`: the step's
/// `reduce_dtype`; a step without one counts each parameter's reductions
/// in its own dtype, which the runtime (one reduce dtype a plan) follows
/// when every parameter has the same (an error on `step` when they mix).
/// A `requested` dtype must be that one; without a step, `requested` or
/// f32.
mlir::FailureOr<ReduceDType> libraryReduceDtype(sched::StepOp step,
                                                const std::vector<mfsdp_param_desc> &descs,
                                                std::optional<ReduceDType> requested);

/// Whether the Newton-Schulz precision the sched.step `step` (null: none)
/// was scheduled with (its `ns_precision`, fp32 without one) is the one the
/// library runs (`plan.muon_ns_precision`, from the graph's #plan.muon);
/// an error on `step` where they differ and a parameter runs Muon.
mlir::LogicalResult checkLibraryNsPrecision(sched::StepOp step, const mfsdp_plan &plan);

/// The step library's memory plan as a sched.step records it
/// (mfsdp-plan-memory's `runtime_*` attributes), with the C view
/// (mfsdp_memory_plan) that points into it.
struct RecordedRuntimeMemory {
  RecordedRuntimeMemory() = default;
  RecordedRuntimeMemory(const RecordedRuntimeMemory &) = delete;
  RecordedRuntimeMemory &operator=(const RecordedRuntimeMemory &) = delete;

  std::vector<int64_t> arenaBytes;
  std::vector<mfsdp_param_offsets> params;
  std::vector<mfsdp_bucket_offsets> buckets;
  mfsdp_memory_plan view{};
};

/// The step library's runtime plan for `graph` and its sched.step `step`
/// (null: none) whose step is `s` (null with it): buildRuntimePlan; the
/// reduce dtype (libraryReduceDtype, `reduce` as asked); the Newton-Schulz
/// precision checked (checkLibraryNsPrecision); and, with `buckets` and a
/// step, the library's buckets (libraryBucketBytes with `bucketBytes` as
/// asked, setLibraryBuckets). Fails with the error of the one that fails.
/// What the emitter (buildLibraryPlan) and mfsdp-verify-schedule both
/// start from, so that the two lower a step into the same library.
mlir::LogicalResult buildLibraryRuntimePlan(plan::GraphOp graph, sched::StepOp step,
                                            const step::Step *s,
                                            std::optional<ReduceDType> reduce,
                                            bool buckets,
                                            std::optional<double> bucketBytes,
                                            RuntimePlan &out);

/// The program the step library runs for the scheduled step `s`: `s`
/// lowered into `rp` (step::lowerStepProgram) and checked to run as
/// scheduled (step::verifyProgram), with its C view in `view` and
/// `rp.plan.program` pointing at it. An empty string, or what is wrong
/// ("cannot be lowered into the runtime's program: ..." or "lowers to a
/// runtime program that does not run as scheduled: ...", naming the sched
/// op the program op at fault is lowered from); then `rp.plan.program` is
/// left as it was. Without `origins` the program holds no op's origin text
/// (the larger part of a large step's program), and `s` is lowered again
/// with them only for a message. `unsupported`, if given, is set where `s`
/// has ops the runtime does not run (a baseline's step).
std::string lowerLibraryProgram(const step::Step &s, RuntimePlan &rp, bool origins,
                                step::RuntimeProgram &program,
                                step::RuntimeProgram::View &view,
                                bool *unsupported = nullptr);

/// The step library's memory plan as `step` records it (hasRuntimeMemory)
/// for the runtime's `plan`, checked to fit the buffers and lifetimes of
/// what that plan runs (step::planRuntimeMemory with the recorded plan;
/// `keepGrads` and `prefetch` as there). `memory.error` is empty or says
/// what does not fit; `ofLibrary` is false where the record is for another
/// table of parameters or buckets (readRuntimeMemory), and `keepsGrads`
/// whether the record keeps the gradients. Used by the emitter and by
/// mfsdp-verify-schedule, each with its own words.
struct RecordedLibraryMemory {
  step::RuntimeMemoryPlan memory;
  bool ofLibrary = true;
  bool keepsGrads = false;
};
RecordedLibraryMemory recordedLibraryMemory(sched::StepOp step, const mfsdp_plan &plan,
                                            bool keepGrads, int32_t prefetch);

/// Whether `step` records the step library's memory plan.
bool hasRuntimeMemory(sched::StepOp step);

/// The memory plan `step` records (hasRuntimeMemory), read for the
/// runtime's `plan` (its parameters and buckets) into `out`; an empty
/// string, or what does not match (offsets for another number of
/// parameters or buckets).
std::string readRuntimeMemory(sched::StepOp step, const mfsdp_plan &plan,
                              RecordedRuntimeMemory &out);

/// Records `memory` on `step` (the `runtime_*` attributes), or, with a
/// null `memory`, removes them.
void recordRuntimeMemory(sched::StepOp step, const step::RuntimeMemoryPlan *memory);

} // namespace mfsdp

#endif // MFSDP_EMIT_RUNTIMEPLAN_H

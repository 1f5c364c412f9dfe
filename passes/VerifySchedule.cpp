//===- VerifySchedule.cpp - mfsdp-verify-schedule -------------------------===//
#include "passes/Passes.h"
#include "passes/ScheduleStages.h"
#include "dialects/plan/PlanOps.h"
#include "dialects/sched/StepBridge.h"

#include "mfsdp/emit/RuntimePlan.h"
#include "mfsdp/step/RuntimeProgram.h"
#include "mfsdp/step/Schedule.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"

#include <memory>
#include <optional>
#include <string>

namespace mfsdp {
#define GEN_PASS_DEF_VERIFYSCHEDULE
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;

namespace {
/// The step library's runtime plan and program for a step, as the emitter
/// builds them (buildLibraryPlan): the plan of the module's plan.graph with
/// the step's reduce dtype and buckets, and the step lowered into it.
struct LibraryProgram {
  RuntimePlan runtime;
  step::RuntimeProgram program;
  step::RuntimeProgram::View view;
  /// What is wrong with the program (then it is not in runtime.plan).
  std::optional<std::string> issue;
};
} // namespace

/// The library's program of `s`, the step of `op`, checked against `s`;
/// null where the module has no single plan.graph (a step written by hand)
/// or no step library can be built from it or from the step (a baseline's
/// step with ops the runtime does not run, as mfsdp-sim --compare
/// schedules): the emitter says why.
static std::unique_ptr<LibraryProgram> libraryProgramOf(sched::StepOp op,
                                                        const step::Step &s,
                                                        bool buckets = true) {
  auto module = op->getParentOfType<ModuleOp>();
  if (!module)
    return nullptr;
  plan::GraphOp graph;
  for (plan::GraphOp g : module.getOps<plan::GraphOp>()) {
    if (graph)
      return nullptr;
    graph = g;
  }
  if (!graph)
    return nullptr;
  auto out = std::make_unique<LibraryProgram>();
  RuntimePlan &runtimePlan = out->runtime;
  {
    ScopedDiagnosticHandler quiet(op.getContext(),
                                  [](Diagnostic &) { return success(); });
    if (failed(buildRuntimePlan(graph, runtimePlan)))
      return nullptr;
    // The reduce dtype the library runs: the step's.
    FailureOr<ReduceDType> reduce =
        libraryReduceDtype(op, runtimePlan.descs, std::nullopt);
    if (failed(reduce))
      return nullptr;
    runtimePlan.plan.reduce_dtype = static_cast<int32_t>(*reduce);
  }
  // The library's buckets: the step's bucketed reductions within the limit
  // they were bucketed with, as the emitter takes them (the program packs
  // and unpacks the units with row-shard buckets).
  // Nothing asked for: the step's own limit, never an error. Without
  // buckets, one collective per parameter (mfsdp-compile --bucket-mb=0).
  if (buckets)
    setLibraryBuckets(runtimePlan, s, *libraryBucketBytes(op, std::nullopt));
  // Lowered without each op's origin (a text per program op, the larger
  // part of the program on a large step), and again with them only to
  // name an op in a message.
  auto lower = [&](bool origins) {
    return step::lowerStepProgram(s, runtimePlan.plan, runtimePlan.unitNames, origins);
  };
  out->program = lower(/*origins=*/false);
  if (out->program.unsupported)
    return nullptr;
  if (!out->program.error.empty()) {
    out->issue = "cannot be lowered into the runtime's program: " + lower(true).error;
    return out;
  }
  out->program.view(out->view);
  const step::ProgramIssue issue = step::verifyProgram(
      s, runtimePlan.plan, out->view.program, runtimePlan.unitNames);
  if (!issue.message.empty()) {
    std::string message =
        "lowers to a runtime program that does not run as scheduled: " + issue.message;
    if (issue.op >= 0 && issue.op < static_cast<int32_t>(out->program.ops.size()))
      message += " (op " + std::to_string(issue.op) + " is lowered from '" +
                 lower(true).ops[issue.op].from + "')";
    out->issue = message;
    return out;
  }
  runtimePlan.plan.program = &out->view.program;
  return out;
}

/// The runtime's memory plan of `lib` (its program checked), over the
/// program's lifetimes; with `recorded`, the plan the step records,
/// checked to fit them. `keepGrads`: gradients kept between microbatches.
static step::RuntimeMemoryPlan libraryMemoryOf(sched::StepOp op, const LibraryProgram &lib,
                                               bool keepGrads, bool recorded) {
  const mfsdp_plan &plan = lib.runtime.plan;
  if (!recorded)
    return step::planRuntimeMemory(plan, keepGrads, 256, 0, plan.program);
  RecordedRuntimeMemory given;
  step::RuntimeMemoryPlan out;
  out.error = readRuntimeMemory(op, plan, given);
  if (out.error.empty())
    out = step::planRuntimeMemory(plan, keepGrads, 256, 0, plan.program, &given.view);
  return out;
}

VerifyFindings mfsdp::checkStage(sched::StepOp op, const step::Step &s,
                                 const VerifyScheduleOptions &options,
                                 bool planLibraryMemory, bool keepGradsOption,
                                 bool bucketsOption) {
  VerifyFindings f;
  f.issues = step::verifySchedule(
      s, static_cast<double>(options.memoryCapMB) * 1024 * 1024);
  // The step itself first: its program is checked once the step is sound,
  // and the library's memory plan once the program is.
  if (!f.issues.empty())
    return f;
  // A recorded memory plan without bucket staging is of a library without
  // buckets (mfsdp-plan-memory{buckets=false}) or, if the library has
  // them, not of it (readRuntimeMemory says so either way).
  const bool recorded = hasRuntimeMemory(op);
  std::unique_ptr<LibraryProgram> lib = libraryProgramOf(
      op, s, recorded ? static_cast<bool>(op.getRuntimeBucketOffsetsAttr()) : bucketsOption);
  if (!lib)
    return f;
  if (lib->issue) {
    f.program = lib->issue;
    return f;
  }
  const bool keepGrads = s.microbatches > 1 || (!recorded && keepGradsOption);
  if (recorded) {
    step::RuntimeMemoryPlan m = libraryMemoryOf(op, *lib, keepGrads, /*recorded=*/true);
    if (!m.error.empty())
      f.program = "records a runtime memory plan (runtime_*) that does not fit the step "
                  "library's buffers: " +
                  m.error;
  } else if (planLibraryMemory) {
    std::shared_ptr<LibraryProgram> program(std::move(lib));
    f.libraryMemory = [op, program, keepGrads]() -> std::optional<step::RuntimeMemoryPlan> {
      step::RuntimeMemoryPlan m = libraryMemoryOf(op, *program, keepGrads, false);
      if (!m.error.empty())
        return std::nullopt;
      return m;
    };
  }
  return f;
}

std::optional<step::RuntimeMemoryPlan> mfsdp::libraryMemoryStage(sched::StepOp op,
                                                                 const step::Step &s,
                                                                 bool keepGrads,
                                                                 bool buckets) {
  std::unique_ptr<LibraryProgram> lib = libraryProgramOf(op, s, buckets);
  if (!lib || lib->issue)
    return std::nullopt;
  step::RuntimeMemoryPlan m =
      libraryMemoryOf(op, *lib, keepGrads || s.microbatches > 1, /*recorded=*/false);
  if (!m.error.empty())
    return std::nullopt;
  return m;
}

LogicalResult mfsdp::reportStage(sched::StepOp op, const VerifyFindings &f) {
  if (!f.issues.empty()) {
    SmallVector<Operation *> ops;
    for (Operation &child : op.getBody().front())
      ops.push_back(&child);
    for (const step::ScheduleIssue &issue : f.issues) {
      Operation *at = issue.op >= 0 && issue.op < static_cast<int64_t>(ops.size())
                          ? ops[issue.op]
                          : op.getOperation();
      at->emitError(issue.message);
    }
    return failure();
  }
  if (f.program)
    return op.emitOpError() << *f.program;
  return success();
}

LogicalResult mfsdp::verifyStage(sched::StepOp op, const step::Step &s,
                                 const VerifyScheduleOptions &options) {
  return reportStage(op, checkStage(op, s, options));
}

namespace {
struct VerifySchedulePass
    : public mfsdp::impl::VerifyScheduleBase<VerifySchedulePass> {
  using Base::Base;
  void runOnOperation() override {
    sched::StepOp op = getOperation();
    step::Step s;
    if (failed(readStep(op, s)))
      return signalPassFailure();
    VerifyScheduleOptions options;
    options.memoryCapMB = memoryCapMB;
    if (failed(verifyStage(op, s, options)))
      return signalPassFailure();
    markAllAnalysesPreserved();
  }
};
} // namespace

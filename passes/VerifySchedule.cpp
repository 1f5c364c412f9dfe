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
#include <thread>

namespace mfsdp {
#define GEN_PASS_DEF_VERIFYSCHEDULE
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;

namespace {
/// The step library's runtime plan and program for a step, as the emitter
/// builds them (buildLibraryRuntimePlan, lowerLibraryProgram).
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
/// schedules): the emitter says why. Nothing asked for: the step's own
/// reduce dtype and bucket limit, never an error. The program is lowered
/// without each op's origin (a text per program op) and, once checked,
/// kept only as its C view (step::RuntimeProgram::release), which is what
/// the plan points to.
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
  {
    // This thread's diagnostics only: mfsdp-verify-schedule checks several
    // steps in parallel, and another step's errors must still be seen.
    const std::thread::id self = std::this_thread::get_id();
    ScopedDiagnosticHandler quiet(op.getContext(), [self](Diagnostic &) {
      return success(std::this_thread::get_id() == self);
    });
    if (failed(buildLibraryRuntimePlan(graph, op, &s, std::nullopt, buckets, std::nullopt,
                                       out->runtime)))
      return nullptr;
  }
  bool unsupported = false;
  std::string issue = lowerLibraryProgram(s, out->runtime, /*origins=*/false, out->program,
                                          out->view, &unsupported);
  if (unsupported)
    return nullptr;
  if (!issue.empty())
    out->issue = std::move(issue);
  else
    out->program.release(out->view); // the plan needs only its view
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
  return recordedLibraryMemory(op, plan, keepGrads, 0).memory;
}

VerifyFindings mfsdp::checkStage(sched::StepOp op, const step::Step &s,
                                 const VerifyScheduleOptions &options,
                                 bool planLibraryMemory, bool keepGradsOption,
                                 bool bucketsOption) {
  VerifyFindings f;
  // A recorded memory plan without bucket staging is of a library without
  // buckets (mfsdp-plan-memory{buckets=false}) or, if the library has
  // them, not of it (readRuntimeMemory says so either way).
  const bool recorded = hasRuntimeMemory(op);
  const bool buckets =
      recorded ? static_cast<bool>(op.getRuntimeBucketOffsetsAttr()) : bucketsOption;
  // The step itself first: its program is checked once the step is sound,
  // and the library's memory plan once the program is.
  f.issues = step::verifySchedule(
      s, static_cast<double>(options.memoryCapMB) * 1024 * 1024);
  if (!f.issues.empty())
    return f;
  std::unique_ptr<LibraryProgram> lib = libraryProgramOf(op, s, buckets);
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

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

#include <optional>
#include <string>

namespace mfsdp {
#define GEN_PASS_DEF_VERIFYSCHEDULE
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;

/// What is wrong with the program the step library would carry: `s` lowered for the runtime's
/// plan of the module's plan.graph (as the emitter builds both) and checked
/// against `s`. Nothing to check where the module has no single plan.graph
/// (a step written by hand) or no step library can be built from it or
/// from the step (a baseline's step with ops the runtime does not run, as
/// mfsdp-sim --compare schedules): the emitter says why.
static std::optional<std::string> programIssueOf(sched::StepOp op,
                                                 const step::Step &s) {
  auto module = op->getParentOfType<ModuleOp>();
  if (!module)
    return std::nullopt;
  plan::GraphOp graph;
  for (plan::GraphOp g : module.getOps<plan::GraphOp>()) {
    if (graph)
      return std::nullopt;
    graph = g;
  }
  if (!graph)
    return std::nullopt;
  RuntimePlan runtimePlan;
  {
    ScopedDiagnosticHandler quiet(op.getContext(),
                                  [](Diagnostic &) { return success(); });
    if (failed(buildRuntimePlan(graph, runtimePlan)))
      return std::nullopt;
  }
  // The library's buckets: the step's bucketed reductions within the limit
  // they were bucketed with, as the emitter takes them (the program packs
  // and unpacks the units with row-shard buckets).
  // Nothing asked for: the step's own limit, never an error.
  setLibraryBuckets(runtimePlan, s, *libraryBucketBytes(op, std::nullopt));
  // Lowered without each op's origin (a text per program op, the larger
  // part of the program on a large step), and again with them only to
  // name an op in a message.
  auto lower = [&](bool origins) {
    return step::lowerStepProgram(s, runtimePlan.plan, runtimePlan.unitNames, origins);
  };
  step::RuntimeProgram program = lower(/*origins=*/false);
  if (program.unsupported)
    return std::nullopt;
  if (!program.error.empty())
    return "cannot be lowered into the runtime's program: " + lower(true).error;
  step::RuntimeProgram::View view;
  program.view(view);
  const step::ProgramIssue issue =
      step::verifyProgram(s, runtimePlan.plan, view.program, runtimePlan.unitNames);
  if (issue.message.empty())
    return std::nullopt;
  std::string message =
      "lowers to a runtime program that does not run as scheduled: " + issue.message;
  if (issue.op >= 0 && issue.op < static_cast<int32_t>(program.ops.size()))
    message += " (op " + std::to_string(issue.op) + " is lowered from '" +
               lower(true).ops[issue.op].from + "')";
  return message;
}

VerifyFindings mfsdp::checkStage(sched::StepOp op, const step::Step &s,
                                 const VerifyScheduleOptions &options) {
  VerifyFindings f;
  f.issues = step::verifySchedule(
      s, static_cast<double>(options.memoryCapMB) * 1024 * 1024);
  // The step itself first: its program is checked once the step is sound.
  if (f.issues.empty())
    f.program = programIssueOf(op, s);
  return f;
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

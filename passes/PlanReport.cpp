//===- PlanReport.cpp - mfsdp-plan-report ---------------------------------===//
#include "passes/Passes.h"
#include "dialects/plan/PlannerBridge.h"
#include "passes/ScheduleStages.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/ToolOutputFile.h"

namespace mfsdp {
#define GEN_PASS_DEF_PLANREPORT
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;
using namespace mfsdp::plan;

namespace {

struct PlanReportPass : public mfsdp::impl::PlanReportBase<PlanReportPass> {
  using Base::Base;

  void runOnOperation() override {
    if (text && json) {
      getOperation().emitError("mfsdp-plan-report takes one format: text or "
                               "json, not both");
      return signalPassFailure();
    }
    const planner::HardwareProfile *hw =
        planner::findHardwareProfile(hardware.getValue());
    if (!hw) {
      getOperation().emitError(planner::unknownHardwareMessage(hardware));
      return signalPassFailure();
    }
    // JSON: one report, or for a module of several graphs an array of
    // them, in module order; each names its graph.
    std::string out;
    const auto graphs = getOperation().getOps<GraphOp>();
    const bool several = json && std::distance(graphs.begin(), graphs.end()) > 1;
    for (GraphOp g : graphs) {
      if (!g.getMesh()) {
        g.emitError("cannot report a plan without a mesh; run "
                    "mfsdp-assign-layouts first");
        return signalPassFailure();
      }
      BridgedGraph b = readGraph(g);
      for (auto [pp, op] : llvm::zip(b.problem.params, b.params))
        if (!pp.tied && pp.placement == planner::PlacementKind::None) {
          op.emitOpError("has no placement; run mfsdp-assign-layouts before "
                         "mfsdp-plan-report");
          return signalPassFailure();
        }
      FailureOr<::mfsdp::NsPrecision> precision =
          resolveNsPrecision(g, getArgument(), nsPrecision, graphNsPrecision(g),
                             "the graph's #plan.muon");
      if (failed(precision))
        return signalPassFailure();
      planner::Options opts;
      opts.hw = *hw;
      optionsFromGraph(g, opts);
      opts.hw.nsBf16 = *precision == ::mfsdp::NsPrecision::BF16;
      planner::Decisions d;
      opts.nsSplit = planner::Options::Split::Auto;
      std::string reason;
      bool model = planner::decideNsSplit(b.problem, opts, reason);
      PolicyOp policy = g.getPolicy();
      d.nsSplit = policy && policy.getNsSplit();
      if (opts.replicate > 1)
        d.nsSplitReason = std::string(d.nsSplit ? "plan splits" : "plan does not split") +
                          (model == d.nsSplit ? " (as the cost model would): "
                          : d.nsSplit ? " (the cost model would not split): "
                                      : " (the cost model would split): ") +
                          reason;
      planner::Report r = planner::account(b.problem, opts, d);
      r.graph = g.getSymName().str();
      if (json) {
        out += (out.empty() ? several ? "[\n" : "" : ",\n") + planner::renderJson(r);
      } else {
        out += "graph @" + g.getSymName().str() + "\n";
        out += planner::renderText(r);
      }
    }
    if (several)
      out += "]\n";
    std::string error;
    auto file = openOutputFile(output, &error);
    if (!file) {
      getOperation().emitError("cannot open report output '")
          << output << "': " << error;
      return signalPassFailure();
    }
    file->os() << out;
    file->keep();
    markAllAnalysesPreserved();
  }
};

} // namespace

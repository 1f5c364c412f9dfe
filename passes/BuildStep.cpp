//===- BuildStep.cpp - mfsdp-build-step -----------------------------------===//
#include "passes/Passes.h"
#include "dialects/plan/PlanKernels.h"
#include "dialects/plan/PlannerBridge.h"
#include "dialects/sched/StepBridge.h"

#include "mfsdp/step/Builder.h"

namespace mfsdp {
#define GEN_PASS_DEF_BUILDSTEP
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;
using namespace mfsdp::plan;

namespace {

struct BuildStepPass : public mfsdp::impl::BuildStepBase<BuildStepPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<GraphOp> graphs(getOperation().getOps<GraphOp>());
    for (GraphOp g : graphs)
      if (failed(build(g)))
        return signalPassFailure();
  }

  LogicalResult build(GraphOp graph) {
    if (!graph.getMesh())
      return graph.emitError("has no mesh; run mfsdp-assign-layouts before "
                             "mfsdp-build-step");
    if (microbatches < 1 || microbatches > MFSDP_MAX_MICROBATCHES)
      return emitOptionError(graph.getContext(), getArgument(), "microbatches")
             << "expected 1 to " << MFSDP_MAX_MICROBATCHES << ", got "
             << microbatches.getValue();
    if (tokens < 0 || tokens > MFSDP_MAX_TOKENS)
      return emitOptionError(graph.getContext(), getArgument(), "tokens")
             << "expected 1 to " << MFSDP_MAX_TOKENS
             << " (0: the graph's seq_len), got " << tokens.getValue();
    // fsdp2-dtensor replays torch.optim.Muon's addmm form of Newton-Schulz
    // (torch 2.9; use_addmm=True later), fsdp2-dtensor-mm the mm form
    // (use_addmm=False, the default of later releases).
    bool dtensorMm = baseline == StepBaseline::FSDP2DTensorMm;
    bool dtensor = baseline == StepBaseline::FSDP2DTensor || dtensorMm;
    bool fsdp2 = baseline == StepBaseline::FSDP2 || dtensor;
    int64_t tok = tokens > 0 ? static_cast<int64_t>(tokens)
                             : static_cast<int64_t>(graph.getSeqLen());
    if (tok <= 0)
      return graph.emitError("the graph has no seq_len; give tokens=N");

    BridgedGraph b = readGraph(graph);
    for (auto [i, pp] : llvm::enumerate(b.problem.params))
      if (!pp.tied && pp.placement == planner::PlacementKind::None)
        return b.params[i].emitOpError(
            "has no placement; run mfsdp-assign-layouts before "
            "mfsdp-build-step");
    planner::Options opts;
    opts.hw = *planner::findHardwareProfile("a100");
    optionsFromGraph(graph, opts);
    if (nsSteps < 0 || nsSteps > MFSDP_MAX_NS_STEPS)
      return emitOptionError(graph.getContext(), getArgument(), "ns-steps")
             << "expected 1 to " << MFSDP_MAX_NS_STEPS << " (0: the graph's), got "
             << nsSteps.getValue();
    if (nsSteps > 0)
      opts.nsSteps = nsSteps;
    if (dtensor && opts.replicate > 1)
      return graph.emitError("baseline=")
             << enumName(baseline.getValue())
             << " models DTensor on a 1-D dp_shard mesh; dp_replicate > 1 is "
                "not supported";
    planner::Decisions d;
    PolicyOp policy = graph.getPolicy();
    d.nsSplit = policy && policy.getNsSplit();

    std::vector<step::UnitCost> costs;
    for (UnitOp u : b.units) {
      CostAttr c = u.getCost();
      costs.push_back({c.getFwdFlops(), c.getBwdFlops(), c.getActBytes(),
                       c.getRecompute(), plan::unitKernels(c)});
    }
    step::BuildOptions bo;
    bo.tokens = tok;
    bo.microbatches = microbatches;
    bo.reduceElemBytes = reduceDtype == ReduceDTypeOption::BF16  ? 2
                         : reduceDtype == ReduceDTypeOption::F32 ? 4
                                                                 : 0;
    if (fsdp2) {
      bo.gatheredMuon = true;
      bo.dtensorMuon = dtensor;
      bo.dtensorForm =
          dtensorMm ? step::DTensorForm::Mm : step::DTensorForm::Addmm;
      for (const planner::Param &p : b.problem.params)
        if (p.placement == planner::PlacementKind::RowShard && p.rank() == 2 &&
            (p.role == planner::Role::HiddenMatrix ||
             p.role == planner::Role::Expert))
          bo.gatheredMuonParams.push_back(p.name);
    }
    // The step shares the module's symbol table with its graph.
    step::Step s = step::buildStep(b.problem, opts, d, costs, bo,
                                   graph.getSymName().str() + ".step");
    OpBuilder builder(graph.getContext());
    builder.setInsertionPointAfter(graph);
    // Each op of the step is released as it is written.
    FailureOr<sched::StepOp> written =
        writeStep(builder, graph.getLoc(), std::move(s));
    if (failed(written))
      return failure();
    // The step names its graph's mesh, against which its symbol uses
    // (units, parameters, collective axes) are verified.
    written->setMeshAttr(SymbolRefAttr::get(
        graph.getSymNameAttr(),
        {FlatSymbolRefAttr::get(graph.getMesh().getSymNameAttr())}));
    return success();
  }
};

} // namespace

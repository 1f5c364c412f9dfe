//===- BuildStep.cpp - mfsdp-build-step -----------------------------------===//
#include "passes/Passes.h"
#include "dialects/plan/PlanKernels.h"
#include "dialects/plan/PlannerBridge.h"
#include "dialects/sched/StepBridge.h"
#include "passes/ScheduleStages.h"

#include "mfsdp/step/Builder.h"

namespace mfsdp {
#define GEN_PASS_DEF_BUILDSTEP
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;
using namespace mfsdp::plan;

FailureOr<step::Step> mfsdp::buildStage(GraphOp graph, const BuildStepOptions &o,
                                        BridgedGraph *planned) {
  if (!graph.getMesh())
    return graph.emitError("has no mesh; run mfsdp-assign-layouts before "
                           "mfsdp-build-step");
  if (o.microbatches < 1 || o.microbatches > MFSDP_MAX_MICROBATCHES)
    return emitOptionError(graph.getContext(), "mfsdp-build-step", "microbatches")
           << "expected 1 to " << MFSDP_MAX_MICROBATCHES << ", got "
           << o.microbatches;
  if (o.tokens < 0 || o.tokens > MFSDP_MAX_TOKENS)
    return emitOptionError(graph.getContext(), "mfsdp-build-step", "tokens")
           << "expected 1 to " << MFSDP_MAX_TOKENS
           << " (0: the graph's seq_len), got " << o.tokens;
  // fsdp2-dtensor replays torch.optim.Muon's addmm form of Newton-Schulz
  // (torch 2.9; use_addmm=True later), fsdp2-dtensor-mm the mm form
  // (use_addmm=False, the default of later releases).
  bool dtensorMm = o.baseline == StepBaseline::FSDP2DTensorMm;
  bool dtensor = o.baseline == StepBaseline::FSDP2DTensor || dtensorMm;
  bool fsdp2 = o.baseline == StepBaseline::FSDP2 || dtensor;
  // fsdp2-rows: the plan's own optimizer, with FSDP2's copies.
  bool fsdp2Rows = o.baseline == StepBaseline::FSDP2Rows;
  int64_t tok = o.tokens > 0 ? static_cast<int64_t>(o.tokens)
                           : static_cast<int64_t>(graph.getSeqLen());
  if (tok <= 0)
    return graph.emitError("the graph has no seq_len; give tokens=N");

  BridgedGraph b = planned ? std::move(*planned) : readGraph(graph);
  assert((!planned || sameReading(b, readGraph(graph))) &&
         "the planned graph handed over differs from the graph read back");
  for (auto [i, pp] : llvm::enumerate(b.problem.params))
    if (!pp.tied && pp.placement == planner::PlacementKind::None)
      return b.params[i].emitOpError(
          "has no placement; run mfsdp-assign-layouts before "
          "mfsdp-build-step");
  planner::Options opts;
  opts.hw = *planner::findHardwareProfile("a100");
  optionsFromGraph(graph, opts);
  if (o.nsSteps < 0 || o.nsSteps > MFSDP_MAX_NS_STEPS)
    return emitOptionError(graph.getContext(), "mfsdp-build-step", "ns-steps")
           << "expected 1 to " << MFSDP_MAX_NS_STEPS << " (0: the graph's), got "
           << o.nsSteps;
  if (o.nsSteps > 0)
    opts.nsSteps = o.nsSteps;
  if (dtensor && opts.replicate > 1)
    return graph.emitError("baseline=")
           << enumName(o.baseline)
           << " models DTensor on a 1-D dp_shard mesh; dp_replicate > 1 is "
              "not supported";
  planner::Decisions d;
  PolicyOp policy = graph.getPolicy();
  // A baseline is FSDP2's step over FSDP2's layout: every matrix
  // row-sharded, as a policy=adamw plan places them. Over another plan (its
  // matrices on owners) it would find nothing to gather and build the
  // plan's own step under the baseline's name.
  if (fsdp2 && policy && policy.getKind() != plan::PolicyKind::adamw)
    return policy.emitOpError("is ")
           << stringifyPolicyKind(policy.getKind()) << ", but baseline="
           << enumName(o.baseline)
           << " builds FSDP2's step from a plan made with policy=adamw (the "
              "matrices Muon steps kept row-sharded, as FSDP2 shards them); "
              "plan the graph with mfsdp-assign-layouts{policy=adamw}, as "
              "mfsdp-sim --compare plans its baselines";
  d.nsSplit = policy && policy.getNsSplit();

  std::vector<step::UnitCost> costs;
  for (UnitOp u : b.units) {
    CostAttr c = u.getCost();
    costs.push_back({c.getFwdFlops(), c.getBwdFlops(), c.getActBytes(),
                     c.getRecompute(), plan::unitKernels(c)});
  }
  step::BuildOptions bo;
  bo.tokens = tok;
  bo.microbatches = o.microbatches;
  bo.reduceElemBytes = o.reduceDtype == ReduceDTypeOption::BF16  ? 2
                       : o.reduceDtype == ReduceDTypeOption::F32 ? 4
                                                               : 0;
  bo.fsdp2Copies = fsdp2 || fsdp2Rows;
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
  return step::buildStep(b.problem, opts, d, costs, bo,
                         graph.getSymName().str() + ".step");
}

void mfsdp::recordReduceDtype(sched::StepOp op, ReduceDTypeOption dtype) {
  if (dtype == ReduceDTypeOption::F32 || dtype == ReduceDTypeOption::BF16)
    op.setReduceDtypeAttr(sched::ReduceDTypeAttr::get(
        op.getContext(), dtype == ReduceDTypeOption::BF16 ? sched::ReduceDType::bf16
                                                          : sched::ReduceDType::f32));
}

FailureOr<::mfsdp::NsPrecision> mfsdp::resolveNsPrecision(Operation *at, StringRef pass,
                                                 NsPrecisionOption option,
                                                 std::optional<::mfsdp::NsPrecision> recorded,
                                                 StringRef recordedWhere) {
  if (option == NsPrecisionOption::Graph)
    return recorded.value_or(::mfsdp::NsPrecision::FP32);
  const auto asked = static_cast<::mfsdp::NsPrecision>(option);
  if (recorded && *recorded != asked)
    return at->emitError() << pass << ": ns-precision=" << enumName(asked) << " contradicts "
                           << recordedWhere << " (ns_precision " << enumName(*recorded)
                           << "), which the step library runs; plan the graph with "
                              "mfsdp-assign-layouts{ns-precision="
                           << enumName(asked) << "} or leave ns-precision out";
  return asked;
}

void mfsdp::recordNsPrecision(sched::StepOp op, ::mfsdp::NsPrecision precision) {
  if (precision == ::mfsdp::NsPrecision::BF16)
    op.setNsPrecisionAttr(
        sched::NsPrecisionAttr::get(op.getContext(), sched::NsPrecision::bf16));
}

cost::SimProfile mfsdp::stepProfile(sched::StepOp op, cost::SimProfile profile) {
  profile.nsBf16 = op.getNsPrecision() == sched::NsPrecision::bf16;
  return profile;
}

FailureOr<::mfsdp::NsPrecision> mfsdp::stepNsPrecision(sched::StepOp op, StringRef pass,
                                              NsPrecisionOption option) {
  std::optional<::mfsdp::NsPrecision> recorded;
  if (std::optional<sched::NsPrecision> p = op.getNsPrecision())
    recorded = sched::toVocab(*p);
  FailureOr<::mfsdp::NsPrecision> precision =
      resolveNsPrecision(op, pass, option, recorded, "the step's ns_precision");
  if (succeeded(precision) && !recorded)
    recordNsPrecision(op, *precision);
  return precision;
}

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
    BuildStepOptions o;
    o.tokens = tokens;
    o.microbatches = microbatches;
    o.baseline = baseline;
    o.nsSteps = nsSteps;
    o.reduceDtype = reduceDtype;
    FailureOr<step::Step> s = buildStage(graph, o);
    if (failed(s))
      return failure();
    OpBuilder builder(graph.getContext());
    builder.setInsertionPointAfter(graph);
    // Each op of the step is released as it is written.
    FailureOr<sched::StepOp> written =
        writeStep(builder, graph.getLoc(), std::move(*s));
    if (failed(written))
      return failure();
    // The step names its graph's mesh, against which its symbol uses
    // (units, parameters, collective axes) are verified.
    written->setMeshAttr(SymbolRefAttr::get(
        graph.getSymNameAttr(),
        {FlatSymbolRefAttr::get(graph.getMesh().getSymNameAttr())}));
    recordReduceDtype(*written, o.reduceDtype);
    // The precision the graph's Muon runs Newton-Schulz in, which the
    // schedule prices.
    recordNsPrecision(*written,
                      graphNsPrecision(graph).value_or(::mfsdp::NsPrecision::FP32));
    return success();
  }
};

} // namespace

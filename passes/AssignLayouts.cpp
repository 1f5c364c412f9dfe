//===- AssignLayouts.cpp - mfsdp-assign-layouts ---------------------------===//
//
// Turns pass options and the graph's policy and mesh into planner::Options,
// runs the layout planner, and writes the decisions back. The algorithms
// live in lib/planner.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"
#include "passes/PlanStages.h"
#include "dialects/plan/PlannerBridge.h"

#include "mlir/IR/Builders.h"

namespace mfsdp {
#define GEN_PASS_DEF_ASSIGNLAYOUTS
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;
using namespace mfsdp::plan;

namespace {

/// Parses "dp_replicate=2,dp_shard=4,tp=2".
LogicalResult parseMeshOption(StringRef spec, SmallVectorImpl<Attribute> &names,
                              SmallVectorImpl<int64_t> &sizes, Builder &b,
                              std::string &error) {
  SmallVector<StringRef> items;
  spec.split(items, ',', -1, /*KeepEmpty=*/false);
  if (items.empty()) {
    error = "mesh option is empty; expected NAME=SIZE[,NAME=SIZE...]";
    return failure();
  }
  for (StringRef item : items) {
    auto [name, size] = item.trim().split('=');
    int64_t n = 0;
    if (name.empty() || size.trim().getAsInteger(10, n)) {
      error = ("mesh option item '" + item.trim() +
               "' is not NAME=SIZE (for example dp_shard=8)")
                  .str();
      return failure();
    }
    names.push_back(b.getStringAttr(name.trim()));
    sizes.push_back(n);
  }
  return success();
}

} // namespace

LogicalResult mfsdp::assignLayoutsStage(GraphOp graph,
                                        const AssignLayoutsOptions &o,
                                        BridgedGraph *planned) {
  constexpr StringLiteral kPass = "mfsdp-assign-layouts";
  MLIRContext *ctx = graph.getContext();
  Builder b(ctx);
  planner::Options opts;
  const planner::HardwareProfile *hw =
      planner::findHardwareProfile(o.hardware);
  if (!hw)
    return graph.emitError(planner::unknownHardwareMessage(o.hardware));
  opts.hw = *hw;

  // The mesh: from the option (replacing the graph's), else the graph's.
  if (!o.mesh.empty()) {
    SmallVector<Attribute> names;
    SmallVector<int64_t> sizes;
    std::string error;
    if (failed(parseMeshOption(o.mesh, names, sizes, b, error)))
      return emitOptionError(ctx, kPass, "mesh") << error;
    MeshOp old = graph.getMesh();
    OpBuilder ob(ctx);
    ob.setInsertionPointToStart(&graph.getBody().front());
    auto fresh = MeshOp::create(ob, old ? old.getLoc() : graph.getLoc(),
                                "mesh", b.getArrayAttr(names),
                                b.getDenseI64ArrayAttr(sizes),
                                DenseI64ArrayAttr());
    if (failed(fresh.verify())) {
      fresh.erase();
      return failure();
    }
    if (old)
      old.erase();
  }
  MeshOp meshOp = graph.getMesh();
  if (!meshOp)
    return graph.emitError("no mesh to plan for: give the pass a mesh "
                           "(mesh=dp_shard=8) or the graph a plan.mesh");
  if (o.world < 0)
    return emitOptionError(ctx, kPass, "world")
           << "expected the mesh's rank count (0: any), got " << o.world;
  MeshShape shape = meshShape(meshOp, opts.hw.gpusPerNode);
  if (o.world > 0 && shape.world != o.world) {
    std::string dims;
    for (auto [n, s] : llvm::zip(meshOp.getDimNames(), meshOp.getDimSizes()))
      dims += (dims.empty() ? "" : " x ") +
              cast<StringAttr>(n).getValue().str() + "=" + std::to_string(s);
    return meshOp.emitError("mesh has ")
           << shape.world << " ranks (" << dims << ") but world=" << o.world
           << "; the product of the mesh dims must equal the world size";
  }

  optionsFromGraph(graph, opts);
  // The Newton-Schulz precision: the option's (written into the graph's
  // #plan.muon), else the graph's.
  if (o.nsPrecision != NsPrecisionOption::Graph)
    opts.hw.nsBf16 = o.nsPrecision == NsPrecisionOption::BF16;
  if (auto kind = policyOf(o.policy))
    opts.policy = *kind;
  if (o.zero != 0)
    opts.zero = o.zero;
  if (opts.zero < 1 || opts.zero > 3)
    return emitOptionError(ctx, kPass, "zero")
           << "expected 1, 2 or 3, got " << opts.zero;
  opts.muonEmbedding = o.muonEmbedding;
  opts.muonHead = o.muonHead;
  opts.muonRouter = o.muonRouter;
  for (const std::string &name : o.muonInclude)
    opts.muonInclude.push_back(name);
  opts.rowMode = o.rowLayout;
  if (!o.blockShard.empty() && o.blockShard.size() != 2)
    return emitOptionError(ctx, kPass, "block-shard")
           << "expected two extents ROWS,COLS, got " << o.blockShard.size();
  for (int64_t e : o.blockShard)
    if (e < 1)
      return emitOptionError(ctx, kPass, "block-shard")
             << "expected extents of 1 or more, got " << o.blockShard[0] << ","
             << o.blockShard[1];
  opts.blockShape.assign(o.blockShard.begin(), o.blockShard.end());
  opts.strategy = o.ownerStrategy;
  if (o.groupUnits < 0)
    return emitOptionError(ctx, kPass, "group-units")
           << "expected 0 or more, got " << o.groupUnits;
  opts.groupUnits = o.groupUnits;
  if (o.groupMaxMB < 1)
    return emitOptionError(ctx, kPass, "group-max-mb")
           << "expected 1 or more, got " << o.groupMaxMB;
  opts.groupMaxBytes = static_cast<double>(o.groupMaxMB) * 1024 * 1024;
  opts.nsSplit = o.nsSplit;
  opts.replicateUnderBytes = static_cast<double>(o.replicateUnder);
  if (o.nsSteps < 0 || o.nsSteps > MFSDP_MAX_NS_STEPS)
    return emitOptionError(ctx, kPass, "ns-steps")
           << "expected 1 to " << MFSDP_MAX_NS_STEPS << " (0: the graph's), got "
           << o.nsSteps;
  if (o.nsSteps > 0)
    opts.nsSteps = o.nsSteps;
  // The option only ever turns masters off; a graph planned without them
  // keeps that.
  opts.fp32Master = opts.fp32Master && o.fp32Master;

  BridgedGraph bridged = readGraph(graph);
  // Every muon-include name must exist.
  for (const std::string &name : opts.muonInclude)
    if (llvm::none_of(bridged.problem.params,
                      [&](const planner::Param &p) { return p.name == name; }))
      return graph.emitError("muon-include names unknown parameter '")
             << name << "'";
  // External parameters must name dims of the mesh they are planned for.
  for (auto [pp, op] : llvm::zip(bridged.problem.params, bridged.params))
    for (const std::string &axis : pp.externalAxes)
      if (!meshOp.getDimSize(axis))
        return op.emitOpError("is owned by \"")
               << axis << "\", which is not a dim of mesh @"
               << meshOp.getSymName();

  planner::Decisions decisions;
  planner::PlanError err;
  if (!planner::planLayouts(bridged.problem, opts, decisions, err)) {
    if (err.param >= 0)
      return bridged.params[err.param].emitOpError(err.message);
    return graph.emitError(err.message);
  }
  writeGraph(graph, bridged, opts, decisions);
  if (planned) {
    readBackAfterWrite(bridged);
    *planned = std::move(bridged);
  }
  return success();
}

namespace {
struct AssignLayoutsPass
    : public WithLayoutOptions<mfsdp::impl::AssignLayoutsBase<AssignLayoutsPass>> {
  using WithLayoutOptions::WithLayoutOptions;

  void runOnOperation() override {
    if (failed(assignLayoutsStage(getOperation(), layoutOptions())))
      return signalPassFailure();
  }
};
} // namespace

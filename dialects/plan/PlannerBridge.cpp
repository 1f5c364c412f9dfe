//===- PlannerBridge.cpp - plan IR <-> the layout planner -----------------===//
#include "dialects/plan/PlannerBridge.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

#include <tuple>

using namespace mlir;
using namespace mfsdp;
using namespace mfsdp::plan;

static std::vector<std::string> strings(ArrayAttr a) {
  std::vector<std::string> out;
  for (Attribute e : a)
    out.push_back(cast<StringAttr>(e).getValue().str());
  return out;
}

BridgedGraph mfsdp::readGraph(GraphOp graph) {
  BridgedGraph b;
  Block &body = graph.getBody().front();
  const GraphSizes sizes = graphSizes(graph);
  b.units.reserve(sizes.units);
  b.problem.units.reserve(sizes.units);
  b.problem.params.reserve(sizes.params);
  b.params.reserve(sizes.params);
  for (UnitOp u : body.getOps<UnitOp>())
    b.units.push_back(u);
  llvm::stable_sort(b.units, [](UnitOp x, UnitOp y) {
    return static_cast<int64_t>(x.getIndex()) < static_cast<int64_t>(y.getIndex());
  });
  // Keyed by the uniqued name attributes (a unit's reference and the
  // parameter's own name are one StringAttr): no name is hashed.
  llvm::DenseMap<StringAttr, int64_t> unitOf;
  unitOf.reserve(static_cast<unsigned>(sizes.params));
  for (auto [i, u] : llvm::enumerate(b.units)) {
    planner::Unit pu;
    pu.name = u.getSymName().str();
    if (auto g = u.getGroup())
      pu.group = static_cast<int64_t>(*g);
    // No row_layout (a unit written by hand): per_param, what the step
    // runtime runs.
    std::optional<plan::RowLayout> l = u.getRowLayout();
    pu.layout = l ? toVocab(*l) : planner::RowLayout::PerParam;
    b.problem.units.push_back(pu);
    for (Attribute a : u.getParams())
      unitOf[cast<FlatSymbolRefAttr>(a).getAttr()] = static_cast<int64_t>(i);
  }
  for (ParamOp p : body.getOps<ParamOp>()) {
    planner::Param pp;
    pp.name = p.getSymName().str();
    RankedTensorType t = p.getTensorType();
    pp.shape.assign(t.getShape().begin(), t.getShape().end());
    pp.elemBytes = std::max<int64_t>(1, t.getElementTypeBitWidth() / 8);
    pp.kind = stringifyParamKind(p.getKind()).str();
    pp.tied = bool(p.getTiedTo());
    pp.frozen = p.getFrozen();
    auto it = unitOf.find(p.getSymNameAttr());
    pp.unit = it == unitOf.end() ? -1 : it->second;
    Attribute pl = p.getPlacementAttr();
    if (auto ext = dyn_cast_or_null<ExternalAttr>(pl)) {
      pp.external = true;
      pp.externalAxes = strings(ext.getAxes());
      pp.placement = planner::PlacementKind::External;
    } else if (auto row = dyn_cast_or_null<RowShardAttr>(pl)) {
      pp.pinned = true;
      pp.placement = planner::PlacementKind::RowShard;
      pp.rowDim = row.getDim();
    } else if (auto blk = dyn_cast_or_null<BlockShardAttr>(pl)) {
      pp.pinned = true;
      pp.placement = planner::PlacementKind::BlockShard;
      pp.block.assign(blk.getBlock().begin(), blk.getBlock().end());
    } else if (auto own = dyn_cast_or_null<OwnerAttr>(pl)) {
      pp.pinned = true;
      pp.placement = planner::PlacementKind::Owner;
      pp.ownerRank = own.getRank();
    } else if (isa_and_nonnull<ReplicateAttr>(pl)) {
      pp.pinned = true;
      pp.placement = planner::PlacementKind::Replicate;
    }
    if (auto opt = p.getOptimizerAttr()) {
      pp.optim = isa<MuonAttr>(opt)    ? planner::Optim::Muon
                 : isa<SGDAttr>(opt)   ? planner::Optim::SGD
                                       : planner::Optim::AdamW;
    }
    pp.role = planner::classify(pp);
    b.problem.params.push_back(std::move(pp));
    b.params.push_back(p);
  }
  return b;
}

MeshShape mfsdp::meshShape(MeshOp mesh, int64_t gpusPerNode) {
  MeshShape m;
  if (!mesh)
    return m;
  m.world = mesh.getWorldSize();
  m.shard = mesh.getDimSize("dp_shard").value_or(1);
  m.replicate = mesh.getDimSize("dp_replicate").value_or(1);
  // Ranks are row-major: the dp_shard group spans its size times the sizes
  // of the dims after it.
  int64_t span = 1;
  bool after = false;
  for (auto [n, s] : llvm::zip(mesh.getDimNames(), mesh.getDimSizes())) {
    if (cast<StringAttr>(n).getValue() == "dp_shard")
      after = true;
    if (after)
      span *= s;
  }
  m.shardIntraNode = span <= gpusPerNode;
  return m;
}

void mfsdp::optionsFromGraph(GraphOp graph, planner::Options &opts) {
  if (PolicyOp policy = graph.getPolicy()) {
    opts.policy = toVocab(policy.getKind());
    opts.zero = static_cast<int64_t>(policy.getZero());
    if (MuonAttr m = policy.getMuonAttr())
      opts.nsSteps = m.getNsSteps();
    if (SGDAttr s = policy.getSgdAttr())
      opts.sgdMomentum = s.getMomentum();
    opts.fp32Master = !policy.getNoMaster();
  }
  MeshShape m = meshShape(graph.getMesh(), opts.hw.gpusPerNode);
  opts.shard = m.shard;
  opts.replicate = m.replicate;
  opts.shardIntraNode = m.shardIntraNode;
  // Newton-Schulz steps may also come from the parameters' own attributes.
  for (ParamOp p : graph.getBody().front().getOps<ParamOp>())
    if (auto muon = dyn_cast_or_null<MuonAttr>(p.getOptimizerAttr())) {
      opts.nsSteps = muon.getNsSteps();
      break;
    }
  if (std::optional<::mfsdp::NsPrecision> precision = graphNsPrecision(graph))
    opts.hw.nsBf16 = *precision == ::mfsdp::NsPrecision::BF16;
}

std::optional<::mfsdp::NsPrecision> mfsdp::graphNsPrecision(GraphOp graph) {
  for (ParamOp p : graph.getBody().front().getOps<ParamOp>())
    if (auto muon = dyn_cast_or_null<MuonAttr>(p.getOptimizerAttr()))
      return toVocab(muon.getNsPrecision());
  if (PolicyOp policy = graph.getPolicy())
    if (MuonAttr m = policy.getMuonAttr())
      return toVocab(m.getNsPrecision());
  return std::nullopt;
}

/// Whether each unit holds a row-sharded parameter (writeGraph gives those
/// a row layout).
static std::vector<bool> unitsWithRows(const planner::Problem &pr) {
  std::vector<bool> hasRows(pr.units.size(), false);
  for (const planner::Param &p : pr.params)
    if (p.placement == planner::PlacementKind::RowShard && p.unit >= 0)
      hasRows[p.unit] = true;
  return hasRows;
}

void mfsdp::writeGraph(GraphOp graph, const BridgedGraph &b,
                       const planner::Options &opts,
                       const planner::Decisions &d) {
  MLIRContext *ctx = graph.getContext();
  Builder builder(ctx);
  ArrayAttr shardAxes = builder.getStrArrayAttr({"dp_shard"});

  // The policy: what was planned, with explicit hyperparameters.
  PolicyOp policy = graph.getPolicy();
  if (!policy) {
    OpBuilder ob(ctx);
    Block &body = graph.getBody().front();
    MeshOp mesh = graph.getMesh();
    if (mesh)
      ob.setInsertionPointAfter(mesh);
    else
      ob.setInsertionPointToStart(&body);
    policy = PolicyOp::create(ob, graph.getLoc(),
                              PolicyKindAttr::get(ctx, plan::PolicyKind::adamw),
                              builder.getI64IntegerAttr(3), AdamWAttr(),
                              SGDAttr(), MuonAttr(), UnitAttr(), UnitAttr());
  }
  policy.setKindAttr(PolicyKindAttr::get(ctx, fromVocab(opts.policy)));
  policy.setZeroAttr(builder.getI64IntegerAttr(opts.zero));
  if (d.nsSplit)
    policy.setNsSplitAttr(builder.getUnitAttr());
  else
    policy.removeNsSplitAttr();
  if (!opts.fp32Master)
    policy.setNoMasterAttr(builder.getUnitAttr());
  else
    policy.removeNoMasterAttr();
  bool usesMuon = false, usesAdamW = false, usesSGD = false;
  for (const planner::Param &p : b.problem.params) {
    usesMuon |= p.optim == planner::Optim::Muon;
    usesAdamW |= p.optim == planner::Optim::AdamW;
    usesSGD |= p.optim == planner::Optim::SGD;
  }
  AdamWAttr adamw = policy.getAdamwAttr();
  if (!adamw && usesAdamW)
    adamw = AdamWAttr::get(ctx, 1e-3, 0.9, 0.999, 1e-8, 0.01);
  MuonAttr muon = policy.getMuonAttr();
  const plan::NsPrecision nsPrecision =
      opts.hw.nsBf16 ? plan::NsPrecision::bf16 : plan::NsPrecision::fp32;
  if (!muon && usesMuon)
    muon = MuonAttr::get(ctx, 0.02, 0.95, 0.01, true, opts.nsSteps,
                         plan::MuonScale::match_rms_adamw, nsPrecision);
  else if (muon && (muon.getNsSteps() != opts.nsSteps ||
                    muon.getNsPrecision() != nsPrecision))
    muon = MuonAttr::get(ctx, muon.getLr(), muon.getMomentum(),
                         muon.getWeightDecay(), muon.getNesterov(),
                         opts.nsSteps, muon.getScale(), nsPrecision);
  SGDAttr sgd = policy.getSgdAttr();
  if (!sgd && usesSGD)
    sgd = SGDAttr::get(ctx, 1e-2, opts.sgdMomentum, 0.0, false);
  // Hyperparameters of an optimizer the planned policy does not run are
  // dropped (a graph planned with another policy than its own, as
  // mfsdp-sim --compare's baselines do, keeps a valid policy op).
  const bool kindMuon = opts.policy == planner::PolicyKind::Muon ||
                        opts.policy == planner::PolicyKind::MixedMuonAdamW;
  const bool kindAdamW = opts.policy == planner::PolicyKind::AdamW ||
                         opts.policy == planner::PolicyKind::MixedMuonAdamW ||
                         opts.policy == planner::PolicyKind::Muon;
  const bool kindSGD = opts.policy == planner::PolicyKind::SGD;
  if (adamw && kindAdamW)
    policy.setAdamwAttr(adamw);
  else
    policy.removeAdamwAttr();
  if (muon && kindMuon)
    policy.setMuonAttr(muon);
  else
    policy.removeMuonAttr();
  if (sgd && kindSGD)
    policy.setSgdAttr(sgd);
  else
    policy.removeSgdAttr();

  for (auto [i, pp] : llvm::enumerate(b.problem.params)) {
    ParamOp op = b.params[i];
    Attribute placement;
    switch (pp.placement) {
    case planner::PlacementKind::RowShard:
      placement = RowShardAttr::get(ctx, pp.rowDim, shardAxes);
      break;
    case planner::PlacementKind::BlockShard:
      placement = BlockShardAttr::get(ctx, pp.block, shardAxes);
      break;
    case planner::PlacementKind::Owner:
      placement = OwnerAttr::get(ctx, pp.ownerRank, shardAxes);
      break;
    case planner::PlacementKind::Replicate:
      placement = ReplicateAttr::get(ctx);
      break;
    case planner::PlacementKind::External:
      placement = op.getPlacementAttr();
      break;
    case planner::PlacementKind::None:
      break;
    }
    if (placement)
      op.setPlacementAttr(placement);
    else
      op.removePlacementAttr();
    Attribute optimizer;
    switch (pp.optim) {
    case planner::Optim::AdamW:
      optimizer = adamw;
      break;
    case planner::Optim::SGD:
      optimizer = sgd;
      break;
    case planner::Optim::Muon:
      optimizer = muon;
      break;
    case planner::Optim::None:
      break;
    }
    if (optimizer)
      op.setOptimizerAttr(optimizer);
    else
      op.removeOptimizerAttr();
  }

  std::vector<bool> hasRows = unitsWithRows(b.problem);
  for (auto [i, pu] : llvm::enumerate(b.problem.units)) {
    UnitOp u = b.units[i];
    u.setGroupAttr(builder.getI64IntegerAttr(pu.group));
    if (hasRows[i])
      u.setRowLayoutAttr(RowLayoutAttr::get(ctx, fromVocab(pu.layout)));
    else
      u.removeRowLayoutAttr();
  }
}

void mfsdp::readBackAfterWrite(BridgedGraph &b) {
  // As readGraph reads what writeGraph wrote: each parameter's placement
  // attribute and that placement's own fields (a pin), its optimizer
  // attribute (none where writeGraph removed it); each unit's group, and
  // its row layout where it has row shards. (The role is classify's of
  // fields planning does not change: readGraph and the planner both set it.)
  const planner::Param defaults;
  for (planner::Param &p : b.problem.params) {
    switch (p.placement) {
    case planner::PlacementKind::RowShard:
    case planner::PlacementKind::BlockShard:
    case planner::PlacementKind::Owner:
    case planner::PlacementKind::Replicate:
      p.pinned = true;
      break;
    case planner::PlacementKind::External:
    case planner::PlacementKind::None:
      p.pinned = false;
      break;
    }
    if (p.placement != planner::PlacementKind::RowShard)
      p.rowDim = defaults.rowDim;
    if (p.placement != planner::PlacementKind::Owner)
      p.ownerRank = defaults.ownerRank;
    if (p.placement != planner::PlacementKind::BlockShard)
      p.block.clear();
  }
  // A unit without row shards is written without row_layout, which reads
  // back as per_param (readGraph).
  std::vector<bool> hasRows = unitsWithRows(b.problem);
  for (auto [i, pu] : llvm::enumerate(b.problem.units))
    if (!hasRows[i])
      pu.layout = planner::RowLayout::PerParam;
}

bool mfsdp::sameReading(const BridgedGraph &a, const BridgedGraph &b) {
  auto sameParam = [](const planner::Param &x, const planner::Param &y) {
    return std::tie(x.name, x.shape, x.elemBytes, x.kind, x.unit, x.tied,
                    x.external, x.frozen, x.externalAxes, x.role, x.placement,
                    x.pinned, x.ownerRank, x.rowDim, x.block, x.optim) ==
           std::tie(y.name, y.shape, y.elemBytes, y.kind, y.unit, y.tied,
                    y.external, y.frozen, y.externalAxes, y.role, y.placement,
                    y.pinned, y.ownerRank, y.rowDim, y.block, y.optim);
  };
  auto sameUnit = [](const planner::Unit &x, const planner::Unit &y) {
    return std::tie(x.name, x.group, x.layout) == std::tie(y.name, y.group, y.layout);
  };
  return a.params == b.params && a.units == b.units &&
         llvm::equal(a.problem.params, b.problem.params, sameParam) &&
         llvm::equal(a.problem.units, b.problem.units, sameUnit);
}

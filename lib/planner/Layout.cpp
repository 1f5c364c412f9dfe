//===- Layout.cpp - Layout planning and per-rank accounting ---------------===//
//
// Cost conventions (all per optimizer step, per data-parallel rank):
//  - Memory: parameters in their dtype (p bytes), gradients in the same
//    dtype, an fp32 master when p < 4, optimizer state in fp32 (AdamW 8 B,
//    Muon 4 B, SGD 4 B with momentum). ZeRO-1 shards master and state,
//    ZeRO-2 also gradients, ZeRO-3 also parameters. A matrix owner keeps the
//    sharded states of its matrices whole.
//  - Optimizer work: Newton-Schulz FLOPs over the GEMM rate plus elementwise
//    bytes over memory bandwidth (AdamW reads the gradient, reads and writes
//    m, v and the master, writes the compute copy: 28 B per bf16 element).
//  - Communication: bytes each rank sends under NCCL's ring algorithms:
//    all-gather and reduce-scatter (W-1)/W of the buffer, all-reduce twice
//    that; a ring all-gather-v of owner matrices sends every chunk but the
//    successor's, a reduce-scatter-v every chunk but its own.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/planner/Layout.h"
#include "mfsdp/runtime/Kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <set>

namespace mfsdp::planner {

std::string_view roleName(Role r) {
  switch (r) {
  case Role::HiddenMatrix: return "hidden_matrix";
  case Role::Embedding: return "embedding";
  case Role::OutputHead: return "output_head";
  case Role::Norm: return "norm";
  case Role::Bias: return "bias";
  case Role::Router: return "router";
  case Role::Expert: return "expert";
  case Role::OneD: return "1d";
  case Role::Other: return "other";
  case Role::External: return "external";
  case Role::Tied: return "tied";
  }
  return "?";
}

int64_t Param::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

Role classify(const Param &p) {
  if (p.tied)
    return Role::Tied;
  if (p.external)
    return Role::External;
  if (p.kind == "embedding")
    return Role::Embedding;
  if (p.kind == "output")
    return Role::OutputHead;
  if (p.kind == "norm")
    return Role::Norm;
  if (p.kind == "router")
    return Role::Router;
  if (p.rank() == 2)
    return p.kind == "expert" ? Role::Expert : Role::HiddenMatrix;
  if (p.rank() == 1)
    return p.kind == "linear" ? Role::Bias : Role::OneD;
  return Role::Other;
}

double masterBytesPerElem(const Param &p, const Options &opts) {
  return opts.fp32Master && p.elemBytes < 4 ? 4.0 : 0.0;
}

double stateBytesPerElem(Optim o, const Options &opts) {
  switch (o) {
  case Optim::AdamW: return 8;
  case Optim::Muon: return 4;
  case Optim::SGD: return opts.sgdMomentum > 0 ? 4 : 0;
  case Optim::None: return 0;
  }
  return 0;
}

/// Elementwise bytes the optimizer moves per element of a parameter.
double optimBytesPerElem(const Param &p, const Options &opts) {
  if (p.optim == Optim::None)
    return 0;
  double b = static_cast<double>(p.elemBytes);         // read the gradient
  b += 2 * stateBytesPerElem(p.optim, opts);            // read+write state
  if (masterBytesPerElem(p, opts) > 0) {
    b += 8;                                  // read+write the fp32 master
    b += static_cast<double>(p.elemBytes);   // write the compute copy
  } else {
    b += 2 * static_cast<double>(p.elemBytes); // read+write the parameter
  }
  return b;
}

namespace {

/// A parameter's optimizer step at the profile's sustained rates (as the
/// simulator prices it): elementwise bytes at hbmBytes x hbmEfficiency,
/// Newton-Schulz at the rate of its precision plus its kernels' time.
double optimSecondsWhole(const Param &p, const Options &opts) {
  double n = static_cast<double>(p.numElements());
  double t = n * optimBytesPerElem(p, opts) / (opts.hw.hbmBytes * opts.hw.hbmEfficiency);
  if (p.optim == Optim::Muon)
    t += newtonSchulzFlops(p.shape[0], p.shape[1], opts.nsSteps) / nsFlopsRate(opts.hw) +
         static_cast<double>(rt::newtonSchulzKernels(
             p.shape[0], p.shape[1], opts.nsSteps, nsPrecision(opts.hw))) *
             nsKernelSeconds(opts.hw);
  return t;
}

/// Bytes of a matrix that stay on its owner, by ZeRO level.
double ownerResidentBytes(const Param &p, const Options &opts) {
  double n = static_cast<double>(p.numElements());
  double per = masterBytesPerElem(p, opts) + stateBytesPerElem(p.optim, opts);
  if (opts.zero >= 2 && !p.frozen)
    per += p.elemBytes; // gradient
  if (opts.zero >= 3)
    per += p.elemBytes; // parameter
  if (p.frozen)
    per = opts.zero >= 3 ? p.elemBytes : 0;
  return n * per;
}

double linkBytes(const Options &o) {
  return o.shardIntraNode ? o.hw.intraBytes : o.hw.interBytes;
}

std::string bytesText(double b) {
  static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int i = 0;
  while (std::fabs(b) >= 1024 && i < 5) {
    b /= 1024;
    ++i;
  }
  return i == 0 ? fmt::format("{:.0f} {}", b, u[i])
                : fmt::format("{:.2f} {}", b, u[i]);
}

/// Row size in bytes and row count of a row-sharded parameter.
std::pair<double, int64_t> rowsOf(const Param &p, int64_t elemBytes) {
  int64_t rows = p.shape.empty() ? 1 : p.shape[std::min<int64_t>(p.rowDim, p.rank() - 1)];
  rows = std::max<int64_t>(rows, 1);
  double rowBytes = static_cast<double>(p.numElements()) / rows *
                    static_cast<double>(elemBytes > 0 ? elemBytes : p.elemBytes);
  return {rowBytes, rows};
}

} // namespace

double perParamPadding(const std::vector<const Param *> &params, int64_t world,
                       int64_t elemBytes) {
  double pad = 0;
  for (const Param *p : params) {
    auto [rowBytes, rows] = rowsOf(*p, elemBytes);
    int64_t chunk = (rows + world - 1) / world;
    pad += static_cast<double>(chunk * world - rows) * rowBytes;
  }
  return pad;
}

double flatPadding(const std::vector<const Param *> &params, int64_t world,
                   int64_t elemBytes) {
  // Rows in order, cut into `world` shards at row boundaries; every shard is
  // padded to the largest. Binary search the smallest feasible shard size.
  struct Run {
    int64_t rowBytes, rows;
  };
  std::vector<Run> runs;
  int64_t total = 0, maxRow = 0;
  for (const Param *p : params) {
    auto [rb, rows] = rowsOf(*p, elemBytes);
    int64_t b = static_cast<int64_t>(std::llround(rb));
    runs.push_back({std::max<int64_t>(b, 1), rows});
    total += b * rows;
    maxRow = std::max(maxRow, b);
  }
  if (total == 0 || world <= 1)
    return 0;
  auto fits = [&](int64_t cap) {
    int64_t shards = 1, fill = 0;
    for (const Run &r : runs) {
      int64_t left = r.rows;
      while (left > 0) {
        int64_t room = (cap - fill) / r.rowBytes;
        if (room >= left) {
          fill += left * r.rowBytes;
          left = 0;
        } else {
          left -= room;
          if (++shards > world)
            return false;
          fill = 0;
        }
      }
    }
    return true;
  };
  int64_t lo = std::max((total + world - 1) / world, maxRow), hi = total;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  return static_cast<double>(lo) * world - static_cast<double>(total);
}

//===----------------------------------------------------------------------===//
// Planning
//===----------------------------------------------------------------------===//

namespace {

bool wantsMuon(const Param &p, const Options &o) {
  if (std::find(o.muonInclude.begin(), o.muonInclude.end(), p.name) !=
      o.muonInclude.end())
    return true;
  switch (o.policy) {
  case PolicyKind::AdamW:
  case PolicyKind::SGD:
    return false;
  case PolicyKind::Muon:
    return p.rank() == 2 &&
           (p.role == Role::HiddenMatrix || p.role == Role::Expert ||
            p.role == Role::Embedding || p.role == Role::OutputHead ||
            p.role == Role::Router);
  case PolicyKind::MixedMuonAdamW:
    switch (p.role) {
    case Role::HiddenMatrix:
    case Role::Expert:
      return true;
    case Role::Embedding:
      return o.muonEmbedding;
    case Role::OutputHead:
      return o.muonHead;
    case Role::Router:
      return o.muonRouter;
    default:
      return false;
    }
  }
  return false;
}

struct UnitCostModel {
  double padPerParam = 0, padFlat = 0, copies = 0;
  double tPerParam = 0, tFlat = 0;
};

UnitCostModel unitRowCosts(const std::vector<const Param *> &rowParams,
                           const Options &o) {
  UnitCostModel m;
  if (rowParams.empty())
    return m;
  double unitBytes = 0;
  for (const Param *p : rowParams)
    unitBytes += static_cast<double>(p->numElements()) * p->elemBytes;
  int64_t w = o.shard;
  m.padPerParam = perParamPadding(rowParams, w);
  m.padFlat = flatPadding(rowParams, w);
  double gathers = o.zero >= 3 ? 2 : 1;
  // FSDP2 copies shards into and out of flat buffers around each collective
  // (read and write): per gather unit/W in and unit out, per reduce-scatter
  // unit in and unit/W out.
  double perCollective = 2 * (unitBytes + unitBytes / w);
  m.copies = (gathers + 1) * perCollective;
  double link = linkBytes(o);
  m.tPerParam = m.padPerParam * (gathers + 1) / link + m.copies / o.hw.hbmBytes;
  m.tFlat = m.padFlat * (gathers + 1) / link;
  return m;
}

} // namespace

bool decideNsSplit(const Problem &pr, const Options &o, std::string &reason) {
  const int64_t S = std::max<int64_t>(o.shard, 1);
  double ownerSeconds = 0, ownerBytes = 0;
  for (const Param &p : pr.params)
    if (p.placement == PlacementKind::Owner && p.optim == Optim::Muon) {
      ownerSeconds += optimSecondsWhole(p, o);
      ownerBytes += static_cast<double>(p.numElements()) * p.elemBytes;
    }
  reason.clear();
  if (o.replicate <= 1)
    return false;
  if (ownerSeconds <= 0) {
    reason = "not split: no matrix owners";
    return false;
  }
  double R = static_cast<double>(o.replicate);
  double saved = ownerSeconds / S * (1 - 1 / R);
  // The updates go in one call over the replicas (one ring across nodes):
  // its latency, and each rank's share of the bytes.
  double cost = o.hw.collBaseSeconds + (R - 1) * o.hw.interHopSeconds +
                ownerBytes / S * (R - 1) / R / o.hw.interBytes;
  bool split = o.nsSplit == Options::Split::On ||
               (o.nsSplit == Options::Split::Auto && saved > cost);
  reason = fmt::format(
      "{}: splitting saves {:.3f} ms of Newton-Schulz per rank and costs "
      "{:.3f} ms sending {} of updates between {} replicas (predicted, {})",
      split ? "split" : "not split", saved * 1e3, cost * 1e3,
      bytesText(ownerBytes / S * (R - 1) / R), o.replicate, o.hw.name);
  if (o.nsSplit != Options::Split::Auto)
    reason += " [forced by the ns-split option]";
  return split;
}

bool planLayouts(Problem &pr, const Options &o, Decisions &out, PlanError &err) {
  auto fail = [&](int64_t param, std::string msg) {
    err.param = param;
    err.message = std::move(msg);
    return false;
  };
  if (o.shard < 1 || o.replicate < 1) {
    err.message = "the dp_shard and dp_replicate sizes must be at least 1";
    return false;
  }
  const int64_t S = o.shard;

  // 1. Roles, optimizers, placements.
  for (size_t i = 0; i < pr.params.size(); ++i) {
    Param &p = pr.params[i];
    p.role = classify(p);
    if (p.role == Role::Tied) {
      p.placement = PlacementKind::None;
      p.optim = Optim::None;
      continue;
    }
    if (p.role == Role::External) {
      p.placement = PlacementKind::External;
      p.optim = Optim::None;
      continue;
    }
    bool muon = wantsMuon(p, o);
    if (muon && p.rank() != 2)
      return fail(i, fmt::format("Muon needs a 2-D matrix, but '{}' has rank "
                                 "{}; leave it to AdamW",
                                 p.name, p.rank()));
    if (p.frozen)
      p.optim = Optim::None;
    else if (muon)
      p.optim = Optim::Muon;
    else
      p.optim = o.policy == PolicyKind::SGD ? Optim::SGD : Optim::AdamW;

    if (p.pinned) {
      if (muon && (p.placement == PlacementKind::RowShard ||
                   p.placement == PlacementKind::BlockShard))
        return fail(i, fmt::format(
                           "Muon needs '{}' whole on one rank, but it is "
                           "pinned to {}; pin #plan.owner or leave it unpinned",
                           p.name, enumName(p.placement)));
      if (p.placement == PlacementKind::Owner && p.ownerRank >= S)
        return fail(i, fmt::format("'{}' is pinned to owner rank {}, outside "
                                   "the mesh: dp_shard has {} ranks",
                                   p.name, p.ownerRank, S));
      if (p.placement == PlacementKind::RowShard && p.rowDim >= p.rank())
        return fail(i, fmt::format("'{}' is pinned to row_shard dim {} of a "
                                   "rank-{} tensor",
                                   p.name, p.rowDim, p.rank()));
      continue;
    }
    double bytes = static_cast<double>(p.numElements()) * p.elemBytes;
    if (muon) {
      p.placement = PlacementKind::Owner;
    } else if (bytes < o.replicateUnderBytes) {
      p.placement = PlacementKind::Replicate;
    } else if (!o.blockShape.empty() && p.rank() == 2 &&
               (p.role == Role::HiddenMatrix || p.role == Role::Expert)) {
      if (o.blockShape.size() != 2)
        return fail(-1, "block shapes have two extents (rows x cols)");
      int64_t br = o.blockShape[0], bc = o.blockShape[1];
      if (br <= 0 || bc <= 0)
        return fail(-1, "block extents must be positive");
      if (p.shape[0] % br || p.shape[1] % bc) {
        // Blocks that do not tile fall back to rows, as FSDP2 would.
        p.placement = PlacementKind::RowShard;
        p.rowDim = 0;
        continue;
      }
      int64_t blocks = (p.shape[0] / br) * (p.shape[1] / bc);
      if (blocks < S)
        return fail(i, fmt::format(
                           "block_shard of '{}' makes {} blocks of {}x{} for "
                           "{} ranks: ranks {}..{} would hold none of it, and "
                           "every rank must send an equal share in its "
                           "unit's all-gather; use smaller blocks or row "
                           "shards",
                           p.name, blocks, br, bc, S, blocks, S - 1));
      p.placement = PlacementKind::BlockShard;
      p.block = {br, bc};
    } else {
      p.placement = PlacementKind::RowShard;
      p.rowDim = 0;
    }
  }

  // 2. Gather groups.
  std::vector<int64_t> ownersPerUnit(pr.units.size(), 0);
  for (const Param &p : pr.params)
    if (p.placement == PlacementKind::Owner && p.unit >= 0 &&
        p.unit < static_cast<int64_t>(pr.units.size()))
      ownersPerUnit[p.unit]++;
  std::vector<int64_t> group(pr.units.size());
  bool anyOwner = std::any_of(ownersPerUnit.begin(), ownersPerUnit.end(),
                              [](int64_t c) { return c > 0; });
  if (o.groupUnits == 0 && anyOwner) {
    // Enough adjacent units that a group has an owner matrix per rank; then
    // split any group that would gather more than groupMaxBytes into
    // contiguous pieces of about equal bytes.
    std::vector<double> unitBytes(pr.units.size(), 0);
    for (const Param &p : pr.params)
      if (p.unit >= 0 && p.placement != PlacementKind::External &&
          p.unit < static_cast<int64_t>(pr.units.size()))
        unitBytes[p.unit] += static_cast<double>(p.numElements()) * p.elemBytes;
    std::vector<int64_t> coarse = groupUnits(ownersPerUnit, S);
    int64_t next = 0;
    for (size_t begin = 0; begin < coarse.size();) {
      size_t end = begin;
      double bytes = 0;
      while (end < coarse.size() && coarse[end] == coarse[begin])
        bytes += unitBytes[end++];
      int64_t len = static_cast<int64_t>(end - begin);
      int64_t pieces = std::clamp<int64_t>(
          static_cast<int64_t>(std::ceil(bytes / o.groupMaxBytes)), 1, len);
      double target = bytes / static_cast<double>(pieces), acc = 0;
      int64_t piece = 0;
      for (size_t u = begin; u < end; ++u) {
        // A new piece starts once this one holds its share of the bytes,
        // leaving at least one unit for each piece still to come.
        int64_t left = static_cast<int64_t>(end - u);
        if (u > begin && piece + 1 < pieces &&
            (acc >= target * static_cast<double>(piece + 1) ||
             left <= pieces - piece - 1))
          ++piece;
        group[u] = next + piece;
        acc += unitBytes[u];
      }
      next += piece + 1;
      begin = end;
    }
  } else {
    for (size_t u = 0; u < group.size(); ++u)
      group[u] = o.groupUnits > 1 ? static_cast<int64_t>(u) / o.groupUnits
                                  : static_cast<int64_t>(u);
  }
  for (size_t u = 0; u < pr.units.size(); ++u)
    pr.units[u].group = group[u];

  // 3. Row layout per unit.
  std::vector<std::vector<const Param *>> rowParams(pr.units.size());
  for (const Param &p : pr.params)
    if (p.placement == PlacementKind::RowShard && p.unit >= 0)
      rowParams[p.unit].push_back(&p);
  for (size_t u = 0; u < pr.units.size(); ++u) {
    UnitCostModel m = unitRowCosts(rowParams[u], o);
    if (o.rowMode == Options::RowMode::Flat)
      pr.units[u].layout = RowLayout::Flat;
    else if (o.rowMode == Options::RowMode::PerParam)
      pr.units[u].layout = RowLayout::PerParam;
    else
      pr.units[u].layout =
          m.tPerParam < m.tFlat ? RowLayout::PerParam : RowLayout::Flat;
  }

  // 4. HSDP: split Newton-Schulz across replicas when it pays.
  out.nsSplit = decideNsSplit(pr, o, out.nsSplitReason);

  // 5. Owners.
  std::vector<OwnerItem> items;
  std::vector<size_t> itemParam;
  std::map<std::pair<std::vector<int64_t>, int64_t>, int64_t> shapeKeys;
  double baseCost = 0;
  for (size_t i = 0; i < pr.params.size(); ++i) {
    const Param &p = pr.params[i];
    if (p.placement == PlacementKind::RowShard ||
        p.placement == PlacementKind::BlockShard)
      baseCost += optimSecondsWhole(p, o) / S;
    if (p.placement != PlacementKind::Owner || p.pinned)
      continue;
    OwnerItem it;
    it.cost = optimSecondsWhole(p, o) / (out.nsSplit ? o.replicate : 1);
    it.memory = ownerResidentBytes(p, o);
    it.bytes = static_cast<double>(p.numElements()) * p.elemBytes;
    it.elements = p.numElements();
    // MatrixFSDP balances each unit on its own, whatever the gather groups.
    it.group = p.unit < 0                                ? 0
               : o.strategy == OwnerStrategy::MatrixFSDP ? p.unit
                                                         : group[p.unit];
    auto key = std::make_pair(p.shape, p.elemBytes * 16 + static_cast<int64_t>(p.optim));
    auto [kit, fresh] = shapeKeys.emplace(key, static_cast<int64_t>(shapeKeys.size()));
    it.shapeKey = kit->second;
    (void)fresh;
    items.push_back(it);
    itemParam.push_back(i);
  }
  OwnerOptions oo;
  oo.world = S;
  oo.strategy = o.strategy;
  oo.baseCost = baseCost;
  out.owners = assignOwners(items, oo);
  for (size_t k = 0; k < items.size(); ++k)
    pr.params[itemParam[k]].ownerRank = out.owners.owner[k];
  return true;
}

//===----------------------------------------------------------------------===//
// Accounting
//===----------------------------------------------------------------------===//

Report account(const Problem &pr, const Options &o, const Decisions &d) {
  Report r;
  const int64_t S = std::max<int64_t>(o.shard, 1);
  const double Sd = static_cast<double>(S);
  const double R = static_cast<double>(std::max<int64_t>(o.replicate, 1));
  r.policy = o.policy;
  r.zero = o.zero;
  r.shard = S;
  r.replicate = o.replicate;
  r.hardware = o.hw.name;
  r.nsSteps = o.nsSteps;
  r.nsPrecision = o.hw.nsBf16 ? NsPrecision::BF16 : NsPrecision::FP32;
  r.ranks.resize(S);
  r.nsSplit = d.nsSplit;
  r.nsSplitReason = d.nsSplitReason;
  const double ring = (Sd - 1) / Sd;
  const double ringR = (R - 1) / R;
  auto addAll = [&](const char *kind, double bytes) {
    for (RankStats &rs : r.ranks)
      rs.commBytes[kind] += bytes;
  };
  std::vector<double> ownerWork(S, 0);

  // Unit row-shard groups and owner groups.
  std::vector<std::vector<const Param *>> rowParams(pr.units.size());
  int64_t groups = 0;
  for (const Unit &u : pr.units)
    groups = std::max(groups, u.group + 1);
  r.groups = groups;
  std::vector<std::vector<double>> shares(groups, std::vector<double>(S, 0));

  for (const Param &p : pr.params) {
    const double n = static_cast<double>(p.numElements());
    const double pb = static_cast<double>(p.elemBytes);
    const double bytes = n * pb;
    if (p.placement == PlacementKind::None && p.tied)
      continue;
    if (p.placement == PlacementKind::External || p.external) {
      r.externals.push_back({p.name, p.externalAxes, bytes});
      r.placementCounts["external"]++;
      continue;
    }
    r.optimizerCounts[std::string(enumName(p.optim))]++;
    r.placementCounts[std::string(enumName(p.placement))]++;
    const double master = masterBytesPerElem(p, o) * (p.optim == Optim::None ? 0 : 1);
    const double state = stateBytesPerElem(p.optim, o);
    const double grad = p.frozen ? 0 : pb;
    const double work = optimSecondsWhole(p, o);

    switch (p.placement) {
    case PlacementKind::RowShard:
    case PlacementKind::BlockShard: {
      std::vector<double> frac(S, 1.0 / Sd);
      if (p.placement == PlacementKind::BlockShard && p.block.size() == 2) {
        int64_t blocks = (p.shape[0] / p.block[0]) * (p.shape[1] / p.block[1]);
        for (int64_t k = 0; k < S; ++k)
          frac[k] = static_cast<double>(blocks / S + (k < blocks % S ? 1 : 0)) /
                    static_cast<double>(blocks);
      }
      for (int64_t k = 0; k < S; ++k) {
        RankStats &rs = r.ranks[k];
        double e = n * frac[k];
        rs.paramBytes += o.zero >= 3 ? e * pb : bytes;
        rs.gradBytes += o.zero >= 2 ? e * grad : n * grad;
        rs.masterBytes += e * master;
        rs.optimBytes += e * state;
        rs.optimSeconds += work * frac[k];
      }
      if (p.placement == PlacementKind::RowShard && p.unit >= 0)
        rowParams[p.unit].push_back(&p);
      else {
        // Block shards: one all-gather / reduce-scatter of the parameter.
        addAll("all_gather", (o.zero >= 3 ? 2 : 1) * ring * bytes);
        if (!p.frozen) {
          // Every ZeRO level reduce-scatters (ZeRO-1 into a whole gradient
          // buffer, as Megatron's distributed optimizer does): each rank
          // steps its own part only.
          addAll("reduce_scatter", ring * bytes);
          if (R > 1)
            addAll("hsdp_all_reduce", 2 * ringR * bytes / Sd);
        }
      }
      break;
    }
    case PlacementKind::Owner: {
      int64_t own = std::clamp<int64_t>(p.ownerRank, 0, S - 1);
      double split = d.nsSplit && p.optim == Optim::Muon ? R : 1;
      for (int64_t k = 0; k < S; ++k) {
        RankStats &rs = r.ranks[k];
        bool owner = k == own;
        if (o.zero >= 3)
          rs.paramBytes += owner ? bytes : 0;
        else
          rs.paramBytes += bytes;
        if (o.zero >= 2)
          rs.gradBytes += owner ? n * grad : 0;
        else
          rs.gradBytes += n * grad;
        if (owner) {
          rs.masterBytes += n * master;
          rs.optimBytes += n * state;
          rs.optimSeconds += work / split;
          ownerWork[k] += work / split;
          rs.ownedMatrices++;
          rs.owned.push_back(p.name);
          if (p.optim == Optim::Muon)
            rs.nsFlops += newtonSchulzFlops(p.shape[0], p.shape[1], o.nsSteps) / split;
        }
      }
      if (p.unit >= 0 && p.unit < static_cast<int64_t>(pr.units.size()))
        shares[pr.units[p.unit].group][own] += bytes;
      if (R > 1 && !p.frozen)
        r.ranks[own].commBytes["hsdp_all_reduce"] += 2 * ringR * n * grad;
      if (d.nsSplit && p.optim == Optim::Muon)
        r.ranks[own].commBytes["ns_split_all_gather"] += ringR * bytes;
      break;
    }
    case PlacementKind::Replicate:
    case PlacementKind::None: {
      for (RankStats &rs : r.ranks) {
        rs.paramBytes += bytes;
        rs.gradBytes += n * grad;
        rs.masterBytes += n * master;
        rs.optimBytes += n * state;
        rs.optimSeconds += work;
      }
      if (!p.frozen) {
        addAll("all_reduce", 2 * ring * n * grad);
        if (R > 1)
          addAll("hsdp_all_reduce", 2 * ringR * n * grad);
      }
      break;
    }
    case PlacementKind::External:
      break;
    }
  }

  // Row-sharded units: one padded buffer per unit.
  for (size_t u = 0; u < pr.units.size(); ++u) {
    UnitStats us;
    us.name = pr.units[u].name;
    us.group = pr.units[u].group;
    us.layout = pr.units[u].layout;
    us.hasRowShards = !rowParams[u].empty();
    if (us.hasRowShards) {
      UnitCostModel m = unitRowCosts(rowParams[u], o);
      us.paddingPerParam = m.padPerParam;
      us.paddingFlat = m.padFlat;
      us.copyBytesPerParam = m.copies;
      double unitBytes = 0, gradBytes = 0;
      for (const Param *p : rowParams[u]) {
        unitBytes += static_cast<double>(p->numElements()) * p->elemBytes;
        if (!p->frozen)
          gradBytes += static_cast<double>(p->numElements()) * p->elemBytes;
      }
      double pad = us.layout == RowLayout::Flat ? m.padFlat : m.padPerParam;
      double padded = unitBytes + pad;
      for (RankStats &rs : r.ranks) {
        if (o.zero >= 3)
          rs.paramBytes += pad / Sd;
        if (o.zero >= 2 && gradBytes > 0)
          rs.gradBytes += pad / Sd;
      }
      addAll("all_gather", (o.zero >= 3 ? 2 : 1) * ring * padded);
      if (gradBytes > 0) {
        double gpad = gradBytes + pad;
        addAll("reduce_scatter", ring * gpad);
        if (R > 1)
          addAll("hsdp_all_reduce", 2 * ringR * gpad / Sd);
      }
      const UnitCostModel &c = m;
      us.reason = fmt::format(
          "{}: flat pads {} per collective and copies nothing; per_param "
          "pads {} and copies {} per step (predicted {:.4g} ms vs {:.4g} ms "
          "per step on {})",
          us.layout == RowLayout::Flat ? "flat chosen" : "per_param chosen",
          bytesText(c.padFlat), bytesText(c.padPerParam), bytesText(c.copies),
          c.tFlat * 1e3, c.tPerParam * 1e3, o.hw.name);
      if (o.rowMode != Options::RowMode::Auto)
        us.reason += " [forced by row-layout option]";
    }
    r.units.push_back(std::move(us));
  }

  // Owner groups: an all-gather-v to gather and a reduce-scatter-v to reduce.
  double skewSum = 0;
  int64_t skewCount = 0;
  r.fanoutMax = 1;
  for (int64_t g = 0; g < groups; ++g) {
    double total = std::accumulate(shares[g].begin(), shares[g].end(), 0.0);
    if (total <= 0)
      continue;
    double maxShare = *std::max_element(shares[g].begin(), shares[g].end());
    double skew = maxShare / (total / Sd);
    r.fanoutMax = std::max(r.fanoutMax, skew);
    skewSum += skew;
    skewCount++;
    for (int64_t k = 0; k < S; ++k) {
      RankStats &rs = r.ranks[k];
      rs.commBytes["all_gather_v"] +=
          (o.zero >= 3 ? 2 : 1) * (total - shares[g][(k + 1) % S]);
      rs.commBytes["reduce_scatter_v"] += total - shares[g][k];
    }
  }
  r.fanoutMean = skewCount ? skewSum / skewCount : 1;

  // Imbalance and bounds.
  double sumWork = 0, sumMem = 0;
  for (int64_t k = 0; k < S; ++k) {
    const RankStats &rs = r.ranks[k];
    r.optimMax = std::max(r.optimMax, rs.optimSeconds);
    r.memMax = std::max(r.memMax, rs.memory());
    sumWork += rs.optimSeconds;
    sumMem += rs.memory();
  }
  double minBase = 1e300;
  for (int64_t k = 0; k < S; ++k)
    minBase = std::min(minBase, r.ranks[k].optimSeconds - ownerWork[k]);
  if (minBase > 1e299)
    minBase = 0;
  std::vector<double> itemCosts;
  for (const Param &p : pr.params)
    if (p.placement == PlacementKind::Owner)
      itemCosts.push_back(optimSecondsWhole(p, o) /
                          (d.nsSplit && p.optim == Optim::Muon ? R : 1));
  std::sort(itemCosts.rbegin(), itemCosts.rend());
  r.optimMean = sumWork / Sd;
  r.memMean = sumMem / Sd;
  // Lower bounds on the largest per-rank optimizer time: the mean, and the
  // indivisibility bound. Among the j*S+1 most expensive matrices some rank
  // holds j+1, so it carries at least the j+1 cheapest of them (j = 0 is
  // the largest matrix alone).
  double indivisible = 0;
  for (size_t j = 0; j * S < itemCosts.size(); ++j) {
    double sum = 0;
    for (size_t i = j * S - j; i <= j * S; ++i)
      sum += itemCosts[i];
    indivisible = std::max(indivisible, sum);
  }
  r.optimIndivisibleBound = indivisible + minBase;
  r.optimBound = std::max(r.optimMean, r.optimIndivisibleBound);
  return r;
}

//===----------------------------------------------------------------------===//
// Rendering
//===----------------------------------------------------------------------===//

namespace {
const char *kCommKinds[] = {"all_gather",      "reduce_scatter",
                            "all_reduce",      "all_gather_v",
                            "reduce_scatter_v", "hsdp_all_reduce",
                            "ns_split_all_gather"};

double ratio(double a, double b) { return b > 0 ? a / b : 1.0; }

std::string jsonString(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    default:
      if (static_cast<unsigned char>(c) < 0x20)
        out += fmt::format("\\u{:04x}", c);
      else
        out += c;
    }
  }
  return out + "\"";
}

std::string num(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    return fmt::format("{:.0f}", v);
  return fmt::format("{:.6g}", v);
}
} // namespace

std::string renderText(const Report &r) {
  std::string o;
  o += fmt::format("plan report: policy {}, ZeRO-{}, dp_shard {} x "
                   "dp_replicate {}; times predicted for {}\n",
                   enumName(r.policy), r.zero, r.shard, r.replicate,
                   r.hardware);
  o += "  optimizers:";
  for (auto &[k, v] : r.optimizerCounts)
    o += fmt::format(" {} {}", k, v);
  o += "; placements:";
  for (auto &[k, v] : r.placementCounts)
    o += fmt::format(" {} {}", k, v);
  o += "\n";
  if (r.optimizerCounts.count("muon"))
    o += fmt::format("  Newton-Schulz: {} steps in {} (#plan.muon ns_precision)\n", r.nsSteps,
                     enumName(r.nsPrecision));
  int64_t flat = 0, perParam = 0;
  for (const UnitStats &u : r.units)
    if (u.hasRowShards)
      (u.layout == RowLayout::Flat ? flat : perParam)++;
  o += fmt::format("  units: {} in {} gather groups; row layout: {} flat, {} "
                   "per_param\n",
                   r.units.size(), r.groups, flat, perParam);
  o += fmt::format("  {:>4} {:>6} {:>10} {:>9} {:>10} {:>10} {:>10} {:>10} "
                   "{:>10} {:>10} {:>10}\n",
                   "rank", "owned", "NS TFLOP", "opt ms", "params", "grads",
                   "master", "state", "memory", "gather", "reduce");
  size_t shown = 0;
  for (size_t k = 0; k < r.ranks.size(); ++k) {
    const RankStats &rs = r.ranks[k];
    if (r.ranks.size() > 16 && k >= 8 && k + 8 < r.ranks.size()) {
      if (!shown++)
        o += fmt::format("  {:>4} ({} ranks not shown; see the JSON report)\n",
                         "...", r.ranks.size() - 16);
      continue;
    }
    auto get = [&](const char *kind) {
      auto it = rs.commBytes.find(kind);
      return it == rs.commBytes.end() ? 0.0 : it->second;
    };
    double gather = get("all_gather") + get("all_gather_v");
    double reduce = get("reduce_scatter") + get("reduce_scatter_v") +
                    get("all_reduce") + get("hsdp_all_reduce") +
                    get("ns_split_all_gather");
    o += fmt::format("  {:>4} {:>6} {:>10.4g} {:>9.4g} {:>10} {:>10} {:>10} "
                     "{:>10} {:>10} {:>10} {:>10}\n",
                     k, rs.ownedMatrices, rs.nsFlops / 1e12,
                     rs.optimSeconds * 1e3, bytesText(rs.paramBytes),
                     bytesText(rs.gradBytes), bytesText(rs.masterBytes),
                     bytesText(rs.optimBytes), bytesText(rs.memory()),
                     bytesText(gather), bytesText(reduce));
  }
  o += fmt::format(
      "  imbalance (max/mean): optimizer work {:.3f}, memory {:.3f}, owner "
      "fan-out per gather group max {:.3f} mean {:.3f}\n",
      ratio(r.optimMax, r.optimMean), ratio(r.memMax, r.memMean), r.fanoutMax,
      r.fanoutMean);
  o += fmt::format(
      "  optimizer step: max {:.4g} ms, mean {:.4g} ms, indivisibility bound "
      "{:.4g} ms, lower bound max(mean, indivisibility) {:.4g} ms; max/bound "
      "{:.3f}\n",
      r.optimMax * 1e3, r.optimMean * 1e3, r.optimIndivisibleBound * 1e3,
      r.optimBound * 1e3, ratio(r.optimMax, r.optimBound));
  if (!r.ranks.empty()) {
    o += "  bytes sent per rank per step (rank 0):";
    for (const char *kind : kCommKinds) {
      auto it = r.ranks[0].commBytes.find(kind);
      if (it != r.ranks[0].commBytes.end() && it->second > 0)
        o += fmt::format(" {} {}", kind, bytesText(it->second));
    }
    o += "\n";
  }
  if (r.replicate > 1)
    o += "  HSDP Newton-Schulz: " + r.nsSplitReason + "\n";
  // Row layouts: list the distinct reasons once each.
  std::map<std::string, int64_t> reasons;
  for (const UnitStats &u : r.units)
    if (u.hasRowShards)
      reasons[std::string(enumName(u.layout))]++;
  for (const UnitStats &u : r.units)
    if (u.hasRowShards) {
      o += fmt::format("  row layout of {} (first row-sharded unit): {}\n",
                       u.name, u.reason);
      break;
    }
  o += fmt::format("  external: {} tensors", r.externals.size());
  double extBytes = 0;
  for (const auto &e : r.externals)
    extBytes += e.bytes;
  if (!r.externals.empty())
    o += fmt::format(" ({}), left to their owners", bytesText(extBytes));
  for (size_t i = 0; i < r.externals.size() && i < 3; ++i) {
    std::string axes;
    for (const auto &a : r.externals[i].axes)
      axes += (axes.empty() ? "" : ",") + a;
    o += fmt::format("{}{} [{}]", i ? ", " : ": ", r.externals[i].name, axes);
  }
  if (r.externals.size() > 3)
    o += ", ...";
  o += "\n";
  return o;
}

std::string renderJson(const Report &r) {
  std::string o = "{\n";
  o += fmt::format("  \"policy\": \"{}\",\n  \"zero\": {},\n  \"dp_shard\": "
                   "{},\n  \"dp_replicate\": {},\n  \"hardware\": {},\n",
                   enumName(r.policy), r.zero, r.shard, r.replicate,
                   jsonString(r.hardware));
  auto counts = [&](const std::map<std::string, int64_t> &m) {
    std::string s = "{";
    for (auto &[k, v] : m)
      s += fmt::format("{}{}: {}", s.size() > 1 ? ", " : "", jsonString(k), v);
    return s + "}";
  };
  o += fmt::format("  \"optimizers\": {},\n  \"placements\": {},\n",
                   counts(r.optimizerCounts), counts(r.placementCounts));
  if (r.optimizerCounts.count("muon"))
    o += fmt::format("  \"newton_schulz\": {{\"steps\": {}, \"precision\": \"{}\"}},\n",
                     r.nsSteps, enumName(r.nsPrecision));
  o += fmt::format(
      "  \"imbalance\": {{\"optimizer_work\": {}, \"memory\": {}, "
      "\"fanout_max\": {}, \"fanout_mean\": {}}},\n",
      num(ratio(r.optimMax, r.optimMean)), num(ratio(r.memMax, r.memMean)),
      num(r.fanoutMax), num(r.fanoutMean));
  o += fmt::format(
      "  \"optimizer_seconds\": {{\"max\": {}, \"mean\": {}, "
      "\"indivisibility_bound\": {}, \"lower_bound\": {}, "
      "\"ratio_to_bound\": {}}},\n",
      num(r.optimMax), num(r.optimMean), num(r.optimIndivisibleBound),
      num(r.optimBound), num(ratio(r.optimMax, r.optimBound)));
  o += fmt::format("  \"memory_bytes\": {{\"max\": {}, \"mean\": {}}},\n",
                   num(r.memMax), num(r.memMean));
  o += fmt::format("  \"ns_split\": {},\n  \"ns_split_reason\": {},\n",
                   r.nsSplit ? "true" : "false", jsonString(r.nsSplitReason));
  o += "  \"ranks\": [\n";
  for (size_t k = 0; k < r.ranks.size(); ++k) {
    const RankStats &rs = r.ranks[k];
    std::string owned;
    for (const auto &n : rs.owned)
      owned += (owned.empty() ? "" : ", ") + jsonString(n);
    std::string comm;
    for (auto &[kind, b] : rs.commBytes)
      comm += fmt::format("{}{}: {}", comm.empty() ? "" : ", ", jsonString(kind),
                          num(b));
    o += fmt::format(
        "    {{\"rank\": {}, \"owned\": [{}], \"ns_flops\": {}, "
        "\"optimizer_seconds\": {}, \"param_bytes\": {}, \"grad_bytes\": {}, "
        "\"master_bytes\": {}, \"optimizer_state_bytes\": {}, "
        "\"memory_bytes\": {}, \"comm_bytes\": {{{}}}}}{}\n",
        k, owned, num(rs.nsFlops), num(rs.optimSeconds), num(rs.paramBytes),
        num(rs.gradBytes), num(rs.masterBytes), num(rs.optimBytes),
        num(rs.memory()), comm, k + 1 < r.ranks.size() ? "," : "");
  }
  o += "  ],\n  \"units\": [\n";
  for (size_t u = 0; u < r.units.size(); ++u) {
    const UnitStats &us = r.units[u];
    o += fmt::format("    {{\"name\": {}, \"group\": {}, \"row_layout\": {}",
                     jsonString(us.name), us.group,
                     us.hasRowShards ? jsonString(std::string(enumName(us.layout)))
                                     : std::string("null"));
    if (us.hasRowShards)
      o += fmt::format(", \"padding_flat\": {}, \"padding_per_param\": {}, "
                       "\"copy_bytes_per_param\": {}, \"reason\": {}",
                       num(us.paddingFlat), num(us.paddingPerParam),
                       num(us.copyBytesPerParam), jsonString(us.reason));
    o += fmt::format("}}{}\n", u + 1 < r.units.size() ? "," : "");
  }
  o += "  ],\n  \"external\": [";
  for (size_t i = 0; i < r.externals.size(); ++i) {
    std::string axes;
    for (const auto &a : r.externals[i].axes)
      axes += (axes.empty() ? "" : ", ") + jsonString(a);
    o += fmt::format("{}\n    {{\"name\": {}, \"axes\": [{}], \"bytes\": {}}}",
                     i ? "," : "", jsonString(r.externals[i].name), axes,
                     num(r.externals[i].bytes));
  }
  o += r.externals.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return o;
}

} // namespace mfsdp::planner

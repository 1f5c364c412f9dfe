//===- Layout.cpp - Layout planning ---------------------------------------===//
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
//
// What the plan costs each rank, and its reports, are in Accounting.cpp.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/planner/Layout.h"

#include "LayoutShared.h"
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

/// Row size in bytes and row count of a row-sharded parameter.
std::pair<double, int64_t> rowsOf(const Param &p, int64_t elemBytes) {
  int64_t rows = p.shape.empty() ? 1 : p.shape[std::min<int64_t>(p.rowDim, p.rank() - 1)];
  rows = std::max<int64_t>(rows, 1);
  double rowBytes = static_cast<double>(p.numElements()) / rows *
                    static_cast<double>(elemBytes > 0 ? elemBytes : p.elemBytes);
  return {rowBytes, rows};
}

} // namespace

namespace detail {

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

} // namespace detail

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

} // namespace

namespace detail {

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
  // unit in and unit/W out. The step runtime does where it stages, a unit
  // of two or more row-shard parameters; a lone one is gathered into its
  // parameter and reduced from its gradient in place.
  double perCollective = 2 * (unitBytes + unitBytes / w);
  m.copies = rowParams.size() >= 2 ? (gathers + 1) * perCollective : 0;
  double link = linkBytes(o);
  m.tPerParam = m.padPerParam * (gathers + 1) / link + m.copies / o.hw.hbmBytes;
  m.tFlat = m.padFlat * (gathers + 1) / link;
  return m;
}

} // namespace detail

bool decideNsSplit(const Problem &pr, const Options &o, std::string &reason) {
  const int64_t S = std::max<int64_t>(o.shard, 1);
  double ownerSeconds = 0, ownerBytes = 0;
  for (const Param &p : pr.params)
    if (p.placement == PlacementKind::Owner && p.optim == Optim::Muon) {
      ownerSeconds += detail::optimSecondsWhole(p, o);
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
      detail::bytesText(ownerBytes / S * (R - 1) / R), o.replicate, o.hw.name);
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
    detail::UnitCostModel m = detail::unitRowCosts(rowParams[u], o);
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
      baseCost += detail::optimSecondsWhole(p, o) / S;
    if (p.placement != PlacementKind::Owner || p.pinned)
      continue;
    OwnerItem it;
    it.cost = detail::optimSecondsWhole(p, o) / (out.nsSplit ? o.replicate : 1);
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

} // namespace mfsdp::planner

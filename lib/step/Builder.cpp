//===- Builder.cpp - Build one training step from a plan ------------------===//
//
// Builds a step from a plan: its persistent buffers, forward and backward
// here, the optimizer phase in BuildOptimizer.cpp (both methods of
// detail::StepBuilder, StepBuilder.h).
//
//===----------------------------------------------------------------------===//
#include "StepBuilder.h"

#include "mfsdp/runtime/Kernels.h"
#include "mfsdp/step/Schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>

namespace mfsdp::step {

namespace detail {

using planner::Optim;
using planner::Param;
using planner::PlacementKind;

void StepBuilder::collectGroups() {
  int64_t ngroups = 0;
  for (const planner::Unit &u : pr.units)
    ngroups = std::max(ngroups, u.group + 1);
  groups.resize(ngroups);
  for (size_t u = 0; u < pr.units.size(); ++u)
    groups[pr.units[u].group].units.push_back(static_cast<int64_t>(u));
  std::set<std::string> gathered(b.gatheredMuonParams.begin(),
                                 b.gatheredMuonParams.end());
  std::vector<std::vector<const Param *>> rowsPerUnit(pr.units.size());
  for (const Param &p : pr.params) {
    if (p.unit < 0 || p.external || p.tied)
      continue;
    GroupInfo &g = groups[pr.units[p.unit].group];
    double bytes = static_cast<double>(p.numElements()) * p.elemBytes;
    switch (p.placement) {
    case PlacementKind::RowShard:
    case PlacementKind::BlockShard:
      g.rows.push_back(&p);
      g.rowBytes += bytes;
      g.rowNames.push_back(p.name);
      if (p.placement == PlacementKind::RowShard)
        rowsPerUnit[p.unit].push_back(&p);
      if (b.gatheredMuon && gathered.count(p.name))
        g.gatheredMuon.push_back(&p);
      break;
    case PlacementKind::Owner:
      g.owned.push_back(&p);
      g.ownedBytes += bytes;
      g.ownedNames.push_back(p.name);
      if (g.chunks.empty())
        g.chunks.assign(S, 0.0);
      g.chunks[std::clamp<int64_t>(p.ownerRank, 0, S - 1)] += bytes;
      break;
    case PlacementKind::Replicate:
    case PlacementKind::None:
      g.replicated.push_back(&p);
      g.replicatedBytes += bytes;
      break;
    case PlacementKind::External:
      break;
    }
  }
  for (size_t u = 0; u < pr.units.size(); ++u) {
    GroupInfo &g = groups[pr.units[u].group];
    GroupInfo::Piece piece;
    piece.unit = static_cast<int64_t>(u);
    piece.chunks.assign(S, 0.0);
    // With a reduce dtype (R bytes an element), the same in R bytes: what
    // the unit's reductions move, whole bytes whatever mix of dtypes (the
    // runtime pads elements, whatever their dtype).
    const int64_t R = b.reduceElemBytes;
    if (R > 0)
      piece.reduceChunks.assign(S, 0.0);
    for (const Param *p : g.rows)
      if (p->unit == static_cast<int64_t>(u)) {
        // A block shard deals its blocks round-robin: rank 0 keeps
        // ceil(blocks / S) of them, which every rank's shard is sized for.
        const double elements =
            static_cast<double>(p->numElements() + blockPaddingElements(*p));
        const double pad = elements - static_cast<double>(p->numElements());
        piece.rowBytes += elements * p->elemBytes;
        g.rowPad += pad * p->elemBytes;
        piece.reduceRowBytes += elements * R;
        piece.rowNames.push_back(p->name);
      }
    for (const Param *p : g.owned)
      if (p->unit == static_cast<int64_t>(u)) {
        const double elements = static_cast<double>(p->numElements());
        const int64_t owner = std::clamp<int64_t>(p->ownerRank, 0, S - 1);
        piece.ownedBytes += elements * p->elemBytes;
        piece.chunks.add(static_cast<size_t>(owner), elements * p->elemBytes);
        piece.ownedNames.push_back(p->name);
        if (R > 0) {
          piece.reduceOwnedBytes += elements * R;
          piece.reduceChunks.add(static_cast<size_t>(owner), elements * R);
        }
      }
    if (!rowsPerUnit[u].empty()) {
      const bool flat = pr.units[u].layout == planner::RowLayout::Flat;
      auto padding = [&](int64_t elemBytes) {
        return flat ? planner::flatPadding(rowsPerUnit[u], S, elemBytes)
                    : planner::perParamPadding(rowsPerUnit[u], S, elemBytes);
      };
      const double pad = padding(0);
      g.rowPad += pad;
      piece.rowBytes += pad;
      if (R > 0)
        piece.reduceRowBytes += padding(R);
      // FSDP2's per-parameter layout copies shards in and out of flat
      // collective buffers; a flat layout uses the buffer in place. The
      // step runtime stages a unit's row shards only where it has two or
      // more (its row-shard buckets, runtime/common/Buckets.cpp): FSDP2
      // copies a lone one, and block shards, too (BuildOptions::fsdp2Copies).
      if (pr.units[u].layout == planner::RowLayout::PerParam) {
        std::vector<const Param *> copied;
        for (const Param *p : g.rows)
          if (p->unit == static_cast<int64_t>(u) &&
              (b.fsdp2Copies || p->placement == PlacementKind::RowShard))
            copied.push_back(p);
        piece.copied = static_cast<int64_t>(copied.size()) >= (b.fsdp2Copies ? 1 : 2);
        if (piece.copied)
          for (const Param *p : copied)
            piece.copyBytes += static_cast<double>(p->numElements()) * p->elemBytes;
      }
    }
    // A group of one unit: the unit's lists are the group's (shared).
    piece.rowNames = sharedIfSame(g.rowNames, piece.rowNames);
    piece.ownedNames = sharedIfSame(g.ownedNames, piece.ownedNames);
    g.pieces.push_back(std::move(piece));
  }
}

/// Shards, owned matrices, states: everything that lives all step.
void StepBuilder::declarePersistent() {
  phase = Phase::Forward;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    GroupInfo &g = groups[gi];
    double rows = g.rowBytes + g.rowPad;
    if (!g.rows.empty()) {
      double shard = rows / S;
      double stateBytes = 0, masterBytes = 0;
      for (const Param *p : g.rows) {
        // This rank's elements of p, rounded up to whole elements (the
        // padded shard; an uneven split pads the last ranks): whole
        // bytes however many ranks share fewer elements.
        double n = static_cast<double>((p->numElements() + S - 1) / S);
        stateBytes += n * planner::stateBytesPerElem(p->optim, o);
        masterBytes += n * planner::masterBytesPerElem(*p, o);
      }
      g.rowShard = alloc(fmt::format("row shards g{}", gi),
                         o.zero >= 3 ? shard : rows, true);
      g.rowGrad = alloc(fmt::format("row grads g{}", gi),
                        o.zero >= 2 ? shard : rows, true);
      alloc(fmt::format("row master+state g{}", gi), masterBytes + stateBytes,
            true);
    }
    if (!g.owned.empty()) {
      // Each owner keeps its matrices whole; under ZeRO-1/2 every rank
      // also holds all parameters (and under ZeRO-1 all gradients).
      g.ownedFull = o.zero < 3 ? alloc(fmt::format("owned params g{}", gi),
                                       g.ownedBytes, true)
                               : -1;
      for (int64_t r = 0; r < S; ++r) {
        double mine = g.chunks[r];
        if (mine <= 0)
          continue;
        double extra = 0;
        for (const Param *p : g.owned)
          if (p->ownerRank == r)
            extra += static_cast<double>(p->numElements()) *
                     (planner::masterBytesPerElem(*p, o) +
                      planner::stateBytesPerElem(p->optim, o));
        alloc(fmt::format("owned g{} r{}", gi, r),
              (o.zero >= 3 ? mine : 0) + (o.zero >= 2 ? mine : 0) + extra,
              true, r);
      }
      // What the owners' collectives read and write on every rank: a view
      // of the rank's own chunk, whose storage the only_rank buffers
      // above hold, so it adds no bytes of its own.
      g.ownedLocal = alloc(fmt::format("owned chunk g{}", gi), 0, true);
      if (o.zero < 2)
        g.ownedGradFull = alloc(fmt::format("owned grads g{}", gi),
                                g.ownedBytes, true);
    }
    if (!g.replicated.empty()) {
      double states = 0;
      for (const Param *p : g.replicated)
        states += static_cast<double>(p->numElements()) *
                  (planner::masterBytesPerElem(*p, o) +
                   planner::stateBytesPerElem(p->optim, o));
      g.replicatedBuf = alloc(fmt::format("replicated g{}", gi),
                              2 * g.replicatedBytes + states, true);
    }
    if (st.microbatches > 1)
      // Read by the last microbatch's reductions: as wide as they read.
      g.accum = alloc(fmt::format("grad accumulation g{}", gi), unreducedBytes(g), true);
  }
}

/// The elements a block shard is padded by: its blocks are dealt
/// round-robin, and every rank's shard holds ceil(blocks / S) of them.
int64_t StepBuilder::blockPaddingElements(const Param &p) const {
  if (p.placement != PlacementKind::BlockShard || p.block.empty())
    return 0;
  int64_t blockElems = 1;
  for (int64_t d : p.block)
    blockElems *= std::max<int64_t>(d, 1);
  const int64_t blocks = p.numElements() / blockElems;
  return ((blocks + S - 1) / S * S - blocks) * blockElems;
}

double StepBuilder::gatheredBytes(const GroupInfo &g) const {
  return g.rowBytes + g.rowPad + g.ownedBytes;
}

/// A group's unreduced gradients as its reductions read them: in the
/// reduce dtype where that is wider than the parameters' own (a bf16
/// gradient widened into an fp32 reduction buffer, as FSDP2 does under
/// reduce_dtype=fp32).
double StepBuilder::unreducedBytes(const GroupInfo &g) const {
  if (b.reduceElemBytes <= 0)
    return g.rowBytes + g.rowPad + g.ownedBytes;
  // Per unit, the wider of its gradients in their own dtypes and in the
  // reduce dtype (exact whatever mix of dtypes the unit holds).
  double total = 0;
  for (const GroupInfo::Piece &piece : g.pieces)
    total += std::max(piece.rowBytes, piece.reduceRowBytes) +
             std::max(piece.ownedBytes, piece.reduceOwnedBytes);
  return total;
}

/// One all-gather of rows and one all-gather-v of owner matrices per
/// unit, all at the group's first use; mfsdp-bucket-collectives merges
/// them. The rows of units that copy (GroupInfo::Piece::copied) land in
/// the group's staging, copied out into the gathered buffer and freed.
void StepBuilder::gather(size_t gi, const char *why) {
  GroupInfo &g = groups[gi];
  // The staging first: the schedule moves the allocs from the first one a
  // gather writes, with the gathers.
  g.staging = -1;
  if (g.copies())
    g.staging = alloc(fmt::format("gather staging g{} ({})", gi, why), g.stagedBytes(), false);
  g.gathered = alloc(fmt::format("gathered g{} ({})", gi, why),
                     gatheredBytes(g), false);
  for (const GroupInfo::Piece &piece : g.pieces) {
    const std::string &unit = pr.units[piece.unit].name;
    if (piece.rowBytes > 0) {
      Op op = collective(CollKind::AllGather,
                         fmt::format("all_gather {} ({})", unit, why),
                         g.rowShard, piece.copied ? g.staging : g.gathered,
                         piece.rowBytes);
      op.params = piece.rowNames;
      op.group = static_cast<int64_t>(gi);
      op.unit = piece.unit;
      add(std::move(op));
    }
    if (piece.ownedBytes > 0) {
      Op op = collective(CollKind::AllGatherV,
                         fmt::format("all_gather_v {} ({})", unit, why),
                         g.ownedLocal, g.gathered, piece.ownedBytes);
      op.chunks = piece.chunks;
      op.params = piece.ownedNames;
      op.group = static_cast<int64_t>(gi);
      op.unit = piece.unit;
      add(std::move(op));
    }
  }
  if (g.staging >= 0) {
    copy(gi, /*gatherSide=*/true, g.staging, g.gathered);
    free(g.staging);
  }
}

/// The copy of the copied units' rows out of the gathered staging into the
/// gathered buffer, or out of the unreduced gradients into the reduce
/// staging: each read and written once, its shard once.
void StepBuilder::copy(size_t gi, bool gatherSide, int64_t from, int64_t to) {
  const GroupInfo &g = groups[gi];
  double bytes = 0;
  for (const GroupInfo::Piece &piece : g.pieces)
    bytes += piece.copyBytes;
  Op op;
  op.kind = OpKind::Compute;
  op.phase = phase;
  op.name = fmt::format("{} copy g{}", gatherSide ? "all_gather" : "reduce_scatter", gi);
  op.compute = "copy";
  op.group = static_cast<int64_t>(gi);
  op.bytes = 2 * (bytes + bytes / S);
  op.reads = {from};
  op.writes = {to};
  add(std::move(op));
}

void StepBuilder::compute(int64_t unit, Phase ph, const char *what,
                          double flopsPerToken, int64_t reads, int64_t writes) {
  Op op;
  op.kind = OpKind::Compute;
  op.phase = ph;
  op.unit = unit;
  op.group = pr.units[unit].group;
  op.name = fmt::format("{} {}", what, pr.units[unit].name);
  op.compute = what;
  op.unitName = pr.units[unit].name;
  op.flops = flopsPerToken * static_cast<double>(b.tokens);
  op.kernels = costs[unit].kernels;
  op.kernelTokens = op.kernels.empty() ? 0 : static_cast<double>(b.tokens);
  if (reads >= 0)
    op.reads = {reads};
  if (writes >= 0)
    op.writes = {writes};
  add(std::move(op));
}

void StepBuilder::forward(int64_t m) {
  phase = Phase::Forward;
  activations.assign(pr.units.size(), -1);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    GroupInfo &g = groups[gi];
    bool needGather = o.zero >= 3 && (!g.rows.empty() || !g.owned.empty());
    if (needGather)
      gather(gi, "forward");
    for (int64_t u : g.units) {
      const UnitCost &c = costs[u];
      activations[u] = alloc(fmt::format("activations {} mb{}", pr.units[u].name, m),
                             c.actBytesPerToken * static_cast<double>(b.tokens),
                             false);
      compute(u, Phase::Forward, "forward",
              c.fwdFlopsPerToken, needGather ? g.gathered : -1, activations[u]);
    }
    if (needGather)
      free(g.gathered);
  }
}

void StepBuilder::backward(int64_t m, bool last) {
  phase = Phase::Backward;
  for (size_t gi = groups.size(); gi-- > 0;) {
    GroupInfo &g = groups[gi];
    bool needGather = o.zero >= 3 && (!g.rows.empty() || !g.owned.empty());
    if (needGather)
      gather(gi, "backward");
    int64_t grads = alloc(fmt::format("unreduced grads g{} mb{}", gi, m),
                          unreducedBytes(g), false);
    for (auto it = g.units.rbegin(); it != g.units.rend(); ++it) {
      int64_t u = *it;
      const UnitCost &c = costs[u];
      if (c.recompute)
        compute(u, Phase::Backward, "recompute", c.fwdFlopsPerToken,
                needGather ? g.gathered : -1, -1);
      compute(u, Phase::Backward, "backward", c.bwdFlopsPerToken,
              needGather ? g.gathered : -1, grads);
      free(activations[u]);
    }
    if (needGather)
      free(g.gathered);
    if (st.microbatches > 1) {
      Op acc;
      acc.kind = OpKind::Optimizer;
      acc.optimizer = "accumulate";
      acc.phase = Phase::Backward;
      acc.name = fmt::format("accumulate g{} mb{}", gi, m);
      acc.group = static_cast<int64_t>(gi);
      // Reads this microbatch's gradients, reads and writes the sum: in
      // the buffers' bytes (the reduce dtype where that is wider).
      acc.bytes = 3 * unreducedBytes(g);
      acc.reads = {grads};
      acc.writes = {g.accum};
      add(std::move(acc));
    }
    if (last)
      reduce(gi, st.microbatches > 1 ? g.accum : grads);
    free(grads);
  }
}

/// What a reduction of `params` moves: their elements in the reduce
/// dtype (BuildOptions::reduceElemBytes), or in their own when it is 0.
double StepBuilder::reducedBytes(
    const std::vector<const Param *> &params) const {
  double bytes = 0;
  for (const Param *p : params)
    bytes += static_cast<double>(p->numElements()) *
             static_cast<double>(b.reduceElemBytes > 0 ? b.reduceElemBytes : p->elemBytes);
  return bytes;
}

/// Per unit, in backward order: reduce-scatter of rows, reduce-scatter-v
/// to the owners (under ZeRO-1 too: the gradient buffers stay whole, as
/// in Megatron's distributed optimizer, but each rank steps its own part
/// only, so its part is all it needs reduced), and over dp_replicate an
/// all-reduce of what this rank keeps.
void StepBuilder::reduce(size_t gi, int64_t grads) {
  GroupInfo &g = groups[gi];
  // The copied units' gradients go through a staging buffer, packed.
  int64_t staging = -1;
  if (g.copies()) {
    staging = alloc(fmt::format("reduce staging g{}", gi), g.stagedBytes(b.reduceElemBytes > 0),
                    false);
    copy(gi, /*gatherSide=*/false, grads, staging);
  }
  for (auto it = g.pieces.rbegin(); it != g.pieces.rend(); ++it) {
    GroupInfo::Piece piece = *it;
    // The reduce dtype's bytes in place of the parameters' own.
    if (b.reduceElemBytes > 0) {
      piece.rowBytes = piece.reduceRowBytes;
      piece.ownedBytes = piece.reduceOwnedBytes;
      piece.chunks = piece.reduceChunks;
    }
    const std::string &unit = pr.units[piece.unit].name;
    if (piece.rowBytes > 0) {
      Op op = collective(CollKind::ReduceScatter, fmt::format("reduce_scatter {}", unit),
                         piece.copied ? staging : grads, g.rowGrad, piece.rowBytes);
      op.params = piece.rowNames;
      op.group = static_cast<int64_t>(gi);
      op.unit = piece.unit;
      add(std::move(op));
    }
    if (piece.ownedBytes > 0) {
      Op op = collective(CollKind::ReduceScatterV,
                         fmt::format("reduce_scatter_v {}", unit), grads, g.ownedLocal,
                         piece.ownedBytes);
      op.chunks = piece.chunks;
      op.params = piece.ownedNames;
      op.group = static_cast<int64_t>(gi);
      op.unit = piece.unit;
      add(std::move(op));
    }
    if (o.replicate > 1 && (piece.rowBytes > 0 || piece.ownedBytes > 0)) {
      // What this rank keeps: its row shard and the largest owner chunk.
      double kept = piece.rowBytes / S +
                    *std::max_element(piece.chunks.begin(), piece.chunks.end());
      Op hsdp = collective(CollKind::AllReduce,
                           fmt::format("all_reduce {} over replicas", unit),
                           g.rowGrad >= 0 ? g.rowGrad : g.ownedLocal,
                           g.rowGrad >= 0 ? g.rowGrad : g.ownedLocal, kept, true);
      hsdp.group = static_cast<int64_t>(gi);
      hsdp.unit = piece.unit;
      // The parameters whose reduced parts it carries, row shards and
      // the owner chunk this rank keeps (the schedule orders it after
      // their shard reductions and no other).
      hsdp.params = piece.rowNames;
      hsdp.params.insert(hsdp.params.end(), piece.ownedNames.begin(),
                         piece.ownedNames.end());
      add(std::move(hsdp));
    }
  }
  if (!g.replicated.empty()) {
    Op op = collective(CollKind::AllReduce,
                       fmt::format("all_reduce replicated g{}", gi),
                       g.replicatedBuf, g.replicatedBuf,
                       reducedBytes(g.replicated));
    op.group = static_cast<int64_t>(gi);
    add(std::move(op));
  }
  if (staging >= 0)
    free(staging);
}

} // namespace detail

Step buildStep(const planner::Problem &problem, const planner::Options &options,
               const planner::Decisions &decisions,
               const std::vector<UnitCost> &units, const BuildOptions &build,
               const std::string &name) {
  return detail::StepBuilder(problem, options, decisions, units, build).build(name);
}

} // namespace mfsdp::step

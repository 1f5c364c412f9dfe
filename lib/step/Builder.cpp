//===- Builder.cpp - Build one training step from a plan ------------------===//
#include "mfsdp/step/Builder.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace mfsdp::step {

using planner::Optim;
using planner::Param;
using planner::PlacementKind;

namespace {

struct GroupInfo {
  std::vector<int64_t> units;           // in forward order
  std::vector<const Param *> rows;      // row-sharded (and block-sharded)
  std::vector<const Param *> owned;     // on owners
  std::vector<const Param *> replicated;
  std::vector<const Param *> gatheredMuon; // fsdp2 baseline: Muon on rows
  double rowBytes = 0, rowPad = 0, ownedBytes = 0, replicatedBytes = 0;
  std::vector<double> chunks;           // owned bytes per rank
  std::vector<std::string> rowNames, ownedNames;
  /// One unit's share of the group's collectives.
  struct Piece {
    int64_t unit = -1;
    double rowBytes = 0;               // row shards, padded
    double ownedBytes = 0;
    std::vector<double> chunks;        // owned bytes per rank
    std::vector<std::string> rowNames, ownedNames;
  };
  std::vector<Piece> pieces;           // one per unit, forward order
  // Buffers (indices into Step::buffers), -1 when the group has none.
  int64_t rowShard = -1, rowGrad = -1, ownedFull = -1, ownedLocal = -1,
          ownedGradFull = -1, replicatedBuf = -1, accum = -1, gathered = -1;
};

class StepBuilder {
public:
  StepBuilder(const planner::Problem &pr, const planner::Options &o,
              const planner::Decisions &d, const std::vector<UnitCost> &u,
              const BuildOptions &b)
      : pr(pr), o(o), d(d), costs(u), b(b), S(std::max<int64_t>(o.shard, 1)) {}

  Step build(const std::string &name) {
    st.name = name;
    st.world = S;
    st.tokens = b.tokens;
    st.microbatches = std::max<int64_t>(b.microbatches, 1);
    collectGroups();
    declarePersistent();
    for (int64_t m = 0; m < st.microbatches; ++m) {
      forward(m);
      backward(m, m + 1 == st.microbatches);
    }
    optimizer();
    return std::move(st);
  }

private:
  int64_t alloc(std::string name, double bytes, bool persistent,
                int64_t onlyRank = -1) {
    Buffer buf;
    buf.name = std::move(name);
    buf.bytes = bytes;
    buf.persistent = persistent;
    buf.onlyRank = onlyRank;
    st.buffers.push_back(buf);
    int64_t id = static_cast<int64_t>(st.buffers.size()) - 1;
    Op op;
    op.kind = OpKind::Alloc;
    op.phase = phase;
    op.name = "alloc " + st.buffers.back().name;
    op.onlyRank = onlyRank;
    op.writes = {id};
    st.ops.push_back(op);
    return id;
  }
  void free(int64_t id) {
    Op op;
    op.kind = OpKind::Free;
    op.phase = phase;
    op.name = "free " + st.buffers[id].name;
    op.writes = {id};
    st.ops.push_back(op);
  }
  Op collective(CollKind kind, std::string name, int64_t src, int64_t dst,
                double bytes, bool overReplicas = false) {
    Op op;
    op.kind = OpKind::Collective;
    op.phase = phase;
    op.coll = kind;
    op.name = std::move(name);
    op.meshAxes = {overReplicas ? "dp_replicate" : "dp_shard"};
    op.ranks = overReplicas ? o.replicate : S;
    op.interNode = overReplicas ? true : !o.shardIntraNode;
    op.collBytes = bytes;
    op.comm = overReplicas ? 1 : 0;
    op.reads = {src};
    op.writes = {dst};
    return op;
  }

  void collectGroups() {
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
      for (const Param *p : g.rows)
        if (p->unit == static_cast<int64_t>(u)) {
          piece.rowBytes += static_cast<double>(p->numElements()) * p->elemBytes;
          piece.rowNames.push_back(p->name);
        }
      for (const Param *p : g.owned)
        if (p->unit == static_cast<int64_t>(u)) {
          double bytes = static_cast<double>(p->numElements()) * p->elemBytes;
          piece.ownedBytes += bytes;
          piece.chunks[std::clamp<int64_t>(p->ownerRank, 0, S - 1)] += bytes;
          piece.ownedNames.push_back(p->name);
        }
      if (!rowsPerUnit[u].empty()) {
        double pad = pr.units[u].layout == planner::RowLayout::Flat
                         ? planner::flatPadding(rowsPerUnit[u], S)
                         : planner::perParamPadding(rowsPerUnit[u], S);
        g.rowPad += pad;
        piece.rowBytes += pad;
        if (pr.units[u].layout == planner::RowLayout::PerParam)
          perParamUnits.insert(static_cast<int64_t>(u));
      }
      g.pieces.push_back(std::move(piece));
    }
  }

  /// Shards, owned matrices, states: everything that lives all step.
  void declarePersistent() {
    phase = Phase::Forward;
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      GroupInfo &g = groups[gi];
      double rows = g.rowBytes + g.rowPad;
      if (!g.rows.empty()) {
        double shard = rows / S;
        double stateBytes = 0, masterBytes = 0;
        for (const Param *p : g.rows) {
          double n = static_cast<double>(p->numElements()) / S;
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
        g.accum = alloc(fmt::format("grad accumulation g{}", gi),
                        g.rowBytes + g.rowPad + g.ownedBytes, true);
    }
  }

  double gatheredBytes(const GroupInfo &g) const {
    return g.rowBytes + g.rowPad + g.ownedBytes;
  }

  /// One all-gather of rows and one all-gather-v of owner matrices per
  /// unit, all at the group's first use; mfsdp-bucket-collectives merges
  /// them.
  void gather(size_t gi, const char *why) {
    GroupInfo &g = groups[gi];
    g.gathered = alloc(fmt::format("gathered g{} ({})", gi, why),
                       gatheredBytes(g), false);
    for (const GroupInfo::Piece &piece : g.pieces) {
      const std::string &unit = pr.units[piece.unit].name;
      if (piece.rowBytes > 0) {
        Op op = collective(CollKind::AllGather,
                           fmt::format("all_gather {} ({})", unit, why),
                           g.rowShard, g.gathered, piece.rowBytes);
        op.params = piece.rowNames;
        op.group = static_cast<int64_t>(gi);
        op.unit = piece.unit;
        st.ops.push_back(op);
      }
      if (piece.ownedBytes > 0) {
        Op op = collective(CollKind::AllGatherV,
                           fmt::format("all_gather_v {} ({})", unit, why),
                           g.ownedLocal, g.gathered, piece.ownedBytes);
        op.chunks = piece.chunks;
        op.params = piece.ownedNames;
        op.group = static_cast<int64_t>(gi);
        op.unit = piece.unit;
        st.ops.push_back(op);
      }
    }
    if (!g.rows.empty())
      copies(gi, /*gatherSide=*/true);
  }

  /// FSDP2's per-parameter layout copies shards in and out of the flat
  /// collective buffers; flat layouts use the buffer in place.
  void copies(size_t gi, bool gatherSide) {
    const GroupInfo &g = groups[gi];
    double bytes = 0;
    for (int64_t u : g.units)
      if (perParamUnits.count(u))
        for (const Param *p : g.rows)
          if (p->unit == u)
            bytes += static_cast<double>(p->numElements()) * p->elemBytes;
    if (bytes <= 0)
      return;
    Op op;
    op.kind = OpKind::Compute;
    op.phase = phase;
    op.name = fmt::format("{} copy g{}", gatherSide ? "all_gather" : "reduce_scatter", gi);
    op.compute = "copy";
    op.group = static_cast<int64_t>(gi);
    // Read and write the unit once, and its shard once.
    op.bytes = 2 * (bytes + bytes / S);
    st.ops.push_back(op);
  }

  void compute(int64_t unit, Phase ph, const char *what, double flopsPerToken,
               int64_t reads, int64_t writes) {
    Op op;
    op.kind = OpKind::Compute;
    op.phase = ph;
    op.unit = unit;
    op.group = pr.units[unit].group;
    op.name = fmt::format("{} {}", what, pr.units[unit].name);
    op.compute = what;
    op.unitName = pr.units[unit].name;
    op.flops = flopsPerToken * static_cast<double>(b.tokens);
    if (reads >= 0)
      op.reads = {reads};
    if (writes >= 0)
      op.writes = {writes};
    st.ops.push_back(op);
  }

  void forward(int64_t m) {
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

  void backward(int64_t m, bool last) {
    phase = Phase::Backward;
    for (size_t gi = groups.size(); gi-- > 0;) {
      GroupInfo &g = groups[gi];
      bool needGather = o.zero >= 3 && (!g.rows.empty() || !g.owned.empty());
      if (needGather)
        gather(gi, "backward");
      int64_t grads = alloc(fmt::format("unreduced grads g{} mb{}", gi, m),
                            gatheredBytes(g), false);
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
        acc.bytes = 3 * gatheredBytes(g);
        acc.reads = {grads};
        acc.writes = {g.accum};
        st.ops.push_back(acc);
      }
      if (last)
        reduce(gi, st.microbatches > 1 ? g.accum : grads);
      free(grads);
    }
  }

  /// Per unit, in backward order: reduce-scatter of rows (all-reduce under
  /// ZeRO-1), reduce-scatter-v to the owners, and over dp_replicate an
  /// all-reduce of what this rank keeps.
  void reduce(size_t gi, int64_t grads) {
    GroupInfo &g = groups[gi];
    if (!g.rows.empty())
      copies(gi, /*gatherSide=*/false);
    for (auto it = g.pieces.rbegin(); it != g.pieces.rend(); ++it) {
      const GroupInfo::Piece &piece = *it;
      const std::string &unit = pr.units[piece.unit].name;
      if (piece.rowBytes > 0) {
        Op op = o.zero >= 2
                    ? collective(CollKind::ReduceScatter,
                                 fmt::format("reduce_scatter {}", unit), grads,
                                 g.rowGrad, piece.rowBytes)
                    : collective(CollKind::AllReduce,
                                 fmt::format("all_reduce {}", unit), grads,
                                 g.rowGrad, piece.rowBytes);
        op.params = piece.rowNames;
        op.group = static_cast<int64_t>(gi);
        op.unit = piece.unit;
        st.ops.push_back(op);
      }
      if (piece.ownedBytes > 0) {
        Op op = o.zero >= 2
                    ? collective(CollKind::ReduceScatterV,
                                 fmt::format("reduce_scatter_v {}", unit), grads,
                                 g.ownedLocal, piece.ownedBytes)
                    : collective(CollKind::AllReduce,
                                 fmt::format("all_reduce owners {}", unit), grads,
                                 g.ownedGradFull, piece.ownedBytes);
        if (o.zero >= 2)
          op.chunks = piece.chunks;
        op.params = piece.ownedNames;
        op.group = static_cast<int64_t>(gi);
        op.unit = piece.unit;
        st.ops.push_back(op);
      }
      if (o.replicate > 1 && (piece.rowBytes > 0 || piece.ownedBytes > 0)) {
        // What this rank keeps: its row shard and the largest owner chunk.
        double kept = (o.zero >= 2 ? piece.rowBytes / S : piece.rowBytes) +
                      *std::max_element(piece.chunks.begin(), piece.chunks.end());
        Op hsdp = collective(CollKind::AllReduce,
                             fmt::format("all_reduce {} over replicas", unit),
                             g.rowGrad >= 0 ? g.rowGrad : g.ownedLocal,
                             g.rowGrad >= 0 ? g.rowGrad : g.ownedLocal, kept, true);
        hsdp.group = static_cast<int64_t>(gi);
        hsdp.unit = piece.unit;
        st.ops.push_back(hsdp);
      }
    }
    if (!g.replicated.empty()) {
      Op op = collective(CollKind::AllReduce,
                         fmt::format("all_reduce replicated g{}", gi),
                         g.replicatedBuf, g.replicatedBuf, g.replicatedBytes);
      op.group = static_cast<int64_t>(gi);
      st.ops.push_back(op);
    }
  }

  void optimizerOp(std::string kind, std::string name, size_t gi, double flops,
                   double bytes, int64_t onlyRank, std::vector<std::string> params,
                   int64_t reads = -1, int64_t writes = -1) {
    Op op;
    if (reads >= 0)
      op.reads = {reads};
    if (writes >= 0)
      op.writes = {writes};
    op.kind = OpKind::Optimizer;
    op.phase = Phase::Optimizer;
    op.optimizer = std::move(kind);
    op.name = std::move(name);
    op.group = static_cast<int64_t>(gi);
    op.flops = flops;
    op.bytes = bytes;
    op.onlyRank = onlyRank;
    op.params = std::move(params);
    st.ops.push_back(op);
  }

  void optimizer() {
    phase = Phase::Optimizer;
    const double R = static_cast<double>(std::max<int64_t>(o.replicate, 1));
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      GroupInfo &g = groups[gi];
      // Row shards: AdamW/SGD on the local shard, on every rank.
      std::map<std::string, std::pair<double, std::vector<std::string>>> byKind;
      std::set<const Param *> gatheredSet(g.gatheredMuon.begin(), g.gatheredMuon.end());
      for (const Param *p : g.rows) {
        if (p->optim == Optim::None || gatheredSet.count(p))
          continue;
        auto &[bytes, names] = byKind[std::string(planner::optimName(p->optim))];
        bytes += static_cast<double>(p->numElements()) / S *
                 planner::optimBytesPerElem(*p, o);
        names.push_back(p->name);
      }
      for (auto &[kind, entry] : byKind)
        optimizerOp(kind, fmt::format("{} rows g{}", kind, gi), gi, 0,
                    entry.first, -1, entry.second, g.rowGrad, g.rowShard);
      // Gathered-Muon baseline: gather each matrix's gradient, then every
      // rank runs Newton-Schulz on the whole of it.
      for (const Param *p : g.gatheredMuon) {
        double bytes = static_cast<double>(p->numElements()) * p->elemBytes;
        int64_t full = alloc(fmt::format("gathered grad {}", p->name), bytes, false);
        Op op = collective(CollKind::AllGather,
                           fmt::format("all_gather grad {}", p->name),
                           g.rowGrad, full, bytes);
        op.params = {p->name};
        op.group = static_cast<int64_t>(gi);
        st.ops.push_back(op);
        Param whole = *p;
        whole.optim = Optim::Muon;
        optimizerOp("muon", fmt::format("muon (gathered) {}", p->name), gi,
                    planner::newtonSchulzFlops(p->shape[0], p->shape[1], o.nsSteps),
                    static_cast<double>(p->numElements()) / S *
                            planner::optimBytesPerElem(whole, o) +
                        2 * bytes * o.nsSteps,
                    -1, {p->name}, full, g.rowShard);
        free(full);
      }
      // Owners: Muon on each owner's matrices of the group.
      if (!g.owned.empty()) {
        for (int64_t r = 0; r < S; ++r) {
          double flops = 0, bytes = 0;
          std::vector<std::string> names;
          for (const Param *p : g.owned) {
            if (p->ownerRank != r || p->optim == Optim::None)
              continue;
            double n = static_cast<double>(p->numElements());
            if (p->optim == Optim::Muon)
              flops += planner::newtonSchulzFlops(p->shape[0], p->shape[1], o.nsSteps);
            bytes += n * planner::optimBytesPerElem(*p, o);
            names.push_back(p->name);
          }
          if (names.empty())
            continue;
          double split = d.nsSplit ? R : 1;
          optimizerOp("muon", fmt::format("muon g{} owner {}", gi, r), gi,
                      flops / split, bytes / split, r, names, g.ownedLocal,
                      g.ownedLocal);
        }
        if (d.nsSplit && o.replicate > 1) {
          double largest = *std::max_element(g.chunks.begin(), g.chunks.end());
          Op op = collective(CollKind::AllGather,
                             fmt::format("all_gather updates g{} over replicas", gi),
                             g.ownedLocal, g.ownedLocal, largest, true);
          op.group = static_cast<int64_t>(gi);
          st.ops.push_back(op);
        }
      }
      if (!g.replicated.empty()) {
        double bytes = 0;
        for (const Param *p : g.replicated)
          bytes += static_cast<double>(p->numElements()) *
                   planner::optimBytesPerElem(*p, o);
        optimizerOp("adamw", fmt::format("adamw replicated g{}", gi), gi, 0,
                    bytes, -1, {}, g.replicatedBuf, g.replicatedBuf);
      }
      // ZeRO-1/2: every rank needs the updated parameters whole.
      if (o.zero < 3) {
        if (!g.rows.empty()) {
          Op op = collective(CollKind::AllGather,
                             fmt::format("all_gather updated rows g{}", gi),
                             g.rowShard, g.rowShard, g.rowBytes + g.rowPad);
          op.params = g.rowNames;
          op.group = static_cast<int64_t>(gi);
          st.ops.push_back(op);
        }
        if (!g.owned.empty()) {
          Op op = collective(CollKind::AllGatherV,
                             fmt::format("all_gather_v updated owners g{}", gi),
                             g.ownedLocal, g.ownedFull, g.ownedBytes);
          op.chunks = g.chunks;
          op.params = g.ownedNames;
          op.group = static_cast<int64_t>(gi);
          st.ops.push_back(op);
        }
      }
    }
  }

  const planner::Problem &pr;
  const planner::Options &o;
  const planner::Decisions &d;
  const std::vector<UnitCost> &costs;
  const BuildOptions &b;
  const int64_t S;
  Step st;
  Phase phase = Phase::Forward;
  std::vector<GroupInfo> groups;
  std::set<int64_t> perParamUnits;
  std::vector<int64_t> activations;
};

} // namespace

Step buildStep(const planner::Problem &problem, const planner::Options &options,
               const planner::Decisions &decisions,
               const std::vector<UnitCost> &units, const BuildOptions &build,
               const std::string &name) {
  return StepBuilder(problem, options, decisions, units, build).build(name);
}

} // namespace mfsdp::step

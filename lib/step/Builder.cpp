//===- Builder.cpp - Build one training step from a plan ------------------===//
#include "mfsdp/step/Builder.h"
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

using planner::Optim;
using planner::Param;
using planner::PlacementKind;

namespace {

/// `list`, or `shared` itself when it holds the same names: the ops that
/// carry the same parameters share one list.
NameList sharedIfSame(const NameList &shared, NameList list) {
  return list == shared ? shared : list;
}

struct GroupInfo {
  std::vector<int64_t> units;           // in forward order
  std::vector<const Param *> rows;      // row-sharded (and block-sharded)
  std::vector<const Param *> owned;     // on owners
  std::vector<const Param *> replicated;
  std::vector<const Param *> gatheredMuon; // fsdp2 baseline: Muon on rows
  double rowBytes = 0, rowPad = 0, ownedBytes = 0, replicatedBytes = 0;
  std::vector<double> chunks;           // owned bytes per rank
  NameList rowNames, ownedNames; // shared by the ops that carry them
  /// One unit's share of the group's collectives.
  struct Piece {
    int64_t unit = -1;
    double rowBytes = 0;               // row shards, padded
    double ownedBytes = 0;
    Chunks chunks;                     // owned bytes per rank
    // The same in BuildOptions::reduceElemBytes an element (when set): what
    // the unit's reductions move, whole bytes whatever mix of dtypes.
    double reduceRowBytes = 0, reduceOwnedBytes = 0;
    Chunks reduceChunks;
    NameList rowNames, ownedNames; // shared by the ops that carry them
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
  /// The step's array holds its ops in chunks: growing it never copies.
  void add(Op &&op) { st.ops.push_back(std::move(op)); }

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
    add(std::move(op));
    return id;
  }
  void free(int64_t id) {
    Op op;
    op.kind = OpKind::Free;
    op.phase = phase;
    op.name = "free " + st.buffers[id].name;
    op.writes = {id};
    add(std::move(op));
  }
  Op collective(CollKind kind, std::string name, int64_t src, int64_t dst,
                double bytes, bool overReplicas = false) {
    Op op;
    op.kind = OpKind::Collective;
    op.phase = phase;
    op.coll = kind;
    op.name = std::move(name);
    // One list per axis for the whole step.
    static const NameList shardAxes{"dp_shard"}, replicaAxes{"dp_replicate"};
    op.meshAxes = overReplicas ? replicaAxes : shardAxes;
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
        if (pr.units[u].layout == planner::RowLayout::PerParam)
          perParamUnits.insert(static_cast<int64_t>(u));
      }
      // A group of one unit: the unit's lists are the group's (shared).
      piece.rowNames = sharedIfSame(g.rowNames, piece.rowNames);
      piece.ownedNames = sharedIfSame(g.ownedNames, piece.ownedNames);
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
  int64_t blockPaddingElements(const Param &p) const {
    if (p.placement != PlacementKind::BlockShard || p.block.empty())
      return 0;
    int64_t blockElems = 1;
    for (int64_t d : p.block)
      blockElems *= std::max<int64_t>(d, 1);
    const int64_t blocks = p.numElements() / blockElems;
    return ((blocks + S - 1) / S * S - blocks) * blockElems;
  }

  double gatheredBytes(const GroupInfo &g) const {
    return g.rowBytes + g.rowPad + g.ownedBytes;
  }

  /// A group's unreduced gradients as its reductions read them: in the
  /// reduce dtype where that is wider than the parameters' own (a bf16
  /// gradient widened into an fp32 reduction buffer, as FSDP2 does under
  /// reduce_dtype=fp32).
  double unreducedBytes(const GroupInfo &g) const {
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
    add(std::move(op));
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
    op.kernels = costs[unit].kernels;
    op.kernelTokens = op.kernels.empty() ? 0 : static_cast<double>(b.tokens);
    if (reads >= 0)
      op.reads = {reads};
    if (writes >= 0)
      op.writes = {writes};
    add(std::move(op));
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
  double reducedBytes(const std::vector<const Param *> &params) const {
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
  void reduce(size_t gi, int64_t grads) {
    GroupInfo &g = groups[gi];
    if (!g.rows.empty())
      copies(gi, /*gatherSide=*/false);
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
                           grads, g.rowGrad, piece.rowBytes);
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
  }

  void optimizerOp(std::string kind, std::string name, size_t gi, double flops,
                   double bytes, int64_t onlyRank, NameList params,
                   int64_t reads = -1, int64_t writes = -1, bool torchNs = false) {
    Op op;
    op.torchNs = torchNs;
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
    add(std::move(op));
  }

  /// torch.optim.Muon on one matrix's DTensor row shards: the momentum
  /// update on the local shard, then dtensorNewtonSchulz()'s ops, each
  /// preceded by its redistributions (synchronous on the compute stream in
  /// DTensor, so every one is between the op that produces its operand and
  /// the op that reads it), then the parameter update on the local shard.
  void dtensorMuon(size_t gi, const Param &p) {
    GroupInfo &g = groups[gi];
    const double nLocal = static_cast<double>(p.numElements()) / S;
    Param whole = p;
    whole.optim = Optim::Muon;
    // The elementwise traffic of the gathered baseline, split between the
    // momentum update (gradient, state) and the parameter update (the
    // rest).
    const double momentumBytes =
        nLocal * (p.elemBytes + 2 * planner::stateBytesPerElem(Optim::Muon, o));
    const double updateBytes =
        nLocal * planner::optimBytesPerElem(whole, o) - momentumBytes;
    const int64_t rows = p.shape[0], cols = p.shape[1];
    std::vector<DTensorNsOp> ns =
        dtensorNewtonSchulz(rows, cols, S, o.nsSteps, o.shardIntraNode,
                            b.dtensorForm);
    // Each op names the CUDA kernels torch launches for it
    // (planner::torchMuonKernels; DTensor's own dispatch on top of eager
    // PyTorch's is not counted).
    auto op = [&](std::string name, double flops, double bytes,
                  std::vector<int64_t> reads, std::vector<int64_t> writes,
                  int64_t kernels) {
      Op k;
      k.kind = OpKind::Optimizer;
      k.phase = Phase::Optimizer;
      k.optimizer = "muon";
      k.torchNs = true; // torch.optim.Muon's Newton-Schulz
      k.nsKernels = static_cast<int32_t>(kernels);
      k.name = std::move(name);
      k.group = static_cast<int64_t>(gi);
      k.flops = flops;
      k.bytes = bytes;
      k.params = {p.name};
      k.reads = std::move(reads);
      k.writes = std::move(writes);
      add(std::move(k));
    };
    // X: the momentum-updated gradient in bf16, Shard(0) like the gradient.
    int64_t x = alloc(fmt::format("dtensor X {}", p.name), ns.front().outBytes,
                      false);
    // The momentum's lerp_ and lerp, then Newton-Schulz's bf16 copy.
    op(fmt::format("muon momentum {}", p.name), 0, momentumBytes, {g.rowGrad},
       {x}, planner::kTorchMuonMomentumKernels + planner::kTorchNsCopyKernels);
    int64_t a = -1, bb = -1;
    // Mm form: the iteration's other temporaries (bA, cA, cAA, aX, BX).
    std::map<std::string, int64_t> named;
    for (const DTensorNsOp &n : ns) {
      std::string where = n.iteration >= 0
                              ? fmt::format("{} it{}", p.name, n.iteration)
                              : p.name;
      auto source = [&](const std::string &operand) {
        if (operand == "A")
          return a;
        if (operand == "B")
          return bb;
        auto i = named.find(operand);
        return i != named.end() ? i->second : x;
      };
      // Redistributed copies of the operands, in argument order.
      std::vector<int64_t> tmps;
      for (const DTensorRedistribute &r : n.redistributes) {
        int64_t t = alloc(fmt::format("dtensor {} {} {}", r.operand,
                                      dplacementName(r.to), where),
                          r.localBytes, false);
        Op c = collective(r.coll,
                          fmt::format("dtensor {} {} {} -> {} {}",
                                      r.allToAll ? std::string("all_to_all")
                                                 : std::string(mfsdp::enumName(r.coll)),
                                      r.operand, dplacementName(r.from),
                                      dplacementName(r.to), where),
                          source(r.operand), t, r.collBytes);
        c.params = {p.name};
        c.group = static_cast<int64_t>(gi);
        add(std::move(c));
        tmps.push_back(t);
      }
      // An operand is read directly where some use of it is not
      // redistributed (X @ X^T uses X twice, addmm(A, A, A) A three times,
      // addmm(X, B, X) X twice).
      auto redistributed = [&](std::initializer_list<const char *> names) {
        int count = 0;
        for (const DTensorRedistribute &r : n.redistributes)
          for (const char *name : names)
            count += r.operand == name;
        return count;
      };
      std::vector<int64_t> reads = tmps;
      if (!n.result.empty()) {
        // Mm form: an operand is read directly unless every use of it is
        // redistributed ("X^T" is a view of X).
        auto base = [](const std::string &t) {
          return t == "X^T" ? std::string("X") : t;
        };
        std::vector<std::string> bases;
        for (const std::string &t : n.args)
          if (std::find(bases.begin(), bases.end(), base(t)) == bases.end())
            bases.push_back(base(t));
        for (const std::string &t : bases) {
          auto uses = std::count_if(n.args.begin(), n.args.end(),
                                    [&](const std::string &u) { return base(u) == t; });
          auto moved = std::count_if(
              n.redistributes.begin(), n.redistributes.end(),
              [&](const DTensorRedistribute &r) { return base(r.operand) == t; });
          if (moved < uses)
            reads.push_back(source(t));
        }
        int64_t res = alloc(fmt::format("dtensor {} {}", n.result, where),
                            n.outBytes, false);
        // One kernel: a matmul or a pointwise op.
        op(fmt::format("muon ns {} {}", where, n.op), n.flops, n.bytes, reads,
           {res}, 1);
        // Each temporary is read once; A, B and the old X go when the
        // iteration's new X exists.
        for (const std::string &t : bases)
          if (auto i = named.find(t); i != named.end()) {
            free(i->second);
            named.erase(i);
          }
        if (n.result == "A") {
          a = res;
        } else if (n.result == "B") {
          bb = res;
        } else if (n.result == "X") {
          free(a);
          free(bb);
          free(x);
          a = bb = -1;
          x = res;
        } else {
          named[n.result] = res;
        }
      } else if (n.op == "normalise") {
        reads.push_back(x);
        op(fmt::format("muon ns {} normalise", p.name), 0, 2 * n.outBytes,
           reads, {x}, planner::kTorchNsNormaliseKernels);
      } else if (n.op == "X @ X^T") {
        if (redistributed({"X", "X^T"}) < 2)
          reads.push_back(x);
        a = alloc(fmt::format("dtensor A {}", where), n.outBytes, false);
        op(fmt::format("muon ns {} X @ X^T", where), n.flops, 0, reads, {a},
           planner::kTorchMmKernels);
      } else if (n.op == "addmm(A, A, A)") {
        if (redistributed({"A"}) < 3)
          reads.push_back(a);
        bb = alloc(fmt::format("dtensor B {}", where), n.outBytes, false);
        op(fmt::format("muon ns {} addmm(A, A, A)", where), n.flops, 0, reads,
           {bb}, planner::kTorchAddmmKernels);
      } else if (n.op == "addmm(X, B, X)") {
        if (redistributed({"B"}) < 1)
          reads.push_back(bb);
        if (redistributed({"X"}) < 2)
          reads.push_back(x);
        int64_t next = alloc(fmt::format("dtensor X {}", where), n.outBytes,
                             false);
        op(fmt::format("muon ns {} addmm(X, B, X)", where), n.flops, 0, reads,
           {next}, planner::kTorchAddmmKernels);
        free(a);
        free(bb);
        free(x);
        a = bb = -1;
        x = next;
      } else { // update
        if (redistributed({"update"}) < 1)
          reads.push_back(x);
        op(fmt::format("muon update {}", p.name), 0, updateBytes, reads,
           {g.rowShard}, planner::kTorchMuonUpdateKernels);
      }
      for (int64_t t : tmps)
        free(t);
    }
    free(x);
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
        auto &[bytes, names] = byKind[std::string(mfsdp::enumName(p->optim))];
        bytes += static_cast<double>(p->numElements()) / S *
                 planner::optimBytesPerElem(*p, o);
        names.push_back(p->name);
      }
      // Usually every row of the group: then the group's list (shared).
      for (auto &[kind, entry] : byKind)
        optimizerOp(kind, fmt::format("{} rows g{}", kind, gi), gi, 0, entry.first, -1,
                    sharedIfSame(g.rowNames, std::move(entry.second)),
                    g.rowGrad, g.rowShard);
      // DTensor baseline: torch.optim.Muon on the row shards, each matmul
      // split by DTensor's sharding propagation.
      if (b.dtensorMuon) {
        for (const Param *p : g.gatheredMuon)
          dtensorMuon(gi, *p);
      }
      // Gathered-Muon baseline: gather each matrix's gradient, then every
      // rank runs Newton-Schulz on the whole of it.
      for (const Param *p : b.dtensorMuon ? std::vector<const Param *>{}
                                          : g.gatheredMuon) {
        double bytes = static_cast<double>(p->numElements()) * p->elemBytes;
        int64_t full = alloc(fmt::format("gathered grad {}", p->name), bytes, false);
        Op op = collective(CollKind::AllGather,
                           fmt::format("all_gather grad {}", p->name),
                           g.rowGrad, full, bytes);
        op.params = {p->name};
        op.group = static_cast<int64_t>(gi);
        add(std::move(op));
        Param whole = *p;
        whole.optim = Optim::Muon;
        // torch.optim.Muon: bf16, three GEMMs per iteration.
        optimizerOp("muon", fmt::format("muon (gathered) {}", p->name), gi,
                    planner::newtonSchulzGemmFlops(p->shape[0], p->shape[1], o.nsSteps),
                    static_cast<double>(p->numElements()) / S *
                            planner::optimBytesPerElem(whole, o) +
                        2 * bytes * o.nsSteps,
                    -1, {p->name}, full, g.rowShard, /*torchNs=*/true);
        st.ops.back().nsKernels = static_cast<int32_t>(planner::torchMuonKernels(o.nsSteps));
        free(full);
      }
      // Owners: Muon on each owner's matrices of the group.
      if (!g.owned.empty()) {
        for (int64_t r = 0; r < S; ++r) {
          double flops = 0, bytes = 0;
          int64_t kernels = 0; // Newton-Schulz's, at the graph's precision
          std::vector<std::string> names;
          for (const Param *p : g.owned) {
            if (p->ownerRank != r || p->optim == Optim::None)
              continue;
            double n = static_cast<double>(p->numElements());
            if (p->optim == Optim::Muon) {
              flops += planner::newtonSchulzFlops(p->shape[0], p->shape[1], o.nsSteps);
              kernels += rt::newtonSchulzKernels(p->shape[0], p->shape[1], o.nsSteps,
                                                 planner::nsPrecision(o.hw));
            }
            bytes += n * planner::optimBytesPerElem(*p, o);
            names.push_back(p->name);
          }
          if (names.empty())
            continue;
          double split = d.nsSplit ? R : 1;
          optimizerOp("muon", fmt::format("muon g{} owner {}", gi, r), gi,
                      flops / split, bytes / split, r,
                      sharedIfSame(g.ownedNames, names),
                      g.ownedLocal, g.ownedLocal);
          // Under ns_split each replica runs its share of the matrices.
          st.ops.back().nsKernels = static_cast<int32_t>(std::min<int64_t>(
              (kernels + static_cast<int64_t>(split) - 1) / static_cast<int64_t>(split),
              std::numeric_limits<int32_t>::max()));
        }
        if (d.nsSplit && o.replicate > 1) {
          double largest = *std::max_element(g.chunks.begin(), g.chunks.end());
          Op op = collective(CollKind::AllGather,
                             fmt::format("all_gather updates g{} over replicas", gi),
                             g.ownedLocal, g.ownedLocal, largest, true);
          op.group = static_cast<int64_t>(gi);
          add(std::move(op));
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
          add(std::move(op));
        }
        if (!g.owned.empty()) {
          Op op = collective(CollKind::AllGatherV,
                             fmt::format("all_gather_v updated owners g{}", gi),
                             g.ownedLocal, g.ownedFull, g.ownedBytes);
          op.chunks = g.chunks;
          op.params = g.ownedNames;
          op.group = static_cast<int64_t>(gi);
          add(std::move(op));
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

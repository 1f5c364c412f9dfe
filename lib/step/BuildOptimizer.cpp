//===- BuildOptimizer.cpp - The optimizer phase of a built step -----------===//
//
// The optimizer ops of each group (row shards, owners, replicated tensors,
// the peers' gathered and DTensor Muon baselines) and ZeRO-1/2's gathers
// of the updated parameters, as detail::StepBuilder (StepBuilder.h) adds
// them after the backward.
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

namespace mfsdp::step::detail {

using planner::Optim;
using planner::Param;
using planner::PlacementKind;

void StepBuilder::optimizerOp(std::string kind, std::string name, size_t gi,
                              double flops, double bytes, int64_t onlyRank,
                              NameList params, int64_t reads, int64_t writes,
                              bool torchNs) {
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
void StepBuilder::dtensorMuon(size_t gi, const Param &p) {
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

void StepBuilder::optimizer() {
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
      if (!g.rows.empty() && !g.copies()) {
        Op op = collective(CollKind::AllGather,
                           fmt::format("all_gather updated rows g{}", gi),
                           g.rowShard, g.rowShard, g.rowBytes + g.rowPad);
        op.params = g.rowNames;
        op.group = static_cast<int64_t>(gi);
        add(std::move(op));
      } else if (!g.rows.empty()) {
        // The copied units' rows land in staging (the runtime's GATHER
        // stages a row-shard bucket and unpacks it inside the op), copied
        // out into the parameters; the others' are gathered in place.
        const double staged = g.stagedBytes(), inPlace = g.rowBytes + g.rowPad - staged;
        NameList stagedNames, inPlaceNames;
        for (const GroupInfo::Piece &piece : g.pieces)
          for (const std::string &name : piece.rowNames)
            (piece.copied ? stagedNames : inPlaceNames).push_back(name);
        const int64_t staging =
            alloc(fmt::format("gather staging g{} (updated)", gi), staged, false);
        Op op = collective(CollKind::AllGather,
                           fmt::format("all_gather updated rows g{}", gi), g.rowShard,
                           staging, staged);
        op.params = stagedNames;
        op.group = static_cast<int64_t>(gi);
        add(std::move(op));
        if (inPlace > 0) {
          Op rest = collective(CollKind::AllGather,
                               fmt::format("all_gather updated rows g{} in place", gi),
                               g.rowShard, g.rowShard, inPlace);
          rest.params = inPlaceNames;
          rest.group = static_cast<int64_t>(gi);
          add(std::move(rest));
        }
        copy(gi, /*gatherSide=*/true, staging, g.rowShard);
        free(staging);
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

} // namespace mfsdp::step::detail

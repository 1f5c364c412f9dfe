//===- DTensorMuon.cpp - torch.optim.Muon's Newton-Schulz on a DTensor ---===//
//
// The ops FSDP2 runs for torch.optim.Muon's Newton-Schulz on DTensor
// shards (baseline=fsdp2-dtensor, fsdp2-dtensor-mm): each matmul's
// strategy chosen by DTensor's own cost estimate, and the redistributions
// it implies. The step builder (BuildOptimizer.cpp) turns them into ops.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/step/Builder.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace mfsdp::step {

std::string_view dplacementName(DPlacement p) {
  switch (p) {
  case DPlacement::Replicate: return "Replicate()";
  case DPlacement::Shard0: return "Shard(0)";
  case DPlacement::Shard1: return "Shard(1)";
  case DPlacement::Partial: return "Partial(sum)";
  }
  return "?";
}

namespace {

using DP = DPlacement;

bool isShard(DP p) { return p == DP::Shard0 || p == DP::Shard1; }

/// aten.t / .T: the transpose of Shard(d) is Shard(1 - d).
DP transposed(DP p) {
  return p == DP::Shard0 ? DP::Shard1 : p == DP::Shard1 ? DP::Shard0 : p;
}

/// DTensor's own cost estimate for choosing a strategy
/// (torch/distributed/tensor/_collective_utils.py: MeshTopoInfo,
/// allgather_cost, allreduce_cost, reduce_scatter_cost, redistribute_cost),
/// in microseconds. These are DTensor's constants, used only to reproduce
/// its choice; the chosen collectives are then priced by our cost model.
struct DTensorTopo {
  double w = 1;
  double bwGBs = 87.7; // intra-host; x 0.22 once the mesh spans hosts
  double hopUs = 0.6;  // intra-host; 2.7 once the mesh spans hosts
  double allGatherUs(double gb) const {
    return 6.6 + (w - 1) * hopUs + gb * (w - 1) / w / bwGBs * 1e6;
  }
  double allReduceUs(double gb) const {
    return 6.6 + 2 * (w - 1) * hopUs + gb * 2 * (w - 1) / w / bwGBs * 1e6;
  }
  /// redistribute_cost for one mesh dimension; `full` is the tensor's
  /// global size in bytes (spec_to_bytes / num_shards gives the local one).
  double redistributeUs(DP from, DP to, double full) const {
    if (from == to || from == DP::Replicate)
      return 0; // already replicated: a local slice at most
    double gb = full / (isShard(from) ? w : 1.0) / (1024.0 * 1024 * 1024);
    if (isShard(from) && to == DP::Replicate)
      return allGatherUs(gb * w);
    if (isShard(from) && isShard(to))
      return allGatherUs(gb) + 1.0; // all-to-all, priced as an all-gather
                                    // of the local shard plus a penalty
    if (from == DP::Partial && to == DP::Replicate)
      return allReduceUs(gb);
    if (from == DP::Partial && isShard(to))
      return allGatherUs(gb); // reduce_scatter_cost has the same formula
    return std::numeric_limits<double>::infinity(); // Shard -> Partial
  }
};

struct DOperand {
  std::string name;
  DP placement = DP::Shard0;
  int64_t rows = 0, cols = 0;
};

/// ceil(n / w) of n: the busiest rank's share of a dimension split in
/// torch.chunk fashion.
double share(int64_t n, int64_t w) {
  if (n <= 0)
    return 0;
  return static_cast<double>((n + w - 1) / w) / static_cast<double>(n);
}

double localBytes(DP p, int64_t rows, int64_t cols, int64_t w, double elem) {
  double full = static_cast<double>(rows) * static_cast<double>(cols) * elem;
  if (p == DP::Shard0)
    return full * share(rows, w);
  if (p == DP::Shard1)
    return full * share(cols, w);
  return full;
}

/// is_tensor_shardable: a dimension split over more ranks than it has
/// entries is not a candidate.
bool shardable(DP p, int64_t rows, int64_t cols, int64_t w) {
  return !(p == DP::Shard0 && rows < w) && !(p == DP::Shard1 && cols < w);
}

std::optional<DTensorRedistribute> redistribute(const DOperand &x, DP to,
                                                int64_t w, double elem) {
  if (x.placement == to || x.placement == DP::Replicate)
    return std::nullopt; // nothing, or a local slice
  DTensorRedistribute r;
  r.operand = x.name;
  r.from = x.placement;
  r.to = to;
  double full = static_cast<double>(x.rows) * static_cast<double>(x.cols) * elem;
  r.localBytes = localBytes(to, x.rows, x.cols, w, elem);
  if (isShard(x.placement) && to == DP::Replicate) {
    r.coll = CollKind::AllGather;
    r.collBytes = full;
  } else if (isShard(x.placement) && isShard(to)) {
    r.coll = CollKind::AllGather;
    r.allToAll = true;
    r.collBytes = localBytes(x.placement, x.rows, x.cols, w, elem);
  } else if (x.placement == DP::Partial && to == DP::Replicate) {
    r.coll = CollKind::AllReduce;
    r.collBytes = full;
  } else if (x.placement == DP::Partial && isShard(to)) {
    r.coll = CollKind::ReduceScatter;
    r.collBytes = full;
  } else {
    return std::nullopt; // never chosen: DTensor prices Shard -> Partial inf
  }
  return r;
}

/// aten.mm / aten.addmm on a 1-D mesh: the strategies of
/// gen_einsum_strategies("mk,kn->mn") in its order (dims sorted: k, m, n),
/// as {output, lhs, rhs}; addmm's `self` takes the output's placement.
/// DTensor picks the cheapest total redistribution, the first on ties.
DTensorNsOp matmul(std::string name, int64_t iteration,
                   const std::optional<DOperand> &self, const DOperand &lhs,
                   const DOperand &rhs, const DTensorTopo &topo, int64_t w,
                   double elem) {
  static const DP kStrategies[4][3] = {
      {DP::Replicate, DP::Replicate, DP::Replicate}, // all replicated
      {DP::Partial, DP::Shard1, DP::Shard0},         // split k: Partial out
      {DP::Shard0, DP::Shard0, DP::Replicate},       // split m (lhs rows)
      {DP::Shard1, DP::Replicate, DP::Shard1}};      // split n (rhs cols)
  auto full = [&](const DOperand &x) {
    return static_cast<double>(x.rows) * static_cast<double>(x.cols) * elem;
  };
  int best = 0;
  double bestCost = std::numeric_limits<double>::infinity();
  for (int k = 0; k < 4; ++k) {
    const DP *st = kStrategies[k];
    if (!shardable(st[1], lhs.rows, lhs.cols, w) ||
        !shardable(st[2], rhs.rows, rhs.cols, w))
      continue;
    double cost = topo.redistributeUs(lhs.placement, st[1], full(lhs)) +
                  topo.redistributeUs(rhs.placement, st[2], full(rhs));
    if (self)
      cost += topo.redistributeUs(self->placement, st[0], full(*self));
    if (cost < bestCost) {
      bestCost = cost;
      best = k;
    }
  }
  const DP *st = kStrategies[best];
  DTensorNsOp op;
  op.op = std::move(name);
  op.iteration = iteration;
  op.out = st[0];
  if (self) {
    op.inputs.push_back(st[0]);
    if (auto r = redistribute(*self, st[0], w, elem))
      op.redistributes.push_back(*r);
  }
  op.inputs.push_back(st[1]);
  op.inputs.push_back(st[2]);
  if (auto r = redistribute(lhs, st[1], w, elem))
    op.redistributes.push_back(*r);
  if (auto r = redistribute(rhs, st[2], w, elem))
    op.redistributes.push_back(*r);
  // (m x k) @ (k x n); the split dimension: k (Partial), m or n.
  const int64_t m = lhs.rows, kk = lhs.cols, n = rhs.cols;
  double flops = 2.0 * static_cast<double>(m) * static_cast<double>(kk) *
                 static_cast<double>(n);
  if (best == 1)
    flops *= share(kk, w);
  else if (best == 2)
    flops *= share(m, w);
  else if (best == 3)
    flops *= share(n, w);
  op.flops = flops;
  op.outBytes = localBytes(op.out, m, n, w, elem);
  return op;
}

/// A pointwise op on a 1-D mesh (pointwise_strategy and
/// common_pointwise_strategy of torch/distributed/tensor/_ops/
/// _pointwise_ops.py): one candidate, no cost comparison. The output follows
/// the tensor operand with the most shards (a Shard has W, Partial and
/// Replicate one; ties go to the first); a followed Partial stays Partial
/// for the linear ops used here (mul by a scalar, linearity 2; add.Tensor of
/// two tensors, linearity 1), and every operand is redistributed to the
/// output's placement: Partial + Partial needs nothing, Shard + Partial
/// reduce-scatters the Partial operand to the Shard. (The single-dim
/// strategies of newer versions enumerate Shard(0), Shard(1), the Partial
/// rules and Replicate and take the cheapest; for the operands of
/// Newton-Schulz that is the same placement.) `bytes` counts every operand
/// read and the output written on one rank, in the local sizes.
DTensorNsOp pointwise(std::string name, int64_t iteration,
                      const std::vector<DOperand> &args, std::string result,
                      int64_t w, double elem) {
  size_t followed = 0;
  for (size_t i = 1; i < args.size(); ++i)
    if (isShard(args[i].placement) && !isShard(args[followed].placement))
      followed = i;
  const DOperand &f = args[followed];
  DTensorNsOp op;
  op.op = std::move(name);
  op.iteration = iteration;
  op.out = f.placement;
  op.result = std::move(result);
  for (const DOperand &a : args) {
    op.args.push_back(a.name);
    op.inputs.push_back(op.out);
    if (auto r = redistribute(a, op.out, w, elem))
      op.redistributes.push_back(*r);
    op.bytes += localBytes(op.out, a.rows, a.cols, w, elem);
  }
  op.outBytes = localBytes(op.out, f.rows, f.cols, w, elem);
  op.bytes += op.outBytes;
  return op;
}

} // namespace

std::vector<DTensorNsOp> dtensorNewtonSchulz(int64_t rows, int64_t cols,
                                             int64_t world, int64_t nsSteps,
                                             bool intraNode, DTensorForm form) {
  const int64_t w = std::max<int64_t>(world, 1);
  const double elem = 2; // torch.optim.Muon runs Newton-Schulz in bf16
  DTensorTopo topo;
  topo.w = static_cast<double>(w);
  if (!intraNode) {
    topo.bwGBs *= 0.22;
    topo.hopUs = 2.7;
  }
  std::vector<DTensorNsOp> out;
  // ortho_grad = grad.bfloat16(); ortho_grad = ortho_grad.T if rows > cols:
  // the transpose of the Shard(0) gradient is Shard(1).
  const bool transpose = rows > cols;
  DOperand x{"X", transpose ? DP::Shard1 : DP::Shard0,
             transpose ? cols : rows, transpose ? rows : cols};
  // ortho_grad.div_(ortho_grad.norm().clamp(min=eps)): the norm of a
  // sharded tensor is a pending reduction that the pointwise clamp turns
  // into a replicated scalar: one all-reduce of a scalar.
  {
    DTensorNsOp norm;
    norm.op = "normalise";
    norm.out = x.placement;
    norm.inputs = {x.placement};
    if (x.placement != DP::Replicate) {
      DTensorRedistribute r;
      r.operand = "norm";
      r.from = DP::Partial;
      r.to = DP::Replicate;
      r.coll = CollKind::AllReduce;
      r.collBytes = elem;
      r.localBytes = elem;
      norm.redistributes.push_back(r);
    }
    norm.outBytes = localBytes(x.placement, x.rows, x.cols, w, elem);
    out.push_back(norm);
  }
  const int64_t s = x.rows; // s <= l
  for (int64_t it = 0; it < nsSteps; ++it) {
    // gram_matrix = ortho_grad @ ortho_grad.T
    DOperand xt{"X^T", transposed(x.placement), x.cols, x.rows};
    DTensorNsOp a = matmul("X @ X^T", it, std::nullopt, x, xt, topo, w, elem);
    DOperand A{"A", a.out, s, s};
    if (form == DTensorForm::Mm) {
      a.args = {"X", "X^T"};
      a.result = "A";
      out.push_back(std::move(a));
      // gram_update = b * gram_matrix + c * gram_matrix @ gram_matrix:
      // `*` and `@` bind equally, left to right, so Python runs b * A,
      // then (c * A) @ A, then the sum.
      DTensorNsOp bA = pointwise("b * A", it, {A}, "bA", w, elem);
      DOperand BA{"bA", bA.out, s, s};
      out.push_back(std::move(bA));
      DTensorNsOp cA = pointwise("c * A", it, {A}, "cA", w, elem);
      DOperand CA{"cA", cA.out, s, s};
      out.push_back(std::move(cA));
      DTensorNsOp cAA = matmul("cA @ A", it, std::nullopt, CA, A, topo, w, elem);
      cAA.args = {"cA", "A"};
      cAA.result = "cAA";
      DOperand CAA{"cAA", cAA.out, s, s};
      out.push_back(std::move(cAA));
      DTensorNsOp b = pointwise("bA + cAA", it, {BA, CAA}, "B", w, elem);
      DOperand B{"B", b.out, s, s};
      out.push_back(std::move(b));
      // ortho_grad = a * ortho_grad + gram_update @ ortho_grad
      DTensorNsOp aX = pointwise("a * X", it, {x}, "aX", w, elem);
      DOperand AX{"aX", aX.out, x.rows, x.cols};
      out.push_back(std::move(aX));
      DTensorNsOp bx = matmul("B @ X", it, std::nullopt, B, x, topo, w, elem);
      bx.args = {"B", "X"};
      bx.result = "BX";
      DOperand BX{"BX", bx.out, x.rows, x.cols};
      out.push_back(std::move(bx));
      DTensorNsOp nx = pointwise("aX + BX", it, {AX, BX}, "X", w, elem);
      x.placement = nx.out;
      out.push_back(std::move(nx));
      continue;
    }
    out.push_back(std::move(a));
    // gram_update = torch.addmm(gram_matrix, gram_matrix, gram_matrix, b, c)
    DTensorNsOp b = matmul("addmm(A, A, A)", it, A, A, A, topo, w, elem);
    DOperand B{"B", b.out, s, s};
    out.push_back(std::move(b));
    // ortho_grad = torch.addmm(ortho_grad, gram_update, ortho_grad, beta=a)
    DTensorNsOp nx = matmul("addmm(X, B, X)", it, x, B, x, topo, w, elem);
    x.placement = nx.out;
    out.push_back(std::move(nx));
  }
  // Transpose back, then param.add_(update): an in-place op keeps the
  // parameter's Shard(0), so the update is redistributed to it.
  DOperand update{"update", transpose ? transposed(x.placement) : x.placement,
                  rows, cols};
  DTensorNsOp up;
  up.op = "update";
  up.out = DP::Shard0;
  up.inputs = {DP::Shard0, DP::Shard0};
  if (auto r = redistribute(update, DP::Shard0, w, elem))
    up.redistributes.push_back(*r);
  up.outBytes = localBytes(DP::Shard0, rows, cols, w, elem);
  out.push_back(std::move(up));
  return out;
}

} // namespace mfsdp::step

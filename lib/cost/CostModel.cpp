//===- CostModel.cpp - Op durations and the physical floors ---------------===//
//
// What each op of a step costs on a hardware profile (compute at the
// profile's rates, collectives by the ring model), and the floors a
// step's phases cannot beat at datasheet peak. The simulation that places
// these durations in time is Simulator.cpp. Every time produced here is a
// prediction.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/cost/Simulator.h"

#include "mfsdp/cost/KernelModel.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

namespace mfsdp::cost {

using step::CollKind;
using step::Op;
using step::OpKind;
using step::Phase;
using step::Step;

//===----------------------------------------------------------------------===//
// Cost model
//===----------------------------------------------------------------------===//

static double optimizerFlopsRate(const Op &op, const SimProfile &p) {
  return op.torchNs ? p.gemmFlops * p.nsTorchEfficiency : planner::nsFlopsRate(p);
}

static double flopsPeak(const Op &op, const SimProfile &p) {
  if (op.kind != OpKind::Optimizer)
    return p.gemmFlops;
  return op.torchNs ? p.gemmFlops : planner::nsPeakFlops(p);
}

bool isInterNode(const Op &op, const SimProfile &p) {
  return op.interNode || op.ranks > static_cast<int64_t>(p.gpusPerNode);
}

double computeSeconds(const Op &op, const SimProfile &p) {
  if (op.kind != OpKind::Compute && op.kind != OpKind::Optimizer)
    return 0;
  // A trainer op that lists its unit's kernels: each priced on its own
  // (mfsdp/cost/KernelModel.h); recomputation is the forward again.
  if (op.kind == OpKind::Compute && !op.kernels.empty() && op.kernelTokens > 0 &&
      (op.compute == "forward" || op.compute == "backward" || op.compute == "recompute"))
    return kernelsSeconds(op.kernels, op.kernelTokens, op.compute == "backward", p);
  // flops / (gemmFlops * gemmEfficiency * f / (f + small))
  //   = (f + small) / (gemmFlops * gemmEfficiency), and 0 without FLOPs.
  bool trainer = op.kind == OpKind::Compute && op.compute != "copy" &&
                 !op.compute.empty() && p.trainerEfficiency > 0;
  double eff = trainer ? p.trainerEfficiency : p.gemmEfficiency;
  // An optimizer's FLOPs are Newton-Schulz's, at its precision's rate.
  double rate = op.kind == OpKind::Optimizer ? optimizerFlopsRate(op, p)
                                             : p.gemmFlops * eff;
  double flopTime = op.flops > 0 ? (op.flops + p.smallGemmFlops) / rate : 0.0;
  double byteTime =
      op.bytes > 0 ? op.bytes / (p.hbmBytes * p.hbmEfficiency) : 0.0;
  // An optimizer op stands for separate kernels (the momentum update, the
  // Newton-Schulz GEMMs, the elementwise update): their times add, and each
  // of the runtime's Newton-Schulz kernels has its time floor
  // (nsKernelSeconds: the latency that dominates small matrices).
  // torch.optim.Muon's (torchNs) are launched one by one from eager
  // PyTorch while the GPU works through the earlier ones: the slower of
  // the host's launches and the GPU's work sets the time. A trainer op is
  // one roofline-bound kernel sequence.
  if (op.kind == OpKind::Optimizer) {
    const double gpu = p.launchSeconds + flopTime + byteTime;
    if (op.torchNs)
      return std::max(gpu, op.nsKernels * p.nsTorchKernelSeconds);
    return gpu + op.nsKernels * planner::nsKernelSeconds(p);
  }
  return p.launchSeconds + std::max(flopTime, byteTime);
}

double collectiveSeconds(const Op &op, const SimProfile &p) {
  if (op.kind != OpKind::Collective || op.ranks <= 1)
    return 0;
  bool inter = isInterNode(op, p);
  double bw = inter ? p.interBusBytes : p.intraBusBytes;
  double hop = inter ? p.interHopSeconds : p.intraHopSeconds;
  double w = static_cast<double>(op.ranks);
  double steps = w - 1; // ring steps of one pass
  double lat = p.collBaseSeconds + steps * hop;
  switch (op.coll) {
  case CollKind::AllGather:
  case CollKind::ReduceScatter:
    return lat + steps / w * op.collBytes / bw;
  case CollKind::AllReduce:
    // Reduce-scatter then all-gather: two passes around the ring.
    return p.collBaseSeconds + 2 * steps * hop +
           2 * steps / w * op.collBytes / bw;
  case CollKind::AllGatherV:
  case CollKind::ReduceScatterV: {
    // What the runtime runs on NCCL: one ring broadcast per rank's chunk
    // (all-gather-v) or one ring reduce to each rank (reduce-scatter-v),
    // grouped in one launch. Chunk r's ring skips one link (the one into
    // its root, or out of its destination), so the busiest link carries
    // every chunk but the smallest. Even chunks: (W-1)/W of the buffer,
    // the all-gather's figure.
    if (op.chunks.empty()) // even chunks when none are given
      return lat + steps / w * op.collBytes / bw;
    double total = 0;
    for (double c : op.chunks)
      total += c;
    double smallest = *std::min_element(op.chunks.begin(), op.chunks.end());
    return lat + (total - smallest) / bw;
  }
  }
  return 0;
}

double opSeconds(const Op &op, const SimProfile &p) {
  switch (op.kind) {
  case OpKind::Compute:
  case OpKind::Optimizer:
    return computeSeconds(op, p);
  case OpKind::Collective:
    return collectiveSeconds(op, p);
  case OpKind::Wait:
  case OpKind::Alloc:
  case OpKind::Free:
    return 0;
  }
  return 0;
}

const PhaseStats &SimResult::phase(Phase p) const {
  switch (p) {
  case Phase::Forward:
    return forward;
  case Phase::Backward:
    return backward;
  case Phase::Optimizer:
    return optimizer;
  }
  return forward;
}

//===----------------------------------------------------------------------===//
// Floors
//===----------------------------------------------------------------------===//

namespace {

/// max over ranks of sum over matching ops of cost(op).
template <typename Pred, typename Cost>
double maxOverRanks(const Step &s, Pred matches, Cost cost) {
  if (s.world < 1)
    return 0;
  double everyone = 0;
  std::vector<double> own(s.world, 0.0);
  for (const Op &op : s.ops) {
    if (!matches(op))
      continue;
    if (op.onlyRank < 0)
      everyone += cost(op);
    else if (op.onlyRank < s.world)
      own[op.onlyRank] += cost(op);
  }
  return everyone + *std::max_element(own.begin(), own.end());
}

} // namespace

double optimizerFloorSeconds(const Step &s, const SimProfile &p) {
  return maxOverRanks(
      s, [](const Op &op) { return op.kind == OpKind::Optimizer; },
      [&](const Op &op) {
        return op.flops / flopsPeak(op, p) + op.bytes / p.hbmBytes;
      });
}

double activationPeakBytes(const Step &s) {
  std::vector<bool> activation(s.buffers.size(), false);
  for (const Op &op : s.ops)
    if (op.kind == OpKind::Compute &&
        (op.compute == "forward" || op.compute == "recompute"))
      for (int64_t b : op.writes)
        if (b >= 0 && b < static_cast<int64_t>(activation.size()))
          activation[b] = true;
  // Live bytes on every rank, and on each rank of its own beyond them.
  double common = 0, peak = 0;
  std::map<int64_t, double> own;
  double ownMost = 0;
  for (const Op &op : s.ops) {
    if ((op.kind != OpKind::Alloc && op.kind != OpKind::Free) || op.writes.empty())
      continue;
    const int64_t b = op.writes.front();
    if (b < 0 || b >= static_cast<int64_t>(activation.size()) || !activation[b])
      continue;
    const step::Buffer &buf = s.buffers[b];
    const double delta = op.kind == OpKind::Alloc ? buf.bytes : -buf.bytes;
    if (buf.onlyRank >= 0) {
      double &mine = own[buf.onlyRank];
      mine += delta;
      ownMost = 0;
      for (const auto &[rank, bytes] : own)
        ownMost = std::max(ownMost, bytes);
    } else {
      common += delta;
    }
    peak = std::max(peak, common + ownMost);
  }
  return peak;
}

double optimizerSustainedFloorSeconds(const Step &s, const SimProfile &p) {
  return maxOverRanks(
      s, [](const Op &op) { return op.kind == OpKind::Optimizer; },
      [&](const Op &op) {
        return op.flops / optimizerFlopsRate(op, p) +
               op.bytes / (p.hbmBytes * p.hbmEfficiency);
      });
}

double computeFloorSeconds(const Step &s, const SimProfile &p, Phase phase) {
  return maxOverRanks(
      s,
      [&](const Op &op) {
        return op.phase == phase &&
               (op.kind == OpKind::Compute || op.kind == OpKind::Optimizer);
      },
      [&](const Op &op) { return op.flops / flopsPeak(op, p); });
}

PhaseGap phaseGap(const Step &s, const SimResult &r, const SimProfile &p,
                  Phase phase) {
  PhaseGap g;
  const PhaseStats &st = r.phase(phase);
  if (!r.ok || st.rank < 0 || s.world < 1)
    return g;
  std::vector<double> floorOf(s.world, 0.0);
  for (const Op &op : s.ops) {
    if (op.phase != phase ||
        (op.kind != OpKind::Compute && op.kind != OpKind::Optimizer))
      continue;
    const double roofline =
        std::max(op.flops / flopsPeak(op, p), op.bytes / p.hbmBytes);
    if (op.onlyRank < 0) {
      for (double &f : floorOf)
        f += roofline;
    } else if (op.onlyRank < s.world) {
      floorOf[op.onlyRank] += roofline;
    }
  }
  double mean = 0;
  for (double f : floorOf)
    mean += f;
  mean /= static_cast<double>(s.world);
  g.rank = st.rank;
  g.span = st.span();
  g.floor = mean;
  g.imbalance = floorOf[st.rank] - mean;
  g.exposedComm = st.exposedComm;
  g.belowPeak = st.computeBusy - floorOf[st.rank];
  for (const Op &op : s.ops)
    if (op.phase == phase && op.kind == OpKind::Optimizer && !op.torchNs &&
        (op.onlyRank < 0 || op.onlyRank == st.rank))
      g.nsKernels += op.nsKernels * planner::nsKernelSeconds(p);
  return g;
}

} // namespace mfsdp::cost

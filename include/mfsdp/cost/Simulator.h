//===- Simulator.h - Cost model and step simulator --------------*- C++ -*-===//
//
// Predicts the time and memory of one training step (a step::Step program)
// on a hardware profile: a cost model turns each op into a duration, and a
// discrete-event simulation runs all ranks at once under the execution model
// documented in mfsdp/step/Step.h (one compute stream per rank, one stream
// per NCCL communicator shared by all ranks, issue events, synchronous and
// asynchronous collectives, Waits).
//
// Every time this produces is a PREDICTION from the model's assumptions
// (datasheet peaks times assumed efficiencies, an assumed NCCL latency and
// bus-bandwidth model). Nothing here is measured; nothing here may be
// reported as measured.
//
// No exceptions: invalid programs come back as SimResult::ok = false with a
// message; suspicious but simulable ones as SimResult::issues.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_COST_SIMULATOR_H
#define MFSDP_COST_SIMULATOR_H

#include "mfsdp/planner/Hardware.h"
#include "mfsdp/step/Step.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mfsdp::cost {

/// Everything the predictions depend on: a profile of the one hardware
/// registry (mfsdp/planner/Hardware.h: hardwareProfiles(),
/// findHardwareProfile(), unknownHardwareMessage()). All rates are
/// assumptions of the model.
using SimProfile = planner::HardwareProfile;

/// Empty if every rate of `p` is positive and finite and every efficiency is
/// in (0, 1]; otherwise what is wrong.
std::string validateProfile(const SimProfile &p);

/// True if the collective crosses nodes: op.interNode, or a group larger
/// than one node (op.ranks > p.gpusPerNode).
bool isInterNode(const step::Op &op, const SimProfile &p);

/// Compute ops:
///   launchSeconds + max(flops / (gemmFlops * eff(flops)),
///                       bytes / (hbmBytes * hbmEfficiency))
/// with eff(f) = gemmEfficiency * f / (f + smallGemmFlops): small kernels are
/// latency-bound. The FLOP term equals (flops + smallGemmFlops) /
/// (gemmFlops * gemmEfficiency), and is 0 for flops = 0. (A unit's compute
/// that lists its kernels is priced kernel by kernel: KernelModel.h.)
/// Optimizer ops add the two terms (separate kernels), their FLOPs being
/// Newton-Schulz's at its rate: (flops + smallGemmFlops) /
/// planner::nsFlopsRate(p), plus op.nsKernels * planner::nsKernelSeconds(p);
/// or, for torch.optim.Muon's (op.torchNs), the larger of the terms with
/// FLOPs at gemmFlops * nsTorchEfficiency and op.nsKernels *
/// nsTorchKernelSeconds (eager PyTorch launching them from the host).
/// 0 for every other kind.
double computeSeconds(const step::Op &op, const SimProfile &p);

/// Collectives, ring algorithms over W = op.ranks (0 s if W <= 1):
///   bw = isInterNode ? interBusBytes : intraBusBytes,
///   hop = isInterNode ? interHopSeconds : intraHopSeconds,
///   lat = collBaseSeconds + (W-1) * hop;
///   AllGather, ReduceScatter: lat + (W-1)/W * collBytes / bw;
///   AllReduce: collBaseSeconds + 2(W-1) * hop + 2(W-1)/W * collBytes / bw;
///   AllGatherV, ReduceScatterV: lat + (sum(chunks) - min(chunks)) / bw.
///     The runtime runs them on NCCL as grouped ring broadcasts from each
///     chunk's rank (reduces to it); each chunk's ring leaves one link
///     unused, so the busiest link carries all but the smallest chunk.
///     With no chunks, even chunks: the all-gather's figure.
/// 0 for every other kind.
double collectiveSeconds(const step::Op &op, const SimProfile &p);

/// computeSeconds or collectiveSeconds by kind; Wait, Alloc, Free: 0.
double opSeconds(const step::Op &op, const SimProfile &p);

struct OpTiming {
  double start = -1, end = -1;
};

struct PhaseStats {
  double begin = 0, end = 0; // span on the phase's slowest rank
  double computeBusy = 0;    // its Compute/Optimizer durations in the span
  double exposedComm = 0;    // span minus all compute in it: time the
                             // compute stream sat waiting
  int64_t rank = -1;         // the slowest rank (-1: the phase has no ops)
  double span() const { return end - begin; }
};

struct SimResult {
  bool ok = false;
  std::string error;               // why the program cannot be simulated
  std::vector<std::string> issues; // simulated anyway (double free, ...)

  double stepSeconds = 0; // max over ranks of rankStepSeconds
  PhaseStats forward, backward, optimizer;
  double computeBusy = 0, exposedComm = 0; // whole step, slowest rank
  int64_t slowestRank = -1;
  std::vector<double> rankStepSeconds; // per rank: last op's end
  std::vector<double> rankComputeBusy; // per rank
  double peakBytes = 0;                // max over ranks
  /// peakBytes as PyTorch's caching allocator would hold it reserved
  /// (times the profile's allocatorReserve).
  double peakReservedBytes = 0;
  std::vector<double> rankPeakBytes;   // per rank
  /// [rank][op]. Compute, Optimizer, Alloc, Free: the op on that rank's
  /// compute stream. Wait: from reaching it to being released. Collective:
  /// its interval on its communicator stream (the same on every rank).
  /// Ops a rank skips (onlyRank): start = end = -1.
  std::vector<std::vector<OpTiming>> timings;
  double commBusy = 0; // total busy time of all communicator streams

  /// The group whose compute runs first in forward (-1: none): the one the
  /// next step gathers first.
  int64_t firstGroup = -1;
  /// When every rank has finished the first group's optimizer ops, so the
  /// next step's first gather could be issued (stepSeconds if the step has
  /// no such op).
  double firstGroupReady = 0;
  /// How long the slowest rank's compute stream waits at the start of the
  /// step before its first compute op: the first gather, exposed.
  double firstComputeWait = 0;
  /// Steady-state step estimate when the next step's first gather is issued
  /// at firstGroupReady and overlaps the rest of this step's optimizer:
  /// stepSeconds - min(firstComputeWait, stepSeconds - firstGroupReady).
  double steadyStepSeconds = 0;

  const PhaseStats &phase(step::Phase p) const;
};

/// Empty if `s` can be simulated, else the first problem found: world >= 1;
/// onlyRank in [-1, world), never on a collective; finite, non-negative
/// flops/bytes/collBytes/chunks; collectives with ranks >= 1, comm >= 0 and
/// chunks empty or one per rank; Wait naming an earlier Collective; Alloc
/// and Free naming exactly one buffer; reads/writes in range; every kernel
/// valid (validateKernel).
std::string validateStep(const step::Step &s);

struct SimOptions {
  /// Keep SimResult::timings ([rank][op]: world x ops entries). Without them
  /// every other field is the same; searches that simulate many candidates
  /// of a large step only need those.
  bool timings = true;
};

/// Simulates `s` on `p` (see Step.h for the execution model). Never throws;
/// ok = false with `error` if the step or the profile is invalid. Ranks no
/// op or persistent buffer names (onlyRank) behave alike and are simulated
/// once, so with C classes (the named ranks, plus one for the rest) it
/// costs O(ops + C x ops run by every rank + C x buffers + world), and
/// world x ops more for the timings when kept.
SimResult simulate(const step::Step &s, const SimProfile &p);
SimResult simulate(const step::Step &s, const SimProfile &p,
                   const SimOptions &options);

/// simulate() for a series of steps that share their first `head` ops and
/// their buffers (the candidates of one schedule that differ only after
/// `head`, as the optimizer order's): the shared ops are simulated once,
/// with the first step, and each later step goes on from there. The
/// results are simulate()'s. Each step is still validated whole; a step
/// whose named ranks, buffers or first forward compute differ from the
/// first's is simulated whole. The caller promises that the first `head`
/// ops are the same.
class PrefixSimulator {
public:
  PrefixSimulator(const SimProfile &p, const SimOptions &options, size_t head);
  ~PrefixSimulator();
  SimResult simulate(const step::Step &s);

private:
  struct Saved;
  SimProfile p;
  SimOptions options;
  size_t head;
  std::unique_ptr<Saved> saved;
};

/// Trace Event Format JSON (Perfetto, chrome://tracing): one process per rank
/// (ranks 0 .. maxRanks-1), thread 0 the compute stream, thread 1+comm each
/// communicator's stream; one "X" event per Compute, Optimizer, Wait and
/// Collective op a rank runs (ts/dur in microseconds), and a "C" counter
/// "live bytes" per rank (one sample at 0 and one per Alloc/Free).
std::string chromeTrace(const step::Step &s, const SimResult &r,
                        int64_t maxRanks = 8);

/// Human-readable breakdown: forward/backward/optimizer/total (ms), exposed
/// communication per phase and its share of compute, each phase against
/// its floor at datasheet peak and where the gap goes (phaseGap), peak
/// memory. Every time is labelled "predicted".
std::string renderText(const step::Step &s, const SimResult &r,
                       const SimProfile &p);

/// The physical floor of the optimizer phase (PRODUCT.md): max over ranks of
/// (sum of Optimizer ops' FLOPs / their peak + their bytes / hbmBytes), at
/// PEAK rates (no efficiency factors, no launch overhead); Newton-Schulz's
/// peak is its precision's (planner::nsPeakFlops; gemmFlops for torchNs).
double optimizerFloorSeconds(const step::Step &s, const SimProfile &p);
/// The same floor at the profile's sustained rates (Newton-Schulz at
/// planner::nsFlopsRate or torch's, peak x hbmEfficiency): what perfectly
/// balanced, perfectly overlapped
/// optimizer kernels would take on this profile.
double optimizerSustainedFloorSeconds(const step::Step &s, const SimProfile &p);

/// The most bytes of the trainer's activations live at once in `s`: the
/// buffers its forward and recomputing compute ops write, each from its
/// sched.alloc to its dealloc in step order; buffers of one rank counted
/// on the rank that holds the most. They are the trainer's (its framework
/// allocates them), not the step library's: a plan that runs through the
/// library needs them beside its arena.
double activationPeakBytes(const step::Step &s);

/// Floor of one phase's compute: max over ranks of the FLOPs of that phase's
/// Compute ops / gemmFlops and Optimizer ops / their peak (as
/// optimizerFloorSeconds; no memory term, no comm).
double computeFloorSeconds(const step::Step &s, const SimProfile &p,
                           step::Phase phase);

/// A phase on its slowest rank against the physical floor, and where the
/// gap goes. Exactly span = floor + imbalance + belowPeak + exposedComm:
///  - floor: the phase's ops at datasheet peak (each op the larger of
///    FLOPs / its peak and bytes / hbmBytes: the roofline), averaged over
///    the ranks (what perfectly balanced work would take);
///  - imbalance: the slowest rank's floor above that average;
///  - belowPeak: the slowest rank's compute time above its floor (kernels
///    below peak: efficiency, small-kernel fall-off, launches);
///  - exposedComm: the time its compute stream waited on communication.
/// All zero for a phase without ops.
struct PhaseGap {
  double span = 0, floor = 0, imbalance = 0, belowPeak = 0, exposedComm = 0;
  /// Of belowPeak: the time of the runtime's Newton-Schulz kernels (their
  /// count x the profile's time per kernel) on that rank.
  double nsKernels = 0;
  int64_t rank = -1;
};
PhaseGap phaseGap(const step::Step &s, const SimResult &r, const SimProfile &p,
                  step::Phase phase);

} // namespace mfsdp::cost

#endif // MFSDP_COST_SIMULATOR_H

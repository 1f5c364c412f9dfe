//===- Simulator.cpp - Cost model and step simulator ----------------------===//
//
// The cost model (op durations) and the discrete-event simulation of one
// step over all ranks at once, following the execution model of
// mfsdp/step/Step.h. Every time produced here is a prediction.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/cost/Simulator.h"

#include "mfsdp/cost/KernelModel.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <utility>

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
    double largest = op.collBytes / w; // even chunks when none are given
    if (!op.chunks.empty())
      largest = *std::max_element(op.chunks.begin(), op.chunks.end());
    return lat + steps * largest / bw;
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
// Validation
//===----------------------------------------------------------------------===//

namespace {

bool finiteNonNegative(double v) { return std::isfinite(v) && v >= 0; }

std::string opLabel(const Step &s, size_t i) {
  return fmt::format("op {} ({} '{}')", i, step::opKindName(s.ops[i].kind),
                     s.ops[i].name);
}

bool runsOn(const Op &op, int64_t rank) {
  return op.onlyRank < 0 || op.onlyRank == rank;
}

} // namespace

namespace {
std::string validateFrom(const Step &s, size_t firstOp);
} // namespace

std::string validateStep(const Step &s) { return validateFrom(s, 0); }

namespace {
/// validateStep with the ops before `firstOp` taken as valid (a step that
/// shares them with one validated before).
std::string validateFrom(const Step &s, size_t firstOp) {
  if (s.world < 1)
    return fmt::format("step '{}': world must be at least 1, got {}", s.name,
                       s.world);
  for (size_t b = 0; b < s.buffers.size(); ++b)
    if (!finiteNonNegative(s.buffers[b].bytes))
      return fmt::format("buffer {} '{}': bytes must be non-negative and "
                         "finite, got {}",
                         b, s.buffers[b].name, s.buffers[b].bytes);
  const int64_t numBuffers = static_cast<int64_t>(s.buffers.size());
  for (size_t i = firstOp; i < s.ops.size(); ++i) {
    const Op &op = s.ops[i];
    if (op.onlyRank < -1 || op.onlyRank >= s.world)
      return fmt::format("{}: onlyRank {} is outside [-1, {})", opLabel(s, i),
                         op.onlyRank, s.world);
    if (!finiteNonNegative(op.flops) || !finiteNonNegative(op.bytes) ||
        !finiteNonNegative(op.collBytes))
      return fmt::format("{}: flops, bytes and collBytes must be non-negative "
                         "and finite",
                         opLabel(s, i));
    for (const auto *list : {&op.reads, &op.writes})
      for (int64_t b : *list)
        if (b < 0 || b >= numBuffers)
          return fmt::format("{}: buffer index {} is out of range (the step "
                             "has {} buffers)",
                             opLabel(s, i), b, numBuffers);
    // A kernel the cost model cannot price would count as no time.
    for (size_t k = 0; k < op.kernels.size(); ++k)
      if (const char *bad = kernelProblem(op.kernels[k]))
        return fmt::format("{}: kernel {}: {}", opLabel(s, i), k, bad);
    switch (op.kind) {
    case OpKind::Compute:
    case OpKind::Optimizer:
      break;
    case OpKind::Collective:
      if (op.onlyRank >= 0)
        return fmt::format("{}: a collective cannot run on one rank only "
                           "(onlyRank {})",
                           opLabel(s, i), op.onlyRank);
      if (op.ranks < 1)
        return fmt::format("{}: ranks must be at least 1, got {}",
                           opLabel(s, i), op.ranks);
      if (op.comm < 0)
        return fmt::format("{}: comm must be non-negative, got {}",
                           opLabel(s, i), op.comm);
      if (!op.chunks.empty() &&
          static_cast<int64_t>(op.chunks.size()) != op.ranks)
        return fmt::format("{}: {} chunks for {} ranks", opLabel(s, i),
                           op.chunks.size(), op.ranks);
      for (double c : op.chunks)
        if (!finiteNonNegative(c))
          return fmt::format("{}: chunk sizes must be non-negative and "
                             "finite, got {}",
                             opLabel(s, i), c);
      break;
    case OpKind::Wait: {
      if (op.waitFor < 0 || op.waitFor >= static_cast<int64_t>(i))
        return fmt::format("{}: waitFor {} does not name an earlier op",
                           opLabel(s, i), op.waitFor);
      const Op &target = s.ops[op.waitFor];
      if (target.kind != OpKind::Collective)
        return fmt::format("{}: waitFor {} names '{}', a {} op, not a "
                           "collective",
                           opLabel(s, i), op.waitFor, target.name,
                           step::opKindName(target.kind));
      break;
    }
    case OpKind::Alloc:
    case OpKind::Free:
      if (op.writes.size() != 1)
        return fmt::format("{}: must name exactly one buffer in writes, "
                           "names {}",
                           opLabel(s, i), op.writes.size());
      break;
    }
  }
  return "";
}
} // namespace

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

namespace {

/// Live bytes of one rank, walked in program order (Alloc and Free run on
/// the compute stream, so program order is time order).
class RankMemory {
public:
  enum class Event {
    Ok,
    AllocPersistent, // Alloc of a persistent buffer: ignored
    AllocLive,       // Alloc of a live buffer: ignored
    FreePersistent,  // Free of a persistent buffer: ignored
    FreeTwice,       // Free of a freed buffer: ignored
    FreeUnallocated, // Free of a buffer never allocated: ignored
  };

  RankMemory(const Step &s, int64_t rank) : state(s.buffers.size(), Never) {
    for (const auto &b : s.buffers)
      if (b.persistent && (b.onlyRank < 0 || b.onlyRank == rank))
        live += b.bytes;
    peak = live;
  }
  /// The same, given the indices of the persistent buffers on the rank, in
  /// order.
  RankMemory(const Step &s, const std::vector<size_t> &persistent)
      : state(s.buffers.size(), Never) {
    for (size_t b : persistent)
      live += s.buffers[b].bytes;
    peak = live;
  }

  Event apply(const Step &s, const Op &op) {
    int64_t b = op.writes.front();
    const step::Buffer &buf = s.buffers[b];
    if (op.kind == OpKind::Alloc) {
      if (buf.persistent)
        return Event::AllocPersistent;
      if (state[b] == Live)
        return Event::AllocLive;
      state[b] = Live;
      ++liveBuffers;
      live += buf.bytes;
      peak = std::max(peak, live);
      return Event::Ok;
    }
    if (buf.persistent)
      return Event::FreePersistent;
    if (state[b] == Freed)
      return Event::FreeTwice;
    if (state[b] == Never)
      return Event::FreeUnallocated;
    state[b] = Freed;
    --liveBuffers;
    live -= buf.bytes;
    return Event::Ok;
  }

  bool isLive(size_t b) const { return state[b] == Live; }
  double live = 0, peak = 0;
  /// Buffers allocated here and live now (not persistent ones).
  int64_t liveBuffers = 0;

private:
  enum State : char { Never, Live, Freed };
  std::vector<char> state;
};

std::string memoryIssue(const Step &s, size_t i, RankMemory::Event e,
                        int64_t rank) {
  const std::string &buf = s.buffers[s.ops[i].writes.front()].name;
  const char *what = "";
  switch (e) {
  case RankMemory::Event::Ok:
  case RankMemory::Event::AllocPersistent:
    // Declaring a persistent buffer with an Alloc is how steps are written.
    return "";
  case RankMemory::Event::AllocLive:
    what = "allocates buffer '{}' which is already live (ignored)";
    break;
  case RankMemory::Event::FreePersistent:
    what = "frees persistent buffer '{}' (always live; ignored)";
    break;
  case RankMemory::Event::FreeTwice:
    what = "frees buffer '{}' a second time (ignored)";
    break;
  case RankMemory::Event::FreeUnallocated:
    what = "frees buffer '{}' which was never allocated (ignored)";
    break;
  }
  return fmt::format("{}: {} on rank {}", opLabel(s, i),
                     fmt::format(fmt::runtime(what), buf), rank);
}

//===----------------------------------------------------------------------===//
// Simulation
//===----------------------------------------------------------------------===//

int phaseIndex(Phase p) { return static_cast<int>(p); }

/// One phase on one rank: the compute-stream span of its ops, its own
/// compute, and all compute (any phase) inside the span.
struct PhaseAcc {
  bool seen = false;
  double begin = 0, end = 0, busy = 0;
  double cumAtBegin = 0, cumAtEnd = 0;
};

} // namespace

namespace {

/// One simulation of a step, op by op: the state after ops [0, i) is all
/// the rest needs, so a copy taken there simulates any step that shares
/// those ops (PrefixSimulator).
class Simulation {
public:
  Simulation(const Step &s, const SimProfile &p, const SimOptions &options)
      : s(&s), prof(&p), options(options) {
    r.ok = true;
    const int64_t world = s.world;
    const size_t n = s.ops.size();
    // Ranks that no op and no persistent buffer names (onlyRank) run the
    // same ops from the same clock and memory: the lowest of them stands
    // for all (a data-parallel step of 1024 ranks with no owner is
    // simulated once). Each named rank is its own class. `reps` holds each
    // class's lowest rank, ascending, so scanning the classes in order
    // meets the ranks an event happens on lowest first, as a scan of every
    // rank would.
    named = namedRanks(s);
    classOf.assign(world, -1);
    {
      int64_t shared = -1; // the unnamed ranks' class
      for (int64_t rank = 0; rank < world; ++rank) {
        if (!named[rank] && shared >= 0) {
          classOf[rank] = shared;
          continue;
        }
        classOf[rank] = static_cast<int64_t>(reps.size());
        reps.push_back(rank);
        if (!named[rank])
          shared = classOf[rank];
      }
    }
    R = static_cast<int64_t>(reps.size());
    clock.assign(R, 0.0);
    busy.assign(R, 0.0);
    last.assign(R, 0.0);
    collEnd.assign(n, 0.0);
    waited.assign(n, 0);
    if (options.timings)
      timings.assign(R, std::vector<OpTiming>(n));
    // The first forward compute op of a group and that group: the summary
    // needs when the forward compute ops up to it start on each rank and
    // when the group's optimizer work ends.
    firstCompute = firstForwardCompute(s);
    if (firstCompute < n)
      r.firstGroup = s.ops[firstCompute].group;
    {
      // Each class's persistent buffers: those of every rank and its
      // rank's own, in buffer order.
      std::vector<size_t> common;
      std::map<int64_t, std::vector<size_t>> own;
      for (size_t b = 0; b < s.buffers.size(); ++b)
        if (s.buffers[b].persistent)
          (s.buffers[b].onlyRank < 0 ? common : own[s.buffers[b].onlyRank]).push_back(b);
      std::vector<size_t> mine;
      for (int64_t rank : reps) {
        auto it = own.find(rank);
        if (it == own.end()) {
          memory.emplace_back(s, common);
          continue;
        }
        mine.clear();
        std::merge(common.begin(), common.end(), it->second.begin(), it->second.end(),
                   std::back_inserter(mine));
        memory.emplace_back(s, mine);
      }
    }
    for (auto &v : phases)
      v.assign(R, PhaseAcc());
  }

  /// The ranks an op or a persistent buffer names.
  static std::vector<char> namedRanks(const Step &s) {
    std::vector<char> named(s.world, 0);
    for (const Op &op : s.ops)
      if (op.onlyRank >= 0)
        named[op.onlyRank] = 1;
    for (const auto &b : s.buffers)
      if (b.persistent && b.onlyRank >= 0 && b.onlyRank < s.world)
        named[b.onlyRank] = 1;
    return named;
  }

  static size_t firstForwardCompute(const Step &s) {
    for (size_t i = 0; i < s.ops.size(); ++i)
      if (s.ops[i].kind == OpKind::Compute && s.ops[i].phase == Phase::Forward &&
          s.ops[i].group >= 0)
        return i;
    return s.ops.size();
  }

  /// Whether this state, taken after the first `head` ops of its step,
  /// can go on with `other`, whose first `head` ops are the same (the
  /// caller's promise): the same ranks named, the same buffers, the same
  /// first forward compute.
  bool canResumeWith(const Step &other, size_t head) const {
    return other.world == s->world && other.buffers.size() == s->buffers.size() &&
           other.ops.size() >= head && firstCompute < head &&
           firstForwardCompute(other) == firstCompute && namedRanks(other) == named;
  }

  /// Goes on with `other` (see canResumeWith) from op `head` on.
  void rebind(const Step &other) {
    s = &other;
    const size_t n = other.ops.size();
    collEnd.resize(n, 0.0);
    waited.resize(n, 0);
    if (options.timings)
      for (auto &t : timings)
        t.resize(n);
  }

  /// Ops [from, to) of the step.
  void run(size_t from, size_t to) {
    for (size_t i = from; i < to; ++i)
      runOp(i);
  }

  SimResult finish() &&;

private:
  void record(size_t i, int64_t k, double a, double b) {
    if (options.timings)
      timings[k][i] = {a, b};
    const Op &op = s->ops[i];
    if (i <= firstCompute && op.kind == OpKind::Compute && op.phase == Phase::Forward)
      r.firstComputeWait = std::max(r.firstComputeWait, a);
    if (r.firstGroup >= 0 && op.kind == OpKind::Optimizer && op.group == r.firstGroup)
      ready = std::max(ready, b);
  }

  // Records an op's compute-stream interval [a, b] and its own compute `d`
  // on class `k`.
  void account(const Op &op, int64_t k, double a, double b, double d) {
    PhaseAcc &pa = phases[phaseIndex(op.phase)][k];
    if (!pa.seen) {
      pa.seen = true;
      pa.begin = a;
      pa.cumAtBegin = busy[k];
    }
    busy[k] += d;
    pa.busy += d;
    pa.end = b;
    pa.cumAtEnd = busy[k];
    last[k] = std::max(last[k], b);
  }

  void runOp(size_t i) {
    const Op &op = s->ops[i];
    // An op of one rank touches that rank's class alone.
    const int64_t from = op.onlyRank >= 0 ? classOf[op.onlyRank] : 0;
    const int64_t to = op.onlyRank >= 0 ? from + 1 : R;
    switch (op.kind) {
    case OpKind::Compute:
    case OpKind::Optimizer:
    case OpKind::Alloc:
    case OpKind::Free: {
      double d = opSeconds(op, *prof);
      for (int64_t k = from; k < to; ++k) {
        double a = clock[k], b = a + d;
        record(i, k, a, b);
        clock[k] = b;
        account(op, k, a, b, d);
        if (op.kind == OpKind::Alloc || op.kind == OpKind::Free) {
          RankMemory::Event e = memory[k].apply(*s, op);
          if (e != RankMemory::Event::Ok && e != RankMemory::Event::AllocPersistent &&
              memoryIssueOps.insert(i).second)
            r.issues.push_back(memoryIssue(*s, i, e, reps[k]));
        }
      }
      break;
    }
    case OpKind::Wait: {
      // An asynchronous collective that ran before is waited for now.
      if (!waited[op.waitFor] && static_cast<size_t>(op.waitFor) < i &&
          s->ops[op.waitFor].kind == OpKind::Collective && s->ops[op.waitFor].async)
        --unwaited;
      waited[op.waitFor] = 1;
      double until = collEnd[op.waitFor];
      for (int64_t k = from; k < to; ++k) {
        double a = clock[k], b = std::max(a, until);
        record(i, k, a, b);
        clock[k] = b;
        account(op, k, a, b, 0);
      }
      break;
    }
    case OpKind::Collective: {
      double d = opSeconds(op, *prof);
      double issued = *std::max_element(clock.begin(), clock.end());
      double &stream = commClock[op.comm];
      double start = std::max(stream, issued);
      double end = start + d;
      stream = end;
      collEnd[i] = end;
      if (op.async && !waited[i])
        ++unwaited;
      r.commBusy += d;
      for (int64_t k = 0; k < R; ++k) {
        record(i, k, start, end);
        double a = clock[k];
        double b = op.async ? a : std::max(a, end);
        clock[k] = b;
        account(op, k, a, b, 0);
        last[k] = std::max(last[k], end);
      }
      if (!op.chunks.empty()) {
        double sum = 0;
        for (double c : op.chunks)
          sum += c;
        if (std::fabs(sum - op.collBytes) > 1e-9 * std::max(1.0, std::fabs(op.collBytes)))
          r.issues.push_back(fmt::format(
              "{}: chunks sum to {} bytes but collBytes is {} (the time uses "
              "the largest chunk)",
              opLabel(*s, i), sum, op.collBytes));
      }
      break;
    }
    }
  }

  const Step *s;
  const SimProfile *prof; // (a pointer: a state is assigned to another)
  SimOptions options;
  SimResult r;
  std::vector<char> named;
  std::vector<int64_t> classOf, reps;
  int64_t R = 0;
  std::vector<double> clock, busy, last;
  std::map<int64_t, double> commClock;
  std::vector<double> collEnd;
  std::vector<char> waited;
  // Asynchronous collectives run and not yet waited for: finish looks for
  // them (and for buffers left live) only where there are any.
  int64_t unwaited = 0;
  std::vector<std::vector<OpTiming>> timings;
  size_t firstCompute = 0;
  double ready = -1;
  std::vector<RankMemory> memory;
  std::set<size_t> memoryIssueOps;
  std::vector<PhaseAcc> phases[3];
};

SimResult Simulation::finish() && {
  const Step &st = *s;
  const int64_t world = st.world;
  const size_t n = st.ops.size();
  for (size_t i = 0; i < n && unwaited > 0; ++i)
    if (st.ops[i].kind == OpKind::Collective && st.ops[i].async && !waited[i])
      r.issues.push_back(
          fmt::format("{}: asynchronous collective is never waited for", opLabel(st, i)));
  const bool leftLive = std::any_of(memory.begin(), memory.end(),
                                    [](const RankMemory &m) { return m.liveBuffers > 0; });
  for (size_t b = 0; b < st.buffers.size() && leftLive; ++b)
    for (int64_t k = 0; k < R && !st.buffers[b].persistent; ++k)
      if (memory[k].isLive(b)) {
        r.issues.push_back(fmt::format("buffer {} '{}' is allocated but never "
                                       "freed (live to the end of the step, "
                                       "rank {})",
                                       b, st.buffers[b].name, reps[k]));
        break;
      }

  // Per-rank totals and the slowest rank (lowest index on ties).
  r.rankStepSeconds.resize(world);
  r.rankComputeBusy.resize(world);
  r.rankPeakBytes.resize(world);
  if (options.timings)
    r.timings.resize(world);
  for (int64_t rank = 0; rank < world; ++rank) {
    const int64_t k = classOf[rank];
    r.rankStepSeconds[rank] = last[k];
    r.rankComputeBusy[rank] = busy[k];
    r.rankPeakBytes[rank] = memory[k].peak;
    if (options.timings)
      r.timings[rank] = reps[k] == rank ? std::move(timings[k]) : r.timings[reps[k]];
    r.peakBytes = std::max(r.peakBytes, memory[k].peak);
    r.peakReservedBytes = r.peakBytes * prof->allocatorReserve;
    if (r.slowestRank < 0 || last[k] > r.stepSeconds) {
      r.slowestRank = rank;
      r.stepSeconds = last[k];
    }
  }
  r.computeBusy = busy[classOf[r.slowestRank]];
  r.exposedComm = std::max(0.0, r.stepSeconds - r.computeBusy);

  // The first forward group: when its optimizer work is done everywhere,
  // and how long the step waits for its gather.
  r.firstGroupReady = r.stepSeconds;
  if (r.firstGroup >= 0 && ready >= 0)
    r.firstGroupReady = ready;
  r.steadyStepSeconds =
      r.stepSeconds - std::min(r.firstComputeWait,
                               std::max(0.0, r.stepSeconds - r.firstGroupReady));

  // Phases: the rank with the longest span of the phase (lowest on ties).
  for (Phase ph : {Phase::Forward, Phase::Backward, Phase::Optimizer}) {
    PhaseStats &out = ph == Phase::Forward    ? r.forward
                      : ph == Phase::Backward ? r.backward
                                              : r.optimizer;
    const auto &v = phases[phaseIndex(ph)];
    for (int64_t rank = 0; rank < world; ++rank) {
      const PhaseAcc &pa = v[classOf[rank]];
      if (!pa.seen)
        continue;
      if (out.rank >= 0 && pa.end - pa.begin <= out.end - out.begin)
        continue;
      out.rank = rank;
      out.begin = pa.begin;
      out.end = pa.end;
      out.computeBusy = pa.busy;
      out.exposedComm = std::max(0.0, (pa.end - pa.begin) - (pa.cumAtEnd - pa.cumAtBegin));
    }
  }
  return std::move(r);
}

} // namespace

SimResult simulate(const Step &s, const SimProfile &p) {
  return simulate(s, p, SimOptions());
}

SimResult simulate(const Step &s, const SimProfile &p, const SimOptions &options) {
  SimResult r;
  r.error = validateProfile(p);
  if (r.error.empty())
    r.error = validateStep(s);
  if (!r.error.empty())
    return r;
  Simulation sim(s, p, options);
  sim.run(0, s.ops.size());
  return std::move(sim).finish();
}

struct PrefixSimulator::Saved {
  Simulation state;
  /// The state each later step resumes from: assigned the saved one, so
  /// its tables keep their memory from one step to the next.
  std::optional<Simulation> work;
};

PrefixSimulator::PrefixSimulator(const SimProfile &p, const SimOptions &options, size_t head)
    : p(p), options(options), head(head) {}

PrefixSimulator::~PrefixSimulator() = default;

SimResult PrefixSimulator::simulate(const Step &s) {
  SimResult r;
  r.error = validateProfile(p);
  const bool resume = saved && saved->state.canResumeWith(s, head);
  // The shared ops were validated with the first step.
  if (r.error.empty())
    r.error = validateFrom(s, resume ? head : 0);
  if (!r.error.empty())
    return r;
  if (resume) {
    saved->work = saved->state; // assigned when it holds a state already
    Simulation &sim = *saved->work;
    sim.rebind(s);
    sim.run(head, s.ops.size());
    return std::move(sim).finish(); // (its tables stay for the next step)
  }
  Simulation sim(s, p, options);
  const size_t cut = std::min(head, s.ops.size());
  sim.run(0, cut);
  saved = std::make_unique<Saved>(Saved{sim, std::nullopt});
  sim.run(cut, s.ops.size());
  return std::move(sim).finish();
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

//===----------------------------------------------------------------------===//
// Chrome trace
//===----------------------------------------------------------------------===//

namespace {

std::string jsonString(std::string_view v) {
  std::string out = "\"";
  for (char c : v) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\r':
      out += "\\r";
      break;
    default:
      if (static_cast<unsigned char>(c) < 0x20)
        out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
      else
        out += c;
    }
  }
  out += '"';
  return out;
}

/// A JSON number (finite; non-finite values become 0).
std::string jsonNumber(double v) {
  if (!std::isfinite(v))
    return "0";
  return fmt::format("{}", v);
}

std::string micros(double seconds) {
  return fmt::format("{:.3f}", seconds * 1e6);
}

} // namespace

std::string chromeTrace(const Step &s, const SimResult &r, int64_t maxRanks) {
  std::string out = "{\"traceEvents\":[";
  bool first = true;
  auto emit = [&](const std::string &event) {
    out += first ? "\n" : ",\n";
    out += event;
    first = false;
  };
  auto finish = [&](std::string_view error) {
    out += "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"step\":";
    out += jsonString(s.name);
    out += ",\"note\":\"predicted by the mfsdp cost model, not measured\"";
    if (!error.empty()) {
      out += ",\"error\":";
      out += jsonString(error);
    }
    out += "}}\n";
    return out;
  };
  if (!r.ok)
    return finish(r.error.empty() ? "simulation failed" : r.error);
  if (static_cast<int64_t>(r.timings.size()) != s.world ||
      (!r.timings.empty() && r.timings.front().size() != s.ops.size()))
    return finish("the result does not belong to this step");

  int64_t shown = maxRanks <= 0 ? s.world : std::min(maxRanks, s.world);
  std::set<int64_t> comms;
  for (const Op &op : s.ops)
    if (op.kind == OpKind::Collective)
      comms.insert(op.comm);

  for (int64_t rank = 0; rank < shown; ++rank) {
    emit(fmt::format("{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},"
                     "\"tid\":0,\"args\":{{\"name\":\"rank {}\"}}}}",
                     rank, rank));
    emit(fmt::format("{{\"name\":\"process_sort_index\",\"ph\":\"M\","
                     "\"pid\":{},\"tid\":0,\"args\":{{\"sort_index\":{}}}}}",
                     rank, rank));
    emit(fmt::format("{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},"
                     "\"tid\":0,\"args\":{{\"name\":\"compute stream\"}}}}",
                     rank));
    for (int64_t c : comms)
      emit(fmt::format("{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},"
                       "\"tid\":{},\"args\":{{\"name\":\"comm {}\"}}}}",
                       rank, c + 1, c));
  }

  for (int64_t rank = 0; rank < shown; ++rank) {
    RankMemory memory(s, rank);
    emit(fmt::format("{{\"name\":\"live bytes\",\"ph\":\"C\",\"pid\":{},"
                     "\"ts\":0.000,\"args\":{{\"bytes\":{}}}}}",
                     rank, jsonNumber(memory.live)));
    for (size_t i = 0; i < s.ops.size(); ++i) {
      const Op &op = s.ops[i];
      const OpTiming &t = r.timings[rank][i];
      if (!runsOn(op, rank) || t.start < 0)
        continue;
      if (op.kind == OpKind::Alloc || op.kind == OpKind::Free) {
        if (memory.apply(s, op) == RankMemory::Event::Ok)
          emit(fmt::format("{{\"name\":\"live bytes\",\"ph\":\"C\",\"pid\":{},"
                           "\"ts\":{},\"args\":{{\"bytes\":{}}}}}",
                           rank, micros(t.end), jsonNumber(memory.live)));
        continue;
      }
      int64_t tid = op.kind == OpKind::Collective ? op.comm + 1 : 0;
      std::string args = fmt::format(
          "\"phase\":{},\"kind\":{},\"flops\":{},\"bytes\":{},\"collBytes\":{}",
          jsonString(mfsdp::enumName(op.phase)),
          jsonString(op.kind == OpKind::Collective ? mfsdp::enumName(op.coll)
                                                   : step::opKindName(op.kind)),
          jsonNumber(op.flops), jsonNumber(op.bytes), jsonNumber(op.collBytes));
      if (op.kind == OpKind::Collective)
        args += fmt::format(",\"ranks\":{},\"comm\":{},\"async\":{}", op.ranks,
                            op.comm, op.async ? "true" : "false");
      if (op.kind == OpKind::Wait)
        args += fmt::format(",\"waitFor\":{}", op.waitFor);
      // What the op works on, for comparing orders with the runtime's
      // trace (docs/runtime.md, "Trace").
      args += fmt::format(",\"unit\":{},\"group\":{}", op.unit, op.group);
      if (op.kind == OpKind::Optimizer)
        args += ",\"optimizer\":" + jsonString(op.optimizer);
      if (!op.params.empty()) {
        args += ",\"params\":[";
        for (size_t k = 0; k < op.params.size(); ++k)
          args += (k ? "," : "") + jsonString(op.params[k]);
        args += "]";
      }
      emit(fmt::format("{{\"name\":{},\"cat\":{},\"ph\":\"X\",\"pid\":{},"
                       "\"tid\":{},\"ts\":{},\"dur\":{},\"args\":{{{}}}}}",
                       jsonString(op.name),
                       jsonString(mfsdp::enumName(op.phase)), rank, tid,
                       micros(t.start), micros(t.end - t.start), args));
    }
  }
  return finish("");
}

//===----------------------------------------------------------------------===//
// Text report
//===----------------------------------------------------------------------===//

std::string renderText(const Step &s, const SimResult &r, const SimProfile &p) {
  std::string out = fmt::format(
      "step '{}' on '{}' ({}), {} ranks\n"
      "all times are predicted by the mfsdp cost model, not measured\n",
      s.name, p.name, p.description, s.world);
  if (!r.ok) {
    out += fmt::format("cannot simulate: {}\n", r.error);
    return out;
  }
  auto ms = [](double seconds) { return seconds * 1e3; };
  auto share = [](double exposed, double busy) -> std::string {
    if (busy <= 0)
      return exposed > 0 ? "n/a" : "0.0%";
    return fmt::format("{:.1f}%", 100.0 * exposed / busy);
  };
  auto line = [&](std::string_view label, double span, double busy,
                  double exposed, int64_t rank) {
    out += fmt::format("  {:<10} predicted {:>11.3f} ms  compute {:>11.3f} ms"
                       "  exposed comm {:>11.3f} ms ({} of compute)",
                       label, ms(span), ms(busy), ms(exposed),
                       share(exposed, busy));
    if (rank >= 0)
      out += fmt::format("  [rank {}]", rank);
    out += "\n";
  };
  for (Phase ph : {Phase::Forward, Phase::Backward, Phase::Optimizer}) {
    const PhaseStats &st = r.phase(ph);
    line(mfsdp::enumName(ph), st.span(), st.computeBusy, st.exposedComm,
         st.rank);
  }
  line("total", r.stepSeconds, r.computeBusy, r.exposedComm, r.slowestRank);

  if (!r.rankStepSeconds.empty()) {
    auto [lo, hi] =
        std::minmax_element(r.rankStepSeconds.begin(), r.rankStepSeconds.end());
    out += fmt::format("  predicted step per rank: {:.3f} .. {:.3f} ms\n",
                       ms(*lo), ms(*hi));
  }
  out += fmt::format("  predicted communicator streams busy: {:.3f} ms\n",
                     ms(r.commBusy));
  if (r.firstGroup >= 0)
    out += fmt::format(
        "  predicted first group (g{}) updated at {:.3f} ms, {:.3f} ms before "
        "the step ends; its gather waited {:.3f} ms; steady-state step with "
        "that gather issued then: {:.3f} ms\n",
        r.firstGroup, ms(r.firstGroupReady), ms(r.stepSeconds - r.firstGroupReady),
        ms(r.firstComputeWait), ms(r.steadyStepSeconds));
  out += fmt::format(
      "  predicted optimizer floor (peak rates, PRODUCT.md): {:.3f} ms\n",
      ms(optimizerFloorSeconds(s, p)));
  out += fmt::format(
      "  against the physical floor (each op at datasheet peak: FLOPs / {:.0f} "
      "TFLOP/s, the runtime's Newton-Schulz in {} / {:.0f} TFLOP/s, or bytes / "
      "{:.0f} GB/s, whichever is larger), slowest rank:\n",
      p.gemmFlops / 1e12, p.nsBf16 ? "bf16" : "fp32",
      planner::nsPeakFlops(p) / 1e12, p.hbmBytes / 1e9);
  for (Phase ph : {Phase::Forward, Phase::Backward, Phase::Optimizer}) {
    PhaseGap g = phaseGap(s, r, p, ph);
    if (g.rank < 0)
      continue;
    out += fmt::format("  {:<10} predicted {:>11.3f} ms = floor {:.3f} + "
                       "imbalance {:.3f} + below peak {:.3f} + exposed comm "
                       "{:.3f} ms (floor / predicted {:.1f}%)\n",
                       mfsdp::enumName(ph), ms(g.span), ms(g.floor),
                       ms(g.imbalance), ms(g.belowPeak), ms(g.exposedComm),
                       g.span > 0 ? 100.0 * g.floor / g.span : 0.0);
    if (g.nsKernels > 0)
      out += fmt::format("  {:<10} below peak includes {:.3f} ms of Newton-Schulz kernel "
                         "latency ({:.1f} us a kernel in {})\n",
                         "", ms(g.nsKernels), planner::nsKernelSeconds(p) * 1e6,
                         p.nsBf16 ? "bf16" : "fp32");
  }

  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  if (!r.rankPeakBytes.empty()) {
    // First rank on ties, both ways.
    auto hi = std::max_element(r.rankPeakBytes.begin(), r.rankPeakBytes.end());
    auto lo = std::min_element(r.rankPeakBytes.begin(), r.rankPeakBytes.end());
    out += fmt::format("  peak memory per rank (allocated: the live buffers' bytes): "
                       "{:.3f} GiB (rank {}), lowest {:.3f} GiB (rank {})\n",
                       *hi / GiB, hi - r.rankPeakBytes.begin(), *lo / GiB,
                       lo - r.rankPeakBytes.begin());
    if (p.allocatorReserve > 1)
      out += fmt::format("  peak reserved through PyTorch's caching allocator (every "
                         "buffer through it, as under FSDP2; the allocated peak x {:.3f}, "
                         "the profile's allocatorReserve): {:.3f} GiB\n",
                         p.allocatorReserve, r.peakReservedBytes / GiB);
  }
  if (!r.issues.empty()) {
    out += fmt::format("  {} issue(s):\n", r.issues.size());
    for (const auto &issue : r.issues)
      out += fmt::format("    {}\n", issue);
  }
  return out;
}

} // namespace mfsdp::cost

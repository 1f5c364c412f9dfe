//===- Simulator.cpp - The step simulator ---------------------------------===//
//
// The discrete-event simulation of one step over all ranks at once,
// following the execution model of mfsdp/step/Step.h, with each op's
// duration from the cost model (CostModel.cpp); the step checked first
// (validateStep). Traces and reports are in SimReport.cpp. Every time
// produced here is a prediction.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/cost/Simulator.h"

#include "RankMemory.h"

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
using detail::RankMemory;

//===----------------------------------------------------------------------===//
// Validation
//===----------------------------------------------------------------------===//

namespace {

bool finiteNonNegative(double v) { return std::isfinite(v) && v >= 0; }

std::string opLabel(const Step &s, size_t i) {
  return fmt::format("op {} ({} '{}')", i, step::opKindName(s.ops[i].kind),
                     s.ops[i].name);
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
      if (step::isUnitCompute(s.ops[i]) && s.ops[i].phase == Phase::Forward &&
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
              "the chunks)",
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

} // namespace mfsdp::cost

//===- VerifySchedule.cpp - Races, use after free, placement, the cap ----===//
//
// verifySchedule and verifyPlacement: what mfsdp-verify-schedule reports
// of a step, and of the step library's own buffers.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/step/Schedule.h"

#include "ScheduleShared.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <vector>

namespace mfsdp::step {

using detail::buffersConflict;
using detail::EventOps;
using detail::OffsetSet;
using detail::StepOps;
using detail::touches;

//===----------------------------------------------------------------------===//
// Verification
//===----------------------------------------------------------------------===//

namespace {
template <typename Ops>
std::vector<ScheduleIssue> verifyPlacementOf(const std::vector<Buffer> &buffers,
                                             const Ops &ops, size_t maxIssues) {
  std::vector<ScheduleIssue> issues;
  const int64_t nbuf = static_cast<int64_t>(buffers.size());
  auto placed = [&](int64_t b) {
    return b >= 0 && b < nbuf && buffers[b].offset >= 0 && buffers[b].bytes > 0;
  };
  auto end = [&](int64_t b) {
    return buffers[b].offset + static_cast<int64_t>(std::ceil(buffers[b].bytes));
  };
  // The live placed buffers by the rank that holds them (-1: every rank),
  // each map by start offset; within one map the intervals are disjoint
  // (a buffer that would overlap is reported and not entered).
  std::map<int64_t, std::map<int64_t, int64_t>> live;
  auto conflictIn = [&](const std::map<int64_t, int64_t> &m, int64_t lo,
                        int64_t hi) -> int64_t {
    auto it = m.lower_bound(lo);
    if (it != m.end() && it->first < hi)
      return it->second;
    if (it != m.begin() && end(std::prev(it)->second) > lo)
      return std::prev(it)->second;
    return -1;
  };
  // A buffer every rank has meets every rank's buffers. Those of one rank
  // are mostly persistent (an owner's master and optimizer state), on many
  // ranks: so the persistent ones of all ranks are also kept as one union
  // of spans, and a buffer that meets neither that union nor a live
  // transient buffer of one rank cannot conflict on any rank, without a
  // lookup per rank. Where it may, every rank is looked up as before (so
  // the same buffer is reported).
  OffsetSet rankedPersistent;
  int64_t rankedTransient = 0; // live non-persistent buffers of one rank
  auto enter = [&](int64_t b, int64_t op) {
    if (!placed(b) || issues.size() >= maxIssues)
      return;
    const Buffer &buf = buffers[b];
    const int64_t lo = buf.offset, hi = end(b);
    int64_t other = -1;
    if (buf.onlyRank >= 0) {
      // Its rank's buffers and those on every rank: two lookups.
      for (int64_t rank : {int64_t{-1}, buf.onlyRank})
        if (auto m = live.find(rank); other < 0 && m != live.end())
          other = conflictIn(m->second, lo, hi);
    } else {
      auto shared = live.find(-1);
      if (shared != live.end())
        other = conflictIn(shared->second, lo, hi);
      if (other < 0 && (rankedTransient > 0 || rankedPersistent.fit(lo, hi - lo) != lo))
        for (auto &[rank, m] : live)
          if (other < 0 && rank >= 0)
            other = conflictIn(m, lo, hi);
    }
    if (other >= 0) {
      const Buffer &o = buffers[other];
      const int64_t on = buf.onlyRank >= 0 ? buf.onlyRank : o.onlyRank;
      issues.push_back(
          {op, fmt::format("buffer '{}' at bytes [{}, {}) of the arena overlaps '{}' at "
                           "[{}, {}) while both are live{}",
                           ops.name(b), lo, hi, ops.name(other), o.offset, end(other),
                           on >= 0 ? fmt::format(" on rank {}", on) : std::string())});
      return;
    }
    live[buf.onlyRank][lo] = b;
    if (buf.onlyRank >= 0 && buf.persistent)
      rankedPersistent.insert(lo, hi);
    else if (buf.onlyRank >= 0)
      ++rankedTransient;
  };
  for (int64_t b = 0; b < nbuf; ++b)
    if (buffers[b].persistent)
      enter(b, -1);
  for (size_t i = 0; i < ops.size() && issues.size() < maxIssues; ++i) {
    const OpKind kind = ops.kind(i);
    if (kind != OpKind::Alloc && kind != OpKind::Free)
      continue;
    const int64_t b = ops.target(i);
    if (!placed(b) || buffers[b].persistent)
      continue;
    auto m = live.find(buffers[b].onlyRank);
    auto at = m == live.end() ? std::map<int64_t, int64_t>::iterator()
                              : m->second.find(buffers[b].offset);
    const bool isLive = m != live.end() && at != m->second.end() && at->second == b;
    if (kind == OpKind::Alloc && !isLive)
      enter(b, static_cast<int64_t>(i));
    else if (kind == OpKind::Free && isLive) {
      if (buffers[b].onlyRank >= 0)
        --rankedTransient;
      m->second.erase(at);
      if (m->second.empty())
        live.erase(m);
    }
  }
  return issues;
}
} // namespace

std::vector<ScheduleIssue> verifyPlacement(const Step &s, size_t maxIssues) {
  return verifyPlacementOf(s.buffers, StepOps{s}, maxIssues);
}

std::vector<ScheduleIssue> verifyPlacement(const BufferEvents &e, size_t maxIssues) {
  return verifyPlacementOf(e.buffers, EventOps{e}, maxIssues);
}

std::vector<ScheduleIssue> verifySchedule(const Step &s, double capBytes) {
  std::vector<ScheduleIssue> issues;
  const int64_t nbuf = static_cast<int64_t>(s.buffers.size());
  auto name = [&](int64_t b) {
    return b >= 0 && b < nbuf ? "'" + s.buffers[b].name + "'" : std::string("?");
  };
  std::vector<bool> freed(s.buffers.size(), false);
  // In-flight collectives: op index -> buffers it reads and writes.
  std::map<int64_t, std::pair<std::vector<int64_t>, std::vector<int64_t>>> inflight;
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const Op &op = s.ops[i];
    const int64_t idx = static_cast<int64_t>(i);
    for (const auto &list : {op.reads, op.writes})
      for (int64_t b : list) {
        if (b < 0 || b >= nbuf) {
          issues.push_back({idx, fmt::format("'{}' names buffer {} of {}", op.name, b, nbuf)});
          continue;
        }
        if (freed[b])
          issues.push_back({idx, fmt::format("'{}' uses {} after it was freed",
                                             op.name, name(b))});
      }
    if (op.kind == OpKind::Collective && op.onlyRank >= 0)
      issues.push_back({idx, fmt::format(
                                 "'{}' is a collective only rank {} issues: the "
                                 "other ranks would issue a different sequence "
                                 "on communicator {} and deadlock",
                                 op.name, op.onlyRank, op.comm)});
    if (op.kind == OpKind::Wait) {
      if (op.waitFor < 0 || op.waitFor >= idx ||
          s.ops[op.waitFor].kind != OpKind::Collective)
        issues.push_back({idx, "a wait must name an earlier collective"});
      else
        inflight.erase(op.waitFor);
      continue;
    }
    // A collective against those of other communicators still in flight
    // (their streams do not order them): neither reads what the other
    // writes.
    if (op.kind == OpKind::Collective)
      for (auto &[c, bufs] : inflight) {
        const Op &other = s.ops[c];
        if (other.comm == op.comm || !buffersConflict(op, other))
          continue;
        // What they share: a buffer one writes and the other uses, else a
        // parameter they both carry.
        std::string what;
        for (const auto &[mine, theirs] : {std::make_pair(&op.writes, &other.reads),
                                           std::make_pair(&op.writes, &other.writes),
                                           std::make_pair(&op.reads, &other.writes)})
          for (int64_t b : *mine)
            if (what.empty() && std::find(theirs->begin(), theirs->end(), b) != theirs->end())
              what = name(b);
        for (const std::string &p : op.params)
          if (what.empty() &&
              std::find(other.params.begin(), other.params.end(), p) != other.params.end())
            what = "parameter '" + p + "'";
        issues.push_back({idx, fmt::format("'{}' (communicator {}) uses {} while '{}' "
                                           "(communicator {}) is in flight on it: another "
                                           "stream, not ordered before its wait",
                                           op.name, op.comm, what, other.name, other.comm)});
      }
    // Against every collective still in flight.
    if (op.kind != OpKind::Collective)
      for (auto &[c, bufs] : inflight) {
        for (int64_t b : bufs.second)
          if (touches(op, b))
            issues.push_back(
                {idx, fmt::format("'{}' uses {} before the wait of '{}', which "
                                  "fills it",
                                  op.name, name(b), s.ops[c].name)});
        for (int64_t b : bufs.first)
          if ((op.kind == OpKind::Free && touches(op, b)) ||
              std::find(op.writes.begin(), op.writes.end(), b) != op.writes.end())
            issues.push_back(
                {idx, fmt::format("'{}' {} {} while '{}' still reads it",
                                  op.name, op.kind == OpKind::Free ? "frees" : "overwrites",
                                  name(b), s.ops[c].name)});
      }
    if (op.kind == OpKind::Free && !op.writes.empty() && op.writes.front() >= 0 &&
        op.writes.front() < nbuf)
      freed[op.writes.front()] = true;
    if (op.kind == OpKind::Collective && op.async)
      inflight[idx] = {op.reads, op.writes};
  }
  for (auto &[c, bufs] : inflight)
    issues.push_back({c, fmt::format("'{}' is never waited for", s.ops[c].name)});
  // Where the memory plan placed the buffers: no two live at once share bytes.
  for (ScheduleIssue &issue : verifyPlacement(s))
    issues.push_back(std::move(issue));
  if (capBytes > 0) {
    Step copy = s;
    MemoryPlan plan = planMemory(copy);
    for (size_t r = 0; r < plan.peakBytes.size(); ++r)
      if (plan.arenaBytes[r] > capBytes)
        issues.push_back({plan.peakOp[r],
                          fmt::format("rank {} needs a {:.0f}-byte arena ({:.0f} "
                                      "bytes live at the peak, after this op), "
                                      "over the memory cap of {:.0f} bytes",
                                      r, plan.arenaBytes[r], plan.peakBytes[r],
                                      capBytes)});
  }
  return issues;
}

} // namespace mfsdp::step

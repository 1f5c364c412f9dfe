//===- ScheduleShared.h - What the parts of the schedule share -*- C++ -*-===//
//
// Private to lib/step. The buffer tests that bucketing, overlap
// (Schedule.cpp) and the verifier (VerifySchedule.cpp) apply to ops; the
// ops memory planning reads and the offset sets it keeps (Memory.cpp),
// which the verifier reads too.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_LIB_STEP_SCHEDULESHARED_H
#define MFSDP_LIB_STEP_SCHEDULESHARED_H

#include "mfsdp/step/Schedule.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mfsdp::step::detail {

/// Whether `op` reads or writes `buffer`.
inline bool touches(const Op &op, int64_t buffer) {
  return std::find(op.reads.begin(), op.reads.end(), buffer) != op.reads.end() ||
         std::find(op.writes.begin(), op.writes.end(), buffer) != op.writes.end();
}

/// Whether the buffer lists `a` and `b` have a buffer in common.
inline bool shareBuffer(const std::vector<int64_t> &a, const std::vector<int64_t> &b) {
  for (int64_t x : a)
    if (std::find(b.begin(), b.end(), x) != b.end())
      return true;
  return false;
}

/// Whether `a` and `b` depend on each other through a buffer: one reads
/// what the other writes. (Two collectives writing one buffer write their
/// own parts of it, as a unit's row and owner gathers do.)
/// Collectives that name their parameters work on those parameters' parts
/// of their buffers (a group's buffers hold every unit's): two that share
/// no parameter do not depend on each other. Two of different
/// communicators that share one do (a unit's all-reduce over replicas
/// carries what its shard reductions, rows and owner chunks, produce).
inline bool buffersConflict(const Op &a, const Op &b) {
  if (!a.params.empty() && !b.params.empty()) {
    bool shared = false;
    for (const std::string &p : a.params)
      if (std::find(b.params.begin(), b.params.end(), p) != b.params.end()) {
        shared = true;
        break;
      }
    if (!shared)
      return false;
    if (a.kind == OpKind::Collective && b.kind == OpKind::Collective && a.comm != b.comm)
      return true;
  }
  return shareBuffer(a.writes, b.reads) || shareBuffer(a.reads, b.writes);
}

/// The ops memory planning reads, whatever holds them: a step's ops
/// (StepOps) or bare allocations and frees (EventOps).
struct StepOps {
  const Step &s;
  size_t size() const { return s.ops.size(); }
  OpKind kind(size_t i) const { return s.ops[i].kind; }
  /// The buffer an Alloc or Free names (-1: none).
  int64_t target(size_t i) const {
    return s.ops[i].writes.empty() ? -1 : s.ops[i].writes.front();
  }
  template <typename F> void eachUsed(size_t i, F f) const {
    for (const auto *list : {&s.ops[i].reads, &s.ops[i].writes})
      for (int64_t b : *list)
        f(b);
  }
  int64_t waitFor(size_t i) const { return s.ops[i].waitFor; }
  const std::string &name(int64_t b) const { return s.buffers[b].name; }
};

struct EventOps {
  const BufferEvents &e;
  size_t size() const { return e.events.size(); }
  OpKind kind(size_t i) const {
    return e.events[i].alloc ? OpKind::Alloc : OpKind::Free;
  }
  int64_t target(size_t i) const { return e.events[i].buffer; }
  template <typename F> void eachUsed(size_t, F) const {}
  int64_t waitFor(size_t) const { return -1; }
  std::string name(int64_t b) const { return e.nameOf(static_cast<size_t>(b)); }
};

/// Offsets taken in one arena: disjoint half-open intervals [lo, hi),
/// merged when they touch, and the offsets of zero-byte buffers kept as
/// empty intervals [p, p), which (as in a scan of the taken intervals sorted
/// by offset) still push a larger buffer placed over them past them. One
/// rule covers both: [lo, hi) blocks x for `size` bytes when lo < x + size
/// and hi > x. A point on or inside an interval blocks nothing the interval
/// does not, so it is absorbed; the entries are then sorted by both ends.
/// A sorted vector: the sets of one plan number in the millions and most
/// hold one or two entries.
class OffsetSet {
public:
  void insert(int64_t lo, int64_t hi) {
    hi = std::max(hi, lo);
    // The entries that meet or touch [lo, hi]: b >= lo and a <= hi.
    auto first = std::partition_point(
        spans.begin(), spans.end(), [&](const Span &e) { return e.second < lo; });
    auto last = std::partition_point(
        first, spans.end(), [&](const Span &e) { return e.first <= hi; });
    if (first == last) {
      spans.insert(first, {lo, hi});
      return;
    }
    first->first = std::min(lo, first->first);
    first->second = std::max(hi, std::prev(last)->second);
    spans.erase(std::next(first), last);
  }

  /// Whether [lo, hi] lies in one entry, so that insert(lo, hi) would
  /// change nothing (entries neither meet nor touch).
  bool contains(int64_t lo, int64_t hi) const {
    hi = std::max(hi, lo);
    auto it = std::partition_point(
        spans.begin(), spans.end(), [&](const Span &e) { return e.second < hi; });
    return it != spans.end() && it->first <= lo;
  }

  /// The smallest offset >= x that nothing here blocks for `size` bytes.
  int64_t fit(int64_t x, int64_t size) const {
    auto it = std::partition_point(
        spans.begin(), spans.end(), [&](const Span &e) { return e.second <= x; });
    // Jumping past a blocking entry skips only offsets it blocks too; the
    // entries after it end later still.
    for (; it != spans.end() && it->first < x + size; ++it)
      x = it->second;
    return x;
  }

private:
  using Span = std::pair<int64_t, int64_t>;
  std::vector<Span> spans;
};

} // namespace mfsdp::step::detail

#endif // MFSDP_LIB_STEP_SCHEDULESHARED_H

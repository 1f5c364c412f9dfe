//===- RankMemory.h - Live bytes of one rank in program order ---*- C++ -*-===//
//
// Private to lib/cost: the simulation (Simulator.cpp) and its trace's
// live-bytes counter (SimReport.cpp) walk a rank's allocs and frees with it.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_LIB_COST_RANKMEMORY_H
#define MFSDP_LIB_COST_RANKMEMORY_H

#include "mfsdp/step/Step.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace mfsdp::cost::detail {

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

  RankMemory(const step::Step &s, int64_t rank) : state(s.buffers.size(), Never) {
    for (const auto &b : s.buffers)
      if (b.persistent && (b.onlyRank < 0 || b.onlyRank == rank))
        live += b.bytes;
    peak = live;
  }
  /// The same, given the indices of the persistent buffers on the rank, in
  /// order.
  RankMemory(const step::Step &s, const std::vector<size_t> &persistent)
      : state(s.buffers.size(), Never) {
    for (size_t b : persistent)
      live += s.buffers[b].bytes;
    peak = live;
  }

  Event apply(const step::Step &s, const step::Op &op) {
    int64_t b = op.writes.front();
    const step::Buffer &buf = s.buffers[b];
    if (op.kind == step::OpKind::Alloc) {
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

} // namespace mfsdp::cost::detail

#endif // MFSDP_LIB_COST_RANKMEMORY_H

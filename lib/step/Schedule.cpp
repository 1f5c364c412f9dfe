//===- Schedule.cpp - Bucketing, overlap, memory and verification ---------===//
#include "mfsdp/step/Schedule.h"

#include "InternalError.h"

#include <fmt/format.h>

#include <iterator>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <deque>
#include <memory>
#include <map>
#include <unordered_map>
#include <numeric>
#include <set>
#include <string_view>
#include <tuple>

namespace mfsdp::step {

namespace {

bool touches(const Op &op, int64_t buffer) {
  return std::find(op.reads.begin(), op.reads.end(), buffer) != op.reads.end() ||
         std::find(op.writes.begin(), op.writes.end(), buffer) != op.writes.end();
}

bool shareBuffer(const std::vector<int64_t> &a, const std::vector<int64_t> &b) {
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
bool buffersConflict(const Op &a, const Op &b) {
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

bool isGather(const Op &op) {
  return op.kind == OpKind::Collective &&
         (op.coll == CollKind::AllGather || op.coll == CollKind::AllGatherV) &&
         op.phase != Phase::Optimizer;
}

/// Moves op `order[i]` to i, for every i (`order` is a permutation of the
/// op indices), and rebuilds Wait::waitFor. In place, cycle by cycle: a
/// second op array would double the step's largest allocation.
void reorder(Step &s, const std::vector<int64_t> &order) {
  const size_t n = s.ops.size();
  std::vector<int64_t> newIndex(n, -1);
  for (size_t i = 0; i < n; ++i)
    newIndex[order[i]] = static_cast<int64_t>(i);
  std::vector<bool> done(n, false);
  for (size_t i = 0; i < n; ++i) {
    if (done[i] || order[i] == static_cast<int64_t>(i))
      continue;
    Op held = std::move(s.ops[i]);
    size_t j = i;
    for (;;) {
      done[j] = true;
      const size_t k = static_cast<size_t>(order[j]);
      if (k == i) {
        s.ops[j] = std::move(held);
        break;
      }
      s.ops[j] = std::move(s.ops[k]);
      j = k;
    }
  }
  for (Op &op : s.ops)
    if (op.kind == OpKind::Wait && op.waitFor >= 0)
      op.waitFor = newIndex[op.waitFor];
}

} // namespace

//===----------------------------------------------------------------------===//
// Bucketing
//===----------------------------------------------------------------------===//

int64_t bucketLimitBytes(double bytes) {
  return bytes > 0 ? std::max<int64_t>(1, std::llround(bytes)) : 0;
}

int64_t bucketCollectives(Step &s, double limitBytes) {
  // Compacted in place: ops are written at `w`, never past the op read
  // next (buckets only merge), and moved, not copied.
  size_t w = 0;
  auto put = [&](Op &&op) {
    if (&s.ops[w] != &op)
      s.ops[w] = std::move(op);
    ++w;
  };
  int64_t removed = 0;
  for (size_t i = 0; i < s.ops.size();) {
    if (s.ops[i].kind != OpKind::Collective || s.ops[i].async) {
      put(std::move(s.ops[i++]));
      continue;
    }
    size_t end = i;
    while (end < s.ops.size() && s.ops[end].kind == OpKind::Collective &&
           !s.ops[end].async)
      ++end;
    // Buckets of this run, keyed, in order of first appearance.
    using Key = std::tuple<int, std::vector<std::string>, int64_t, int,
                           std::vector<int64_t>, std::vector<int64_t>, bool>;
    std::map<Key, std::vector<size_t>> open; // key -> bucket indices in `bucket`
    std::vector<Op> buckets;
    for (size_t k = i; k < end; ++k) {
      const Op &op = s.ops[k];
      Key key{static_cast<int>(op.coll), op.meshAxes.names(), op.comm,
              static_cast<int>(op.phase), op.reads, op.writes, op.interNode};
      auto &list = open[key];
      bool merged = false;
      // Joining a bucket moves the op before the buckets opened after
      // that one: not past one whose buffers it depends on (a unit's
      // all-reduce over replicas stays after its shard reduction when a
      // limit opened a bucket for that one).
      auto movesPastItsInput = [&](size_t bucket) {
        for (size_t j = bucket + 1; j < buckets.size(); ++j)
          if (buffersConflict(op, buckets[j]))
            return true;
        return false;
      };
      if (!list.empty()) {
        Op &b = buckets[list.back()];
        if ((limitBytes <= 0 || b.collBytes + op.collBytes <= limitBytes) &&
            !movesPastItsInput(list.back())) {
          b.collBytes += op.collBytes;
          b.params.insert(b.params.end(), op.params.begin(), op.params.end());
          if (!op.chunks.empty()) {
            if (b.chunks.empty())
              b.chunks.assign(op.chunks.size(), 0.0);
            for (size_t r = 0; r < op.chunks.size() && r < b.chunks.size(); ++r)
              b.chunks.add(r, op.chunks[r]);
          }
          b.name = fmt::format("bucket {} ({} tensors)", mfsdp::enumName(b.coll),
                               b.params.size());
          merged = true;
          ++removed;
        }
      }
      if (!merged) {
        list.push_back(buckets.size());
        buckets.push_back(std::move(s.ops[k]));
      }
    }
    // The run's ops are all in `buckets` now; as many or fewer go back.
    for (Op &b : buckets)
      put(std::move(b));
    i = end;
  }
  // No waits exist yet (buckets are formed from synchronous collectives).
  s.ops.resize(w);
  shareNameLists(s);
  return removed;
}

int64_t shareNameLists(Step &s) {
  // Each op's list by a hash of its names, sorted by hash then op: a list
  // is compared with the lists kept before it in its hash (a table of
  // vectors would be a node and a vector per list, at 100,000 units
  // hundreds of thousands).
  std::vector<std::pair<size_t, size_t>> byHash; // (hash, op)
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const Op &op = s.ops[i];
    if (op.params.empty())
      continue;
    size_t h = op.params.size();
    for (const std::string &n : op.params)
      h = h * 1000003u ^ std::hash<std::string_view>()(n);
    byHash.push_back({h, i});
  }
  std::sort(byHash.begin(), byHash.end());
  int64_t shared = 0;
  std::vector<size_t> same; // the ops holding a list kept, of one hash
  for (size_t k = 0; k < byHash.size(); ++k) {
    if (k == 0 || byHash[k].first != byHash[k - 1].first)
      same.clear();
    Op &op = s.ops[byHash[k].second];
    bool found = false;
    for (size_t j : same) {
      const NameList &other = s.ops[j].params;
      if (other.sameList(op.params)) {
        found = true;
        break;
      }
      if (other == op.params) {
        op.params = other;
        ++shared;
        found = true;
        break;
      }
    }
    if (!found) {
      op.params.shrinkToFit();
      same.push_back(byHash[k].second);
    }
  }
  return shared;
}

//===----------------------------------------------------------------------===//
// Overlap
//===----------------------------------------------------------------------===//

namespace {

/// A group's gathers at one point: the Alloc of the gathered buffer
/// followed by the collectives writing it.
struct GatherBlock {
  size_t begin = 0, end = 0; // [begin, end) in the op list
  int64_t group = -1;
  Phase phase = Phase::Forward;
  double bytes = 0;
};

std::vector<GatherBlock> gatherBlocks(const Step &s) {
  std::vector<GatherBlock> blocks;
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const Op &op = s.ops[i];
    if (op.kind != OpKind::Alloc || i + 1 >= s.ops.size() ||
        !isGather(s.ops[i + 1]) || s.ops[i + 1].writes != op.writes)
      continue;
    GatherBlock b;
    b.begin = i;
    b.end = i + 1;
    b.group = s.ops[i + 1].group;
    b.phase = s.ops[i + 1].phase;
    b.bytes = s.buffers[op.writes.front()].bytes;
    while (b.end < s.ops.size() && isGather(s.ops[b.end]) &&
           s.ops[b.end].writes == op.writes)
      ++b.end;
    blocks.push_back(b);
  }
  return blocks;
}

} // namespace

void scheduleOverlap(Step &s, const OverlapOptions &o) {
  prepareOverlap(s, o);
  finishOverlap(s, o);
}

void prepareOverlap(Step &s, const OverlapOptions &o) {
  // 1. Prefetch: move each gather block before the compute of the group
  // `prefetch` groups earlier in program order (same phase, same
  // microbatch: each microbatch's forward and backward gather their own
  // groups, so every microbatch runs the same hooks).
  if (o.prefetch > 0) {
    std::vector<int64_t> order(s.ops.size());
    std::iota(order.begin(), order.end(), 0);
    std::vector<GatherBlock> blocks = gatherBlocks(s);
    const std::vector<int64_t> microbatch = microbatchOf(s);
    // Where each group's compute starts, per microbatch and phase, in
    // program order.
    using Key = std::tuple<int64_t, int, int64_t>; // microbatch, phase, group
    std::map<Key, size_t> firstCompute;
    std::vector<Key> computeOrder;
    std::map<Key, size_t> orderOf; // key -> computeOrder index
    for (size_t i = 0; i < s.ops.size(); ++i) {
      const Op &op = s.ops[i];
      if (op.kind != OpKind::Compute || op.group < 0 || op.compute == "copy")
        continue;
      Key key{microbatch[i], static_cast<int>(op.phase), op.group};
      if (!firstCompute.count(key)) {
        firstCompute[key] = i;
        orderOf[key] = computeOrder.size();
        computeOrder.push_back(key);
      }
    }
    auto blockKey = [&](const GatherBlock &b) {
      return Key{microbatch[b.begin + 1], static_cast<int>(b.phase), b.group};
    };
    // The gather blocks of each (microbatch, phase, group), in block order.
    std::map<Key, std::vector<size_t>> blocksOf;
    for (size_t k = 0; k < blocks.size(); ++k)
      blocksOf[blockKey(blocks[k])].push_back(k);
    // For each block: the group whose compute is `prefetch` groups before.
    std::map<size_t, size_t> moveBefore; // block begin -> target op index
    for (const GatherBlock &b : blocks) {
      const Key key = blockKey(b);
      auto found = orderOf.find(key);
      if (found == orderOf.end())
        continue;
      auto it = computeOrder.begin() + static_cast<std::ptrdiff_t>(found->second);
      int64_t back = 0;
      auto target = it;
      while (back < o.prefetch && target != computeOrder.begin() &&
             std::get<0>(*std::prev(target)) == std::get<0>(key) &&
             std::get<1>(*std::prev(target)) == std::get<1>(key)) {
        --target;
        ++back;
      }
      if (back == 0)
        continue;
      // Memory: gathered bytes alive at once if we move this block.
      if (o.maxInflightBytes > 0) {
        // The blocks of the groups in [target, it), summed in block order.
        std::vector<size_t> others;
        for (auto g = target; g != it; ++g) {
          auto list = blocksOf.find(*g);
          if (list != blocksOf.end())
            others.insert(others.end(), list->second.begin(), list->second.end());
        }
        std::sort(others.begin(), others.end());
        others.erase(std::unique(others.begin(), others.end()), others.end());
        double inflight = b.bytes;
        for (size_t k : others)
          inflight += blocks[k].bytes;
        if (inflight > o.maxInflightBytes)
          continue;
      }
      moveBefore[b.begin] = firstCompute[*target];
    }
    // Rebuild the order: blocks go right before their target compute (and
    // the waits that precede it will be placed later, after them).
    std::vector<bool> moved(s.ops.size(), false);
    std::map<size_t, std::vector<int64_t>> inserted;
    for (const GatherBlock &b : blocks) {
      auto m = moveBefore.find(b.begin);
      if (m == moveBefore.end())
        continue;
      for (size_t k = b.begin; k < b.end; ++k) {
        moved[k] = true;
        inserted[m->second].push_back(static_cast<int64_t>(k));
      }
    }
    order.clear();
    for (size_t i = 0; i < s.ops.size(); ++i) {
      auto ins = inserted.find(i);
      if (ins != inserted.end())
        order.insert(order.end(), ins->second.begin(), ins->second.end());
      if (!moved[i])
        order.push_back(static_cast<int64_t>(i));
    }
    reorder(s, order);
  }

  // 2. Gathers on their own communicator, so a prefetched gather never waits
  // behind a reduction.
  if (o.separateGatherComm)
    for (Op &op : s.ops)
      if (isGather(op))
        op.comm = 2;
}

namespace {

/// Where the optimizer phase starts in `ops` when it is the tail of the
/// step (every op from its first op on is of that phase), else ops.size():
/// then nothing is reordered.
size_t optimizerTail(const OpArray &ops) {
  size_t first = ops.size();
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].phase == Phase::Optimizer) {
      first = i;
      break;
    }
  for (size_t i = first; i < ops.size(); ++i)
    if (ops[i].phase != Phase::Optimizer)
      return ops.size();
  return first;
}

/// 3. The order of the optimizer tail `tail` for `optimizerFill`, as
/// indices into `tail`. Landing order (optimizerFill < 0): the last group
/// is reduced first in backward, so each group starts as soon as it can.
/// First units first (optimizerFill = k): k groups in landing order fill
/// the wait for the last reduction, then the rest in ascending group order.
/// The groups are found once per tail; each order is a counting sort.
class OptimizerOrder {
public:
  explicit OptimizerOrder(const std::vector<Op> &tail) {
    const size_t n = tail.size();
    // Allocs belong to the op after them, frees to the op before.
    std::vector<int64_t> group(n, -1);
    for (size_t i = 0; i < n; ++i)
      group[i] = tail[i].group;
    for (size_t i = n; i-- > 0;)
      if (tail[i].kind == OpKind::Alloc && i + 1 < n)
        group[i] = group[i + 1];
    for (size_t i = 1; i < n; ++i)
      if (tail[i].kind == OpKind::Free)
        group[i] = group[i - 1];
    std::vector<int64_t> groups;
    for (int64_t g : group)
      if (g >= 0)
        groups.push_back(g);
    std::sort(groups.begin(), groups.end());
    groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
    numGroups = static_cast<int64_t>(groups.size());
    // Each op's group by its place in ascending order (-1: none).
    index.resize(n);
    for (size_t i = 0; i < n; ++i)
      index[i] = group[i] < 0 ? -1
                              : std::lower_bound(groups.begin(), groups.end(), group[i]) -
                                    groups.begin();
  }

  std::vector<int64_t> operator()(int64_t optimizerFill) const {
    const int64_t G = numGroups;
    const int64_t fill = optimizerFill < 0 ? G : std::min(optimizerFill, G);
    // The k-th group in landing order (descending) is at k while k < fill;
    // the others follow in ascending order; ops of no group go last.
    auto pos = [&](int64_t gi) {
      if (gi < 0)
        return G;
      return G - 1 - gi < fill ? G - 1 - gi : fill + gi;
    };
    std::vector<int64_t> start(static_cast<size_t>(G) + 2, 0);
    for (int64_t gi : index)
      ++start[static_cast<size_t>(pos(gi)) + 1];
    for (size_t p = 1; p < start.size(); ++p)
      start[p] += start[p - 1];
    std::vector<int64_t> order(index.size());
    for (size_t i = 0; i < index.size(); ++i)
      order[static_cast<size_t>(start[static_cast<size_t>(pos(index[i]))]++)] =
          static_cast<int64_t>(i);
    return order;
  }

private:
  std::vector<int64_t> index;
  int64_t numGroups = 0;
};

/// 4. Async starts, each waited just before the first non-collective op
/// that reads or writes one of its buffers. Freeing a buffer a collective
/// still reads (the unreduced gradients) does not wait: the free moves to
/// just after the next compute op, so the reduction overlaps it. Ops are
/// fed in program order (waits are dropped and rebuilt here); `finish`
/// waits for what is still in flight at the end of the step.
class AsyncWaits {
public:
  /// The ops fed so far, scheduled.
  OpArray out;

  /// What decides the ops still to come, besides `out`: restoring it and
  /// cutting `out` back to its size then returns to the point it was taken.
  struct State {
    // Collectives started and not yet waited for (out index -> buffers),
    // and for each buffer the ones that use it: an op finds the waits it
    // needs from its own buffers, not by scanning everything in flight.
    std::map<int64_t, std::vector<int64_t>> pending;
    std::map<int64_t, std::set<int64_t>> pendingOn;
    std::vector<Op> deferred;
    // Collectives that use a buffer a collective of another communicator
    // in flight writes (or write one it uses): each runs right after the
    // waits for those (`after`), synchronously, as the runtime runs HSDP's
    // all-reduce over replicas inside the wait for the shard reduction;
    // in the order they came.
    struct Blocked {
      Op op;
      std::set<int64_t> after;
    };
    std::vector<Blocked> blocked;
  };
  State state;

  void feed(Op op) {
    if (op.kind == OpKind::Wait)
      return; // rebuilt here
    if (op.kind == OpKind::Free && op.phase != Phase::Optimizer &&
        pendingTouches(op)) {
      state.deferred.push_back(std::move(op));
      return;
    }
    bool compute = op.kind == OpKind::Compute;
    emit(std::move(op));
    if (compute && !state.deferred.empty()) {
      std::vector<Op> now;
      now.swap(state.deferred);
      for (Op &f : now)
        emit(std::move(f));
    }
  }

  void finish() {
    std::vector<Op> now;
    now.swap(state.deferred);
    for (Op &f : now)
      emit(std::move(f));
    for (auto &entry : state.pending)
      waitFor(entry.first, out[entry.first].phase);
    state.pending.clear();
    state.pendingOn.clear();
    for (State::Blocked &b : state.blocked) // (none: each waits for pending ones)
      put(std::move(b.op));
    state.blocked.clear();
  }

private:
  void waitFor(int64_t idx, Phase phase) {
    Op wait;
    wait.kind = OpKind::Wait;
    wait.phase = phase;
    wait.name = "wait " + out[idx].name;
    wait.waitFor = idx;
    wait.group = out[idx].group;
    put(std::move(wait));
    // The collectives held for this one run now, on the compute stream.
    if (state.blocked.empty())
      return;
    std::vector<State::Blocked> still;
    for (State::Blocked &b : state.blocked) {
      b.after.erase(idx);
      if (!b.after.empty()) {
        still.push_back(std::move(b));
        continue;
      }
      b.op.async = false;
      put(std::move(b.op));
    }
    state.blocked.swap(still);
  }

  /// The collectives in flight on another communicator that collective
  /// `op` must wait for, and those a collective held before it waits for
  /// when it uses a buffer of that one.
  std::set<int64_t> holdsFor(const Op &op) const {
    std::set<int64_t> after;
    for (const auto *list : {&op.reads, &op.writes})
      for (int64_t buf : *list)
        if (auto it = state.pendingOn.find(buf); it != state.pendingOn.end())
          for (int64_t idx : it->second)
            if (out[idx].comm != op.comm && buffersConflict(op, out[idx]))
              after.insert(idx);
    // Through a parameter in another buffer (an owner chunk's reduction,
    // a row shard's all-reduce over replicas): of the few in flight.
    if (!op.params.empty())
      for (const auto &[idx, bufs] : state.pending)
        if (out[idx].comm != op.comm && buffersConflict(op, out[idx]))
          after.insert(idx);
    for (const State::Blocked &b : state.blocked)
      if (buffersConflict(op, b.op))
        after.insert(b.after.begin(), b.after.end());
    return after;
  }

  void flushFor(const Op &op) {
    std::set<int64_t> needed;
    for (const auto *list : {&op.reads, &op.writes})
      for (int64_t buf : *list)
        if (auto it = state.pendingOn.find(buf); it != state.pendingOn.end())
          needed.insert(it->second.begin(), it->second.end());
    for (int64_t idx : needed) { // in issue order, as they were started
      waitFor(idx, op.phase);
      for (int64_t buf : state.pending[idx]) {
        auto it = state.pendingOn.find(buf);
        it->second.erase(idx);
        if (it->second.empty())
          state.pendingOn.erase(it);
      }
      state.pending.erase(idx);
    }
  }

  bool pendingTouches(const Op &op) const {
    for (const auto *list : {&op.reads, &op.writes})
      for (int64_t buf : *list)
        if (state.pendingOn.count(buf))
          return true;
    return false;
  }

  void emit(Op op) {
    if (op.kind != OpKind::Collective)
      flushFor(op);
    if (op.kind == OpKind::Collective) {
      if (std::set<int64_t> after = holdsFor(op); !after.empty()) {
        state.blocked.push_back({std::move(op), std::move(after)});
        return;
      }
      op.async = true;
      // Each buffer once: an in-place gather reads and writes the same one,
      // and the wait removes the collective from each buffer's set once.
      std::vector<int64_t> bufs = op.reads;
      bufs.insert(bufs.end(), op.writes.begin(), op.writes.end());
      std::sort(bufs.begin(), bufs.end());
      bufs.erase(std::unique(bufs.begin(), bufs.end()), bufs.end());
      const int64_t idx = static_cast<int64_t>(out.size());
      for (int64_t buf : bufs)
        state.pendingOn[buf].insert(idx);
      state.pending[idx] = std::move(bufs);
    }
    put(std::move(op));
  }

  void put(Op &&op) { out.push_back(std::move(op)); }
};

} // namespace

void finishOverlap(Step &s, const OverlapOptions &o) {
  finishOverlapEach(s, o, o.optimizerFill,
                    [](int64_t, const Step &) { return std::nullopt; });
}

void finishOverlapEach(
    Step &s, const OverlapOptions &o, int64_t firstFill,
    const std::function<std::optional<int64_t>(int64_t fill,
                                               const Step &scheduled)> &visit,
    size_t *sharedOps) {
  (void)o; // the parts after prepareOverlap use no option but the fill
  // The ops before the optimizer tail get their starts and waits once; the
  // order only moves ops of the tail, so each fill goes on from there.
  const size_t first = optimizerTail(s.ops);
  std::vector<Op> tail(std::make_move_iterator(s.ops.begin() + first),
                       std::make_move_iterator(s.ops.end()));
  // Every op once, in program order (waits are rebuilt), into a new
  // array: each chunk of the step's array is freed once it is fed, so the
  // two hold about one step's ops between them.
  AsyncWaits waits;
  for (size_t i = 0; i < first; ++i) {
    waits.feed(std::move(s.ops[i]));
    s.ops.releaseBefore(i + 1);
  }
  s.ops.clear();
  const size_t headSize = waits.out.size();
  const AsyncWaits::State head = waits.state;
  if (sharedOps)
    *sharedOps = headSize; // each fill's ops go on after these
  const OptimizerOrder optimizerOrder(tail);
  // A tail without collectives comes out as it is fed (its ops are of the
  // optimizer phase: none is deferred or held), each op once, with waits
  // between: a fill's schedule takes the tail's ops and gives them back.
  // Otherwise each fill has a copy (a later fill needs the tail again).
  const bool lend = std::none_of(tail.begin(), tail.end(), [](const Op &op) {
    return op.kind == OpKind::Collective || op.phase != Phase::Optimizer;
  });
  for (int64_t fill = firstFill;;) {
    const std::vector<int64_t> order = optimizerOrder(fill);
    for (int64_t k : order) {
      if (lend)
        waits.feed(std::move(tail[k]));
      else
        waits.feed(tail[k]);
    }
    waits.finish();
    s.ops = std::move(waits.out);
    std::optional<int64_t> next = visit(fill, s);
    if (!next)
      return; // `s` holds this fill's schedule
    fill = *next;
    waits.out = std::move(s.ops);
    if (lend) {
      // The fed ops in order, past the waits made here (a wait of the
      // tail was dropped when fed, and is dropped again) and what the
      // head's state still held (frees of the earlier phases deferred,
      // collectives held), which is the head's.
      size_t j = 0;
      auto nextFed = [&] {
        while (j < order.size() && tail[order[j]].kind == OpKind::Wait)
          ++j;
        return j < order.size() ? order[j++] : int64_t(-1);
      };
      for (size_t i = headSize; i < waits.out.size(); ++i) {
        const Op &op = waits.out[i];
        if (op.kind == OpKind::Wait || op.kind == OpKind::Collective ||
            op.phase != Phase::Optimizer)
          continue;
        const int64_t k = nextFed();
        if (k < 0)
          internalError("the optimizer order", "an optimizer op scheduled that was not fed");
        tail[k] = std::move(waits.out[i]);
      }
      if (nextFed() >= 0)
        internalError("the optimizer order", "an optimizer op fed and not scheduled");
    }
    waits.out.resize(headSize);
    waits.state = head;
  }
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

namespace {
struct Lifetime {
  int64_t begin = 0, end = 0; // op indices, inclusive
  bool live = false;
};

/// Each buffer's spans of life: from an Alloc to its Free (or the end of
/// the step), extended to the wait of any collective in flight on it. A
/// buffer allocated again after its Free (the simulator's rule: an Alloc
/// of a live buffer is ignored) has a span for each allocation; they are
/// rare, so the first span is kept per buffer and the later ones beside.
struct Lifetimes {
  std::vector<Lifetime> first;
  /// Per buffer, the index + 1 of its later spans in `later` (0: none;
  /// empty while no buffer has any).
  std::vector<uint32_t> moreOf;
  std::vector<std::vector<Lifetime>> later;

  /// Buffer b's later spans, made on first use.
  std::vector<Lifetime> &more(size_t b) {
    if (moreOf.empty())
      moreOf.assign(first.size(), 0);
    if (moreOf[b] == 0) {
      later.emplace_back();
      moreOf[b] = static_cast<uint32_t>(later.size());
    }
    return later[moreOf[b] - 1];
  }

  /// Calls f(span) for every span of buffer b, the first first.
  template <typename F> void each(size_t b, F f) const {
    f(first[b]);
    if (moreOf.empty() || moreOf[b] == 0)
      return;
    for (const Lifetime &l : later[moreOf[b] - 1])
      f(l);
  }
  bool whole(size_t b, int64_t last) const {
    return first[b].begin == 0 && first[b].end >= last;
  }
};

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

template <typename Ops>
Lifetimes lifetimes(const std::vector<Buffer> &buffers, const Ops &ops) {
  const int64_t last = static_cast<int64_t>(ops.size());
  const size_t n = buffers.size();
  Lifetimes life;
  life.first.resize(n);
  for (size_t b = 0; b < n; ++b)
    if (buffers[b].persistent)
      life.first[b] = {0, last, true};
  // The span open now per buffer: 0 none, 1 its first, k + 2 the k-th of
  // its later ones.
  std::vector<int32_t> open(n, 0);
  auto span = [&](size_t b, int32_t id) -> Lifetime & {
    return id == 1 ? life.first[b] : life.more(b)[static_cast<size_t>(id - 2)];
  };
  // The spans a collective in flight uses, until its wait.
  std::unordered_map<int64_t, std::vector<std::pair<size_t, int32_t>>> inFlight;
  for (size_t i = 0; i < ops.size(); ++i) {
    const OpKind kind = ops.kind(i);
    const int64_t at = static_cast<int64_t>(i);
    auto valid = [&](int64_t b) { return b >= 0 && b < static_cast<int64_t>(n); };
    if (kind == OpKind::Alloc) {
      const int64_t b = ops.target(i);
      if (valid(b) && !buffers[b].persistent && open[b] == 0) {
        if (!life.first[b].live) {
          life.first[b] = {at, last, true};
          open[b] = 1;
        } else {
          std::vector<Lifetime> &later = life.more(b);
          later.push_back({at, last, true});
          open[b] = static_cast<int32_t>(later.size()) + 1;
        }
      }
    }
    if (kind == OpKind::Free) {
      const int64_t b = ops.target(i);
      if (valid(b) && open[b] != 0) {
        span(b, open[b]).end = at;
        open[b] = 0;
      }
    }
    if (kind == OpKind::Collective) {
      std::vector<std::pair<size_t, int32_t>> used;
      ops.eachUsed(i, [&](int64_t b) {
        if (valid(b) && (open[b] != 0 || buffers[b].persistent))
          used.push_back({static_cast<size_t>(b), buffers[b].persistent ? 1 : open[b]});
      });
      if (!used.empty())
        inFlight[at] = std::move(used);
    }
    // A collective in flight keeps its buffers until its wait.
    if (kind == OpKind::Wait && ops.waitFor(i) >= 0)
      if (auto it = inFlight.find(ops.waitFor(i)); it != inFlight.end()) {
        for (auto [b, id] : it->second) {
          Lifetime &l = span(b, id);
          l.end = std::max(l.end, at);
        }
        inFlight.erase(it);
      }
  }
  return life;
}

} // namespace

namespace {
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

/// The lowest offset that no set in `sets` blocks for `size` bytes.
int64_t firstFit(const std::vector<const OffsetSet *> &sets, int64_t size) {
  // Each set moves x to its own first fit at or after x, past offsets it
  // blocks, so the sets agree on the lowest fit in any order: round the
  // sets until each has been asked, since x last moved, without moving it.
  int64_t x = 0;
  const size_t n = sets.size();
  for (size_t i = 0, still = 0; still < n; i = i + 1 == n ? 0 : i + 1) {
    const OffsetSet *set = sets[i];
    const int64_t next = set ? set->fit(x, size) : x;
    if (next != x) {
      x = next;
      still = 1;
    } else {
      ++still;
    }
  }
  return x;
}

/// The offsets taken by buffers live for part of the step, found by
/// lifetime: a segment tree over op indices in which every lifetime
/// [begin, end] is kept at the O(log n) nodes that cover it (`cover`), and
/// in `below` at those nodes and every ancestor of theirs. The buffers whose
/// lifetimes meet [begin, end] are those in `cover` of a node covering the
/// query or an ancestor of one, and those in `below` of a node covering the
/// query; so the offsets they take are the union of O(log n) offset sets,
/// whatever their number (many activations live from the forward to the
/// backward pass all meet each other: collecting them one by one per
/// buffer was quadratic). Sets are kept only for nodes that have one: a
/// node's set is found through pages of indices allocated where nodes are
/// used. A node within kLowHeights of the leaves keeps no `below`: it is
/// the union of the `cover` sets of the node and its few descendants,
/// which a query takes instead (most sets are near the leaves, and a
/// leaf's `below` is its `cover`).
class LifetimeOffsets {
public:
  explicit LifetimeOffsets(int64_t ops) {
    while (n < ops + 1)
      n <<= 1;
  }

  void insert(int64_t begin, int64_t end, int64_t lo, int64_t hi) {
    clearVisited();
    forCovering(begin, end, [&](int64_t node) {
      set(node, Cover).insert(lo, hi);
      for (int64_t a = node; a > 0; a >>= 1) {
        if (!visit(a))
          break;
        if (low(a))
          continue;
        // A node's `below` holds its children's: where it has the span
        // already, so has every ancestor (buffers that reuse a place
        // stop here, low in the tree).
        OffsetSet &below = set(a, Below);
        if (below.contains(lo, hi))
          break;
        below.insert(lo, hi);
      }
    });
  }

  /// Appends the sets whose union is the offsets taken by the lifetimes
  /// meeting [begin, end].
  void meeting(int64_t begin, int64_t end,
               std::vector<const OffsetSet *> &sets) {
    clearVisited();
    forCovering(begin, end, [&](int64_t node) {
      if (!low(node)) {
        if (const OffsetSet *b = find(node, Below))
          sets.push_back(b);
      } else {
        // The descendants' `cover` sets (the node's own is taken below).
        for (int64_t first = 2 * node, count = 2; first < 2 * n; first *= 2, count *= 2)
          for (int64_t d = first; d < first + count; ++d)
            if (const OffsetSet *c = find(d, Cover))
              sets.push_back(c);
      }
      for (int64_t a = node; a > 0; a >>= 1) {
        if (!visit(a))
          break;
        if (const OffsetSet *c = find(a, Cover))
          sets.push_back(c);
      }
    });
  }

private:
  enum Kind { Cover, Below };
  static constexpr int64_t kPage = 4096;
  /// Nodes this close to the leaves (0: the leaves) keep no `below`.
  static constexpr int kLowHeights = 4;
  bool low(int64_t node) const { return levelOf(n) - levelOf(node) < kLowHeights; }

  // The ancestors of a query's covering nodes, each visited once: a node's
  // ancestors were all visited with it. They are the nodes that hold part
  // of the range but not all of it (a node inside it would have covered
  // it), at most two a level; `overflow` keeps any others all the same.
  static int levelOf(int64_t node) {
    return 63 - __builtin_clzll(static_cast<unsigned long long>(node));
  }
  void clearVisited() {
    if (visited.empty())
      visited.assign(static_cast<size_t>(levelOf(n) + 2), {-1, -1});
    else
      std::fill(visited.begin(), visited.end(), std::array<int64_t, 2>{-1, -1});
    overflow.clear();
  }
  /// Whether `node` is new (and marks it visited).
  bool visit(int64_t node) {
    std::array<int64_t, 2> &level = visited[levelOf(node)];
    if (level[0] == node || level[1] == node)
      return false;
    if (level[0] < 0 || level[1] < 0) {
      level[level[0] < 0 ? 0 : 1] = node;
      return true;
    }
    if (std::find(overflow.begin(), overflow.end(), node) != overflow.end())
      return false;
    overflow.push_back(node);
    return true;
  }

  template <typename F> void forCovering(int64_t begin, int64_t end, F f) const {
    for (int64_t l = begin + n, r = end + n + 1; l < r; l >>= 1, r >>= 1) {
      if (l & 1)
        f(l++);
      if (r & 1)
        f(--r);
    }
  }

  // Index + 1 into `sets` of node `node`'s set of kind `k`; 0: none.
  uint32_t *slot(int64_t node, Kind k, bool create) {
    const int64_t key = 2 * node + k;
    const size_t page = static_cast<size_t>(key / kPage);
    if (page >= pages.size()) {
      if (!create)
        return nullptr;
      pages.resize(page + 1);
    }
    if (!pages[page]) {
      if (!create)
        return nullptr;
      pages[page] = std::make_unique<uint32_t[]>(kPage);
    }
    return &pages[page][key % kPage];
  }
  OffsetSet &set(int64_t node, Kind k) {
    uint32_t *i = slot(node, k, true);
    if (*i == 0) {
      sets.emplace_back();
      *i = static_cast<uint32_t>(sets.size());
    }
    return sets[*i - 1];
  }
  const OffsetSet *find(int64_t node, Kind k) {
    uint32_t *i = slot(node, k, false);
    return i && *i ? &sets[*i - 1] : nullptr;
  }

  int64_t n = 1;
  std::vector<std::unique_ptr<uint32_t[]>> pages;
  std::deque<OffsetSet> sets;
  std::vector<std::array<int64_t, 2>> visited; // per level of the tree
  std::vector<int64_t> overflow;
};

/// Range maximum over a fixed array, the first index on ties.
class RangeMax {
public:
  explicit RangeMax(const std::vector<int64_t> &values) : v(values) {
    while (n < static_cast<int64_t>(v.size()))
      n <<= 1;
    tree.assign(2 * n, -1);
    for (size_t i = 0; i < v.size(); ++i)
      tree[n + i] = static_cast<int64_t>(i);
    for (int64_t i = n - 1; i > 0; --i)
      tree[i] = better(tree[2 * i], tree[2 * i + 1]);
  }
  /// Index of the largest value in [lo, hi], the first on ties.
  int64_t query(int64_t lo, int64_t hi) const {
    int64_t left = -1, right = -1;
    for (int64_t l = lo + n, r = hi + n + 1; l < r; l >>= 1, r >>= 1) {
      if (l & 1)
        left = better(left, tree[l++]);
      if (r & 1)
        right = better(tree[--r], right);
    }
    return better(left, right);
  }

private:
  int64_t better(int64_t a, int64_t b) const {
    if (a < 0)
      return b;
    if (b < 0)
      return a;
    return v[b] > v[a] || (v[b] == v[a] && b < a) ? b : a;
  }
  const std::vector<int64_t> &v;
  int64_t n = 1;
  std::vector<int64_t> tree;
};
} // namespace

namespace {
/// planMemory over any ops: `buffers` placed for `life`, over `last` ops
/// on `world` ranks.
MemoryPlan placeBuffers(std::vector<Buffer> &buffers, int64_t world, const Lifetimes &life,
                        int64_t last, int64_t alignment) {
  std::vector<int64_t> sizes(buffers.size());
  for (size_t b = 0; b < buffers.size(); ++b) {
    double bytes = std::ceil(std::max(0.0, buffers[b].bytes));
    sizes[b] = (static_cast<int64_t>(bytes) + alignment - 1) / alignment * alignment;
  }
  std::vector<size_t> order;
  for (size_t b = 0; b < buffers.size(); ++b)
    if (life.first[b].live)
      order.push_back(b);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (sizes[a] != sizes[b])
      return sizes[a] > sizes[b];
    return life.first[a].begin < life.first[b].begin;
  });

  // Greedy by size, first fit: each buffer goes at the lowest offset that
  // no placed buffer it conflicts with (lifetimes overlap, ranks can meet)
  // covers. A buffer live for the whole step conflicts with every placed
  // buffer of its ranks, one live for part of it with every such whole-step
  // buffer and with the partial ones its lifetime meets; so the offsets
  // taken are kept per kind of buffer and rank, and only partial lifetimes
  // are searched.
  auto whole = [&](size_t b) { return life.whole(b, last); };
  OffsetSet all, shared, wholeAll, wholeShared;
  std::map<int64_t, OffsetSet> owned, wholeOwned;
  // Partial lifetimes: of every buffer (met by a buffer all ranks have), of
  // the buffers all ranks have, and of each rank's own (met by the buffers
  // of that rank).
  LifetimeOffsets partialAll(last), partialShared(last);
  std::map<int64_t, LifetimeOffsets> partialOwned;
  auto find = [](const std::map<int64_t, OffsetSet> &m, int64_t r) -> const OffsetSet * {
    auto it = m.find(r);
    return it == m.end() ? nullptr : &it->second;
  };
  // The partial lifetimes of the buffers all ranks have are looked up only
  // for a rank's own partial buffers: with none (the usual plan), they are
  // not kept.
  const bool ownedPartial = std::any_of(order.begin(), order.end(), [&](size_t b) {
    return buffers[b].onlyRank >= 0 && !whole(b) && sizes[b] > 0;
  });
  std::vector<const OffsetSet *> sets;
  for (size_t b : order) {
    const int64_t rank = buffers[b].onlyRank;
    const int64_t size = sizes[b];
    int64_t offset = 0;
    if (size > 0) {
      sets.clear();
      if (whole(b)) {
        if (rank < 0) {
          sets.push_back(&all);
        } else {
          sets.push_back(&shared);
          sets.push_back(find(owned, rank));
        }
      } else if (rank < 0) {
        sets.push_back(&wholeAll);
        life.each(b, [&](const Lifetime &l) { partialAll.meeting(l.begin, l.end, sets); });
      } else {
        sets.push_back(&wholeShared);
        sets.push_back(find(wholeOwned, rank));
        life.each(b, [&](const Lifetime &l) {
          partialShared.meeting(l.begin, l.end, sets);
          if (auto it = partialOwned.find(rank); it != partialOwned.end())
            it->second.meeting(l.begin, l.end, sets);
        });
      }
      offset = firstFit(sets, size);
    }
    buffers[b].offset = offset;
    const int64_t hi = offset + size;
    all.insert(offset, hi);
    (rank < 0 ? shared : owned[rank]).insert(offset, hi);
    if (whole(b)) {
      wholeAll.insert(offset, hi);
      (rank < 0 ? wholeShared : wholeOwned[rank]).insert(offset, hi);
    } else {
      life.each(b, [&](const Lifetime &l) {
        partialAll.insert(l.begin, l.end, offset, hi);
        if (rank >= 0)
          partialOwned.try_emplace(rank, last)
              .first->second.insert(l.begin, l.end, offset, hi);
        else if (ownedPartial)
          partialShared.insert(l.begin, l.end, offset, hi);
      });
    }
  }

  // Arena and peak per rank: the buffers every rank has, plus its own.
  MemoryPlan plan;
  const int64_t W = std::max<int64_t>(world, 1);
  plan.arenaBytes.assign(W, 0);
  plan.peakBytes.assign(W, 0);
  plan.peakOp.assign(W, -1);
  std::vector<int64_t> common(last + 2, 0);
  int64_t commonArena = 0;
  std::map<int64_t, std::vector<size_t>> byRank;
  for (size_t b : order) {
    const int64_t rank = buffers[b].onlyRank;
    if (rank >= 0) {
      if (rank < W)
        byRank[rank].push_back(b);
      continue;
    }
    commonArena = std::max(commonArena, buffers[b].offset + sizes[b]);
    life.each(b, [&](const Lifetime &l) {
      common[l.begin] += sizes[b];
      common[l.end + 1] -= sizes[b];
    });
  }
  for (int64_t i = 1; i <= last; ++i)
    common[i] += common[i - 1];
  common.resize(last + 1);
  RangeMax commonMax(common);
  const int64_t opsEnd = std::max<int64_t>(last - 1, 0);
  // The first op index of the largest value of `live`, scanned from 0;
  // the peak stays 0 at op -1 when nothing is ever live.
  auto record = [&](int64_t r, int64_t i, int64_t live) {
    if (static_cast<double>(live) > plan.peakBytes[r]) {
      plan.peakBytes[r] = static_cast<double>(live);
      plan.peakOp[r] = std::min(i, opsEnd);
    }
  };
  int64_t commonPeak = commonMax.query(0, last);
  for (int64_t r = 0; r < W; ++r) {
    auto it = byRank.find(r);
    if (it == byRank.end()) {
      plan.arenaBytes[r] = static_cast<double>(commonArena);
      record(r, commonPeak, common[commonPeak]);
      continue;
    }
    // The rank's own buffers change what is live only where one begins or
    // ends; between such points the common maximum decides.
    int64_t arena = commonArena;
    std::map<int64_t, int64_t> delta;
    for (size_t b : it->second) {
      arena = std::max(arena, buffers[b].offset + sizes[b]);
      life.each(b, [&](const Lifetime &l) {
        delta[l.begin] += sizes[b];
        delta[l.end + 1] -= sizes[b];
      });
    }
    plan.arenaBytes[r] = static_cast<double>(arena);
    int64_t own = 0, from = 0;
    for (auto [at, d] : delta) {
      if (at > from) {
        int64_t i = commonMax.query(from, std::min(at - 1, last));
        record(r, i, common[i] + own);
      }
      own += d;
      from = at;
      if (from > last)
        break;
    }
    if (from <= last) {
      int64_t i = commonMax.query(from, last);
      record(r, i, common[i] + own);
    }
  }
  return plan;
}
} // namespace

MemoryPlan planMemory(Step &s, int64_t alignment) {
  return placeBuffers(s.buffers, s.world, lifetimes(s.buffers, StepOps{s}),
                      static_cast<int64_t>(s.ops.size()), alignment);
}

MemoryPlan planMemory(BufferEvents &e, int64_t alignment) {
  return placeBuffers(e.buffers, e.world, lifetimes(e.buffers, EventOps{e}),
                      static_cast<int64_t>(e.events.size()), alignment);
}

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

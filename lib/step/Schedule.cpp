//===- Schedule.cpp - Bucketing and overlap -------------------------------===//
//
// Memory planning is in Memory.cpp, the verifier in VerifySchedule.cpp.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/step/Schedule.h"

#include "InternalError.h"
#include "ScheduleShared.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <numeric>
#include <set>
#include <string_view>
#include <tuple>

namespace mfsdp::step {

using detail::buffersConflict;

namespace {

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

/// A group's gathers at one point: the Allocs of the gathered buffer (and
/// of the staging its copied rows land in) followed by the collectives
/// writing them.
struct GatherBlock {
  size_t begin = 0, end = 0; // [begin, end) in the op list
  int64_t group = -1;
  Phase phase = Phase::Forward;
  double bytes = 0;
};

std::vector<GatherBlock> gatherBlocks(const Step &s) {
  std::vector<GatherBlock> blocks;
  for (size_t i = 0; i < s.ops.size(); ++i) {
    // A run of allocs, then of gathers each writing one of them.
    size_t j = i;
    std::vector<int64_t> allocated;
    while (j < s.ops.size() && s.ops[j].kind == OpKind::Alloc &&
           s.ops[j].writes.size() == 1) {
      allocated.push_back(s.ops[j].writes.front());
      ++j;
    }
    // The alloc of the run a gather writes (allocated.size(): none).
    auto writesOne = [&](size_t k) -> size_t {
      const Op &op = s.ops[k];
      if (!isGather(op) || op.writes.size() != 1)
        return allocated.size();
      return static_cast<size_t>(
          std::find(allocated.begin(), allocated.end(), op.writes.front()) - allocated.begin());
    };
    if (allocated.empty())
      continue;
    if (j >= s.ops.size() || writesOne(j) == allocated.size()) {
      i = j - 1; // no gather follows the run: none starts inside it either
      continue;
    }
    GatherBlock b;
    b.end = j;
    b.group = s.ops[j].group;
    b.phase = s.ops[j].phase;
    std::vector<bool> written(allocated.size(), false);
    while (b.end < s.ops.size() && s.ops[b.end].group == b.group) {
      const size_t a = writesOne(b.end);
      if (a == allocated.size())
        break;
      written[a] = true;
      ++b.end;
    }
    // The block starts at the first alloc its gathers write (one before
    // it is another op's): the staging of copied rows, then the gathered
    // buffer, which an all-gather-v of owned matrices writes or, with
    // every row copied, only the copy out of the staging.
    const size_t first = static_cast<size_t>(
        std::find(written.begin(), written.end(), true) - written.begin());
    b.begin = i + first;
    for (size_t k = first; k < allocated.size(); ++k)
      b.bytes += s.buffers[allocated[k]].bytes;
    blocks.push_back(b);
    i = b.end - 1;
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
    // program order: its first op on the compute stream, the copy out of
    // its gathered buffer when it has one (that copy waits for the
    // gather, so a prefetched gather goes before it).
    using Key = std::tuple<int64_t, int, int64_t>; // microbatch, phase, group
    std::map<Key, size_t> firstCompute;
    std::vector<Key> computeOrder;
    std::map<Key, size_t> orderOf; // key -> computeOrder index
    for (size_t i = 0; i < s.ops.size(); ++i) {
      const Op &op = s.ops[i];
      if (op.kind != OpKind::Compute || op.group < 0)
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
/// just after the next compute op of a unit (not a shard copy), so the
/// reduction overlaps it. Ops are
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
    // A unit's compute, not a shard copy: a copy is too short to hide the
    // reduction the free would wait for.
    bool compute = isUnitCompute(op);
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
    // A collective held for those in flight that uses a buffer of this op
    // (the gathered-Muon baseline under HSDP: a gradient's all-gather,
    // held behind the all-reduce over replicas, writes what the Muon step
    // reads) runs before it: the waits it was held for release it.
    for (const State::Blocked &b : state.blocked)
      if (buffersConflict(op, b.op))
        needed.insert(b.after.begin(), b.after.end());
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

} // namespace mfsdp::step

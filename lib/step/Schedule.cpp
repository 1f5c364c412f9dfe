//===- Schedule.cpp - Bucketing, overlap, memory and verification ---------===//
#include "mfsdp/step/Schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

namespace mfsdp::step {

namespace {

bool touches(const Op &op, int64_t buffer) {
  return std::find(op.reads.begin(), op.reads.end(), buffer) != op.reads.end() ||
         std::find(op.writes.begin(), op.writes.end(), buffer) != op.writes.end();
}

bool isGather(const Op &op) {
  return op.kind == OpKind::Collective &&
         (op.coll == CollKind::AllGather || op.coll == CollKind::AllGatherV) &&
         op.phase != Phase::Optimizer;
}

/// Rebuilds Wait::waitFor after ops moved: `order[i]` is the old index of
/// the op now at i.
void reorder(Step &s, const std::vector<int64_t> &order) {
  std::vector<int64_t> newIndex(s.ops.size(), -1);
  for (size_t i = 0; i < order.size(); ++i)
    newIndex[order[i]] = static_cast<int64_t>(i);
  std::vector<Op> ops;
  ops.reserve(order.size());
  for (int64_t old : order) {
    Op op = s.ops[old];
    if (op.kind == OpKind::Wait && op.waitFor >= 0)
      op.waitFor = newIndex[op.waitFor];
    ops.push_back(std::move(op));
  }
  s.ops = std::move(ops);
}

} // namespace

//===----------------------------------------------------------------------===//
// Bucketing
//===----------------------------------------------------------------------===//

int64_t bucketCollectives(Step &s, double limitBytes) {
  std::vector<Op> out;
  int64_t removed = 0;
  for (size_t i = 0; i < s.ops.size();) {
    if (s.ops[i].kind != OpKind::Collective || s.ops[i].async) {
      out.push_back(s.ops[i++]);
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
      Key key{static_cast<int>(op.coll), op.meshAxes, op.comm,
              static_cast<int>(op.phase), op.reads, op.writes, op.interNode};
      auto &list = open[key];
      bool merged = false;
      if (!list.empty()) {
        Op &b = buckets[list.back()];
        if (limitBytes <= 0 || b.collBytes + op.collBytes <= limitBytes) {
          b.collBytes += op.collBytes;
          b.params.insert(b.params.end(), op.params.begin(), op.params.end());
          if (!op.chunks.empty()) {
            if (b.chunks.empty())
              b.chunks.assign(op.chunks.size(), 0.0);
            for (size_t r = 0; r < op.chunks.size() && r < b.chunks.size(); ++r)
              b.chunks[r] += op.chunks[r];
          }
          b.name = fmt::format("bucket {} ({} tensors)", mfsdp::enumName(b.coll),
                               b.params.size());
          merged = true;
          ++removed;
        }
      }
      if (!merged) {
        list.push_back(buckets.size());
        buckets.push_back(op);
      }
    }
    for (Op &b : buckets)
      out.push_back(std::move(b));
    i = end;
  }
  // No waits exist yet (buckets are formed from synchronous collectives).
  s.ops = std::move(out);
  return removed;
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
  // 1. Prefetch: move each gather block before the compute of the group
  // `prefetch` groups earlier in program order (same phase).
  if (o.prefetch > 0) {
    std::vector<int64_t> order(s.ops.size());
    std::iota(order.begin(), order.end(), 0);
    std::vector<GatherBlock> blocks = gatherBlocks(s);
    // Where each group's compute starts, per phase, in program order.
    std::vector<std::pair<Phase, std::vector<size_t>>> firsts;
    std::map<std::pair<int, int64_t>, size_t> firstCompute;
    std::vector<std::pair<Phase, int64_t>> computeOrder;
    for (size_t i = 0; i < s.ops.size(); ++i) {
      const Op &op = s.ops[i];
      if (op.kind != OpKind::Compute || op.group < 0 || op.compute == "copy")
        continue;
      auto key = std::make_pair(static_cast<int>(op.phase), op.group);
      if (!firstCompute.count(key)) {
        firstCompute[key] = i;
        computeOrder.push_back({op.phase, op.group});
      }
    }
    // For each block: the group whose compute is `prefetch` groups before.
    std::map<size_t, size_t> moveBefore; // block begin -> target op index
    for (const GatherBlock &b : blocks) {
      auto it = std::find(computeOrder.begin(), computeOrder.end(),
                          std::make_pair(b.phase, b.group));
      if (it == computeOrder.end())
        continue;
      int64_t back = 0;
      auto target = it;
      while (back < o.prefetch && target != computeOrder.begin() &&
             std::prev(target)->first == b.phase) {
        --target;
        ++back;
      }
      if (back == 0)
        continue;
      // Memory: gathered bytes alive at once if we move this block.
      if (o.maxInflightBytes > 0) {
        double inflight = b.bytes;
        for (const GatherBlock &other : blocks)
          if (other.phase == b.phase &&
              std::find(target, it, std::make_pair(other.phase, other.group)) != it)
            inflight += other.bytes;
        if (inflight > o.maxInflightBytes)
          continue;
      }
      moveBefore[b.begin] = firstCompute[{static_cast<int>(target->first), target->second}];
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

  // 3. Optimizer order. Landing order (optimizerFill < 0): the last group
  // is reduced first in backward, so each group starts as soon as it can.
  // First units first (optimizerFill = k): k groups in landing order fill
  // the wait for the last reduction, then the rest in ascending group order.
  {
    size_t first = s.ops.size();
    for (size_t i = 0; i < s.ops.size(); ++i)
      if (s.ops[i].phase == Phase::Optimizer) {
        first = i;
        break;
      }
    bool tail = first < s.ops.size() &&
                std::all_of(s.ops.begin() + first, s.ops.end(), [](const Op &op) {
                  return op.phase == Phase::Optimizer;
                });
    if (tail) {
      std::vector<int64_t> head(first), opt;
      std::iota(head.begin(), head.end(), 0);
      // Allocs belong to the op after them, frees to the op before.
      std::vector<int64_t> group(s.ops.size(), -1);
      for (size_t i = first; i < s.ops.size(); ++i)
        group[i] = s.ops[i].group;
      for (size_t i = s.ops.size(); i-- > first;)
        if (s.ops[i].kind == OpKind::Alloc && i + 1 < s.ops.size())
          group[i] = group[i + 1];
      for (size_t i = first + 1; i < s.ops.size(); ++i)
        if (s.ops[i].kind == OpKind::Free)
          group[i] = group[i - 1];
      // Position of each group; ops of no group go last.
      std::set<int64_t> groups;
      for (size_t i = first; i < s.ops.size(); ++i)
        if (group[i] >= 0)
          groups.insert(group[i]);
      std::vector<int64_t> landing(groups.rbegin(), groups.rend());
      std::map<int64_t, int64_t> position;
      const int64_t fill =
          o.optimizerFill < 0
              ? static_cast<int64_t>(landing.size())
              : std::min<int64_t>(o.optimizerFill,
                                  static_cast<int64_t>(landing.size()));
      for (int64_t k = 0; k < fill; ++k)
        position[landing[k]] = k;
      int64_t next = fill;
      for (int64_t g : groups)
        if (!position.count(g))
          position[g] = next++;
      auto pos = [&](int64_t i) {
        return group[i] < 0 ? next : position[group[i]];
      };
      for (size_t i = first; i < s.ops.size(); ++i)
        opt.push_back(static_cast<int64_t>(i));
      std::stable_sort(opt.begin(), opt.end(),
                       [&](int64_t a, int64_t b) { return pos(a) < pos(b); });
      head.insert(head.end(), opt.begin(), opt.end());
      reorder(s, head);
    }
  }

  // 4. Async starts, each waited just before the first non-collective op
  // that reads or writes one of its buffers. Freeing a buffer a collective
  // still reads (the unreduced gradients) does not wait: the free moves to
  // just after the next compute op, so the reduction overlaps it.
  std::vector<Op> out;
  std::vector<std::pair<int64_t, std::vector<int64_t>>> pending; // out idx, buffers
  std::vector<Op> deferred;
  auto waitFor = [&](int64_t idx, Phase phase) {
    Op wait;
    wait.kind = OpKind::Wait;
    wait.phase = phase;
    wait.name = "wait " + out[idx].name;
    wait.waitFor = idx;
    wait.group = out[idx].group;
    out.push_back(wait);
  };
  auto flushFor = [&](const Op &op) {
    for (auto it = pending.begin(); it != pending.end();) {
      bool needs = false;
      for (int64_t buf : it->second)
        needs |= touches(op, buf);
      if (needs) {
        waitFor(it->first, op.phase);
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
  };
  auto pendingTouches = [&](const Op &op) {
    for (auto &[idx, bufs] : pending)
      for (int64_t buf : bufs)
        if (touches(op, buf))
          return true;
    return false;
  };
  auto emit = [&](Op op) {
    if (op.kind != OpKind::Collective)
      flushFor(op);
    if (op.kind == OpKind::Collective) {
      op.async = true;
      std::vector<int64_t> bufs = op.reads;
      bufs.insert(bufs.end(), op.writes.begin(), op.writes.end());
      pending.push_back({static_cast<int64_t>(out.size()), bufs});
    }
    out.push_back(std::move(op));
  };
  for (size_t i = 0; i < s.ops.size(); ++i) {
    Op op = s.ops[i];
    if (op.kind == OpKind::Wait)
      continue; // rebuilt here
    if (op.kind == OpKind::Free && op.phase != Phase::Optimizer &&
        pendingTouches(op)) {
      deferred.push_back(std::move(op));
      continue;
    }
    bool compute = op.kind == OpKind::Compute;
    emit(std::move(op));
    if (compute && !deferred.empty()) {
      std::vector<Op> now;
      now.swap(deferred);
      for (Op &f : now)
        emit(std::move(f));
    }
  }
  for (Op &f : deferred)
    emit(std::move(f));
  for (auto &[idx, bufs] : pending)
    waitFor(idx, out[idx].phase);
  s.ops = std::move(out);
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

namespace {
struct Lifetime {
  int64_t begin = 0, end = 0; // op indices, inclusive
  bool live = false;
};

std::vector<Lifetime> lifetimes(const Step &s) {
  const int64_t last = static_cast<int64_t>(s.ops.size());
  std::vector<Lifetime> life(s.buffers.size());
  for (size_t b = 0; b < s.buffers.size(); ++b)
    if (s.buffers[b].persistent)
      life[b] = {0, last, true};
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const Op &op = s.ops[i];
    if (op.kind == OpKind::Alloc && !op.writes.empty()) {
      int64_t b = op.writes.front();
      if (b >= 0 && b < static_cast<int64_t>(life.size()) && !s.buffers[b].persistent)
        life[b] = {static_cast<int64_t>(i), last, true};
    }
    if (op.kind == OpKind::Free && !op.writes.empty()) {
      int64_t b = op.writes.front();
      if (b >= 0 && b < static_cast<int64_t>(life.size()) && life[b].live)
        life[b].end = static_cast<int64_t>(i);
    }
  }
  // A collective in flight keeps its buffers until its wait.
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const Op &op = s.ops[i];
    if (op.kind != OpKind::Wait || op.waitFor < 0)
      continue;
    const Op &c = s.ops[op.waitFor];
    for (int64_t b : c.reads)
      if (b >= 0 && b < static_cast<int64_t>(life.size()))
        life[b].end = std::max(life[b].end, static_cast<int64_t>(i));
    for (int64_t b : c.writes)
      if (b >= 0 && b < static_cast<int64_t>(life.size()))
        life[b].end = std::max(life[b].end, static_cast<int64_t>(i));
  }
  return life;
}

bool onRank(const Buffer &b, int64_t r) { return b.onlyRank < 0 || b.onlyRank == r; }
} // namespace

MemoryPlan planMemory(Step &s, int64_t alignment) {
  std::vector<Lifetime> life = lifetimes(s);
  auto size = [&](size_t b) {
    double bytes = std::ceil(std::max(0.0, s.buffers[b].bytes));
    return static_cast<int64_t>((static_cast<int64_t>(bytes) + alignment - 1) /
                                alignment * alignment);
  };
  std::vector<size_t> order;
  for (size_t b = 0; b < s.buffers.size(); ++b)
    if (life[b].live)
      order.push_back(b);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (size(a) != size(b))
      return size(a) > size(b);
    return life[a].begin < life[b].begin;
  });
  std::vector<size_t> placed;
  for (size_t b : order) {
    // Intervals taken by conflicting buffers, lowest offset first.
    std::vector<std::pair<int64_t, int64_t>> taken;
    for (size_t p : placed) {
      bool time = life[p].begin <= life[b].end && life[b].begin <= life[p].end;
      bool ranks = s.buffers[p].onlyRank < 0 || s.buffers[b].onlyRank < 0 ||
                   s.buffers[p].onlyRank == s.buffers[b].onlyRank;
      if (time && ranks)
        taken.push_back({s.buffers[p].offset, s.buffers[p].offset + size(p)});
    }
    std::sort(taken.begin(), taken.end());
    int64_t offset = 0;
    for (auto [lo, hi] : taken) {
      if (offset + size(b) <= lo)
        break;
      offset = std::max(offset, hi);
    }
    s.buffers[b].offset = offset;
    placed.push_back(b);
  }
  MemoryPlan plan;
  const int64_t W = std::max<int64_t>(s.world, 1);
  plan.arenaBytes.assign(W, 0);
  plan.peakBytes.assign(W, 0);
  plan.peakOp.assign(W, -1);
  for (int64_t r = 0; r < W; ++r) {
    for (size_t b : placed)
      if (onRank(s.buffers[b], r))
        plan.arenaBytes[r] = std::max(
            plan.arenaBytes[r], static_cast<double>(s.buffers[b].offset + size(b)));
    for (size_t i = 0; i <= s.ops.size(); ++i) {
      double live = 0;
      for (size_t b : placed)
        if (onRank(s.buffers[b], r) && life[b].begin <= static_cast<int64_t>(i) &&
            static_cast<int64_t>(i) <= life[b].end)
          live += static_cast<double>(size(b));
      if (live > plan.peakBytes[r]) {
        plan.peakBytes[r] = live;
        plan.peakOp[r] = static_cast<int64_t>(std::min(i, s.ops.size() - 1));
      }
    }
  }
  return plan;
}

//===----------------------------------------------------------------------===//
// Verification
//===----------------------------------------------------------------------===//

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

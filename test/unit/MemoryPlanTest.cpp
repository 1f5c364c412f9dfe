//===- MemoryPlanTest.cpp - planMemory against the quadratic reference ----===//
//
// planMemory places buffers with interval sets and a lifetime index and
// computes each rank's peak from the common live profile plus the rank's
// own buffers. The reference below is the direct form of the same
// algorithm (every placed buffer checked for each new one, every op
// scanned for every rank); on random steps with shared and per-rank
// buffers, whole-step and partial lifetimes, zero-byte buffers, async
// collectives and ranks with no buffers of their own, both must give the
// same offsets, arenas, peaks and peak ops.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/step/Schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <tuple>

using namespace mfsdp::step;

namespace {

struct Life {
  int64_t begin = 0, end = 0;
};

/// Each buffer's spans: Alloc to Free (an Alloc after the Free opens
/// another), each extended to the wait of a collective in flight on it.
std::vector<std::vector<Life>> referenceLifetimes(const Step &s) {
  const int64_t last = static_cast<int64_t>(s.ops.size());
  std::vector<std::vector<Life>> life(s.buffers.size());
  std::vector<bool> open(s.buffers.size(), false);
  for (size_t b = 0; b < s.buffers.size(); ++b)
    if (s.buffers[b].persistent)
      life[b].push_back({0, last});
  // Collective op -> (buffer, span index) it uses.
  std::map<int64_t, std::vector<std::pair<int64_t, size_t>>> uses;
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const Op &op = s.ops[i];
    const int64_t at = static_cast<int64_t>(i);
    if (op.kind == OpKind::Alloc && !s.buffers[op.writes[0]].persistent &&
        !open[op.writes[0]]) {
      life[op.writes[0]].push_back({at, last});
      open[op.writes[0]] = true;
    }
    if (op.kind == OpKind::Free && open[op.writes[0]]) {
      life[op.writes[0]].back().end = at;
      open[op.writes[0]] = false;
    }
    if (op.kind == OpKind::Collective)
      for (const auto &list : {op.reads, op.writes})
        for (int64_t b : list)
          if (open[b] || s.buffers[b].persistent)
            uses[at].push_back({b, life[b].size() - 1});
    if (op.kind == OpKind::Wait)
      for (auto [b, k] : uses[op.waitFor])
        life[b][k].end = std::max(life[b][k].end, at);
  }
  return life;
}

bool meet(const std::vector<Life> &a, const std::vector<Life> &b) {
  for (const Life &x : a)
    for (const Life &y : b)
      if (x.begin <= y.end && y.begin <= x.end)
        return true;
  return false;
}

/// The quadratic planner, kept as the specification.
MemoryPlan referencePlan(Step &s, int64_t alignment) {
  std::vector<std::vector<Life>> life = referenceLifetimes(s);
  auto size = [&](size_t b) {
    double bytes = std::ceil(std::max(0.0, s.buffers[b].bytes));
    return (static_cast<int64_t>(bytes) + alignment - 1) / alignment * alignment;
  };
  std::vector<size_t> order;
  for (size_t b = 0; b < s.buffers.size(); ++b)
    if (!life[b].empty())
      order.push_back(b);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (size(a) != size(b))
      return size(a) > size(b);
    return life[a].front().begin < life[b].front().begin;
  });
  std::vector<size_t> placed;
  for (size_t b : order) {
    std::vector<std::pair<int64_t, int64_t>> taken;
    for (size_t p : placed) {
      bool time = meet(life[p], life[b]);
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
  auto onRank = [](const Buffer &b, int64_t r) {
    return b.onlyRank < 0 || b.onlyRank == r;
  };
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
        for (const Life &l : life[b])
          if (onRank(s.buffers[b], r) && l.begin <= static_cast<int64_t>(i) &&
              static_cast<int64_t>(i) <= l.end)
            live += static_cast<double>(size(b));
      if (live > plan.peakBytes[r]) {
        plan.peakBytes[r] = live;
        plan.peakOp[r] = static_cast<int64_t>(std::min(i, s.ops.size() - 1));
      }
    }
  }
  return plan;
}

/// A random program: persistent buffers (some per rank), temporaries
/// allocated and freed in order, some filled by async collectives waited
/// for later, some never freed.
Step randomStep(std::mt19937 &rng, int64_t world, int nbuf) {
  Step s;
  s.world = world;
  auto pick = [&](int64_t n) {
    return std::uniform_int_distribution<int64_t>(0, n - 1)(rng);
  };
  // Few distinct sizes, so ties in the size order and touching intervals
  // are common; some zero-byte buffers.
  const double sizes[] = {0, 1, 7, 64, 64, 100, 256, 256, 300, 1000};
  for (int b = 0; b < nbuf; ++b) {
    Buffer buf;
    buf.name = "b" + std::to_string(b);
    buf.bytes = sizes[pick(10)];
    buf.persistent = pick(3) == 0;
    // Ranks beyond the world are kept out of the per-rank figures.
    buf.onlyRank = pick(3) == 0 ? pick(world + 1) : -1;
    s.buffers.push_back(buf);
  }
  std::vector<int64_t> liveTemps, freedTemps;
  std::vector<std::pair<int64_t, std::vector<int64_t>>> inflight;
  for (int b = 0; b < nbuf; ++b) {
    Op a;
    a.kind = OpKind::Alloc;
    a.writes = {b};
    s.ops.push_back(a);
    if (!s.buffers[b].persistent)
      liveTemps.push_back(b);
    // Now and then a collective from a live buffer into this one.
    if (pick(4) == 0 && !liveTemps.empty()) {
      Op c;
      c.kind = OpKind::Collective;
      c.async = true;
      c.reads = {liveTemps[pick(static_cast<int64_t>(liveTemps.size()))]};
      c.writes = {b};
      s.ops.push_back(c);
      inflight.push_back({static_cast<int64_t>(s.ops.size()) - 1, {}});
    }
    if (pick(3) == 0 && !inflight.empty()) {
      Op w;
      w.kind = OpKind::Wait;
      w.waitFor = inflight.front().first;
      inflight.erase(inflight.begin());
      s.ops.push_back(w);
    }
    // Free a random temporary (not always: some live to the end).
    if (pick(2) == 0 && !liveTemps.empty()) {
      int64_t k = pick(static_cast<int64_t>(liveTemps.size()));
      Op f;
      f.kind = OpKind::Free;
      f.writes = {liveTemps[k]};
      freedTemps.push_back(liveTemps[k]);
      liveTemps.erase(liveTemps.begin() + k);
      s.ops.push_back(f);
    }
    // Now and then a freed temporary allocated again: another span.
    if (pick(4) == 0 && !freedTemps.empty()) {
      int64_t k = pick(static_cast<int64_t>(freedTemps.size()));
      Op a;
      a.kind = OpKind::Alloc;
      a.writes = {freedTemps[k]};
      liveTemps.push_back(freedTemps[k]);
      freedTemps.erase(freedTemps.begin() + k);
      s.ops.push_back(a);
    }
    if (pick(3) == 0) {
      Op c;
      c.kind = OpKind::Compute;
      s.ops.push_back(c);
    }
  }
  for (auto &[idx, unused] : inflight) {
    Op w;
    w.kind = OpKind::Wait;
    w.waitFor = idx;
    s.ops.push_back(w);
  }
  return s;
}

void expectSamePlan(Step s, int64_t alignment) {
  Step ref = s;
  MemoryPlan want = referencePlan(ref, alignment);
  MemoryPlan got = planMemory(s, alignment);
  for (size_t b = 0; b < s.buffers.size(); ++b)
    ASSERT_EQ(s.buffers[b].offset, ref.buffers[b].offset) << "buffer " << b;
  ASSERT_EQ(got.arenaBytes, want.arenaBytes);
  ASSERT_EQ(got.peakBytes, want.peakBytes);
  ASSERT_EQ(got.peakOp, want.peakOp);
  // And the placement checks out on its own.
  std::vector<ScheduleIssue> issues = verifyPlacement(s);
  ASSERT_TRUE(issues.empty()) << issues.front().message;
}

} // namespace

TEST(MemoryPlan, MatchesTheQuadraticPlannerOnRandomSteps) {
  std::mt19937 rng(12);
  for (int trial = 0; trial < 400; ++trial) {
    int64_t world = 1 + trial % 5;
    int nbuf = 1 + trial % 40;
    Step s = randomStep(rng, world, nbuf);
    SCOPED_TRACE("trial " + std::to_string(trial));
    expectSamePlan(s, trial % 2 ? 1 : 64);
  }
}

// A buffer allocated twice is live in both spans: before, only the last
// allocation was kept, and a buffer live in the first span alone was
// placed over it.
TEST(MemoryPlan, ABufferAllocatedAgainKeepsBothSpans) {
  Step s;
  s.world = 1;
  s.buffers = {Buffer{}, Buffer{}};
  s.buffers[0].name = "a";
  s.buffers[1].name = "b";
  s.buffers[0].bytes = s.buffers[1].bytes = 256;
  auto op = [&](OpKind k, int64_t b) {
    Op o;
    o.kind = k;
    if (k == OpKind::Compute)
      o.reads = {0, 1};
    else
      o.writes = {b};
    s.ops.push_back(o);
  };
  op(OpKind::Alloc, 0);  // 0: a's first span
  op(OpKind::Alloc, 1);  // 1
  op(OpKind::Compute, -1); // 2: a and b both live
  op(OpKind::Free, 0);   // 3
  op(OpKind::Free, 1);   // 4
  op(OpKind::Alloc, 0);  // 5: a's second span
  op(OpKind::Free, 0);   // 6
  MemoryPlan plan = planMemory(s, 256);
  EXPECT_NE(s.buffers[0].offset, s.buffers[1].offset);
  EXPECT_EQ(plan.peakBytes, std::vector<double>{512});
  EXPECT_EQ(plan.arenaBytes, std::vector<double>{512});
  expectSamePlan(s, 256);
}

TEST(MemoryPlan, EmptyStep) {
  Step s;
  s.world = 3;
  MemoryPlan plan = planMemory(s, 256);
  EXPECT_EQ(plan.arenaBytes, std::vector<double>(3, 0.0));
  EXPECT_EQ(plan.peakOp, std::vector<int64_t>(3, -1));
}

// verifyPlacement: two buffers live at once that share bytes are found,
// whatever placed them; disjoint lifetimes, other ranks' buffers and the
// same buffer's later span are not overlaps.
TEST(MemoryPlan, VerifyPlacementFindsOverlaps) {
  auto step = [](std::vector<std::tuple<double, int64_t, bool, int64_t>> bufs) {
    Step s;
    s.world = 2;
    for (size_t i = 0; i < bufs.size(); ++i) {
      Buffer b;
      b.name = "b" + std::to_string(i);
      std::tie(b.bytes, b.offset, b.persistent, b.onlyRank) = bufs[i];
      s.buffers.push_back(b);
    }
    return s;
  };
  auto op = [](Step &s, OpKind k, int64_t b) {
    Op o;
    o.kind = k;
    o.writes = {b};
    s.ops.push_back(o);
  };
  // Live at once, [0, 300) and [256, 512): one issue, at the second alloc.
  Step s = step({{300, 0, false, -1}, {256, 256, false, -1}});
  op(s, OpKind::Alloc, 0);
  op(s, OpKind::Alloc, 1);
  std::vector<ScheduleIssue> issues = verifyPlacement(s);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].op, 1);
  EXPECT_NE(issues[0].message.find("buffer 'b1' at bytes [256, 512) of the arena overlaps "
                                   "'b0' at [0, 300) while both are live"),
            std::string::npos)
      << issues[0].message;
  // The first freed before the second: no overlap; nor when it is freed and
  // allocated again after the second's free.
  s.ops.clear();
  op(s, OpKind::Alloc, 0);
  op(s, OpKind::Free, 0);
  op(s, OpKind::Alloc, 1);
  op(s, OpKind::Free, 1);
  op(s, OpKind::Alloc, 0);
  EXPECT_TRUE(verifyPlacement(s).empty());
  // ... but its second span while the second is live is one.
  s.ops.clear();
  op(s, OpKind::Alloc, 0);
  op(s, OpKind::Free, 0);
  op(s, OpKind::Alloc, 1);
  op(s, OpKind::Alloc, 0);
  issues = verifyPlacement(s);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].op, 3);
  // Each on a rank of its own: the same bytes on two ranks are no overlap;
  // one on rank 1 against one on every rank is, on rank 1.
  s = step({{256, 0, false, 0}, {256, 0, false, 1}, {256, 0, false, -1}});
  op(s, OpKind::Alloc, 0);
  op(s, OpKind::Alloc, 1);
  EXPECT_TRUE(verifyPlacement(s).empty());
  op(s, OpKind::Alloc, 2);
  issues = verifyPlacement(s);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_NE(issues[0].message.find("on rank 0"), std::string::npos) << issues[0].message;
  // Persistent buffers are live all step: two that overlap are found before
  // any op; a transient one over a persistent one at its alloc.
  s = step({{512, 0, true, -1}, {256, 256, true, -1}, {256, 0, false, -1}});
  op(s, OpKind::Alloc, 2);
  issues = verifyPlacement(s);
  ASSERT_EQ(issues.size(), 2u);
  EXPECT_EQ(issues[0].op, -1);
  EXPECT_EQ(issues[1].op, 0);
  // Unplaced buffers (offset -1) are not checked.
  s = step({{256, -1, false, -1}, {256, -1, false, -1}});
  op(s, OpKind::Alloc, 0);
  op(s, OpKind::Alloc, 1);
  EXPECT_TRUE(verifyPlacement(s).empty());
}

// A buffer every rank has against the buffers of single ranks: the
// persistent ones of every rank (an owner's state, kept as one union of
// spans) and the transient ones live at the time. Each overlap is found on
// its rank and names the buffer it meets; a buffer in the gaps between
// other ranks' buffers is none.
TEST(MemoryPlan, VerifyPlacementSharedAgainstEachRanksBuffers) {
  Step s;
  s.world = 4;
  auto add = [&](double bytes, int64_t offset, bool persistent, int64_t rank) {
    Buffer b;
    b.name = "b" + std::to_string(s.buffers.size());
    b.bytes = bytes;
    b.offset = offset;
    b.persistent = persistent;
    b.onlyRank = rank;
    s.buffers.push_back(b);
    return static_cast<int64_t>(s.buffers.size()) - 1;
  };
  auto op = [&](OpKind k, int64_t b) {
    Op o;
    o.kind = k;
    o.writes = {b};
    s.ops.push_back(o);
  };
  // Persistent: rank 0 at [0, 256), rank 1 at [256, 512), rank 2 at
  // [1024, 1280) (touching spans merge in the union; a gap at [512, 1024)).
  add(256, 0, true, 0);
  add(256, 256, true, 1);
  add(256, 1024, true, 2);
  const int64_t gap = add(512, 512, false, -1);      // b3: in the gap
  const int64_t onRank2 = add(256, 1100, false, -1); // b4: meets b2
  const int64_t rank3 = add(128, 2048, false, 3);    // b5: rank 3's, transient
  const int64_t overRank3 = add(64, 2100, false, -1); // b6: meets b5 while live
  op(OpKind::Alloc, gap);
  op(OpKind::Free, gap);
  EXPECT_TRUE(verifyPlacement(s).empty());
  op(OpKind::Alloc, onRank2);
  std::vector<ScheduleIssue> issues = verifyPlacement(s);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].op, 2);
  EXPECT_NE(issues[0].message.find("'b4' at bytes [1100, 1356) of the arena overlaps 'b2' "
                                   "at [1024, 1280) while both are live on rank 2"),
            std::string::npos)
      << issues[0].message;
  // A transient buffer of rank 3: met while it is live, not after its free.
  s.ops.clear();
  op(OpKind::Alloc, rank3);
  op(OpKind::Alloc, overRank3);
  issues = verifyPlacement(s);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].op, 1);
  EXPECT_NE(issues[0].message.find("overlaps 'b5' at [2048, 2176) while both are live on "
                                    "rank 3"),
            std::string::npos)
      << issues[0].message;
  s.ops.clear();
  op(OpKind::Alloc, rank3);
  op(OpKind::Free, rank3);
  op(OpKind::Alloc, overRank3);
  EXPECT_TRUE(verifyPlacement(s).empty());
  // A persistent buffer every rank has over rank 1's: found before any op.
  s.ops.clear();
  add(64, 300, true, -1);
  issues = verifyPlacement(s);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].op, -1);
  EXPECT_NE(issues[0].message.find("overlaps 'b1' at [256, 512) while both are live on "
                                    "rank 1"),
            std::string::npos)
      << issues[0].message;
}

// The same buffers allocated and freed in the same order, as a step's ops
// or as bare events (BufferEvents, what the step library's memory plan is
// placed over): the same offsets, arenas, peaks and peak ops, and the
// same overlaps found once two buffers are moved onto one place.
TEST(MemoryPlan, BufferEventsPlaceAsAStepOfTheirAllocsAndFrees) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    Step random = randomStep(rng, 1 + trial % 4, 2 + trial % 30);
    Step s;
    s.world = random.world;
    s.buffers = random.buffers;
    BufferEvents e;
    e.world = random.world;
    e.buffers = random.buffers;
    for (const Op &op : random.ops) {
      if ((op.kind != OpKind::Alloc && op.kind != OpKind::Free) || op.writes.empty())
        continue;
      s.ops.push_back(op);
      e.events.push_back({op.kind == OpKind::Alloc, op.writes.front()});
    }
    const MemoryPlan fromStep = planMemory(s, 64);
    const MemoryPlan fromEvents = planMemory(e, 64);
    EXPECT_EQ(fromEvents.arenaBytes, fromStep.arenaBytes);
    EXPECT_EQ(fromEvents.peakBytes, fromStep.peakBytes);
    EXPECT_EQ(fromEvents.peakOp, fromStep.peakOp);
    for (size_t b = 0; b < s.buffers.size(); ++b)
      EXPECT_EQ(e.buffers[b].offset, s.buffers[b].offset) << "buffer " << b;
    EXPECT_TRUE(verifyPlacement(e).empty());
    // Every buffer at offset 0: the overlaps of both forms are the same.
    for (size_t b = 0; b < s.buffers.size(); ++b)
      s.buffers[b].offset = e.buffers[b].offset = 0;
    const std::vector<ScheduleIssue> a = verifyPlacement(s), c = verifyPlacement(e);
    ASSERT_EQ(a.size(), c.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].op, c[i].op);
      EXPECT_EQ(a[i].message, c[i].message);
    }
  }
}

//===- OwnerAssignment.cpp - Matrix owners balanced by optimizer work -----===//
//
// Balanced (ours):
//   1. LPT: items by cost descending (ties: memory descending, then lower
//      index), each onto the rank with the least owned cost; ranks whose cost
//      is within a relative 1e-9 of the least count as tied and are split by
//      least memory (same tolerance), then lowest rank.
//   2. Max-rank repair: repeatedly take the most loaded rank M (lowest rank
//      among those tied at the maximum) and apply the single move of one of
//      its items, or swap of one of its items with a cheaper item of another
//      rank, that gives the smallest maximum of the two ranks involved,
//      provided that maximum is below M's cost by more than the tolerance.
//      Stops when M cannot be improved (then the global maximum cannot fall
//      by such a step either) or after a fixed work budget. Only ever lowers
//      the maximum, so LPT's 4/3 - 1/(3W) guarantee is kept.
//   3. Fan-out refinement (refineFanout): swaps the owners of two
//      interchangeable items (same shapeKey, and bitwise equal cost, memory
//      and bytes) that sit in different groups on different ranks, which
//      leaves every rank's cost and memory unchanged. Groups are visited in
//      order; for the lowest rank r1 holding the largest share of group g it
//      looks for an item a of g on r1 and an item b of another group g2 on a
//      rank r2 with share_g(r2) + bytes < share_g(r1), such that g2's share
//      on r1 after the swap stays <= g2's current maximum share. Among those
//      it applies the swap that lowers sum over groups and ranks of
//      (share / mean share)^2 the most (strict decrease required, so the
//      process terminates); a fixed number of passes and a per-item scan cap
//      bound the work.
//
// MatrixFSDP (baseline, its default "role_greedy" planner): groups (units)
// in order; within a group LPT by element count onto the rank with the
// smallest cumulative element load, ties lowest rank. Loads carry over from
// group to group, but they count elements, not Newton-Schulz cost, and each
// unit is placed before the next is seen. RoundRobin: item i on i mod W.
//
// Everything is deterministic: no hashing order, no time, no randomness is
// observable in the output. No exceptions are thrown here.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/planner/OwnerAssignment.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>
#include <utility>

namespace mfsdp::planner {

namespace {

/// Relative tolerance under which two costs (or memories, shares) are equal.
constexpr double kRelTol = 1e-9;
/// Max-rank repair: at most this many candidate evaluations in total.
constexpr int64_t kRepairWorkBudget = int64_t(1) << 22;
/// Fan-out refinement: passes over all groups.
constexpr int kFanoutPasses = 6;
/// Fan-out refinement: at most this many partner items visited and
/// evaluated per (item class, target rank), and evaluated per candidate item
/// a in total.
constexpr int64_t kFanoutBucketVisit = 256;
constexpr int64_t kFanoutBucketScan = 32;
constexpr int64_t kFanoutScanPerItem = 8192;
/// Fan-out refinement uses a dense groups x ranks share table; above this
/// many cells (pathological group numbering) it is skipped. Its (class,
/// rank) index of partners is dense too up to this many cells.
constexpr size_t kMaxShareCells = size_t(1) << 22;

/// A finite, non-negative value, else 0 (keeps orderings well defined).
double clean(double v) { return std::isfinite(v) && v > 0 ? v : 0.0; }

double tolOf(double a, double b) {
  return kRelTol * std::max(std::fabs(a), std::fabs(b));
}

size_t effectiveWorld(int64_t world) {
  return world < 1 ? size_t(1) : static_cast<size_t>(world);
}

//===----------------------------------------------------------------------===//
// Balanced, step 1: LPT by cost.
//===----------------------------------------------------------------------===//

std::vector<int64_t> lptByCost(const std::vector<double> &cost,
                               const std::vector<double> &mem, size_t world) {
  const size_t n = cost.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (cost[a] != cost[b])
      return cost[a] > cost[b];
    if (mem[a] != mem[b])
      return mem[a] > mem[b];
    return a < b;
  });

  std::vector<double> load(world, 0.0), used(world, 0.0);
  std::vector<int64_t> owner(n, 0);
  for (size_t i : order) {
    double c0 = load[0];
    for (size_t r = 1; r < world; ++r)
      c0 = std::min(c0, load[r]);
    const double cLim = c0 + tolOf(c0, cost[i]);
    double m0 = std::numeric_limits<double>::infinity();
    for (size_t r = 0; r < world; ++r)
      if (load[r] <= cLim)
        m0 = std::min(m0, used[r]);
    const double mLim = m0 + tolOf(m0, mem[i]);
    size_t pick = 0;
    for (size_t r = 0; r < world; ++r)
      if (load[r] <= cLim && used[r] <= mLim) {
        pick = r;
        break;
      }
    owner[i] = static_cast<int64_t>(pick);
    load[pick] += cost[i];
    used[pick] += mem[i];
  }
  return owner;
}

//===----------------------------------------------------------------------===//
// Balanced, step 2: moves and swaps off the most loaded rank.
//===----------------------------------------------------------------------===//

/// A rank's items by cost: for each cost (ascending), its items (ascending
/// index). A model repeats a few shapes, so a rank holds many items of few
/// costs: the steps below look costs up and take an item by its cost, and
/// a move touches one cost's items, never the whole rank's.
using RankItems = std::map<double, std::set<size_t>>;

void takeItem(RankItems &items, double cost, size_t item) {
  auto it = items.find(cost);
  it->second.erase(item);
  if (it->second.empty())
    items.erase(it);
}

void putItem(RankItems &items, double cost, size_t item) { items[cost].insert(item); }

void repairMax(const std::vector<double> &cost, size_t world,
               std::vector<int64_t> &owner) {
  const size_t n = cost.size();
  if (world < 2 || n < 2)
    return;
  std::vector<double> load(world, 0.0);
  std::vector<RankItems> lists(world);
  for (size_t i = 0; i < n; ++i) { // ascending index: each set grows at its end
    load[owner[i]] += cost[i];
    std::set<size_t> &same = lists[owner[i]][cost[i]];
    same.insert(same.end(), i);
  }

  using CostItems = RankItems::const_iterator;
  std::vector<CostItems> distinct; // per step: M's costs worth trying
  int64_t work = 0;
  const size_t maxIters = 4 * n + 4 * world;
  for (size_t iter = 0; iter < maxIters && work < kRepairWorkBudget; ++iter) {
    double mx = load[0];
    for (size_t r = 1; r < world; ++r)
      mx = std::max(mx, load[r]);
    if (!(mx > 0))
      break;
    const double mxTol = tolOf(mx, mx);
    size_t m = 0;
    while (load[m] < mx - mxTol)
      ++m;
    const double lm = load[m];
    const double tol = tolOf(lm, lm);
    const RankItems &lmList = lists[m];
    // Each cost on M worth moving, tried with its first (lowest-index)
    // item: items of equal cost give the same steps.
    distinct.clear();
    for (auto it = lmList.begin(); it != lmList.end(); ++it)
      if (it->first > tol)
        distinct.push_back(it);

    double bestMax = lm - tol; // a step must end strictly below this
    const size_t npos = std::numeric_limits<size_t>::max();
    size_t bestR = npos;
    double bestCa = 0, bestCb = 0;
    bool bestSwap = false;
    for (size_t r = 0; r < world; ++r) {
      if (r == m)
        continue;
      const double gap = lm - load[r];
      if (!(gap > 2 * tol))
        continue;
      const RankItems &rList = lists[r];
      for (CostItems ia : distinct) {
        const double ca = ia->first;
        ++work;
        // Move a onto r.
        {
          const double nm = std::max(lm - ca, load[r] + ca);
          if (nm < bestMax) {
            bestMax = nm;
            bestR = r;
            bestCa = ca;
            bestSwap = false;
          }
        }
        // Swap a with b on r; the ideal b costs ca - gap / 2: the costs
        // on either side of it.
        const double want = ca - gap / 2;
        const CostItems hi = rList.lower_bound(want);
        for (size_t k = 0; k < 2; ++k) {
          if (k == 0 && hi == rList.begin())
            continue;
          const CostItems ib = k == 0 ? std::prev(hi) : hi;
          if (ib == rList.end())
            continue;
          const double cb = ib->first;
          const double d = ca - cb;
          if (!(d > tol))
            continue;
          const double nm = std::max(lm - d, load[r] + d);
          if (nm < bestMax) {
            bestMax = nm;
            bestR = r;
            bestCa = ca;
            bestCb = cb;
            bestSwap = true;
          }
        }
      }
    }
    if (bestR == npos)
      break;

    // The lowest-index item of each cost moves.
    const size_t a = *lists[m].at(bestCa).begin();
    takeItem(lists[m], bestCa, a);
    putItem(lists[bestR], bestCa, a);
    owner[a] = static_cast<int64_t>(bestR);
    double d = bestCa;
    if (bestSwap) {
      const size_t b = *lists[bestR].at(bestCb).begin();
      takeItem(lists[bestR], bestCb, b);
      putItem(lists[m], bestCb, b);
      owner[b] = static_cast<int64_t>(m);
      d -= bestCb;
    }
    load[m] -= d;
    load[bestR] += d;
  }
}

//===----------------------------------------------------------------------===//
// Balanced, step 3: fan-out refinement.
//===----------------------------------------------------------------------===//

void refineFanout(const std::vector<OwnerItem> &items, size_t world,
                  std::vector<int64_t> &owner) {
  const size_t n = items.size();
  if (world < 2 || n < 2)
    return;

  // Dense group ids (negative groups are no group).
  std::vector<int64_t> groupValues;
  for (const OwnerItem &it : items)
    if (it.group >= 0)
      groupValues.push_back(it.group);
  std::sort(groupValues.begin(), groupValues.end());
  groupValues.erase(std::unique(groupValues.begin(), groupValues.end()),
                    groupValues.end());
  const size_t numGroups = groupValues.size();
  if (numGroups < 2 || numGroups > kMaxShareCells / world)
    return;
  const int64_t noGroup = -1;
  std::vector<int64_t> gid(n, noGroup);
  for (size_t i = 0; i < n; ++i)
    if (items[i].group >= 0)
      gid[i] = std::lower_bound(groupValues.begin(), groupValues.end(),
                                items[i].group) -
               groupValues.begin();

  // Interchangeable classes: same shapeKey and bitwise-equal cost, memory,
  // bytes; bytes must be positive (else a swap changes nothing). Only
  // classes present in at least two groups can swap.
  auto usable = [&](size_t i) {
    const OwnerItem &it = items[i];
    return std::isfinite(it.cost) && std::isfinite(it.memory) &&
           std::isfinite(it.bytes) && it.bytes > 0;
  };
  std::vector<size_t> byClass;
  for (size_t i = 0; i < n; ++i)
    if (usable(i))
      byClass.push_back(i);
  auto sameClass = [&](size_t a, size_t b) {
    const OwnerItem &x = items[a], &y = items[b];
    return x.shapeKey == y.shapeKey && x.cost == y.cost &&
           x.memory == y.memory && x.bytes == y.bytes;
  };
  std::sort(byClass.begin(), byClass.end(), [&](size_t a, size_t b) {
    const OwnerItem &x = items[a], &y = items[b];
    if (x.shapeKey != y.shapeKey)
      return x.shapeKey < y.shapeKey;
    if (x.cost != y.cost)
      return x.cost < y.cost;
    if (x.memory != y.memory)
      return x.memory < y.memory;
    if (x.bytes != y.bytes)
      return x.bytes < y.bytes;
    return a < b;
  });
  std::vector<int64_t> cls(n, -1);
  int64_t numClasses = 0;
  for (size_t s = 0; s < byClass.size();) {
    size_t e = s + 1;
    while (e < byClass.size() && sameClass(byClass[s], byClass[e]))
      ++e;
    bool multiGroup = false;
    for (size_t k = s + 1; k < e && !multiGroup; ++k)
      multiGroup = gid[byClass[k]] != gid[byClass[s]];
    if (multiGroup) {
      for (size_t k = s; k < e; ++k)
        cls[byClass[k]] = numClasses;
      ++numClasses;
    }
    s = e;
  }
  if (numClasses == 0)
    return;

  // Shares, totals, maxima.
  const size_t w = world;
  std::vector<double> share(numGroups * w, 0.0), total(numGroups, 0.0);
  std::vector<std::vector<size_t>> groupItems(numGroups);
  for (size_t i = 0; i < n; ++i) {
    if (gid[i] < 0)
      continue;
    groupItems[gid[i]].push_back(i);
    const double b = clean(items[i].bytes);
    share[gid[i] * w + owner[i]] += b;
    total[gid[i]] += b;
  }
  std::vector<double> maxShare(numGroups, 0.0);
  auto recomputeMax = [&](size_t g) {
    double mx = 0;
    for (size_t r = 0; r < w; ++r)
      mx = std::max(mx, share[g * w + r]);
    maxShare[g] = mx;
  };
  for (size_t g = 0; g < numGroups; ++g)
    recomputeMax(g);

  // Per group, what a swap's evaluation reads of a partner's group (its
  // cap and mean), side by side, so a partner costs one line of these.
  struct GroupFacts {
    double capShare; // maxShare + tolerance: g2's share on r1 may not exceed
    double meanSq;   // (total / w)^2
  };
  std::vector<GroupFacts> facts(numGroups);
  auto refreshFacts = [&](size_t g) {
    const double mx = maxShare[g];
    const double mean = total[g] / static_cast<double>(w);
    facts[g] = {mx + tolOf(mx, mx), mean * mean};
  };
  for (size_t g = 0; g < numGroups; ++g)
    refreshFacts(g);

  // Buckets of swappable items by (class, rank), each entry with its
  // item's group; pos[i] indexes i's bucket.
  struct Partner {
    size_t item;
    int64_t group;
  };
  std::unordered_map<int64_t, size_t> bucketOf;
  std::vector<std::vector<Partner>> buckets;
  std::vector<size_t> pos(n, 0);
  auto bucketKey = [&](int64_t c, size_t r) {
    return c * static_cast<int64_t>(w) + static_cast<int64_t>(r);
  };
  for (size_t i = 0; i < n; ++i) {
    if (cls[i] < 0)
      continue;
    auto [it, inserted] =
        bucketOf.emplace(bucketKey(cls[i], owner[i]), buckets.size());
    if (inserted)
      buckets.emplace_back();
    pos[i] = buckets[it->second].size();
    buckets[it->second].push_back({i, gid[i]});
  }
  // Per (class, rank) its bucket's index + 1 (0: none), dense where the
  // table is small (the usual case: a model has few shapes), else by map.
  std::vector<size_t> bucketAt;
  if (static_cast<size_t>(numClasses) <= kMaxShareCells / w) {
    bucketAt.assign(static_cast<size_t>(numClasses) * w, 0);
    for (const auto &[key, b] : bucketOf)
      bucketAt[static_cast<size_t>(key)] = b + 1;
  }
  auto bucketFor = [&](int64_t c, size_t r) -> std::vector<Partner> * {
    if (!bucketAt.empty()) {
      const size_t b = bucketAt[static_cast<size_t>(bucketKey(c, r))];
      return b == 0 ? nullptr : &buckets[b - 1];
    }
    auto it = bucketOf.find(bucketKey(c, r));
    return it == bucketOf.end() ? nullptr : &buckets[it->second];
  };

  std::vector<int64_t> seenClass(static_cast<size_t>(numClasses), -1);
  int64_t stepStamp = 0;
  for (int pass = 0; pass < kFanoutPasses; ++pass) {
    size_t swaps = 0;
    for (size_t g = 0; g < numGroups; ++g) {
      if (!(total[g] > 0))
        continue;
      const double meanG = total[g] / static_cast<double>(w);
      const int64_t gSelf = static_cast<int64_t>(g);
      for (size_t step = 0; step <= groupItems[g].size(); ++step) {
        ++stepStamp;
        const double s1 = maxShare[g];
        const double tolG = tolOf(s1, s1);
        size_t r1 = 0;
        while (share[g * w + r1] < s1 - tolG)
          ++r1;

        double bestDelta = 0;
        size_t bestA = n, bestB = n;
        for (size_t a : groupItems[g]) {
          if (static_cast<size_t>(owner[a]) != r1 || cls[a] < 0 ||
              seenClass[cls[a]] == stepStamp)
            continue;
          seenClass[cls[a]] = stepStamp; // same class on r1: same outcome
          const double x = items[a].bytes;
          const double need = -kRelTol * (x / meanG) * (x / meanG);
          int64_t scanned = 0;
          for (size_t r2 = 0; r2 < w && scanned < kFanoutScanPerItem; ++r2) {
            if (r2 == r1)
              continue;
            const double s2 = share[g * w + r2];
            if (!(s2 + x < s1 - tolG))
              continue;
            const std::vector<Partner> *bucket = bucketFor(cls[a], r2);
            if (!bucket)
              continue;
            const double gTerm =
                2 * x * (x - (s1 - s2)) / (meanG * meanG); // < 0
            const size_t visitEnd =
                std::min(bucket->size(), static_cast<size_t>(kFanoutBucketVisit));
            int64_t inBucket = 0;
            for (size_t k = 0; k < visitEnd; ++k) {
              const Partner &pb = (*bucket)[k];
              if (pb.group == gSelf)
                continue;
              if (++inBucket > kFanoutBucketScan)
                break;
              ++scanned;
              double delta = gTerm;
              if (pb.group >= 0) {
                const size_t g2 = static_cast<size_t>(pb.group);
                const GroupFacts f2 = facts[g2];
                const double t1 = share[g2 * w + r1];
                if (t1 + x > f2.capShare)
                  continue;
                const double t2 = share[g2 * w + r2];
                delta += 2 * x * (x + t1 - t2) / f2.meanSq;
              }
              if (delta < need && delta < bestDelta) {
                bestDelta = delta;
                bestA = a;
                bestB = pb.item;
              }
            }
          }
        }
        if (bestA == n)
          break;

        // Apply: a (group g, rank r1) <-> b (group g2, rank r2).
        const size_t r2 = static_cast<size_t>(owner[bestB]);
        const double x = items[bestA].bytes;
        share[g * w + r1] -= x;
        share[g * w + r2] += x;
        recomputeMax(g);
        refreshFacts(g);
        if (gid[bestB] >= 0) {
          const size_t g2 = static_cast<size_t>(gid[bestB]);
          share[g2 * w + r2] -= x;
          share[g2 * w + r1] += x;
          recomputeMax(g2);
          refreshFacts(g2);
        }
        std::vector<Partner> &bucketA = *bucketFor(cls[bestA], r1);
        std::vector<Partner> &bucketB = *bucketFor(cls[bestB], r2);
        std::swap(pos[bestA], pos[bestB]);
        bucketA[pos[bestB]] = {bestB, gid[bestB]};
        bucketB[pos[bestA]] = {bestA, gid[bestA]};
        owner[bestA] = static_cast<int64_t>(r2);
        owner[bestB] = static_cast<int64_t>(r1);
        ++swaps;
      }
    }
    if (swaps == 0)
      break;
  }
}

//===----------------------------------------------------------------------===//
// MatrixFSDP baseline and round robin.
//===----------------------------------------------------------------------===//

std::vector<int64_t> matrixFsdp(const std::vector<OwnerItem> &items,
                                size_t world) {
  const size_t n = items.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (items[a].group != items[b].group)
      return items[a].group < items[b].group;
    if (items[a].elements != items[b].elements)
      return items[a].elements > items[b].elements;
    return a < b;
  });
  std::vector<int64_t> owner(n, 0);
  // Min-heap of (cumulative element load, rank) over all ranks.
  using Slot = std::pair<int64_t, size_t>;
  auto greater = [](const Slot &a, const Slot &b) { return a > b; };
  std::vector<Slot> heap;
  for (size_t r = 0; r < world; ++r)
    heap.push_back({0, r});
  std::make_heap(heap.begin(), heap.end(), greater);
  for (size_t k = 0; k < n; ++k) {
    std::pop_heap(heap.begin(), heap.end(), greater);
    Slot &slot = heap.back();
    owner[order[k]] = static_cast<int64_t>(slot.second);
    slot.first += std::max<int64_t>(items[order[k]].elements, 0);
    std::push_heap(heap.begin(), heap.end(), greater);
  }
  return owner;
}

} // namespace

//===----------------------------------------------------------------------===//
// Public API
//===----------------------------------------------------------------------===//

double newtonSchulzFlops(int64_t rows, int64_t cols, int64_t steps) {
  if (rows <= 0 || cols <= 0 || steps <= 0)
    return 0;
  const double s = static_cast<double>(std::min(rows, cols));
  const double l = static_cast<double>(std::max(rows, cols));
  return static_cast<double>(steps) * (3 * s * s * l + s * s * s);
}

double newtonSchulzGemmFlops(int64_t rows, int64_t cols, int64_t steps) {
  if (rows <= 0 || cols <= 0 || steps <= 0)
    return 0;
  const double s = static_cast<double>(std::min(rows, cols));
  const double l = static_cast<double>(std::max(rows, cols));
  return static_cast<double>(steps) * (4 * s * s * l + 2 * s * s * s);
}

OwnerResult assignOwners(const std::vector<OwnerItem> &items,
                         const OwnerOptions &options) {
  OwnerOptions opts = options;
  if (opts.world < 1)
    opts.world = 1;
  const size_t world = effectiveWorld(opts.world);
  const size_t n = items.size();

  std::vector<int64_t> owner;
  switch (opts.strategy) {
  case OwnerStrategy::MatrixFSDP:
    owner = matrixFsdp(items, world);
    break;
  case OwnerStrategy::RoundRobin:
    owner.resize(n);
    for (size_t i = 0; i < n; ++i)
      owner[i] = static_cast<int64_t>(i % world);
    break;
  case OwnerStrategy::Balanced:
  default: {
    std::vector<double> cost(n), mem(n);
    for (size_t i = 0; i < n; ++i) {
      cost[i] = clean(items[i].cost);
      mem[i] = clean(items[i].memory);
    }
    owner = lptByCost(cost, mem, world);
    repairMax(cost, world, owner);
    if (opts.refineFanout)
      refineFanout(items, world, owner);
    break;
  }
  }
  return evaluateOwners(items, owner, opts);
}

OwnerResult evaluateOwners(const std::vector<OwnerItem> &items,
                           const std::vector<int64_t> &owner,
                           const OwnerOptions &options) {
  const size_t world = effectiveWorld(options.world);
  const double w = static_cast<double>(world);
  const size_t n = items.size();
  OwnerResult res;
  res.owner = owner;
  res.rankCost.assign(world, options.baseCost);
  res.rankMemory.assign(world, options.baseMemory);

  auto ownerOf = [&](size_t i) -> int64_t {
    if (i >= owner.size() || owner[i] < 0 ||
        static_cast<size_t>(owner[i]) >= world)
      return -1;
    return owner[i];
  };

  double totalCost = 0, maxItem = 0;
  for (size_t i = 0; i < n; ++i) {
    totalCost += items[i].cost;
    maxItem = std::max(maxItem, items[i].cost);
    const int64_t r = ownerOf(i);
    if (r < 0)
      continue;
    res.rankCost[r] += items[i].cost;
    res.rankMemory[r] += items[i].memory;
  }
  res.maxCost = *std::max_element(res.rankCost.begin(), res.rankCost.end());
  res.maxMemory =
      *std::max_element(res.rankMemory.begin(), res.rankMemory.end());
  double sumCost = 0, sumMem = 0;
  for (size_t r = 0; r < world; ++r) {
    sumCost += res.rankCost[r];
    sumMem += res.rankMemory[r];
  }
  res.meanCost = sumCost / w;
  res.meanMemory = sumMem / w;
  res.lowerBound = options.baseCost + std::max(maxItem, totalCost / w);

  // Group skew: shares per (group, rank) via a sort, so sparse or large group
  // numbers cost nothing extra beyond the output vector.
  int64_t maxGroup = -1;
  for (const OwnerItem &it : items)
    maxGroup = std::max(maxGroup, it.group);
  res.groupSkew.assign(static_cast<size_t>(maxGroup + 1), 1.0);
  std::vector<size_t> idx;
  for (size_t i = 0; i < n; ++i)
    if (items[i].group >= 0)
      idx.push_back(i);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    if (items[a].group != items[b].group)
      return items[a].group < items[b].group;
    if (ownerOf(a) != ownerOf(b))
      return ownerOf(a) < ownerOf(b);
    return a < b;
  });
  double skewSum = 0, skewMax = 0;
  size_t groupsWithItems = 0;
  for (size_t s = 0; s < idx.size();) {
    const int64_t g = items[idx[s]].group;
    size_t e = s;
    double total = 0, best = 0;
    while (e < idx.size() && items[idx[e]].group == g) {
      const int64_t r = ownerOf(idx[e]);
      double shareSum = 0;
      size_t f = e;
      while (f < idx.size() && items[idx[f]].group == g &&
             ownerOf(idx[f]) == r) {
        shareSum += items[idx[f]].bytes;
        ++f;
      }
      if (r >= 0) { // items without a valid owner are left out
        total += shareSum;
        best = std::max(best, shareSum);
      }
      e = f;
    }
    const double skew = total > 0 ? best / (total / w) : 1.0;
    res.groupSkew[g] = skew;
    skewSum += skew;
    skewMax = std::max(skewMax, skew);
    ++groupsWithItems;
    s = e;
  }
  if (groupsWithItems > 0) {
    res.maxGroupSkew = skewMax;
    res.meanGroupSkew = skewSum / static_cast<double>(groupsWithItems);
  } else {
    res.maxGroupSkew = res.meanGroupSkew = 1.0;
  }
  return res;
}

std::vector<int64_t> groupUnits(const std::vector<int64_t> &matricesPerUnit,
                                int64_t world, int64_t maxUnitsPerGroup) {
  const int64_t need = world < 1 ? 1 : world;
  const int64_t cap = maxUnitsPerGroup < 0 ? 0 : maxUnitsPerGroup;
  const size_t n = matricesPerUnit.size();
  std::vector<int64_t> group(n, 0);
  if (n == 0)
    return group;

  int64_t current = 0, count = 0, length = 0;
  int64_t prevLength = 0; // length of the last closed group
  for (size_t u = 0; u < n; ++u) {
    group[u] = current;
    count += std::max<int64_t>(matricesPerUnit[u], 0);
    ++length;
    const bool full = count >= need;
    const bool capped = cap > 0 && length >= cap;
    if ((full || capped) && u + 1 < n) {
      ++current;
      prevLength = length;
      count = 0;
      length = 0;
    }
  }
  // The open (last) group is short: merge it into the previous one, unless
  // that would exceed the cap.
  if (current > 0 && count < need &&
      (cap == 0 || prevLength + length <= cap))
    for (size_t u = n - length; u < n; ++u)
      group[u] = current - 1;
  return group;
}

} // namespace mfsdp::planner

//===- OwnerAssignmentTest.cpp - Matrix owners: bounds, baselines, groups -===//
#include "mfsdp/planner/OwnerAssignment.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>

using namespace mfsdp::planner;

namespace {

struct Shape {
  int64_t rows, cols;
};

// The brief's cost model: 5 Newton-Schulz steps at 312 TFLOP/s plus 16 bytes
// of elementwise traffic per element at 2 TB/s; 12 resident bytes per element
// (fp32 master, momentum, bf16 param and grad); 2 bytes sent per element.
OwnerItem matrixItem(Shape s, int64_t group) {
  OwnerItem it;
  it.elements = s.rows * s.cols;
  it.cost = newtonSchulzFlops(s.rows, s.cols, 5) / 312e12 +
            16.0 * static_cast<double>(it.elements) / 2e12;
  it.memory = 12.0 * static_cast<double>(it.elements);
  it.bytes = 2.0 * static_cast<double>(it.elements);
  it.group = group;
  it.shapeKey = s.rows * 1000003 + s.cols;
  return it;
}

// `layers` copies of `layer`, one unit per layer, units grouped by
// groupUnits() for `world`.
std::vector<OwnerItem> layeredModel(const std::vector<Shape> &layer,
                                    int layers, int64_t world) {
  std::vector<int64_t> perUnit(layers, static_cast<int64_t>(layer.size()));
  std::vector<int64_t> group = groupUnits(perUnit, world);
  std::vector<OwnerItem> items;
  for (int l = 0; l < layers; ++l)
    for (Shape s : layer)
      items.push_back(matrixItem(s, group[l]));
  return items;
}

const std::vector<Shape> kGpt32Layer = {{4096, 4096}, {4096, 4096},
                                        {4096, 4096}, {4096, 4096},
                                        {4096, 16384}, {16384, 4096}};
const std::vector<Shape> kLlama8BLayer = {
    {4096, 4096},  {1024, 4096},  {1024, 4096}, {4096, 4096},
    {14336, 4096}, {14336, 4096}, {4096, 14336}};

OwnerResult run(const std::vector<OwnerItem> &items, int64_t world,
                OwnerStrategy s = OwnerStrategy::Balanced,
                bool refine = true) {
  OwnerOptions o;
  o.world = world;
  o.strategy = s;
  o.refineFanout = refine;
  return assignOwners(items, o);
}

// Equal up to summation order.
void expectSameTotals(const std::vector<double> &a,
                      const std::vector<double> &b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], 1e-12 * std::max(std::fabs(a[i]), 1.0)) << i;
}

void expectValidOwners(const OwnerResult &r, size_t n, int64_t world) {
  ASSERT_EQ(r.owner.size(), n);
  for (int64_t o : r.owner) {
    EXPECT_GE(o, 0);
    EXPECT_LT(o, world);
  }
}

// Pigeonhole bound: some rank holds two of the W + 1 largest items.
double pairBound(const std::vector<OwnerItem> &items, int64_t world) {
  std::vector<double> c;
  for (const OwnerItem &it : items)
    c.push_back(it.cost);
  std::sort(c.rbegin(), c.rend());
  if (static_cast<int64_t>(c.size()) <= world)
    return 0;
  return c[world - 1] + c[world];
}

void printRow(const char *model, int64_t world, OwnerStrategy s,
              const OwnerResult &r) {
  std::printf("  %-6s W=%-4lld %-11s cost max/mean %.4f max/LB %.4f  "
              "mem max/mean %.4f  group skew max %.3f mean %.3f\n",
              model, static_cast<long long>(world),
              std::string(mfsdp::enumName(s)).c_str(),
              r.maxCost / r.meanCost, r.maxCost / r.lowerBound,
              r.maxMemory / r.meanMemory, r.maxGroupSkew, r.meanGroupSkew);
}

// Optimal maximum cost by exhaustive search (with pruning).
double optimalMax(const std::vector<double> &cost, int world) {
  std::vector<double> load(world, 0.0);
  double best = std::numeric_limits<double>::infinity();
  std::function<void(size_t, double)> rec = [&](size_t i, double curMax) {
    if (curMax >= best)
      return;
    if (i == cost.size()) {
      best = curMax;
      return;
    }
    for (int r = 0; r < world; ++r) {
      load[r] += cost[i];
      rec(i + 1, std::max(curMax, load[r]));
      load[r] -= cost[i];
    }
  };
  rec(0, 0.0);
  return best;
}

} // namespace

//===----------------------------------------------------------------------===//
// Newton-Schulz FLOPs and strategy names
//===----------------------------------------------------------------------===//

TEST(OwnerAssignment, NewtonSchulzFlops) {
  // What runs: X X^T and A A as symmetric rank-k products, 3 s^2 l + s^3
  // per step; the GEMM form 4 s^2 l + 2 s^3, 1.5x that for a square matrix.
  const double k = 4096;
  EXPECT_DOUBLE_EQ(newtonSchulzFlops(4096, 4096, 5), 5 * 4 * k * k * k);
  EXPECT_DOUBLE_EQ(newtonSchulzGemmFlops(4096, 4096, 5), 5 * 6 * k * k * k);
  EXPECT_DOUBLE_EQ(newtonSchulzFlops(4096, 16384, 5),
                   5 * (3 * k * k * 16384 + k * k * k));
  EXPECT_DOUBLE_EQ(newtonSchulzGemmFlops(4096, 16384, 5),
                   5 * (4 * k * k * 16384 + 2 * k * k * k));
  EXPECT_DOUBLE_EQ(newtonSchulzFlops(16384, 4096, 5),
                   newtonSchulzFlops(4096, 16384, 5));
  EXPECT_DOUBLE_EQ(newtonSchulzFlops(2, 3, 1), 3 * 4 * 3 + 8);
  EXPECT_DOUBLE_EQ(newtonSchulzGemmFlops(2, 3, 1), 4 * 4 * 3 + 2 * 8);
  EXPECT_DOUBLE_EQ(newtonSchulzFlops(1024, 4096, 1),
                   3.0 * 1024 * 1024 * 4096 + 1.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(newtonSchulzFlops(0, 4096, 5), 0);
  EXPECT_EQ(newtonSchulzGemmFlops(0, 4096, 5), 0);
  EXPECT_EQ(newtonSchulzFlops(4096, -1, 5), 0);
  EXPECT_EQ(newtonSchulzFlops(4096, 4096, 0), 0);
  EXPECT_EQ(newtonSchulzFlops(4096, 4096, -3), 0);
}

//===----------------------------------------------------------------------===//
// Balanced against brute force
//===----------------------------------------------------------------------===//

TEST(OwnerAssignment, BalancedAgainstBruteForce) {
  std::mt19937 rng(20240611);
  const int instances = 200;
  int optimal = 0;
  double worstRatio = 1;
  for (int t = 0; t < instances; ++t) {
    const int n = std::uniform_int_distribution<int>(2, 8)(rng);
    const int world = std::uniform_int_distribution<int>(2, 4)(rng);
    std::vector<OwnerItem> items(n);
    std::vector<double> cost(n);
    for (int i = 0; i < n; ++i) {
      // Half the instances use small integers (many ties), half reals.
      cost[i] = t % 2 ? std::uniform_int_distribution<int>(1, 10)(rng)
                      : std::uniform_real_distribution<double>(0.5, 10)(rng);
      items[i].cost = cost[i];
      items[i].memory = std::uniform_real_distribution<double>(1, 4)(rng);
      items[i].bytes = items[i].memory;
      items[i].elements = i + 1;
      items[i].group = i / 3;
      items[i].shapeKey = i;
    }
    const double opt = optimalMax(cost, world);
    OwnerResult r = run(items, world);
    expectValidOwners(r, items.size(), world);
    const double lpt = (4.0 / 3.0 - 1.0 / (3.0 * world)) * opt;
    EXPECT_LE(r.maxCost, lpt * (1 + 1e-12)) << "instance " << t;
    EXPECT_GE(r.maxCost, r.lowerBound * (1 - 1e-12)) << "instance " << t;
    EXPECT_GE(r.maxCost, opt * (1 - 1e-12)) << "instance " << t;
    EXPECT_LE(r.lowerBound, opt * (1 + 1e-12)) << "instance " << t;
    if (r.maxCost <= opt * (1 + 1e-9))
      ++optimal;
    worstRatio = std::max(worstRatio, r.maxCost / opt);
  }
  std::printf("  brute force: optimal in %d of %d instances, worst max/OPT "
              "%.4f\n",
              optimal, instances, worstRatio);
  // Measured: 193 of 200 optimal, worst max/OPT 1.0578 (LPT without the
  // max-rank repair: 177, worst 1.1053; other seeds: 189-196).
  EXPECT_GE(optimal, 180);
}

//===----------------------------------------------------------------------===//
// Realistic models against bounds and baselines
//===----------------------------------------------------------------------===//

// Measured (Balanced / MatrixFSDP / RoundRobin), cost max/mean, memory
// max/mean, max group skew:
//   32L  W=8:  1.0000 1.0000 1.333 / 1.0000 1.0000 1.333 / 1.0000 1.0000 1.667
//   32L  W=64: 1.0000 1.0000 1.939 / 1.0000 1.0000 1.939 / 1.0000 1.0000 2.424
TEST(OwnerAssignment, Gpt32LayerModel) {
  for (int64_t world : {8, 64}) {
    std::vector<OwnerItem> items = layeredModel(kGpt32Layer, 32, world);
    OwnerResult bal = run(items, world);
    OwnerResult mf = run(items, world, OwnerStrategy::MatrixFSDP);
    OwnerResult rr = run(items, world, OwnerStrategy::RoundRobin);
    printRow("32L", world, OwnerStrategy::Balanced, bal);
    printRow("32L", world, OwnerStrategy::MatrixFSDP, mf);
    printRow("32L", world, OwnerStrategy::RoundRobin, rr);
    expectValidOwners(bal, items.size(), world);
    EXPECT_LE(bal.maxCost / bal.meanCost, 1.02);
    EXPECT_LE(bal.maxMemory / bal.meanMemory, 1.05);
    EXPECT_LE(bal.maxCost, bal.lowerBound * 1.02);
    // On this regular model MatrixFSDP's cumulative element count tracks
    // the cost closely enough to balance too: Balanced is never worse on
    // cost or skew; round robin is no better on cost and worse on fan-out.
    EXPECT_GE(mf.maxCost, bal.maxCost * (1 - 1e-12));
    EXPECT_GE(rr.maxCost, bal.maxCost * (1 - 1e-12));
    EXPECT_GT(rr.maxGroupSkew, bal.maxGroupSkew * 1.1);
    EXPECT_LE(bal.maxGroupSkew, mf.maxGroupSkew * (1 + 1e-12));
  }
}

// Measured:
//   llama W=8:   1.0000 1.0000 1.077 / 1.0000 1.0000 1.077 / 1.0000 1.0000 2.154
//   llama W=64:  1.0573 1.0769 1.723 / 1.3167 1.1538 1.723 / 1.7829 1.7692 3.446
//   llama W=256: max cost = lowerBound (224 matrices, fewer than ranks).
// At W=64 the 96 MLP matrices (the largest) on 64 ranks force some rank to
// hold two of them: max/mean >= 1.0573 for every assignment, so the target
// there is the pigeonhole bound, which Balanced meets exactly.
TEST(OwnerAssignment, Llama8BLikeModel) {
  for (int64_t world : {8, 64, 256}) {
    std::vector<OwnerItem> items = layeredModel(kLlama8BLayer, 32, world);
    OwnerResult bal = run(items, world);
    OwnerResult mf = run(items, world, OwnerStrategy::MatrixFSDP);
    OwnerResult rr = run(items, world, OwnerStrategy::RoundRobin);
    printRow("llama", world, OwnerStrategy::Balanced, bal);
    printRow("llama", world, OwnerStrategy::MatrixFSDP, mf);
    printRow("llama", world, OwnerStrategy::RoundRobin, rr);
    expectValidOwners(bal, items.size(), world);
    const double bound = std::max(bal.lowerBound, pairBound(items, world));
    EXPECT_LE(bal.maxCost, bound * 1.001);
    if (world == 8) {
      EXPECT_LE(bal.maxCost / bal.meanCost, 1.03);
      EXPECT_LE(bal.maxMemory / bal.meanMemory, 1.05);
    }
    if (world == 64) {
      // 1.072: the lower bound itself (checked above) under the symmetric
      // Newton-Schulz FLOPs, 3 s^2 l + s^3.
      EXPECT_LE(bal.maxCost / bal.meanCost, 1.08);
    }
    if (world == 256) {
      EXPECT_LE(bal.maxCost, bal.lowerBound * 1.02);
    }
    // Counting elements misjudges Newton-Schulz cost (k/v are thin, the MLP
    // matrices wide): at W = 64 MatrixFSDP is 1.28 of the mean, we 1.072.
    EXPECT_GE(mf.maxCost, bal.maxCost * (1 - 1e-12));
    if (world == 64) {
      EXPECT_GT(mf.maxCost, bal.maxCost * 1.15);
    }
    if (world < 256) {
      EXPECT_GE(rr.maxCost, bal.maxCost * (1 - 1e-12));
      EXPECT_GT(rr.maxGroupSkew, bal.maxGroupSkew * 1.5);
    }
    EXPECT_LE(bal.maxGroupSkew, mf.maxGroupSkew * (1 + 1e-12));
  }
}

TEST(OwnerAssignment, LargeInstancesAreTight) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.1, 10);
  struct Case {
    size_t n;
    int64_t world;
  };
  for (Case c : {Case{45000, 256}, Case{1000, 1024}}) {
    std::vector<OwnerItem> items(c.n);
    for (size_t i = 0; i < c.n; ++i) {
      items[i].cost = u(rng);
      items[i].memory = 3 * items[i].cost;
      items[i].bytes = items[i].cost;
      items[i].elements = static_cast<int64_t>(items[i].cost * 1000);
      items[i].group = static_cast<int64_t>(i / 300);
      items[i].shapeKey = static_cast<int64_t>(i % 7);
    }
    OwnerResult r = run(items, c.world);
    std::printf("  n=%zu W=%lld: max/LB %.6f\n", c.n,
                static_cast<long long>(c.world), r.maxCost / r.lowerBound);
    expectValidOwners(r, c.n, c.world);
    EXPECT_LE(r.maxCost, r.lowerBound * 1.001);
  }
  // Many identical shapes (the fan-out refinement's worst case).
  std::vector<OwnerItem> items = layeredModel(kGpt32Layer, 7500, 256);
  OwnerResult r = run(items, 256);
  std::printf("  n=%zu W=256 (32L shapes): max/LB %.6f\n", items.size(),
              r.maxCost / r.lowerBound);
  EXPECT_LE(r.maxCost, r.lowerBound * 1.001);
}

//===----------------------------------------------------------------------===//
// Determinism and fan-out refinement
//===----------------------------------------------------------------------===//

TEST(OwnerAssignment, Deterministic) {
  std::vector<OwnerItem> items = layeredModel(kLlama8BLayer, 32, 64);
  // Near-ties from floating noise (both runs see the same input).
  std::mt19937 rng(3);
  for (OwnerItem &it : items)
    it.cost *= 1 + 1e-13 * std::uniform_real_distribution<double>(-1, 1)(rng);
  for (OwnerStrategy s : {OwnerStrategy::Balanced, OwnerStrategy::MatrixFSDP,
                          OwnerStrategy::RoundRobin}) {
    const std::vector<OwnerItem> copy = items;
    OwnerResult a = run(items, 64, s);
    OwnerResult b = run(copy, 64, s);
    EXPECT_EQ(a.owner, b.owner);
    EXPECT_EQ(a.rankCost, b.rankCost);
    EXPECT_EQ(a.groupSkew, b.groupSkew);
    // The reported statistics are those of the returned owners.
    OwnerOptions o;
    o.world = 64;
    OwnerResult e = evaluateOwners(items, a.owner, o);
    EXPECT_EQ(e.rankCost, a.rankCost);
    EXPECT_EQ(e.maxGroupSkew, a.maxGroupSkew);
  }
}

TEST(OwnerAssignment, FanoutRefinementSwapsInterchangeableItems) {
  // Two groups, each one big and two small matrices, W = 2. LPT (by cost,
  // ties lowest rank) gives rank 0 {big0, small0a, small1a} and rank 1
  // {big1, small0b, small1b}: each group has 3 of its 4 bytes on one rank.
  auto item = [](double size, int64_t group) {
    OwnerItem it;
    it.cost = it.memory = it.bytes = size;
    it.elements = static_cast<int64_t>(size);
    it.group = group;
    it.shapeKey = size > 1 ? 1 : 2;
    return it;
  };
  std::vector<OwnerItem> items = {item(2, 0), item(1, 0), item(1, 0),
                                  item(2, 1), item(1, 1), item(1, 1)};
  OwnerResult plain = run(items, 2, OwnerStrategy::Balanced, false);
  EXPECT_EQ(plain.owner, (std::vector<int64_t>{0, 0, 1, 1, 0, 1}));
  EXPECT_DOUBLE_EQ(plain.groupSkew[0], 1.5);
  EXPECT_DOUBLE_EQ(plain.groupSkew[1], 1.5);

  OwnerResult refined = run(items, 2);
  EXPECT_EQ(refined.rankCost, plain.rankCost);
  EXPECT_EQ(refined.rankMemory, plain.rankMemory);
  EXPECT_DOUBLE_EQ(refined.groupSkew[0], 1.0);
  EXPECT_DOUBLE_EQ(refined.groupSkew[1], 1.0);
  EXPECT_DOUBLE_EQ(refined.maxGroupSkew, 1.0);
  EXPECT_EQ(refined.owner, (std::vector<int64_t>{0, 1, 1, 1, 0, 0}));

  // Same shapeKey but different bytes: not interchangeable, no swap.
  std::vector<OwnerItem> odd = items;
  odd[5].bytes = 1.5;
  OwnerResult oddPlain = run(odd, 2, OwnerStrategy::Balanced, false);
  OwnerResult oddRefined = run(odd, 2);
  EXPECT_EQ(oddRefined.rankCost, oddPlain.rankCost);
  EXPECT_LE(oddRefined.maxGroupSkew, oddPlain.maxGroupSkew);
}

TEST(OwnerAssignment, FanoutRefinementOnModels) {
  for (int64_t world : {8, 64}) {
    for (const std::vector<Shape> *layer : {&kGpt32Layer, &kLlama8BLayer}) {
      std::vector<OwnerItem> items = layeredModel(*layer, 32, world);
      OwnerResult plain = run(items, world, OwnerStrategy::Balanced, false);
      OwnerResult refined = run(items, world);
      expectSameTotals(refined.rankCost, plain.rankCost);
      expectSameTotals(refined.rankMemory, plain.rankMemory);
      EXPECT_LT(refined.maxGroupSkew, plain.maxGroupSkew);
      EXPECT_LT(refined.meanGroupSkew, plain.meanGroupSkew);
    }
  }
}

//===----------------------------------------------------------------------===//
// Baselines
//===----------------------------------------------------------------------===//

TEST(OwnerAssignment, MatrixFSDPAndRoundRobin) {
  auto item = [](int64_t elements, int64_t group) {
    OwnerItem it;
    it.elements = elements;
    it.cost = it.memory = it.bytes = static_cast<double>(elements);
    it.group = group;
    return it;
  };
  // Group 1 listed first: groups are processed in increasing order, by
  // elements descending (ties lowest index), onto the least cumulative
  // element load (ties lowest rank).
  std::vector<OwnerItem> items = {item(5, 1), item(9, 0), item(4, 0),
                                  item(4, 0), item(7, 1), item(1, 0)};
  OwnerResult mf = run(items, 2, OwnerStrategy::MatrixFSDP);
  // Group 0: 9 -> r0, 4 (idx 2) -> r1, 4 (idx 3) -> r1, 1 -> r1.
  // Group 1: 7 -> r0, 5 -> r1.
  EXPECT_EQ(mf.owner, (std::vector<int64_t>{1, 0, 1, 1, 0, 1}));
  EXPECT_DOUBLE_EQ(mf.rankCost[0], 16);
  EXPECT_DOUBLE_EQ(mf.rankCost[1], 14);

  // Loads carry over from group to group.
  OwnerResult carried =
      run({item(10, 0), item(10, 1)}, 2, OwnerStrategy::MatrixFSDP);
  EXPECT_EQ(carried.owner, (std::vector<int64_t>{0, 1}));

  OwnerResult rr = run(items, 4, OwnerStrategy::RoundRobin);
  EXPECT_EQ(rr.owner, (std::vector<int64_t>{0, 1, 2, 3, 0, 1}));
}

//===----------------------------------------------------------------------===//
// Statistics and edge cases
//===----------------------------------------------------------------------===//

TEST(OwnerAssignment, EvaluateOwnersHandCase) {
  std::vector<OwnerItem> items(3);
  items[0].cost = 3, items[0].memory = 10, items[0].bytes = 4,
  items[0].group = 0;
  items[1].cost = 1, items[1].memory = 20, items[1].bytes = 4,
  items[1].group = 0;
  items[2].cost = 2, items[2].memory = 5, items[2].bytes = 6,
  items[2].group = 2;
  OwnerOptions o;
  o.world = 2;
  o.baseCost = 1;
  o.baseMemory = 100;
  OwnerResult r = evaluateOwners(items, {0, 1, 1}, o);
  EXPECT_EQ(r.owner, (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(r.rankCost, (std::vector<double>{4, 4}));
  EXPECT_EQ(r.rankMemory, (std::vector<double>{110, 125}));
  EXPECT_DOUBLE_EQ(r.maxCost, 4);
  EXPECT_DOUBLE_EQ(r.meanCost, 4);
  EXPECT_DOUBLE_EQ(r.maxMemory, 125);
  EXPECT_DOUBLE_EQ(r.meanMemory, 117.5);
  EXPECT_DOUBLE_EQ(r.lowerBound, 1 + 3);
  ASSERT_EQ(r.groupSkew.size(), 3u);
  EXPECT_DOUBLE_EQ(r.groupSkew[0], 1.0); // 4 and 4 of 8
  EXPECT_DOUBLE_EQ(r.groupSkew[1], 1.0); // no items
  EXPECT_DOUBLE_EQ(r.groupSkew[2], 2.0); // all 6 on one of 2 ranks
  EXPECT_DOUBLE_EQ(r.maxGroupSkew, 2.0);
  EXPECT_DOUBLE_EQ(r.meanGroupSkew, 1.5); // over groups 0 and 2

  // Lower bound from the total when no item dominates.
  OwnerResult r2 = evaluateOwners(items, {0, 0, 0}, OwnerOptions{});
  EXPECT_DOUBLE_EQ(r2.lowerBound, 6); // world 1
  EXPECT_DOUBLE_EQ(r2.maxCost, 6);
  EXPECT_DOUBLE_EQ(r2.maxGroupSkew, 1.0);

  // Owners out of range (or missing) count nowhere.
  OwnerResult r3 = evaluateOwners(items, {0, 7}, o);
  EXPECT_EQ(r3.rankCost, (std::vector<double>{4, 1}));
  EXPECT_DOUBLE_EQ(r3.groupSkew[0], 2.0); // only item 0's 4 bytes count
  EXPECT_DOUBLE_EQ(r3.groupSkew[2], 1.0); // no counted bytes

  // Balanced with a base cost: the base is added, the assignment unchanged.
  OwnerOptions ob;
  ob.world = 2;
  ob.baseCost = 10;
  OwnerResult b0 = run(items, 2);
  OwnerResult b1 = assignOwners(items, ob);
  EXPECT_EQ(b0.owner, b1.owner);
  EXPECT_DOUBLE_EQ(b1.maxCost, b0.maxCost + 10);
  EXPECT_DOUBLE_EQ(b1.lowerBound, b0.lowerBound + 10);
}

TEST(OwnerAssignment, EdgeCases) {
  // No items.
  OwnerOptions o;
  o.world = 4;
  o.baseCost = 2;
  o.baseMemory = 3;
  OwnerResult e = assignOwners({}, o);
  EXPECT_TRUE(e.owner.empty());
  EXPECT_EQ(e.rankCost, (std::vector<double>(4, 2.0)));
  EXPECT_EQ(e.rankMemory, (std::vector<double>(4, 3.0)));
  EXPECT_DOUBLE_EQ(e.maxCost, 2);
  EXPECT_DOUBLE_EQ(e.lowerBound, 2);
  EXPECT_TRUE(e.groupSkew.empty());
  EXPECT_DOUBLE_EQ(e.maxGroupSkew, 1);

  std::vector<OwnerItem> items = layeredModel(kGpt32Layer, 2, 8);
  // World 1, and world < 1 treated as 1.
  for (int64_t world : {1, 0, -5}) {
    for (OwnerStrategy s : {OwnerStrategy::Balanced, OwnerStrategy::MatrixFSDP,
                            OwnerStrategy::RoundRobin}) {
      OwnerResult r = run(items, world, s);
      EXPECT_EQ(r.owner, std::vector<int64_t>(items.size(), 0));
      ASSERT_EQ(r.rankCost.size(), 1u);
      EXPECT_DOUBLE_EQ(r.maxCost, r.lowerBound);
      EXPECT_DOUBLE_EQ(r.maxGroupSkew, 1);
    }
  }

  // Zero-cost items: owners are valid and spread by memory.
  std::vector<OwnerItem> zero(8);
  for (size_t i = 0; i < zero.size(); ++i) {
    zero[i].memory = 1;
    zero[i].group = 0;
  }
  OwnerResult z = run(zero, 4);
  expectValidOwners(z, zero.size(), 4);
  EXPECT_DOUBLE_EQ(z.maxCost, 0);
  EXPECT_DOUBLE_EQ(z.maxMemory, 2);
  EXPECT_DOUBLE_EQ(z.lowerBound, 0);
  EXPECT_DOUBLE_EQ(z.maxGroupSkew, 1); // no bytes

  // More ranks than items: one item per rank, max = largest item.
  OwnerResult wide = run(items, 64);
  EXPECT_DOUBLE_EQ(wide.maxCost, wide.lowerBound);
  std::vector<int64_t> sorted = wide.owner;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end());

  // Non-finite and negative costs do not break the assignment.
  std::vector<OwnerItem> bad = items;
  bad[0].cost = std::nan("");
  bad[1].cost = -1;
  bad[2].memory = std::numeric_limits<double>::infinity();
  bad[3].group = -1;
  OwnerResult br = run(bad, 4);
  expectValidOwners(br, bad.size(), 4);
}

//===----------------------------------------------------------------------===//
// groupUnits
//===----------------------------------------------------------------------===//

TEST(OwnerAssignment, GroupUnits) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(groupUnits({6, 6, 6, 6}, 8), (V{0, 0, 1, 1}));
  EXPECT_EQ(groupUnits({6, 6, 6, 6, 6}, 8), (V{0, 0, 1, 1, 1}));
  EXPECT_EQ(groupUnits({8, 8, 8}, 8), (V{0, 1, 2}));
  EXPECT_EQ(groupUnits({3, 2}, 8), (V{0, 0}));     // fewer than W in total
  EXPECT_EQ(groupUnits({0, 0, 0}, 8), (V{0, 0, 0})); // no matrices at all
  EXPECT_EQ(groupUnits({}, 8), V{});
  // Units without matrices join the group around them.
  EXPECT_EQ(groupUnits({0, 6, 6, 0, 6, 6, 0}, 8), (V{0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(groupUnits({8, 0, 8}, 8), (V{0, 1, 1}));
  // The cap closes groups early; a short trailing group merges only when the
  // merged group still respects the cap.
  EXPECT_EQ(groupUnits({1, 1, 1, 1, 1, 1}, 8, 2), (V{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(groupUnits({6, 6, 6, 6, 6}, 8, 3), (V{0, 0, 1, 1, 1}));
  EXPECT_EQ(groupUnits({6, 6, 6, 6, 6}, 8, 2), (V{0, 0, 1, 1, 2}));
  EXPECT_EQ(groupUnits({20, 1, 1}, 8, 0), (V{0, 0, 0}));
  // world < 1 acts as 1; negative counts as 0; negative cap as no cap.
  EXPECT_EQ(groupUnits({1, 0, 1}, 0), (V{0, 1, 1}));
  EXPECT_EQ(groupUnits({-3, 8, 8}, 8, -1), (V{0, 0, 1}));
  // The 32-layer model at W = 64: 11 layers, then the remaining 21 (the
  // short third group of 10 is merged).
  V big = groupUnits(V(32, 6), 64);
  EXPECT_EQ(std::count(big.begin(), big.end(), 0), 11);
  EXPECT_EQ(std::count(big.begin(), big.end(), 1), 21);
}

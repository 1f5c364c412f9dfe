//===- Memory.cpp - Static memory planning of a step --------------------===//
//
// planMemory: every buffer of a step (or of bare allocations and frees)
// placed at an arena offset, greedy by size, first fit against the
// buffers whose lifetimes meet its own.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/step/Schedule.h"

#include "ScheduleShared.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mfsdp::step {

using detail::EventOps;
using detail::OffsetSet;
using detail::StepOps;

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

} // namespace mfsdp::step

//===- ParamRefs.h - The parameters a step's ops name -----------*- C++ -*-===//
//
// The plan's index of every parameter the ops of a step name, resolved
// once per list of names for the lowerings of lib/step/RuntimeProgram.cpp.
// Private to lib/step.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_LIB_STEP_PARAMREFS_H
#define MFSDP_LIB_STEP_PARAMREFS_H

#include "mfsdp/runtime.h"
#include "mfsdp/step/Step.h"

#include "InternalError.h"
#include "ParamNames.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

namespace mfsdp::step {

/// A range of parameter indices.
struct ParamSpan {
  const int32_t *b, *e;
  const int32_t *begin() const { return b; }
  const int32_t *end() const { return e; }
  size_t size() const { return static_cast<size_t>(e - b); }
  int32_t operator[](size_t k) const { return b[k]; }
};

/// The plan's index of every parameter each op of a step names (-1: not
/// in the plan), resolved once for both lowerings: once per list of names,
/// which the ops naming the same parameters share (step::NameList).
class ParamRefs {
public:
  ParamRefs(const Step &s, const mfsdp_plan &p) {
    const ParamNames index(p);
    int32_t previous = -1; // the name before, in this list or the last
    for (const Op &op : s.ops) {
      if (op.params.empty())
        continue;
      Entry &at = place(&op.params.names());
      if (at.key)
        continue;
      if (ids.size() + op.params.size() > std::numeric_limits<uint32_t>::max()) {
        std::fprintf(stderr, "mfsdp: a step naming more than 2^32 parameters in its "
                             "ops' lists is beyond the step library\n");
        std::abort();
      }
      at.key = &op.params.names();
      at.first = static_cast<uint32_t>(ids.size());
      for (const std::string &n : op.params) {
        previous = index.find(n, previous);
        ids.push_back(previous);
      }
      at.end = static_cast<uint32_t>(ids.size());
      ++used;
    }
  }

  /// The parameters `op` (an op of the step, or a copy of one) names, in
  /// its order.
  ParamSpan of(const Op &op) const {
    if (op.params.empty())
      return {nullptr, nullptr};
    const Entry *at = table.empty() ? nullptr : &probe(table, &op.params.names());
    if (!at || !at->key)
      internalError("the step's program",
                    "an op's parameters looked up in the references of another step");
    return {ids.data() + at->first, ids.data() + at->end};
  }

private:
  // Per list of names (its address), its entries in ids: [first, end).
  // An open-addressed table (linear probing, at most half full): a lookup
  // is a slot or two, where a node-based map is a few cache misses.
  struct Entry {
    const void *key = nullptr;
    uint32_t first = 0, end = 0; // (ids stays below 2^32: see the constructor)
  };
  static size_t hashOf(const void *key) {
    uint64_t h = reinterpret_cast<uintptr_t>(key);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return static_cast<size_t>(h);
  }
  /// The entry of `key` in `t` (not empty), or the empty one where it
  /// would go.
  template <typename Table>
  static auto probe(Table &t, const void *key) -> decltype(t[0]) {
    const size_t mask = t.size() - 1;
    for (size_t at = hashOf(key) & mask;; at = (at + 1) & mask)
      if (t[at].key == key || !t[at].key)
        return t[at];
  }
  /// As probe, the table grown first where one more entry would fill it
  /// past half.
  Entry &place(const void *key) {
    if (2 * (used + 1) > table.size()) {
      std::vector<Entry> old(std::max<size_t>(1024, 2 * table.size()));
      old.swap(table);
      for (const Entry &e : old)
        if (e.key)
          probe(table, e.key) = e;
    }
    return probe(table, key);
  }

  std::vector<int32_t> ids;
  std::vector<Entry> table;
  size_t used = 0;
};

} // namespace mfsdp::step

#endif // MFSDP_LIB_STEP_PARAMREFS_H

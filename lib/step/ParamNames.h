//===- ParamNames.h - A plan's parameters by name ---------------*- C++ -*-===//
//
// The index of each parameter of an mfsdp_plan by its name, for the
// lowerings that resolve the names a step's ops carry (millions on a large
// step). Private to lib/step.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_LIB_STEP_PARAMNAMES_H
#define MFSDP_LIB_STEP_PARAMNAMES_H

#include "mfsdp/runtime.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <functional>
#include <vector>

namespace mfsdp::step {

/// A plan's parameter indices by name: the first parameter of each name,
/// as the plan's own lookups take it. The plan (and its names) must
/// outlive this.
class ParamNames {
public:
  explicit ParamNames(const mfsdp_plan &plan) : plan_(plan) {
    const int32_t n = plan.params ? std::max(plan.num_params, 0) : 0;
    size_t capacity = 16;
    while (capacity < 2 * static_cast<size_t>(n))
      capacity *= 2;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    first_.assign(static_cast<size_t>(n), false);
    for (int32_t i = 0; i < n; ++i) {
      if (!plan.params[i].name)
        continue;
      const std::string_view name(plan.params[i].name);
      const size_t h = hashOf(name);
      Slot &slot = slots_[slotAt(name, h)];
      if (slot.index < 0) { // (else a later parameter of a name already taken)
        slot = {static_cast<uint32_t>(h), i};
        first_[i] = true;
      }
    }
  }

  /// The index of the parameter named `name` (-1: none). The lists of
  /// names a step's ops carry follow the plan's order (a unit's
  /// parameters of one placement, the optimizer's groups in turn), so the
  /// few parameters after `previous` (the index of the name looked up
  /// before, -1: none) are tried first: comparisons with names near the
  /// one just read, where the table costs a cache miss or two a name.
  int32_t find(std::string_view name, int32_t previous = -1) const {
    if (previous >= 0)
      for (size_t j = static_cast<size_t>(previous) + 1;
           j < first_.size() && j <= static_cast<size_t>(previous) + kNear; ++j)
        if (first_[j] && named(static_cast<int32_t>(j), name))
          return static_cast<int32_t>(j);
    return slots_[slotAt(name, hashOf(name))].index;
  }

private:
  static constexpr size_t kNear = 8;

  /// An open-addressed table (linear probing, at most half full) of each
  /// name's first parameter, with the low bits of the name's hash beside
  /// it: a lookup reads one slot and, where the bits agree, one name.
  struct Slot {
    uint32_t tag = 0;
    int32_t index = -1; // -1: empty
  };

  static size_t hashOf(std::string_view name) {
    return std::hash<std::string_view>{}(name);
  }

  /// The slot of `name` (hash `h`), or the empty one where it would go.
  size_t slotAt(std::string_view name, size_t h) const {
    for (size_t at = h & mask_;; at = (at + 1) & mask_) {
      const Slot &slot = slots_[at];
      if (slot.index < 0 || (slot.tag == static_cast<uint32_t>(h) && named(slot.index, name)))
        return at;
    }
  }

  bool named(int32_t i, std::string_view name) const {
    const char *c = plan_.params[i].name;
    return std::strncmp(c, name.data(), name.size()) == 0 && c[name.size()] == '\0';
  }

  const mfsdp_plan &plan_;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  std::vector<bool> first_; // per parameter: the first of its name
};

} // namespace mfsdp::step

#endif // MFSDP_LIB_STEP_PARAMNAMES_H

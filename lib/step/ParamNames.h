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
#include <unordered_map>
#include <vector>

namespace mfsdp::step {

/// A plan's parameter indices by name: the first parameter of each name,
/// as the plan's own lookups take it. The plan (and its names) must
/// outlive this.
class ParamNames {
public:
  explicit ParamNames(const mfsdp_plan &plan) : plan_(plan) {
    const int32_t n = plan.params ? std::max(plan.num_params, 0) : 0;
    index_.reserve(static_cast<size_t>(n));
    first_.assign(static_cast<size_t>(n), false);
    for (int32_t i = 0; i < n; ++i)
      if (plan.params[i].name)
        first_[i] = index_.emplace(plan.params[i].name, i).second;
  }

  /// The index of the parameter named `name` (-1: none). The lists of
  /// names a step's ops carry follow the plan's order (a unit's
  /// parameters of one placement, the optimizer's groups in turn), so the
  /// few parameters after `previous` (the index of the name looked up
  /// before, -1: none) are tried first: comparisons with names near the
  /// one just read, where the hash table costs a few cache misses a name.
  int32_t find(std::string_view name, int32_t previous = -1) const {
    if (previous >= 0)
      for (size_t j = static_cast<size_t>(previous) + 1;
           j < first_.size() && j <= static_cast<size_t>(previous) + kNear; ++j)
        if (first_[j] && named(j, name))
          return static_cast<int32_t>(j);
    auto it = index_.find(name);
    return it == index_.end() ? -1 : it->second;
  }

private:
  static constexpr size_t kNear = 8;


  bool named(size_t i, std::string_view name) const {
    const char *c = plan_.params[i].name;
    return std::strncmp(c, name.data(), name.size()) == 0 && c[name.size()] == '\0';
  }

  const mfsdp_plan &plan_;
  std::unordered_map<std::string_view, int32_t> index_;
  std::vector<bool> first_; // per parameter: the first of its name
};

} // namespace mfsdp::step

#endif // MFSDP_LIB_STEP_PARAMNAMES_H

//===- PlanHash.h - The hash a runtime plan carries -------------*- C++ -*-===//
//
// Header-only so the compiler (which writes the hash into a generated step
// library) and the runtime (which checks it) compute exactly the same value
// without the compiler linking the runtime. FNV-1a over every field of the
// plan, in declaration order, parameter names included.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_RUNTIME_PLANHASH_H
#define MFSDP_RUNTIME_PLANHASH_H

#include "mfsdp/runtime.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>

namespace mfsdp::runtime {

inline uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
  const auto *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

template <typename T> uint64_t hashMix(uint64_t h, T v) {
  return fnv1a(h, &v, sizeof(v));
}

/// The hash of everything in `p` but its `hash` field.
inline uint64_t planHash(const mfsdp_plan &p) {
  uint64_t h = 1469598103934665603ull;
  h = hashMix(h, p.zero);
  h = hashMix(h, p.dp_replicate);
  h = hashMix(h, p.dp_shard);
  h = hashMix(h, p.world);
  h = hashMix(h, p.num_units);
  h = hashMix(h, p.num_params);
  for (int32_t i = 0; i < p.num_params && p.params; ++i) {
    const mfsdp_param_desc &d = p.params[i];
    if (d.name)
      h = fnv1a(h, d.name, std::strlen(d.name));
    h = hashMix(h, d.rows);
    h = hashMix(h, d.cols);
    h = hashMix(h, d.unit);
    h = hashMix(h, d.placement);
    h = hashMix(h, d.owner);
    h = hashMix(h, d.optimizer);
    h = hashMix(h, d.compute_dtype);
  }
  for (float f : {p.adamw_lr, p.adamw_beta1, p.adamw_beta2, p.adamw_eps,
                  p.adamw_weight_decay, p.sgd_lr, p.sgd_momentum,
                  p.sgd_weight_decay, p.muon_lr, p.muon_momentum,
                  p.muon_weight_decay})
    h = hashMix(h, f);
  h = hashMix(h, p.sgd_nesterov);
  h = hashMix(h, p.muon_nesterov);
  h = hashMix(h, p.muon_ns_steps);
  h = hashMix(h, p.muon_scale);
  return h;
}

} // namespace mfsdp::runtime

#endif // MFSDP_RUNTIME_PLANHASH_H

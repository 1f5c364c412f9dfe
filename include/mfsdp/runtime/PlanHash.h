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
    // Block extents: mixed in only when set, so a plan without block
    // shards keeps the hash it had before the fields existed.
    if (d.block_rows || d.block_cols) {
      h = hashMix(h, d.block_rows);
      h = hashMix(h, d.block_cols);
    }
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
  // Mixed only when set, so a plan without the split keeps the hash it had
  // before the field existed.
  if (p.ns_split)
    h = hashMix(h, p.ns_split);
  if (const mfsdp_memory_plan *m = p.memory) {
    h = hashMix(h, m->num_shard_ranks);
    // At most dp_shard entries are read, whatever num_shard_ranks says (a
    // corrupt count is refused by mfsdp_create, after hashing).
    for (int32_t r = 0; r < m->num_shard_ranks && r < p.dp_shard && m->arena_bytes; ++r)
      h = hashMix(h, m->arena_bytes[r]);
    for (int32_t i = 0; i < p.num_params && m->params; ++i) {
      const mfsdp_param_offsets &o = m->params[i];
      for (int64_t v : {o.master, o.exp_avg, o.exp_avg_sq, o.grad_shard, o.full,
                        o.full_backward, o.grad})
        h = hashMix(h, v);
    }
    h = hashMix(h, m->staging);
    h = hashMix(h, m->keep_grads);
    // Mixed only when set, so a plan without prefetch keeps its hash.
    if (m->prefetch)
      h = hashMix(h, m->prefetch);
    // Bucket staging: mixed only with buckets (at most num_buckets entries).
    for (int32_t b = 0; b < p.num_buckets && p.buckets && m->buckets; ++b)
      for (int64_t v : {m->buckets[b].gather, m->buckets[b].gather_backward,
                        m->buckets[b].reduce})
        h = hashMix(h, v);
  }
  // Buckets: mixed only when given, so a plan without them keeps its hash.
  if (p.num_buckets > 0 && p.buckets) {
    h = hashMix(h, p.num_buckets);
    for (int32_t b = 0; b < p.num_buckets; ++b) {
      const mfsdp_bucket &k = p.buckets[b];
      h = hashMix(h, k.unit);
      h = hashMix(h, k.placement);
      h = hashMix(h, k.num_params);
      for (int32_t i = 0; i < k.num_params && k.params && i < p.num_params; ++i)
        h = hashMix(h, k.params[i]);
    }
  }
  // The program: mixed only when given, so a plan without it keeps its
  // hash. Counts are clamped as mfsdp_create checks them (after hashing).
  if (const mfsdp_program *g = p.program) {
    h = hashMix(h, g->num_ops);
    for (int32_t i = 0; i < g->num_ops && g->ops; ++i) {
      const mfsdp_program_op &o = g->ops[i];
      for (int32_t v : {o.kind, o.unit, o.group, o.optimizer, o.only_rank, o.num_params})
        h = hashMix(h, v);
      for (int32_t k = 0; k < o.num_params && o.params && k < p.num_params; ++k)
        h = hashMix(h, o.params[k]);
    }
    h = hashMix(h, g->num_hooks);
    for (int32_t i = 0; i < g->num_hooks && g->hooks && i < 5 * (p.num_units + 1); ++i)
      for (int32_t v : {g->hooks[i].hook, g->hooks[i].unit, g->hooks[i].first_op,
                        g->hooks[i].num_ops})
        h = hashMix(h, v);
  }
  // The mesh: mixed only when given, so a plan without it keeps the hash
  // it had before the fields existed. At most 64 dims are read (a larger
  // count is refused by mfsdp_create, after hashing).
  if (p.num_mesh_dims > 0 && p.mesh_dims) {
    h = hashMix(h, p.num_mesh_dims);
    for (int32_t i = 0; i < p.num_mesh_dims && i < 64; ++i) {
      const mfsdp_mesh_dim &d = p.mesh_dims[i];
      if (d.name)
        h = fnv1a(h, d.name, std::strlen(d.name) + 1);
      h = hashMix(h, d.size);
    }
  }
  // The reduce dtype: mixed only when not fp32, so an fp32 plan keeps the
  // hash it had before the field existed.
  if (p.reduce_dtype != MFSDP_REDUCE_F32)
    h = hashMix(h, p.reduce_dtype);
  // The Newton-Schulz precision, likewise only when not fp32; tagged, so
  // that it never hashes as a reduce dtype would.
  if (p.muon_ns_precision != MFSDP_NS_PRECISION_FP32)
    h = hashMix(hashMix(h, 0x6e73), p.muon_ns_precision);
  return h;
}

} // namespace mfsdp::runtime

#endif // MFSDP_RUNTIME_PLANHASH_H

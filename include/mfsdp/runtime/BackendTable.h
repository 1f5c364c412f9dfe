/*===- BackendTable.h - A backend across dlopen, in C ---------------------===*
 *
 * libmfsdp_rt opens the CUDA backend (libmfsdp_rt_cuda.so) with dlopen and
 * looks up one symbol, MFSDP_RT_CUDA_BACKEND_SYMBOL. What crosses that
 * boundary is C only: the factory takes the options and the control plane
 * as C structs and fills a table of function pointers over an opaque
 * backend, each call taking plain C types (pointers, integers, floats,
 * C structs of them) and returning 0 or a nonzero code with the message in
 * last_error. No C++ object, std::string or std::vector crosses, and no
 * exception: every function catches what its side throws. So the two
 * libraries may be built by different compilers or standard libraries, and
 * a library of another table layout is refused (struct_size and version,
 * as in runtime.h) instead of misread.
 *
 * Each side adapts the tables to its C++ interfaces (Backend.h,
 * ControlPlane.h): backendFromTable and controlTable in libmfsdp_rt,
 * controlFromTable and backendTable in the CUDA library. The functions mean
 * what the Backend method of the same name means (Backend.h).
 *
 *===---------------------------------------------------------------------===*/
#ifndef MFSDP_RUNTIME_BACKENDTABLE_H
#define MFSDP_RUNTIME_BACKENDTABLE_H

#include "mfsdp/runtime.h"

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The layout version of the structs below (their `version` field).
 * 2: the fused optimizer kernels (adamw_multi, sgd_multi); 5: the
 * rounding 2-D copy (cast_to_bf16_strided); 6: Muon's symmetric-product
 * strip rows (mfsdp_rt_muon_hyper.ns_syrk_strip). */
#define MFSDP_RT_BACKEND_TABLE_VERSION 6

/* Groups (Backend.h: Group). */
#define MFSDP_RT_GROUP_SHARD 0
#define MFSDP_RT_GROUP_REPLICATE 1

/* How the ranks agree while the backend is created (ControlPlane.h):
 * minMax and broadcast over every rank of the world. */
typedef struct mfsdp_rt_control_table {
  uint32_t struct_size; /* sizeof(mfsdp_rt_control_table) */
  uint32_t version;     /* MFSDP_RT_BACKEND_TABLE_VERSION */
  void *self;
  int32_t rank, world;
  int32_t local_rank; /* this rank's index on its node: its CUDA device */
  int32_t torchrun;   /* 1: ranks from the torchrun environment */
  /* lo, hi (count values each) = the element-wise minimum and maximum of
   * every rank's `mine`. 0, or nonzero with a message in `error`
   * (error_size bytes, NUL-terminated). Collective. */
  int (*min_max)(void *self, const int64_t *mine, int64_t count, int64_t *lo,
                 int64_t *hi, char *error, size_t error_size);
  /* Rank 0's *size bytes of `blob` into `blob` on every rank (capacity
   * bytes; *size set). 0, or nonzero with a message. Collective. */
  int (*broadcast)(void *self, uint8_t *blob, int64_t *size, int64_t capacity,
                   char *error, size_t error_size);
} mfsdp_rt_control_table;

/* The options of a backend (Backend.h: BackendOptions). */
typedef struct mfsdp_rt_backend_options {
  uint32_t struct_size; /* sizeof(mfsdp_rt_backend_options) */
  uint32_t version;     /* MFSDP_RT_BACKEND_TABLE_VERSION */
  int32_t num_mesh_dims;
  const mfsdp_mesh_dim *mesh_dims; /* row-major, dp_shard and dp_replicate named */
  void *trainer_stream;            /* mfsdp_config.cuda_stream */
  const mfsdp_rt_control_table *control;
  int32_t timeout_ms; /* mfsdp_config.bootstrap_timeout_ms, under torchrun */
  int64_t collective_timeout_ms; /* mfsdp_config.collective_timeout_ms (> 0) */
} mfsdp_rt_backend_options;

/* Kernel arguments (Kernels.h: AdamWHyper, SGDHyper, MuonHyper, BlockGrid;
 * Bootstrap.h: BroadcastPart; Backend.h: FloatSpan), field for field. */
typedef struct mfsdp_rt_adamw_hyper {
  float lr, beta1, beta2, eps, weight_decay;
} mfsdp_rt_adamw_hyper;
typedef struct mfsdp_rt_sgd_hyper {
  float lr, momentum, weight_decay;
  int32_t nesterov;
} mfsdp_rt_sgd_hyper;
typedef struct mfsdp_rt_muon_hyper {
  float lr, momentum, weight_decay;
  int32_t nesterov;
  int64_t ns_steps;
  float ns_a, ns_b, ns_c, ns_eps;
  int32_t ns_norm;      /* NsNorm */
  int32_t scale;        /* MuonScale */
  int32_t ns_precision; /* NsPrecision */
  int32_t ns_form;      /* NsForm */
  int64_t ns_syrk_strip; /* NewtonSchulzHyper::syrkStrip */
} mfsdp_rt_muon_hyper;
/* One tensor of a fused optimizer call (Kernels.h: AdamWTensor, SGDTensor). */
typedef struct mfsdp_rt_adamw_tensor {
  float *param;
  const float *grad;
  float *m, *v;
  int64_t count;
  mfsdp_rt_adamw_hyper h;
  int64_t step;
} mfsdp_rt_adamw_tensor;
typedef struct mfsdp_rt_sgd_tensor {
  float *param;
  const float *grad;
  float *buf;
  int64_t count;
  mfsdp_rt_sgd_hyper h;
  int64_t step;
} mfsdp_rt_sgd_tensor;
typedef struct mfsdp_rt_block_grid {
  int64_t rows, cols, block_rows, block_cols, ranks;
} mfsdp_rt_block_grid;
typedef struct mfsdp_rt_broadcast_part {
  float *buf;
  int64_t count;
  int32_t root;
} mfsdp_rt_broadcast_part;
typedef struct mfsdp_rt_float_span {
  const float *buf;
  int64_t count;
} mfsdp_rt_float_span;

/* A backend: `self` and the functions over it (Backend.h). Functions
 * returning int return 0 or a nonzero code with the message in
 * last_error(self); `group` is MFSDP_RT_GROUP_*; a CommHandle is int64_t. */
typedef struct mfsdp_rt_backend_table {
  uint32_t struct_size; /* sizeof(mfsdp_rt_backend_table) */
  uint32_t version;     /* MFSDP_RT_BACKEND_TABLE_VERSION */
  void *self;
  void (*destroy)(void *self);
  const char *(*name)(void *self);
  const char *(*last_error)(void *self);
  DLDevice (*device)(void *self);
  int (*rank)(void *self, int32_t group);
  int (*size)(void *self, int32_t group);
  /* Memory. */
  int (*reserve)(void *self, int64_t bytes);
  int (*allocate)(void *self, int64_t count, float **out);
  int (*allocate_at)(void *self, int64_t offset, int64_t count, float **out);
  void (*release)(void *self, float *buf);
  int (*copy_from_host)(void *self, float *dst, const float *host_src, int64_t count);
  int (*copy_to_host)(void *self, float *host_dst, const float *src, int64_t count);
  int (*copy)(void *self, float *dst, const float *src, int64_t count);
  int (*copy_2d)(void *self, float *dst, int64_t dst_pitch, const float *src,
                 int64_t src_pitch, int64_t width, int64_t height);
  int (*zero)(void *self, float *buf, int64_t count);
  /* Collectives; counts (num_counts = the group's size) for the -v ones. */
  int (*all_gather)(void *self, int32_t group, const float *send, float *recv,
                    int64_t count);
  int (*reduce_scatter)(void *self, int32_t group, const float *send, float *recv,
                        int64_t count);
  int (*all_reduce)(void *self, int32_t group, float *buf, int64_t count);
  int (*all_gather_v)(void *self, int32_t group, const float *send, float *recv,
                      const int64_t *counts, int64_t num_counts);
  int (*reduce_scatter_v)(void *self, int32_t group, const float *send, float *recv,
                          const int64_t *counts, int64_t num_counts);
  int (*broadcast)(void *self, int32_t group, float *buf, int64_t count, int32_t root);
  int (*broadcast_many)(void *self, int32_t group, const mfsdp_rt_broadcast_part *parts,
                        int64_t num_parts);
  int (*all_reduce_doubles)(void *self, int32_t group, double *values, int64_t count);
  int (*start_all_gather)(void *self, int32_t group, const float *send, float *recv,
                          int64_t count, int64_t *handle);
  int (*start_all_gather_v)(void *self, int32_t group, const float *send, float *recv,
                            const int64_t *counts, int64_t num_counts, int64_t *handle);
  int (*wait)(void *self, int64_t handle);
  int (*start_reduce_scatter)(void *self, int32_t group, const float *send, float *recv,
                              int64_t count, int64_t *handle);
  int (*start_reduce_scatter_v)(void *self, int32_t group, const float *send,
                                float *recv, const int64_t *counts, int64_t num_counts,
                                int64_t *handle);
  int (*start_all_reduce)(void *self, int32_t group, float *buf, int64_t count,
                          int64_t *handle);
  /* Kernels. */
  int (*round_to_bf16)(void *self, float *buf, int64_t count);
  int (*scale)(void *self, float *buf, int64_t count, float factor);
  int (*pack_blocks)(void *self, const float *whole, float *packed,
                     const mfsdp_rt_block_grid *grid, int64_t first_block,
                     int64_t num_blocks);
  int (*unpack_blocks)(void *self, const float *packed, float *whole,
                       const mfsdp_rt_block_grid *grid, int64_t first_block,
                       int64_t num_blocks);
  int (*adamw_step)(void *self, float *param, const float *grad, float *m, float *v,
                    int64_t count, const mfsdp_rt_adamw_hyper *h, int64_t step);
  int (*sgd_step)(void *self, float *param, const float *grad, float *buf, int64_t count,
                  const mfsdp_rt_sgd_hyper *h, int64_t step);
  int (*adamw_multi)(void *self, const mfsdp_rt_adamw_tensor *tensors, int64_t n);
  int (*sgd_multi)(void *self, const mfsdp_rt_sgd_tensor *tensors, int64_t n);
  int (*sum_squares)(void *self, const mfsdp_rt_float_span *spans, int64_t num_spans,
                     double *out);
  int64_t (*muon_scratch)(void *self, int64_t rows, int64_t cols);
  int (*muon_step)(void *self, float *param, const float *grad, float *buf, int64_t rows,
                   int64_t cols, const mfsdp_rt_muon_hyper *h, float *scratch);
  /* Ordering. */
  int (*after_trainer)(void *self);
  void *(*kernel_stream)(void *self);
  int (*synchronize)(void *self);
  /* bf16 compute copies (16-bit elements); handle NULL: complete on return. */
  int (*all_gather_bf16)(void *self, int32_t group, const uint16_t *send, uint16_t *recv,
                         const int64_t *counts, int64_t num_counts, int64_t *handle);
  int (*cast_to_bf16)(void *self, const float *in, uint16_t *out, int64_t count);
  int (*cast_from_bf16)(void *self, const uint16_t *in, float *out, int64_t count);
  int (*copy_2d_bf16)(void *self, uint16_t *dst, int64_t dst_pitch, const uint16_t *src,
                      int64_t src_pitch, int64_t width, int64_t height);
  /* The reduce dtype bf16 (bf16 sums); handle NULL: complete on return. */
  int (*reduce_scatter_bf16)(void *self, int32_t group, const uint16_t *send,
                             uint16_t *recv, const int64_t *counts, int64_t num_counts,
                             int64_t *handle);
  int (*all_reduce_bf16)(void *self, int32_t group, uint16_t *buf, int64_t count,
                         int64_t *handle);
  /* A 2-D copy from fp32 to bf16, rounding (version 5). */
  int (*cast_to_bf16_strided)(void *self, uint16_t *dst, int64_t dst_pitch,
                              const float *src, int64_t src_pitch, int64_t width,
                              int64_t height);
} mfsdp_rt_backend_table;

/* The one symbol libmfsdp_rt_cuda exports for libmfsdp_rt: fills `table`
 * (its struct_size and version set by the caller, checked by the callee)
 * with a backend on this rank's device. Collective over options->control:
 * every rank gets a backend, or every rank gets a nonzero code with the
 * reason in `error` (error_size bytes, NUL-terminated). */
#define MFSDP_RT_CUDA_BACKEND_SYMBOL "mfsdp_rt_cuda_backend_create"
typedef int (*mfsdp_rt_create_backend_fn)(const mfsdp_rt_backend_options *options,
                                          mfsdp_rt_backend_table *table, char *error,
                                          size_t error_size);

#ifdef __cplusplus
}

#include <string>

namespace mfsdp::rt {

class Backend;
class ControlPlane;

/// libmfsdp_rt's side: a Backend over a table (it calls table.destroy when
/// deleted), and a table over a control plane (valid while `control` is).
Backend *backendFromTable(const mfsdp_rt_backend_table &table);
mfsdp_rt_control_table controlTable(ControlPlane &control);

/// The CUDA library's side: a control plane over a table (valid while the
/// table's `self` is), and a table over a backend it takes (destroy deletes
/// it).
ControlPlane *controlFromTable(const mfsdp_rt_control_table &table);
mfsdp_rt_backend_table backendTable(Backend *backend);

/// Copies `message` into a caller's error buffer (NUL-terminated, cut to
/// fit).
void copyError(const std::string &message, char *error, size_t errorSize);

} // namespace mfsdp::rt
#endif

#endif /* MFSDP_RUNTIME_BACKENDTABLE_H */

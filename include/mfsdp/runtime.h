/*===- runtime.h - The C ABI of the mfsdp step runtime -------------------===*
 *
 * A trainer links the step library and calls it where FSDP2 runs its hooks:
 * around each unit's forward and backward, and for the optimizer step. The
 * library owns the sharded parameters (fp32 masters), gradients and
 * optimizer state, runs every collective and optimizer kernel, and hands
 * the trainer DLPack views of gathered parameters and of gradient buffers.
 *
 * Every call returns a status; on failure mfsdp_last_error() says what
 * happened and where. Collective calls (create, the hooks, the optimizer
 * step, load and store) must be made by every rank in the same order.
 *
 *===---------------------------------------------------------------------===*/
#ifndef MFSDP_RUNTIME_H
#define MFSDP_RUNTIME_H

#include <dlpack/dlpack.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mfsdp_status {
  MFSDP_OK = 0,
  MFSDP_ERROR_INVALID = 1, /* a bad argument: index out of range, null */
  MFSDP_ERROR_ORDER = 2,   /* hooks called out of order */
  MFSDP_ERROR_PLAN = 3,    /* a plan for another world size, or corrupt */
  MFSDP_ERROR_COMM = 4,    /* a collective failed */
  MFSDP_ERROR_BACKEND = 5, /* the backend is unavailable (no CUDA driver or
                              device) or failed (out of memory, a kernel) */
} mfsdp_status;

typedef enum mfsdp_placement {
  MFSDP_ROW_SHARD = 0, /* torch.chunk rows over dp_shard */
  MFSDP_OWNER = 1,     /* whole on one dp_shard rank */
  MFSDP_REPLICATE = 2, /* whole on every rank */
} mfsdp_placement;

typedef enum mfsdp_optimizer {
  MFSDP_OPT_NONE = 0,
  MFSDP_OPT_ADAMW = 1,
  MFSDP_OPT_SGD = 2,
  MFSDP_OPT_MUON = 3,
} mfsdp_optimizer;

typedef enum mfsdp_compute_dtype {
  MFSDP_COMPUTE_F32 = 0,
  /* The gathered compute copy is rounded to bf16 (round to nearest even),
   * and so is the gradient before it is reduced (the reduction sums in
   * fp32); masters and optimizer state stay fp32. Views stay fp32 arrays
   * holding bf16 values. */
  MFSDP_COMPUTE_BF16 = 1,
} mfsdp_compute_dtype;

typedef struct mfsdp_param_desc {
  const char *name;
  int64_t rows, cols;    /* cols = 1 for a 1-D tensor */
  int32_t unit;          /* index in forward order */
  int32_t placement;     /* mfsdp_placement */
  int32_t owner;         /* dp_shard rank, for MFSDP_OWNER */
  int32_t optimizer;     /* mfsdp_optimizer */
  int32_t compute_dtype; /* mfsdp_compute_dtype */
} mfsdp_param_desc;

/* The plan: what the compiler decided, as constants. */
typedef struct mfsdp_plan {
  uint64_t hash; /* mfsdp_plan_hash() of the rest */
  int32_t zero;  /* 1, 2 or 3 */
  int32_t dp_replicate, dp_shard;
  int32_t world; /* all ranks (other mesh dims included) */
  int32_t num_units, num_params;
  const mfsdp_param_desc *params;
  float adamw_lr, adamw_beta1, adamw_beta2, adamw_eps, adamw_weight_decay;
  float sgd_lr, sgd_momentum, sgd_weight_decay;
  int32_t sgd_nesterov;
  float muon_lr, muon_momentum, muon_weight_decay;
  int32_t muon_nesterov, muon_ns_steps, muon_scale; /* 0 match_rms_adamw, 1 original */
} mfsdp_plan;

typedef struct mfsdp_step mfsdp_step;

/* The hash a plan must carry; a library refuses a plan whose hash differs. */
uint64_t mfsdp_plan_hash(const mfsdp_plan *plan);

/* Creates the runtime on every rank (MPI must be initialised). Fails with
 * MFSDP_ERROR_PLAN when the plan was built for another world size. Runs
 * the host backend: mfsdp_create_with_config(plan, NULL, out). */
mfsdp_status mfsdp_create(const mfsdp_plan *plan, mfsdp_step **out);

/* Where the runtime keeps its buffers and runs its collectives and
 * kernels. */
typedef enum mfsdp_backend {
  MFSDP_BACKEND_HOST = 0, /* host memory, MPI, OpenBLAS (libmfsdp_rt) */
  MFSDP_BACKEND_CUDA = 1, /* device memory, NCCL, CUDA kernels: loaded from
                             libmfsdp_rt_cuda.so; device = rank on the node */
} mfsdp_backend;

/* Options of mfsdp_create_with_config; a zero-initialised config (or NULL)
 * is the host backend. */
typedef struct mfsdp_config {
  int32_t backend; /* mfsdp_backend */
} mfsdp_config;

/* mfsdp_create on a chosen backend (collective). When the CUDA backend
 * cannot run here (no driver, libmfsdp_rt_cuda.so missing, no device for a
 * rank), every rank fails with MFSDP_ERROR_BACKEND and an error starting
 * "the CUDA backend is not available: ". */
mfsdp_status mfsdp_create_with_config(const mfsdp_plan *plan,
                                      const mfsdp_config *config,
                                      mfsdp_step **out);
void mfsdp_destroy(mfsdp_step *step);

/* Per-unit hooks. pre_forward gathers the unit's parameters (it may be
 * called again during backward, for activation-checkpoint recomputation);
 * post_forward frees them under ZeRO-3; pre_backward gathers them and
 * provides zeroed gradient buffers (kept across no-sync microbatches);
 * post_backward reduces the gradients (unless no-sync) and frees. */
mfsdp_status mfsdp_pre_forward(mfsdp_step *step, int32_t unit);
mfsdp_status mfsdp_post_forward(mfsdp_step *step, int32_t unit);
mfsdp_status mfsdp_pre_backward(mfsdp_step *step, int32_t unit);
mfsdp_status mfsdp_post_backward(mfsdp_step *step, int32_t unit);

/* One optimizer step on every rank's shards and owned matrices, after the
 * post_backward of every unit. */
mfsdp_status mfsdp_optimizer_step(mfsdp_step *step);
mfsdp_status mfsdp_zero_grad(mfsdp_step *step);
/* While set, post_backward accumulates locally and does not reduce. */
mfsdp_status mfsdp_set_no_sync(mfsdp_step *step, int32_t no_sync);

/* Views (fp32, row-major) of a gathered parameter and of its gradient
 * buffer (the trainer adds into it). Valid until the unit is freed. The
 * device is the backend's: kDLCPU, or kDLCUDA with the rank's device id.
 * Work on them is done when the hook that provides them returns; the
 * trainer's own writes must be done (its stream synchronised) before it
 * calls the next hook. */
mfsdp_status mfsdp_param_view(mfsdp_step *step, int32_t param, DLTensor *out);
mfsdp_status mfsdp_grad_view(mfsdp_step *step, int32_t param, DLTensor *out);

/* Whole-parameter load and store (every rank calls; `full` holds rows*cols
 * floats on every rank). */
mfsdp_status mfsdp_load_param(mfsdp_step *step, int32_t param, const float *full);
mfsdp_status mfsdp_store_param(mfsdp_step *step, int32_t param, float *full);

/* Optimizer state, whole, like the parameters: EXP_AVG is AdamW's first
 * moment and the SGD / Muon momentum buffer; EXP_AVG_SQ is AdamW's second
 * moment. With the step count (AdamW's bias correction) and the parameters
 * they are a checkpoint: a run stored and loaded into a fresh runtime
 * continues exactly. Load is local (every rank passes the whole tensor);
 * store is collective. */
typedef enum mfsdp_state {
  MFSDP_STATE_EXP_AVG = 0,
  MFSDP_STATE_EXP_AVG_SQ = 1,
} mfsdp_state;
mfsdp_status mfsdp_load_state(mfsdp_step *step, int32_t param, int32_t which,
                              const float *full);
mfsdp_status mfsdp_store_state(mfsdp_step *step, int32_t param, int32_t which,
                               float *full);
mfsdp_status mfsdp_step_count(mfsdp_step *step, int64_t *count);
mfsdp_status mfsdp_set_step_count(mfsdp_step *step, int64_t count);

const char *mfsdp_last_error(mfsdp_step *step);

/* A generated step library (mfsdp-compile) exports these two functions:
 * its plan, and mfsdp_create on that plan. A trainer links the library or
 * opens it with dlopen() and looks them up by these names. */
#define MFSDP_STEP_PLAN_SYMBOL "mfsdp_step_plan"
#define MFSDP_STEP_CREATE_SYMBOL "mfsdp_step_create"
typedef const mfsdp_plan *(*mfsdp_step_plan_fn)(void);
typedef mfsdp_status (*mfsdp_step_create_fn)(mfsdp_step **out);

#ifdef __cplusplus
}
#endif

#endif /* MFSDP_RUNTIME_H */

/*===- runtime.h - The C ABI of the mfsdp step runtime -------------------===*
 *
 * A trainer links the step library and calls it where FSDP2 runs its hooks:
 * around each unit's forward and backward, and for the optimizer step. The
 * library owns the sharded parameters (fp32 masters), gradients and
 * optimizer state, runs every collective and optimizer kernel, and hands
 * the trainer DLPack views of gathered parameters and of gradient buffers.
 *
 * Every call returns a status; on failure mfsdp_last_error() says what
 * happened and where (mfsdp_status_string() names the status). Collective
 * calls (create, the hooks, the optimizer step, load and store) must be
 * made by every rank in the same order.
 *
 * Versions. The header and the library carry a version
 * (MFSDP_VERSION_CODE; mfsdp_get_version() is the library's), and the two
 * structs a caller fills, mfsdp_plan and mfsdp_config, carry their size and
 * layout version in their first fields: initialise them with
 * MFSDP_PLAN_INITIALIZER / MFSDP_CONFIG_INITIALIZER (as NCCL's
 * ncclConfig_t), then set what differs. mfsdp_create refuses a struct whose
 * size or version this library does not read (a plan or step library
 * built against another header): MFSDP_ERROR_PLAN for a plan,
 * MFSDP_ERROR_INVALID for a config, with the sizes and versions in the
 * message. A zero-initialised struct is refused the same way.
 *
 * Ownership and lifetime. The caller owns every struct and array it
 * passes. mfsdp_create copies the plan struct, but keeps the pointers in
 * it: the parameter table, the memory plan and the bucket tables must stay
 * valid and unchanged until mfsdp_destroy (a step library's plan is static
 * data, valid while the library is loaded); the config is read during
 * mfsdp_create only. The runtime owns every buffer it hands out: a view's
 * data is valid until its unit's buffers are released (see the hooks), its
 * shape until mfsdp_destroy. mfsdp_last_error's string belongs to the
 * runtime and is valid until the next call on that runtime. Strings and
 * tables returned by functions without a runtime (mfsdp_status_string) are
 * static.
 *
 * Threads. A runtime is not thread-safe: calls on one mfsdp_step must not
 * overlap (one thread, or the caller's lock); the DLPack views may be read
 * and written from any thread between calls. Separate runtimes share
 * nothing but the communication library: under MPI, calls on two runtimes
 * from two threads at once need MPI_THREAD_MULTIPLE. mfsdp_plan_hash,
 * mfsdp_get_version and mfsdp_status_string are thread-safe.
 *
 * Exceptions. No C++ exception leaves an entry point: one thrown inside
 * the runtime (out of host memory, a failure in a backend or its
 * libraries) becomes MFSDP_ERROR_BACKEND with the call and the
 * exception's message in mfsdp_last_error. The runtime's state after such
 * a failure is that of a failed call: destroy it, or retry only calls that
 * are not collective.
 *
 *===---------------------------------------------------------------------===*/
#ifndef MFSDP_RUNTIME_H
#define MFSDP_RUNTIME_H

#include <mfsdp/Vocabulary.h>
#include <mfsdp/plan.h>

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header (and of the library built with it):
 * MFSDP_VERSION_CODE = major * 10000 + minor * 100 + patch. */
#define MFSDP_VERSION_MAJOR 0
#define MFSDP_VERSION_MINOR 15
#define MFSDP_VERSION_PATCH 0
#define MFSDP_VERSION(X, Y, Z) ((X) * 10000 + (Y) * 100 + (Z))
#define MFSDP_VERSION_CODE \
  MFSDP_VERSION(MFSDP_VERSION_MAJOR, MFSDP_VERSION_MINOR, MFSDP_VERSION_PATCH)

/* The layout version of mfsdp_config (its `version` field), raised
 * whenever a field is added, removed or changed; mfsdp_plan's is
 * MFSDP_PLAN_VERSION (mfsdp/plan.h). */
#define MFSDP_CONFIG_VERSION 2

typedef enum mfsdp_status {
  MFSDP_OK = 0,
  MFSDP_ERROR_INVALID = 1, /* a bad argument: index out of range, null */
  MFSDP_ERROR_ORDER = 2,   /* hooks called out of order */
  MFSDP_ERROR_PLAN = 3,    /* a plan for another world size, or corrupt */
  MFSDP_ERROR_COMM = 4,    /* a collective failed */
  MFSDP_ERROR_BACKEND = 5, /* the backend is unavailable (no CUDA driver or
                              device) or failed (out of memory, a kernel) */
  MFSDP_ERROR_IO = 6,      /* a checkpoint file could not be written or
                              read, or is damaged (a checksum differs) */
} mfsdp_status;

/* A status's name ("MFSDP_ERROR_PLAN"), or "unknown mfsdp_status" for a
 * value that is not one; static, never NULL. */
const char *mfsdp_status_string(mfsdp_status status);

/* The library's MFSDP_VERSION_CODE (which may differ from the header's a
 * trainer was built with). MFSDP_ERROR_INVALID when `version` is NULL. */
mfsdp_status mfsdp_get_version(int32_t *version);

typedef struct mfsdp_step mfsdp_step;

/* The hash a plan must carry; a library refuses a plan whose hash differs.
 * Reads the plan only; thread-safe; 0 for NULL. */
uint64_t mfsdp_plan_hash(const mfsdp_plan *plan);

/* Creates the runtime on every rank (MPI must be initialised). Fails with
 * MFSDP_ERROR_PLAN when the plan was built for another world size. Runs
 * the host backend with ranks from MPI: mfsdp_create_with_config(plan,
 * NULL, out). Collective. *out is set even on failure (a runtime that
 * holds the message, NULL only when not even that could be allocated):
 * the caller owns it and frees it with mfsdp_destroy. */
mfsdp_status mfsdp_create(const mfsdp_plan *plan, mfsdp_step **out);

/* Where the runtime keeps its buffers and runs its collectives and
 * kernels. */
typedef enum mfsdp_backend {
  MFSDP_BACKEND_HOST = 0, /* host memory, MPI, OpenBLAS (libmfsdp_rt) */
  MFSDP_BACKEND_CUDA = 1, /* device memory, NCCL, CUDA kernels: loaded from
                             libmfsdp_rt_cuda.so; device = rank on the node */
} mfsdp_backend;

/* Where the ranks, the world size and the device come from, and how the
 * ranks agree while mfsdp_create runs. */
typedef enum mfsdp_bootstrap {
  /* mpirun: MPI must be initialised; the world is MPI_COMM_WORLD and the
   * CUDA device the rank's index on its node. */
  MFSDP_BOOTSTRAP_MPI = 0,
  /* torchrun (or any launcher following its convention): RANK,
   * WORLD_SIZE, LOCAL_RANK (default RANK; the CUDA device), MASTER_ADDR
   * and MASTER_PORT. No MPI call is made: rank 0 listens on MASTER_PORT
   * during mfsdp_create (the port must be free: not the one a
   * torch.distributed store listens on) and the ranks agree, and the CUDA
   * backend's NCCL communicators get their unique id, over TCP through it.
   * Each wait is bounded by bootstrap_timeout_ms, so a rank that is
   * missing or dies is an error on every rank, not a hang. The host
   * backend's collectives are gloo's under it (TCP between the ranks,
   * connected through rank 0 while mfsdp_create runs; each rank listens on
   * the interface it reaches MASTER_ADDR over, or on GLOO_SOCKET_IFNAME). */
  MFSDP_BOOTSTRAP_TORCHRUN = 1,
} mfsdp_bootstrap;

/* Options of mfsdp_create_with_config. MFSDP_CONFIG_INITIALIZER (or a NULL
 * config) is the host backend with ranks from MPI. */
typedef struct mfsdp_config {
  /* sizeof(mfsdp_config) and MFSDP_CONFIG_VERSION (MFSDP_CONFIG_INITIALIZER
   * sets them); a config of another size or version is refused. */
  uint32_t struct_size;
  uint32_t version;
  int32_t backend; /* mfsdp_backend */
  /* CUDA backend: the trainer's stream (a cudaStream_t). Every call that
   * touches buffers the trainer may still be reading or writing (the hooks,
   * the optimizer step, zero_grad, load and store) first makes the
   * runtime's streams wait for the work issued on it so far. NULL: the
   * legacy default stream. Ignored by the host backend. */
  void *cuda_stream;
  int32_t bootstrap; /* mfsdp_bootstrap */
  /* MFSDP_BOOTSTRAP_TORCHRUN: how long rank 0 waits for the other ranks
   * at each step of mfsdp_create (they wait twice as long for its answer),
   * in milliseconds; 0 is MFSDP_BOOTSTRAP_TIMEOUT_MS_DEFAULT. Ignored
   * under MPI. */
  int32_t bootstrap_timeout_ms;
  /* Where each rank writes a Chrome / Perfetto trace of the run (the wall
   * time of every hook, collective, wait, copy and optimizer kernel;
   * docs/runtime.md, "Trace"): every "%r" replaced by the world rank, or,
   * without one, ".rank<N>.json" appended. NULL or "": the MFSDP_TRACE
   * environment variable, the same way; unset or empty, no trace. A file
   * that cannot be written fails mfsdp_create with MFSDP_ERROR_INVALID. */
  const char *trace_path;
  /* The watchdog: how long any wait for a collective may take, in
   * milliseconds; 0 is MFSDP_COLLECTIVE_TIMEOUT_MS_DEFAULT (10 minutes, as
   * PyTorch's NCCL process groups). A collective that does not complete in
   * time (a peer stopped, dead, or calling something else) fails the call
   * on every rank that waits with MFSDP_ERROR_COMM, naming the call, the
   * unit, the collective, its group and the ranks that did not arrive; the
   * runtime is unusable then (destroy it and end the job: see
   * docs/runtime.md, "Watchdog"). Host backend: MPI's nonblocking
   * collectives tested against the deadline, gloo's own timeout. */
  int64_t collective_timeout_ms;
} mfsdp_config;

/* The default config of this header's layout (every field listed; keep it
 * in the order of the fields). */
#define MFSDP_CONFIG_INITIALIZER                                              \
  {                                                                           \
    (uint32_t)sizeof(mfsdp_config), MFSDP_CONFIG_VERSION, MFSDP_BACKEND_HOST, \
        NULL, MFSDP_BOOTSTRAP_MPI, 0, NULL, 0                                 \
  }

#define MFSDP_COLLECTIVE_TIMEOUT_MS_DEFAULT 600000 /* 10 minutes */

#define MFSDP_BOOTSTRAP_TIMEOUT_MS_DEFAULT 300000 /* 5 minutes */

/* mfsdp_create on a chosen backend and bootstrap (collective). When the
 * CUDA backend cannot run here (no driver, libmfsdp_rt_cuda.so missing, no
 * device for a rank), every rank fails with MFSDP_ERROR_BACKEND and an
 * error starting "the CUDA backend is not available: ". The torchrun
 * bootstrap fails with MFSDP_ERROR_INVALID when a variable is missing or
 * bad (the error names it and what was expected) or the host backend is
 * asked for from a libmfsdp_rt built without gloo, and with
 * MFSDP_ERROR_COMM when the ranks cannot reach each other in time. */
mfsdp_status mfsdp_create_with_config(const mfsdp_plan *plan,
                                      const mfsdp_config *config,
                                      mfsdp_step **out);
/* Frees a runtime and every buffer it handed out (views become invalid).
 * Waits for the collectives it started, so every rank destroys its runtime
 * (after the same calls). NULL is ignored. Every entry point checks that its
 * handle is a runtime mfsdp_create made and mfsdp_destroy has not freed: a
 * runtime destroyed twice is reported on stderr and ignored, and any other
 * call on a freed handle fails with MFSDP_ERROR_INVALID (the message in
 * mfsdp_last_error(NULL)) instead of touching freed memory. */
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

/* Ends a forward of `unit` that will have no backward (evaluation,
 * torch.no_grad, a forward that raised): after its post_forward (or its
 * pre_forward alone), the unit is idle again, its gathered copy freed under
 * ZeRO-3 and its gradients left as they were (an optimizer step after an
 * evaluation forward still finds them reduced). Not collective. */
mfsdp_status mfsdp_end_forward(mfsdp_step *step, int32_t unit);
/* Ends a backward of `unit` that stopped (an exception) after its
 * pre_backward and before its post_backward: the collectives in flight
 * complete, its gathered copy is freed and (unless the plan keeps them) its
 * gradient buffers; its gradients are not reduced, so an optimizer step
 * needs a new backward (zero_grad first: units whose post_backward ran in
 * the stopped backward hold its gradients; a plan that frees gradients
 * refuses another backward before zero_grad, one that keeps them adds to
 * them). Not collective: every rank whose backward stopped
 * calls it (a rank whose backward went on waits for the others in its
 * reductions until the watchdog ends them). */
mfsdp_status mfsdp_end_backward(mfsdp_step *step, int32_t unit);

/* One optimizer step on every rank's shards and owned matrices, after the
 * post_backward of every unit, with each parameter's hyperparameters
 * (mfsdp_hparams). It consumes the reduced gradients: another step before
 * a backward has reduced new ones is MFSDP_ERROR_ORDER (zero_grad does not
 * make them new), as is a step before every unit's gradients are reduced. */
mfsdp_status mfsdp_optimizer_step(mfsdp_step *step);
/* Zeroes the gradient buffers handed out. Every rank calls it: it first
 * completes the collectives still in flight (overlapped reductions). */
mfsdp_status mfsdp_zero_grad(mfsdp_step *step);
/* While set, post_backward accumulates locally and does not reduce (local;
 * every rank sets the same). */
mfsdp_status mfsdp_set_no_sync(mfsdp_step *step, int32_t no_sync);

/* Parameters that got no gradient. By default (MFSDP_UNUSED_STEP) the
 * optimizer step updates every parameter an optimizer steps with what its
 * gradient buffer holds: zeros where no backward wrote (AdamW still decays
 * it, and its moments move). torch.optim skips a parameter whose .grad is
 * None instead; MFSDP_UNUSED_SKIP is that rule:
 * mfsdp_mark_no_grad(step, param) says that this rank's backward of the
 * parameter's unit produced no gradient for it, and the optimizer step
 * leaves alone every parameter that no rank's backward gave a gradient
 * since the last optimizer step or zero_grad (any microbatch, any rank:
 * the global batch's rule). A skipped parameter, its optimizer state and
 * its step count (AdamW's bias correction, SGD's first momentum) stay as
 * they are; each parameter counts its own steps, as torch.optim's state
 * does (mfsdp_param_step_count; checkpoints keep them). Costs one
 * all-reduce of one double per parameter at each optimizer step, queued
 * behind the reductions still in flight.
 * mfsdp_set_unused_grads is collective (between steps): ranks that ask for
 * different rules fail with MFSDP_ERROR_INVALID, every one of them. */
typedef enum mfsdp_unused_grads {
  MFSDP_UNUSED_STEP = 0, /* every parameter stepped (zeros if unused) */
  MFSDP_UNUSED_SKIP = 1, /* torch.optim's: unused everywhere, skipped */
} mfsdp_unused_grads;
mfsdp_status mfsdp_set_unused_grads(mfsdp_step *step, int32_t rule);
/* Local; under MFSDP_UNUSED_SKIP, while the parameter's unit is in its
 * backward (after pre_backward, before post_backward); else
 * MFSDP_ERROR_ORDER. */
mfsdp_status mfsdp_mark_no_grad(mfsdp_step *step, int32_t param);
/* The optimizer steps that updated `param` (local): the step count, less
 * the steps that skipped it. */
mfsdp_status mfsdp_param_step_count(mfsdp_step *step, int32_t param, int64_t *count);

/* The precision of Muon's Newton-Schulz products: mfsdp_ns_precision
 * (MFSDP_NS_PRECISION_FP32, MFSDP_NS_PRECISION_BF16), in
 * mfsdp/Vocabulary.h. */

/* One parameter's optimizer hyperparameters, changed between steps as
 * torch.optim's param_groups and lr schedulers change them. A field
 * applies to the optimizers named beside it; the others ignore it, and
 * keep it as it was given. */
typedef struct mfsdp_hparams {
  float lr, weight_decay;  /* every optimizer (decoupled for AdamW and Muon:
                              p -= lr * weight_decay * p; SGD adds
                              weight_decay * p to the gradient) */
  float beta1, beta2, eps; /* AdamW */
  float momentum;          /* SGD, Muon */
  int32_t nesterov;        /* SGD, Muon: 0 or 1 */
  /* Muon: the Newton-Schulz steps, their coefficients (a, b, c) (default
   * 3.4445, -4.7750, 2.0315), the normalisation (mfsdp_ns_norm) and its
   * epsilon (default 1e-7), the update scale (mfsdp_adjust_lr). */
  int32_t ns_steps;
  float ns_a, ns_b, ns_c;
  float ns_eps;
  int32_t ns_norm;
  int32_t adjust_lr;
  int32_t ns_precision; /* Muon: mfsdp_ns_precision (default fp32) */
} mfsdp_hparams;

/* A parameter's hyperparameters (local). After mfsdp_create each holds the
 * plan's constants: lr and weight_decay of the parameter's optimizer (0 for
 * MFSDP_OPT_NONE), beta1, beta2 and eps AdamW's, momentum and nesterov
 * SGD's for an SGD parameter and Muon's for the others, ns_steps and
 * adjust_lr Muon's (muon_ns_steps, muon_scale), ns_precision the plan's
 * muon_ns_precision, the Newton-Schulz coefficients and epsilon the
 * defaults above with MFSDP_NS_NORM_ADD_EPS:
 * a runtime whose hyperparameters are never set steps exactly as before
 * they existed. */
mfsdp_status mfsdp_get_hparams(mfsdp_step *step, int32_t param,
                               mfsdp_hparams *out);
/* Replaces a parameter's hyperparameters from the next optimizer step on
 * (local, not collective; every rank must set the same values, as every
 * rank of a torch job holds the same param_groups: a parameter's shards
 * stepped with different values, or replicas under HSDP, would drift
 * apart). The fields that apply to its optimizer are checked: lr and
 * weight_decay finite and >= 0; AdamW 0 <= beta1, beta2 < 1 and eps finite
 * and > 0; SGD and Muon momentum finite and >= 0, nesterov 0 or 1; Muon
 * ns_steps >= 0, ns_a, ns_b and ns_c finite, ns_eps finite and > 0,
 * ns_norm, adjust_lr and ns_precision one of their enums. Anything else is
 * MFSDP_ERROR_INVALID naming the parameter and the field, and nothing
 * changes. The step count (AdamW's bias correction) is the runtime's,
 * whatever the hyperparameters. */
mfsdp_status mfsdp_set_hparams(mfsdp_step *step, int32_t param,
                               const mfsdp_hparams *in);

/* Gradient-norm clipping, as torch.nn.utils.clip_grad_norm_ (collective;
 * after the post_backward of every unit, before optimizer_step; every rank
 * passes the same max_norm and extra_sq). The total norm is sqrt(the sum
 * of the squares of the reduced gradients of every parameter an optimizer
 * steps (MFSDP_OPT_NONE left out), each element once over the
 * data-parallel ranks, + extra_sq), where extra_sq >= 0 is the caller's
 * sum of squares of gradients the runtime does not hold (external
 * parameters). The sums are in double. *total_norm gets it on every rank
 * of the data-parallel groups, the same bits everywhere. With max_norm
 * finite and > 0, every reduced gradient is then multiplied by min(1,
 * max_norm / (total + 1e-6)) (in fp32); with max_norm <= 0 or infinite the
 * norm is only computed. A non-finite total (a gradient holds an inf or a
 * nan) is returned as it is and nothing is scaled (torch would multiply
 * by nan or 0: every gradient non-finite or zero): skip the step (zero_grad
 * and the next backward), as torch's GradScaler does. The gradient views
 * (this rank's, not reduced) are not changed. MFSDP_ERROR_ORDER before
 * every unit's gradients are reduced, or once optimizer_step consumed
 * them; MFSDP_ERROR_INVALID for a nan max_norm or a negative extra_sq. */
mfsdp_status mfsdp_clip_grad_norm(mfsdp_step *step, double max_norm,
                                  double extra_sq, double *total_norm);

/* Views (row-major) of a gathered parameter and of its gradient buffer
 * (the trainer adds into it), in the parameter's compute dtype:
 * {kDLFloat, 32, 1} for MFSDP_COMPUTE_F32, {kDLBfloat, 16, 1} (2 bytes an
 * element; the parameter's each its fp32 master rounded to nearest even)
 * for MFSDP_COMPUTE_BF16. A bf16 gradient is reduced in fp32 (widened in
 * place, exactly); a plan that keeps gradients gives the trainer its bf16
 * gradient again at the next pre_backward or grad view (between the
 * reduction and then, the buffer holds the fp32 gradient: take a fresh
 * view). Valid until the unit is freed. The
 * device is the backend's: kDLCPU, or kDLCUDA with the rank's device id.
 * Work on them is done when the hook that provides them returns; the
 * trainer's own writes must be done (its stream synchronised) before it
 * calls the next hook. Local (no collective); the memory is the runtime's,
 * the trainer reads and writes it in place, and the shape array is valid
 * until mfsdp_destroy. */
mfsdp_status mfsdp_param_view(mfsdp_step *step, int32_t param, DLTensor *out);
mfsdp_status mfsdp_grad_view(mfsdp_step *step, int32_t param, DLTensor *out);

/* Whole-parameter load and store (every rank calls; `full` holds rows*cols
 * floats on every rank). The ranks agree before any collective: one rank's
 * bad argument (a NULL `full`) or failed staging fails the call on every
 * rank, and a load whose copy failed on any rank stops the runtime on every
 * rank (the tensor is partly loaded). The same holds for the state calls
 * below. */
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
/* The optimizer step count (AdamW's bias correction); local. Setting it
 * sets every parameter's (mfsdp_param_step_count) to it too. */
mfsdp_status mfsdp_step_count(mfsdp_step *step, int64_t *count);
mfsdp_status mfsdp_set_step_count(mfsdp_step *step, int64_t count);

/* Sharded checkpoints on disk. Collective: every rank calls them with the
 * same directory, between steps (no unit's hooks in progress).
 *
 * mfsdp_save writes a new directory `dir` (an error if it exists; its
 * parent must): one safetensors file per rank (rank-NNNNN.safetensors)
 * with only what that rank keeps (row shards, owned matrices, block
 * shards; replicated tensors from dp_shard rank 0; dp_replicate replica 0,
 * or under ns_split the replica that steps an owned Muon matrix for its
 * momentum; the first coordinate of every outer dim), every piece a
 * rectangle of the whole fp32 tensor with its checksum: the masters and
 * the optimizer state (exp_avg and exp_avg_sq for AdamW, the momentum for
 * SGD and Muon); and index.json: the plan hash, mesh, policy, every
 * parameter's shape, placement and optimizer, the files with their sizes
 * and checksums, the optimizer step count, and `user` (a JSON object, the
 * trainer's own: its data position, its lr schedule; NULL or "" for {}).
 * Written into `dir`.tmp-ID, every file and the directory fsynced, the
 * index last, then renamed to `dir`: a kill at any moment leaves no `dir`
 * or a complete one (and a .tmp- directory to remove).
 *
 * mfsdp_load reads a checkpoint written by any mesh, placement or ZeRO
 * level (resharding): each rank reads the pieces that overlap what it
 * keeps under this plan and checks their checksums. The ranks must read
 * the same index (MFSDP_ERROR_INVALID otherwise); a checkpoint of another
 * model (a parameter missing, extra or of another shape, an optimizer
 * state it lacks) is MFSDP_ERROR_PLAN listing the differences; a missing
 * or damaged file MFSDP_ERROR_IO naming it. It sets the step count and,
 * when `user` is not NULL, copies the user dictionary (JSON, NUL
 * terminated) into it (MFSDP_ERROR_INVALID if it needs more than
 * `user_size` bytes, checked before anything is loaded). Either every
 * rank loads or every rank fails, and a load that fails leaves the state
 * as it was. */
mfsdp_status mfsdp_save(mfsdp_step *step, const char *dir, const char *user);
/* Starts training from Hugging Face weights (collective): `dir` holds
 * model.safetensors or the shards model.safetensors.index.json names; every
 * parameter of the plan is found by its name and each rank reads only the
 * rows it keeps, F32, BF16 or F16 converted to its fp32 masters; optimizer
 * state starts at zero, the step count at 0. A missing tensor, another
 * shape, another dtype or a truncated file is MFSDP_ERROR_IO naming the
 * tensor and the file, on every rank. */
mfsdp_status mfsdp_load_hf(mfsdp_step *step, const char *dir);
/* Writes the model as Hugging Face safetensors weights (collective): every
 * parameter gathered whole from its fp32 masters, one at a time, and
 * written by rank 0 under its table name as `dtype` (MFSDP_COMPUTE_F32, or
 * MFSDP_COMPUTE_BF16 rounded to nearest even), into `dir` (new; written as
 * dir.tmp-ID, fsynced and renamed): dir/model.safetensors, or, when the
 * weights pass `max_shard_bytes` (0: no limit), the shards
 * model-0000k-of-0000n.safetensors and model.safetensors.index.json. A
 * table row with one column is a 1-D tensor, others 2-D; the matrices of
 * transformers 5's fused experts (experts.gate_up_proj.{e}.gate / .up,
 * experts.down_proj.{e}) are written as their fused 3-D tensors. With the
 * model's config.json beside them, transformers' from_pretrained loads the
 * directory. An existing `dir`, a bad dtype or a write error is an error
 * on every rank. */
mfsdp_status mfsdp_export_hf(mfsdp_step *step, const char *dir, int32_t dtype,
                             int64_t max_shard_bytes);
mfsdp_status mfsdp_load(mfsdp_step *step, const char *dir, char *user,
                        int64_t user_size);

/* What the last failing call on `step` said; owned by the runtime, valid
 * until the next call on it. For NULL (or a freed handle): why this
 * thread's last call that had no runtime to hold its message failed (a
 * NULL or freed handle, or mfsdp_create unable to allocate even the
 * runtime that carries its error), in a thread-local buffer. */
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

/*===- plan.h - The plan a step library carries --------------------------===*
 *
 * What mfsdp-translate --emit-step-c writes into a step library, and what
 * mfsdp_create (mfsdp/runtime.h, which includes this header) reads: the
 * parameter table, the static memory plan, the buckets and their kernels,
 * the mesh, and the step as a program. Only types and macros: the entry
 * points that take a plan are in mfsdp/runtime.h, and so are the rules of
 * ownership and lifetime (the runtime keeps the plan's pointers until
 * mfsdp_destroy).
 *
 * Versions. mfsdp_plan carries its size and layout version in its first
 * fields; initialise it with MFSDP_PLAN_INITIALIZER, then set what
 * differs. mfsdp_create refuses a plan whose size or version this library
 * does not read (MFSDP_ERROR_PLAN).
 *
 *===---------------------------------------------------------------------===*/
#ifndef MFSDP_PLAN_H
#define MFSDP_PLAN_H

#include <mfsdp/Vocabulary.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The layout version of mfsdp_plan (its `version` field), raised whenever
 * a field is added, removed or changed. */
#define MFSDP_PLAN_VERSION 3

/* mfsdp_placement, mfsdp_optimizer, mfsdp_compute_dtype,
 * mfsdp_reduce_dtype, mfsdp_ns_norm and mfsdp_adjust_lr are defined, with the meaning of each value, in
 * mfsdp/Vocabulary.h. */

typedef struct mfsdp_param_desc {
  const char *name;
  int64_t rows, cols;    /* cols = 1 for a 1-D tensor */
  int32_t unit;          /* index in forward order */
  int32_t placement;     /* mfsdp_placement */
  int32_t owner;         /* dp_shard rank, for MFSDP_OWNER */
  int32_t optimizer;     /* mfsdp_optimizer */
  int32_t compute_dtype; /* mfsdp_compute_dtype */
  /* MFSDP_BLOCK_SHARD: the block extents, dividing rows and cols; 0 for
   * every other placement. Last, so a table written before they existed
   * reads them as zeros. */
  int64_t block_rows, block_cols;
} mfsdp_param_desc;

/* Where the engine keeps one parameter's buffers: byte offsets in the
 * arena of every dp_shard rank that holds them (-1: the buffer is empty
 * everywhere). master, exp_avg, exp_avg_sq and grad_shard are this rank's
 * part (row shards, owned matrices, whole replicated tensors); full is the
 * gathered compute copy in forward (and all step under ZeRO-1/2),
 * full_backward the one gathered again for backward under ZeRO-3, grad the
 * whole gradient handed to the trainer. */
typedef struct mfsdp_param_offsets {
  int64_t master, exp_avg, exp_avg_sq, grad_shard, full, full_backward, grad;
} mfsdp_param_offsets;

/* A bucket's staging buffers (byte offsets like mfsdp_param_offsets):
 * row-shard buckets gather every rank's chunk into `gather` (forward, and
 * all step's one gather under ZeRO-1/2) or `gather_backward` (ZeRO-3's
 * backward gather) and unpack it into each parameter's `full`; they pack
 * the gradients by rank into `reduce` before the reduce-scatter. Each
 * holds dp_shard chunks; a chunk is the bucket's members' `master`
 * buffers as they lie in the arena (see mfsdp_bucket). */
typedef struct mfsdp_bucket_offsets {
  int64_t gather, gather_backward, reduce;
} mfsdp_bucket_offsets;

/* The static memory plan the compiler computed: one arena per rank, every
 * buffer at a fixed offset, buffers whose lifetimes cannot overlap sharing
 * space. The lifetimes are those of the plan's program (mfsdp_program, or
 * the one mfsdp_create derives for a plan without one) replayed in a
 * training step's order: forward in order, backward in reverse (a unit
 * that encloses others, like FSDP2's root, does not fit; a recomputation's
 * pre_forward after the unit's pre_backward reuses its backward gather);
 * under ZeRO-3 a unit's gathered copy lives from the op that gathers it to
 * the op that releases it; gradients from pre_backward until their
 * reduction is waited for unless keep_grads, and then a unit's gradients
 * are reduced once per step (zero_grad before the next backward). A
 * trainer that holds two units whose space is shared gets
 * MFSDP_ERROR_ORDER naming both, never corrupt data. */
typedef struct mfsdp_memory_plan {
  int32_t num_shard_ranks;           /* = dp_shard */
  const int64_t *arena_bytes;        /* per dp_shard rank */
  const mfsdp_param_offsets *params; /* one per parameter */
  int64_t staging;                   /* a whole-tensor buffer for load and
                                        store (not during a unit's hooks),
                                        and for reordering block shards'
                                        packed blocks (then kept all run) */
  int32_t keep_grads; /* 1: gradients kept across steps, so no-sync
                         accumulation works; 0: they live from pre_backward
                         to post_backward and no-sync is refused */
  int32_t prefetch;   /* gather prefetch depth, 0 or 1 (ZeRO-3 only; what a
                         zero-initialised plan holds is 0, no prefetch).
                         1: pre_forward(u) starts the all-gather of unit
                         u + 1 and pre_backward(u) the backward gather of
                         unit u - 1, which then run while the trainer
                         computes unit u; the lifetimes above change so
                         that the prefetched unit's gathered copy is live
                         from that hook on (two units' copies at once).
                         The same flag overlaps gradient reductions:
                         post_backward(u) starts unit u's, waited for by
                         post_backward(u - 1) (or the next call needing
                         them), so unit u's backward copy and gradients
                         live until then */
  /* With plan.num_buckets > 0: one entry per bucket (staging buffers of
   * row-shard buckets; -1 where a bucket needs none). Last, so an older
   * plan reads it as NULL. */
  const mfsdp_bucket_offsets *buckets;
} mfsdp_memory_plan;


/* Collectives the compiler bucketed (mfsdp-bucket-collectives): the
 * parameters of one unit and one placement gathered with one all-gather
 * and reduced with one reduce-scatter, instead of one collective each.
 *  - MFSDP_ROW_SHARD: the members' `master` buffers lie in the arena in
 *    the order of `params`, the gap between two (alignment) the same on
 *    every rank, and so do their `grad_shard` buffers, at the same
 *    distances; one rank's chunk is that span. The all-gather fills a
 *    staging buffer (mfsdp_bucket_offsets) with every rank's chunk, which
 *    is unpacked into each `full`; gradients are packed by rank into the
 *    reduce staging buffer, and one reduce-scatter leaves this rank's
 *    chunk in the `grad_shard` span.
 *  - MFSDP_OWNER: `params` ordered by owner. The members' `full` buffers
 *    lie in that order, and so do their `grad` buffers at the same
 *    distances; each owner's `master` buffers (and `grad_shard`) lie as
 *    its members do in `full`. One all-gather-v with each rank's span
 *    fills every `full` in place (no unpack), one reduce-scatter-v leaves
 *    each owner's gradients in its `grad_shard` span.
 * Buckets need the static memory plan, which lays them out so; mfsdp_create
 * checks it. A parameter is in at most one bucket; the others (block
 * shards, replicated tensors, any left out) get one collective each. */
typedef struct mfsdp_bucket {
  int32_t unit;
  int32_t placement;    /* MFSDP_ROW_SHARD or MFSDP_OWNER */
  int32_t num_params;
  const int32_t *params; /* indices in mfsdp_plan.params */
} mfsdp_bucket;

/* A row-shard bucket's pack and unpack, generated by the compiler with the
 * bucket's constants (ranks, chunk, each member's place and size) for one
 * backend: `stream` is the backend's compute stream (a cudaStream_t for
 * CUDA kernels, which are launched on it; NULL on the host). unpack copies
 * every rank's rows of member j from `staging` (dp_shard chunks) to
 * full[j]; pack writes every float of `staging`: member j's rows from
 * grad[j] for each rank, zeros in the gaps. Return 0, or non-zero when the
 * launch failed. NULL entries (owner buckets) or a NULL table: the runtime
 * copies with Backend::copy2D. */
typedef struct mfsdp_bucket_kernels {
  int (*unpack)(const float *staging, float *const *full, void *stream);
  int (*pack)(const float *const *grad, float *staging, void *stream);
} mfsdp_bucket_kernels;

/* One dim of the device mesh (the plan's mesh_dims). */
typedef struct mfsdp_mesh_dim {
  const char *name; /* "dp_shard", "dp_replicate", or an outer dim ("tp", ...) */
  int32_t size;
} mfsdp_mesh_dim;

/* The step as a program: the ops of the scheduled sched.step (after
 * mfsdp-schedule-overlap and mfsdp-plan-memory) that a hook runs, in the
 * schedule's order, lowered by the compiler; the runtime executes them as
 * they are written and decides no order of its own. Each hook's ops are a
 * range of `ops` named by one mfsdp_program_hook entry: the optimizer step
 * (MFSDP_HOOK_OPTIMIZER_STEP, unit -1) and, where the compiler lowered
 * them, each unit's four forward and backward hooks (a hook with no entry
 * runs no ops). Every library mfsdp-compile or mfsdp-translate
 * --emit-step-c builds carries all four hooks of every unit, for steps
 * that accumulate microbatches too (one set of hooks for every
 * microbatch: under no-sync a START_REDUCTION reduces nothing). A plan
 * with no program, or one with no forward or backward entry or no
 * optimizer step (built by hand), runs those parts as mfsdp_create derives
 * them from the plan: one unit in flight at a time, prefetch depth 1 where
 * the memory plan has room for it, every parameter stepped after every
 * reduction (mfsdp/runtime/DefaultProgram.h, docs/runtime.md). What the
 * trainer calls is still checked against the unit's state
 * (MFSDP_ERROR_ORDER), and a pre_forward during the unit's backward
 * (activation recomputation) runs no ops: the backward gather is in
 * place. */
typedef enum mfsdp_hook {
  MFSDP_HOOK_PRE_FORWARD = 0,
  MFSDP_HOOK_POST_FORWARD = 1,
  MFSDP_HOOK_PRE_BACKWARD = 2,
  MFSDP_HOOK_POST_BACKWARD = 3,
  MFSDP_HOOK_OPTIMIZER_STEP = 4, /* mfsdp_optimizer_step; unit -1 */
} mfsdp_hook;

typedef enum mfsdp_program_kind {
  /* Wait for the reduction of `unit`'s gradients if it is still in flight
   * (then HSDP's all-reduce over replicas and the scaling, and the unit's
   * backward copy and transient gradients released); the other units'
   * reductions stay in flight; nothing when it has landed. Any other op
   * on a unit waits for its reduction first (in the optimizer step on
   * every rank, also those that do not run the op). No params. In the
   * optimizer step and in backward hooks. */
  MFSDP_PROGRAM_WAIT_REDUCTION = 0,
  /* One optimizer kernel (`optimizer`: AdamW, SGD or Muon) over `params`,
   * all of `unit` and stepped by that optimizer: one loop over the
   * parameters' shards (row and block shards, replicated tensors, owned
   * matrices), on `only_rank` alone when it is >= 0 (an owner's Muon: its
   * params are that dp_shard rank's), on every rank otherwise. Under
   * ns_split an owned Muon matrix is stepped on its replica only. */
  MFSDP_PROGRAM_OPTIMIZER = 1,
  /* ns_split: the updated `params` (owned Muon matrices of `unit`) go from
   * the replica that stepped each to the same owner on the others, in one
   * call (a rank that owns none of them makes none). */
  MFSDP_PROGRAM_BROADCAST_UPDATES = 2,
  /* ZeRO-1/2: `unit`'s updated parameters gathered whole again (all of its
   * parameters; no params). Optimizer step only. */
  MFSDP_PROGRAM_GATHER = 3,
  /* Forward and backward hooks (the hook's phase says which place, the
   * memory plan's forward or backward one): start `unit`'s all-gathers
   * that need no work after the collective but bf16 rounding (row-shard
   * and owner buckets, row shards, owned matrices not yet gathered),
   * without waiting. No params. */
  MFSDP_PROGRAM_START_GATHER = 4,
  /* Wait for `unit`'s started all-gathers, then gather what is still
   * missing of it (block shards, replicated tensors, anything not
   * started): afterwards the unit is whole, but for its row-shard
   * buckets, whose chunks stay in staging for the MFSDP_PROGRAM_UNPACK
   * that follows. No params. */
  MFSDP_PROGRAM_WAIT_GATHER = 5,
  /* ZeRO-3: free `unit`'s gathered copy. No params. */
  MFSDP_PROGRAM_RELEASE = 6,
  /* `unit`'s gradient buffers placed and zeroed where the memory plan
   * keeps them only during the unit's backward, and handed to the trainer
   * (mfsdp_grad_view). Backward hooks. No params. */
  MFSDP_PROGRAM_PLACE_GRADS = 7,
  /* Start the reduction of `unit`'s gradients over dp_shard (each bucket
   * and parameter), waited for by a MFSDP_PROGRAM_WAIT_REDUCTION; under
   * no-sync nothing is reduced and the unit's backward copy and
   * transient gradients are released. Backward hooks. No params. */
  MFSDP_PROGRAM_START_REDUCTION = 8,
  /* Forward and backward hooks, after `unit`'s MFSDP_PROGRAM_WAIT_GATHER:
   * its gathered row-shard buckets unpacked from their staging buffers
   * (every rank's chunk) into the members' copies, by the plan's unpack
   * kernel or strided copies (bf16 buckets: a bf16 copy), and the staging
   * freed. A unit with row-shard buckets needs one after every wait for
   * its gathers, in the same hook (mfsdp_create checks). No params. */
  MFSDP_PROGRAM_UNPACK = 9,
  /* Backward hooks, before `unit`'s MFSDP_PROGRAM_START_REDUCTION: its
   * row-shard buckets' gradients packed by rank into their reduce staging
   * buffers, by the plan's pack kernel or strided copies (under the reduce
   * dtype bf16, rounded to bf16 on the way); under no-sync nothing. A unit
   * with row-shard buckets needs one before every start of its reduction,
   * in the same hook (mfsdp_create checks). No params. */
  MFSDP_PROGRAM_PACK = 10,
} mfsdp_program_kind;

typedef struct mfsdp_program_op {
  int32_t kind;       /* mfsdp_program_kind */
  int32_t unit;       /* the unit whose buffers it works on */
  int32_t group;      /* the schedule's group (sched op `group`), for
                         diagnostics and traces */
  int32_t optimizer;  /* MFSDP_PROGRAM_OPTIMIZER: mfsdp_optimizer */
  int32_t only_rank;  /* >= 0: run on that dp_shard rank only */
  int32_t num_params; /* indices in mfsdp_plan.params */
  const int32_t *params;
} mfsdp_program_op;

/* The ops of one hook: ops[first_op, first_op + num_ops). */
typedef struct mfsdp_program_hook {
  int32_t hook; /* mfsdp_hook */
  int32_t unit; /* the hook's unit; -1 for the optimizer step */
  int32_t first_op, num_ops;
} mfsdp_program_hook;

/* mfsdp_create refuses (MFSDP_ERROR_PLAN, naming the op) a program that
 * does not match the plan: an unknown kind or hook, a unit, parameter or
 * range out of bounds, a parameter of another unit or optimizer, a
 * parameter an optimizer steps stepped twice or never, an owner's op
 * naming another rank's matrix, a ZeRO-1/2 unit gathered twice or never,
 * a gather under ZeRO-3, two entries for one hook, an op in a hook that
 * does not run it (a kernel in a forward hook, a start of a gather in the
 * optimizer step), a forward or backward hook whose unit is out of range,
 * a backward hook that does not reduce its unit's gradients. */
typedef struct mfsdp_program {
  int32_t num_ops;
  const mfsdp_program_op *ops;
  int32_t num_hooks;
  const mfsdp_program_hook *hooks;
} mfsdp_program;

/* The plan: what the compiler decided, as constants. */
typedef struct mfsdp_plan {
  /* sizeof(mfsdp_plan) and MFSDP_PLAN_VERSION of the header the plan was
   * built with (MFSDP_PLAN_INITIALIZER sets them). First, so a library
   * reads them from a plan of any layout; not part of the hash, which
   * covers the plan's contents. */
  uint32_t struct_size;
  uint32_t version;
  uint64_t hash; /* mfsdp_plan_hash() of the rest */
  int32_t zero;  /* 1, 2 or 3 */
  int32_t dp_replicate, dp_shard;
  int32_t world; /* all ranks (outer mesh dims included) */
  int32_t num_units, num_params;
  const mfsdp_param_desc *params;
  float adamw_lr, adamw_beta1, adamw_beta2, adamw_eps, adamw_weight_decay;
  float sgd_lr, sgd_momentum, sgd_weight_decay;
  int32_t sgd_nesterov;
  float muon_lr, muon_momentum, muon_weight_decay;
  int32_t muon_nesterov, muon_ns_steps, muon_scale; /* 0 match_rms_adamw, 1 original */
  /* HSDP Newton-Schulz split (plan.policy ns_split): 1 to split the Muon
   * steps of owned matrices across the dp_replicate replicas, 0 (what a
   * zero-initialised plan holds) for every replica running them all. The
   * rule: for each dp_shard rank o, take the parameters with placement
   * MFSDP_OWNER, owner o and optimizer MFSDP_OPT_MUON, ordered by unit and
   * within a unit by their index in `params`; the i-th of them (from 0) is
   * stepped only by replica i % dp_replicate (the owner o of that replica
   * runs momentum, Newton-Schulz and the update, then broadcasts the
   * updated master to owner o of the other replicas). Only that replica
   * keeps its momentum; mfsdp_store_state returns it on every rank and
   * mfsdp_load_state loads it there. Every other parameter is updated by
   * every replica. No effect when dp_replicate is 1. */
  int32_t ns_split;
  /* NULL: the engine sizes its arena itself, for every unit gathered at
   * once (plans built by hand). */
  const mfsdp_memory_plan *memory;
  /* The whole device mesh, row-major (the last dim varies fastest), its
   * product the world: dp_shard and dp_replicate (their sizes those above,
   * a dim of size 1 may be left out) and the dims of an outer stack (tp,
   * ep, ...) in any position. The runtime forms its dp_shard and
   * dp_replicate groups by this layout; ranks that differ only in an outer
   * coordinate are the outer stack's concern (mfsdp neither averages nor
   * communicates over them). 0 / NULL (a plan written before these
   * fields): [outer, dp_replicate, dp_shard], the rest of the world
   * outermost. Last, so an older plan reads them as zeros. */
  int32_t num_mesh_dims;
  const mfsdp_mesh_dim *mesh_dims;
  /* The bucketed collectives (mfsdp_bucket); 0 / NULL: one collective per
   * parameter. Last, so an older plan reads them as zeros. */
  int32_t num_buckets;
  const mfsdp_bucket *buckets;
  /* Per bucket, its generated pack and unpack (mfsdp_bucket_kernels): the
   * host backend's (C) and the CUDA backend's (kernels compiled by nvcc
   * with mfsdp-compile --cuda); NULL: strided copies. Code, not part of
   * the hash. */
  const mfsdp_bucket_kernels *host_kernels;
  const mfsdp_bucket_kernels *cuda_kernels;
  /* The scheduled step as a program (mfsdp_program), part of the hash;
   * NULL: the runtime runs each hook in its own order (plans built by
   * hand). Last, so an older plan reads it as NULL. */
  const mfsdp_program *program;
  /* The dtype every gradient reduction runs in (mfsdp_reduce_dtype; FSDP2's
   * MixedPrecisionPolicy.reduce_dtype): MFSDP_REDUCE_F32 (what
   * MFSDP_PLAN_INITIALIZER holds) or MFSDP_REDUCE_BF16, the reduce-scatters
   * (-v), the all-reduces of replicated tensors and HSDP's all-reduce over
   * replicas 2 bytes an element on the wire (docs/runtime.md, "Reduce
   * dtype"); grad_shard, masters and optimizer state stay fp32. Part of
   * the hash (mixed in only when bf16). Added in plan version 2. */
  int32_t reduce_dtype;
  /* The precision Muon's Newton-Schulz runs in (mfsdp_ns_precision; the
   * graph's #plan.muon ns_precision): MFSDP_NS_PRECISION_FP32 (what
   * MFSDP_PLAN_INITIALIZER holds) or MFSDP_NS_PRECISION_BF16. The default of
   * every parameter's mfsdp_hparams.ns_precision, so a library planned and
   * priced in bf16 runs bf16 without a word from the trainer. Part of the
   * hash (mixed in only when bf16). Added in plan version 3. */
  int32_t muon_ns_precision;
} mfsdp_plan;

/* An empty plan of this header's layout: every field 0 or NULL but
 * struct_size and version (every field listed, so C and C++ compilers
 * warn of none missing; keep it in the order of the fields). */
#define MFSDP_PLAN_INITIALIZER                                                \
  {                                                                           \
    (uint32_t)sizeof(mfsdp_plan), MFSDP_PLAN_VERSION, 0, /* hash */           \
        0, 0, 0, 0, 0, 0, NULL, /* zero .. params */                          \
        0.f, 0.f, 0.f, 0.f, 0.f, /* adamw_* */                                \
        0.f, 0.f, 0.f, 0,        /* sgd_* */                                  \
        0.f, 0.f, 0.f, 0, 0, 0,  /* muon_* */                                 \
        0, NULL,                 /* ns_split, memory */                       \
        0, NULL, 0, NULL,        /* mesh_dims, buckets */                     \
        NULL, NULL,              /* host_kernels, cuda_kernels */             \
        NULL, MFSDP_REDUCE_F32,  /* program, reduce_dtype */                  \
        MFSDP_NS_PRECISION_FP32  /* muon_ns_precision */                      \
  }

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MFSDP_PLAN_H */

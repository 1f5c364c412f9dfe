// The step library's memory plan is placed by mfsdp-plan-memory and
// recorded on the sched.step (runtime_arena_bytes, runtime_staging,
// runtime_offsets, runtime_bucket_offsets): the emitter writes that plan as
// it is, after checking that it fits the buffers and lifetimes of the
// program the library runs, and mfsdp-verify-schedule checks it the same
// way. Two units on 2 ranks under ZeRO-3, the second a row-shard bucket of
// three parameters (so with bucket staging), gathers prefetched.
// RUN: mfsdp-opt %s --mfsdp-build-step=tokens=1 --mfsdp-bucket-collectives --mfsdp-schedule-overlap=prefetch=1 --mfsdp-plan-memory -o %t.mlir
// RUN: mfsdp-translate --emit-step-c %t.mlir | cat %t.mlir - | FileCheck %s --check-prefixes=IR,LIB
// RUN: mfsdp-opt %t.mlir --mfsdp-verify-schedule -o /dev/null
// The library takes the recorded arena, not one of its own: a larger one
// is written as it stands.
// RUN: sed -E 's/runtime_arena_bytes \[[0-9]+, [0-9]+\]/runtime_arena_bytes [1048576, 1048576]/' %t.mlir | mfsdp-translate --emit-step-c | FileCheck %s --check-prefix=LARGER
// A plan that does not fit is refused by both, saying what: an arena too
// small for its buffers, a master placed on its exp_avg (both live all
// step).
// RUN: sed -E 's/runtime_arena_bytes \[[0-9]+, [0-9]+\]/runtime_arena_bytes [1024, 1024]/' %t.mlir > %t.small.mlir
// RUN: not mfsdp-translate --emit-step-c %t.small.mlir 2>&1 | FileCheck %s --check-prefix=SMALL
// RUN: not mfsdp-opt %t.small.mlir --mfsdp-verify-schedule 2>&1 | FileCheck %s --check-prefix=SMALL-VERIFY
// RUN: sed -E 's/runtime_offsets \[([0-9]+), ([0-9]+)/runtime_offsets [\2, \2/' %t.mlir > %t.clash.mlir
// RUN: not mfsdp-translate --emit-step-c %t.clash.mlir 2>&1 | FileCheck %s --check-prefix=CLASH
// RUN: not mfsdp-opt %t.clash.mlir --mfsdp-verify-schedule 2>&1 | FileCheck %s --check-prefix=CLASH
// A scheduled step without its library's memory plan is refused: the
// emitter places nothing of a scheduled step itself.
// RUN: sed -E 's/ runtime_arena_bytes .* \{$/ {/' %t.mlir > %t.none.mlir
// RUN: not mfsdp-translate --emit-step-c %t.none.mlir 2>&1 | FileCheck %s --check-prefix=NONE
// One arena for two ranks is malformed IR.
// RUN: sed -E 's/runtime_arena_bytes \[([0-9]+), [0-9]+\]/runtime_arena_bytes [\1]/' %t.mlir | not mfsdp-opt 2>&1 | FileCheck %s --check-prefix=MALFORMED
// A library that accumulates keeps its gradients: a plan that frees them
// is refused, and mfsdp-plan-memory{accumulate=true} makes one that keeps
// them.
// RUN: not mfsdp-translate --emit-step-c --emit-step-accumulate %t.mlir 2>&1 | FileCheck %s --check-prefix=FREES
// RUN: mfsdp-opt %s --mfsdp-build-step=tokens=1 --mfsdp-bucket-collectives --mfsdp-schedule-overlap=prefetch=1 --mfsdp-plan-memory=accumulate=true -o %t.acc.mlir
// RUN: FileCheck %s --check-prefix=KEEPS-IR < %t.acc.mlir
// RUN: mfsdp-translate --emit-step-c --emit-step-accumulate %t.acc.mlir | FileCheck %s --check-prefix=KEEPS
// mfsdp-schedule-step (the default pipeline's stages) takes the same
// options and records the same plan as the passes in a row.
// RUN: mfsdp-opt %s --mfsdp-build-step=tokens=1 --mfsdp-schedule-step="prefetch=1 bucket-mb=0 accumulate=true" | diff - %t.acc.mlir
// buckets=false plans a library with one collective per parameter: no
// bucket staging; the emitter, which takes the step's buckets, refuses it,
// and mfsdp-verify-schedule checks it as a library without buckets.
// RUN: mfsdp-opt %s --mfsdp-build-step=tokens=1 --mfsdp-bucket-collectives --mfsdp-schedule-overlap=prefetch=1 --mfsdp-plan-memory=buckets=false -o %t.nob.mlir
// RUN: FileCheck %s --check-prefix=NOB < %t.nob.mlir
// RUN: mfsdp-opt %s --mfsdp-build-step=tokens=1 --mfsdp-schedule-step="prefetch=1 bucket-mb=0 buckets=false" | diff - %t.nob.mlir
// RUN: mfsdp-opt %t.nob.mlir --mfsdp-verify-schedule -o /dev/null
// RUN: not mfsdp-translate --emit-step-c %t.nob.mlir 2>&1 | FileCheck %s --check-prefix=NOB-LIB
// Unit u1's rows are staged: the program's unpack and pack are the step's
// copies, and a step without them is refused, naming the unit and hook.
// RUN: FileCheck %s --check-prefix=COPIES < %t.mlir
// RUN: grep -v 'sched.compute copy "all_gather copy' %t.mlir | not mfsdp-translate --emit-step-c 2>&1 | FileCheck %s --check-prefix=NOUNPACK
// RUN: grep -v 'sched.compute copy "reduce_scatter copy' %t.mlir | not mfsdp-translate --emit-step-c 2>&1 | FileCheck %s --check-prefix=NOPACK
// With both units in one gather group, u1's gathers are waited for in
// u0's hook (the group's first unit): the refusal names that hook.
// RUN: sed 's/recompute = false> group 1/recompute = false> group 0/' %s | mfsdp-opt --mfsdp-build-step=tokens=1 --mfsdp-bucket-collectives --mfsdp-schedule-overlap=prefetch=1 --mfsdp-plan-memory -o %t.group.mlir
// RUN: mfsdp-translate --emit-step-c %t.group.mlir -o /dev/null
// RUN: grep -v 'sched.compute copy "all_gather copy' %t.group.mlir | not mfsdp-translate --emit-step-c 2>&1 | FileCheck %s --check-prefix=GROUP-NOUNPACK
// The default pipeline records it too.
// RUN: mfsdp-opt %s --mfsdp-pipeline="mesh=dp_shard=2 tokens=1" -o %t.pipe.mlir
// RUN: mfsdp-translate --emit-step-c %t.pipe.mlir | cat %t.pipe.mlir - | FileCheck %s --check-prefix=PIPELINE
// The pipeline forwards mfsdp-plan-memory's accumulate and buckets.
// RUN: mfsdp-opt %s --mfsdp-pipeline="mesh=dp_shard=2 tokens=1 accumulate=true" -o %t.pacc.mlir
// RUN: FileCheck %s --check-prefix=KEEPS-IR < %t.pacc.mlir
// RUN: mfsdp-translate --emit-step-c --emit-step-accumulate %t.pacc.mlir | FileCheck %s --check-prefix=KEEPS
// RUN: mfsdp-opt %s --mfsdp-pipeline="mesh=dp_shard=2 tokens=1 buckets=false" | FileCheck %s --check-prefix=NOB

// IR-LABEL: sched.step @mem.step
// IR-SAME: runtime_arena_bytes [[[ARENA:[0-9]+, [0-9]+]]] runtime_staging {{[0-9]+}}
// IR-SAME: runtime_offsets [
// IR-SAME: runtime_bucket_offsets [{{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}] {

// LIB: static const int64_t mfsdp_arena_bytes[2] = {[[ARENA]]};
// LIB-LABEL: static const mfsdp_memory_plan mfsdp_the_memory
// LIB: .keep_grads = 0,
// LIB-NEXT: .buckets = mfsdp_bucket_staging,

// COPIES: %[[ST:.*]] = sched.alloc "gather staging g1 (forward)"
// COPIES: sched.all_gather "all_gather u1 (forward)" {{.*}} -> %[[ST]]
// COPIES: sched.compute copy "all_gather copy g1" reads(%[[ST]])
// COPIES: %[[RST:.*]] = sched.alloc "reduce staging g1"
// COPIES-NEXT: sched.compute copy "reduce_scatter copy g1" {{.*}} writes(%[[RST]])
// COPIES-NEXT: sched.reduce_scatter "reduce_scatter u1" %[[RST]]
// NOUNPACK: error: 'sched.step' op cannot be lowered into the runtime's program: the step waits for the gathers of unit 1 ('u1') in the pre_forward of unit 1 but copies nothing out of them after: the library gathers the unit's row shards into staging (row-shard buckets), which a copy of the step unpacks (build the step with row-layout per_param)
// GROUP-NOUNPACK: error: 'sched.step' op cannot be lowered into the runtime's program: the step waits for the gathers of unit 1 ('u1') in the pre_forward of unit 0 but copies nothing out of them after
// NOPACK: error: 'sched.step' op cannot be lowered into the runtime's program: the step starts the reduction of unit 1 ('u1') in the post_backward of unit 1 with no copy into it before, in that hook: the library reduces the unit's row shards from staging (row-shard buckets), which a copy of the step packs (build the step with row-layout per_param)

// LARGER: static const int64_t mfsdp_arena_bytes[2] = {1048576, 1048576};

// SMALL: error: 'sched.step' op records a runtime memory plan (mfsdp-plan-memory) that does not fit the library: the given memory plan puts buffer '{{.*}}' ({{[0-9]+}} bytes at {{[0-9]+}}) past the end of rank 0's arena (1024 bytes)
// SMALL-VERIFY: error: 'sched.step' op records a runtime memory plan (runtime_*) that does not fit the step library's buffers: the given memory plan puts buffer

// CLASH: the memory plan is unsound: buffer 'emb exp_avg' at bytes {{.*}} of the arena overlaps 'emb master' at {{.*}} while both are live

// NONE: error: 'sched.step' op is scheduled but records no memory plan of the step library (runtime_offsets): run mfsdp-plan-memory after scheduling it

// MALFORMED: error: 'sched.step' op runtime_arena_bytes has 1 arenas; expected one per rank (2)

// FREES: error: 'sched.step' op records a runtime memory plan (mfsdp-plan-memory) that does not fit the library: the given memory plan frees each unit's gradients once they are reduced, but this library keeps them between microbatches (accumulation): plan it with gradients kept (mfsdp-plan-memory{accumulate=true} keeps them)

// KEEPS-IR: runtime_staging {{[0-9]+}} runtime_keep_grads runtime_offsets
// KEEPS: .keep_grads = 1,

// NOB: runtime_offsets [
// NOB-NOT: runtime_bucket_offsets
// NOB-LIB: error: 'sched.step' op records a runtime memory plan that is not of this library: runtime_bucket_offsets places 0 buckets; the library has 1

// PIPELINE: runtime_arena_bytes [[[PIPE:[0-9]+, [0-9]+]]] runtime_staging
// PIPELINE: static const int64_t mfsdp_arena_bytes[2] = {[[PIPE]]};

plan.graph @mem {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.policy adamw zero 3
  plan.param @emb : tensor<16x8xf32> embedding module "emb" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1>
  plan.param @l0.a : tensor<8x8xf32> linear module "l0" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1>
  plan.param @l0.b : tensor<8x16xf32> linear module "l0" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1>
  plan.param @l0.n : tensor<8xf32> norm module "l0" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1>
  plan.unit @u0 index 0 params [@emb] cost <fwd_flops = 1, bwd_flops = 2, act_bytes = 0, recompute = false> group 0
  plan.unit @u1 index 1 params [@l0.a, @l0.b, @l0.n] cost <fwd_flops = 1, bwd_flops = 2, act_bytes = 0, recompute = false> group 1
}

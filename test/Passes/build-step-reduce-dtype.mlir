// RUN: mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts="mesh=dp_replicate=2,dp_shard=2" --mfsdp-build-step | FileCheck %s --check-prefix=PARAM
// RUN: mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts="mesh=dp_replicate=2,dp_shard=2" --mfsdp-build-step=reduce-dtype=f32 | FileCheck %s --check-prefix=PARAM
// RUN: mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts="mesh=dp_replicate=2,dp_shard=2" --mfsdp-build-step=reduce-dtype=bf16 | FileCheck %s --check-prefix=BF16
// RUN: mfsdp-opt %S/Inputs/pinned-owner.mlir --mfsdp-assign-layouts "--mfsdp-build-step=tokens=1" | FileCheck %s --check-prefix=NARROW
// RUN: mfsdp-opt %S/Inputs/pinned-owner.mlir --mfsdp-assign-layouts "--mfsdp-build-step=tokens=1 reduce-dtype=f32" | FileCheck %s --check-prefix=WIDE
// RUN: mfsdp-opt %S/Inputs/two-matrices.mlir "--mfsdp-pipeline=mesh=dp_replicate=2,dp_shard=2 reduce-dtype=bf16" | FileCheck %s --check-prefix=PIPELINE
// RUN: %exit1 mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts --mfsdp-build-step=reduce-dtype=fp16 -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD

// The reduce dtype (mfsdp_plan.reduce_dtype, FSDP2's reduce_dtype) sets the
// bytes of every gradient reduction: the reduce-scatter of rows, the
// reduce-scatter-v to the owners with their chunks, and HSDP's all-reduce
// over replicas. fp32 parameters: f32 counts what the default (each
// parameter's own dtype) counts, bf16 half of it.
// PARAM-LABEL: sched.step @hand.step
// PARAM: sched.reduce_scatter "reduce_scatter u1" {{.*}} bytes 16 comm 0 phase backward
// PARAM: sched.reduce_scatter_v "reduce_scatter_v u1" {{.*}} bytes 128 chunks [0, 128]
// PARAM: sched.all_reduce "all_reduce u1 over replicas" {{.*}} bytes 136 comm 1
// PARAM: sched.reduce_scatter_v "reduce_scatter_v u0" {{.*}} bytes 128 chunks [128, 0]
// PARAM: sched.all_reduce "all_reduce u0 over replicas" {{.*}} bytes 128 comm 1
// BF16-LABEL: sched.step @hand.step
// BF16: sched.reduce_scatter "reduce_scatter u1" {{.*}} bytes 8 comm 0 phase backward
// BF16: sched.reduce_scatter_v "reduce_scatter_v u1" {{.*}} bytes 64 chunks [0, 64]
// BF16: sched.all_reduce "all_reduce u1 over replicas" {{.*}} bytes 68 comm 1
// BF16: sched.reduce_scatter_v "reduce_scatter_v u0" {{.*}} bytes 64 chunks [64, 0]
// BF16: sched.all_reduce "all_reduce u0 over replicas" {{.*}} bytes 64 comm 1

// bf16 parameters: the default counts their 2 bytes; f32 (the runtime
// reducing in fp32) twice that, and the unreduced gradients are held in
// fp32 for the reductions to read (without that, one reduction moving all
// of a larger group's rows in fp32 read past its source buffer).
// NARROW: sched.alloc "unreduced grads g0 mb0" bytes 256
// WIDE: sched.alloc "unreduced grads g0 mb0" bytes 512
// NARROW: sched.reduce_scatter "reduce_scatter u" {{.*}} bytes 128 comm 0
// NARROW: sched.reduce_scatter_v "reduce_scatter_v u" {{.*}} bytes 128 chunks [0, 0, 0, 128]
// WIDE: sched.reduce_scatter "reduce_scatter u" {{.*}} bytes 256 comm 0
// WIDE: sched.reduce_scatter_v "reduce_scatter_v u" {{.*}} bytes 256 chunks [0, 0, 0, 256]

// The pipeline passes the option to mfsdp-build-step; its bucket of the
// two owners' reductions adds up their bf16 chunks.
// PIPELINE: sched.reduce_scatter "reduce_scatter u1" {{.*}} bytes 8 comm 0 phase backward
// PIPELINE: sched.reduce_scatter_v "bucket reduce_scatter_v (2 tensors)" {{.*}} bytes 128 chunks [64, 64]

// BAD: for the --reduce-dtype option: Cannot find option named 'fp16'!

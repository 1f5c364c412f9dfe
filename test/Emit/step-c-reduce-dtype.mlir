// The step library reduces gradients in the dtype the step counts its
// reductions in, so that the runtime moves the bytes the plan, the
// simulator and mfsdp-verify-schedule count. mfsdp-build-step records an
// explicit reduce-dtype on the sched.step; without one (the default,
// `param`) each parameter's reductions count its own dtype, which the
// runtime follows when all parameters share it.
// Two bf16 row shards on 2 ranks.
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1" | FileCheck %s --check-prefix=PARAM-IR
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1" | mfsdp-translate --emit-step-c | FileCheck %s --check-prefix=BF16
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1 reduce-dtype=bf16" | FileCheck %s --check-prefix=BF16-IR
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1 reduce-dtype=bf16" | mfsdp-translate --emit-step-c | FileCheck %s --check-prefix=BF16
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1 reduce-dtype=bf16" | mfsdp-translate --emit-step-c --emit-step-reduce-dtype=bf16 | FileCheck %s --check-prefix=BF16
// With reduce-dtype=f32 the step counts 4 bytes an element and the
// library reduces in fp32 (the plan's default: no reduce_dtype field).
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1 reduce-dtype=f32" | FileCheck %s --check-prefix=F32-IR
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1 reduce-dtype=f32" | mfsdp-translate --emit-step-c | FileCheck %s --check-prefix=F32
// A library asked for another dtype than the step's is refused, as is a
// dtype that is none.
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1 reduce-dtype=f32" | not mfsdp-translate --emit-step-c --emit-step-reduce-dtype=bf16 2>&1 | FileCheck %s --check-prefix=OTHER
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1" | not mfsdp-translate --emit-step-c --emit-step-reduce-dtype=f32 2>&1 | FileCheck %s --check-prefix=OTHER-PARAM
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1" | not mfsdp-translate --emit-step-c --emit-step-reduce-dtype=f16 2>&1 | FileCheck %s --check-prefix=BAD
// Parameters of both dtypes under `param`: no single reduce dtype.
// RUN: sed 's/tensor<4x64xbf16>/tensor<4x64xf32>/' %s | mfsdp-opt --mfsdp-build-step="tokens=1" | not mfsdp-translate --emit-step-c 2>&1 | FileCheck %s --check-prefix=MIXED
// RUN: sed 's/tensor<4x64xbf16>/tensor<4x64xf32>/' %s | mfsdp-opt --mfsdp-build-step="tokens=1 reduce-dtype=bf16" | mfsdp-translate --emit-step-c | FileCheck %s --check-prefix=BF16
// The step's bytes are whole and its buffers hold what its reductions
// read, whatever mix of dtypes a unit holds (the fp32 reduction widens the
// bf16 gradient of n: 320 elements, each parameter's rows even over the 2
// ranks, 4 bytes each), and with
// microbatches, whose accumulated gradients the last reduction reads
// (both were refused by the verifier: 711.1 bytes; a 768-byte buffer
// read for 1536).
// RUN: sed 's/tensor<4x64xbf16>/tensor<4x64xf32>/' %s | mfsdp-opt --mfsdp-build-step="tokens=1 reduce-dtype=f32" --mfsdp-verify-schedule | FileCheck %s --check-prefix=MIXED-F32
// RUN: sed 's/tensor<4x64xbf16>/tensor<4x64xf32>/' %s | mfsdp-opt --mfsdp-build-step="tokens=1 reduce-dtype=bf16" --mfsdp-verify-schedule | FileCheck %s --check-prefix=MIXED-BF16
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1 reduce-dtype=f32 microbatches=2" --mfsdp-verify-schedule | FileCheck %s --check-prefix=ACCUM

// MIXED-F32: sched.alloc "unreduced grads g0 mb0" bytes 1280
// MIXED-F32: sched.reduce_scatter "reduce_scatter u0" {{.*}} bytes 1280
// MIXED-BF16: sched.alloc "unreduced grads g0 mb0" bytes 1152
// MIXED-BF16: sched.reduce_scatter "reduce_scatter u0" {{.*}} bytes 640
// ACCUM: sched.alloc "grad accumulation g0" bytes 1280 persistent
// ACCUM: sched.optimizer accumulate "accumulate g0 mb0" {{.*}} bytes 3840
// ACCUM: sched.reduce_scatter "reduce_scatter u0" {{.*}} bytes 1280

// PARAM-IR: sched.step @rd.step mesh @rd::@mesh world 2 tokens 1 microbatches 1 {
// PARAM-IR: sched.reduce_scatter "reduce_scatter u0" {{.*}} bytes 640
// BF16-IR: sched.step @rd.step mesh @rd::@mesh world 2 tokens 1 microbatches 1 reduce_dtype bf16 {
// BF16-IR: sched.reduce_scatter "reduce_scatter u0" {{.*}} bytes 640
// F32-IR: sched.step @rd.step mesh @rd::@mesh world 2 tokens 1 microbatches 1 reduce_dtype f32 {
// F32-IR: sched.reduce_scatter "reduce_scatter u0" {{.*}} bytes 1280

// BF16: .reduce_dtype = MFSDP_REDUCE_BF16,
// F32-NOT: .reduce_dtype
// F32: .hash
// OTHER: error: 'sched.step' op counts its gradient reductions in reduce_dtype f32, but the step library was asked to reduce in bf16
// OTHER-PARAM: error: 'sched.step' op counts its gradient reductions in each parameter's own dtype, bf16, but the step library was asked to reduce in f32
// BAD: error: --emit-step-reduce-dtype must be f32 or bf16, got 'f16'
// MIXED: error: 'sched.step' op counts each parameter's gradient reductions in its own dtype (built without reduce-dtype f32 or bf16), but 'n' is bf16 and 'a' f32

plan.graph @rd {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.policy adamw zero 3
  plan.param @a : tensor<4x64xbf16> linear module "a" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1>
  plan.param @n : tensor<64xbf16> norm module "n" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1>
  plan.unit @u0 index 0 params [@a, @n] cost <fwd_flops = 1, bwd_flops = 2, act_bytes = 0, recompute = false>
}

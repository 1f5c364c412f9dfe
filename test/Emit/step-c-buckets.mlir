// The step library lowers the step program's buckets (mfsdp-build-step,
// then mfsdp-bucket-collectives): per bucket its unit, placement and
// members, and the memory plan lays each bucket out as the runtime runs it.
// Unit 0 holds two AdamW row shards (a: 4x64, n: 3x10) and two Muon
// matrices (w0: 8x8 on rank 1, w1: 8x16 on rank 0); unit 1 one row shard
// (c), which is no bucket. 2 ranks, ZeRO-3. The norm's name holds a
// comment delimiter, which the comments of the source must defuse.
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1" --mfsdp-bucket-collectives | mfsdp-translate --emit-step-c | FileCheck %s
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1" --mfsdp-bucket-collectives | mfsdp-translate --emit-step-c -o %t.c
// RUN: cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -I%mfsdp_src/include %t.c
// Without the step program there are no buckets (one collective per
// parameter), and the buckets are part of the plan's hash.
// RUN: mfsdp-translate --emit-step-c %s | FileCheck %s --check-prefix=NONE
// RUN: mfsdp-translate --emit-step-c %s | grep '\.hash' > %t.hash
// RUN: grep '\.hash' %t.c >> %t.hash
// RUN: sort -u %t.hash | wc -l | grep -x 2
// A step bucketed under a size limit of 1 KiB (bucket_bytes 1024): the
// library's runtime buckets keep to the step's limit (a: 2 chunks of
// 512 B of flat buffer; n: 2 x 256 B aligned; w1 512 B, w0 256 B), so a
// fills a bucket by itself, a and n are no bucket, and the owners' 768 B
// still make one. Asking the library for the step's own limit is the
// same library; asking it for another is refused: the library's buckets
// are the step's, which mfsdp-verify-schedule checks.
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1" --mfsdp-bucket-collectives=bucket-mb=0.0009765625 | mfsdp-translate --emit-step-c | FileCheck %s --check-prefix=LIMIT
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1" --mfsdp-bucket-collectives=bucket-mb=0.0009765625 | mfsdp-translate --emit-step-c --emit-step-bucket-mb=0.0009765625 | FileCheck %s --check-prefix=LIMIT
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1" --mfsdp-bucket-collectives | not mfsdp-translate --emit-step-c --emit-step-bucket-mb=0.0009765625 2>&1 | FileCheck %s --check-prefix=OTHER
// A limit that is no size is refused.
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1" --mfsdp-bucket-collectives | not mfsdp-translate --emit-step-c --emit-step-bucket-mb=-1 2>&1 | FileCheck %s --check-prefix=NEG

// CHECK-LABEL: The bucketed collectives
// Row shards in table order; owners by owner: w1 (rank 0), then w0.
// CHECK: static const int32_t mfsdp_bucket_members[4] = {0, 1, 3, 2};
// CHECK-LABEL: static const mfsdp_bucket mfsdp_buckets[2] = {
// CHECK-NEXT: /* unit, placement, members */
// CHECK-NEXT: {0, MFSDP_ROW_SHARD, 2, mfsdp_bucket_members + 0}, /* a n* /x */
// CHECK-NEXT: {0, MFSDP_OWNER, 2, mfsdp_bucket_members + 2}, /* w1 w0 */
// CHECK-NEXT: };
// The row bucket has staging for its gathers (forward, backward) and its
// reduction; the owner bucket gathers in place.
// CHECK-LABEL: static const mfsdp_bucket_offsets mfsdp_bucket_staging[2] = {
// CHECK-NEXT: {{[{][0-9]+, [0-9]+, [0-9]+[}]}},
// CHECK-NEXT: {-1, -1, -1},
// CHECK: .buckets = mfsdp_bucket_staging,
// CHECK: .num_buckets = 2,
// CHECK-NEXT: .buckets = mfsdp_buckets,

// LIMIT-LABEL: The bucketed collectives
// LIMIT: static const int32_t mfsdp_bucket_members[2] = {3, 2};
// LIMIT-LABEL: static const mfsdp_bucket mfsdp_buckets[1] = {
// LIMIT-NEXT: /* unit, placement, members */
// LIMIT-NEXT: {0, MFSDP_OWNER, 2, mfsdp_bucket_members + 0}, /* w1 w0 */
// LIMIT-NEXT: };
// LIMIT: .num_buckets = 1,

// NEG: error: --emit-step-bucket-mb must be a finite number of MiB, 0 or more, got -1
// OTHER: error: 'sched.step' op was bucketed with bucket_bytes 0 (0: no limit), but the step library was asked for runtime buckets of at most 1024 bytes

// NONE-NOT: mfsdp_bucket
// NONE: .mesh_dims

plan.graph @buckets {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.policy mixed_muon_adamw zero 3
  plan.param @a : tensor<4x64xf32> linear module "a" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1>
  plan.param @"n*/x" : tensor<3x10xf32> norm module "n" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1>
  plan.param @w0 : tensor<8x8xf32> linear module "w0" placement #plan.owner<rank = 1, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
  plan.param @w1 : tensor<8x16xf32> linear module "w1" placement #plan.owner<rank = 0, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
  plan.param @c : tensor<4x64xf32> linear module "c" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1>
  plan.unit @u0 index 0 params [@a, @"n*/x", @w0, @w1] cost <fwd_flops = 1, bwd_flops = 2, act_bytes = 0, recompute = false>
  plan.unit @u1 index 1 params [@c] cost <fwd_flops = 1, bwd_flops = 2, act_bytes = 0, recompute = false>
}

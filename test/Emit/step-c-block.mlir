// Block shards in the step library: MFSDP_BLOCK_SHARD rows carry the block
// extents (rows, and the product of the extents after the first as
// columns, like the tensor's own), every other row 0, 0; the extents are
// part of the plan hash. The source compiles as C11.
// RUN: mfsdp-translate --emit-step-c %s | FileCheck %s
// RUN: mfsdp-translate --emit-step-c %s -o %t.c
// RUN: cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -I%mfsdp_src/include %t.c
// RUN: mfsdp-translate --emit-step-c %s | grep '\.hash' > %t.hash
// RUN: sed 's/block = \[4, 2\]/block = [2, 4]/' %s | mfsdp-translate --emit-step-c | grep '\.hash' >> %t.hash
// RUN: sort -u %t.hash | wc -l | grep -x 2
// Over 3 ranks the 4 blocks of each tensor are dealt 2, 1, 1: every
// rank's shard holds 2 (w 64 B, conv 96 B, bias 16 B), with the row
// shard norm's 12 B: 188 bytes, and the step verifies (it was refused:
// 129.3 bytes a rank).
// RUN: sed 's/plan.mesh @mesh \["dp_shard" = 2\]/plan.mesh @mesh ["dp_shard" = 3]/' %s | mfsdp-opt --mfsdp-build-step="tokens=1" --mfsdp-verify-schedule | FileCheck %s --check-prefix=THREE
// THREE: sched.alloc "row shards g0" bytes 188 persistent

// What the planner gives for AdamW matrices with block-shard=R,C, lowered.
// RUN: mfsdp-opt %S/../Passes/Inputs/two-matrices.mlir --mfsdp-assign-layouts="policy=adamw block-shard=4,2 mesh=dp_shard=2" | mfsdp-translate --emit-step-c | FileCheck %s --check-prefix=PLANNED

// CHECK-LABEL: static const mfsdp_param_desc mfsdp_params[4] = {
// CHECK-NEXT: /* name, rows, cols, unit, placement, owner, optimizer, compute dtype, block rows, block cols */
// CHECK-NEXT: {"w", 8, 4, 0, MFSDP_BLOCK_SHARD, 0, MFSDP_OPT_ADAMW, MFSDP_COMPUTE_F32, 4, 2},
// CHECK-NEXT: {"conv", 4, 24, 0, MFSDP_BLOCK_SHARD, 0, MFSDP_OPT_SGD, MFSDP_COMPUTE_BF16, 2, 12},
// CHECK-NEXT: {"bias", 8, 1, 0, MFSDP_BLOCK_SHARD, 0, MFSDP_OPT_NONE, MFSDP_COMPUTE_F32, 2, 1},
// CHECK-NEXT: {"norm", 8, 1, 0, MFSDP_ROW_SHARD, 0, MFSDP_OPT_ADAMW, MFSDP_COMPUTE_F32, 0, 0},
// CHECK-NEXT: };

// PLANNED-LABEL: static const mfsdp_param_desc mfsdp_params[3] = {
// PLANNED: {"w1", 8, 4, 0, MFSDP_BLOCK_SHARD, 0, MFSDP_OPT_ADAMW, MFSDP_COMPUTE_F32, 4, 2},
// PLANNED-NEXT: {"w2", 8, 4, 1, MFSDP_BLOCK_SHARD, 0, MFSDP_OPT_ADAMW, MFSDP_COMPUTE_F32, 4, 2},
// PLANNED-NEXT: {"n", 4, 1, 1, MFSDP_ROW_SHARD, 0, MFSDP_OPT_ADAMW, MFSDP_COMPUTE_F32, 0, 0},

plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.policy adamw zero 3
  plan.param @w : tensor<8x4xf32> linear module "w" placement #plan.block_shard<block = [4, 2], axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>
  // A 3-D weight: blocks span the dims after the second whole.
  plan.param @conv : tensor<4x6x4xbf16> linear module "w" placement #plan.block_shard<block = [2, 3, 4], axes = ["dp_shard"]> optimizer #plan.sgd<lr = 1.0e-02, momentum = 0.9, weight_decay = 0.0, nesterov = false>
  // A 1-D tensor in row blocks (pinned; the planner blocks matrices only).
  plan.param @bias : tensor<8xf32> other module "w" frozen placement #plan.block_shard<block = [2], axes = ["dp_shard"]>
  plan.param @norm : tensor<8xf32> norm module "w" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>
  plan.unit @u index 0 params [@w, @conv, @bias, @norm] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

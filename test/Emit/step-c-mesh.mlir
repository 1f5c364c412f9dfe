// Meshes with the dims of an outer stack (tp, ep, ...) in any position:
// the whole mesh goes into the library, in order (the runtime forms its
// dp_shard and dp_replicate groups by it), and changes the hash.
// Parameters the outer stack owns (#plan.external) are not in the table; a
// comment says how many were left out and which dims own them.
// RUN: mfsdp-translate --emit-step-c %s | FileCheck %s
// RUN: mfsdp-translate --emit-step-c %s -o %t.c
// RUN: cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -I%mfsdp_src/include %t.c
// The same plan with the outer dim outermost: another mesh table and hash.
// RUN: sed 's/\["dp_shard" = 2, "tp" = 2, "ep" = 1\]/["tp" = 2, "dp_shard" = 2, "ep" = 1]/' %s | mfsdp-translate --emit-step-c | FileCheck %s --check-prefix=OUTER
// RUN: mfsdp-translate --emit-step-c %s | grep '\.hash' > %t.hash
// RUN: sed 's/\["dp_shard" = 2, "tp" = 2, "ep" = 1\]/["tp" = 2, "dp_shard" = 2, "ep" = 1]/' %s | mfsdp-translate --emit-step-c | grep '\.hash' >> %t.hash
// RUN: sort -u %t.hash | wc -l | grep -x 2

// CHECK-LABEL: The step library of plan.graph @g
// CHECK-NEXT: mesh dp_shard=2,tp=2,ep=1 (world 4), policy adamw, ZeRO-3, 2 parameters in 2 units.
// CHECK-NEXT: * 3 external parameters left out (owned by ep, tp): the outer stack keeps them.
// CHECK: static const mfsdp_mesh_dim mfsdp_mesh[3] = {{[{][{]}}"dp_shard", 2}, {"tp", 2}, {"ep", 1{{[}][}]}};
// CHECK-LABEL: static const mfsdp_param_desc mfsdp_params[2] = {
// CHECK-NEXT: /* name, rows, cols
// CHECK-NEXT: {"w", 4, 4, 0, MFSDP_ROW_SHARD, 0, MFSDP_OPT_ADAMW, MFSDP_COMPUTE_F32, 0, 0},
// CHECK-NEXT: {"norm", 4, 1, 1, MFSDP_ROW_SHARD, 0, MFSDP_OPT_ADAMW, MFSDP_COMPUTE_F32, 0, 0},
// CHECK-NEXT: };
// CHECK-NOT: "x0"
// CHECK-LABEL: static const mfsdp_plan mfsdp_the_plan = {
// CHECK: .dp_replicate = 1,
// CHECK-NEXT: .dp_shard = 2,
// CHECK-NEXT: .world = 4,
// CHECK-NEXT: .num_units = 2,
// CHECK-NEXT: .num_params = 2,
// CHECK: .num_mesh_dims = 3,
// CHECK-NEXT: .mesh_dims = mfsdp_mesh,
// OUTER: mesh tp=2,dp_shard=2,ep=1 (world 4)
// OUTER: static const mfsdp_mesh_dim mfsdp_mesh[3] = {{[{][{]}}"tp", 2}, {"dp_shard", 2}, {"ep", 1{{[}][}]}};

plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 2, "tp" = 2, "ep" = 1]
  plan.policy adamw zero 3
  plan.param @w : tensor<4x4xf32> linear module "w" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>
  plan.param @x0 : tensor<4x4xf32> expert module "x0" placement #plan.external<axes = ["ep"]>
  plan.param @x1 : tensor<4x4xf32> expert module "x1" placement #plan.external<axes = ["ep"]>
  plan.param @norm : tensor<4xf32> norm module "norm" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>
  plan.param @q : tensor<4x4xf32> linear module "q" placement #plan.external<axes = ["tp"]>
  plan.unit @a index 0 params [@w, @x0, @x1] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
  plan.unit @b index 1 params [@norm, @q] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// The step library's C source: one table row per parameter (tied ones have
// no storage and no row), units by index, placements and owners as planned,
// the compute dtype from the parameter's element type,
// the mesh and ZeRO level, one hyperparameter set per optimizer, and a hash
// the runtime recomputes. The source must also compile as C11.
// RUN: mfsdp-translate --emit-step-c %s | FileCheck %s
// RUN: mfsdp-translate --emit-step-c %s -o %t.c
// RUN: cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -I%mfsdp_src/include %t.c
// The HSDP Newton-Schulz split is a plan flag (the runtime derives which
// replica steps each owned Muon matrix), and it changes the hash.
// RUN: sed 's/zero 2$/zero 2 ns_split/' %s | mfsdp-translate --emit-step-c | FileCheck %s --check-prefix=SPLIT
// RUN: mfsdp-translate --emit-step-c %s | grep '\.hash' > %t.hash
// RUN: sed 's/zero 2$/zero 2 ns_split/' %s | mfsdp-translate --emit-step-c | grep '\.hash' >> %t.hash
// RUN: sort -u %t.hash | wc -l | grep -x 2

// CHECK-LABEL: The step library of plan.graph @g
// CHECK: mesh dp_replicate=2,dp_shard=2 (world 4), policy mixed_muon_adamw, ZeRO-2, 4 parameters in 2 units.
// CHECK: #include <mfsdp/runtime.h>
// CHECK: static const mfsdp_mesh_dim mfsdp_mesh[2] = {{[{][{]}}"dp_replicate", 2}, {"dp_shard", 2{{[}][}]}};
// CHECK-LABEL: static const mfsdp_param_desc mfsdp_params[4] = {
// CHECK-NEXT: /* name, rows, cols, unit, placement, owner, optimizer, compute dtype, block rows, block cols */
// CHECK-NEXT: {"emb", 16, 8, 0, MFSDP_ROW_SHARD, 0, MFSDP_OPT_ADAMW, MFSDP_COMPUTE_BF16, 0, 0},
// CHECK-NEXT: {"a.w", 8, 8, 1, MFSDP_OWNER, 1, MFSDP_OPT_MUON, MFSDP_COMPUTE_BF16, 0, 0},
// CHECK-NEXT: {"a.conv", 4, 24, 1, MFSDP_REPLICATE, 0, MFSDP_OPT_ADAMW, MFSDP_COMPUTE_BF16, 0, 0},
// CHECK-NEXT: {"a.norm", 8, 1, 1, MFSDP_ROW_SHARD, 0, MFSDP_OPT_NONE, MFSDP_COMPUTE_F32, 0, 0},
// CHECK-NEXT: };
// The plan carries the layout it was compiled with (not hashed).
// CHECK-LABEL: static const mfsdp_plan mfsdp_the_plan = {
// CHECK-NEXT: .struct_size = sizeof(mfsdp_plan),
// CHECK-NEXT: .version = MFSDP_PLAN_VERSION,
// CHECK-NEXT: .hash = UINT64_C(0x{{[0-9a-f]+}}),
// CHECK-NEXT: .zero = 2,
// CHECK-NEXT: .dp_replicate = 2,
// CHECK-NEXT: .dp_shard = 2,
// CHECK-NEXT: .world = 4,
// CHECK-NEXT: .num_units = 2,
// CHECK-NEXT: .num_params = 4,
// CHECK-NEXT: .params = mfsdp_params,
// CHECK-NEXT: .adamw_lr = 0.0003f,
// CHECK-NEXT: .adamw_beta1 = 0.9f,
// CHECK-NEXT: .adamw_beta2 = 0.95f,
// CHECK-NEXT: .adamw_eps = 1e-08f,
// CHECK-NEXT: .adamw_weight_decay = 0.1f,
// CHECK:      .muon_lr = 0.02f,
// CHECK-NEXT: .muon_momentum = 0.95f,
// CHECK-NEXT: .muon_weight_decay = 0.0f,
// CHECK-NEXT: .muon_nesterov = 0,
// CHECK-NEXT: .muon_ns_steps = 6,
// CHECK-NEXT: .muon_scale = 1,
// CHECK-NEXT: .ns_split = 0,
// CHECK-NEXT: .memory = &mfsdp_the_memory,
// CHECK-NEXT: .num_mesh_dims = 2,
// CHECK-NEXT: .mesh_dims = mfsdp_mesh,
// SPLIT-LABEL: static const mfsdp_plan mfsdp_the_plan = {
// SPLIT: .muon_scale = 1,
// SPLIT-NEXT: .ns_split = 1,
// CHECK: const mfsdp_plan *mfsdp_step_plan(void) { return &mfsdp_the_plan; }
// CHECK: mfsdp_status mfsdp_step_create(mfsdp_step **out) {
// CHECK-NEXT: return mfsdp_create(&mfsdp_the_plan, out);

plan.graph @g {
  plan.mesh @mesh ["dp_replicate" = 2, "dp_shard" = 2]
  plan.policy mixed_muon_adamw zero 2
  plan.param @emb : tensor<16x8xbf16> embedding module "emb" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 3.0e-04, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1>
  plan.param @a.w : tensor<8x8xbf16> linear module "a" placement #plan.owner<rank = 1, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.0, nesterov = false, ns_steps = 6, scale = original>
  // A 3-D weight: rows by the rest.
  plan.param @a.conv : tensor<4x6x4xbf16> linear module "a" placement #plan.replicate<axes = ["dp_shard"]> optimizer #plan.adamw<lr = 3.0e-04, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1>
  plan.param @a.norm : tensor<8xf32> norm module "a" frozen placement #plan.row_shard<dim = 0, axes = ["dp_shard"]>
  plan.param @head : tensor<16x8xbf16> output module "head" tied_to @emb
  plan.unit @e index 0 params [@emb] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
  plan.unit @a index 1 params [@a.w, @a.conv, @a.norm] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

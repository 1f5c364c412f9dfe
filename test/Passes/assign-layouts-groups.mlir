// RUN: mfsdp-opt %s --mfsdp-assign-layouts="policy=muon mesh=dp_shard=4" | FileCheck %s --check-prefix=AUTO
// RUN: mfsdp-opt %s --mfsdp-assign-layouts="policy=muon mesh=dp_shard=4 group-units=1" | FileCheck %s --check-prefix=ALONE
// RUN: mfsdp-opt %s --mfsdp-assign-layouts="policy=muon mesh=dp_shard=4 group-units=3" | FileCheck %s --check-prefix=THREE
// RUN: mfsdp-opt %s --mfsdp-assign-layouts="policy=muon mesh=dp_shard=4" --mfsdp-plan-report -o /dev/null | FileCheck %s --check-prefix=FANOUT
// RUN: mfsdp-opt %s --mfsdp-assign-layouts="policy=muon mesh=dp_shard=4 group-units=1" --mfsdp-plan-report -o /dev/null | FileCheck %s --check-prefix=FANOUT1

// Each layer holds two matrices, fewer than the 4 ranks: by default
// adjacent layers are grouped until a group holds at least 4 owner
// matrices, so the owners of a gather group cover the mesh; a short last
// group joins the one before.
// AUTO: plan.unit @l0 index 0 {{.*}} group 0
// AUTO: plan.unit @l1 index 1 {{.*}} group 0
// AUTO: plan.unit @l2 index 2 {{.*}} group 1
// AUTO: plan.unit @l3 index 3 {{.*}} group 1
// AUTO: plan.unit @l4 index 4 {{.*}} group 1

// ALONE: plan.unit @l0 index 0 {{.*}} group 0
// ALONE: plan.unit @l1 index 1 {{.*}} group 1
// ALONE: plan.unit @l4 index 4 {{.*}} group 4

// THREE: plan.unit @l2 index 2 {{.*}} group 0
// THREE: plan.unit @l3 index 3 {{.*}} group 1

// Grouped, a group's 4 (or 6) equal matrices spread over the 4 ranks: the
// largest owner share is the mean (or 2 of 1.5); alone, a layer's two
// matrices sit on two of four ranks, twice the mean.
// FANOUT: units: 5 in 2 gather groups
// FANOUT: owner fan-out per gather group max 1.333 mean 1.167
// FANOUT1: units: 5 in 5 gather groups
// FANOUT1: owner fan-out per gather group max 2.000 mean 2.000
plan.graph @layers {
  plan.param @l0.a : tensor<16x16xbf16> linear module "l0.a"
  plan.param @l0.b : tensor<16x16xbf16> linear module "l0.b"
  plan.param @l1.a : tensor<16x16xbf16> linear module "l1.a"
  plan.param @l1.b : tensor<16x16xbf16> linear module "l1.b"
  plan.param @l2.a : tensor<16x16xbf16> linear module "l2.a"
  plan.param @l2.b : tensor<16x16xbf16> linear module "l2.b"
  plan.param @l3.a : tensor<16x16xbf16> linear module "l3.a"
  plan.param @l3.b : tensor<16x16xbf16> linear module "l3.b"
  plan.param @l4.a : tensor<16x16xbf16> linear module "l4.a"
  plan.param @l4.b : tensor<16x16xbf16> linear module "l4.b"
  plan.unit @l0 index 0 params [@l0.a, @l0.b] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
  plan.unit @l1 index 1 params [@l1.a, @l1.b] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
  plan.unit @l2 index 2 params [@l2.a, @l2.b] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
  plan.unit @l3 index 3 params [@l3.a, @l3.b] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
  plan.unit @l4 index 4 params [@l4.a, @l4.b] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

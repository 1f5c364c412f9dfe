// RUN: mfsdp-opt %s -split-input-file -verify-diagnostics

// The owner rank lies inside the group of its axes.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 4, "tp" = 2]
  // expected-error @+1 {{'plan.param' op owner rank 4 is outside the mesh: its group ["dp_shard"] has 4 ranks}}
  plan.param @w : tensor<8x8xf32> linear module "l" placement #plan.owner<rank = 4, axes = ["dp_shard"]>
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// The shard dim exists in the tensor.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 4]
  // expected-error @+1 {{'plan.param' op row_shard dim 2 is out of range for a rank-2 tensor}}
  plan.param @w : tensor<8x8xf32> linear module "l" placement #plan.row_shard<dim = 2, axes = ["dp_shard"]>
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Block extents divide the tensor dims.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 4]
  // expected-error @+1 {{'plan.param' op block extent 3 does not tile dimension 1 of size 8}}
  plan.param @w : tensor<8x8xf32> linear module "l" placement #plan.block_shard<block = [4, 3], axes = ["dp_shard"]>
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// One block extent per tensor dim.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 4]
  // expected-error @+1 {{'plan.param' op block_shard has 1 block extents for a rank-2 tensor}}
  plan.param @w : tensor<8x8xf32> linear module "l" placement #plan.block_shard<block = [4], axes = ["dp_shard"]>
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Placement axes are dims of the mesh.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 4]
  // expected-error @+1 {{'plan.param' op row_shard axis "dp_replicate" is not a dim of mesh @mesh}}
  plan.param @w : tensor<8x8xf32> linear module "l" placement #plan.row_shard<dim = 0, axes = ["dp_replicate"]>
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// mfsdp shards over data-parallel dims only.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 4, "tp" = 2]
  // expected-error @+1 {{'plan.param' op owner axis "tp" is not a data-parallel dim (dp_shard or dp_replicate)}}
  plan.param @w : tensor<8x8xf32> linear module "l" placement #plan.owner<rank = 0, axes = ["tp"]>
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// A sharded placement needs a mesh.
plan.graph @g {
  // expected-error @+1 {{'plan.param' op has a row_shard placement but the graph has no plan.mesh}}
  plan.param @w : tensor<8x8xf32> linear module "l" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]>
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// The owning dim of an external parameter is a dim of the mesh.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 4, "tp" = 2]
  // expected-error @+1 {{'plan.param' op owning dim "ep" is not a dim of mesh @mesh}}
  plan.param @w : tensor<8x8xf32> expert module "l" placement #plan.external<axes = ["ep"]>
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

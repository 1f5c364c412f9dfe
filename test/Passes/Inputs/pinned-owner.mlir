// A matrix pinned to owner rank 3 of a 4-rank dp_shard group.
plan.graph @pinned {
  plan.mesh @mesh ["dp_shard" = 4]
  plan.param @w : tensor<8x8xbf16> linear module "w" placement #plan.owner<rank = 3, axes = ["dp_shard"]>
  plan.param @v : tensor<8x8xbf16> linear module "v"
  plan.unit @u index 0 params [@w, @v] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// Four units of one 1024x1024 bf16 matrix and a norm on 2 ranks: Muon's
// Newton-Schulz on a matrix takes far longer than a reduction, so the
// optimizer order matters.
plan.graph @blocks seq_len 16 {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.policy muon zero 3
  plan.param @b0.w : tensor<1024x1024xbf16> linear module "b0.w"
  plan.param @b0.n : tensor<1024xbf16> norm module "b0.n"
  plan.param @b1.w : tensor<1024x1024xbf16> linear module "b1.w"
  plan.param @b1.n : tensor<1024xbf16> norm module "b1.n"
  plan.param @b2.w : tensor<1024x1024xbf16> linear module "b2.w"
  plan.param @b2.n : tensor<1024xbf16> norm module "b2.n"
  plan.param @b3.w : tensor<1024x1024xbf16> linear module "b3.w"
  plan.param @b3.n : tensor<1024xbf16> norm module "b3.n"
  plan.unit @b0 index 0 params [@b0.w, @b0.n] cost <fwd_flops = 1048576, bwd_flops = 2097152, act_bytes = 32, recompute = false>
  plan.unit @b1 index 1 params [@b1.w, @b1.n] cost <fwd_flops = 1048576, bwd_flops = 2097152, act_bytes = 32, recompute = false>
  plan.unit @b2 index 2 params [@b2.w, @b2.n] cost <fwd_flops = 1048576, bwd_flops = 2097152, act_bytes = 32, recompute = false>
  plan.unit @b3 index 3 params [@b3.w, @b3.n] cost <fwd_flops = 1048576, bwd_flops = 2097152, act_bytes = 32, recompute = false>
}

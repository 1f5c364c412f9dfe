// Two f32 matrices and a norm: small enough to cost by hand.
plan.graph @hand seq_len 8 {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.policy mixed_muon_adamw zero 3
  plan.param @w1 : tensor<8x4xf32> linear module "w1"
  plan.param @w2 : tensor<8x4xf32> linear module "w2"
  plan.param @n : tensor<4xf32> norm module "n"
  plan.unit @u0 index 0 params [@w1] cost <fwd_flops = 64, bwd_flops = 128, act_bytes = 16, recompute = false>
  plan.unit @u1 index 1 params [@w2, @n] cost <fwd_flops = 64, bwd_flops = 128, act_bytes = 16, recompute = false>
}

// Two graphs without a mesh: each is planned on its own.
plan.graph @first seq_len 8 {
  plan.param @w : tensor<8x4xf32> linear module "w"
  plan.unit @u0 index 0 params [@w] cost <fwd_flops = 64, bwd_flops = 128, act_bytes = 16, recompute = false>
}
plan.graph @second seq_len 8 {
  plan.param @w : tensor<8x4xf32> linear module "w"
  plan.unit @u0 index 0 params [@w] cost <fwd_flops = 64, bwd_flops = 128, act_bytes = 16, recompute = false>
}

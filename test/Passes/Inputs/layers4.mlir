// Four layers of two 16x16 bf16 matrices and a norm, on 4 ranks: with
// Muon, two layers make a gather group.
plan.graph @layers seq_len 16 {
  plan.mesh @mesh ["dp_shard" = 4]
  plan.policy muon zero 3
  plan.param @l0.a : tensor<16x16xbf16> linear module "l0.a"
  plan.param @l0.b : tensor<16x16xbf16> linear module "l0.b"
  plan.param @l0.n : tensor<64xbf16> norm module "l0.n"
  plan.param @l1.a : tensor<16x16xbf16> linear module "l1.a"
  plan.param @l1.b : tensor<16x16xbf16> linear module "l1.b"
  plan.param @l1.n : tensor<64xbf16> norm module "l1.n"
  plan.param @l2.a : tensor<16x16xbf16> linear module "l2.a"
  plan.param @l2.b : tensor<16x16xbf16> linear module "l2.b"
  plan.param @l2.n : tensor<64xbf16> norm module "l2.n"
  plan.param @l3.a : tensor<16x16xbf16> linear module "l3.a"
  plan.param @l3.b : tensor<16x16xbf16> linear module "l3.b"
  plan.param @l3.n : tensor<64xbf16> norm module "l3.n"
  plan.unit @l0 index 0 params [@l0.a, @l0.b, @l0.n] cost <fwd_flops = 1024, bwd_flops = 2048, act_bytes = 32, recompute = false>
  plan.unit @l1 index 1 params [@l1.a, @l1.b, @l1.n] cost <fwd_flops = 1024, bwd_flops = 2048, act_bytes = 32, recompute = false>
  plan.unit @l2 index 2 params [@l2.a, @l2.b, @l2.n] cost <fwd_flops = 1024, bwd_flops = 2048, act_bytes = 32, recompute = false>
  plan.unit @l3 index 3 params [@l3.a, @l3.b, @l3.n] cost <fwd_flops = 1024, bwd_flops = 2048, act_bytes = 32, recompute = false>
}

// A small model with one parameter of every role, for the assign-layouts
// tests: embedding, hidden matrices, a bias, norms, a router, an expert
// managed by FSDP, an expert owned by expert parallelism, a frozen matrix
// and a tied output head.
plan.graph @roles seq_len 128 {
  plan.mesh @mesh ["dp_shard" = 4, "ep" = 2]
  plan.param @embed : tensor<64x16xbf16> embedding module "embed"
  plan.param @l0.q : tensor<16x16xbf16> linear module "l0.q"
  plan.param @l0.q.bias : tensor<16xbf16> linear module "l0.q"
  plan.param @l0.up : tensor<32x16xbf16> linear module "l0.up"
  plan.param @l0.norm : tensor<16xf32> norm module "l0.norm"
  plan.param @l0.router : tensor<4x16xbf16> router module "l0.router"
  plan.param @l0.expert : tensor<32x16xbf16> expert module "l0.expert"
  plan.param @l0.ep_expert : tensor<32x16xbf16> expert module "l0.ep_expert" placement #plan.external<axes = ["ep"]>
  plan.param @l1.q : tensor<16x16xbf16> linear module "l1.q"
  plan.param @l1.frozen : tensor<16x16xbf16> linear module "l1.frozen" frozen
  plan.param @l1.scale : tensor<1xf32> other module "l1.scale"
  plan.param @head : tensor<64x16xbf16> output module "head" tied_to @embed
  plan.unit @u.embed index 0 params [@embed] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
  plan.unit @u.l0 index 1 params [@l0.q, @l0.q.bias, @l0.up, @l0.norm, @l0.router, @l0.expert, @l0.ep_expert] cost <fwd_flops = 10, bwd_flops = 20, act_bytes = 4, recompute = false>
  plan.unit @u.l1 index 2 params [@l1.q, @l1.frozen, @l1.scale] cost <fwd_flops = 10, bwd_flops = 20, act_bytes = 4, recompute = false>
}

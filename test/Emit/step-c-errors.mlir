// What the step runtime cannot run yet is refused on the op that asks for
// it, with what was expected; nothing is emitted half-way.
// RUN: mfsdp-translate --emit-step-c %s -split-input-file -verify-diagnostics -o /dev/null

// A graph that was never planned has no mesh.
// expected-error @+1 {{'plan.graph' op has no plan.mesh; run --mfsdp-assign-layouts before emitting a step library}}
plan.graph @g {
  plan.param @w : tensor<4x4xf32> linear module "w"
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// A parameter without a placement.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.policy adamw zero 3
  // expected-error @+1 {{'plan.param' op has no placement; run --mfsdp-assign-layouts before emitting a step library}}
  plan.param @w : tensor<4x4xf32> linear module "w"
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Block shards run with elementwise optimizers only: Muon on blocks is
// refused (by the op's verifier, before the lowering sees it).
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.policy muon zero 3
  // expected-error @+1 {{'plan.param' op Muon needs the whole matrix on one rank; a block_shard placement splits it (use #plan.owner)}}
  plan.param @w : tensor<4x4xf32> linear module "w" placement #plan.block_shard<block = [2, 2], axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Blocks dealt over dp_replicate as well as dp_shard.
plan.graph @g {
  plan.mesh @mesh ["dp_replicate" = 2, "dp_shard" = 2]
  plan.policy adamw zero 3
  // expected-error @+1 {{'plan.param' op is block-sharded over ["dp_replicate", "dp_shard"]; the step runtime deals blocks over ["dp_shard"] only}}
  plan.param @w : tensor<4x4xf32> linear module "w" placement #plan.block_shard<block = [2, 2], axes = ["dp_replicate", "dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// A flat row layout is planned and simulated, but the step runtime stages
// row shards per parameter: the library would not run what the step
// prices, so it is refused on the unit.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.policy adamw zero 3
  plan.param @w : tensor<4x4xf32> linear module "w" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>
  // expected-error @+1 {{'plan.unit' op has row_layout flat: the step runtime gathers and reduces row shards per parameter, copying them in and out of its buckets (FSDP2's layout), and does not use a flat buffer in place; plan with row-layout=per_param (the default) for a step library}}
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false> row_layout flat group 0
}

// -----

// Dims after the second flatten into columns: a block must span them.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.policy adamw zero 3
  // expected-error @+1 {{'plan.param' op has blocks of extent 2 in dim 2 of size 4; the step runtime flattens dims after the second into columns, so blocks must span them whole}}
  plan.param @w : tensor<4x4x4xf32> linear module "w" placement #plan.block_shard<block = [2, 2, 2], axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// One AdamW setting per plan.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.policy adamw zero 3
  plan.param @w : tensor<4x4xf32> linear module "w" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>
  // expected-error @+1 {{'plan.param' op has AdamW hyperparameters #plan.adamw<lr = 0.002, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01> but @w has #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>; the step runtime takes one setting per optimizer}}
  plan.param @v : tensor<4x4xf32> linear module "v" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 2.0e-03, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>
  plan.unit @u index 0 params [@w, @v] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// A compute dtype the runtime has no kernels for.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.policy adamw zero 3
  // expected-error @+1 {{'plan.param' op computes in 'f16'; the step runtime computes in f32 or bf16}}
  plan.param @w : tensor<4x4xf16> linear module "w" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

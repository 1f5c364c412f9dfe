// RUN: mfsdp-opt %s -split-input-file -verify-diagnostics

// Element types are the floating-point dtypes the runtime supports.
plan.graph @g {
  // expected-error @+1 {{'plan.param' op element type must be one of f64, f32, bf16, f16, f8E4M3FN, f8E5M2, got 'i32'}}
  plan.param @w : tensor<4x4xi32> linear module "l"
}

// -----

// Dimensions are positive.
plan.graph @g {
  // expected-error @+1 {{'plan.param' op dimension 1 must be positive, got 0}}
  plan.param @w : tensor<4x0xf32> linear module "l"
}

// -----

// Shapes are static.
plan.graph @g {
  // expected-error @+1 {{'plan.param' op dimension 0 must be static}}
  plan.param @w : tensor<?x4xf32> linear module "l"
}

// -----

// Scalars are not parameters of the format.
plan.graph @g {
  // expected-error @+1 {{'plan.param' op type must have at least one dimension}}
  plan.param @w : tensor<f32> linear module "l"
}

// -----

// The type is a ranked tensor.
plan.graph @g {
  // expected-error @+1 {{'plan.param' op type must be a ranked tensor, got 'f32'}}
  plan.param @w : f32 linear module "l"
}

// -----

// Unknown dtypes do not even parse.
plan.graph @g {
  // expected-error @+1 {{expected non-function type}}
  plan.param @w : tensor<4x4xbf17> linear module "l"
}

// -----

// Unknown module kinds do not parse.
plan.graph @g {
  // expected-error @+1 {{expected string or keyword containing one of the following enum values for attribute 'kind' [linear, embedding, output, norm, router, expert, other]}}
  plan.param @w : tensor<4x4xf32> attention module "l"
}

// -----

// Duplicate names: parameters share one symbol table.
plan.graph @g {
  // expected-note @+1 {{see existing symbol definition here}}
  plan.param @w : tensor<4x4xf32> linear module "l"
  // expected-error @+1 {{redefinition of symbol named 'w'}}
  plan.param @w : tensor<4x4xf32> linear module "l"
}

// -----

// Muon runs on 2-D matrices only.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 2]
  // expected-error @+1 {{'plan.param' op Muon needs a 2-D matrix, but this parameter has rank 1; use AdamW for it}}
  plan.param @b : tensor<64xf32> linear module "l"
      optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0, nesterov = true, ns_steps = 5, scale = original>
  plan.unit @u index 0 params [@b] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Muon needs the whole matrix on one rank.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 2]
  // expected-error @+1 {{'plan.param' op Muon needs the whole matrix on one rank; a block_shard placement splits it (use #plan.owner)}}
  plan.param @w : tensor<64x64xf32> linear module "l"
      placement #plan.block_shard<block = [32, 32], axes = ["dp_shard"]>
      optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0, nesterov = true, ns_steps = 5, scale = original>
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// An external parameter's optimizer belongs to the outer stack.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 2, "ep" = 2]
  // expected-error @+1 {{'plan.param' op is external (owned by ["ep"]); mfsdp does not run its optimizer}}
  plan.param @w : tensor<64x64xf32> expert module "l"
      placement #plan.external<axes = ["ep"]>
      optimizer #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0>
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// A tied parameter has no storage, so no placement.
plan.graph @g {
  plan.param @e : tensor<8x4xf32> embedding module "e"
  // expected-error @+1 {{'plan.param' op is tied to @e and has no storage of its own; it cannot have a placement}}
  plan.param @h : tensor<8x4xf32> output module "h" tied_to @e placement #plan.replicate
  plan.unit @u index 0 params [@e] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

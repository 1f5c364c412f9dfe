// RUN: mfsdp-opt %s | FileCheck %s
// RUN: mfsdp-opt %s | mfsdp-opt | FileCheck %s
// RUN: mfsdp-opt %s -mlir-print-op-generic | mfsdp-opt | FileCheck %s
// RUN: mfsdp-opt %s | FileCheck %s --check-prefix=EXACT --strict-whitespace

// plan.param and plan.unit print their properties through their format
// (dialects/QuietProperties.h): one space between words, none at the end.
// EXACT: {{^ +}}plan.param @embed : tensor<256x64xbf16> embedding module "model.embed_tokens" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0>{{$}}
// EXACT: {{^ +}}plan.unit @embed_unit index 0 params [@embed] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false> row_layout flat group 0{{$}}
// EXACT: {{^ +}}plan.unit @u index 0 params [@w] cost <fwd_flops = 4096, bwd_flops = 8192, act_bytes = 0, recompute = false, kernels = [#plan.kernel<"gemm", shape = [64, 32, 1], scale = 1>, #plan.kernel<"attention", shape = [4, 8, 8, 1, 128], scale = 1>, #plan.kernel<"memory", shape = [], scale = 12.5>]>{{$}}

// Every op and attribute of the plan dialect prints and parses back.

// CHECK-LABEL: plan.graph @all_forms seq_len 4096 {
plan.graph @all_forms seq_len 4096 {
  // CHECK: plan.mesh @mesh ["dp_replicate" = 2, "dp_shard" = 4, "tp" = 2] device_ids [0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15]
  plan.mesh @mesh ["dp_replicate" = 2, "dp_shard" = 4, "tp" = 2] device_ids [0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15]
  // CHECK: plan.policy mixed_muon_adamw zero 3 adamw <lr = 0.0003, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1> muon <lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = original> ns_split
  plan.policy mixed_muon_adamw zero 3
      adamw #plan.adamw<lr = 3.0e-4, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, weight_decay = 0.1>
      muon #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = original> ns_split
  // CHECK: plan.param @embed : tensor<256x64xbf16> embedding module "model.embed_tokens" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0>
  plan.param @embed : tensor<256x64xbf16> embedding module "model.embed_tokens"
      placement #plan.row_shard<dim = 0, axes = ["dp_shard"]>
      optimizer #plan.adamw<lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0>
  // CHECK: plan.param @model.layers.0.q : tensor<64x64xf32> linear module "model.layers.0.q" placement #plan.owner<rank = 3, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0, nesterov = false, ns_steps = 5, scale = match_rms_adamw>
  plan.param @"model.layers.0.q" : tensor<64x64xf32> linear module "model.layers.0.q"
      placement #plan.owner<rank = 3, axes = ["dp_shard"]>
      optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.0, nesterov = false, ns_steps = 5, scale = match_rms_adamw>
  // CHECK: plan.param @model.layers.0.k : tensor<64x64xf16> linear module "model.layers.0.k" placement #plan.block_shard<block = [32, 16], axes = ["dp_replicate", "dp_shard"]>
  plan.param @"model.layers.0.k" : tensor<64x64xf16> linear module "model.layers.0.k"
      placement #plan.block_shard<block = [32, 16], axes = ["dp_replicate", "dp_shard"]>
  // CHECK: plan.param @model.layers.0.norm : tensor<64xf64> norm module "model.layers.0.norm" frozen placement #plan.replicate optimizer #plan.sgd<lr = 0.01, momentum = 0.9, weight_decay = 0, nesterov = true>
  plan.param @"model.layers.0.norm" : tensor<64xf64> norm module "model.layers.0.norm" frozen
      placement #plan.replicate
      optimizer #plan.sgd<lr = 0.01, momentum = 0.9, weight_decay = 0.0, nesterov = true>
  // CHECK: plan.param @model.layers.0.experts.0.w1 : tensor<128x64xf8E4M3FN> expert module "model.layers.0.experts.0.w1" placement #plan.external<axes = ["tp"]>
  plan.param @"model.layers.0.experts.0.w1" : tensor<128x64xf8E4M3FN> expert module "model.layers.0.experts.0.w1"
      placement #plan.external<axes = ["tp"]>
  // CHECK: plan.param @model.layers.0.router : tensor<8x64xf8E5M2> router module "model.layers.0.router"
  plan.param @"model.layers.0.router" : tensor<8x64xf8E5M2> router module "model.layers.0.router"
  // CHECK: plan.param @head : tensor<256x64xbf16> output module "lm_head" tied_to @embed
  plan.param @head : tensor<256x64xbf16> output module "lm_head" tied_to @embed
  // CHECK: plan.param @other.scale : tensor<1xf32> other module "other"
  plan.param @"other.scale" : tensor<1xf32> other module "other"
  // CHECK: plan.unit @model.layers.0 index 1 params [@model.layers.0.q, @model.layers.0.k, @model.layers.0.norm, @model.layers.0.experts.0.w1, @model.layers.0.router, @other.scale] cost <fwd_flops = 1500000, bwd_flops = 3000000, act_bytes = 1024, recompute = true> row_layout per_param group 0
  plan.unit @"model.layers.0" index 1
      params [@"model.layers.0.q", @"model.layers.0.k", @"model.layers.0.norm", @"model.layers.0.experts.0.w1", @"model.layers.0.router", @"other.scale"]
      cost <fwd_flops = 1.5e6, bwd_flops = 3.0e6, act_bytes = 1024, recompute = true> row_layout per_param group 0
  // CHECK: plan.unit @embed_unit index 0 params [@embed] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false> row_layout flat group 0
  plan.unit @embed_unit index 0 params [@embed]
      cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false> row_layout flat group 0
}

// A graph needs no mesh, policy or sequence length.
// CHECK-LABEL: plan.graph @minimal {
plan.graph @minimal {
  // CHECK: plan.param @w : tensor<3x5xf32> linear module "l"
  plan.param @w : tensor<3x5xf32> linear module "l"
  // CHECK: plan.unit @u index 0 params [@w] cost <fwd_flops = 30, bwd_flops = 60, act_bytes = 0.5, recompute = false>
  plan.unit @u index 0 params [@w] cost <fwd_flops = 30, bwd_flops = 60, act_bytes = 0.5, recompute = false>
}


// A unit's cost may list its forward's kernels for the per-op cost model:
// GEMMs by shape, attention, memory-bound work.
// CHECK-LABEL: plan.graph @kernels {
plan.graph @kernels {
  plan.param @w : tensor<64x32xbf16> linear module "l"
  // CHECK: plan.unit @u index 0 params [@w] cost <fwd_flops = 4096, bwd_flops = 8192, act_bytes = 0, recompute = false, kernels = [#plan.kernel<"gemm", shape = [64, 32, 1], scale = 1>, #plan.kernel<"attention", shape = [4, 8, 8, 1, 128], scale = 1>, #plan.kernel<"memory", shape = [], scale = 12.5>]>
  plan.unit @u index 0 params [@w] cost <fwd_flops = 4096, bwd_flops = 8192, act_bytes = 0, recompute = false, kernels = [#plan.kernel<"gemm", shape = [64, 32, 1], scale = 1>, #plan.kernel<"attention", shape = [4, 8, 8, 1, 128], scale = 1>, #plan.kernel<"memory", shape = [], scale = 12.5>]>
}

// Module names, parameter symbols and placements print through the ops'
// own directives (dialects/FastText.h, PlanDialect::printCachedAttr):
// quoted and escaped text is exactly the text of MLIR's attribute printer.
// EXACT: {{^ +}}plan.param @"w 0" : tensor<4x4xf32> linear module "mod \22q\22 \\ x" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>{{$}}
// EXACT: {{^ +}}plan.param @v : tensor<4xf32> norm module "v" placement #plan.replicate optimizer #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0>{{$}}
// EXACT: {{^ +}}plan.unit @"u 0" index 0 params [@"w 0", @v] cost <fwd_flops = 1, bwd_flops = 2, act_bytes = 3, recompute = false>{{$}}

// CHECK-LABEL: plan.graph @quoted
plan.graph @quoted seq_len 8 {
  plan.mesh @m ["dp_shard" = 2]
  // CHECK: plan.param @"w 0" {{.*}} module "mod \22q\22 \\ x"
  plan.param @"w 0" : tensor<4x4xf32> linear module "mod \"q\" \\ x" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>
  // CHECK: plan.param @v {{.*}} placement #plan.replicate
  plan.param @v : tensor<4xf32> norm module "v" placement #plan.replicate optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0>
  // CHECK: plan.unit @"u 0" index 0 params [@"w 0", @v]
  plan.unit @"u 0" index 0 params [@"w 0", @v] cost <fwd_flops = 1, bwd_flops = 2, act_bytes = 3, recompute = false>
}

// A cost's numbers: integral values as integers (negative zero "-0", up
// to 1e15), others in their shortest exact form.
// EXACT: {{^ +}}plan.unit @n index 0 params [@nw] cost <fwd_flops = -0, bwd_flops = 123456789012345, act_bytes = 1.0e+15, recompute = false, kernels = [#plan.kernel<"memory", shape = [], scale = 0.5>]>{{$}}

// CHECK-LABEL: plan.graph @numbers
plan.graph @numbers seq_len 8 {
  plan.mesh @m ["dp_shard" = 2]
  plan.param @nw : tensor<4xf32> norm module "w"
  // CHECK: plan.unit @n index 0 params [@nw] cost <fwd_flops = -0, bwd_flops = 123456789012345, act_bytes = 1.0e+15
  plan.unit @n index 0 params [@nw] cost <fwd_flops = -0.0, bwd_flops = 123456789012345, act_bytes = 1.0e15, recompute = false, kernels = [#plan.kernel<"memory", shape = [], scale = 0.5>]>
}

// A kernel's shape: integers in brackets, none at all, spaced as one likes.
// CHECK-LABEL: plan.graph @shapes
plan.graph @shapes seq_len 8 {
  plan.mesh @m ["dp_shard" = 2]
  plan.param @sw : tensor<4xf32> norm module "w"
  // CHECK: kernels = [#plan.kernel<"gemm", shape = [4, 5, 1], scale = 1>, #plan.kernel<"memory", shape = [], scale = 2>]
  plan.unit @s index 0 params [@sw] cost <fwd_flops = 1, bwd_flops = 2, act_bytes = 3, recompute = false, kernels = [#plan.kernel<"gemm", shape = [4,5 ,  1], scale = 1>, #plan.kernel<"memory", shape = [ ], scale = 2>]>
}

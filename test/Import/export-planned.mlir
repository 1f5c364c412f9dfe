// RUN: mfsdp-translate --export-mfsdp-graph %s -split-input-file -verify-diagnostics

// A placement chosen by planning is not part of the graph format; exporting
// it would lose it, so export refuses.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 2]
  // expected-error @+1 {{'plan.param' op has placement #plan.row_shard<dim = 0, axes = ["dp_shard"]>, a planning decision the graph format does not carry; export the graph before planning}}
  plan.param @w : tensor<4x4xf32> linear module "l" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]>
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Likewise an optimizer chosen by planning.
plan.graph @g {
  // expected-error @+1 {{'plan.param' op has an optimizer chosen by planning, which the graph format does not carry}}
  plan.param @w : tensor<4x4xf32> linear module "l" optimizer #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0>
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Export takes exactly one graph.
// expected-error @+1 {{expected a module with one plan.graph}}
module {
}

// -----

// Row layouts and gather groups are planning decisions too.
plan.graph @g {
  plan.param @w : tensor<4x4xf32> linear module "l"
  // expected-error @+1 {{'plan.unit' op has a row layout or gather group chosen by planning, which the graph format does not carry; export the graph before planning}}
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false> row_layout flat group 0
}

// -----

// So is splitting Newton-Schulz across replicas.
plan.graph @g {
  // expected-error @+1 {{'plan.policy' op has ns_split, a planning decision the graph format does not carry; export the graph before planning}}
  plan.policy muon zero 3 ns_split
  plan.param @w : tensor<4x4xf32> linear module "l"
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

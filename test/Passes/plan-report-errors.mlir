// RUN: mfsdp-opt %s -split-input-file -verify-diagnostics --mfsdp-plan-report -o /dev/null

// The report needs a plan: every managed parameter placed.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 2]
  // expected-error @+1 {{'plan.param' op has no placement; run mfsdp-assign-layouts before mfsdp-plan-report}}
  plan.param @w : tensor<4x4xf32> linear module "w"
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// And a mesh.
// expected-error @+1 {{cannot report a plan without a mesh; run mfsdp-assign-layouts first}}
plan.graph @g {
  plan.param @w : tensor<4x4xf32> linear module "w" placement #plan.replicate
  plan.unit @u index 0 params [@w] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

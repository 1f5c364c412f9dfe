// RUN: mfsdp-opt %s -split-input-file -verify-diagnostics

// A step names the mesh of its graph; its units and parameters resolve in
// that graph, its collectives' axes and group sizes against that mesh.
plan.graph @g seq_len 8 {
  plan.mesh @mesh ["dp_replicate" = 2, "dp_shard" = 2]
  plan.param @w : tensor<8x4xf32> linear module "w"
  plan.unit @u index 0 params [@w] cost <fwd_flops = 64, bwd_flops = 128, act_bytes = 16, recompute = false>
}
sched.step @g.step mesh @g::@mesh world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 64 persistent
  sched.all_reduce "r" %a -> %a on ["dp_replicate", "dp_shard"] ranks 4 bytes 64 comm 0 phase backward params [@w]
  sched.compute forward "f" unit @u reads(%a) writes() flops 1.0 bytes 0 phase forward
  sched.optimizer adamw "o" reads(%a) writes(%a) flops 1.0 bytes 0 phase optimizer params [@w]
}

// -----

// The mesh's root is a graph beside the step.
// expected-error @+1 {{'sched.step' op names mesh @nograph::@mesh, but @nograph is not a plan.graph beside the step}}
sched.step @s mesh @nograph::@mesh world 2 tokens 1 microbatches 1 {
}

// -----

// The mesh is a plan.mesh of that graph.
plan.graph @g seq_len 8 {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.param @w : tensor<8x4xf32> linear module "w"
  plan.unit @u index 0 params [@w] cost <fwd_flops = 64, bwd_flops = 128, act_bytes = 16, recompute = false>
}
// expected-error @+1 {{'sched.step' op names mesh @g::@w, which is not a plan.mesh of graph @g}}
sched.step @s mesh @g::@w world 2 tokens 1 microbatches 1 {
}

// -----

// The step runs on the dp_shard ranks of the mesh.
plan.graph @g seq_len 8 {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.param @w : tensor<8x4xf32> linear module "w"
  plan.unit @u index 0 params [@w] cost <fwd_flops = 64, bwd_flops = 128, act_bytes = 16, recompute = false>
}
// expected-error @+1 {{'sched.step' op world 4 is not the size of dp_shard in mesh @g::@mesh (2)}}
sched.step @s mesh @g::@mesh world 4 tokens 1 microbatches 1 {
}

// -----

// A collective's axes are dims of the mesh.
plan.graph @g seq_len 8 {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.param @w : tensor<8x4xf32> linear module "w"
  plan.unit @u index 0 params [@w] cost <fwd_flops = 64, bwd_flops = 128, act_bytes = 16, recompute = false>
}
sched.step @s mesh @g::@mesh world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 64 persistent
  // expected-error @+1 {{'sched.all_reduce' op mesh axis 'tp' is not a dim of mesh @g::@mesh}}
  sched.all_reduce "r" %a -> %a on ["tp"] ranks 2 bytes 64 comm 0 phase backward
}

// -----

// A collective's group is as large as its axes make it.
plan.graph @g seq_len 8 {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.param @w : tensor<8x4xf32> linear module "w"
  plan.unit @u index 0 params [@w] cost <fwd_flops = 64, bwd_flops = 128, act_bytes = 16, recompute = false>
}
sched.step @s mesh @g::@mesh world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 64 persistent
  // expected-error @+1 {{'sched.all_gather' op ranks 4 is not the size of the group over ["dp_shard"] in mesh @g::@mesh (2)}}
  sched.all_gather "g" %a -> %a on ["dp_shard"] ranks 4 bytes 64 comm 0 phase forward
}

// -----

// A compute op's unit is a unit of the graph.
plan.graph @g seq_len 8 {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.param @w : tensor<8x4xf32> linear module "w"
  plan.unit @u index 0 params [@w] cost <fwd_flops = 64, bwd_flops = 128, act_bytes = 16, recompute = false>
}
sched.step @s mesh @g::@mesh world 2 tokens 1 microbatches 1 {
  // expected-error @+1 {{'sched.compute' op unit @w is not a plan.unit of graph @g}}
  sched.compute forward "f" unit @w reads() writes() flops 1.0 bytes 0 phase forward
}

// -----

// The parameters a collective carries are parameters of the graph.
plan.graph @g seq_len 8 {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.param @w : tensor<8x4xf32> linear module "w"
  plan.unit @u index 0 params [@w] cost <fwd_flops = 64, bwd_flops = 128, act_bytes = 16, recompute = false>
}
sched.step @s mesh @g::@mesh world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 64 persistent
  // expected-error @+1 {{'sched.all_gather' op params @ghost is not a plan.param of graph @g}}
  sched.all_gather "g" %a -> %a on ["dp_shard"] ranks 2 bytes 64 comm 0 phase forward params [@ghost]
}

// -----

// So are those an optimizer kernel updates.
plan.graph @g seq_len 8 {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.param @w : tensor<8x4xf32> linear module "w"
  plan.unit @u index 0 params [@w] cost <fwd_flops = 64, bwd_flops = 128, act_bytes = 16, recompute = false>
}
sched.step @s mesh @g::@mesh world 2 tokens 1 microbatches 1 {
  // expected-error @+1 {{'sched.optimizer' op params @u is not a plan.param of graph @g}}
  sched.optimizer adamw "o" reads() writes() flops 1.0 bytes 0 phase optimizer params [@u]
}

// RUN: mfsdp-opt %s -split-input-file -verify-diagnostics --mfsdp-assign-layouts="policy=mixed_muon_adamw muon-include=n"
// RUN: not mfsdp-opt %S/Inputs/roles.mlir --mfsdp-assign-layouts="mesh=dp_shard=4,ep=2 world=16" -o /dev/null 2>&1 | FileCheck %s --check-prefix=WORLD
// RUN: not mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts="policy=adamw block-shard=8,4 mesh=dp_shard=2" -o /dev/null 2>&1 | FileCheck %s --check-prefix=EMPTY
// RUN: not mfsdp-opt %S/Inputs/pinned-owner.mlir --mfsdp-assign-layouts="policy=muon mesh=dp_shard=2" -o /dev/null 2>&1 | FileCheck %s --check-prefix=PINNED
// RUN: mfsdp-opt %S/Inputs/pinned-owner.mlir --mfsdp-assign-layouts="policy=muon" | FileCheck %s --check-prefix=KEPT
// RUN: not mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts="policy=lion" -o /dev/null 2>&1 | FileCheck %s --check-prefix=POLICY
// RUN: not mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts="owner-strategy=best" -o /dev/null 2>&1 | FileCheck %s --check-prefix=STRATEGY
// RUN: not mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts="mesh=dp_shard" -o /dev/null 2>&1 | FileCheck %s --check-prefix=MESHSPEC
// RUN: not mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts="mesh=tp=4" -o /dev/null 2>&1 | FileCheck %s --check-prefix=NODP
// RUN: not mfsdp-opt %S/Inputs/roles.mlir --mfsdp-assign-layouts="mesh=dp_shard=4" -o /dev/null 2>&1 | FileCheck %s --check-prefix=EXTDIM
// RUN: not mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts="muon-include=ghost" -o /dev/null 2>&1 | FileCheck %s --check-prefix=GHOST
// RUN: not mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts="zero=4" -o /dev/null 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts="policy=mixed_muon_adamw block-shard=-4,4" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BLOCK
// RUN: not mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts="mesh=dp_shard=2147483648" -o /dev/null 2>&1 | FileCheck %s --check-prefix=HUGE
// RUN: not mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-pipeline="mesh=dp_shard=2 tokens=-5" -o /dev/null 2>&1 | FileCheck %s --check-prefix=TOKENS
// RUN: not mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-pipeline="mesh=dp_shard=2 tokens=9223372036854775807" -o /dev/null 2>&1 | FileCheck %s --check-prefix=TOKENS2
// RUN: not mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-pipeline="mesh=dp_shard=2 microbatches=100000000" -o /dev/null 2>&1 | FileCheck %s --check-prefix=MICRO
// RUN: not mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts="mesh=dp_shard=2 world=-1" -o /dev/null 2>&1 | FileCheck %s --check-prefix=WORLDNEG

// Muon on a 1-D tensor is refused on the parameter.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.param @w : tensor<4x4xf32> linear module "w"
  // expected-error @+1 {{'plan.param' op Muon needs a 2-D matrix, but 'n' has rank 1; leave it to AdamW}}
  plan.param @n : tensor<4xf32> norm module "n"
  plan.unit @u index 0 params [@w, @n] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Muon on a matrix pinned to block shards is refused.
plan.graph @g {
  plan.mesh @mesh ["dp_shard" = 2]
  // expected-error @+1 {{'plan.param' op Muon needs 'w' whole on one rank, but it is pinned to block_shard; pin #plan.owner or leave it unpinned}}
  plan.param @w : tensor<4x4xf32> linear module "w" placement #plan.block_shard<block = [2, 2], axes = ["dp_shard"]>
  plan.param @n : tensor<4x4xf32> linear module "n"
  plan.unit @u index 0 params [@w, @n] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// A graph with no mesh and no mesh option cannot be planned.
// expected-error @+1 {{no mesh to plan for: give the pass a mesh (mesh=dp_shard=8) or the graph a plan.mesh}}
plan.graph @g {
  plan.param @n : tensor<4x4xf32> linear module "n"
  plan.unit @u index 0 params [@n] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// The mesh product must be the world size.
// WORLD: error: mesh has 8 ranks (dp_shard=4 x ep=2) but world=16; the product of the mesh dims must equal the world size

// Block shards that leave ranks without a block of a parameter: its unit's
// all-gather needs an equal share from every rank.
// EMPTY: error: 'plan.param' op block_shard of 'w1' makes 1 blocks of 8x4 for 2 ranks: ranks 1..1 would hold none of it, and every rank must send an equal share in its unit's all-gather; use smaller blocks or row shards

// An owner pinned outside a smaller mesh given to the pass is refused; in
// the graph's own mesh the pin is kept.
// PINNED: error: 'plan.param' op 'w' is pinned to owner rank 3, outside the mesh: dp_shard has 2 ranks
// KEPT: plan.param @w : {{.*}} placement #plan.owner<rank = 3, axes = ["dp_shard"]> optimizer #plan.muon

// POLICY: unknown policy 'lion'; expected graph, adamw, sgd, muon or mixed_muon_adamw
// STRATEGY: unknown owner strategy 'best'; expected balanced, matrixfsdp or round_robin
// MESHSPEC: {{^}}<unknown>:0: error: option mesh of mfsdp-assign-layouts: mesh option item 'dp_shard' is not NAME=SIZE (for example dp_shard=8)
// NODP: error: 'plan.mesh' op needs a "dp_shard" dim: parameters are sharded over it
// EXTDIM: error: 'plan.param' op is owned by "ep", which is not a dim of mesh @mesh
// GHOST: error: muon-include names unknown parameter 'ghost'
// ZERO: {{^}}<unknown>:0: error: option zero of mfsdp-assign-layouts: expected 1, 2 or 3, got 4

// Negative block extents are an option error, not a plan.
// BLOCK: {{^}}<unknown>:0: error: option block-shard of mfsdp-assign-layouts: expected extents of 1 or more, got -4,4
// A dim of 2^31 ranks is refused before the planner sizes its tables by it.
// HUGE: error: 'plan.mesh' op dim "dp_shard" has 2147483648 ranks; a dim has at most 2^20 (1048576)
// A negative token count is refused (0 means the graph's seq_len).
// TOKENS: {{^}}<unknown>:0: error: option tokens of mfsdp-build-step: expected 1 to 16777216 (0: the graph's seq_len), got -5
// Tokens past 2^24 would overflow the step's byte counts; 10^8 microbatches
// would unroll into billions of ops; a negative world is no rank count.
// TOKENS2: {{^}}<unknown>:0: error: option tokens of mfsdp-build-step: expected 1 to 16777216 (0: the graph's seq_len), got 9223372036854775807
// MICRO: {{^}}<unknown>:0: error: option microbatches of mfsdp-build-step: expected 1 to 1024, got 100000000
// WORLDNEG: {{^}}<unknown>:0: error: option world of mfsdp-assign-layouts: expected the mesh's rank count (0: any), got -1

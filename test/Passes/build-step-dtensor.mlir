// RUN: mfsdp-opt %s --mfsdp-assign-layouts=policy=adamw "--mfsdp-build-step=baseline=fsdp2-dtensor ns-steps=1" | FileCheck %s
// RUN: mfsdp-opt %s --mfsdp-assign-layouts=policy=adamw "--mfsdp-build-step=baseline=fsdp2-dtensor-mm ns-steps=1" | FileCheck %s --check-prefix=MM
// RUN: not mfsdp-opt %s --mfsdp-assign-layouts=policy=adamw --mfsdp-build-step=baseline=dtensor -o /dev/null 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not mfsdp-opt %s --mfsdp-assign-layouts="policy=adamw mesh=dp_replicate=2,dp_shard=2" --mfsdp-build-step=baseline=fsdp2-dtensor -o /dev/null 2>&1 | FileCheck %s --check-prefix=HSDP

// baseline=fsdp2-dtensor: torch.optim.Muon on FSDP2's Shard(0) DTensors.
// Every Newton-Schulz matmul is split by DTensor's sharding propagation,
// which picks per op the strategy its own cost estimate finds cheapest and
// redistributes the operands synchronously before it (docs/benchmarks.md).
// Two wide bf16 matrices over 4 ranks, one Newton-Schulz step.
plan.graph @dt seq_len 8 {
  plan.mesh @mesh ["dp_shard" = 4]
  plan.policy mixed_muon_adamw zero 3
  plan.param @small : tensor<4x8xbf16> linear module "small"
  plan.param @big : tensor<1024x2048xbf16> linear module "big"
  plan.unit @u0 index 0 params [@small] cost <fwd_flops = 64, bwd_flops = 128, act_bytes = 16, recompute = false>
  plan.unit @u1 index 1 params [@big] cost <fwd_flops = 64, bwd_flops = 128, act_bytes = 16, recompute = false>
}

// CHECK-LABEL: sched.step @dt.step mesh @dt::@mesh world 4

// A tiny matrix: DTensor's estimate is all latency, so each matmul keeps
// the row shards and gathers one operand: X^T, then A, then X. The norm is
// one all-reduce of a bf16 scalar. FLOPs are a quarter of each matmul's
// (X @ X^T: 2 x 4 x 8 x 4 / 4 = 64).
// CHECK: sched.optimizer muon "muon momentum small"
// CHECK-NEXT: sched.alloc
// CHECK-NEXT: sched.all_reduce "dtensor all_reduce norm Partial(sum) -> Replicate() small" {{.*}} bytes 2 {{.*}} phase optimizer
// CHECK-NEXT: sched.optimizer muon "muon ns small normalise"
// CHECK-NEXT: sched.dealloc
// CHECK-NEXT: sched.alloc
// CHECK-NEXT: sched.all_gather "dtensor all_gather X^T Shard(1) -> Replicate() small it0" {{.*}} ranks 4 bytes 64
// CHECK-NEXT: sched.alloc
// CHECK-NEXT: sched.optimizer muon "muon ns small it0 X @ X^T" {{.*}} flops 6.400000e+01
// CHECK-NEXT: sched.dealloc
// CHECK-NEXT: sched.alloc
// CHECK-NEXT: sched.all_gather "dtensor all_gather A Shard(0) -> Replicate() small it0" {{.*}} bytes 32
// CHECK-NEXT: sched.alloc
// CHECK-NEXT: sched.optimizer muon "muon ns small it0 addmm(A, A, A)"
// CHECK-NEXT: sched.dealloc
// CHECK-NEXT: sched.alloc
// CHECK-NEXT: sched.all_gather "dtensor all_gather X Shard(0) -> Replicate() small it0" {{.*}} bytes 64
// CHECK-NEXT: sched.alloc
// CHECK-NEXT: sched.optimizer muon "muon ns small it0 addmm(X, B, X)"
// CHECK-NOT: sched.all_
// CHECK: sched.optimizer muon "muon update small"

// A 4 MiB matrix: an all-to-all of the 1 MiB shard is cheaper by DTensor's
// estimate than gathering 4 MiB, so X @ X^T splits the contraction and
// leaves A as a full-size partial sum on every rank; addmm(A, A, A)
// reduce-scatters A twice and stays partial; addmm(X, B, X) reduce-scatters
// B and gathers X, back to Shard(0). Nothing runs alongside: every
// redistribution sits between the op producing its operand and the op
// reading it.
// CHECK: sched.optimizer muon "muon momentum big"
// CHECK: "dtensor all_reduce norm Partial(sum) -> Replicate() big"
// CHECK: sched.all_gather "dtensor all_to_all X Shard(0) -> Shard(1) big it0"
// CHECK: sched.all_gather "dtensor all_to_all X^T Shard(1) -> Shard(0) big it0"
// CHECK: sched.optimizer muon "muon ns big it0 X @ X^T"
// CHECK: sched.reduce_scatter "dtensor reduce_scatter A Partial(sum) -> Shard(1) big it0"
// CHECK: sched.reduce_scatter "dtensor reduce_scatter A Partial(sum) -> Shard(0) big it0"
// CHECK: sched.optimizer muon "muon ns big it0 addmm(A, A, A)"
// CHECK: sched.reduce_scatter "dtensor reduce_scatter B Partial(sum) -> Shard(0) big it0"
// CHECK: sched.all_gather "dtensor all_gather X Shard(0) -> Replicate() big it0"
// CHECK: sched.optimizer muon "muon ns big it0 addmm(X, B, X)"
// CHECK-NOT: sched.all_
// CHECK-NOT: sched.reduce_
// CHECK: sched.optimizer muon "muon update big"

// baseline=fsdp2-dtensor-mm: the use_addmm=False form of newer torch,
// B = b * A + c * A @ A and X = a * X + B @ X, each op placed by DTensor
// (mm strategies by cost, pointwise ops following the most-sharded operand).
// The tiny matrix keeps row shards throughout: the same three all-gathers
// as the addmm form, and the pointwise ops move nothing.
// MM-LABEL: sched.step @dt.step mesh @dt::@mesh world 4
// MM: sched.optimizer muon "muon momentum small"
// MM: "dtensor all_reduce norm Partial(sum) -> Replicate() small"
// MM: sched.all_gather "dtensor all_gather X^T Shard(1) -> Replicate() small it0"
// MM: sched.optimizer muon "muon ns small it0 X @ X^T"
// MM-NOT: sched.all_
// MM: sched.optimizer muon "muon ns small it0 b * A"
// MM-NOT: sched.all_
// MM: sched.optimizer muon "muon ns small it0 c * A"
// MM: sched.all_gather "dtensor all_gather A Shard(0) -> Replicate() small it0" {{.*}} bytes 32
// MM: sched.optimizer muon "muon ns small it0 cA @ A"
// MM-NOT: sched.all_
// MM: sched.optimizer muon "muon ns small it0 bA + cAA"
// MM-NOT: sched.all_
// MM: sched.optimizer muon "muon ns small it0 a * X"
// MM: sched.all_gather "dtensor all_gather X Shard(0) -> Replicate() small it0" {{.*}} bytes 64
// MM: sched.optimizer muon "muon ns small it0 B @ X"
// MM-NOT: sched.all_
// MM: sched.optimizer muon "muon ns small it0 aX + BX"
// MM-NOT: sched.all_
// MM: sched.optimizer muon "muon update small"

// The 4 MiB matrix: X @ X^T splits the contraction as in the addmm form
// (two all-to-alls), the scalar multiples keep A Partial with no
// collective, cA @ A reduce-scatters both operands, Partial + Partial needs
// nothing. B @ X has no `self` to ban a Partial output, so it too splits
// the contraction (reduce-scatter B only) and leaves BX a full-size partial
// sum; aX + BX follows aX's Shard(0) and reduce-scatters BX (4 MiB) there,
// where the addmm form all-gathered X (MLIR prints the 4 MiB,
// 4194304.0, as the hex double 0x4150000000000000).
// MM: sched.optimizer muon "muon momentum big"
// MM: "dtensor all_reduce norm Partial(sum) -> Replicate() big"
// MM: sched.all_gather "dtensor all_to_all X Shard(0) -> Shard(1) big it0"
// MM: sched.all_gather "dtensor all_to_all X^T Shard(1) -> Shard(0) big it0"
// MM: sched.optimizer muon "muon ns big it0 X @ X^T"
// MM-NOT: sched.all_
// MM-NOT: sched.reduce_
// MM: sched.optimizer muon "muon ns big it0 b * A"
// MM-NOT: sched.all_
// MM-NOT: sched.reduce_
// MM: sched.optimizer muon "muon ns big it0 c * A"
// MM: sched.reduce_scatter "dtensor reduce_scatter cA Partial(sum) -> Shard(1) big it0"
// MM: sched.reduce_scatter "dtensor reduce_scatter A Partial(sum) -> Shard(0) big it0"
// MM: sched.optimizer muon "muon ns big it0 cA @ A"
// MM-NOT: sched.all_
// MM-NOT: sched.reduce_
// MM: sched.optimizer muon "muon ns big it0 bA + cAA"
// MM-NOT: sched.all_
// MM-NOT: sched.reduce_
// MM: sched.optimizer muon "muon ns big it0 a * X"
// MM: sched.reduce_scatter "dtensor reduce_scatter B Partial(sum) -> Shard(1) big it0"
// MM-NOT: sched.all_
// MM: sched.optimizer muon "muon ns big it0 B @ X"
// MM: sched.reduce_scatter "dtensor reduce_scatter BX Partial(sum) -> Shard(0) big it0" {{.*}} bytes 4194304
// MM: sched.optimizer muon "muon ns big it0 aX + BX"
// MM-NOT: sched.all_
// MM-NOT: sched.reduce_
// MM: sched.optimizer muon "muon update big"

// UNKNOWN: unknown baseline 'dtensor'; expected none, fsdp2, fsdp2-dtensor, fsdp2-dtensor-mm or fsdp2-rows
// The derivation is for a 1-D mesh; HSDP's 2-D DTensor is refused.
// HSDP: error: baseline=fsdp2-dtensor models DTensor on a 1-D dp_shard mesh; dp_replicate > 1 is not supported

// RUN: mfsdp-opt %S/Inputs/roles.mlir --mfsdp-assign-layouts="policy=mixed_muon_adamw mesh=dp_shard=8,ep=2 world=16" | FileCheck %s --check-prefix=DP
// RUN: mfsdp-opt %S/Inputs/roles.mlir --mfsdp-assign-layouts="policy=mixed_muon_adamw mesh=dp_replicate=2,dp_shard=2,ep=2" --mfsdp-plan-report -o /dev/null | FileCheck %s --check-prefix=HSDP
// RUN: mfsdp-opt %S/Inputs/roles.mlir --mfsdp-assign-layouts="policy=mixed_muon_adamw mesh=dp_replicate=2,dp_shard=2,ep=2 ns-split=on" | FileCheck %s --check-prefix=SPLIT
// RUN: mfsdp-opt %S/Inputs/roles.mlir --mfsdp-assign-layouts="policy=mixed_muon_adamw mesh=dp_replicate=2,dp_shard=2,ep=2 ns-split=on" --mfsdp-plan-report -o /dev/null | FileCheck %s --check-prefix=SPLITREPORT
// RUN: mfsdp-opt %S/Inputs/roles.mlir --mfsdp-assign-layouts="policy=mixed_muon_adamw mesh=dp_replicate=2,dp_shard=2,ep=2 ns-split=off" --mfsdp-plan-report -o /dev/null | FileCheck %s --check-prefix=NOSPLIT
// RUN: mfsdp-opt %s --mfsdp-assign-layouts=policy=mixed_muon_adamw | FileCheck %s --check-prefix=TP

// The mesh option replaces the graph's mesh; owners range over dp_shard.
// DP: plan.mesh @mesh ["dp_shard" = 8, "ep" = 2]
// DP: @l0.q : {{.*}} placement #plan.owner<rank = {{[0-7]}}, axes = ["dp_shard"]>

// With HSDP parameters shard over dp_shard and replicate over dp_replicate;
// gradients are all-reduced between replicas. Even for tiny matrices the
// cost model splits Newton-Schulz between the replicas: each matrix's is
// 39 kernels of several microseconds, far longer than the one broadcast
// of the updates.
// HSDP: plan report: policy mixed_muon_adamw, ZeRO-3, dp_shard 2 x dp_replicate 2
// HSDP: bytes sent per rank per step (rank 0):{{.*}} hsdp_all_reduce
// HSDP: HSDP Newton-Schulz: plan splits (as the cost model would): split: splitting saves {{.*}} and costs 0.015 ms sending

// Forcing the split records it on the policy and in the report; forcing
// it off against the cost model is reported as such.
// SPLIT: plan.policy mixed_muon_adamw zero 3 {{.*}} ns_split
// SPLITREPORT: ns_split_all_gather
// SPLITREPORT: HSDP Newton-Schulz: plan splits (as the cost model would)
// NOSPLIT-NOT: ns_split_all_gather
// NOSPLIT: HSDP Newton-Schulz: plan does not split (the cost model would split): split: splitting saves

// A tensor-parallel dim: TP-owned parameters stay external and are listed;
// the rest is sharded over dp_shard only.
// TP-LABEL: plan.graph @tp
// TP: @attn.q : tensor<16x16xbf16> linear module "attn.q" placement #plan.external<axes = ["tp"]>{{$}}
// TP: @mlp.up : {{.*}} placement #plan.owner<rank = {{[01]}}, axes = ["dp_shard"]> optimizer #plan.muon
plan.graph @tp {
  plan.mesh @mesh ["dp_shard" = 2, "tp" = 2]
  plan.param @attn.q : tensor<16x16xbf16> linear module "attn.q" placement #plan.external<axes = ["tp"]>
  plan.param @mlp.up : tensor<32x16xbf16> linear module "mlp.up"
  plan.param @norm : tensor<16xbf16> norm module "norm"
  plan.unit @block index 0 params [@attn.q, @mlp.up, @norm] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

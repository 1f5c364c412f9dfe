// RUN: mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts=zero=3 --mfsdp-plan-report=json -o /dev/null | FileCheck %s --check-prefix=ZERO3
// RUN: mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts=zero=2 --mfsdp-plan-report=json -o /dev/null | FileCheck %s --check-prefix=ZERO2
// RUN: mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts=zero=1 --mfsdp-plan-report=json -o /dev/null | FileCheck %s --check-prefix=ZERO1
// RUN: mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts --mfsdp-plan-report=text -o /dev/null | FileCheck %s --check-prefix=TEXT
// RUN: mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts --mfsdp-plan-report="json output=%t.json" -o /dev/null
// RUN: FileCheck %s --check-prefix=ZERO3 < %t.json
// A module of several graphs gets an array of reports, each naming its
// graph (two objects one after the other were no JSON document).
// RUN: mfsdp-opt %S/Inputs/two-graphs.mlir --mfsdp-assign-layouts=mesh=dp_shard=2 "--mfsdp-plan-report=json output=%t.two.json" -o /dev/null
// RUN: python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if [r['graph'] for r in d] == ['first', 'second'] else 1)" %t.two.json
// RUN: FileCheck %s --check-prefix=TWO < %t.two.json
// TWO: [
// TWO-NEXT: {
// TWO-NEXT: "graph": "first",
// TWO: "graph": "second",
// TWO: ]

// Two 8x4 f32 matrices owned by ranks 0 and 1 (Muon, 4 B of momentum per
// element) and a 4-element f32 norm row-sharded with AdamW (8 B of state per
// element), on dp_shard = 2. Every figure below is worked out by hand:
//   ZeRO-3, rank 0: params 32*4 (w1) + 2*4 (norm shard) = 136 B; grads the
//   same; no fp32 master (the parameters are f32); state 32*4 + 2*8 = 144 B;
//   memory 416 B. Newton-Schulz: 5 steps of 3*4^2*8 + 4^3 = 448 FLOPs
//   (X X^T and A A as symmetric products, as the runtime runs them).
//   Per step it sends: all-gather of the norm twice (forward, backward),
//   (2-1)/2 * 16 B each = 16 B; its reduce-scatter 8 B; the owners'
//   all-gather-v twice, everything but the successor's 128 B = 256 B; the
//   reduce-scatter-v everything but its own = 128 B.
// ZERO3: "optimizers": {"adamw": 1, "muon": 2},
// ZERO3-NEXT: "placements"
// ZERO3-NEXT: "newton_schulz": {"steps": 5, "precision": "fp32"},
// ZERO3: "memory_bytes": {"max": 416, "mean": 416},
// ZERO3: {"rank": 0, "owned": ["w1"], "ns_flops": 2240, "optimizer_seconds": {{[0-9.e-]+}}, "param_bytes": 136, "grad_bytes": 136, "master_bytes": 0, "optimizer_state_bytes": 144, "memory_bytes": 416, "comm_bytes": {"all_gather": 16, "all_gather_v": 256, "reduce_scatter": 8, "reduce_scatter_v": 128}},
// ZERO3: {"rank": 1, "owned": ["w2"],

//   ZeRO-2: parameters whole on every rank (8*4*4*2 + 16 = 272 B), gradients
//   sharded (136 B); one all-gather per step, after the optimizer.
// ZERO2: {"rank": 0, "owned": ["w1"], "ns_flops": 2240, "optimizer_seconds": {{[0-9.e-]+}}, "param_bytes": 272, "grad_bytes": 136, "master_bytes": 0, "optimizer_state_bytes": 144, "memory_bytes": 552, "comm_bytes": {"all_gather": 8, "all_gather_v": 128, "reduce_scatter": 8, "reduce_scatter_v": 128}},

//   ZeRO-1: gradients whole too (272 B), still reduce-scattered (each rank
//   steps its own part only, as Megatron's distributed optimizer): the
//   same bytes on the wire as ZeRO-2.
// ZERO1: {"rank": 0, "owned": ["w1"], "ns_flops": 2240, "optimizer_seconds": {{[0-9.e-]+}}, "param_bytes": 272, "grad_bytes": 272, "master_bytes": 0, "optimizer_state_bytes": 144, "memory_bytes": 688, "comm_bytes": {"all_gather": 8, "all_gather_v": 128, "reduce_scatter": 8, "reduce_scatter_v": 128}},

// TEXT-LABEL: graph @hand
// TEXT: plan report: policy mixed_muon_adamw, ZeRO-3, dp_shard 2 x dp_replicate 1; times predicted for a100
// TEXT: optimizers: adamw 1 muon 2; placements: owner 2 row_shard 1
// TEXT-NEXT: Newton-Schulz: 5 steps in fp32 (#plan.muon ns_precision)
// TEXT: units: 2 in 1 gather groups; row layout: 0 flat, 1 per_param
// TEXT: rank  owned
// TEXT-NEXT: 0 1 {{.*}} 136 B 136 B 0 B 144 B 416 B
// TEXT-NEXT: 1 1 {{.*}} 136 B 136 B 0 B 144 B 416 B
// TEXT: imbalance (max/mean): optimizer work 1.000, memory 1.000, owner fan-out per gather group max 1.000 mean 1.000
// TEXT: max/bound 1.000
// TEXT: external: 0 tensors

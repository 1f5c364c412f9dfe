// RUN: mfsdp-opt %s --mfsdp-print-summary -o /dev/null | FileCheck %s
// RUN: mfsdp-opt %s --mfsdp-print-summary="output=%t" | FileCheck %s --check-prefix=IR
// RUN: FileCheck %s < %t

// The summary counts tensors and bytes per dtype, lists units in forward
// order, and names tied and external parameters. Tied parameters own no
// bytes. The IR passes through unchanged.

// CHECK-LABEL: graph @s (seq_len 128)
// CHECK: mesh: dp_shard=2 x ep=2 (4 ranks)
// CHECK: policy: mixed_muon_adamw, ZeRO-3
// CHECK: parameters: 3 tensors, 80 elements, 224 B
// CHECK: bytes per dtype:
// CHECK-NEXT: bf16{{ +}}2 tensors{{ +}}96 bytes
// CHECK-NEXT: f32{{ +}}1 tensors{{ +}}128 bytes
// CHECK: units: 2 (forward order)
// CHECK-NEXT: 0 embed{{ +}}1 params{{ +}}32 elements
// CHECK-NEXT: 1 block{{ +}}2 params{{ +}}48 elements fwd 96 FLOP/token recompute
// CHECK: tied: 1 (head -> e)
// CHECK: external: 1 tensors, 16 elements
// CHECK-NEXT: owned by ep: 1 tensors: x

// IR: plan.graph @s
plan.graph @s seq_len 128 {
  plan.mesh @mesh ["dp_shard" = 2, "ep" = 2]
  plan.policy mixed_muon_adamw zero 3
  plan.param @e : tensor<8x4xbf16> embedding module "e"
  plan.param @head : tensor<8x4xbf16> output module "head" tied_to @e
  plan.param @w : tensor<8x4xf32> linear module "w"
  plan.param @x : tensor<4x4xbf16> expert module "x" placement #plan.external<axes = ["ep"]>
  plan.unit @embed index 0 params [@e] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
  plan.unit @block index 1 params [@w, @x] cost <fwd_flops = 96, bwd_flops = 192, act_bytes = 16, recompute = true>
}

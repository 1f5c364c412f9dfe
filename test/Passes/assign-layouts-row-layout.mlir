// RUN: mfsdp-opt %s --mfsdp-assign-layouts=row-layout=auto | FileCheck %s --check-prefix=AUTO
// RUN: mfsdp-opt %s --mfsdp-assign-layouts=row-layout=auto --mfsdp-plan-report=json -o /dev/null | FileCheck %s --check-prefix=WHY
// RUN: mfsdp-opt %s --mfsdp-assign-layouts=row-layout=flat | FileCheck %s --check-prefix=FLAT
// RUN: mfsdp-opt %s --mfsdp-assign-layouts | FileCheck %s --check-prefix=DEFAULT
// RUN: mfsdp-opt %s --mfsdp-assign-layouts --mfsdp-plan-report=json -o /dev/null | FileCheck %s --check-prefix=DEFWHY
// RUN: mfsdp-opt %s --mfsdp-assign-layouts="block-shard=2,125" | FileCheck %s --check-prefix=BLOCK
// RUN: not mfsdp-opt %s --mfsdp-assign-layouts=row-layout=diagonal -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD

// With row-layout=auto, row layouts are chosen per unit by cost. @even holds 4 rows of 3000 B
// and 4 of 1000 B on 4 ranks: torch.chunk splits each evenly (no padding)
// but must copy shards in and out of a flat buffer; cut at row
// boundaries, the best contiguous shards are 3000, 3000, 6000 and 4000 B,
// so every shard pads to 6000 B: 8000 B of padding per collective, which
// costs more link time than the copies cost memory time. @ragged has 6
// rows of 1000 B and 3 of 400 B: per parameter that pads 2 + 1 rows
// (2400 B); flat shards of 2000, 2000, 2000 and 1200 B pad 800 B and copy
// nothing, so flat wins.
// AUTO: plan.unit @even {{.*}} row_layout per_param group 0
// AUTO: plan.unit @ragged {{.*}} row_layout flat group 1
// WHY: {"name": "even", "group": 0, "row_layout": "per_param", "padding_flat": 8000, "padding_per_param": 0, "copy_bytes_per_param": 120000, "reason": "per_param (what the step runtime runs; the cheaper): flat pads 7.81 KiB per collective and copies nothing; per_param pads 0 B and copies 117.19 KiB per step
// WHY: {"name": "ragged", "group": 1, "row_layout": "flat", "padding_flat": 800, "padding_per_param": 2400, {{.*}}"reason": "flat (planned only: the step runtime runs per_param; the cheaper)

// Forcing a layout overrides the cost model.
// FLAT: plan.unit @even {{.*}} row_layout flat group 0

// The default is per_param, what the step runtime runs (it stages row
// shards per parameter and copies them in and out of its buckets), even
// where flat would cost less; the report says so.
// DEFAULT: plan.unit @even {{.*}} row_layout per_param group 0
// DEFAULT: plan.unit @ragged {{.*}} row_layout per_param group 1
// DEFWHY: {"name": "ragged", "group": 1, "row_layout": "per_param", {{.*}}"reason": "per_param (what the step runtime runs; flat would cost less): flat pads 800 B

// AdamW matrices can be block-sharded: 2x125 blocks tile @a (12 blocks
// for 4 ranks), @b (4 blocks) and @c (6 blocks); @d's 3 rows do not tile
// in blocks of 2, so it stays row-sharded.
// BLOCK: @a : {{.*}} placement #plan.block_shard<block = [2, 125], axes = ["dp_shard"]>
// BLOCK: @b : {{.*}} placement #plan.block_shard<block = [2, 125], axes = ["dp_shard"]>
// BLOCK: @c : {{.*}} placement #plan.block_shard<block = [2, 125], axes = ["dp_shard"]>
// BLOCK: @d : {{.*}} placement #plan.row_shard<dim = 0, axes = ["dp_shard"]>

// BAD: unknown row layout 'diagonal'; expected auto, per_param or flat
plan.graph @rows {
  plan.mesh @mesh ["dp_shard" = 4]
  plan.policy adamw zero 3
  plan.param @a : tensor<4x750xf32> linear module "a"
  plan.param @b : tensor<4x250xf32> linear module "b"
  plan.param @c : tensor<6x250xf32> linear module "c"
  plan.param @d : tensor<3x100xf32> linear module "d"
  plan.unit @even index 0 params [@a, @b] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
  plan.unit @ragged index 1 params [@c, @d] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

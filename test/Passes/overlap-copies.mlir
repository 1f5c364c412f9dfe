// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-assign-layouts="policy=adamw group-units=1 row-layout=per_param" --mfsdp-build-step --mfsdp-bucket-collectives --mfsdp-schedule-overlap | FileCheck %s
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-assign-layouts="group-units=1 row-layout=per_param" --mfsdp-build-step | FileCheck %s --check-prefix=LONE
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-assign-layouts="group-units=1 row-layout=per_param" --mfsdp-build-step=baseline=fsdp2-rows | FileCheck %s --check-prefix=FSDP2

// A per_param unit copies its shards in and out of the collective buffers
// (a `copy` compute op before each reduction and after each gather). The
// wait for a reduction that frees the unreduced gradients goes after the
// next unit's backward, not after the next copy: a copy is too short to
// hide a reduction, and waiting there would expose it. The copy into the
// reduction reads the unreduced gradients.
// CHECK-LABEL: sched.step @blocks.step

// The copy out of a gathered buffer reads it, so it waits for the gather,
// where the runtime unpacks; the next group's gather (prefetch) is issued
// before that wait.
// CHECK: %[[G0:.*]] = sched.alloc "gathered g0 (forward)"
// CHECK: %[[A0:.*]] = sched.all_gather "all_gather b0 (forward)" {{.*}} -> %[[G0]]
// CHECK: sched.alloc "gathered g1 (forward)"
// CHECK: sched.wait %[[A0]]
// CHECK: sched.compute copy "all_gather copy g0" reads(%[[G0]])
// CHECK: sched.compute forward "forward b0"
// CHECK: %[[GR:.*]] = sched.alloc "unreduced grads g3 mb0"
// CHECK: sched.compute copy "reduce_scatter copy g3" reads(%[[GR]])
// CHECK: %[[RS:.*]] = sched.reduce_scatter "reduce_scatter b3"
// CHECK: sched.compute copy "all_gather copy g2"
// CHECK-NOT: sched.wait %[[RS]]
// CHECK: sched.compute backward "backward b2"
// CHECK-NEXT: sched.wait %[[RS]]

// Under mixed_muon_adamw each unit's matrix is on an owner and its norm is
// the unit's one row-shard parameter: the step runtime gathers it into the
// parameter and reduces it from its gradient in place, so the step copies
// nothing.
// LONE-LABEL: sched.step @blocks.step
// LONE-NOT: sched.compute copy
// LONE: sched.reduce_scatter "reduce_scatter b0"
// LONE-NOT: sched.compute copy

// FSDP2 copies a unit's row shards whatever their number: its baseline
// (the plan's optimizer, FSDP2's copies) copies the lone norm, 1024 bf16
// elements over 2 ranks: 2 x (2,048 + 1,024) = 6,144 bytes.
// FSDP2-LABEL: sched.step @blocks.step
// FSDP2: sched.compute copy "all_gather copy g0" {{.*}} bytes 6144
// FSDP2: sched.compute copy "reduce_scatter copy g3" {{.*}} bytes 6144

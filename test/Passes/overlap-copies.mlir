// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-assign-layouts="group-units=1 row-layout=per_param" --mfsdp-build-step --mfsdp-bucket-collectives --mfsdp-schedule-overlap | FileCheck %s

// A per_param unit copies its shards in and out of the collective buffers
// (a `copy` compute op before each reduction and after each gather). The
// wait for a reduction that frees the unreduced gradients goes after the
// next unit's backward, not after the next copy: a copy is too short to
// hide a reduction, and waiting there would expose it.
// CHECK-LABEL: sched.step @blocks.step
// CHECK: %[[RS:.*]] = sched.reduce_scatter "reduce_scatter b3"
// CHECK: sched.compute copy "all_gather copy g2"
// CHECK-NOT: sched.wait %[[RS]]
// CHECK: sched.compute backward "backward b2"
// CHECK-NEXT: sched.wait %[[RS]]

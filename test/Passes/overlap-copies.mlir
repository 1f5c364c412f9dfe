// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-assign-layouts="group-units=1 row-layout=per_param" --mfsdp-build-step --mfsdp-bucket-collectives --mfsdp-schedule-overlap | FileCheck %s

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

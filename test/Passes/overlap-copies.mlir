// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-assign-layouts="policy=adamw group-units=1 row-layout=per_param" --mfsdp-build-step --mfsdp-bucket-collectives --mfsdp-schedule-overlap | FileCheck %s
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-assign-layouts="group-units=1 row-layout=per_param" --mfsdp-build-step | FileCheck %s --check-prefix=LONE
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-assign-layouts="group-units=1 row-layout=per_param" --mfsdp-build-step=baseline=fsdp2-rows | FileCheck %s --check-prefix=FSDP2
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-pipeline="mesh=dp_shard=2 policy=adamw zero=2" -o %t.zero2.mlir
// RUN: FileCheck %s --check-prefix=ZERO2 < %t.zero2.mlir
// RUN: mfsdp-translate --emit-step-c %t.zero2.mlir -o /dev/null

// A per_param unit copies its shards in and out of the collective buffers
// (a `copy` compute op before each reduction and after each gather). The
// wait for a reduction that frees what it reads (the reduce staging) goes
// after the
// next unit's backward, not after the next copy: a copy is too short to
// hide a reduction, and waiting there would expose it. The copy into the
// reduction reads the unreduced gradients. The staging buffers the copies
// read or fill are the step's own allocs, so its memory plan counts them.
// CHECK-LABEL: sched.step @blocks.step

// The rows are gathered into a staging buffer (the runtime's row-shard
// bucket staging), which the copy reads, so it waits for the gather, where
// the runtime unpacks, and writes the gathered buffer; the staging is
// freed after it. The next group's gather (prefetch) moves with both its
// allocs and is issued before that wait.
// CHECK: %[[S0:.*]] = sched.alloc "gather staging g0 (forward)"
// CHECK-NEXT: %[[G0:.*]] = sched.alloc "gathered g0 (forward)"
// CHECK-NEXT: %[[A0:.*]] = sched.all_gather "all_gather b0 (forward)" {{.*}} -> %[[S0]]
// CHECK-NEXT: sched.alloc "gather staging g1 (forward)"
// CHECK-NEXT: sched.alloc "gathered g1 (forward)"
// CHECK: sched.wait %[[A0]]
// CHECK-NEXT: sched.compute copy "all_gather copy g0" reads(%[[S0]]) writes(%[[G0]])
// CHECK-NEXT: sched.dealloc %[[S0]]
// CHECK: sched.compute forward "forward b0" unit @b0 reads(%[[G0]])
// The copy into the reduction reads the unreduced gradients and writes
// the reduce staging, which the reduce-scatter reads.
// CHECK: %[[GR:.*]] = sched.alloc "unreduced grads g3 mb0"
// CHECK: %[[RST:.*]] = sched.alloc "reduce staging g3"
// CHECK-NEXT: sched.compute copy "reduce_scatter copy g3" reads(%[[GR]]) writes(%[[RST]])
// CHECK-NEXT: %[[RS:.*]] = sched.reduce_scatter "reduce_scatter b3" %[[RST]] ->
// CHECK: sched.compute copy "all_gather copy g2"
// CHECK-NOT: sched.wait %[[RS]]
// CHECK: sched.compute backward "backward b2"
// CHECK-NEXT: sched.wait %[[RS]]
// CHECK-NEXT: sched.dealloc %[[RST]]

// Under mixed_muon_adamw each unit's matrix is on an owner and its norm is
// the unit's one row-shard parameter: the step runtime gathers it into the
// parameter and reduces it from its gradient in place, so the step copies
// nothing.
// LONE-LABEL: sched.step @blocks.step
// LONE-NOT: {{sched.compute copy|staging}}
// LONE: sched.reduce_scatter "reduce_scatter b0"
// LONE-NOT: {{sched.compute copy|staging}}

// FSDP2 copies a unit's row shards whatever their number: its baseline
// (the plan's optimizer, FSDP2's copies) copies the lone norm, 1024 bf16
// elements over 2 ranks: 2 x (2,048 + 1,024) = 6,144 bytes.
// FSDP2-LABEL: sched.step @blocks.step
// FSDP2: sched.compute copy "all_gather copy g0" {{.*}} bytes 6144
// FSDP2: sched.compute copy "reduce_scatter copy g3" {{.*}} bytes 6144

// Under ZeRO-2 the optimizer phase gathers the updated rows of a copied
// unit into staging and copies them out into the parameters (the
// runtime's GATHER stages the bucket and unpacks it inside the op; the
// copy lowers to nothing), then frees the staging.
// ZERO2-LABEL: sched.step @blocks.step
// ZERO2: %[[ST:.*]] = sched.alloc "gather staging g{{[0-9]+}} (updated)"
// ZERO2-NEXT: %[[AG:.*]] = sched.all_gather "all_gather updated rows g{{[0-9]+}}" %[[ROWS:[0-9]+]] -> %[[ST]] {{.*}} phase optimizer
// ZERO2: sched.wait %[[AG]]
// ZERO2-NEXT: sched.compute copy "all_gather copy g{{[0-9]+}}" reads(%[[ST]]) writes(%[[ROWS]]) {{.*}} phase optimizer
// ZERO2: sched.dealloc %[[ST]]

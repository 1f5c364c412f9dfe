// RUN: mfsdp-opt %S/Inputs/layers4.mlir --mfsdp-assign-layouts --mfsdp-build-step --mfsdp-bucket-collectives | FileCheck %s --check-prefix=BUCKET
// RUN: mfsdp-opt %S/Inputs/layers4.mlir --mfsdp-assign-layouts --mfsdp-build-step --mfsdp-bucket-collectives=bucket-mb=1 | FileCheck %s --check-prefix=LIMIT
// RUN: mfsdp-opt %S/Inputs/layers4.mlir --mfsdp-assign-layouts --mfsdp-build-step --mfsdp-bucket-collectives --mfsdp-schedule-overlap | FileCheck %s --check-prefix=OVERLAP
// RUN: mfsdp-opt %S/Inputs/layers4.mlir --mfsdp-assign-layouts --mfsdp-build-step --mfsdp-bucket-collectives --mfsdp-schedule-overlap=gather-comm=separate | FileCheck %s --check-prefix=COMM
// RUN: mfsdp-opt %S/Inputs/layers4.mlir --mfsdp-assign-layouts --mfsdp-build-step --mfsdp-bucket-collectives --mfsdp-schedule-overlap --mfsdp-plan-memory --mfsdp-verify-schedule | FileCheck %s --check-prefix=MEMORY

// A group of two units gathers its rows in one bucket and its owners'
// matrices in another, the owners' chunks added rank by rank. The step
// records the limit it was bucketed with (0: none), which the step
// library's runtime buckets keep to.
// BUCKET: sched.step @layers.step mesh @layers::@mesh world 4 tokens 16 microbatches 1 bucket_bytes 0 {
// BUCKET: sched.all_gather "bucket all_gather (2 tensors)" {{.*}} bytes 256 comm 0 phase forward group 0 params [@l0.n, @l1.n]
// BUCKET: sched.all_gather_v "bucket all_gather_v (4 tensors)" {{.*}} bytes 2048 chunks [512, 512, 512, 512] comm 0 phase forward group 0 params [@l0.a, @l0.b, @l1.a, @l1.b]

// With a 1 MiB limit the same collectives still fit one bucket each; the
// limit splits only what exceeds it.
// LIMIT: sched.step @layers.step {{.*}} bucket_bytes 1048576 {
// LIMIT: sched.all_gather_v "bucket all_gather_v (4 tensors)"

// Overlap: every collective is started async and waited just before use;
// group 1's gather is issued before group 0's forward compute (prefetch),
// and in backward group 0's gather is issued before group 1's reduction.
// OVERLAP: %[[T0:.*]] = sched.all_gather_v {{.*}} phase forward group 0 {{.*}} async
// OVERLAP: %[[T2:.*]] = sched.all_gather_v {{.*}} phase forward group 1 {{.*}} async
// OVERLAP: sched.wait %[[T0]]
// OVERLAP: sched.compute forward "forward l0"
// OVERLAP: sched.wait %[[T2]]
// OVERLAP: sched.compute forward "forward l2"
// OVERLAP: sched.all_gather_v {{.*}} phase backward group 0 {{.*}} async
// OVERLAP: sched.compute backward "backward l3"
// OVERLAP: sched.reduce_scatter_v {{.*}} phase backward group 1 {{.*}} async

// Gathers may get their own communicator.
// COMM: sched.all_gather_v {{.*}} comm 2 phase forward
// COMM: sched.reduce_scatter_v {{.*}} comm 0 phase backward

// Memory: every buffer gets an arena offset, and the step records the arena
// and the peak per rank; the verifier accepts the schedule.
// MEMORY: sched.step @layers.step mesh @layers::@mesh world 4 tokens 16 microbatches 1 bucket_bytes 0 arena_bytes [{{.*}}] peak_bytes [{{.*}}]
// MEMORY: sched.alloc "gathered g0 (forward)" bytes {{.*}} offset {{[0-9]+}}

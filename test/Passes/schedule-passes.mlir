// RUN: mfsdp-opt %S/Inputs/layers4.mlir --mfsdp-assign-layouts --mfsdp-build-step --mfsdp-bucket-collectives | FileCheck %s --check-prefix=BUCKET
// RUN: mfsdp-opt %S/Inputs/layers4.mlir --mfsdp-assign-layouts --mfsdp-build-step --mfsdp-bucket-collectives=bucket-mb=1 | FileCheck %s --check-prefix=LIMIT
// RUN: mfsdp-opt %S/Inputs/layers4.mlir --mfsdp-assign-layouts --mfsdp-build-step --mfsdp-bucket-collectives --mfsdp-schedule-overlap | FileCheck %s --check-prefix=OVERLAP
// RUN: mfsdp-opt %S/Inputs/layers4.mlir --mfsdp-assign-layouts --mfsdp-build-step --mfsdp-bucket-collectives --mfsdp-schedule-overlap=gather-comm=separate | FileCheck %s --check-prefix=COMM
// RUN: mfsdp-opt %S/Inputs/layers4.mlir --mfsdp-assign-layouts --mfsdp-build-step --mfsdp-bucket-collectives --mfsdp-schedule-overlap --mfsdp-plan-memory --mfsdp-verify-schedule | FileCheck %s --check-prefix=MEMORY
// RUN: mfsdp-opt %S/Inputs/two-matrices.mlir "--mfsdp-pipeline=mesh=dp_replicate=2,dp_shard=2 policy=adamw baseline=fsdp2 row-layout=per_param" | FileCheck %s --check-prefix=HSDPBASE
// RUN: mfsdp-opt %S/Inputs/two-matrices.mlir "--mfsdp-pipeline=mesh=dp_replicate=2,dp_shard=2 policy=mixed_muon_adamw ns-split=on" | FileCheck %s --check-prefix=HSDPMIX

// Under HSDP a collective that uses a buffer the shard reduction of
// another communicator still writes is held until that reduction's wait
// (the all-reduce over replicas, and what reads its result). An op on the
// compute stream that uses a held collective's buffers waits for it too:
// the gathered-Muon baseline's Muon step reads the gradient the held
// all-gather writes (it ran before it, and the schedule was refused:
// 'uses a buffer after its sched.dealloc'), and AdamW reads the row
// gradients the held all-reduce over replicas writes (it ran before it).
// HSDPBASE-LABEL: sched.step @hand.step
// HSDPBASE: %[[RS:.*]] = sched.reduce_scatter "reduce_scatter u0"
// HSDPBASE: sched.wait %[[RS]]
// HSDPBASE-NEXT: sched.all_reduce "all_reduce u0 over replicas"
// HSDPBASE-NEXT: sched.all_gather "all_gather grad w1"
// HSDPBASE-NEXT: sched.optimizer muon "muon (gathered) w1"
// HSDPMIX-LABEL: sched.step @hand.step
// HSDPMIX: sched.all_reduce "bucket all_reduce (3 tensors)" %[[G:.*]] -> %[[G]] on ["dp_replicate"]
// HSDPMIX-NEXT: sched.optimizer adamw "adamw rows g0" reads(%[[G]])

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

// mfsdp-build-and-schedule-step builds each graph's step and schedules it
// before it is written: its output must be mfsdp-build-step's followed by
// mfsdp-schedule-step's, byte for byte, whatever their options (the default
// pipeline runs it).
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-assign-layouts="policy=mixed_muon_adamw group-units=1" -o %t.planned.mlir
// RUN: mfsdp-opt %t.planned.mlir --mfsdp-build-step --mfsdp-schedule-step -o %t.two.mlir
// RUN: mfsdp-opt %t.planned.mlir --mfsdp-build-and-schedule-step -o %t.one.mlir
// RUN: diff %t.two.mlir %t.one.mlir
// RUN: mfsdp-opt %t.planned.mlir --mfsdp-build-step="microbatches=2 tokens=512" --mfsdp-schedule-step="bucket-mb=1 prefetch=2 gather-comm=separate optimizer-order=landing" -o %t.two2.mlir
// RUN: mfsdp-opt %t.planned.mlir --mfsdp-build-and-schedule-step="microbatches=2 tokens=512 bucket-mb=1 prefetch=2 gather-comm=separate optimizer-order=landing" -o %t.one2.mlir
// RUN: diff %t.two2.mlir %t.one2.mlir
// The step the stages see is the step as written and read back: an alloc
// in the phase of the op before it (the optimizer's first dtensor buffer of
// the DTensor baseline under ZeRO-2 moved, and the arena with it, when the
// builder's phase was kept), whole byte counts, buffers in alloc order.
// RUN: mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts="policy=adamw zero=2" -o %t.two-matrices.mlir
// RUN: mfsdp-opt %t.two-matrices.mlir --mfsdp-build-step=baseline=fsdp2-dtensor --mfsdp-schedule-step -o %t.two3.mlir
// RUN: mfsdp-opt %t.two-matrices.mlir --mfsdp-build-and-schedule-step=baseline=fsdp2-dtensor -o %t.one3.mlir
// RUN: diff %t.two3.mlir %t.one3.mlir
// RUN: mfsdp-opt %S/Inputs/roles.mlir --mfsdp-assign-layouts="policy=mixed_muon_adamw" -o %t.roles.mlir
// RUN: mfsdp-opt %t.roles.mlir --mfsdp-build-step="microbatches=2" --mfsdp-schedule-step="prefetch=2 optimizer-order=landing" -o %t.two4.mlir
// RUN: mfsdp-opt %t.roles.mlir --mfsdp-build-and-schedule-step="microbatches=2 prefetch=2 optimizer-order=landing" -o %t.one4.mlir
// RUN: diff %t.two4.mlir %t.one4.mlir
// RUN: mfsdp-opt %t.planned.mlir --mfsdp-build-and-schedule-step | FileCheck %s
// Its errors are the two passes': a build option out of range, a schedule
// option out of range, a memory cap the step exceeds (on the written step).
// RUN: not mfsdp-opt %t.planned.mlir --mfsdp-build-and-schedule-step=microbatches=0 2>&1 | FileCheck %s --check-prefix=MICRO
// RUN: not mfsdp-opt %t.planned.mlir --mfsdp-build-and-schedule-step=bucket-mb=-1 2>&1 | FileCheck %s --check-prefix=BUCKET
// RUN: not mfsdp-opt %t.planned.mlir --mfsdp-build-and-schedule-step=memory-cap-mb=1 2>&1 | FileCheck %s --check-prefix=CAP

// One step after its graph, bound to the graph's mesh, scheduled (async
// collectives and their waits) and memory-planned (offsets and arenas).
// CHECK-LABEL: sched.step @blocks.step
// CHECK-SAME: mesh @blocks::@mesh
// CHECK-SAME: arena_bytes
// CHECK: sched.alloc {{.*}} offset
// CHECK: sched.wait

// MICRO: error: option microbatches of mfsdp-build-step: expected 1 to {{[0-9]+}}, got 0
// BUCKET: {{^}}<unknown>:0: error: option bucket-mb of mfsdp-bucket-collectives: expected 0 or more, got -1
// CAP: error: rank 0 needs a {{[0-9]+}}-byte arena ({{[0-9]+}} bytes live at the peak, after this op), over the memory cap of 1048576 bytes

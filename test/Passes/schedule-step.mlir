// mfsdp-schedule-step runs the four schedule passes on the step read once
// and written once; its output must be the four passes' in a row, byte for
// byte, whatever their options (the default pipeline runs it).
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-assign-layouts="policy=mixed_muon_adamw group-units=1" --mfsdp-build-step -o %t.built.mlir
// RUN: mfsdp-opt %t.built.mlir --mfsdp-bucket-collectives --mfsdp-schedule-overlap --mfsdp-plan-memory --mfsdp-verify-schedule -o %t.four.mlir
// RUN: mfsdp-opt %t.built.mlir --mfsdp-schedule-step -o %t.one.mlir
// RUN: diff %t.four.mlir %t.one.mlir
// RUN: mfsdp-opt %t.built.mlir --mfsdp-bucket-collectives=bucket-mb=1 --mfsdp-schedule-overlap="prefetch=2 gather-comm=separate optimizer-order=landing" --mfsdp-plan-memory --mfsdp-verify-schedule -o %t.four2.mlir
// RUN: mfsdp-opt %t.built.mlir --mfsdp-schedule-step="bucket-mb=1 prefetch=2 gather-comm=separate optimizer-order=landing" -o %t.one2.mlir
// RUN: diff %t.four2.mlir %t.one2.mlir
// The pipeline gives what assign-layouts, build-step and the four passes give.
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-pipeline -o %t.pipeline.mlir
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-assign-layouts --mfsdp-build-step --mfsdp-bucket-collectives --mfsdp-schedule-overlap --mfsdp-plan-memory --mfsdp-verify-schedule -o %t.passes.mlir
// RUN: diff %t.pipeline.mlir %t.passes.mlir
// Its errors are the four passes': an option out of range (the command
// line's fault, so no place in the input), a memory cap the step exceeds.
// RUN: not mfsdp-opt %t.built.mlir --mfsdp-schedule-step=bucket-mb=-1 2>&1 | FileCheck %s --check-prefix=BUCKET
// RUN: not mfsdp-opt %t.built.mlir --mfsdp-schedule-step=prefetch=-1 2>&1 | FileCheck %s --check-prefix=PREFETCH
// RUN: not mfsdp-opt %t.built.mlir --mfsdp-schedule-step=hardware=tpu 2>&1 | FileCheck %s --check-prefix=HARDWARE
// RUN: not mfsdp-opt %t.built.mlir --mfsdp-schedule-step=memory-cap-mb=1 2>&1 | FileCheck %s --check-prefix=CAP
// A step already scheduled is refused, as by mfsdp-schedule-overlap.
// RUN: not mfsdp-opt %t.one.mlir --mfsdp-schedule-step 2>&1 | FileCheck %s --check-prefix=AGAIN

// BUCKET: {{^}}<unknown>:0: error: option bucket-mb of mfsdp-bucket-collectives: expected 0 or more, got -1
// PREFETCH: {{^}}<unknown>:0: error: option prefetch of mfsdp-schedule-overlap: expected 0 or more, got -1
// HARDWARE: error: {{.*}}tpu
// CAP: error: rank 0 needs a {{[0-9]+}}-byte arena ({{[0-9]+}} bytes live at the peak, after this op), over the memory cap of 1048576 bytes
// AGAIN: error: is already scheduled (it has async collectives)

// mfsdp-verify-schedule also checks the program the step library will run:
// the step lowered to the runtime's program (for the plan of the module's
// plan.graph, as the emitter builds both) and replayed in the runtime's
// hook order. Valid steps pass silently, whatever the schedule: ZeRO-3 at
// each prefetch depth, gather groups of two units, microbatches, ZeRO-1/2,
// HSDP with ns_split.
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-pipeline -o %t.mlir 2>&1 | FileCheck %s --allow-empty --check-prefix=SILENT
// RUN: mfsdp-opt %t.mlir --mfsdp-verify-schedule 2>&1 | FileCheck %s
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-pipeline="prefetch=0 group-units=1" -o /dev/null 2>&1 | FileCheck %s --allow-empty --check-prefix=SILENT
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-pipeline="prefetch=2 group-units=1" -o /dev/null 2>&1 | FileCheck %s --allow-empty --check-prefix=SILENT
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-pipeline="microbatches=2 prefetch=1" -o /dev/null 2>&1 | FileCheck %s --allow-empty --check-prefix=SILENT
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-pipeline="microbatches=3 prefetch=2 group-units=1" -o /dev/null 2>&1 | FileCheck %s --allow-empty --check-prefix=SILENT
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-pipeline="zero=2 microbatches=2" -o /dev/null 2>&1 | FileCheck %s --allow-empty --check-prefix=SILENT
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-pipeline="zero=1 policy=mixed_muon_adamw optimizer-order=landing" -o /dev/null 2>&1 | FileCheck %s --allow-empty --check-prefix=SILENT
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-pipeline="mesh=dp_replicate=2,dp_shard=2 policy=mixed_muon_adamw ns-split=on" -o /dev/null 2>&1 | FileCheck %s --allow-empty --check-prefix=SILENT
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-pipeline="mesh=dp_replicate=2,dp_shard=2 zero=2 microbatches=2" -o /dev/null 2>&1 | FileCheck %s --allow-empty --check-prefix=SILENT
// RUN: mfsdp-opt %S/Inputs/layers4.mlir --mfsdp-pipeline -o /dev/null 2>&1 | FileCheck %s --allow-empty --check-prefix=SILENT
// SILENT-NOT: {{.}}

// The scheduled step itself, which the check leaves as it is.
// CHECK-LABEL: sched.step @blocks.step
// CHECK-NOT: error

// The runtime runs the forward hooks in unit order. A step whose group 0
// computes unit 1's forward before unit 0's lowers to a program that, in
// that order, releases unit 1's copy in post_forward(0), before unit 1's
// forward: the error is on the sched.step and names the hook, the program
// op and the sched op it was lowered from.
// RUN: sed -e 's/"forward b0" unit @b0/"forward b0" unit @b1/; s/"forward b1" unit @b1/"forward b1" unit @b0/' %t.mlir > %t.swapped.mlir
// RUN: not mfsdp-opt %t.swapped.mlir --mfsdp-verify-schedule -o /dev/null 2>&1 | FileCheck %s --check-prefix=SWAPPED
// The emitter lowers and checks the program through the same functions
// and refuses the step with the same message.
// RUN: not mfsdp-translate --emit-step-c %t.swapped.mlir -o /dev/null 2>&1 | FileCheck %s --check-prefix=SWAPPED
// SWAPPED: error: 'sched.step' op lowers to a runtime program that does not run as scheduled: post_forward of unit 0 ('b0'): op {{[0-9]+}} (release of unit 1 ('b1')) releases the unit's copy before its forward compute (op {{[0-9]+}} is lowered from 'free gathered g0 (forward)')

// One unit a group, no prefetch: units 1 and 2 swapped in forward. The
// program frees the gathered copies in another order than the step.
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-pipeline="prefetch=0 group-units=1" -o %t.one.mlir
// RUN: sed -e 's/"forward b2" unit @b2/"forward b2" unit @b1/; s/"forward b1" unit @b1/"forward b1" unit @b2/' %t.one.mlir > %t.order.mlir
// RUN: not mfsdp-opt %t.order.mlir --mfsdp-verify-schedule -o /dev/null 2>&1 | FileCheck %s --check-prefix=ORDER
// ORDER: error: 'sched.step' op lowers to a runtime program that does not run as scheduled: post_forward of unit 1 ('b1'): op {{[0-9]+}} (release of unit 1 ('b1')) frees group 2's forward gathered copy where the step frees group 1's ('free gathered g1 (forward)') (op {{[0-9]+}} is lowered from 'free gathered g2 (forward)')

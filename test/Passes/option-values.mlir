// Options that take a name are typed: the option parser refuses a value
// outside the vocabulary and lists the valid ones, for every pass, the
// pipeline and the tools; hardware profiles come from one registry.
// RUN: %exit1 mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts=policy=lion -o /dev/null 2>&1 | FileCheck %s --check-prefix=POLICY
// RUN: %exit1 mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts=owner-strategy=best -o /dev/null 2>&1 | FileCheck %s --check-prefix=STRATEGY
// RUN: %exit1 mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts=row-layout=diagonal -o /dev/null 2>&1 | FileCheck %s --check-prefix=ROWS
// RUN: %exit1 mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts=ns-split=maybe -o /dev/null 2>&1 | FileCheck %s --check-prefix=SPLIT
// RUN: %exit1 mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts=hardware=tpu -o /dev/null 2>&1 | FileCheck %s --check-prefix=HW
// RUN: %exit1 mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts --mfsdp-build-step=baseline=fsdp1 -o /dev/null 2>&1 | FileCheck %s --check-prefix=BASELINE
// RUN: %exit1 mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts --mfsdp-build-step --mfsdp-schedule-overlap=gather-comm=both -o /dev/null 2>&1 | FileCheck %s --check-prefix=COMM
// RUN: %exit1 mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts --mfsdp-build-step --mfsdp-schedule-overlap=optimizer-order=random -o /dev/null 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: %exit1 mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts --mfsdp-build-step --mfsdp-schedule-overlap=hardware=tpu -o /dev/null 2>&1 | FileCheck %s --check-prefix=HW
// RUN: %exit1 mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts --mfsdp-plan-report=hardware=tpu -o /dev/null 2>&1 | FileCheck %s --check-prefix=HW
// RUN: %exit1 mfsdp-opt %S/Inputs/two-matrices.mlir "--mfsdp-pipeline=policy=lion" -o /dev/null 2>&1 | FileCheck %s --check-prefix=POLICY
// RUN: %exit1 mfsdp-opt %S/Inputs/two-matrices.mlir "--mfsdp-pipeline=optimizer-order=first_units" -o /dev/null 2>&1 | FileCheck %s --check-prefix=PIPEORDER
// RUN: %exit1 mfsdp-sim %S/Inputs/two-matrices.mlir --pipeline="owner-strategy=round-robin" 2>&1 | FileCheck %s --check-prefix=SIMSTRATEGY
// RUN: %exit1 mfsdp-compile %S/Inputs/two-matrices.mlir --policy=lion -o /dev/null 2>&1 | FileCheck %s --check-prefix=POLICY
// RUN: mfsdp-opt %S/Inputs/two-matrices.mlir "--mfsdp-assign-layouts=policy=muon owner-strategy=round_robin row-layout=per_param ns-split=off hardware=h100-ib" | FileCheck %s --check-prefix=OK
// RUN: mfsdp-opt %S/Inputs/two-matrices.mlir "--mfsdp-assign-layouts=owner-strategy=round_robin row-layout=per_param" --dump-pass-pipeline -o /dev/null 2>&1 | FileCheck %s --check-prefix=PRINT

// POLICY: unknown policy 'lion'; expected graph, adamw, sgd, muon or mixed_muon_adamw
// STRATEGY: unknown owner strategy 'best'; expected balanced, matrixfsdp or round_robin
// ROWS: unknown row layout 'diagonal'; expected auto, per_param or flat
// SPLIT: unknown ns-split 'maybe'; expected auto, on or off
// HW: error: unknown hardware profile 'tpu'; expected a100, h100, h100-ib, a100-pcie or h100-pcie
// BASELINE: unknown baseline 'fsdp1'; expected none, fsdp2, fsdp2-dtensor, fsdp2-dtensor-mm or fsdp2-rows
// COMM: unknown gather-comm 'both'; expected shared or separate
// ORDER: unknown optimizer order 'random'; expected first-units or landing
// PIPEORDER: unknown optimizer order 'first_units'; expected first-units or landing
// SIMSTRATEGY: unknown owner strategy 'round-robin'; expected balanced, matrixfsdp or round_robin

// Every spelled value is accepted (h100-ib included: the planner and the
// simulator share the registry).
// OK: plan.param @{{.*}} placement #plan.owner

// Options print back with their spelling.
// PRINT: owner-strategy=round_robin
// PRINT-SAME: policy=graph
// PRINT-SAME: row-layout=per_param

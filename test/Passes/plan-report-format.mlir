// RUN: not mfsdp-opt %S/Inputs/two-matrices.mlir --mfsdp-assign-layouts --mfsdp-plan-report="text json" -o /dev/null 2>&1 | FileCheck %s
// One format at a time.
// CHECK: error: mfsdp-plan-report takes one format: text or json, not both

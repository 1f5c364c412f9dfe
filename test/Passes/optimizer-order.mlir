// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-assign-layouts="group-units=1 row-layout=flat" --mfsdp-build-step --mfsdp-bucket-collectives --mfsdp-schedule-overlap=optimizer-order=landing | FileCheck %s --check-prefix=LANDING
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-assign-layouts="group-units=1 row-layout=flat" --mfsdp-build-step --mfsdp-bucket-collectives --mfsdp-schedule-overlap | FileCheck %s --check-prefix=FIRST
// RUN: mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-assign-layouts="group-units=1 row-layout=flat" --mfsdp-build-step --mfsdp-bucket-collectives --mfsdp-schedule-overlap --mfsdp-plan-memory --mfsdp-verify-schedule | FileCheck %s --check-prefix=VERIFIED
// RUN: not mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-assign-layouts --mfsdp-build-step --mfsdp-schedule-overlap=optimizer-order=random 2>&1 | FileCheck %s --check-prefix=BADORDER
// RUN: not mfsdp-opt %S/Inputs/four-blocks.mlir --mfsdp-assign-layouts --mfsdp-build-step --mfsdp-schedule-overlap=hardware=tpu 2>&1 | FileCheck %s --check-prefix=BADHW

// The step is planned with flat row layouts (no copies around the
// reductions), so that group 0's reduction is the only one still in flight
// when the optimizer phase begins.

// Landing order: the groups run in the order their reductions land, the
// last unit first; group 0, which the next step gathers first, is updated
// last.
// LANDING-LABEL: sched.step @blocks.step
// LANDING: sched.optimizer muon "muon g3
// LANDING: sched.optimizer muon "muon g2
// LANDING: sched.optimizer muon "muon g1
// LANDING: sched.wait
// LANDING: sched.optimizer muon "muon g0
// LANDING-NOT: sched.optimizer

// First units first (the default): group 3, whose reduction landed long
// ago, fills the wait for group 0's reduction; then group 0, 1, 2, so the
// next step's first gather can start while groups 1 and 2 are updated.
// FIRST-LABEL: sched.step @blocks.step
// FIRST: sched.optimizer muon "muon g3
// FIRST-NEXT: sched.wait
// FIRST: sched.optimizer muon "muon g0
// FIRST: sched.optimizer muon "muon g1
// FIRST: sched.optimizer muon "muon g2
// FIRST-NOT: sched.optimizer

// The reordered step still passes the verifier.
// VERIFIED-LABEL: sched.step @blocks.step
// VERIFIED: sched.optimizer muon "muon g0

// BADORDER: unknown optimizer order 'random'; expected first-units or landing
// BADHW: unknown hardware profile 'tpu'; expected a100, h100, h100-ib, a100-pcie or h100-pcie

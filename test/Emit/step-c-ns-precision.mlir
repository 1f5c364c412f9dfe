// Muon's Newton-Schulz precision is part of the plan: #plan.muon's
// ns_precision (fp32 by default, left out when printed). The option
// `ns-precision` of mfsdp-assign-layouts writes it into the graph; the
// step built from the graph records it (`ns_precision bf16` on sched.step)
// and the schedule prices Newton-Schulz at it; the step library runs it
// (mfsdp_plan.muon_ns_precision, the default of every parameter's
// ns_precision hyperparameter). What would price one precision and run
// another is an error.
// One Muon matrix owned by rank 0 and one AdamW row shard, on 2 ranks.

// The default: fp32, nothing recorded, nothing emitted.
// RUN: mfsdp-opt %s --mfsdp-assign-layouts --mfsdp-build-step="tokens=1" | FileCheck %s --check-prefix=FP32-IR
// RUN: mfsdp-opt %s --mfsdp-assign-layouts --mfsdp-build-step="tokens=1" | mfsdp-translate --emit-step-c | FileCheck %s --check-prefix=FP32
// Planned in bf16: written into the graph, recorded on the step, emitted.
// RUN: mfsdp-opt %s --mfsdp-assign-layouts="ns-precision=bf16" --mfsdp-build-step="tokens=1" | FileCheck %s --check-prefix=BF16-IR
// RUN: mfsdp-opt %s --mfsdp-assign-layouts="ns-precision=bf16" --mfsdp-build-step="tokens=1" | mfsdp-translate --emit-step-c | FileCheck %s --check-prefix=BF16
// The default pipeline, and its output printed and read back: the same.
// RUN: mfsdp-opt %s --mfsdp-pipeline="tokens=1 ns-precision=bf16" | FileCheck %s --check-prefix=BF16-IR
// RUN: mfsdp-opt %s --mfsdp-pipeline="tokens=1 ns-precision=bf16" | mfsdp-opt | mfsdp-translate --emit-step-c | FileCheck %s --check-prefix=BF16
// A graph that says bf16 keeps it when planned again without the option,
// and goes back to fp32 when the option says so.
// RUN: sed 's/scale = match_rms_adamw>/scale = match_rms_adamw, ns_precision = bf16>/' %s | mfsdp-opt --mfsdp-assign-layouts | FileCheck %s --check-prefix=KEPT
// RUN: sed 's/scale = match_rms_adamw>/scale = match_rms_adamw, ns_precision = bf16>/' %s | mfsdp-opt --mfsdp-assign-layouts="ns-precision=fp32" | FileCheck %s --check-prefix=FP32-IR
// The plan report says which precision its optimizer times are priced at.
// RUN: mfsdp-opt %s --mfsdp-assign-layouts="ns-precision=bf16" --mfsdp-plan-report -o /dev/null | FileCheck %s --check-prefix=REPORT-BF16
// An option that contradicts the graph or the step is refused.
// RUN: mfsdp-opt %s --mfsdp-assign-layouts="ns-precision=bf16" | not mfsdp-opt --mfsdp-plan-report="ns-precision=fp32" 2>&1 | FileCheck %s --check-prefix=REPORT
// RUN: mfsdp-opt %s --mfsdp-assign-layouts="ns-precision=bf16" --mfsdp-build-step="tokens=1" | not mfsdp-opt --pass-pipeline="builtin.module(sched.step(mfsdp-schedule-overlap{ns-precision=fp32}))" 2>&1 | FileCheck %s --check-prefix=OVERLAP
// RUN: mfsdp-opt %s --mfsdp-assign-layouts="ns-precision=bf16" | not mfsdp-opt --mfsdp-build-and-schedule-step="tokens=1 ns-precision=fp32" 2>&1 | FileCheck %s --check-prefix=BUILD
// A step priced in bf16 (the option, on a step that records nothing) from
// a graph that runs fp32: the library would not run what was scheduled.
// RUN: mfsdp-opt %s --mfsdp-assign-layouts --mfsdp-build-step="tokens=1" | mfsdp-opt --pass-pipeline="builtin.module(sched.step(mfsdp-schedule-overlap{ns-precision=bf16}))" | FileCheck %s --check-prefix=PRICED
// RUN: mfsdp-opt %s --mfsdp-assign-layouts --mfsdp-build-step="tokens=1" | mfsdp-opt --pass-pipeline="builtin.module(sched.step(mfsdp-schedule-overlap{ns-precision=bf16}))" | not mfsdp-translate --emit-step-c 2>&1 | FileCheck %s --check-prefix=MISMATCH

// FP32-IR-NOT: ns_precision
// FP32-IR: plan.param @w
// FP32-IR-NOT: ns_precision
// FP32: .muon_ns_steps = 5,
// FP32-NOT: .muon_ns_precision
// FP32: mfsdp_step_plan

// BF16-IR: plan.policy
// BF16-IR-SAME: muon <{{.*}}ns_precision = bf16>
// BF16-IR: plan.param @w {{.*}}optimizer #plan.muon<{{.*}}ns_precision = bf16>
// BF16-IR: sched.step @nsp.step mesh @nsp::@mesh world 2 tokens 1 microbatches 1 {{.*}}ns_precision bf16
// BF16: .muon_ns_precision = MFSDP_NS_PRECISION_BF16,

// REPORT-BF16: Newton-Schulz: 5 steps in bf16 (#plan.muon ns_precision)

// KEPT: plan.param @w {{.*}}optimizer #plan.muon<{{.*}}ns_precision = bf16>

// REPORT: error: mfsdp-plan-report: ns-precision=fp32 contradicts the graph's #plan.muon (ns_precision bf16), which the step library runs; plan the graph with mfsdp-assign-layouts{ns-precision=fp32} or leave ns-precision out
// OVERLAP: error: mfsdp-schedule-overlap: ns-precision=fp32 contradicts the step's ns_precision (ns_precision bf16)
// BUILD: error: mfsdp-build-and-schedule-step: ns-precision=fp32 contradicts the graph's #plan.muon (ns_precision bf16)

// PRICED: sched.step @nsp.step {{.*}}ns_precision bf16
// MISMATCH: error: 'sched.step' op was scheduled with Newton-Schulz in bf16 (ns_precision), but its graph's #plan.muon runs it in fp32: the library runs the graph's

plan.graph @nsp {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.policy mixed_muon_adamw zero 3 muon <lr = 2.0e-02, momentum = 9.5e-01, weight_decay = 1.0e-02, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
  plan.param @w : tensor<64x64xf32> linear module "w"
  plan.param @n : tensor<64xf32> norm module "n"
  plan.unit @u0 index 0 params [@w, @n] cost <fwd_flops = 1, bwd_flops = 2, act_bytes = 0, recompute = false>
}

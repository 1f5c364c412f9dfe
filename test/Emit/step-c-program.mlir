// The step library carries the scheduled step as the runtime's program
// (mfsdp_program): after mfsdp-schedule-overlap and mfsdp-plan-memory, in
// the optimizer step each group's kernels in the schedule's order, an
// owner's Muon on its rank alone, the wait for the reduction still in
// flight just before the group that needs it, and under ZeRO-1/2 each
// unit's gather right after its group's update; in each unit's forward and
// backward hooks the starts and waits of its gathers and reductions (the
// prefetched gather of the next unit, the reduction overlapped with the
// previous unit's backward), the frees and the gradient buffers. Three units, one group
// each, on 2 ranks: an AdamW embedding (unit 0), a Muon matrix on rank 1
// and an SGD vector (unit 1), a Muon matrix on rank 0 and a frozen norm
// (unit 2, which no optimizer op names).
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1" --mfsdp-schedule-overlap="prefetch=0 optimizer-order=landing" --mfsdp-plan-memory | mfsdp-translate --emit-step-c | FileCheck %s --check-prefix=LANDING
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1" --mfsdp-schedule-overlap="prefetch=0 optimizer-order=first-units" --mfsdp-plan-memory | mfsdp-translate --emit-step-c -o %t.c
// RUN: FileCheck %s --check-prefix=FIRST < %t.c
// RUN: cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -I%mfsdp_src/include %t.c
// ZeRO-3 gathers at the next use: no gathers in the program.
// RUN: sed 's/zero 2$/zero 3/' %s | mfsdp-opt --mfsdp-build-step="tokens=1" --mfsdp-schedule-overlap="prefetch=1 optimizer-order=landing" --mfsdp-plan-memory | mfsdp-translate --emit-step-c | FileCheck %s --check-prefix=ZERO3
// A step that accumulates two microbatches runs the first under no-sync:
// its library keeps the gradients between them (ZeRO-2 otherwise keeps
// them only during each unit's backward).
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1 microbatches=2" --mfsdp-schedule-overlap="prefetch=0" --mfsdp-plan-memory | mfsdp-translate --emit-step-c | FileCheck %s --check-prefix=MICRO
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1" --mfsdp-schedule-overlap="prefetch=0" --mfsdp-plan-memory | mfsdp-translate --emit-step-c | FileCheck %s --check-prefix=ONE
// MICRO-LABEL: static const mfsdp_memory_plan mfsdp_the_memory
// MICRO: .keep_grads = 1,
// ONE-LABEL: static const mfsdp_memory_plan mfsdp_the_memory
// ONE: .keep_grads = 0,
// Without a planned schedule there is no program (the runtime's own order),
// and the program is part of the plan's hash: another order, another hash.
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1" | mfsdp-translate --emit-step-c | not grep -q mfsdp_program
// RUN: mfsdp-opt %s --mfsdp-build-step="tokens=1" --mfsdp-schedule-overlap="prefetch=0 optimizer-order=landing" --mfsdp-plan-memory | mfsdp-translate --emit-step-c | grep '\.hash' > %t.hash
// RUN: grep '\.hash' %t.c >> %t.hash
// RUN: sort -u %t.hash | wc -l | grep -x 2

// Landing order: the last group to be reduced in backward (unit 0's) is
// stepped last, after the wait for its reduction; the others first.
// LANDING-LABEL: static const int32_t mfsdp_program_params[4] = {3, 2, 1, 0};
// LANDING-LABEL: static const mfsdp_program_op mfsdp_program_ops[22] = {
// LANDING-NEXT: /* MFSDP_HOOK_OPTIMIZER_STEP */
// LANDING-NEXT: {MFSDP_PROGRAM_OPTIMIZER, 2, 2, MFSDP_OPT_MUON, 0, 1, mfsdp_program_params + 0}, /* muon g2 owner 0: l1.w */
// LANDING-NEXT: {MFSDP_PROGRAM_GATHER, 2, 2, MFSDP_OPT_NONE, -1, 0, 0}, /* all_gather updated rows g2 */
// LANDING-NEXT: {MFSDP_PROGRAM_OPTIMIZER, 1, 1, MFSDP_OPT_SGD, -1, 1, mfsdp_program_params + 1}, /* sgd rows g1: l0.b */
// LANDING-NEXT: {MFSDP_PROGRAM_OPTIMIZER, 1, 1, MFSDP_OPT_MUON, 1, 1, mfsdp_program_params + 2}, /* muon g1 owner 1: l0.w */
// LANDING-NEXT: {MFSDP_PROGRAM_GATHER, 1, 1, MFSDP_OPT_NONE, -1, 0, 0}, /* all_gather updated rows g1 */
// LANDING-NEXT: {MFSDP_PROGRAM_WAIT_REDUCTION, 0, 0, MFSDP_OPT_NONE, -1, 0, 0}, /* wait reduce_scatter u0 */
// LANDING-NEXT: {MFSDP_PROGRAM_OPTIMIZER, 0, 0, MFSDP_OPT_ADAMW, -1, 1, mfsdp_program_params + 3}, /* adamw rows g0: emb */
// LANDING-NEXT: {MFSDP_PROGRAM_GATHER, 0, 0, MFSDP_OPT_NONE, -1, 0, 0}, /* all_gather updated rows g0 */
// ZeRO-2 keeps the gathered copies: a pre hook only makes sure of its unit;
// without prefetch each unit's reduction still runs during the previous
// unit's backward, waited for in its post_backward.
// LANDING-NEXT: /* MFSDP_HOOK_PRE_FORWARD(0) */
// LANDING-NEXT: {MFSDP_PROGRAM_WAIT_GATHER, 0, 0, MFSDP_OPT_NONE, -1, 0, 0}, /* the unit whole for its hook */
// LANDING-NEXT: /* MFSDP_HOOK_PRE_BACKWARD(0) */
// LANDING-NEXT: {MFSDP_PROGRAM_WAIT_GATHER, 0, 0, MFSDP_OPT_NONE, -1, 0, 0}, /* the unit whole for its hook */
// LANDING-NEXT: {MFSDP_PROGRAM_PLACE_GRADS, 0, 0, MFSDP_OPT_NONE, -1, 0, 0}, /* the unit's gradient buffers */
// LANDING-NEXT: /* MFSDP_HOOK_POST_BACKWARD(0) */
// LANDING-NEXT: {MFSDP_PROGRAM_WAIT_REDUCTION, 1, 1, MFSDP_OPT_NONE, -1, 0, 0}, /* wait reduce_scatter u1 */
// LANDING-NEXT: {MFSDP_PROGRAM_START_REDUCTION, 0, 0, MFSDP_OPT_NONE, -1, 0, 0}, /* reduce_scatter u0 */
// LANDING: static const mfsdp_program_hook mfsdp_program_hooks[13] = {
// LANDING-NEXT: /* hook, unit, first op, ops */
// LANDING-NEXT: {MFSDP_HOOK_OPTIMIZER_STEP, -1, 0, 8},
// LANDING-NEXT: {MFSDP_HOOK_PRE_FORWARD, 0, 8, 1},
// LANDING-NEXT: {MFSDP_HOOK_POST_FORWARD, 0, 9, 0},
// LANDING: static const mfsdp_program mfsdp_the_program = {22, mfsdp_program_ops, 13, mfsdp_program_hooks};
// LANDING-LABEL: static const mfsdp_plan mfsdp_the_plan = {
// LANDING: .program = &mfsdp_the_program,
// LANDING-NEXT: };

// First units first (the simulator chose one group to fill the wait): unit
// 0 right after its reduction lands, then unit 1.
// FIRST-LABEL: static const mfsdp_program_op mfsdp_program_ops[22] = {
// FIRST-NEXT: /* MFSDP_HOOK_OPTIMIZER_STEP */
// FIRST-NEXT: {MFSDP_PROGRAM_OPTIMIZER, 2, 2, MFSDP_OPT_MUON, 0, 1, mfsdp_program_params + 0}, /* muon g2 owner 0: l1.w */
// FIRST-NEXT: {MFSDP_PROGRAM_GATHER, 2, 2, MFSDP_OPT_NONE, -1, 0, 0}, /* all_gather updated rows g2 */
// FIRST-NEXT: {MFSDP_PROGRAM_WAIT_REDUCTION, 0, 0, MFSDP_OPT_NONE, -1, 0, 0}, /* wait reduce_scatter u0 */
// FIRST-NEXT: {MFSDP_PROGRAM_OPTIMIZER, 0, 0, MFSDP_OPT_ADAMW, -1, 1, mfsdp_program_params + 1}, /* adamw rows g0: emb */
// FIRST-NEXT: {MFSDP_PROGRAM_GATHER, 0, 0, MFSDP_OPT_NONE, -1, 0, 0}, /* all_gather updated rows g0 */
// FIRST-NEXT: {MFSDP_PROGRAM_OPTIMIZER, 1, 1, MFSDP_OPT_SGD, -1, 1, mfsdp_program_params + 2}, /* sgd rows g1: l0.b */
// FIRST-NEXT: {MFSDP_PROGRAM_OPTIMIZER, 1, 1, MFSDP_OPT_MUON, 1, 1, mfsdp_program_params + 3}, /* muon g1 owner 1: l0.w */
// FIRST-NEXT: {MFSDP_PROGRAM_GATHER, 1, 1, MFSDP_OPT_NONE, -1, 0, 0}, /* all_gather updated rows g1 */
// FIRST-NEXT: /* MFSDP_HOOK_PRE_FORWARD(0) */

// ZERO3-LABEL: static const mfsdp_program_op mfsdp_program_ops[28] = {
// ZERO3-NEXT: /* MFSDP_HOOK_OPTIMIZER_STEP */
// ZERO3-NEXT: {MFSDP_PROGRAM_OPTIMIZER, 2, 2, MFSDP_OPT_MUON, 0, 1, mfsdp_program_params + 0}, /* muon g2 owner 0: l1.w */
// ZERO3-NEXT: {MFSDP_PROGRAM_OPTIMIZER, 1, 1, MFSDP_OPT_SGD, -1, 1, mfsdp_program_params + 1}, /* sgd rows g1: l0.b */
// ZERO3-NEXT: {MFSDP_PROGRAM_OPTIMIZER, 1, 1, MFSDP_OPT_MUON, 1, 1, mfsdp_program_params + 2}, /* muon g1 owner 1: l0.w */
// ZERO3-NEXT: {MFSDP_PROGRAM_WAIT_REDUCTION, 0, 0, MFSDP_OPT_NONE, -1, 0, 0}, /* wait {{.*}} */
// ZERO3-NEXT: {MFSDP_PROGRAM_OPTIMIZER, 0, 0, MFSDP_OPT_ADAMW, -1, 1, mfsdp_program_params + 3}, /* adamw rows g0: emb */
// ZeRO-3 with prefetch: pre_forward(0) starts unit 0's gather and unit
// 1's before waiting for its own, post_forward frees the copy,
// pre_backward(1) starts unit 0's backward gather ahead.
// ZERO3-NEXT: /* MFSDP_HOOK_PRE_FORWARD(0) */
// ZERO3-NEXT: {MFSDP_PROGRAM_START_GATHER, 0, 0, MFSDP_OPT_NONE, -1, 0, 0}, /* all_gather u0 (forward) */
// ZERO3-NEXT: {MFSDP_PROGRAM_START_GATHER, 1, 1, MFSDP_OPT_NONE, -1, 0, 0}, /* all_gather u1 (forward) */
// ZERO3-NEXT: {MFSDP_PROGRAM_WAIT_GATHER, 0, 0, MFSDP_OPT_NONE, -1, 0, 0}, /* wait all_gather u0 (forward) */
// ZERO3-NEXT: /* MFSDP_HOOK_POST_FORWARD(0) */
// ZERO3-NEXT: {MFSDP_PROGRAM_RELEASE, 0, 0, MFSDP_OPT_NONE, -1, 0, 0}, /* free gathered g0 (forward) */
// ZERO3: /* MFSDP_HOOK_PRE_BACKWARD(1) */
// ZERO3-NEXT: {MFSDP_PROGRAM_START_GATHER, 0, 0, MFSDP_OPT_NONE, -1, 0, 0}, /* all_gather u0 (backward) */
// ZERO3-NEXT: {MFSDP_PROGRAM_WAIT_GATHER, 1, 1, MFSDP_OPT_NONE, -1, 0, 0}, /* wait all_gather u1 (backward) */
// ZERO3-NEXT: {MFSDP_PROGRAM_PLACE_GRADS, 1, 1, MFSDP_OPT_NONE, -1, 0, 0}, /* the unit's gradient buffers */
// ZERO3: /* MFSDP_HOOK_POST_BACKWARD(2) */
// ZERO3-NEXT: {MFSDP_PROGRAM_START_REDUCTION, 2, 2, MFSDP_OPT_NONE, -1, 0, 0}, /* reduce_scatter u2 */
// ZERO3-NEXT: };
// ZERO3-NOT: MFSDP_PROGRAM_GATHER

plan.graph @program {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.policy mixed_muon_adamw zero 2
  plan.param @emb : tensor<16x8xf32> embedding module "emb" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1>
  plan.param @l0.w : tensor<8x8xf32> linear module "l0" placement #plan.owner<rank = 1, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
  plan.param @l0.b : tensor<8xf32> norm module "l0" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.sgd<lr = 0.05, momentum = 0.9, weight_decay = 0.0, nesterov = false>
  plan.param @l1.w : tensor<8x16xf32> linear module "l1" placement #plan.owner<rank = 0, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
  plan.param @l1.n : tensor<16xf32> norm module "l1" frozen placement #plan.row_shard<dim = 0, axes = ["dp_shard"]>
  plan.unit @u0 index 0 params [@emb] cost <fwd_flops = 1, bwd_flops = 2, act_bytes = 0, recompute = false> group 0
  plan.unit @u1 index 1 params [@l0.w, @l0.b] cost <fwd_flops = 1, bwd_flops = 2, act_bytes = 0, recompute = false> group 1
  plan.unit @u2 index 2 params [@l1.w, @l1.n] cost <fwd_flops = 1, bwd_flops = 2, act_bytes = 0, recompute = false> group 2
}

// The step library carries the runtime's static memory plan: per dp_shard
// rank the arena, per parameter the byte offset of each buffer. Worked by
// hand: two units of one 4x64 f32 AdamW row shard on 2 ranks, ZeRO-3. Each
// rank keeps 2 rows (512 B) of master, exp_avg, exp_avg_sq and reduced
// gradient; a gathered copy or a gradient is 1024 B. The state lives all
// step, so both units' buffers of a kind lie in one (a at 0, b at 512).
// Placed largest first, then by first use: the four 1024 B state buffers
// from 0 (master, exp_avg, exp_avg_sq, grad_shard), every gathered copy
// (forward and backward) and the staging buffer at 4096, both gradients at
// 5120 (a unit's backward copy and its gradient live together): 6144 B per
// rank against 2 x 4096 + 1024 = 9216 B with nothing shared.
// RUN: mfsdp-translate --emit-step-c %s | FileCheck %s
// RUN: mfsdp-translate --emit-step-c %s -o %t.c
// RUN: cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -I%mfsdp_src/include %t.c
// With gradient accumulation the gradients are kept, both in one buffer
// (the largest, at 0), and the state moves up: 7168 B. The memory plan is part of the hash.
// RUN: mfsdp-translate --emit-step-c --emit-step-accumulate %s | FileCheck %s --check-prefix=ACC
// RUN: mfsdp-translate --emit-step-c %s | grep '\.hash' > %t.hash
// RUN: mfsdp-translate --emit-step-c --emit-step-accumulate %s | grep '\.hash' >> %t.hash
// With gather prefetch (--emit-step-prefetch=1) two units' gathered copies
// are live at once, above the state (4096): forward a's at 4096 and b's
// (prefetched at pre_forward of a) at 5120; backward b's copy at 4096, its
// gradient at 5120 and a's copy (prefetched at pre_backward of b) at 6144,
// where it stays for a's backward; b's reduction overlaps a's backward, so
// b's copy and gradient stay until post_backward of a and a's gradient
// takes 7168: 8192 B. The field is emitted (and hashed) only when set.
// RUN: mfsdp-translate --emit-step-c --emit-step-prefetch=1 %s | FileCheck %s --check-prefix=PF
// RUN: mfsdp-translate --emit-step-c --emit-step-prefetch=1 %s -o %t.pf.c
// RUN: cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -I%mfsdp_src/include %t.pf.c
// RUN: mfsdp-translate --emit-step-c --emit-step-prefetch=1 %s | grep '\.hash' >> %t.hash
// RUN: sort -u %t.hash | wc -l | grep -x 3
// RUN: mfsdp-translate --emit-step-c --emit-step-prefetch=0 %s | FileCheck %s --check-prefix=NOPF

// CHECK-LABEL: The static memory plan: per dp_shard rank the arena bytes (with nothing
// CHECK-NEXT: * shared: 9216, 9216), per parameter the byte offsets of
// CHECK-NEXT: * its buffers (-1: none); gradients live during backward only. */
// CHECK-NEXT: static const int64_t mfsdp_arena_bytes[2] = {6144, 6144};
// CHECK-LABEL: static const mfsdp_param_offsets mfsdp_offsets[2] = {
// CHECK-NEXT: /* master, exp_avg, exp_avg_sq, grad_shard, full, full_backward, grad */
// CHECK-NEXT: {0, 1024, 2048, 3072, 4096, 4096, 5120},
// CHECK-NEXT: {512, 1536, 2560, 3584, 4096, 4096, 5120},
// CHECK-NEXT: };
// CHECK-LABEL: static const mfsdp_memory_plan mfsdp_the_memory = {
// CHECK-NEXT: .num_shard_ranks = 2,
// CHECK-NEXT: .arena_bytes = mfsdp_arena_bytes,
// CHECK-NEXT: .params = mfsdp_offsets,
// CHECK-NEXT: .staging = 4096,
// CHECK-NEXT: .keep_grads = 0,
// CHECK-NEXT: };
// CHECK-LABEL: static const mfsdp_plan mfsdp_the_plan = {
// NOPF: .keep_grads = 0,
// NOPF-NEXT: };
// CHECK: .memory = &mfsdp_the_memory,

// ACC: gradients kept for accumulation. */
// ACC-NEXT: static const int64_t mfsdp_arena_bytes[2] = {7168, 7168};
// ACC: {2048, 3072, 4096, 5120, 6144, 6144, 0},
// ACC-NEXT: {2560, 3584, 4608, 5632, 6144, 6144, 1024},
// ACC: .keep_grads = 1,
// ACC-NEXT: };

// PF: static const int64_t mfsdp_arena_bytes[2] = {8192, 8192};
// PF: /* master, exp_avg, exp_avg_sq, grad_shard, full, full_backward, grad */
// PF-NEXT: {0, 1024, 2048, 3072, 4096, 6144, 7168},
// PF-NEXT: {512, 1536, 2560, 3584, 5120, 4096, 5120},
// PF-LABEL: static const mfsdp_memory_plan mfsdp_the_memory = {
// PF: .keep_grads = 0,
// PF-NEXT: .prefetch = 1,
// PF-NEXT: };

plan.graph @two {
  plan.mesh @mesh ["dp_shard" = 2]
  plan.policy adamw zero 3
  plan.param @a : tensor<4x64xf32> linear module "a" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1>
  plan.param @b : tensor<4x64xf32> linear module "b" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 1.0e-03, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1>
  plan.unit @ua index 0 params [@a] cost <fwd_flops = 1, bwd_flops = 2, act_bytes = 0, recompute = false>
  plan.unit @ub index 1 params [@b] cost <fwd_flops = 1, bwd_flops = 2, act_bytes = 0, recompute = false>
}

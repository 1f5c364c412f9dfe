// RUN: mfsdp-opt %s --canonicalize --cse | FileCheck %s

// The memory effects the ops declare let generic transformations reason
// about a step: an allocation no op uses is dead, identical allocations are
// distinct buffers, and compute, optimizer kernels, collectives and waits
// stay (they act on the trainer's state and the communicators' streams)
// even where they write no buffer.
// CHECK-LABEL: sched.step @s
sched.step @s world 2 tokens 1 microbatches 1 {
  // CHECK-NOT: "unused"
  %unused = sched.alloc "unused" bytes 8
  // CHECK: %[[A:.*]] = sched.alloc "a" bytes 8 persistent
  // CHECK: %[[B:.*]] = sched.alloc "a" bytes 8 persistent
  %a = sched.alloc "a" bytes 8 persistent
  %b = sched.alloc "a" bytes 8 persistent
  // CHECK: %[[T:.*]] = sched.all_reduce "r" %[[A]] -> %[[A]]
  %t = sched.all_reduce "r" %a -> %a on ["dp_shard"] ranks 2 bytes 8 comm 0 phase backward async : !sched.token
  // CHECK: sched.wait %[[T]]
  sched.wait %t
  // CHECK: sched.compute forward "f" reads(%[[A]], %[[B]]) writes()
  sched.compute forward "f" reads(%a, %b) writes() flops 1.0 bytes 0 phase forward
  // CHECK: sched.optimizer adamw "o" reads() writes()
  sched.optimizer adamw "o" reads() writes() flops 0.0 bytes 0 phase optimizer
}

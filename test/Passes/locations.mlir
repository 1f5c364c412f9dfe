// RUN: mfsdp-opt %s --mfsdp-schedule-overlap=optimizer-order=landing --mfsdp-plan-memory -mlir-print-debuginfo | FileCheck %s

// The schedule passes rewrite the step through its plain C++ form and back;
// every op keeps the location it had, and a wait made by the overlap pass
// takes its collective's.
// CHECK-LABEL: sched.step @s
sched.step @s world 2 tokens 1 microbatches 1 {
  // CHECK: sched.alloc "a" {{.*}} loc(#[[A:.*]])
  %a = sched.alloc "a" bytes 8 persistent loc("alloc_a")
  %b = sched.alloc "b" bytes 8 persistent loc("alloc_b")
  // CHECK: sched.alloc "ga" {{.*}} loc(#[[GA:.*]])
  %ga = sched.alloc "ga" bytes 16 loc("alloc_ga")
  %gb = sched.alloc "gb" bytes 16 loc("alloc_gb")
  // CHECK: %[[T:.*]] = sched.all_gather {{.*}} async {{.*}}: !sched.token loc(#[[GATHER:.*]])
  // CHECK: %[[U:.*]] = sched.all_gather {{.*}} async {{.*}}: !sched.token loc(#[[GATHERB:.*]])
  sched.all_gather "all_gather" %a -> %ga on ["dp_shard"] ranks 2 bytes 16 comm 0 phase forward params [@a] loc("gather_a")
  sched.all_gather "all_gather" %b -> %gb on ["dp_shard"] ranks 2 bytes 16 comm 0 phase forward params [@b] loc("gather_b")
  // CHECK: sched.wait %[[T]] loc(#[[GATHER]])
  // CHECK: sched.wait %[[U]] loc(#[[GATHERB]])
  // CHECK: sched.compute forward "forward" {{.*}} loc(#[[FWD:.*]])
  sched.compute forward "forward" reads(%ga, %gb) writes() flops 1.0 bytes 0 phase forward loc("forward")
  sched.dealloc %ga loc("free_ga")
  sched.dealloc %gb loc("free_gb")
}
// CHECK-DAG: #[[A]] = loc("alloc_a")
// CHECK-DAG: #[[GA]] = loc("alloc_ga")
// CHECK-DAG: #[[GATHER]] = loc("gather_a")
// CHECK-DAG: #[[GATHERB]] = loc("gather_b")
// CHECK-DAG: #[[FWD]] = loc("forward")

// RUN: mfsdp-opt %s | FileCheck %s
// RUN: mfsdp-opt %s | mfsdp-opt | FileCheck %s
// RUN: mfsdp-opt %s -mlir-print-op-generic | mfsdp-opt | FileCheck %s

// Every sched op prints and parses back.
// CHECK-LABEL: sched.step @s world 2 tokens 8 microbatches 1 arena_bytes [1.024000e+03, 1.024000e+03] peak_bytes [5.120000e+02, 5.120000e+02] {
sched.step @s world 2 tokens 8 microbatches 1 arena_bytes [1024.0, 1024.0] peak_bytes [512.0, 512.0] {
  // CHECK: %[[SHARD:.*]] = sched.alloc "shard" bytes 6.400000e+01 persistent offset 0
  %shard = sched.alloc "shard" bytes 64.0 persistent offset 0
  // CHECK: %[[OWNED:.*]] = sched.alloc "owned" bytes 1.280000e+02 persistent only_rank 1
  %owned = sched.alloc "owned" bytes 128.0 persistent only_rank 1
  // CHECK: %[[G:.*]] = sched.alloc "gathered" bytes 2.560000e+02
  %g = sched.alloc "gathered" bytes 256.0
  // CHECK: %[[T0:.*]] = sched.all_gather %[[SHARD]] -> %[[G]] on ["dp_shard"] ranks 2 bytes 1.280000e+02 comm 0 phase forward group 0 params [@n] async : !sched.token
  %t0 = sched.all_gather %shard -> %g on ["dp_shard"] ranks 2 bytes 128.0 comm 0 phase forward group 0 params [@n] async : !sched.token
  // CHECK: %[[T1:.*]] = sched.all_gather_v %[[OWNED]] -> %[[G]] on ["dp_shard"] ranks 2 bytes 1.280000e+02 chunks [0.000000e+00, 1.280000e+02] comm 2 phase forward async : !sched.token
  %t1 = sched.all_gather_v %owned -> %g on ["dp_shard"] ranks 2 bytes 128.0 chunks [0.0, 128.0] comm 2 phase forward async : !sched.token
  // CHECK: sched.wait %[[T0]]
  sched.wait %t0
  // CHECK: sched.wait %[[T1]]
  sched.wait %t1
  // CHECK: sched.compute forward "forward u" unit @u reads(%[[G]]) writes() flops 1.000000e+09 bytes 0.000000e+00 phase forward group 0
  sched.compute forward "forward u" unit @u reads(%g) writes() flops 1.0e9 bytes 0.0 phase forward group 0
  // CHECK: sched.compute copy "copy" reads(%[[G]]) writes(%[[SHARD]]) flops 0.000000e+00 bytes 5.120000e+02 phase backward
  sched.compute copy "copy" reads(%g) writes(%shard) flops 0.0 bytes 512.0 phase backward
  // CHECK: sched.reduce_scatter %[[G]] -> %[[SHARD]] on ["dp_shard"] ranks 2 bytes 1.280000e+02 comm 0 phase backward
  sched.reduce_scatter %g -> %shard on ["dp_shard"] ranks 2 bytes 128.0 comm 0 phase backward
  // CHECK: sched.reduce_scatter_v %[[G]] -> %[[OWNED]] on ["dp_shard"] ranks 2 bytes 1.280000e+02 chunks [0.000000e+00, 1.280000e+02] comm 0 phase backward
  sched.reduce_scatter_v %g -> %owned on ["dp_shard"] ranks 2 bytes 128.0 chunks [0.0, 128.0] comm 0 phase backward
  // CHECK: sched.all_reduce %[[SHARD]] -> %[[SHARD]] on ["dp_replicate"] ranks 2 bytes 6.400000e+01 comm 1 phase backward inter_node
  sched.all_reduce %shard -> %shard on ["dp_replicate"] ranks 2 bytes 64.0 comm 1 phase backward inter_node
  // CHECK: sched.dealloc %[[G]]
  sched.dealloc %g
  // CHECK: sched.optimizer muon "muon" reads(%[[OWNED]]) writes(%[[OWNED]]) flops 1.000000e+06 bytes 2.560000e+03 only_rank 1 phase optimizer params [@w]
  sched.optimizer muon "muon" reads(%owned) writes(%owned) flops 1.0e6 bytes 2560.0 only_rank 1 phase optimizer params [@w]
}

// RUN: mfsdp-opt %s | FileCheck %s
// RUN: mfsdp-opt %s | mfsdp-opt | FileCheck %s
// RUN: mfsdp-opt %s -mlir-print-op-generic | mfsdp-opt | FileCheck %s
// RUN: mfsdp-opt %s | FileCheck %s --check-prefix=EXACT --strict-whitespace

// The ops written in the millions print their properties through their
// format and `attr-dict` the discardable attributes alone
// (dialects/QuietProperties.h): the text is exactly as before, one space
// between words and none at the end, a discardable attribute kept.
// EXACT: {{^ +}}%0 = sched.alloc "shard" bytes 64 persistent offset 0{{$}}
// EXACT: {{^ +}}%4 = sched.all_gather "all gather" %0 -> %3 on ["dp_shard"] ranks 2 bytes 128 comm 0 phase forward group 0 params [@n] async : !sched.token{{$}}
// EXACT: {{^ +}}sched.compute forward "forward u" unit @u reads(%3) writes() flops 1.000000e+09 bytes 0 phase forward group 0{{$}}
// EXACT: {{^ +}}sched.optimizer muon "muon" reads(%1) writes(%1) flops 1.000000e+06 bytes 2560 only_rank 1 phase optimizer params [@w] ns_kernels 39{{$}}
// EXACT: {{^ +}}%{{[0-9]+}} = sched.alloc "noted" bytes 8 {note = "kept"}{{$}}

// Every sched op prints and parses back.
// CHECK-LABEL: sched.step @s world 2 tokens 8 microbatches 1 arena_bytes [1024, 1024] peak_bytes [512, 512] {
sched.step @s world 2 tokens 8 microbatches 1 arena_bytes [1024, 1024] peak_bytes [512, 512] {
  // CHECK: %[[SHARD:.*]] = sched.alloc "shard" bytes 64 persistent offset 0
  %shard = sched.alloc "shard" bytes 64 persistent offset 0
  // CHECK: %[[OWNED:.*]] = sched.alloc "owned" bytes 128 persistent only_rank 1
  %owned = sched.alloc "owned" bytes 128 persistent only_rank 1
  // CHECK: %[[CHUNK:.*]] = sched.alloc "owned chunk" bytes 128 persistent
  %chunk = sched.alloc "owned chunk" bytes 128 persistent
  // CHECK: %[[G:.*]] = sched.alloc "gathered" bytes 256
  %g = sched.alloc "gathered" bytes 256
  // CHECK: %[[T0:.*]] = sched.all_gather "all gather" %[[SHARD]] -> %[[G]] on ["dp_shard"] ranks 2 bytes 128 comm 0 phase forward group 0 params [@n] async : !sched.token
  %t0 = sched.all_gather "all gather" %shard -> %g on ["dp_shard"] ranks 2 bytes 128 comm 0 phase forward group 0 params [@n] async : !sched.token
  // CHECK: %[[T1:.*]] = sched.all_gather_v "all gather v" %[[CHUNK]] -> %[[G]] on ["dp_shard"] ranks 2 bytes 128 chunks [0, 128] comm 2 phase forward async : !sched.token
  %t1 = sched.all_gather_v "all gather v" %chunk -> %g on ["dp_shard"] ranks 2 bytes 128 chunks [0, 128] comm 2 phase forward async : !sched.token
  // CHECK: sched.wait %[[T0]]
  sched.wait %t0
  // CHECK: sched.wait %[[T1]]
  sched.wait %t1
  // CHECK: sched.compute forward "forward u" unit @u reads(%[[G]]) writes() flops 1.000000e+09 bytes 0 phase forward group 0
  sched.compute forward "forward u" unit @u reads(%g) writes() flops 1.0e9 bytes 0 phase forward group 0
  // CHECK: sched.compute copy "copy" reads(%[[G]]) writes(%[[SHARD]]) flops 0.000000e+00 bytes 512 phase backward
  sched.compute copy "copy" reads(%g) writes(%shard) flops 0.0 bytes 512 phase backward
  // CHECK: sched.reduce_scatter "reduce scatter" %[[G]] -> %[[SHARD]] on ["dp_shard"] ranks 2 bytes 128 comm 0 phase backward
  sched.reduce_scatter "reduce scatter" %g -> %shard on ["dp_shard"] ranks 2 bytes 128 comm 0 phase backward
  // CHECK: sched.reduce_scatter_v "reduce scatter v" %[[G]] -> %[[CHUNK]] on ["dp_shard"] ranks 2 bytes 128 chunks [0, 128] comm 0 phase backward
  sched.reduce_scatter_v "reduce scatter v" %g -> %chunk on ["dp_shard"] ranks 2 bytes 128 chunks [0, 128] comm 0 phase backward
  // CHECK: sched.all_reduce "all reduce" %[[SHARD]] -> %[[SHARD]] on ["dp_replicate"] ranks 2 bytes 64 comm 1 phase backward inter_node
  sched.all_reduce "all reduce" %shard -> %shard on ["dp_replicate"] ranks 2 bytes 64 comm 1 phase backward inter_node
  // CHECK: sched.dealloc %[[G]]
  sched.dealloc %g
  // CHECK: sched.optimizer muon "muon" reads(%[[OWNED]]) writes(%[[OWNED]]) flops 1.000000e+06 bytes 2560 only_rank 1 phase optimizer params [@w] ns_kernels 39
  sched.optimizer muon "muon" reads(%owned) writes(%owned) flops 1.0e6 bytes 2560 only_rank 1 phase optimizer params [@w] ns_kernels 39
  // torch.optim.Muon's (a baseline's) counts the kernels torch launches.
  // CHECK: sched.optimizer muon "muon (gathered) w" reads(%[[OWNED]]) writes(%[[SHARD]]) flops 3.200000e+03 torch_ns bytes 1600 phase optimizer ns_kernels 33
  sched.optimizer muon "muon (gathered) w" reads(%owned) writes(%shard) flops 3.2e3 torch_ns bytes 1600 phase optimizer ns_kernels 33
  // CHECK: sched.alloc "noted" bytes 8 {note = "kept"}
  %noted = sched.alloc "noted" bytes 8 {note = "kept"}
}

// Names, symbols and FLOP counts print through the ops' own directives
// (dialects/FastText.h): quotes and escapes, quoted symbols and MLIR's
// float forms (decimal where it reads back exactly, else hexadecimal) are
// exactly the text of MLIR's attribute printer.
// EXACT: {{^ +}}%0 = sched.alloc "quote \22 back \\ tab \09 end" bytes 64 persistent{{$}}
// EXACT: {{^ +}}%1 = sched.all_gather "gather \22x\22" %0 -> %0 on ["dp_shard"] ranks 2 bytes 128 comm 0 phase forward params [@"layers.0 w", @"0w", @_ok$.x, @n] async : !sched.token{{$}}
// EXACT: {{^ +}}sched.compute forward "fwd" unit @"unit 0" reads(%0) writes() flops 0x41E2800000000000 bytes 0 phase forward{{$}}
// EXACT: {{^ +}}sched.compute forward "fwd" unit @u reads(%0) writes() flops 1.500000e-03 bytes 0 phase forward{{$}}
// EXACT: {{^ +}}sched.compute forward "fwd" unit @u reads(%0) writes() flops 123456789.123 bytes 0 phase forward{{$}}
// EXACT: {{^ +}}sched.optimizer adamw "opt" reads(%0) writes(%0) flops 2.500000e+00 bytes 0 phase optimizer params [@"a b"]{{$}}

// CHECK-LABEL: sched.step @odd
sched.step @odd world 2 tokens 8 microbatches 1 {
  // CHECK: sched.alloc "quote \22 back \\ tab \09 end"
  %a = sched.alloc "quote \" back \\ tab \09 end" bytes 64 persistent
  // CHECK: params [@"layers.0 w", @"0w", @_ok$.x, @n]
  %t = sched.all_gather "gather \"x\"" %a -> %a on ["dp_shard"] ranks 2 bytes 128 comm 0 phase forward params [@"layers.0 w", @"0w", @_ok$.x, @n] async : !sched.token
  sched.wait %t
  // CHECK: unit @"unit 0" {{.*}} flops 0x41E2800000000000
  sched.compute forward "fwd" unit @"unit 0" reads(%a) writes() flops 0x41E2800000000000 bytes 0 phase forward
  // CHECK: flops 1.500000e-03
  sched.compute forward "fwd" unit @u reads(%a) writes() flops 1.5e-3 bytes 0 phase forward
  // CHECK: flops 123456789.123
  sched.compute forward "fwd" unit @u reads(%a) writes() flops 123456789.123 bytes 0 phase forward
  // CHECK: params [@"a b"]
  sched.optimizer adamw "opt" reads(%a) writes(%a) flops 2.5 bytes 0 phase optimizer params [@"a b"]
}

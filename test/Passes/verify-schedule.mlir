// RUN: mfsdp-opt %s -split-input-file -verify-diagnostics --mfsdp-verify-schedule
// RUN: mfsdp-opt %S/Inputs/layers4.mlir --mfsdp-pipeline -o /dev/null
// RUN: mfsdp-translate --import-mfsdp-graph %examples/models/matrixfsdp-32l.json -o %t.mlir
// RUN: not mfsdp-opt %t.mlir --mfsdp-pipeline="policy=mixed_muon_adamw memory-cap-mb=8192" -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOCAP
// RUN: mfsdp-opt %t.mlir --mfsdp-pipeline="policy=mixed_muon_adamw memory-cap-mb=20480" -o /dev/null

// A buffer read before the wait of the collective that fills it.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "shard" bytes 8 persistent
  %g = sched.alloc "gathered" bytes 16
  %t = sched.all_gather "all_gather" %a -> %g on ["dp_shard"] ranks 2 bytes 16 comm 0 phase forward async : !sched.token
  // expected-error @+1 {{'forward' uses 'gathered' before the wait of 'all_gather', which fills it}}
  sched.compute forward "forward" reads(%g) writes() flops 1.0 bytes 0 phase forward
  sched.wait %t
  sched.dealloc %g
}

// -----

// A buffer freed while a collective still reads it.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "grads" bytes 16
  %b = sched.alloc "shard" bytes 8 persistent
  %t = sched.reduce_scatter "reduce_scatter" %a -> %b on ["dp_shard"] ranks 2 bytes 16 comm 0 phase backward async : !sched.token
  // expected-error @+1 {{'free grads' frees 'grads' while 'reduce_scatter' still reads it}}
  sched.dealloc %a
  sched.wait %t
}

// -----

// A buffer overwritten while a collective still reads it.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "grads" bytes 16
  %b = sched.alloc "shard" bytes 8 persistent
  %t = sched.reduce_scatter "reduce_scatter" %a -> %b on ["dp_shard"] ranks 2 bytes 16 comm 0 phase backward async : !sched.token
  // expected-error @+1 {{'backward' overwrites 'grads' while 'reduce_scatter' still reads it}}
  sched.compute backward "backward" reads() writes(%a) flops 1.0 bytes 0 phase backward
  sched.wait %t
  sched.dealloc %a
}

// -----

// The IR has no way to issue a collective on one rank only: only_rank is
// not an attribute of collectives, so a step whose ranks would issue
// different sequences cannot even be written. A collective waited for too
// late is still caught.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "shard" bytes 8 persistent
  %g = sched.alloc "gathered" bytes 16
  %t = sched.all_gather "all_gather" %a -> %g on ["dp_shard"] ranks 2 bytes 16 comm 0 phase forward async : !sched.token
  // expected-error @+1 {{'optimizer' uses 'gathered' before the wait of 'all_gather', which fills it}}
  sched.optimizer adamw "optimizer" reads(%g) writes() flops 0.0 bytes 8 phase optimizer
  sched.wait %t
}

// The memory cap: the 32-layer model on 8 ranks needs about 13 GiB per
// rank; 20 GiB passes, 8 GiB fails on the op after which the peak is live.
// NOCAP: error: rank 0 needs a {{[0-9]+}}-byte arena ({{[0-9]+}} bytes live at the peak, after this op), over the memory cap of 8589934592 bytes

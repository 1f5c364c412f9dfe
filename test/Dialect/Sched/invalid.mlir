// RUN: mfsdp-opt %s -split-input-file -verify-diagnostics

// An async collective returns a token.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 8 persistent
  // expected-error @+1 {{'sched.all_gather' op is async and must return a !sched.token}}
  "sched.all_gather"(%a, %a) <{name = "g", mesh_axes = ["dp_shard"], ranks = 2 : i64, bytes = 8 : i64, comm = 0 : i64, phase = 0 : i32, async}> : (!sched.buffer, !sched.buffer) -> ()
}

// -----

// The owner collectives say what each rank contributes.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 8 persistent
  // expected-error @+1 {{'sched.all_gather_v' op needs the bytes each rank contributes (chunks)}}
  sched.all_gather_v "all_gather_v" %a -> %a on ["dp_shard"] ranks 2 bytes 8 comm 0 phase forward
}

// -----

// Chunks add up to the bytes moved.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 8 persistent
  // expected-error @+1 {{'sched.reduce_scatter_v' op chunks sum to 6 bytes but the collective moves 8}}
  sched.reduce_scatter_v "reduce_scatter_v" %a -> %a on ["dp_shard"] ranks 2 bytes 8 chunks [2, 4] comm 0 phase backward
}

// -----

// One chunk per rank.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 8 persistent
  // expected-error @+1 {{'sched.all_gather_v' op has 1 chunks for 2 ranks}}
  sched.all_gather_v "all_gather_v" %a -> %a on ["dp_shard"] ranks 2 bytes 8 chunks [8] comm 0 phase forward
}

// -----

// Only the _v collectives take chunks.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 8 persistent
  // expected-error @+1 {{'sched.all_gather' op takes no chunks; only the _v collectives do}}
  sched.all_gather "all_gather" %a -> %a on ["dp_shard"] ranks 2 bytes 8 chunks [4, 4] comm 0 phase forward
}

// -----

// Every started collective is waited for.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 8 persistent
  // expected-error @+1 {{'sched.all_gather' op starts a collective whose token is never waited for}}
  %t = sched.all_gather "all_gather" %a -> %a on ["dp_shard"] ranks 2 bytes 8 comm 0 phase forward async : !sched.token
}

// -----

// A token is waited for once.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 8 persistent
  %t = sched.all_gather "all_gather" %a -> %a on ["dp_shard"] ranks 2 bytes 8 comm 0 phase forward async : !sched.token
  sched.wait %t
  // expected-error @+1 {{'sched.wait' op waits for a token that was already waited for}}
  sched.wait %t
}

// -----

// A freed buffer is not used again.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 8
  sched.dealloc %a
  // expected-error @+1 {{'sched.compute' op uses a buffer after its sched.dealloc}}
  sched.compute forward "f" reads(%a) writes() flops 1.0 bytes 0 phase forward
}

// -----

// Persistent buffers live all step.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 8 persistent
  // expected-error @+1 {{'sched.dealloc' op deallocates a persistent buffer}}
  sched.dealloc %a
}

// -----

// A step runs on at least one rank.
// expected-error @+1 {{'sched.step' op world must be at least 1, got 0}}
sched.step @s world 0 tokens 1 microbatches 1 {
}

// -----

// only_rank names a rank of the step.
sched.step @s world 2 tokens 1 microbatches 1 {
  // expected-error @+1 {{'sched.optimizer' op only_rank 2 is outside the 2 ranks}}
  sched.optimizer adamw "a" reads() writes() flops 0.0 bytes 8 only_rank 2 phase optimizer
}

// -----

// ns_kernels counts kernels: never negative.
sched.step @s world 2 tokens 1 microbatches 1 {
  // expected-error @+1 {{'sched.optimizer' op ns_kernels must be in [0, 2^31), got -3}}
  sched.optimizer muon "m" reads() writes() flops 1.0 bytes 8 phase optimizer ns_kernels -3
}

// -----

// Collectives need a group of at least one rank.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 8 persistent
  // expected-error @+1 {{'sched.all_reduce' op ranks must be at least 1, got 0}}
  sched.all_reduce "all_reduce" %a -> %a on ["dp_shard"] ranks 0 bytes 8 comm 0 phase backward
}

// -----

// Costs are finite and non-negative.
sched.step @s world 2 tokens 1 microbatches 1 {
  // expected-error @+1 {{'sched.compute' op flops and bytes must be finite and non-negative}}
  sched.compute forward "f" reads() writes() flops -1.0 bytes 0 phase forward
}

// -----

// A gather's destination holds the whole gathered buffer.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 8 persistent
  %g = sched.alloc "g" bytes 8
  // expected-error @+1 {{'sched.all_gather' op moves 16 bytes but its destination buffer holds 8}}
  sched.all_gather "g" %a -> %g on ["dp_shard"] ranks 2 bytes 16 comm 0 phase forward
  sched.dealloc %g
}

// -----

// A reduction's source holds the whole unreduced buffer.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 8 persistent
  %s = sched.alloc "s" bytes 8 persistent
  // expected-error @+1 {{'sched.reduce_scatter_v' op moves 16 bytes but its source buffer holds 8}}
  sched.reduce_scatter_v "r" %a -> %s on ["dp_shard"] ranks 2 bytes 16 chunks [8, 8] comm 0 phase backward
}

// -----

// Chunks are non-negative.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 8 persistent
  // expected-error @+1 {{'sched.all_gather_v' op chunks must be non-negative, got -8}}
  sched.all_gather_v "g" %a -> %a on ["dp_shard"] ranks 2 bytes 8 chunks [16, -8] comm 0 phase forward
}

// -----

// A collective has a mesh axis.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 8 persistent
  // expected-error @+1 {{'sched.all_reduce' op needs at least one mesh axis}}
  sched.all_reduce "r" %a -> %a on [] ranks 2 bytes 8 comm 0 phase backward
}

// -----

// Buffer sizes are whole non-negative byte counts.
sched.step @s world 2 tokens 1 microbatches 1 {
  // expected-error @+1 {{'sched.alloc' op bytes must be non-negative, got -8}}
  %a = sched.alloc "a" bytes -8 persistent
}

// -----

// A token without async.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 8 persistent
  // expected-error @+1 {{'sched.all_gather' op returns a token but is not async}}
  %t = "sched.all_gather"(%a, %a) <{name = "g", mesh_axes = ["dp_shard"], ranks = 2 : i64, bytes = 8 : i64, comm = 0 : i64, phase = 0 : i32}> : (!sched.buffer, !sched.buffer) -> !sched.token
  sched.wait %t
}

// -----

// Every rank calls a collective, so its buffers exist on every rank.
sched.step @s world 2 tokens 1 microbatches 1 {
  %a = sched.alloc "a" bytes 8 persistent
  %o = sched.alloc "owned" bytes 16 persistent only_rank 1
  // expected-error @+1 {{'sched.all_gather' op uses buffer 'owned', which exists on rank 1 only; every rank of the group calls a collective}}
  sched.all_gather "g" %a -> %o on ["dp_shard"] ranks 2 bytes 16 comm 0 phase forward
}

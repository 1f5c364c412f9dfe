// RUN: mfsdp-opt %s -split-input-file -verify-diagnostics -allow-unregistered-dialect

// An external parameter names the dim that owns it.
// expected-error @+1 {{an external parameter needs at least one owning mesh dim (for example "tp" or "ep")}}
"test.use"() {p = #plan.external<axes = []>} : () -> ()

// -----

// External owners are tensor/expert-parallel dims.
// expected-error @+1 {{external parameters are owned by a tensor/expert-parallel dim, not the data-parallel dim "dp_shard"}}
"test.use"() {p = #plan.external<axes = ["dp_shard"]>} : () -> ()

// -----

// Axes are listed once.
// expected-error @+1 {{row_shard lists mesh axis "dp_shard" twice}}
"test.use"() {p = #plan.row_shard<dim = 0, axes = ["dp_shard", "dp_shard"]>} : () -> ()

// -----

// Axes are strings.
// expected-error @+1 {{owner axes must be non-empty strings, got 3}}
"test.use"() {p = #plan.owner<rank = 0, axes = [3]>} : () -> ()

// -----

// A placement names at least one axis.
// expected-error @+1 {{owner needs at least one mesh axis}}
"test.use"() {p = #plan.owner<rank = 0, axes = []>} : () -> ()

// -----

// Owner ranks are non-negative.
// expected-error @+1 {{owner rank must be non-negative, got -1}}
"test.use"() {p = #plan.owner<rank = -1, axes = ["dp_shard"]>} : () -> ()

// -----

// Shard dims are non-negative.
// expected-error @+1 {{row_shard dim must be non-negative, got -1}}
"test.use"() {p = #plan.row_shard<dim = -1, axes = ["dp_shard"]>} : () -> ()

// -----

// Block extents are positive.
// expected-error @+1 {{block_shard extents must be positive, got 0}}
"test.use"() {p = #plan.block_shard<block = [0, 4], axes = ["dp_shard"]>} : () -> ()

// -----

// A learning rate is positive.
// expected-error @+1 {{adamw lr must be positive, got 0}}
"test.use"() {o = #plan.adamw<lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0>} : () -> ()

// -----

// Betas lie in [0, 1).
// expected-error @+1 {{adamw beta2 must be in [0, 1), got 1}}
"test.use"() {o = #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 1.0, eps = 1.0e-08, weight_decay = 0>} : () -> ()

// -----

// eps is positive.
// expected-error @+1 {{adamw eps must be positive, got -1.0e-08}}
"test.use"() {o = #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 0.999, eps = -1.0e-08, weight_decay = 0>} : () -> ()

// -----

// Weight decay is non-negative.
// expected-error @+1 {{sgd weight_decay must be non-negative, got -0.1}}
"test.use"() {o = #plan.sgd<lr = 0.1, momentum = 0.9, weight_decay = -0.1, nesterov = false>} : () -> ()

// -----

// Nesterov needs momentum.
// expected-error @+1 {{sgd nesterov needs a non-zero momentum}}
"test.use"() {o = #plan.sgd<lr = 0.1, momentum = 0, weight_decay = 0, nesterov = true>} : () -> ()

// -----

// Muon momentum lies in [0, 1).
// expected-error @+1 {{muon momentum must be in [0, 1), got 1.5}}
"test.use"() {o = #plan.muon<lr = 0.02, momentum = 1.5, weight_decay = 0, nesterov = true, ns_steps = 5, scale = original>} : () -> ()

// -----

// Newton-Schulz runs at least once.
// expected-error @+1 {{muon ns_steps must be at least 1, got 0}}
"test.use"() {o = #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0, nesterov = true, ns_steps = 0, scale = original>} : () -> ()

// -----

// Newton-Schulz runs in fp32 or bf16, nothing else.
// expected-error @+2 {{expected one of [fp32, bf16] for precision of Muon's Newton-Schulz products, got: fp16}}
// expected-error @+1 {{failed to parse Plan_MuonAttr parameter 'ns_precision'}}
"test.use"() {o = #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0, nesterov = true, ns_steps = 5, scale = original, ns_precision = fp16>} : () -> ()

// -----

// Unknown Muon scales do not parse.
// expected-error @+2 {{expected one of [match_rms_adamw, original] for Muon update scale, got: huge}}
// expected-error @+1 {{failed to parse Plan_MuonAttr parameter 'scale'}}
"test.use"() {o = #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0, nesterov = true, ns_steps = 5, scale = huge>} : () -> ()

// -----

// Costs are non-negative.
// expected-error @+1 {{cost bwd_flops must be non-negative, got -5}}
"test.use"() {c = #plan.cost<fwd_flops = 1, bwd_flops = -5, act_bytes = 0, recompute = false>} : () -> ()

// -----

// A kernel's kind is one of three.
// expected-error @+1 {{kernel kind must be gemm, attention or memory, got 'conv'}}
"test.use"() {k = #plan.kernel<"conv", shape = [1, 2, 1], scale = 1>} : () -> ()

// -----

// A GEMM's shape is [n, k, count].
// expected-error @+1 {{kernel 'gemm': a gemm kernel's shape is [n, k, count], each positive}}
"test.use"() {k = #plan.kernel<"gemm", shape = [64, 32], scale = 1>} : () -> ()

// -----

// Attention is causal or not: 0 or 1.
// expected-error @+1 {{kernel 'attention': an attention kernel's shape is [heads, head_dim, head_dim_v, causal (0 or 1), seq], the others positive}}
"test.use"() {k = #plan.kernel<"attention", shape = [4, 8, 8, 2, 128], scale = 1>} : () -> ()

// -----

// A cost lists kernels only.
// expected-error @+1 {{cost kernels[0] must be a #plan.kernel, got 3 : i64}}
"test.use"() {c = #plan.cost<fwd_flops = 1, bwd_flops = 2, act_bytes = 0, recompute = false, kernels = [3]>} : () -> ()

// -----

// A block shape has one extent per tensor dim, so at least one; an empty
// one does not even parse (builders hit the verifier's own check).
// expected-error @+2 {{expected integer value}}
// expected-error @+1 {{failed to parse Plan_BlockShardAttr parameter 'block'}}
"test.use"() {p = #plan.block_shard<block = [], axes = ["dp_shard"]>} : () -> ()

// -----

// And at most 1000 times: the count travels as a 32-bit int.
// expected-error @+1 {{muon ns_steps must be at most 1000, got 9223372036854775807}}
"test.use"() {o = #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0, nesterov = true, ns_steps = 9223372036854775807, scale = original>} : () -> ()

// -----

// The dialect reuses the attribute an earlier parse of the same text made;
// only a parse that succeeded is kept, so a text that differs, however
// little, is parsed and checked on its own.
"test.use"() {p = #plan.owner<rank = 0, axes = ["dp_shard"]>, q = #plan.owner<rank = 0, axes = ["dp_shard"]>} : () -> ()
// expected-error @+1 {{owner needs at least one mesh axis}}
"test.use"() {p = #plan.owner<rank = 0, axes = []>} : () -> ()

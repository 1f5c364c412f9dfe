// RUN: mfsdp-opt %s -split-input-file -verify-diagnostics

// Every untied parameter belongs to a unit.
plan.graph @g {
  plan.param @a : tensor<4x4xf32> linear module "a"
  // expected-error @+1 {{'plan.param' op is in no unit; every parameter that is not tied belongs to exactly one unit}}
  plan.param @b : tensor<4x4xf32> linear module "b"
  plan.unit @u index 0 params [@a] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// A parameter is in at most one unit.
plan.graph @g {
  plan.param @a : tensor<4x4xf32> linear module "a"
  plan.unit @u0 index 0 params [@a] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
  // expected-error @+1 {{'plan.unit' op lists parameter @a, which is already in unit @u0}}
  plan.unit @u1 index 1 params [@a] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Units refer to parameters that exist.
plan.graph @g {
  plan.param @a : tensor<4x4xf32> linear module "a"
  // expected-error @+1 {{'plan.unit' op refers to unknown parameter @ghost}}
  plan.unit @u index 0 params [@a, @ghost] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Unit indices have no gaps.
plan.graph @g {
  plan.param @a : tensor<4x4xf32> linear module "a"
  plan.param @b : tensor<4x4xf32> linear module "b"
  plan.unit @u0 index 0 params [@a] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
  // expected-error @+1 {{'plan.unit' op has index 2 but the graph has 2 units; unit indices must be 0..1 without gaps}}
  plan.unit @u2 index 2 params [@b] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// The largest index is refused like any other out of range (it is no
// crash: the verifier checks the range before using the index).
plan.graph @g {
  plan.param @a : tensor<4x4xf32> linear module "a"
  // expected-error @+1 {{'plan.unit' op has index 9223372036854775807 but the graph has 1 unit; unit indices must be 0..0 without gaps}}
  plan.unit @u index 9223372036854775807 params [@a] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Unit indices are unique.
plan.graph @g {
  plan.param @a : tensor<4x4xf32> linear module "a"
  plan.param @b : tensor<4x4xf32> linear module "b"
  plan.unit @u0 index 0 params [@a] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
  // expected-error @+1 {{'plan.unit' op index 0 is already used by unit @u0}}
  plan.unit @u1 index 0 params [@b] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Unit indices are non-negative.
plan.graph @g {
  plan.param @a : tensor<4x4xf32> linear module "a"
  // expected-error @+1 {{'plan.unit' op index must be non-negative, got -1}}
  plan.unit @u index -1 params [@a] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// A unit holds at least one parameter.
plan.graph @g {
  // expected-error @+1 {{'plan.unit' op needs at least one parameter}}
  plan.unit @u index 0 params [] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// A unit lists a parameter once.
plan.graph @g {
  plan.param @a : tensor<4x4xf32> linear module "a"
  // expected-error @+1 {{'plan.unit' op lists parameter @a twice}}
  plan.unit @u index 0 params [@a, @a] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Unit and parameter names share the symbol table.
plan.graph @g {
  // expected-note @+1 {{see existing symbol definition here}}
  plan.param @a : tensor<4x4xf32> linear module "a"
  // expected-error @+1 {{redefinition of symbol named 'a'}}
  plan.unit @a index 0 params [@a] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Tied parameters have no storage and belong to no unit.
plan.graph @g {
  plan.param @e : tensor<8x4xf32> embedding module "e"
  plan.param @h : tensor<8x4xf32> output module "h" tied_to @e
  // expected-error @+1 {{'plan.unit' op lists @h, which is tied to @e and has no storage of its own}}
  plan.unit @u index 0 params [@e, @h] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Ties point at an existing parameter.
plan.graph @g {
  plan.param @e : tensor<8x4xf32> embedding module "e"
  // expected-error @+1 {{'plan.param' op is tied to unknown parameter @nope}}
  plan.param @h : tensor<8x4xf32> output module "h" tied_to @nope
  plan.unit @u index 0 params [@e] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Tied parameters have the same type as their target.
plan.graph @g {
  plan.param @e : tensor<8x4xf32> embedding module "e"
  // expected-error @+1 {{'plan.param' op has type 'tensor<8x4xbf16>' but is tied to @e of type 'tensor<8x4xf32>'}}
  plan.param @h : tensor<8x4xbf16> output module "h" tied_to @e
  plan.unit @u index 0 params [@e] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Ties go straight to the storage, not through another tie.
plan.graph @g {
  plan.param @e : tensor<8x4xf32> embedding module "e"
  plan.param @h : tensor<8x4xf32> output module "h" tied_to @e
  // expected-error @+1 {{'plan.param' op is tied to @h, which is itself tied to @e; tie to the parameter that holds the storage}}
  plan.param @h2 : tensor<8x4xf32> output module "h2" tied_to @h
  plan.unit @u index 0 params [@e] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// A parameter cannot be tied to itself.
plan.graph @g {
  plan.param @e : tensor<8x4xf32> embedding module "e"
  // expected-error @+1 {{'plan.param' op cannot be tied to itself}}
  plan.param @h : tensor<8x4xf32> output module "h" tied_to @h
  plan.unit @u index 0 params [@e] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Only plan ops live in a graph.
plan.graph @g {
  // expected-error @+1 {{'func.func' op is not allowed in a plan.graph; expected plan.mesh, plan.policy, plan.param or plan.unit}}
  func.func @f() {
    return
  }
}

// -----

// Parameters live in a graph.
// expected-error @+1 {{'plan.param' op expects parent op 'plan.graph'}}
plan.param @w : tensor<4x4xf32> linear module "l"

// -----

// Gather groups cover every unit or none.
plan.graph @g {
  plan.param @a : tensor<4x4xf32> linear module "a"
  plan.param @b : tensor<4x4xf32> linear module "b"
  plan.unit @u0 index 0 params [@a] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false> group 0
  // expected-error @+1 {{'plan.unit' op has no gather group while other units of the graph have one; group every unit or none}}
  plan.unit @u1 index 1 params [@b] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Gather groups are runs of adjacent units numbered without gaps.
plan.graph @g {
  plan.param @a : tensor<4x4xf32> linear module "a"
  plan.param @b : tensor<4x4xf32> linear module "b"
  plan.unit @u0 index 0 params [@a] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false> group 0
  // expected-error @+1 {{'plan.unit' op has gather group 2 but groups must run 0, 1, 2, ... over adjacent units (expected 0 or 1)}}
  plan.unit @u1 index 1 params [@b] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false> group 2
}

// -----

// A parameter of 2^64 elements would be 0 bytes in 64-bit arithmetic; more
// than 2^40 elements is refused before any size is computed from it.
plan.graph @g {
  // expected-error @+1 {{'plan.param' op has more than 2^40 (1099511627776) elements; a parameter has at most that many}}
  plan.param @a : tensor<4294967296x4294967296xbf16> linear module "a"
  plan.unit @u index 0 params [@a] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// A NUL byte in a name: "b\00x" and "b\00y" would print as the same C
// string "b" in a step library.
plan.graph @g {
  // expected-error @+1 {{'plan.param' op name holds the control character \x00 at byte 1; names are printable text}}
  plan.param @"b\00x" : tensor<4x4xf32> linear module "a"
  plan.unit @u index 0 params [@"b\00x"] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

// Names are checked 8 bytes at a time: a control byte past the first word,
// and DEL (0x7F), are found at their byte all the same.
plan.graph @g {
  // expected-error @+1 {{'plan.param' op name holds the control character \x1F at byte 12; names are printable text}}
  plan.param @"model.layers\1F.weight" : tensor<4x4xf32> linear module "a"
  plan.unit @u index 0 params [@"model.layers\1F.weight"] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

// -----

plan.graph @g {
  // expected-error @+1 {{'plan.param' op name holds the control character \x7F at byte 16; names are printable text}}
  plan.param @"model.layers.0.w\7Feight" : tensor<4x4xf32> linear module "a"
  plan.unit @u index 0 params [@"model.layers.0.w\7Feight"] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
}

//===- SchedBase.td - The sched dialect, types and enums ---*- tablegen -*-===//
//
// The sched dialect is one training step as the program every
// data-parallel rank runs: buffers, the trainer's compute, collectives
// (synchronous or split into async start and wait), optimizer kernels.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_SCHED_BASE_TD
#define MFSDP_SCHED_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Sched_Dialect : Dialect {
  let name = "sched";
  let cppNamespace = "::mfsdp::sched";
  let summary = "One training step: buffers, compute, collectives, optimizer kernels";
  let description = [{
    The second IR level of mfsdp, in the manner of IREE's `stream`: a
    `sched.step` holds the straight-line program of one training step on a
    data-parallel rank. Buffers are SSA values of type `!sched.buffer`
    created by `sched.alloc` (persistent ones live all step). Collectives
    are named after MLIR's upstream `shard` collectives (`all_gather`,
    `reduce_scatter`, `all_reduce`, plus `all_gather_v` and
    `reduce_scatter_v` for matrix owners); an `async` collective returns a
    `!sched.token` that a `sched.wait` consumes. `sched.compute` stands for
    the trainer's forward, backward or recomputation of a unit, with its
    cost; `sched.optimizer` for optimizer kernels, possibly on one rank.
  }];
  let useDefaultTypePrinterParser = 1;
}

// What orders the ops of a step beyond their buffers: the trainer's own
// state (activations, the model it runs), the communicators' streams and
// the waits on them. Compute, optimizer kernels, collectives and waits
// read and write it, so no transformation drops or reorders them for want
// of a buffer effect (a forward that writes no buffer still runs).
def Sched_ProgramOrderResource
    : Resource<"::mfsdp::sched::ProgramOrderResource">;
def Sched_ProgramOrderEffects
    : MemoryEffects<[MemRead<Sched_ProgramOrderResource>,
                     MemWrite<Sched_ProgramOrderResource>]>;

class Sched_Op<string mnemonic, list<Trait> traits = []>
    : Op<Sched_Dialect, mnemonic, traits>;

class Sched_Type<string name, string typeMnemonic> : TypeDef<Sched_Dialect, name> {
  let mnemonic = typeMnemonic;
}

def Sched_BufferType : Sched_Type<"Buffer", "buffer"> {
  let summary = "A per-rank byte buffer";
}
def Sched_TokenType : Sched_Type<"Token", "token"> {
  let summary = "Completion of an asynchronous collective";
}

def Sched_Phase : I32EnumAttr<"Phase", "phase of the step", [
    I32EnumAttrCase<"forward", 0>,
    I32EnumAttrCase<"backward", 1>,
    I32EnumAttrCase<"optimizer", 2>,
  ]> {
  let cppNamespace = "::mfsdp::sched";
}

def Sched_ComputeKind : I32EnumAttr<"ComputeKind", "trainer compute", [
    I32EnumAttrCase<"forward", 0>,
    I32EnumAttrCase<"backward", 1>,
    I32EnumAttrCase<"recompute", 2>,
    I32EnumAttrCase<"copy", 3>,
  ]> {
  let cppNamespace = "::mfsdp::sched";
}

def Sched_OptimizerKind : I32EnumAttr<"OptimizerKind", "optimizer kernel", [
    I32EnumAttrCase<"adamw", 0>,
    I32EnumAttrCase<"sgd", 1>,
    I32EnumAttrCase<"muon", 2>,
    I32EnumAttrCase<"cast", 3>,
    I32EnumAttrCase<"accumulate", 4>,
  ]> {
  let cppNamespace = "::mfsdp::sched";
}

def Sched_ReduceDType : I32EnumAttr<"ReduceDType",
    "dtype every gradient reduction of the step counts", [
    I32EnumAttrCase<"f32", 0>,
    I32EnumAttrCase<"bf16", 1>,
  ]> {
  let cppNamespace = "::mfsdp::sched";
}

def Sched_NsPrecision : I32EnumAttr<"NsPrecision",
    "precision Muon's Newton-Schulz products run in", [
    I32EnumAttrCase<"fp32", 0>,
    I32EnumAttrCase<"bf16", 1>,
  ]> {
  let cppNamespace = "::mfsdp::sched";
}

#endif // MFSDP_SCHED_BASE_TD

//===- SchedOps.td - The sched dialect's operations --------*- tablegen -*-===//
#ifndef MFSDP_SCHED_OPS_TD
#define MFSDP_SCHED_OPS_TD

include "dialects/sched/SchedBase.td"
include "dialects/sched/SchedInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"
include "dialects/QuietProperties.td"

def Sched_StepOp : Sched_Op<"step", [
    Symbol, IsolatedFromAbove, NoTerminator, SingleBlock, NoRegionArguments,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "The program of one training step";
  let description = [{
    A straight-line program every rank of the `world`-rank data-parallel
    group runs, in order. `tokens` is the tokens per rank per microbatch the
    compute costs were scaled by. Once memory is planned, `arena_bytes` and
    `peak_bytes` give per rank the arena the buffer offsets need and the
    most bytes live at once. Once its collectives are bucketed
    (`mfsdp-bucket-collectives`), `bucket_bytes` is the limit they were
    bucketed with (0: no limit): the step library's runtime buckets keep to it, and
    `mfsdp-verify-schedule` lowers the step with those buckets, so that the
    program it checks is the one the library carries. `reduce_dtype` is the
    dtype every gradient reduction of the step counts (`mfsdp-build-step`'s
    `reduce-dtype`, f32 or bf16); without it each parameter's reductions
    count its own dtype. The step library reduces in that dtype.
    `ns_precision` is the precision Muon's Newton-Schulz products run in
    (the graph's `#plan.muon` `ns_precision`, recorded by `mfsdp-build-step`
    when it is `bf16`; without it, fp32): the schedule prices the owners'
    Newton-Schulz kernels at that precision's rate, and the step library is
    built only from a graph that runs the same.

    `runtime_arena_bytes`, `runtime_staging`, `runtime_offsets` (and
    `runtime_bucket_offsets`, `runtime_keep_grads`) are the static memory
    plan of the step library built from this step: where the runtime keeps
    each of its own buffers in one arena per `dp_shard` rank, placed by
    `mfsdp-plan-memory` over the lifetimes the step's program gives them,
    and what the library carries (`mfsdp_memory_plan` in `runtime.h`).
    `runtime_arena_bytes` holds one arena per rank; `runtime_staging` the
    load/store staging buffer's offset (-1: none); `runtime_offsets` seven
    offsets per parameter of the library's table (the graph's `plan.param`s
    in order, `#plan.external` ones left out): master, exp_avg, exp_avg_sq,
    grad_shard, full, full_backward, grad, -1 where it has no such buffer;
    `runtime_bucket_offsets` three per runtime bucket (gather, backward
    gather and reduce staging); `runtime_keep_grads` that gradients are kept
    between steps (no-sync accumulation). A step the runtime cannot run (a
    baseline's, or one written without a graph) has none.

    `mesh` names the `plan.mesh` of the graph the step was built from
    (`@graph::@mesh`; the step sits beside its graph). With it the step's
    symbol uses are verified: `world` is the size of `dp_shard`, every
    collective's axes are dims of the mesh and its `ranks` their product,
    a compute op's `unit` is a `plan.unit` of the graph, and the `params` of
    collectives and optimizer kernels are `plan.param`s of it. A step
    written without a graph (a unit test of the schedule) leaves it out.

    ```mlir
    sched.step @tiny.step mesh @tiny::@mesh world 4 tokens 128 microbatches 1 {
      %w = sched.alloc "shard" bytes 1024 persistent
      %g = sched.alloc "gathered" bytes 4096
      sched.all_gather "gather layer0" %w -> %g on ["dp_shard"] ranks 4 bytes 4096 comm 0 phase forward
      sched.compute forward "forward layer0" unit @layer0 reads(%g) writes() flops 1.0e9 bytes 4096 phase forward
      sched.dealloc %g
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       OptionalAttr<SymbolRefAttr>:$mesh, I64Attr:$world,
                       I64Attr:$tokens, I64Attr:$microbatches,
                       OptionalAttr<Sched_ReduceDType>:$reduce_dtype,
                       OptionalAttr<Sched_NsPrecision>:$ns_precision,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$bucket_bytes,
                       OptionalAttr<DenseI64ArrayAttr>:$arena_bytes,
                       OptionalAttr<DenseI64ArrayAttr>:$peak_bytes,
                       OptionalAttr<DenseI64ArrayAttr>:$runtime_arena_bytes,
                       OptionalAttr<I64Attr>:$runtime_staging,
                       UnitAttr:$runtime_keep_grads,
                       OptionalAttr<DenseI64ArrayAttr>:$runtime_offsets,
                       OptionalAttr<DenseI64ArrayAttr>:$runtime_bucket_offsets);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $sym_name (`mesh` $mesh^)? `world` $world `tokens` $tokens `microbatches` $microbatches
    (`reduce_dtype` $reduce_dtype^)? (`ns_precision` $ns_precision^)?
    (`bucket_bytes` $bucket_bytes^)?
    (`arena_bytes` $arena_bytes^)? (`peak_bytes` $peak_bytes^)?
    (`runtime_arena_bytes` $runtime_arena_bytes^ `runtime_staging` $runtime_staging
     (`runtime_keep_grads` $runtime_keep_grads^)? `runtime_offsets` custom<FastI64Array>($runtime_offsets)
     (`runtime_bucket_offsets` $runtime_bucket_offsets^)?)?
    attr-dict-with-keyword $body
  }];
  let hasRegionVerifier = 1;
}

def Sched_AllocOp : Sched_Op<"alloc", [HasParent<"StepOp">]> {
  let summary = "A buffer of the step";
  let description = [{
    Allocates `bytes` bytes on every rank (or on `only_rank`). A
    `persistent` buffer (parameter shards, gradients, optimizer state) lives
    for the whole step wherever it is declared; any other lives from here to
    its `sched.dealloc`. `offset` is its place in the rank's arena once
    memory is planned.

    ```mlir
    %g = sched.alloc "gathered layers.0" bytes 400000000
    ```
  }];
  let arguments = (ins StringProp:$name, I64Attr:$bytes, UnitAttr:$persistent,
                       OptionalAttr<I64Attr>:$only_rank,
                       OptionalAttr<I64Attr>:$offset);
  let results = (outs Res<Sched_BufferType, "", [MemAlloc]>:$buffer);
  let assemblyFormat = [{
    prop-dict `` custom<FastString>($name) `bytes` custom<FastI64>($bytes) (`persistent` $persistent^)?
    (`only_rank` custom<FastI64>($only_rank)^)? (`offset` custom<FastI64>($offset)^)? attr-dict
  }];
  let extraClassDeclaration = QuietPropertiesDecl;
  let hasVerifier = 1;
}

def Sched_DeallocOp : Sched_Op<"dealloc", [HasParent<"StepOp">]> {
  let summary = "Ends the life of a transient buffer";
  let description = [{
    ```mlir
    sched.dealloc %g
    ```
  }];
  let arguments = (ins Arg<Sched_BufferType, "", [MemFree]>:$buffer);
  let assemblyFormat = "$buffer attr-dict";
}

class Sched_CollectiveOp<string mnemonic, string summaryText, string diagram,
                         bit variable, bit fullDst, bit fullSrc>
    : Sched_Op<mnemonic, [HasParent<"StepOp">, Sched_ProgramOrderEffects,
        Sched_CollectiveOpInterface]> {
  let summary = summaryText;
  let description = diagram # [{

    `name` is the collective's name in reports and traces. `bytes` is the
    size of the full buffer (gathered, or before reduction), `ranks` the
    group size over `mesh_axes`; `comm` names the communicator (each has
    its own stream; on one communicator collectives run in issue order);
    `params` lists the parameters carried. With `async` the op only starts
    the collective and returns a token for `sched.wait`. The op reads `src`
    and writes `dst`; what every collective must hold is verified by
    `CollectiveOpInterface`.
  }];
  let arguments = (ins StringProp:$name,
                       Arg<Sched_BufferType, "the buffer this rank contributes",
                           [MemRead]>:$src,
                       Arg<Sched_BufferType, "the buffer this rank receives",
                           [MemWrite]>:$dst,
                       StrArrayAttr:$mesh_axes, I64Attr:$ranks, I64Attr:$bytes,
                       OptionalAttr<DenseI64ArrayAttr>:$chunks,
                       I64Attr:$comm, Sched_Phase:$phase,
                       UnitAttr:$inter_node,
                       OptionalAttr<FlatSymbolRefArrayAttr>:$params,
                       OptionalAttr<I64Attr>:$group,
                       UnitAttr:$async);
  let results = (outs Optional<Sched_TokenType>:$token);
  let assemblyFormat = [{
    prop-dict `` custom<FastString>($name) $src `->` $dst `on` $mesh_axes `ranks` custom<FastI64>($ranks) `bytes` custom<FastI64>($bytes)
    (`chunks` $chunks^)? `comm` custom<FastI64>($comm) `phase` $phase
    (`inter_node` $inter_node^)? (`group` custom<FastI64>($group)^)? (`params` custom<FastSymbols>($params)^)?
    (`async` $async^)? attr-dict (`:` type($token)^)?
  }];
  let extraClassDeclaration = QuietPropertiesDecl # [{
    bool isVariable() { return }] # !if(variable, "true", "false") # [{; }
    bool fullDestination() { return }] # !if(fullDst, "true", "false") # [{; }
    bool fullSource() { return }] # !if(fullSrc, "true", "false") # [{; }
  }];
}

def Sched_AllGatherOp : Sched_CollectiveOp<"all_gather",
    "Concatenate every rank's shard on every rank", [{
    Every rank contributes an equal shard of `src` and receives the whole
    buffer in `dst` (rank order along the buffer).

    ```
    ranks:   0      1      2      3
    src:    [a]    [b]    [c]    [d]
    dst:  [abcd] [abcd] [abcd] [abcd]
    ```
  }], 0, 1, 0>;

def Sched_ReduceScatterOp : Sched_CollectiveOp<"reduce_scatter",
    "Sum full buffers; every rank keeps its shard of the sum", [{
    ```
    ranks:    0       1       2       3
    src:   [a0..a3][b0..b3][c0..c3][d0..d3]
    dst:    [Σ0]    [Σ1]    [Σ2]    [Σ3]      Σk = ak + bk + ck + dk
    ```
  }], 0, 0, 1>;

def Sched_AllReduceOp : Sched_CollectiveOp<"all_reduce",
    "Sum full buffers; every rank receives the sum", [{
    ```
    ranks:   0     1     2     3
    src:    [a]   [b]   [c]   [d]
    dst:   [Σ]   [Σ]   [Σ]   [Σ]      Σ = a + b + c + d
    ```

    The size of its buffers is not checked against `bytes`: over
    `dp_replicate` (HSDP) one all-reduce carries everything a rank keeps of
    a unit, its row shards and its owned matrices, which are two buffers.
  }], 0, 0, 0>;

def Sched_AllGatherVOp : Sched_CollectiveOp<"all_gather_v",
    "Gather owners' whole matrices, of unequal sizes, on every rank", [{
    Rank r contributes `chunks[r]` bytes (its owned matrices, contiguous),
    which may be zero; everyone receives the concatenation. The time is
    bounded by the largest chunk.

    ```
    ranks:   0       1     2     3
    src:   [A B]   [C]    []    [D]
    dst:  [ABCD]  [ABCD] [ABCD] [ABCD]
    ```
  }], 1, 1, 0>;

def Sched_ReduceScatterVOp : Sched_CollectiveOp<"reduce_scatter_v",
    "Sum gradients and deliver each matrix's sum to its owner", [{
    ```
    ranks:    0          1          2          3
    src:   [A B C D]  [A B C D]  [A B C D]  [A B C D]   (partial gradients)
    dst:   [ΣA ΣB]    [ΣC]       []         [ΣD]
    ```
  }], 1, 0, 1>;

def Sched_WaitOp : Sched_Op<"wait", [HasParent<"StepOp">,
                                    Sched_ProgramOrderEffects]> {
  let summary = "Block the compute stream until a collective has finished";
  let description = [{
    ```mlir
    %t = sched.all_gather "gather layers.0" %s -> %g on ["dp_shard"] ranks 8 bytes 100000000 comm 0 phase forward async : !sched.token
    sched.wait %t
    ```
  }];
  let arguments = (ins Sched_TokenType:$token);
  let assemblyFormat = "$token attr-dict";
}

def Sched_ComputeOp : Sched_Op<"compute", [HasParent<"StepOp">,
                                          AttrSizedOperandSegments,
                                          Sched_ProgramOrderEffects]> {
  let summary = "The trainer's compute for one unit";
  let description = [{
    Forward, backward or activation recomputation of the unit `unit`,
    reading the gathered parameters and writing activations or gradients;
    or a `copy` of a per-parameter unit's shards out of the staging its
    gathers fill into its gathered buffer, or of its gradients into the
    staging its reduction reads (FSDP2's per-parameter layout; the step
    library's `UNPACK` and `PACK`). `flops` and `bytes` are its cost for
    the step's tokens.

    ```mlir
    sched.compute backward "backward layers.0" unit @layers.0 reads(%g) writes(%grad) flops 3.6e12 bytes 1000000000 phase backward
    sched.compute copy "all_gather copy g1" reads(%staging) writes(%g) flops 0.0 bytes 6297600 phase forward group 1
    ```
  }];
  let arguments = (ins Sched_ComputeKind:$kind, StringProp:$name,
                       OptionalAttr<FlatSymbolRefAttr>:$unit,
                       Arg<Variadic<Sched_BufferType>, "", [MemRead]>:$reads,
                       Arg<Variadic<Sched_BufferType>, "", [MemWrite]>:$writes,
                       F64Attr:$flops, I64Attr:$bytes, Sched_Phase:$phase,
                       OptionalAttr<I64Attr>:$group);
  let assemblyFormat = [{
    prop-dict `` $kind custom<FastString>($name) (`unit` custom<FastSymbol>($unit)^)?
    `reads` `(` $reads `)` `writes` `(` $writes `)`
    `flops` custom<FastF64>($flops) `bytes` custom<FastI64>($bytes) `phase` $phase (`group` custom<FastI64>($group)^)? attr-dict
  }];
  let extraClassDeclaration = QuietPropertiesDecl;
  let hasVerifier = 1;
}

def Sched_OptimizerOp : Sched_Op<"optimizer", [HasParent<"StepOp">,
                                              AttrSizedOperandSegments,
                                              Sched_ProgramOrderEffects]> {
  let summary = "An optimizer kernel";
  let description = [{
    An AdamW, SGD or Muon update (Muon includes its Newton-Schulz
    iterations), a master-to-compute-copy cast, or a gradient accumulation,
    over the named parameters. `only_rank` restricts it to one rank (the
    owner of the matrices). `flops` are Newton-Schulz's, as the runtime
    runs it (priced at the rate of the precision the cost model is told);
    `torch_ns` marks them as torch.optim.Muon's instead (a peer's baseline:
    bf16, three GEMMs per iteration, priced at that rate). `ns_kernels`
    counts the kernels the runtime's Newton-Schulz launches for the op's
    matrices (priced at the profile's time per kernel beside the FLOPs; the
    latency that dominates small matrices); on a `torch_ns` op, the kernels
    torch.optim.Muon launches for it (eager PyTorch launches them from the
    host: the op takes at least that many times the profile's time per
    launch); left out, none.

    ```mlir
    sched.optimizer muon "layers.0.mlp" reads(%grad) writes(%state) flops 6.2e12 bytes 1300000000 only_rank 3 phase optimizer ns_kernels 218
    sched.optimizer muon "muon (gathered) w" reads(%g) writes(%w) flops 3.2e3 torch_ns bytes 1600 phase optimizer ns_kernels 33
    ```
  }];
  let arguments = (ins Sched_OptimizerKind:$kind, StringProp:$name,
                       Arg<Variadic<Sched_BufferType>, "", [MemRead]>:$reads,
                       Arg<Variadic<Sched_BufferType>, "state updated in place",
                           [MemRead, MemWrite]>:$writes,
                       F64Attr:$flops, UnitProp:$torch_ns, I64Attr:$bytes,
                       OptionalAttr<I64Attr>:$only_rank,
                       Sched_Phase:$phase, OptionalAttr<I64Attr>:$group,
                       OptionalAttr<FlatSymbolRefArrayAttr>:$params,
                       OptionalAttr<I64Attr>:$ns_kernels);
  let assemblyFormat = [{
    prop-dict `` $kind custom<FastString>($name) `reads` `(` $reads `)` `writes` `(` $writes `)`
    `flops` custom<FastF64>($flops) (`torch_ns` $torch_ns^)? `bytes` custom<FastI64>($bytes) (`only_rank` custom<FastI64>($only_rank)^)? `phase` $phase
    (`group` custom<FastI64>($group)^)? (`params` custom<FastSymbols>($params)^)?
    (`ns_kernels` custom<FastI64>($ns_kernels)^)? attr-dict
  }];
  let extraClassDeclaration = QuietPropertiesDecl;
  let hasVerifier = 1;
}

#endif // MFSDP_SCHED_OPS_TD

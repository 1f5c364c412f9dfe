//===- PlanOps.td - The plan dialect's operations ----------*- tablegen -*-===//
#ifndef MFSDP_PLAN_OPS_TD
#define MFSDP_PLAN_OPS_TD

include "dialects/plan/PlanBase.td"
include "dialects/plan/PlanAttrs.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/IR/BuiltinAttributes.td"
include "dialects/QuietProperties.td"

def Plan_GraphOp : Plan_Op<"graph", [
    Symbol, SymbolTable, IsolatedFromAbove, NoTerminator, SingleBlock,
    NoRegionArguments, HasOnlyGraphRegion, RegionKindInterface]> {
  let summary = "One model: its mesh, parameters and units";
  let description = [{
    Holds the `plan.mesh` (at most one), the `plan.policy` (at most one), the
    `plan.param`s and the `plan.unit`s of one model. The symbol is the model
    name. `seq_len` is the sequence length the unit costs assume (0 when
    unknown).

    The verifier checks what spans ops: every parameter that is not tied is
    in exactly one unit, tied parameters are in none and tie to an untied
    parameter of the same type, unit indices are 0..N-1 without gaps, and
    every placement fits its parameter and the mesh.

    ```mlir
    plan.graph @tiny seq_len 128 {
      plan.mesh @mesh ["dp_shard" = 2]
      plan.param @"w" : tensor<8x8xbf16> linear module "l"
      plan.unit @"block0" index 0 params [@"w"]
          cost <fwd_flops = 128, bwd_flops = 256, act_bytes = 16, recompute = false>
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       DefaultValuedAttr<I64Attr, "0">:$seq_len);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $sym_name (`seq_len` $seq_len^)? attr-dict-with-keyword $body
  }];
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The mesh of this graph, or null.
    MeshOp getMesh();
    /// The policy of this graph, or null.
    PolicyOp getPolicy();
  }];
  let skipDefaultBuilders = 1;
  let builders = [OpBuilder<(ins "::llvm::StringRef":$name, "int64_t":$seqLen)>];
}

def Plan_MeshOp : Plan_Op<"mesh", [Symbol, HasParent<"GraphOp">]> {
  let summary = "The device mesh: named dims and rank order";
  let description = [{
    Names the mesh dims with their sizes, in row-major rank order (the last
    dim varies fastest). `dp_shard` is required: parameters are sharded over
    it. `dp_replicate` makes HSDP replicas. Other dims (`tp`, `ep`, ...)
    belong to an outer parallel stack. `device_ids`, when given, is a
    permutation of 0..N-1 that maps mesh positions to global ranks. A dim
    has 1 to 2^20 ranks and the mesh at most 2^40.

    ```mlir
    // 2 replicas x 4 shards x 2-way tensor parallel: 16 ranks.
    plan.mesh @mesh ["dp_replicate" = 2, "dp_shard" = 4, "tp" = 2]
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrArrayAttr:$dim_names,
                       DenseI64ArrayAttr:$dim_sizes,
                       OptionalAttr<DenseI64ArrayAttr>:$device_ids);
  let assemblyFormat = [{
    $sym_name custom<MeshDims>($dim_names, $dim_sizes)
    (`device_ids` $device_ids^)? attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Size of the named dim, or std::nullopt.
    std::optional<int64_t> getDimSize(::llvm::StringRef name);
    /// Product of all dim sizes.
    int64_t getWorldSize();
  }];
}

def Plan_PolicyOp : Plan_Op<"policy", [HasParent<"GraphOp">]> {
  let summary = "The optimizer policy and ZeRO level requested for the graph";
  let description = [{
    `kind` picks the optimizers (`adamw` and `sgd` row-shard everything;
    `muon` and `mixed_muon_adamw` put 2D hidden matrices on owners), `zero`
    the sharding strategy (1: optimizer state, 2: + gradients, 3: +
    parameters). Optimizer hyperparameters are optional; defaults apply when
    absent. `ns_split` is a planning decision for HSDP: the Newton-Schulz
    work of each owner is split across the `dp_replicate` replicas (the
    i-th matrix an owner holds, in unit order, is computed by replica
    i mod R, which sends the update to the others) instead of every replica
    repeating it. `no_master` drops the fp32 master copies of narrower
    parameters (pure bf16 training).

    ```mlir
    plan.policy mixed_muon_adamw zero 3
        adamw #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 0.95, eps = 1e-08, weight_decay = 0.1>
        muon #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
    ```
  }];
  let arguments = (ins Plan_PolicyKind:$kind, I64Attr:$zero,
                       OptionalAttr<Plan_AdamWAttr>:$adamw,
                       OptionalAttr<Plan_SGDAttr>:$sgd,
                       OptionalAttr<Plan_MuonAttr>:$muon,
                       UnitAttr:$ns_split, UnitAttr:$no_master);
  let assemblyFormat = [{
    $kind `zero` $zero (`adamw` $adamw^)? (`sgd` $sgd^)? (`muon` $muon^)?
    (`ns_split` $ns_split^)? (`no_master` $no_master^)? attr-dict
  }];
  let hasVerifier = 1;
}

def Plan_ParamOp : Plan_Op<"param", [Symbol, HasParent<"GraphOp">]> {
  let summary = "A model parameter with its global shape";
  let description = [{
    One parameter, named as `named_parameters()` names it. `type` is the
    global (unsharded) shape and dtype: a static tensor with positive dims
    and a floating-point element type (f64, f32, bf16, f16, f8E4M3FN,
    f8E5M2). `kind` is the kind of module that holds it, `module` its
    module path. `frozen` marks requires_grad = false. `tied_to` makes it an
    alias of another parameter's storage (tied embeddings); a tied parameter
    is in no unit. `placement` and `optimizer` are filled in by planning;
    an external placement comes from the graph.

    ```mlir
    plan.param @"model.layers.0.mlp.up_proj.weight" : tensor<14336x4096xbf16>
        linear module "model.layers.0.mlp.up_proj"
    plan.param @"lm_head.weight" : tensor<128256x4096xbf16> output
        module "lm_head" tied_to @"model.embed_tokens.weight"
    plan.param @"model.layers.0.mlp.experts.3.w1.weight" : tensor<128x64xbf16>
        expert module "model.layers.0.mlp.experts.3.w1"
        placement #plan.external<axes = ["ep"]>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttr:$type,
                       Plan_ParamKind:$kind, StringProp:$module,
                       UnitAttr:$frozen,
                       OptionalAttr<FlatSymbolRefAttr>:$tied_to,
                       OptionalAttr<Plan_PlacementAttr>:$placement,
                       OptionalAttr<Plan_OptimizerAttr>:$optimizer);
  let assemblyFormat = [{
    prop-dict `` $sym_name `:` $type $kind `module` custom<FastString>($module) (`frozen` $frozen^)?
    (`tied_to` $tied_to^)? (`placement` custom<CachedAttr>($placement)^)?
    (`optimizer` custom<CachedAttr>($optimizer)^)? attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = QuietPropertiesDecl # [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::dyn_cast<::mlir::RankedTensorType>(getType());
    }
    bool isExternal() {
      return ::llvm::isa_and_nonnull<ExternalAttr>(getPlacementAttr());
    }
    int64_t getNumElements();
    int64_t getNumBytes();
  }];
}

def Plan_UnitOp : Plan_Op<"unit", [Symbol, HasParent<"GraphOp">]> {
  let summary = "Parameters gathered and freed together, with their cost";
  let description = [{
    A unit is what FSDP2's `fully_shard(module)` makes: usually one
    transformer block. `index` is its place in forward execution order
    (0-based, no gaps across the graph), `params` the parameters it holds
    (each untied parameter is in exactly one unit), `cost` its compute per
    token.

    Planning adds two decisions. `row_layout` says how the unit's row
    shards sit in its gather buffer: `per_param` (FSDP2: each parameter
    split `torch.chunk` fashion and padded, copied in and out of a flat
    buffer) or `flat` (Megatron-style: the unit's rows concatenated and cut
    at row boundaries into equal padded shards, so the gathered buffer is
    used in place). The step runtime runs `per_param` only, the planner's
    default; a step library refuses a `flat` unit, which is for planning
    and simulation. A unit with row shards and no `row_layout` (written by
    hand) is `per_param`. `group` is the gather group: adjacent units with the
    same group are gathered and reduced together, so that matrix owners
    spread over more ranks; groups are numbered 0.. in unit order.

    ```mlir
    plan.unit @"model.layers.0" index 1
        params [@"model.layers.0.self_attn.q_proj.weight", @"model.layers.0.input_layernorm.weight"]
        cost <fwd_flops = 4.4e+08, bwd_flops = 8.8e+08, act_bytes = 90112, recompute = false>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, I64Attr:$index,
                       FlatSymbolRefArrayAttr:$params, Plan_CostAttr:$cost,
                       OptionalAttr<Plan_RowLayout>:$row_layout,
                       OptionalAttr<I64Attr>:$group);
  let assemblyFormat = [{
    prop-dict `` $sym_name `index` $index `params` custom<FastSymbols>($params) `cost` $cost
    (`row_layout` $row_layout^)? (`group` $group^)? attr-dict
  }];
  let extraClassDeclaration = QuietPropertiesDecl;
  let hasVerifier = 1;
}

#endif // MFSDP_PLAN_OPS_TD

//===- PlanAttrs.td - Placements, optimizers and costs -----*- tablegen -*-===//
#ifndef MFSDP_PLAN_ATTRS_TD
#define MFSDP_PLAN_ATTRS_TD

include "dialects/plan/PlanBase.td"

//===----------------------------------------------------------------------===//
// Placements: how one parameter lives on the data-parallel ranks.
//===----------------------------------------------------------------------===//

def Plan_RowShardAttr : Plan_Attr<"RowShard", "row_shard"> {
  let summary = "FSDP2-style Shard(dim): rows split evenly over mesh axes";
  let description = [{
    The parameter is split along `dim` over the ranks of the named mesh axes
    (their product is the group size W), `torch.chunk` fashion: every rank
    holds ceil(size/W) rows, the last ranks may hold fewer or none, and the
    all-gather input is padded so every rank sends the same number of bytes.

    ```
    // A 10x4 matrix on dp_shard = 4: ranks hold rows [0,3) [3,6) [6,9) [9,10).
    #plan.row_shard<dim = 0, axes = ["dp_shard"]>
    ```
  }];
  let parameters = (ins "int64_t":$dim, "::mlir::ArrayAttr":$axes);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Plan_BlockShardAttr : Plan_Attr<"BlockShard", "block_shard"> {
  let summary = "A matrix split into equal blocks dealt to the ranks";
  let description = [{
    The tensor is tiled by `block` (one extent per tensor dim; every extent
    divides the tensor's) and the blocks, in row-major order, are dealt
    round-robin to the ranks of the named mesh axes.

    ```
    // A 4096x4096 matrix in 16 blocks of 1024x1024 over dp_shard.
    #plan.block_shard<block = [1024, 1024], axes = ["dp_shard"]>
    ```
  }];
  let parameters = (ins ArrayRefParameter<"int64_t">:$block,
                        "::mlir::ArrayAttr":$axes);
  let assemblyFormat = "`<` `block` `=` `[` $block `]` `,` `axes` `=` $axes `>`";
  let genVerifyDecl = 1;
}

def Plan_OwnerAttr : Plan_Attr<"Owner", "owner"> {
  let summary = "The whole matrix on one owner rank";
  let description = [{
    The parameter (and its gradient and optimizer state) lives whole on one
    rank of the group formed by the named mesh axes, so a matrix optimizer
    such as Muon runs there without a gather. `rank` is the linear index in
    that group.

    ```
    #plan.owner<rank = 3, axes = ["dp_shard"]>
    ```
  }];
  let parameters = (ins "int64_t":$rank, "::mlir::ArrayAttr":$axes);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Plan_ReplicateAttr : Plan_Attr<"Replicate", "replicate"> {
  let summary = "Kept whole on every data-parallel rank";
  let description = [{
    Small tensors that are not worth sharding; gradients are all-reduced.

    ```
    #plan.replicate
    ```
  }];
}

def Plan_ExternalAttr : Plan_Attr<"External", "external"> {
  let summary = "Owned by an outer tensor/expert-parallel stack";
  let description = [{
    mfsdp never inserts a collective for this parameter: the named mesh dims
    (for example `tp` or `ep`) own it. At least one dim is required, and none
    may be a data-parallel dim.

    ```
    #plan.external<axes = ["ep"]>
    ```
  }];
  let parameters = (ins "::mlir::ArrayAttr":$axes);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Plan_PlacementAttr : AnyAttrOf<[Plan_RowShardAttr, Plan_BlockShardAttr,
                                    Plan_OwnerAttr, Plan_ReplicateAttr,
                                    Plan_ExternalAttr]>;

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

def Plan_AdamWAttr : Plan_Attr<"AdamW", "adamw"> {
  let summary = "AdamW with decoupled weight decay and bias correction";
  let description = [{
    ```
    #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 0.95, eps = 1e-08, weight_decay = 0.1>
    ```
  }];
  let parameters = (ins Plan_F64Param:$lr, Plan_F64Param:$beta1,
                        Plan_F64Param:$beta2, Plan_F64Param:$eps,
                        Plan_F64Param:$weight_decay);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Plan_SGDAttr : Plan_Attr<"SGD", "sgd"> {
  let summary = "SGD with optional (Nesterov) momentum";
  let description = [{
    ```
    #plan.sgd<lr = 0.01, momentum = 0.9, weight_decay = 0, nesterov = false>
    ```
  }];
  let parameters = (ins Plan_F64Param:$lr, Plan_F64Param:$momentum,
                        Plan_F64Param:$weight_decay, "bool":$nesterov);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Plan_MuonAttr : Plan_Attr<"Muon", "muon"> {
  let summary = "Muon: momentum orthogonalised by quintic Newton-Schulz";
  let description = [{
    EMA momentum buf = mu*buf + (1-mu)*g, Nesterov input g + mu*(buf - g),
    `ns_steps` quintic Newton-Schulz iterations with (a, b, c) = (3.4445,
    -4.7750, 2.0315), update scaled by `scale`, decoupled weight decay.
    `ns_precision` is the precision of the Newton-Schulz products: `fp32`
    (the default, left out when printed) or `bf16` (torch.optim.Muon's: X, A
    and B in bf16, fp32 sums). The step library runs it (the plan's
    `muon_ns_precision`, the default of each parameter's `ns_precision`
    hyperparameter) and the cost model prices it.

    ```
    #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true,
               ns_steps = 5, scale = match_rms_adamw>
    #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true,
               ns_steps = 5, scale = match_rms_adamw, ns_precision = bf16>
    ```
  }];
  let parameters = (ins Plan_F64Param:$lr, Plan_F64Param:$momentum,
                        Plan_F64Param:$weight_decay, "bool":$nesterov,
                        "int64_t":$ns_steps, "MuonScale":$scale,
                        DefaultValuedParameter<"NsPrecision",
                                               "NsPrecision::fp32">:$ns_precision);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Plan_OptimizerAttr : AnyAttrOf<[Plan_AdamWAttr, Plan_SGDAttr, Plan_MuonAttr]>;

//===----------------------------------------------------------------------===//
// Unit cost
//===----------------------------------------------------------------------===//

def Plan_KernelAttr : Plan_Attr<"Kernel", "kernel"> {
  let summary = "One kernel of a unit's forward, per token";
  let description = [{
    What the cost model's per-op roofline prices (mfsdp/Kernel.h,
    mfsdp/cost/KernelModel.h): a `gemm` with `shape` [n, k, count] and
    `scale` rows per token (each of `count` products is (scale x tokens) x k
    times k x n); `attention` with `shape` [heads, head_dim, head_dim_v,
    causal (0 or 1), seq] and `scale` 1; `memory` work with `shape` [] or
    [fixed bytes] and `scale` bytes per token. The verifier checks the
    shape's length and values for the kind.

    ```
    // The q projection of a Llama layer of hidden size 4096.
    #plan.kernel<"gemm", shape = [4096, 4096, 1], scale = 1>
    // Causal attention, 32 heads of 128, sequences of 4096 tokens.
    #plan.kernel<"attention", shape = [32, 128, 128, 1, 4096], scale = 1>
    ```
  }];
  let parameters = (ins StringRefParameter<"gemm, attention or memory">:$kind,
                        Plan_ShapeParam:$shape, Plan_F64Param:$scale);
  let assemblyFormat = "`<` $kind `,` `shape` `=` $shape `,` `scale` `=` $scale `>`";
  let genVerifyDecl = 1;
}

def Plan_CostAttr : Plan_Attr<"Cost", "cost"> {
  let summary = "Compute estimates of a unit, per token";
  let description = [{
    Forward and backward FLOPs and the activation bytes saved for backward,
    per token at the graph's `seq_len`. `recompute` marks activation
    checkpointing: backward re-runs the forward, and only the unit input is
    saved. The backward figure does not include that recomputation.
    `kernels`, when present, lists the forward's kernels (#plan.kernel), which
    the cost model then prices one by one instead of the FLOP counts.

    ```
    #plan.cost<fwd_flops = 4.5e+08, bwd_flops = 9e+08, act_bytes = 1536, recompute = false>
    #plan.cost<fwd_flops = 1.1e+04, bwd_flops = 2.2e+04, act_bytes = 64, recompute = false,
               kernels = [#plan.kernel<"gemm", shape = [64, 64, 1], scale = 1>]>
    ```
  }];
  let parameters = (ins Plan_F64Param:$fwd_flops, Plan_F64Param:$bwd_flops,
                        Plan_F64Param:$act_bytes, "bool":$recompute,
                        Plan_KernelsParam:$kernels);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let builders = [
    AttrBuilder<(ins "::mfsdp::plan::F64":$fwd_flops, "::mfsdp::plan::F64":$bwd_flops,
                     "::mfsdp::plan::F64":$act_bytes, "bool":$recompute), [{
      return $_get($_ctxt, fwd_flops, bwd_flops, act_bytes, recompute, ::mlir::ArrayAttr());
    }]>
  ];
}

#endif // MFSDP_PLAN_ATTRS_TD

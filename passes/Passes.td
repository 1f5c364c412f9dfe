//===- Passes.td - mfsdp passes ------------------------------*- tablegen -*-===//
#ifndef MFSDP_PASSES_TD
#define MFSDP_PASSES_TD

include "mlir/Pass/PassBase.td"

def PrintSummary : Pass<"mfsdp-print-summary", "::mlir::ModuleOp"> {
  let summary = "Print a summary of each plan.graph";
  let description = [{
    For every `plan.graph`: the mesh, the number of parameters and elements
    by module kind, bytes per dtype, the units with their parameter counts
    and compute per token, tied parameters, and which parameters are
    external (owned by a tensor/expert-parallel dim). Leaves the IR as it is.

    ```
    mfsdp-opt model.mlir --mfsdp-print-summary -o /dev/null
    ```
  }];
  let options = [
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "Where to write the summary ('-' is stdout)">,
  ];
}

// The options of mfsdp-assign-layouts, which mfsdp-plan-and-schedule-step
// takes too.
defvar AssignLayoutsOptionList = [
    Option<"policy", "policy", "::mfsdp::PolicyOption",
           /*default=*/"::mfsdp::PolicyOption::Graph",
           "adamw, sgd, muon or mixed_muon_adamw; graph (the default): the graph's plan.policy, else adamw",
           "::mfsdp::clValues<::mfsdp::PolicyOption>()">,
    Option<"zero", "zero", "int64_t", /*default=*/"0",
           "ZeRO level 1, 2 or 3 (default: the graph's, else 3)">,
    Option<"mesh", "mesh", "std::string", /*default=*/"\"\"",
           "Mesh as NAME=SIZE,... in rank order, e.g. dp_replicate=2,dp_shard=4,tp=2 (default: the graph's plan.mesh)">,
    Option<"world", "world", "int64_t", /*default=*/"0",
           "Number of ranks the mesh must have (0: not checked)">,
    Option<"muonEmbedding", "muon-embedding", "bool", /*default=*/"false",
           "mixed_muon_adamw: put embeddings on Muon">,
    Option<"muonHead", "muon-head", "bool", /*default=*/"false",
           "mixed_muon_adamw: put the output head on Muon">,
    Option<"muonRouter", "muon-router", "bool", /*default=*/"false",
           "mixed_muon_adamw: put MoE routers on Muon">,
    ListOption<"muonInclude", "muon-include", "std::string",
               "Parameters forced to Muon (they must be 2-D)">,
    Option<"rowLayout", "row-layout", "::mfsdp::RowMode",
           /*default=*/"::mfsdp::RowMode::PerParam",
           "Row layout of row-sharded units: per_param (the default, what "
           "the step runtime runs), auto or flat (planned and simulated "
           "only; a step library refuses them)",
           "::mfsdp::clValues<::mfsdp::RowMode>()">,
    ListOption<"blockShard", "block-shard", "int64_t",
               "Block-shard AdamW matrices in blocks of ROWS,COLS">,
    Option<"ownerStrategy", "owner-strategy", "::mfsdp::OwnerStrategy",
           /*default=*/"::mfsdp::OwnerStrategy::Balanced",
           "Owner assignment: balanced, matrixfsdp or round_robin",
           "::mfsdp::clValues<::mfsdp::OwnerStrategy>()">,
    Option<"groupUnits", "group-units", "int64_t", /*default=*/"0",
           "Units per gather group: 0 chooses (groups hold at least dp_shard owner matrices), 1 keeps every unit alone">,
    Option<"groupMaxMB", "group-max-mb", "int64_t", /*default=*/"8192",
           "Automatic grouping: at most this many MiB gathered per group">,
    Option<"nsSplit", "ns-split", "::mfsdp::NsSplit",
           /*default=*/"::mfsdp::NsSplit::Auto",
           "HSDP: split Newton-Schulz across replicas: auto, on or off",
           "::mfsdp::clValues<::mfsdp::NsSplit>()">,
    Option<"hardware", "hardware", "std::string", /*default=*/"\"a100\"",
           "Hardware profile of the cost model: a100, h100, h100-ib, a100-pcie or h100-pcie">,
    Option<"nsPrecision", "ns-precision", "::mfsdp::NsPrecisionOption",
           /*default=*/"::mfsdp::NsPrecisionOption::Graph",
           "The precision Muon's Newton-Schulz runs in, which sets the rate "
           "the cost model prices it at: graph (the default: the graph's "
           "#plan.muon ns_precision, or the step's), fp32 or bf16; "
           "mfsdp-assign-layouts writes it into the graph, the other passes "
           "refuse one that contradicts what the graph or step records",
           "::mfsdp::clValues<::mfsdp::NsPrecisionOption>()">,
    Option<"replicateUnder", "replicate-under-bytes", "int64_t",
           /*default=*/"0",
           "Replicate parameters smaller than this many bytes">,
    Option<"nsSteps", "ns-steps", "int64_t", /*default=*/"0",
           "Newton-Schulz steps of Muon (0: the graph's policy, else 5)">,
    Option<"fp32Master", "fp32-master", "bool", /*default=*/"true",
           "Keep fp32 masters of narrower parameters (false: pure bf16 training)">,
];

def AssignLayouts : Pass<"mfsdp-assign-layouts", "::mfsdp::plan::GraphOp"> {
  let summary = "Choose every parameter's placement and optimizer";
  let description = [{
    Classifies every parameter of each `plan.graph` (2-D hidden matrix,
    embedding, output head, norm, bias, router, expert, 1-D, external, tied)
    and gives it an optimizer and a placement:

    - `adamw` / `sgd`: `#plan.row_shard` over `dp_shard` (or
      `#plan.block_shard` for matrices with `block-shard=R,C`); each unit's
      row layout (`per_param` as FSDP2, or `flat` row-aligned buckets as
      Megatron-FSDP) is chosen by cost: padding bytes against copies.
    - `muon`: every 2-D parameter on an owner rank (`#plan.owner`) with
      Muon; 1-D parameters with AdamW.
    - `mixed_muon_adamw`: hidden matrices and FSDP-managed experts on owners
      with Muon; embeddings, the output head, routers, norms, biases and
      1-D tensors row-sharded with AdamW (`muon-embedding`, `muon-head`,
      `muon-router` move the first three to Muon).

    Owners are balanced by Newton-Schulz cost plus elementwise optimizer
    work, cumulatively over the model (`owner-strategy=balanced`; the
    `matrixfsdp` and `round_robin` baselines are there for comparison).
    Adjacent units are grouped for gathering when the mesh has more ranks
    than a unit has matrices (`group-units`). With `dp_replicate` (HSDP),
    parameters shard over `dp_shard` and replicate over `dp_replicate`; the
    replicas may split Newton-Schulz work (`ns-split`, chosen by cost).
    External (TP/EP-owned) parameters are left untouched. Placements present
    on input are pins: they are kept and checked.

    The policy, ZeRO level and mesh come from the options, else from the
    graph's `plan.policy` and `plan.mesh`.
  }];
  let options = AssignLayoutsOptionList;
}

def PlanReport : Pass<"mfsdp-plan-report", "::mlir::ModuleOp"> {
  let summary = "Report per-rank memory, optimizer work and communication of a plan";
  let description = [{
    For every planned `plan.graph`: per `dp_shard` rank, the owned
    matrices, Newton-Schulz FLOPs, bytes of parameters, gradients, fp32
    masters and optimizer state, predicted optimizer time, and bytes sent per
    step by collective kind; the max/mean imbalance of optimizer work,
    memory and per-group owner fan-out; the optimizer-time lower bound and
    the ratio to it; each unit's row layout and why; the HSDP Newton-Schulz
    decision; the external parameters. Times are predictions of the cost
    model for the chosen hardware profile.

    ```
    mfsdp-opt plan.mlir --mfsdp-plan-report=text -o /dev/null
    mfsdp-opt plan.mlir --mfsdp-plan-report="json output=plan.json"
    ```
  }];
  let options = [
    Option<"text", "text", "bool", /*default=*/"false",
           "Write the report as text (the default)">,
    Option<"json", "json", "bool", /*default=*/"false",
           "Write the report as JSON (docs/plan-report.md)">,
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "Where to write the report ('-' is stdout)">,
    Option<"hardware", "hardware", "std::string", /*default=*/"\"a100\"",
           "Hardware profile of the cost model: a100, h100, h100-ib, a100-pcie or h100-pcie">,
    Option<"nsPrecision", "ns-precision", "::mfsdp::NsPrecisionOption",
           /*default=*/"::mfsdp::NsPrecisionOption::Graph",
           "The precision Muon's Newton-Schulz runs in, which sets the rate "
           "the cost model prices it at: graph (the default: the graph's "
           "#plan.muon ns_precision, or the step's), fp32 or bf16; "
           "mfsdp-assign-layouts writes it into the graph, the other passes "
           "refuse one that contradicts what the graph or step records",
           "::mfsdp::clValues<::mfsdp::NsPrecisionOption>()">,
  ];
}

def BuildStep : Pass<"mfsdp-build-step", "::mlir::ModuleOp"> {
  let summary = "Build the program of one training step from a planned graph";
  let description = [{
    For every planned `plan.graph`, adds a `sched.step` with the same name
    after it: per gather group, the gathers before use (ZeRO-3 gathers
    again for backward and frees after each use; ZeRO-1/2 keep parameters),
    the trainer's forward, recomputation and backward as `sched.compute`
    with their cost for `tokens` tokens, gradient reduction after backward
    (`reduce_scatter` for row shards, `reduce_scatter_v` to the owners,
    `all_reduce` over `dp_replicate` for HSDP; ZeRO-1 all-reduces), local
    accumulation over `microbatches` with the reduction on the last, the
    optimizer kernels per group (Muon on each owner with `only_rank`), and
    for ZeRO-1/2 the all-gather of updated parameters. Collectives are
    synchronous; `mfsdp-bucket-collectives` and `mfsdp-schedule-overlap`
    come next.

    `baseline=fsdp2` builds the gathered-Muon baseline from a plan made with
    `policy=adamw`: the matrices `mixed_muon_adamw` would put on Muon stay
    row-sharded, and the optimizer all-gathers each one's gradient and runs
    Newton-Schulz on the whole matrix on every rank. `baseline=fsdp2-dtensor`
    keeps the same matrices row-sharded but runs torch.optim.Muon on the
    DTensor shards: each Newton-Schulz matmul takes the strategy DTensor's
    sharding propagation picks, its redistributions (all-to-all, all-gather,
    reduce-scatter, all-reduce) issued synchronously around it
    (docs/benchmarks.md). That replays Newton-Schulz in its `addmm` form
    (torch 2.9; `use_addmm=True` later); `baseline=fsdp2-dtensor-mm` replays
    the `use_addmm=False` form of later releases (`mm` plus pointwise ops,
    placed by DTensor's pointwise rules). A baseline over a plan of another
    policy than `adamw` is an error. `baseline=fsdp2-rows` is FSDP2 running
    the plan's own optimizer on its row shards: the plan's step, every
    `per_param` unit copying its shards into and out of the collective
    buffers as FSDP2 does, a unit of one row-shard parameter too. The plan's
    own step copies where the step runtime stages: units of two or more
    row-shard parameters. Every FSDP2 baseline copies as `fsdp2-rows` does.
  }];
  let options = [
    Option<"tokens", "tokens", "int64_t", /*default=*/"0",
           "Tokens per rank per microbatch (0: the graph's seq_len)">,
    Option<"microbatches", "microbatches", "int64_t", /*default=*/"1",
           "Gradient-accumulation microbatches per step">,
    Option<"baseline", "baseline", "::mfsdp::StepBaseline",
           /*default=*/"::mfsdp::StepBaseline::None",
           "Build a baseline instead: fsdp2 (gathered Muon), "
           "fsdp2-dtensor (Muon on DTensor shards, addmm form), "
           "fsdp2-dtensor-mm (the same, use_addmm=False form) or fsdp2-rows "
           "(the plan's optimizer, FSDP2's copies); none: the plan's own step",
           "::mfsdp::clValues<::mfsdp::StepBaseline>()">,
    Option<"nsSteps", "ns-steps", "int64_t", /*default=*/"0",
           "Newton-Schulz steps (0: the graph's Muon settings, else 5)">,
    Option<"reduceDtype", "reduce-dtype", "::mfsdp::ReduceDTypeOption",
           /*default=*/"::mfsdp::ReduceDTypeOption::Param",
           "The dtype the step's gradient reductions count: f32 (4 bytes an "
           "element on the wire), bf16 (2), or param (the default): each "
           "parameter's own dtype",
           "::mfsdp::clValues<::mfsdp::ReduceDTypeOption>()">,
  ];
  let dependentDialects = ["::mfsdp::sched::SchedDialect"];
}

def BucketCollectives : Pass<"mfsdp-bucket-collectives", "::mfsdp::sched::StepOp"> {
  let summary = "Merge collectives issued together into flat buckets";
  let description = [{
    In every `sched.step`, collectives issued at the same point (a run of
    adjacent synchronous collectives) that share kind, dtype-carrying
    buffers, mesh axes, communicator and phase are merged, in execution
    order, into buckets of at most `bucket-mb` MiB: one flat buffer with the
    parameters at static offsets, so each gather or reduction is a single
    collective. Owner chunks add up rank by rank, keeping every rank's
    matrices contiguous so the gathered buffer needs no unpack copy.
  }];
  let options = [
    Option<"bucketMB", "bucket-mb", "double", /*default=*/"0",
           "Largest bucket in MiB, fractions allowed (0: no limit)">,
  ];
  let dependentDialects = ["::mfsdp::sched::SchedDialect"];
}

def ScheduleOverlap : Pass<"mfsdp-schedule-overlap", "::mfsdp::sched::StepOp"> {
  let summary = "Overlap collectives with compute: async start/wait, prefetch";
  let description = [{
    Splits every collective into an `async` start and a `sched.wait` just
    before the first op that needs its buffers; prefetches gathers
    `prefetch` groups ahead in forward and in backward (where the next
    group's gather is issued before the current group's reduction, since
    one communicator runs collectives in issue order), within
    `max-inflight-mb` of gathered buffers alive at once; with
    `gather-comm=separate` gathers get their own communicator.

    The optimizer runs group by group, each group's kernels (Newton-Schulz
    included) after the wait for its reduction. With
    `optimizer-order=landing` the groups run in the order their reductions
    land (the last group first). With `optimizer-order=first-units` (the
    default) a few groups in landing order fill the wait for the last
    reduction and the rest run first unit first, so the group the next
    step gathers first is updated early and that gather can overlap the
    rest of the phase; how many groups fill is chosen by simulating each
    candidate on the `hardware` profile (see `mfsdp-sim`).

    Example:

    ```mlir
    // mfsdp-opt --mfsdp-schedule-overlap="prefetch=1 optimizer-order=first-units"
    sched.optimizer muon "muon g1 owner 0" ... group 1   // fills the wait
    sched.wait %reduce_g0
    sched.optimizer muon "muon g0 owner 0" ... group 0   // first unit
    sched.optimizer muon "muon g2 owner 0" ... group 2
    ```
  }];
  let options = [
    Option<"prefetch", "prefetch", "int64_t", /*default=*/"1",
           "Gather this many groups ahead (0: no prefetch)">,
    Option<"maxInflightMB", "max-inflight-mb", "int64_t", /*default=*/"0",
           "Cap on gathered MiB alive at once (0: no cap)">,
    Option<"gatherComm", "gather-comm", "::mfsdp::GatherComm",
           /*default=*/"::mfsdp::GatherComm::Shared",
           "shared (one communicator) or separate (gathers on their own)",
           "::mfsdp::clValues<::mfsdp::GatherComm>()">,
    Option<"optimizerOrder", "optimizer-order", "::mfsdp::OptimizerOrder",
           /*default=*/"::mfsdp::OptimizerOrder::FirstUnits",
           "first-units (the first groups updated first, chosen with the "
           "simulator) or landing (the order reductions land)",
           "::mfsdp::clValues<::mfsdp::OptimizerOrder>()">,
    Option<"hardware", "hardware", "std::string", /*default=*/"\"a100\"",
           "Simulator profile for optimizer-order=first-units: a100, h100, "
           "h100-ib, a100-pcie or h100-pcie">,
    Option<"nsPrecision", "ns-precision", "::mfsdp::NsPrecisionOption",
           /*default=*/"::mfsdp::NsPrecisionOption::Graph",
           "The precision Muon's Newton-Schulz runs in, which sets the rate "
           "the cost model prices it at: graph (the default: the graph's "
           "#plan.muon ns_precision, or the step's), fp32 or bf16; "
           "mfsdp-assign-layouts writes it into the graph, the other passes "
           "refuse one that contradicts what the graph or step records",
           "::mfsdp::clValues<::mfsdp::NsPrecisionOption>()">,
  ];
  let dependentDialects = ["::mfsdp::sched::SchedDialect"];
}

def PlanMemory : Pass<"mfsdp-plan-memory", "::mfsdp::sched::StepOp"> {
  let summary = "Place every buffer in a static per-rank arena";
  let description = [{
    Gives every `sched.alloc` an `offset` in its rank's arena, sharing space
    between buffers whose lifetimes (alloc to dealloc, extended to the wait
    of any collective using them) do not overlap, and records on the
    `sched.step` the arena size and the exact peak of live bytes per rank.

    Where the module holds the `plan.graph` the step was built from and a
    step library can be built from both, it places the library's own
    buffers too (fp32 masters, optimizer state, reduced gradient shards,
    gathered copies, gradients, bucket and load/store staging, sized as the
    runtime holds them) over the lifetimes of the program the library
    lowers the step to, and records that plan on the `sched.step`
    (`runtime_arena_bytes`, `runtime_offsets`, ...): the emitter writes it
    into the library as it is, and `mfsdp-verify-schedule` checks it.
    `accumulate` keeps the gradients between steps (a library for no-sync
    accumulation); a step of several microbatches keeps them anyway.
    `buckets=false` plans a library that reduces and gathers each
    parameter with its own collective (`mfsdp-compile --bucket-mb=0`)
    rather than the step's buckets.
  }];
  let options = [
    Option<"accumulate", "accumulate", "bool", /*default=*/"false",
           "The step library's memory plan keeps gradients between steps "
           "(no-sync accumulation)">,
    Option<"buckets", "buckets", "bool", /*default=*/"true",
           "The step library's runtime buckets are the step's (false: one "
           "collective per parameter)">,
  ];
  let dependentDialects = ["::mfsdp::sched::SchedDialect"];
}

def VerifySchedule : Pass<"mfsdp-verify-schedule", "::mfsdp::sched::StepOp"> {
  let summary = "Check a step for races, use after free, deadlocks and memory";
  let description = [{
    Fails with a diagnostic on the offending op if a buffer is used before
    the wait of the collective that fills it, freed or overwritten while a
    collective still uses it, used after it is freed; if a collective is
    issued by one rank only (the ranks would issue different sequences on a
    communicator and deadlock); if a collective is never waited for; or if
    a rank's arena exceeds `memory-cap-mb`. Then, where the module holds
    the `plan.graph` the step was built from, lowers the step to the
    runtime's program (as the step library will carry it) and fails on the
    `sched.step`, naming the hook and the op, if that program would not run
    as the step says: a unit not whole at its compute or released before
    it, a start not waited for or a wait for nothing, a parameter stepped
    before its reduction lands or not exactly once, ZeRO-1/2 gathers not
    once per unit, gathered copies allocated or freed in another order
    (docs/schedule.md, "Verifying what runs"). A step that records the
    library's memory plan (`mfsdp-plan-memory`'s `runtime_*`) has it
    checked against the buffers and lifetimes of that program: one place a
    buffer, inside the rank's arena, no two live buffers on one byte.
  }];
  let options = [
    Option<"memoryCapMB", "memory-cap-mb", "int64_t", /*default=*/"0",
           "Per-rank memory cap in MiB (0: none)">,
  ];
}

def ScheduleStep : Pass<"mfsdp-schedule-step", "::mfsdp::sched::StepOp"> {
  let summary = "Bucket, overlap, plan memory and verify a step in one pass";
  let description = [{
    Runs `mfsdp-bucket-collectives`, `mfsdp-schedule-overlap`,
    `mfsdp-plan-memory` and `mfsdp-verify-schedule`, with their options, on
    the step read once from the `sched.step`, and writes it once: the
    result and the diagnostics are those of the four passes in a row, with
    the reading and writing of the whole step three times fewer (what the
    default pipeline runs; on large graphs converting the step between the
    IR and the C++ program dominated the four passes).

    Example:

    ```mlir
    // mfsdp-opt --mfsdp-schedule-step="prefetch=1 memory-cap-mb=76000"
    // is the same as
    // mfsdp-opt --mfsdp-bucket-collectives --mfsdp-schedule-overlap=prefetch=1
    //           --mfsdp-plan-memory --mfsdp-verify-schedule=memory-cap-mb=76000
    ```
  }];
  let options = [
    Option<"bucketMB", "bucket-mb", "double", /*default=*/"0",
           "Largest bucket in MiB, fractions allowed (0: no limit)">,
    Option<"prefetch", "prefetch", "int64_t", /*default=*/"1",
           "Gather this many groups ahead (0: no prefetch)">,
    Option<"maxInflightMB", "max-inflight-mb", "int64_t", /*default=*/"0",
           "Cap on gathered MiB alive at once (0: no cap)">,
    Option<"gatherComm", "gather-comm", "::mfsdp::GatherComm",
           /*default=*/"::mfsdp::GatherComm::Shared",
           "shared (one communicator) or separate (gathers on their own)",
           "::mfsdp::clValues<::mfsdp::GatherComm>()">,
    Option<"optimizerOrder", "optimizer-order", "::mfsdp::OptimizerOrder",
           /*default=*/"::mfsdp::OptimizerOrder::FirstUnits",
           "first-units (the first groups updated first, chosen with the "
           "simulator) or landing (the order reductions land)",
           "::mfsdp::clValues<::mfsdp::OptimizerOrder>()">,
    Option<"hardware", "hardware", "std::string", /*default=*/"\"a100\"",
           "Simulator profile for optimizer-order=first-units: a100, h100, "
           "h100-ib, a100-pcie or h100-pcie">,
    Option<"nsPrecision", "ns-precision", "::mfsdp::NsPrecisionOption",
           /*default=*/"::mfsdp::NsPrecisionOption::Graph",
           "The precision Muon's Newton-Schulz runs in, which sets the rate "
           "the cost model prices it at: graph (the default: the graph's "
           "#plan.muon ns_precision, or the step's), fp32 or bf16; "
           "mfsdp-assign-layouts writes it into the graph, the other passes "
           "refuse one that contradicts what the graph or step records",
           "::mfsdp::clValues<::mfsdp::NsPrecisionOption>()">,
    Option<"memoryCapMB", "memory-cap-mb", "int64_t", /*default=*/"0",
           "Per-rank memory cap in MiB (0: none)">,
    Option<"accumulate", "accumulate", "bool", /*default=*/"false",
           "mfsdp-plan-memory's: the step library's memory plan keeps "
           "gradients between steps (no-sync accumulation)">,
    Option<"buckets", "buckets", "bool", /*default=*/"true",
           "mfsdp-plan-memory's: the step library's runtime buckets are the "
           "step's (false: one collective per parameter)">,
  ];
  let dependentDialects = ["::mfsdp::sched::SchedDialect"];
}

// The options of mfsdp-build-and-schedule-step, which
// mfsdp-plan-and-schedule-step takes too.
defvar BuildAndScheduleStepOptionList = [
    Option<"tokens", "tokens", "int64_t", /*default=*/"0",
           "Tokens per rank per microbatch (0: the graph's seq_len)">,
    Option<"microbatches", "microbatches", "int64_t", /*default=*/"1",
           "Gradient-accumulation microbatches per step">,
    Option<"baseline", "baseline", "::mfsdp::StepBaseline",
           /*default=*/"::mfsdp::StepBaseline::None",
           "Build a baseline instead (as mfsdp-build-step)",
           "::mfsdp::clValues<::mfsdp::StepBaseline>()">,
    Option<"nsSteps", "ns-steps", "int64_t", /*default=*/"0",
           "Newton-Schulz steps (0: the graph's Muon settings, else 5)">,
    Option<"reduceDtype", "reduce-dtype", "::mfsdp::ReduceDTypeOption",
           /*default=*/"::mfsdp::ReduceDTypeOption::Param",
           "The dtype the step's gradient reductions count (as mfsdp-build-step)",
           "::mfsdp::clValues<::mfsdp::ReduceDTypeOption>()">,
    Option<"bucketMB", "bucket-mb", "double", /*default=*/"0",
           "Largest bucket in MiB, fractions allowed (0: no limit)">,
    Option<"prefetch", "prefetch", "int64_t", /*default=*/"1",
           "Gather this many groups ahead (0: no prefetch)">,
    Option<"maxInflightMB", "max-inflight-mb", "int64_t", /*default=*/"0",
           "Cap on gathered MiB alive at once (0: no cap)">,
    Option<"gatherComm", "gather-comm", "::mfsdp::GatherComm",
           /*default=*/"::mfsdp::GatherComm::Shared",
           "shared (one communicator) or separate (gathers on their own)",
           "::mfsdp::clValues<::mfsdp::GatherComm>()">,
    Option<"optimizerOrder", "optimizer-order", "::mfsdp::OptimizerOrder",
           /*default=*/"::mfsdp::OptimizerOrder::FirstUnits",
           "first-units or landing (as mfsdp-schedule-overlap)",
           "::mfsdp::clValues<::mfsdp::OptimizerOrder>()">,
    Option<"hardware", "hardware", "std::string", /*default=*/"\"a100\"",
           "Simulator profile for optimizer-order=first-units: a100, h100, "
           "h100-ib, a100-pcie or h100-pcie">,
    Option<"nsPrecision", "ns-precision", "::mfsdp::NsPrecisionOption",
           /*default=*/"::mfsdp::NsPrecisionOption::Graph",
           "The precision Muon's Newton-Schulz runs in, which sets the rate "
           "the cost model prices it at: graph (the default: the graph's "
           "#plan.muon ns_precision, or the step's), fp32 or bf16; "
           "mfsdp-assign-layouts writes it into the graph, the other passes "
           "refuse one that contradicts what the graph or step records",
           "::mfsdp::clValues<::mfsdp::NsPrecisionOption>()">,
    Option<"memoryCapMB", "memory-cap-mb", "int64_t", /*default=*/"0",
           "Per-rank memory cap in MiB (0: none)">,
    Option<"accumulate", "accumulate", "bool", /*default=*/"false",
           "mfsdp-plan-memory's: the step library's memory plan keeps "
           "gradients between steps (no-sync accumulation)">,
    Option<"buckets", "buckets", "bool", /*default=*/"true",
           "mfsdp-plan-memory's: the step library's runtime buckets are the "
           "step's (false: one collective per parameter)">,
];

def BuildAndScheduleStep
    : Pass<"mfsdp-build-and-schedule-step", "::mlir::ModuleOp"> {
  let summary = "Build each planned graph's step and schedule it before it is written";
  let description = [{
    `mfsdp-build-step` followed by `mfsdp-schedule-step`, with their options,
    on the step held in memory between the two: the step is written into
    the IR once, already bucketed, overlapped, memory-planned and verified,
    instead of written, read back and written again. The result and the
    diagnostics are those of the two passes in a row (on large graphs the IR
    round trip between the two was a sixth of the pipeline's time). The
    default pipeline runs it after `mfsdp-assign-layouts`, as one pass:
    `mfsdp-plan-and-schedule-step`.

    Example:

    ```mlir
    // mfsdp-opt --mfsdp-build-and-schedule-step="microbatches=2 prefetch=1"
    // is the same as
    // mfsdp-opt --mfsdp-build-step=microbatches=2
    //           --mfsdp-schedule-step=prefetch=1
    ```
  }];
  let options = BuildAndScheduleStepOptionList;
  let dependentDialects = ["::mfsdp::sched::SchedDialect"];
}

// The options both passes have: the pipeline gives them one value.
defvar SharedStepOptions = ["ns-steps", "hardware", "ns-precision"];

def PlanAndScheduleStep
    : Pass<"mfsdp-plan-and-schedule-step", "::mlir::ModuleOp"> {
  let summary = "Plan each graph's layouts, then build and schedule its step, as one pass";
  let description = [{
    `mfsdp-assign-layouts` on every `plan.graph` of the module, then
    `mfsdp-build-and-schedule-step`, with their options (`ns-steps`,
    `hardware` and `ns-precision` are given to both). The result and the
    diagnostics are those of the two passes in a row; what differs is that
    the pass manager verifies the module once, after both, rather than
    each graph after its layouts too (on a graph of 100,000 units that
    verification took 0.75 s). This is the pass `--mfsdp-pipeline` runs.
    To see the IR between the two stages, run the two passes.

    Example:

    ```mlir
    // mfsdp-opt --mfsdp-plan-and-schedule-step="mesh=dp_shard=8 prefetch=2"
    // is the same as
    // mfsdp-opt --mfsdp-assign-layouts=mesh=dp_shard=8
    //           --mfsdp-build-and-schedule-step=prefetch=2
    ```
  }];
  let options = !listconcat(AssignLayoutsOptionList,
      !filter(option, BuildAndScheduleStepOptionList,
              !empty(!filter(name, SharedStepOptions,
                             !eq(name, option.argument)))));
  let dependentDialects = ["::mfsdp::sched::SchedDialect"];
}

#endif // MFSDP_PASSES_TD

//===- Pipeline.h - The default mfsdp pipeline -------------------*- C++ -*-===//
#ifndef MFSDP_PASSES_PIPELINE_H
#define MFSDP_PASSES_PIPELINE_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "passes/VocabularyOptions.h"

namespace mfsdp {

/// Options of `--mfsdp-pipeline`: planning, step building, bucketing,
/// scheduling, memory planning and verification in one.
struct PipelineOptions : public mlir::PassPipelineOptions<PipelineOptions> {
  Option<PolicyOption> policy{
      *this, "policy",
      llvm::cl::desc("adamw, sgd, muon or mixed_muon_adamw; graph (the "
                     "default): the graph's"),
      llvm::cl::init(PolicyOption::Graph), clValues<PolicyOption>()};
  Option<int64_t> zero{*this, "zero", llvm::cl::desc("ZeRO level (0: the graph's)"),
                       llvm::cl::init(0)};
  Option<std::string> mesh{*this, "mesh",
                           llvm::cl::desc("NAME=SIZE,... (default: the graph's)"),
                           llvm::cl::init("")};
  Option<int64_t> world{*this, "world", llvm::cl::desc("ranks the mesh must have"),
                        llvm::cl::init(0)};
  Option<bool> muonEmbedding{*this, "muon-embedding",
                             llvm::cl::desc("mixed_muon_adamw: put embeddings on Muon"),
                             llvm::cl::init(false)};
  Option<bool> muonHead{*this, "muon-head",
                        llvm::cl::desc("mixed_muon_adamw: put the output head on Muon"),
                        llvm::cl::init(false)};
  Option<bool> muonRouter{*this, "muon-router",
                          llvm::cl::desc("mixed_muon_adamw: put MoE routers on Muon"),
                          llvm::cl::init(false)};
  ListOption<std::string> muonInclude{
      *this, "muon-include",
      llvm::cl::desc("parameters forced to Muon (they must be 2-D)")};
  ListOption<int64_t> blockShard{
      *this, "block-shard",
      llvm::cl::desc("block-shard AdamW matrices in blocks of ROWS,COLS")};
  Option<int64_t> groupMaxMB{
      *this, "group-max-mb",
      llvm::cl::desc("automatic grouping: at most this many MiB gathered per group"),
      llvm::cl::init(8192)};
  Option<int64_t> replicateUnder{
      *this, "replicate-under-bytes",
      llvm::cl::desc("replicate parameters smaller than this many bytes"),
      llvm::cl::init(0)};
  Option<OwnerStrategy> ownerStrategy{
      *this, "owner-strategy",
      llvm::cl::desc("balanced, matrixfsdp or round_robin"),
      llvm::cl::init(OwnerStrategy::Balanced), clValues<OwnerStrategy>()};
  Option<int64_t> groupUnits{*this, "group-units",
                             llvm::cl::desc("0 chooses, 1 none, N units a group"),
                             llvm::cl::init(0)};
  Option<RowMode> rowLayout{*this, "row-layout",
                            llvm::cl::desc("per_param (what the step runtime runs), auto or flat"),
                            llvm::cl::init(RowMode::PerParam), clValues<RowMode>()};
  Option<NsSplit> nsSplit{*this, "ns-split", llvm::cl::desc("auto, on or off"),
                          llvm::cl::init(NsSplit::Auto), clValues<NsSplit>()};
  Option<int64_t> nsSteps{*this, "ns-steps",
                          llvm::cl::desc("Newton-Schulz steps (0: the graph's)"),
                          llvm::cl::init(0)};
  Option<bool> fp32Master{*this, "fp32-master",
                          llvm::cl::desc("keep fp32 masters of narrower parameters"),
                          llvm::cl::init(true)};
  Option<int64_t> tokens{*this, "tokens",
                         llvm::cl::desc("tokens per rank per microbatch (0: seq_len)"),
                         llvm::cl::init(0)};
  Option<int64_t> microbatches{*this, "microbatches", llvm::cl::desc("microbatches"),
                               llvm::cl::init(1)};
  Option<ReduceDTypeOption> reduceDtype{
      *this, "reduce-dtype",
      llvm::cl::desc("the dtype the step's gradient reductions count: f32, bf16 or "
                     "param (each parameter's own)"),
      llvm::cl::init(ReduceDTypeOption::Param), clValues<ReduceDTypeOption>()};
  Option<StepBaseline> baseline{
      *this, "baseline",
      llvm::cl::desc("fsdp2: the gathered-Muon baseline; fsdp2-dtensor, "
                     "fsdp2-dtensor-mm: Muon on DTensor shards, addmm / mm "
                     "form; fsdp2-rows: the plan's optimizer with FSDP2's "
                     "copies; none: the plan's own step"),
      llvm::cl::init(StepBaseline::None), clValues<StepBaseline>()};
  Option<double> bucketMB{*this, "bucket-mb", llvm::cl::desc("bucket size in MiB (0: no limit)"),
                           llvm::cl::init(0)};
  Option<int64_t> prefetch{*this, "prefetch", llvm::cl::desc("groups gathered ahead"),
                           llvm::cl::init(1)};
  Option<int64_t> maxInflightMB{*this, "max-inflight-mb",
                                llvm::cl::desc("gathered MiB alive at once (0: no cap)"),
                                llvm::cl::init(0)};
  Option<GatherComm> gatherComm{*this, "gather-comm",
                                llvm::cl::desc("shared or separate"),
                                llvm::cl::init(GatherComm::Shared),
                                clValues<GatherComm>()};
  Option<OptimizerOrder> optimizerOrder{
      *this, "optimizer-order",
      llvm::cl::desc("first-units (chosen with the simulator) or landing"),
      llvm::cl::init(OptimizerOrder::FirstUnits), clValues<OptimizerOrder>()};
  Option<int64_t> memoryCapMB{*this, "memory-cap-mb",
                              llvm::cl::desc("per-rank memory cap (0: none)"),
                              llvm::cl::init(0)};
  Option<std::string> hardware{*this, "hardware", llvm::cl::desc("a100, h100, h100-ib, a100-pcie or h100-pcie"),
                               llvm::cl::init("a100")};
  Option<bool> accumulate{
      *this, "accumulate",
      llvm::cl::desc("mfsdp-plan-memory's: the step library's memory plan keeps gradients "
                     "between steps (no-sync accumulation)"),
      llvm::cl::init(false)};
  Option<bool> buckets{
      *this, "buckets",
      llvm::cl::desc("mfsdp-plan-memory's: the step library's runtime buckets are the "
                     "step's (false: one collective per parameter)"),
      llvm::cl::init(true)};
  Option<NsPrecisionOption> nsPrecision{
      *this, "ns-precision",
      llvm::cl::desc("Muon's Newton-Schulz precision, planned, priced and written into "
                     "the graph's #plan.muon: graph (its own; fp32 if none), fp32 or bf16"),
      llvm::cl::init(NsPrecisionOption::Graph), clValues<NsPrecisionOption>()};
};

/// Adds the default pipeline to `pm`.
void buildDefaultPipeline(mlir::OpPassManager &pm, const PipelineOptions &options);

/// Registers `--mfsdp-pipeline`.
void registerDefaultPipeline();

} // namespace mfsdp

#endif // MFSDP_PASSES_PIPELINE_H

/*===- Vocabulary.h - The enums every layer of mfsdp shares ------*- C -*-===*
 *
 * One definition of each enumeration the graph format, the planner, the step
 * program, the dialects and the runtime's C ABI speak: placements,
 * optimizers, dtypes, policies, Muon's update scale, row layouts, module
 * kinds, collective kinds, phases. Each is a list
 *
 *   X(C enumerator, C++ enumerator, spelling, value)
 *
 * from which this header makes the C enum of the ABI (runtime.h includes
 * it), the C++ `enum class` of the same values, and the one name table that
 * spells the values in the graph format, pass options, printed IR and
 * reports. The dialects' ODS enums are tied to these values by static_assert
 * (dialects/plan/PlanDialect.cpp, dialects/sched/SchedDialect.cpp).
 *
 * This header is C99 when read by a C compiler: the C++ part (name tables,
 * parseEnum, enumName) is under __cplusplus.
 *
 *===----------------------------------------------------------------------===*/
#ifndef MFSDP_VOCABULARY_H
#define MFSDP_VOCABULARY_H

/* Where a parameter lives over the data-parallel ranks. A runtime plan
 * (mfsdp_param_desc.placement) holds ROW_SHARD, OWNER, REPLICATE or
 * BLOCK_SHARD; NONE (not planned yet) and EXTERNAL (owned by a
 * tensor/expert-parallel dim, outside the data-parallel plan) exist in the
 * compiler only, and the runtime refuses them.
 *  - ROW_SHARD: torch.chunk rows over dp_shard.
 *  - OWNER: whole on one dp_shard rank.
 *  - REPLICATE: whole on every rank.
 *  - BLOCK_SHARD: tiled by block_rows x block_cols blocks; the blocks, in
 *    row-major order, are dealt round-robin to the dp_shard ranks (block k
 *    to rank k % dp_shard), and each rank keeps its blocks packed one after
 *    the other, each block row-major. */
#define MFSDP_PLACEMENT_LIST(X)                                                \
  X(MFSDP_PLACEMENT_NONE, None, "none", -1)                                    \
  X(MFSDP_ROW_SHARD, RowShard, "row_shard", 0)                                 \
  X(MFSDP_OWNER, Owner, "owner", 1)                                            \
  X(MFSDP_REPLICATE, Replicate, "replicate", 2)                                \
  X(MFSDP_BLOCK_SHARD, BlockShard, "block_shard", 3)                           \
  X(MFSDP_EXTERNAL, External, "external", 4)

/* The optimizer that updates a parameter (NONE: frozen, or not planned). */
#define MFSDP_OPTIMIZER_LIST(X)                                                \
  X(MFSDP_OPT_NONE, None, "none", 0)                                           \
  X(MFSDP_OPT_ADAMW, AdamW, "adamw", 1)                                        \
  X(MFSDP_OPT_SGD, SGD, "sgd", 2)                                              \
  X(MFSDP_OPT_MUON, Muon, "muon", 3)

/* The dtype of a compute copy. BF16: the gathered compute copy is rounded to
 * bf16 (round to nearest even), and so is the gradient before it is reduced
 * (the reduction sums in fp32); masters and optimizer state stay fp32. Views
 * stay fp32 arrays holding bf16 values. */
#define MFSDP_COMPUTE_DTYPE_LIST(X)                                            \
  X(MFSDP_COMPUTE_F32, F32, "f32", 0)                                          \
  X(MFSDP_COMPUTE_BF16, BF16, "bf16", 1)

/* The dtype gradients are reduced in over the data-parallel ranks (FSDP2's
 * MixedPrecisionPolicy.reduce_dtype), whatever the compute dtype; the
 * reduced gradient this rank keeps (grad_shard), masters and optimizer
 * state stay fp32.
 *  - F32: reduced in fp32 (a bf16 gradient widened exactly first).
 *  - BF16: the gradient rounded to bf16 (round to nearest even) and
 *    reduced in bf16, 2 bytes an element on the wire, every partial sum
 *    rounded to bf16 as NCCL's ncclBfloat16 sum does; the result widened
 *    to fp32 before the average. */
#define MFSDP_REDUCE_DTYPE_LIST(X)                                             \
  X(MFSDP_REDUCE_F32, F32, "f32", 0)                                           \
  X(MFSDP_REDUCE_BF16, BF16, "bf16", 1)

/* How Muon's Newton-Schulz normalises its input G.
 *  - ADD_EPS: G / (||G||_F + ns_eps), Muon's reference code.
 *  - CLAMP: G / max(||G||_F, ns_eps), torch.optim.Muon. */
#define MFSDP_NS_NORM_LIST(X)                                                  \
  X(MFSDP_NS_NORM_ADD_EPS, AddEps, "add_eps", 0)                               \
  X(MFSDP_NS_NORM_CLAMP, Clamp, "clamp", 1)

/* The precision of Muon's Newton-Schulz products; the same choice gives the
 * same numbers (up to the order of the fp32 sums) on every backend.
 *  - FP32: fp32 operands, accumulation and results.
 *  - BF16: torch.optim.Muon's: X, A = X X^T and B = b A + c A A held in
 *    bf16, every product from bf16 operands accumulated in fp32, each
 *    result rounded once to bf16.
 * The plan's (#plan.muon ns_precision; mfsdp_plan.muon_ns_precision, the
 * default of the runtime's hyperparameter mfsdp_hparams.ns_precision), and
 * so the rate the cost model prices Newton-Schulz at. */
#define MFSDP_NS_PRECISION_LIST(X)                                             \
  X(MFSDP_NS_PRECISION_FP32, FP32, "fp32", 0)                                  \
  X(MFSDP_NS_PRECISION_BF16, BF16, "bf16", 1)

/* Muon's update scale for a matrix of A rows and B columns
 * (torch.optim.Muon's adjust_lr_fn; the plan's muon_scale).
 *  - MATCH_RMS_ADAMW: 0.2 * sqrt(max(A, B)).
 *  - ORIGINAL: sqrt(max(1, A / B)).
 *  - SPECTRAL_UNCLAMPED: sqrt(A / B) (runtime only; plans spell the first
 *    two). */
#define MFSDP_ADJUST_LR_LIST(X)                                                \
  X(MFSDP_ADJUST_LR_MATCH_RMS_ADAMW, MatchRmsAdamW, "match_rms_adamw", 0)      \
  X(MFSDP_ADJUST_LR_ORIGINAL, Original, "original", 1)                         \
  X(MFSDP_ADJUST_LR_SPECTRAL_UNCLAMPED, SpectralUnclamped,                     \
    "spectral_unclamped", 2)

/* The optimizer policy of a whole plan. */
#define MFSDP_POLICY_LIST(X)                                                   \
  X(MFSDP_POLICY_ADAMW, AdamW, "adamw", 0)                                     \
  X(MFSDP_POLICY_SGD, SGD, "sgd", 1)                                           \
  X(MFSDP_POLICY_MUON, Muon, "muon", 2)                                        \
  X(MFSDP_POLICY_MIXED_MUON_ADAMW, MixedMuonAdamW, "mixed_muon_adamw", 3)

/* Muon's update scale as a plan spells it (the first two of adjust_lr). */
#define MFSDP_MUON_SCALE_LIST(X)                                               \
  X(MFSDP_MUON_SCALE_MATCH_RMS_ADAMW, MatchRmsAdamW, "match_rms_adamw", 0)     \
  X(MFSDP_MUON_SCALE_ORIGINAL, Original, "original", 1)

/* How the row shards of a unit are laid out in its gather buffer: one
 * torch.chunk per parameter (FSDP2) or row-aligned flat buckets
 * (Megatron-FSDP). */
#define MFSDP_ROW_LAYOUT_LIST(X)                                               \
  X(MFSDP_ROW_LAYOUT_PER_PARAM, PerParam, "per_param", 0)                      \
  X(MFSDP_ROW_LAYOUT_FLAT, Flat, "flat", 1)

/* Element types of parameters, spelled as the graph format spells them. */
#define MFSDP_DTYPE_LIST(X)                                                    \
  X(MFSDP_DTYPE_F64, F64, "f64", 0)                                            \
  X(MFSDP_DTYPE_F32, F32, "f32", 1)                                            \
  X(MFSDP_DTYPE_BF16, BF16, "bf16", 2)                                         \
  X(MFSDP_DTYPE_F16, F16, "f16", 3)                                            \
  X(MFSDP_DTYPE_F8E4M3, F8E4M3, "f8e4m3fn", 4)                                 \
  X(MFSDP_DTYPE_F8E5M2, F8E5M2, "f8e5m2", 5)

/* Kind of the module that holds a parameter. */
#define MFSDP_MODULE_KIND_LIST(X)                                              \
  X(MFSDP_MODULE_LINEAR, Linear, "linear", 0)                                  \
  X(MFSDP_MODULE_EMBEDDING, Embedding, "embedding", 1)                         \
  X(MFSDP_MODULE_OUTPUT, Output, "output", 2)                                  \
  X(MFSDP_MODULE_NORM, Norm, "norm", 3)                                        \
  X(MFSDP_MODULE_ROUTER, Router, "router", 4)                                  \
  X(MFSDP_MODULE_EXPERT, Expert, "expert", 5)                                  \
  X(MFSDP_MODULE_OTHER, Other, "other", 6)

/* Collectives, named after MLIR's upstream `shard` collectives; the `_v`
 * forms carry one chunk per rank (matrix owners). */
#define MFSDP_COLL_KIND_LIST(X)                                                \
  X(MFSDP_COLL_ALL_GATHER, AllGather, "all_gather", 0)                         \
  X(MFSDP_COLL_REDUCE_SCATTER, ReduceScatter, "reduce_scatter", 1)             \
  X(MFSDP_COLL_ALL_REDUCE, AllReduce, "all_reduce", 2)                         \
  X(MFSDP_COLL_ALL_GATHER_V, AllGatherV, "all_gather_v", 3)                    \
  X(MFSDP_COLL_REDUCE_SCATTER_V, ReduceScatterV, "reduce_scatter_v", 4)

/* Phases of a training step. */
#define MFSDP_PHASE_LIST(X)                                                    \
  X(MFSDP_PHASE_FORWARD, Forward, "forward", 0)                                \
  X(MFSDP_PHASE_BACKWARD, Backward, "backward", 1)                             \
  X(MFSDP_PHASE_OPTIMIZER, Optimizer, "optimizer", 2)

/* Kinds of a unit's kernels for the cost model (mfsdp/Kernel.h); C++ only
 * (the first column, the C name, is unused). */
#define MFSDP_KERNEL_KIND_LIST(X)                                              \
  X(_, Gemm, "gemm", 0)                                                        \
  X(_, Attention, "attention", 1)                                              \
  X(_, Memory, "memory", 2)

/* Choices of the compiler's pass and tool options; C++ only (the first
 * column, the C name, is unused). */

/* The policy option of mfsdp-assign-layouts and the pipeline: a policy, or
 * the graph's own (plan.policy, else adamw). */
#define MFSDP_POLICY_OPTION_LIST(X)                                            \
  X(_, Graph, "graph", -1)                                                     \
  MFSDP_POLICY_LIST(X)

/* The reduce-dtype option of mfsdp-build-step: a reduce dtype, or param
 * (the default): each parameter's own dtype, the bytes the step counted
 * before the option existed. */
#define MFSDP_REDUCE_DTYPE_OPTION_LIST(X)                                      \
  X(_, Param, "param", -1)                                                     \
  MFSDP_REDUCE_DTYPE_LIST(X)

/* Newton-Schulz precision option of the passes and tools: the graph's (its
 * #plan.muon ns_precision, or the step's, recorded from it), or one to
 * plan with (mfsdp-assign-layouts writes it into the graph). */
#define MFSDP_NS_PRECISION_OPTION_LIST(X)                                      \
  X(_, Graph, "graph", -1)                                                     \
  MFSDP_NS_PRECISION_LIST(X)

/* Row layout option of mfsdp-assign-layouts: chosen by cost, or forced. */
#define MFSDP_ROW_MODE_LIST(X)                                                 \
  X(_, Auto, "auto", 0)                                                        \
  X(_, PerParam, "per_param", 1)                                               \
  X(_, Flat, "flat", 2)

/* HSDP: whether the replicas split Newton-Schulz work. */
#define MFSDP_NS_SPLIT_LIST(X)                                                 \
  X(_, Auto, "auto", 0)                                                        \
  X(_, On, "on", 1)                                                            \
  X(_, Off, "off", 2)

/* Owner assignment of Muon matrices.
 *  - balanced: ours; global LPT by cost (ties by memory), then moves and
 *    swaps that lower the most loaded rank, then swaps of interchangeable
 *    items between groups to even out per-group fan-out.
 *  - matrixfsdp: MatrixFSDP's default ("role_greedy"): group by group, LPT
 *    by element count onto the rank with the least cumulative elements.
 *  - round_robin: item i to rank i mod W, in item order. */
#define MFSDP_OWNER_STRATEGY_LIST(X)                                           \
  X(_, Balanced, "balanced", 0)                                                \
  X(_, MatrixFSDP, "matrixfsdp", 1)                                            \
  X(_, RoundRobin, "round_robin", 2)

/* Communicators of mfsdp-schedule-overlap: gathers share the reductions'
 * communicator, or have their own. */
#define MFSDP_GATHER_COMM_LIST(X)                                              \
  X(_, Shared, "shared", 0)                                                    \
  X(_, Separate, "separate", 1)

/* Order of the optimizer groups in mfsdp-schedule-overlap. */
#define MFSDP_OPTIMIZER_ORDER_LIST(X)                                          \
  X(_, FirstUnits, "first-units", 0)                                           \
  X(_, Landing, "landing", 1)

/* The baseline mfsdp-build-step builds instead of the plan's step (none:
 * the plan's own step). */
#define MFSDP_STEP_BASELINE_LIST(X)                                            \
  X(_, None, "none", 0)                                                        \
  X(_, FSDP2, "fsdp2", 1)                                                      \
  X(_, FSDP2DTensor, "fsdp2-dtensor", 2)                                       \
  X(_, FSDP2DTensorMm, "fsdp2-dtensor-mm", 3)                                  \
  X(_, FSDP2Rows, "fsdp2-rows", 4)

#define MFSDP_VOCAB_C_CASE(cName, cxxName, spelling, value) cName = value,

typedef enum mfsdp_placement {
  MFSDP_PLACEMENT_LIST(MFSDP_VOCAB_C_CASE)
} mfsdp_placement;
typedef enum mfsdp_optimizer {
  MFSDP_OPTIMIZER_LIST(MFSDP_VOCAB_C_CASE)
} mfsdp_optimizer;
typedef enum mfsdp_compute_dtype {
  MFSDP_COMPUTE_DTYPE_LIST(MFSDP_VOCAB_C_CASE)
} mfsdp_compute_dtype;
typedef enum mfsdp_reduce_dtype {
  MFSDP_REDUCE_DTYPE_LIST(MFSDP_VOCAB_C_CASE)
} mfsdp_reduce_dtype;
typedef enum mfsdp_ns_norm {
  MFSDP_NS_NORM_LIST(MFSDP_VOCAB_C_CASE)
} mfsdp_ns_norm;
typedef enum mfsdp_ns_precision {
  MFSDP_NS_PRECISION_LIST(MFSDP_VOCAB_C_CASE)
} mfsdp_ns_precision;
typedef enum mfsdp_adjust_lr {
  MFSDP_ADJUST_LR_LIST(MFSDP_VOCAB_C_CASE)
} mfsdp_adjust_lr;

/* The most elements one parameter may have, 2^40 (4 TiB in fp32): every
 * buffer size derived from it (state, padding, dp_shard chunks) stays far
 * inside a 64-bit byte count. The graph reader, the plan.param verifier and
 * mfsdp_create refuse larger tensors. */
#define MFSDP_MAX_PARAM_ELEMENTS (1LL << 40)

/* The most Newton-Schulz iterations a Muon plan may ask for (5 is usual);
 * the count travels as a 32-bit int into the step library. */
#define MFSDP_MAX_NS_STEPS 1000

/* The most tokens per rank per microbatch (a graph's seq_len, a step's
 * tokens), 2^24: byte counts of activations stay exact in a double. And the
 * most microbatches a step unrolls (its ops grow with them). */
#define MFSDP_MAX_TOKENS (1LL << 24)
#define MFSDP_MAX_MICROBATCHES 1024

#ifdef __cplusplus

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mfsdp::vocab {

/// One row of a name table: the value, its spelling and the name of its C
/// enumerator ("_" for the C++-only lists).
template <typename E> struct Entry {
  E value;
  std::string_view name;
  const char *cName;
};

} // namespace mfsdp::vocab

#define MFSDP_VOCAB_CXX_CASE(cName, cxxName, spelling, value) cxxName = value,
#define MFSDP_VOCAB_CXX_ENTRY(cName, cxxName, spelling, value)                 \
  ::mfsdp::vocab::Entry<VocabEnum>{VocabEnum::cxxName, spelling, #cName},

/// Defines `enum class Name` from LIST and its name table, found by
/// argument-dependent lookup as `vocabTable(Name{})`; `what` names the
/// vocabulary in error messages ("policy", "placement"). Usable in any
/// namespace, for enums that the C ABI does not carry as well.
#define MFSDP_VOCAB_ENUM(Name, what, LIST)                                     \
  enum class Name : int32_t { LIST(MFSDP_VOCAB_CXX_CASE) };                    \
  [[maybe_unused]] constexpr auto vocabTable(Name) {                           \
    using VocabEnum = Name;                                                    \
    return std::array{LIST(MFSDP_VOCAB_CXX_ENTRY)};                            \
  }                                                                            \
  [[maybe_unused]] constexpr std::string_view vocabWhat(Name) { return what; }

namespace mfsdp {

MFSDP_VOCAB_ENUM(Placement, "placement", MFSDP_PLACEMENT_LIST)
MFSDP_VOCAB_ENUM(Optimizer, "optimizer", MFSDP_OPTIMIZER_LIST)
MFSDP_VOCAB_ENUM(ComputeDType, "compute dtype", MFSDP_COMPUTE_DTYPE_LIST)
MFSDP_VOCAB_ENUM(ReduceDType, "reduce dtype", MFSDP_REDUCE_DTYPE_LIST)
MFSDP_VOCAB_ENUM(NsNorm, "Newton-Schulz norm", MFSDP_NS_NORM_LIST)
MFSDP_VOCAB_ENUM(NsPrecision, "Newton-Schulz precision", MFSDP_NS_PRECISION_LIST)
MFSDP_VOCAB_ENUM(AdjustLr, "adjust_lr", MFSDP_ADJUST_LR_LIST)
MFSDP_VOCAB_ENUM(PolicyKind, "policy", MFSDP_POLICY_LIST)
MFSDP_VOCAB_ENUM(MuonScale, "Muon scale", MFSDP_MUON_SCALE_LIST)
MFSDP_VOCAB_ENUM(RowLayout, "row layout", MFSDP_ROW_LAYOUT_LIST)
MFSDP_VOCAB_ENUM(DType, "dtype", MFSDP_DTYPE_LIST)
MFSDP_VOCAB_ENUM(ModuleKind, "module kind", MFSDP_MODULE_KIND_LIST)
MFSDP_VOCAB_ENUM(CollKind, "collective kind", MFSDP_COLL_KIND_LIST)
MFSDP_VOCAB_ENUM(Phase, "phase", MFSDP_PHASE_LIST)
MFSDP_VOCAB_ENUM(KernelKind, "kernel kind", MFSDP_KERNEL_KIND_LIST)

MFSDP_VOCAB_ENUM(PolicyOption, "policy", MFSDP_POLICY_OPTION_LIST)
MFSDP_VOCAB_ENUM(ReduceDTypeOption, "reduce dtype", MFSDP_REDUCE_DTYPE_OPTION_LIST)
MFSDP_VOCAB_ENUM(NsPrecisionOption, "Newton-Schulz precision",
                 MFSDP_NS_PRECISION_OPTION_LIST)
MFSDP_VOCAB_ENUM(RowMode, "row layout", MFSDP_ROW_MODE_LIST)
MFSDP_VOCAB_ENUM(NsSplit, "ns-split", MFSDP_NS_SPLIT_LIST)
MFSDP_VOCAB_ENUM(OwnerStrategy, "owner strategy", MFSDP_OWNER_STRATEGY_LIST)
MFSDP_VOCAB_ENUM(GatherComm, "gather-comm", MFSDP_GATHER_COMM_LIST)
MFSDP_VOCAB_ENUM(OptimizerOrder, "optimizer order", MFSDP_OPTIMIZER_ORDER_LIST)
MFSDP_VOCAB_ENUM(StepBaseline, "baseline", MFSDP_STEP_BASELINE_LIST)

/// The spelling of `e` ("row_shard", "mixed_muon_adamw", ...); "?" for a
/// value outside the enum.
template <typename E> constexpr std::string_view enumName(E e) {
  for (const auto &entry : vocabTable(E{}))
    if (entry.value == e)
      return entry.name;
  return "?";
}

/// The C enumerator of `e` ("MFSDP_ROW_SHARD"), for generated C code; "?"
/// for a value outside the enum.
template <typename E> constexpr const char *enumCName(E e) {
  for (const auto &entry : vocabTable(E{}))
    if (entry.value == e)
      return entry.cName;
  return "?";
}

/// The value spelled `s`, or nullopt if no value is spelled so.
template <typename E> constexpr std::optional<E> parseEnum(std::string_view s) {
  for (const auto &entry : vocabTable(E{}))
    if (entry.name == s)
      return entry.value;
  return std::nullopt;
}

/// Every value, in the order of the list.
template <typename E> constexpr auto enumValues() {
  constexpr auto table = vocabTable(E{});
  std::array<E, table.size()> values{};
  for (size_t i = 0; i < table.size(); ++i)
    values[i] = table[i].value;
  return values;
}

/// The spellings for an error message: "a, b or c" (with lastSep ", ":
/// "a, b, c").
template <typename E>
std::string enumSpellings(std::string_view lastSep = " or ") {
  std::string out;
  const auto table = vocabTable(E{});
  for (size_t i = 0; i < table.size(); ++i) {
    if (i)
      out += i + 1 == table.size() ? lastSep : ", ";
    out += table[i].name;
  }
  return out;
}

/// "unknown <what> '<s>'; expected a, b or c".
template <typename E> std::string unknownEnumMessage(std::string_view s) {
  return "unknown " + std::string(vocabWhat(E{})) + " '" + std::string(s) +
         "'; expected " + enumSpellings<E>();
}

/// Bytes per element of a dtype.
constexpr int64_t dtypeBytes(DType t) {
  switch (t) {
  case DType::F64: return 8;
  case DType::F32: return 4;
  case DType::BF16:
  case DType::F16: return 2;
  case DType::F8E4M3:
  case DType::F8E5M2: return 1;
  }
  return 0;
}

// The C enums and the C++ enums come from the same lists; the C ABI keeps
// the values it has always had.
static_assert(MFSDP_ROW_SHARD == 0 && MFSDP_OWNER == 1 &&
                  MFSDP_REPLICATE == 2 && MFSDP_BLOCK_SHARD == 3,
              "placements are part of the C ABI");
static_assert(MFSDP_OPT_NONE == 0 && MFSDP_OPT_ADAMW == 1 &&
                  MFSDP_OPT_SGD == 2 && MFSDP_OPT_MUON == 3,
              "optimizers are part of the C ABI");
static_assert(static_cast<int>(MuonScale::Original) ==
                  static_cast<int>(AdjustLr::Original) &&
                  static_cast<int>(MuonScale::MatchRmsAdamW) ==
                      static_cast<int>(AdjustLr::MatchRmsAdamW),
              "a plan's Muon scale is passed to the runtime as adjust_lr");

/// The policy a PolicyOption names; nullopt for PolicyOption::Graph.
constexpr std::optional<PolicyKind> policyOf(PolicyOption o) {
  if (o == PolicyOption::Graph)
    return std::nullopt;
  return static_cast<PolicyKind>(o);
}

} // namespace mfsdp

#endif /* __cplusplus */

#endif /* MFSDP_VOCABULARY_H */

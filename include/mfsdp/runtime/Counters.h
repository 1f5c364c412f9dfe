//===- Counters.h - What the step engine did on this rank -----------*- C++ -*-===//
//
// Counts of the optimizer work one rank's engine ran since mfsdp_create, so
// tests can check where work happens (the HSDP Newton-Schulz split runs each
// owned Muon matrix on one replica only), and where the rank sits in its
// data-parallel groups (which follow the plan's mesh). Not part of the C ABI: a C++ call
// of libmfsdp_rt for its tests.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_RUNTIME_COUNTERS_H
#define MFSDP_RUNTIME_COUNTERS_H

#include "mfsdp/runtime.h"

#include <cstdint>

namespace mfsdp::rt {

struct WorkCounters {
  /// Muon steps (momentum, Newton-Schulz, update) of a whole matrix.
  int64_t muonSteps = 0;
  /// The fused optimizer kernels (Backend::adamwMulti / sgdMulti) this
  /// rank issued: one per optimizer op of the program that names an AdamW
  /// or SGD parameter this rank steps (without a program, one per
  /// optimizer over the whole table), and the tensors they stepped.
  int64_t fusedOptimizerCalls = 0;
  int64_t fusedOptimizerTensors = 0;
  /// AdamW / SGD kernels issued one per parameter (only after
  /// setFusedOptimizer(step, false)).
  int64_t perParamOptimizerCalls = 0;
  /// Updated masters this rank sent to the other replicas under ns_split.
  int64_t nsSplitSends = 0;
  /// Updated masters this rank received from another replica under ns_split.
  int64_t nsSplitReceives = 0;
  /// Calls that carried those updates: one per optimizer step in which
  /// this rank owns a split matrix (Backend::broadcastMany), not one per
  /// matrix.
  int64_t nsSplitBroadcastCalls = 0;
  /// Gather prefetch (mfsdp_memory_plan::prefetch): the asynchronous
  /// all-gathers this rank started ahead of their unit's hook, and the ones
  /// it waited for (a started one is waited for by the next runtime call
  /// that touches buffers, or by mfsdp_destroy: after any call other than
  /// pre_forward / pre_backward the two are equal).
  int64_t prefetchStarts = 0;
  int64_t prefetchWaits = 0;
  /// Reductions overlapped with the previous unit's backward (prefetch 1,
  /// ZeRO-3): the asynchronous reduce-scatter(-v) / all-reduce collectives
  /// this rank started over dp_shard in post_backward (one per bucket, row
  /// shard, owned matrix, replicated tensor or block shard; HSDP's
  /// all-reduce over replicas runs at the wait), and
  /// the ones it waited for (by the next post_backward, or the next call
  /// that needs them, or mfsdp_destroy).
  int64_t reduceStarts = 0;
  int64_t reduceWaits = 0;
  /// Optimizer kernels of a compiled program (MFSDP_PROGRAM_OPTIMIZER ops
  /// this rank ran) started while another unit's reduction was still in
  /// flight: the program lands one unit's reduction where it waits for
  /// it, so a group's update overlaps the reductions still running.
  int64_t overlappedKernels = 0;
  /// Collectives of the plan's buckets (mfsdp_bucket): all-gathers (and
  /// all-gather-v) and reduce-scatters (-v), one per bucket each time, in
  /// place of one per member. The prefetch and reduction counters above
  /// count a bucket's as one.
  int64_t bucketGathers = 0;
  int64_t bucketReductions = 0;
  /// Bytes of compute copies this rank's all-gathers received (the whole
  /// gathered buffer of each, over dp_shard, started or not): fp32
  /// parameters 4 bytes an element, bf16 ones 2 (mfsdp_param_desc::
  /// compute_dtype). Replicated tensors, copied, count nothing.
  int64_t gatherBytes = 0;
  /// Bytes of gradients this rank's reductions over dp_shard put into
  /// their collectives (the whole send buffer of each reduce-scatter(-v),
  /// and the buffer of each all-reduce of a replicated tensor, started or
  /// not): 4 bytes an element, 2 under the reduce dtype bf16
  /// (mfsdp_plan::reduce_dtype). HSDP's all-reduce over replicas counts
  /// nothing.
  int64_t reduceBytes = 0;
  /// This rank's position in its dp_shard group (the dp_shard rank whose
  /// shards and owned matrices it stores) and in its dp_replicate group,
  /// as the backend formed them from the plan's mesh.
  int64_t shardRank = 0;
  int64_t replicaRank = 0;
};

/// The counters of `step` on this rank (zeros for null).
WorkCounters workCounters(const mfsdp_step *step);

/// For benchmarks and tests: `fused` false makes the optimizer step issue
/// one AdamW / SGD kernel per parameter (Backend::adamwStep / sgdStep), the
/// path before the fused kernels, instead of one fused call per group;
/// true (the default) restores it. The results are bitwise the same.
void setFusedOptimizer(mfsdp_step *step, bool fused);

} // namespace mfsdp::rt

#endif // MFSDP_RUNTIME_COUNTERS_H

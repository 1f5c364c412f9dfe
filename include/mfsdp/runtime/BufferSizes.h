//===- BufferSizes.h - The sizes of the engine's buffers ----------*- C++ -*-===//
//
// How many floats each of a parameter's buffers holds on a dp_shard rank,
// as the engine (runtime/common/PlanValidation.cpp) lays them out.
// Header-only, so the compiler's static memory plan
// (lib/step/RuntimeMemory.cpp) sizes the buffers exactly as the runtime that
// places them at its offsets.
//
//  - row shard: each rank keeps ceil(rows / S) whole rows (the last ranks'
//    tail padded with zeros), so every collective moves equal chunks; the
//    gathered copy and the gradient are S chunks;
//  - owner: the owner keeps the whole matrix, the others nothing;
//  - block shard: each rank keeps its blocks packed (dealt round-robin, so
//    counts differ by one block at most; no padding); the gathered copy and
//    the gradient are whole, and its gathers and reductions reorder the
//    blocks through the staging buffer;
//  - replicate: every rank keeps the whole tensor.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_RUNTIME_BUFFERSIZES_H
#define MFSDP_RUNTIME_BUFFERSIZES_H

#include "mfsdp/runtime.h"

#include <cstdint>

namespace mfsdp::runtime {

struct BufferFloats {
  int64_t master = 0, expAvg = 0, expAvgSq = 0, gradShard = 0; // this rank's
  int64_t full = 0, grad = 0; // whole (padded) tensors
};

inline BufferFloats bufferFloats(const mfsdp_param_desc &d, int64_t shards,
                                 int64_t shardRank) {
  BufferFloats b;
  const int64_t n = d.rows * d.cols;
  int64_t local = n;
  switch (d.placement) {
  case MFSDP_ROW_SHARD: {
    const int64_t chunk = (d.rows + shards - 1) / shards * d.cols;
    local = chunk;
    b.full = b.grad = chunk * shards;
    break;
  }
  case MFSDP_OWNER:
    local = d.owner == shardRank ? n : 0;
    b.full = b.grad = n;
    break;
  case MFSDP_BLOCK_SHARD:
    // This rank's blocks, packed (Kernels.h: BlockGrid); rank 0 keeps the
    // most. The engine refuses extents that do not tile the tensor.
    if (d.block_rows > 0 && d.block_cols > 0) {
      const int64_t blocks = d.rows / d.block_rows * (d.cols / d.block_cols);
      local = (blocks / shards + (shardRank < blocks % shards ? 1 : 0)) *
              d.block_rows * d.block_cols;
    }
    b.full = b.grad = n;
    break;
  default:
    b.full = b.grad = n;
  }
  b.master = b.gradShard = local;
  b.expAvg = d.optimizer != MFSDP_OPT_NONE ? local : 0;
  b.expAvgSq = d.optimizer == MFSDP_OPT_ADAMW ? local : 0;
  return b;
}

/// Whether a parameter's gradient buffer holds its bf16 elements at 2 bytes
/// each (ceil(n / 2) floats) rather than in fp32's size: a bf16 compute
/// copy whose gradient is reduced in bf16 (`mfsdp_plan.reduce_dtype`), so
/// never widened to fp32; as FSDP2 keeps a bf16 parameter's unsharded
/// gradient in bf16 under reduce_dtype=bf16. (In an owner bucket the
/// members' gradients are then one bf16 image of their fp32 layout, as
/// their copies are.) An fp32 reduction widens the gradient in place (so
/// fp32's size), and a block shard's reduction packs its blocks through
/// fp32.
inline bool halfGradient(const mfsdp_param_desc &d, int32_t reduceDtype) {
  return d.compute_dtype == MFSDP_COMPUTE_BF16 && reduceDtype == MFSDP_REDUCE_BF16 &&
         d.placement != MFSDP_BLOCK_SHARD;
}

/// Floats of arena a gradient buffer of `b.grad` elements takes.
inline int64_t gradientFloats(const BufferFloats &b, bool half) {
  return half ? (b.grad + 1) / 2 : b.grad;
}

} // namespace mfsdp::runtime

#endif // MFSDP_RUNTIME_BUFFERSIZES_H

//===- RuntimeMemory.h - The step runtime's static memory plan ---*- C++ -*-===//
//
// Places every buffer the step runtime keeps for a plan (fp32 masters,
// optimizer state, reduced gradient shards, gathered copies, gradients, a
// staging buffer for load and store) at a fixed offset of one arena per
// dp_shard rank, with planMemory (Schedule.h) over the lifetimes the hook
// protocol gives them (mfsdp_memory_plan in mfsdp/runtime.h). The compiler
// writes the result into the step library; the runtime places its buffers
// there and checks, as it goes, that the trainer's hooks fit it.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_STEP_RUNTIMEMEMORY_H
#define MFSDP_STEP_RUNTIMEMEMORY_H

#include "mfsdp/runtime.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mfsdp::step {

struct RuntimeMemoryPlan {
  std::string error;                       // why there is no plan
  std::vector<mfsdp_param_offsets> params; // per parameter
  std::vector<int64_t> arenaBytes;         // per dp_shard rank
  int64_t staging = -1;
  bool keepGrads = false;
  /// The gather prefetch depth (0 or 1) the lifetimes were planned for.
  int32_t prefetch = 0;
  /// Per dp_shard rank: the bytes the same buffers take with nothing
  /// shared (every unit gathered once, every gradient kept, the staging
  /// buffer apart), for reports.
  std::vector<int64_t> unsharedBytes;

  /// The C view the runtime takes (mfsdp_plan::memory); it points into
  /// this object, which must outlive it.
  mfsdp_memory_plan view() const {
    mfsdp_memory_plan m{};
    m.num_shard_ranks = static_cast<int32_t>(arenaBytes.size());
    m.arena_bytes = arenaBytes.data();
    m.params = params.data();
    m.staging = staging;
    m.keep_grads = keepGrads ? 1 : 0;
    m.prefetch = prefetch;
    return m;
  }
};

/// The plan for `plan` (its params, units, dp_shard and ZeRO level). With
/// `keepGrads` the gradients stay allocated all run (no-sync gradient
/// accumulation); without, each unit's gradients share space with the
/// other units'. Every size is a multiple of `alignment` bytes. With
/// `prefetch` 1 under ZeRO-3, unit u + 1's gathered copy is live from
/// pre_forward(u) and unit u - 1's backward copy from pre_backward(u), so
/// the runtime can gather them while the trainer computes unit u (the
/// plan's prefetch field); 0 is one unit's copy at a time. Under ZeRO-1/2
/// (gathered copies kept all step) it changes no lifetime.
RuntimeMemoryPlan planRuntimeMemory(const mfsdp_plan &plan, bool keepGrads,
                                    int64_t alignment = 256, int32_t prefetch = 0);

} // namespace mfsdp::step

#endif // MFSDP_STEP_RUNTIMEMEMORY_H

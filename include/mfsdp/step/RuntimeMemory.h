//===- RuntimeMemory.h - The step runtime's static memory plan ---*- C++ -*-===//
//
// Places every buffer the step runtime keeps for a plan (fp32 masters,
// optimizer state, reduced gradient shards, gathered copies, gradients, a
// staging buffer for load and store) at a fixed offset of one arena per
// dp_shard rank, with planMemory (Schedule.h) over the lifetimes the plan's
// program gives them (mfsdp_memory_plan in mfsdp/runtime.h; a plan without
// one: the program the runtime derives, mfsdp/runtime/DefaultProgram.h). The compiler
// writes the result into the step library; the runtime places its buffers
// there and checks, as it goes, that the trainer's hooks fit it.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_STEP_RUNTIMEMEMORY_H
#define MFSDP_STEP_RUNTIMEMEMORY_H

#include "mfsdp/runtime.h"
#include "mfsdp/step/Step.h"

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
  /// Per bucket of the plan (mfsdp_plan::buckets): its staging buffers.
  std::vector<mfsdp_bucket_offsets> buckets;

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
    m.buckets = buckets.empty() ? nullptr : buckets.data();
    return m;
  }
};

/// A bucket of the runtime (mfsdp_bucket), its members' indices owned.
struct RuntimeBucket {
  int32_t unit = -1;
  int32_t placement = MFSDP_ROW_SHARD;
  std::vector<int32_t> params;
};

/// The runtime's buckets of `step` (after bucketCollectives): its
/// gradient reduce-scatters (row shards), reduce-scatter-v (owners) and
/// ZeRO-1 all-reduces of either over dp_shard, each split by unit and then,
/// in order, into runs whose flat buffer (row shards: dp_shard chunks of
/// the members' aligned shards; owners: the members' aligned matrices)
/// stays within `limitBytes` (0: no limit but the one every bucket keeps:
/// at most INT32_MAX floats, what one MPI collective can address) and
/// `maxMembers`; a parameter
/// whose own flat buffer exceeds the limit is left alone (its collectives
/// need no staging), and runs of fewer than two are no bucket. Owner
/// buckets are ordered by owner (stably). A parameter's first bucket is its
/// only one; parameters not in `plan` (external, tied) are left out. The
/// gathers of a unit use the same buckets.
std::vector<RuntimeBucket> runtimeBuckets(const Step &step, const mfsdp_plan &plan,
                                          double limitBytes = 0, int64_t maxMembers = 128,
                                          int64_t alignment = 256);

/// The C view of `buckets` (mfsdp_plan::buckets); it points into them.
std::vector<mfsdp_bucket> bucketViews(const std::vector<RuntimeBucket> &buckets);

/// The plan for `plan` (its params, units, dp_shard and ZeRO level). With
/// `keepGrads` the gradients stay allocated all run (no-sync gradient
/// accumulation); without, each unit's gradients share space with the
/// other units'. Every size is a multiple of `alignment` bytes. The plan's
/// buckets (mfsdp_bucket) are laid out as the runtime needs them: their
/// members' buffers in one piece, with staging for row-shard buckets.
/// What lives all step (masters, optimizer state, reduced gradients; the
/// gathered copies under ZeRO-1/2; kept gradients) is laid out, when
/// planned, as one buffer per kind and set of ranks (every rank's, or one
/// owner's), each unit's or bucket's piece at an aligned offset in unit
/// order. The lifetimes are those of `program` (mfsdp_program), completed
/// where it leaves hooks out as the runtime completes it
/// (runtime::completeProgram; NULL: the whole program derived): its hooks
/// replayed in a training step's order (forward units in order, backward
/// in reverse, then the optimizer step), each gather's copy live from its
/// start to its release or its reduction's wait, each unit's gradients
/// from MFSDP_PROGRAM_PLACE_GRADS to the wait of its reduction. `prefetch`
/// (the plan's prefetch field) is the derived hooks' depth: with 1 under
/// ZeRO-3, unit u + 1's gathered copy is live from pre_forward(u) and unit
/// u - 1's backward copy from pre_backward(u), so the runtime can gather
/// them while the trainer computes unit u; 0 is one unit's copy at a time.
/// Under ZeRO-1/2 (gathered copies kept all step) it changes no lifetime.
///
/// With `placed` (a plan made before, as the sched.step of the library
/// records it: mfsdp-plan-memory's `runtime_*` attributes), nothing is
/// placed: the same buffers and lifetimes are built and `placed`'s offsets
/// and arena taken, and the result is that plan once it is checked to fit
/// them: one place per buffer (every member of a bucket's buffer at its
/// distance from the others), every buffer inside its rank's arena, no two
/// buffers live at once sharing a byte, gradients kept if `keepGrads` asks
/// for it (a plan that keeps them where it need not is taken as it is).
/// Otherwise `error` says what does not fit.
RuntimeMemoryPlan planRuntimeMemory(const mfsdp_plan &plan, bool keepGrads,
                                    int64_t alignment = 256, int32_t prefetch = 0,
                                    const mfsdp_program *program = nullptr,
                                    const mfsdp_memory_plan *placed = nullptr);

} // namespace mfsdp::step

#endif // MFSDP_STEP_RUNTIMEMEMORY_H

//===- Execute.cpp - The forward and backward hooks' program ops ----------===//
//
// A unit's forward and backward hooks run the ops of the plan's program
// (mfsdp_plan.program, runtime.h: what the compiler lowered from the
// scheduled sched.step, or for a plan built by hand without them the
// hooks mfsdp_create derived, DefaultProgram.h), in their order: the
// starts and waits of the unit's gathers and reductions, the frees, the
// gradient buffers. The
// hooks (Runtime.cpp) still check what the trainer calls against each
// unit's state; which collective starts and which is waited for where is
// the program's.
//
//===----------------------------------------------------------------------===//
#include "Step.h"

#include "mfsdp/runtime/ProgramHooks.h"

#include <string>

using namespace mfsdp::rt;

mfsdp_status mfsdp::rt::runHook(mfsdp_step *step, int32_t hook, int32_t unit) {
  const int32_t entry = step->hookEntry[mfsdp::runtime::hookSlot(unit, hook)];
  if (entry < 0)
    return MFSDP_OK; // a hook with no entry runs no ops
  const mfsdp_program &g = *step->plan.program;
  const mfsdp_program_hook &k = g.hooks[entry];
  // The memory plan's backward places for the backward hooks' gathers.
  const bool backward = hook == MFSDP_HOOK_PRE_BACKWARD || hook == MFSDP_HOOK_POST_BACKWARD;
  for (int32_t i = k.first_op; i < k.first_op + k.num_ops; ++i) {
    const mfsdp_program_op &op = g.ops[i];
    const int32_t u = op.unit;
    // Work on a unit's copy or gradients while its reduction is still in
    // flight (a hook outside the step's order: an evaluation forward
    // between backward and optimizer step) lands the reduction first: it
    // reads those buffers, and its wait releases them.
    if (op.kind != MFSDP_PROGRAM_START_REDUCTION && op.kind != MFSDP_PROGRAM_PACK &&
        op.kind != MFSDP_PROGRAM_WAIT_REDUCTION && step->reductionInFlight(u))
      if (auto s = step->completeReduction(u))
        return s;
    switch (op.kind) {
    case MFSDP_PROGRAM_START_GATHER:
      if (auto s = step->startGather(u, backward))
        return s;
      break;
    case MFSDP_PROGRAM_WAIT_GATHER:
      // Row-shard buckets land in staging for the MFSDP_PROGRAM_UNPACK
      // that follows.
      {
        mfsdp_status s = step->completePrefetch(u, /*defer=*/true);
        if (!s)
          s = step->gather(u, backward, /*defer=*/true);
        if (s) {
          // What landed is unpacked now: no chunk is left in staging for
          // an unpack that will not run.
          const std::string why = step->error;
          for (int32_t b : step->unitBuckets[u])
            if (step->buckets[b].unpackDue)
              step->unpackBucket(b);
          step->error = why;
          return s;
        }
      }
      break;
    case MFSDP_PROGRAM_UNPACK:
      for (int32_t b : step->unitBuckets[u])
        if (step->buckets[b].unpackDue) {
          step->about(b, -1);
          if (auto s = step->unpackBucket(b))
            return s;
        }
      break;
    case MFSDP_PROGRAM_PACK:
      if (step->noSync || step->reductionInFlight(u))
        break; // nothing is reduced, or it was started already
      for (int32_t b : step->unitBuckets[u]) {
        step->about(b, -1);
        if (auto s = step->packBucket(b))
          return s;
      }
      break;
    case MFSDP_PROGRAM_RELEASE:
      step->about(-1, -1);
      step->release(u);
      break;
    case MFSDP_PROGRAM_PLACE_GRADS:
      if (auto s = step->placeGrads(u))
        return s;
      for (int32_t p : step->unitParams[u])
        step->params[p].gradLive = true;
      break;
    case MFSDP_PROGRAM_START_REDUCTION: {
      if (step->noSync) {
        // Accumulating: nothing is reduced, the gradients stay (the plan
        // keeps them); the backward copy goes as after a reduction.
        step->about(-1, -1);
        step->release(u);
        step->releaseGrads(u);
        break;
      }
      if (step->reductionInFlight(u))
        break; // started already
      if (auto s = step->reduce(u)) {
        const std::string why = step->error;
        step->completeReduction(); // waits for what was started
        step->error = why;
        return s;
      }
      step->reducing.push_back(u);
      break;
    }
    case MFSDP_PROGRAM_WAIT_REDUCTION:
      // This unit's reduction lands; the others in flight go on (every
      // rank runs the same program, so waits in the same order).
      if (step->reductionInFlight(u))
        if (auto s = step->completeReduction(u))
          return s;
      break;
    default:
      break; // refused by mfsdp_create (Program.cpp)
    }
  }
  // mfsdp_create checked that an unpack follows every wait for a unit with
  // row-shard buckets in its hook; a copy left packed in staging would be
  // read as the parameter.
  if (step->unpacksDue > 0)
    for (size_t b = 0; b < step->buckets.size(); ++b)
      if (step->buckets[b].unpackDue)
        return step->fail(MFSDP_ERROR_PLAN,
                          "bucket " + std::to_string(b) + " (unit " +
                              std::to_string(step->buckets[b].unit) +
                              ") was gathered into staging but the program's " +
                              mfsdp::runtime::hookName(hook) + "(" + std::to_string(unit) +
                              ") did not unpack it (MFSDP_PROGRAM_UNPACK)");
  return MFSDP_OK;
}

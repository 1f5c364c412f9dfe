//===- ProgramHooks.h - Where a program's hook entries are --------*- C++ -*-===//
//
// A compiled program (mfsdp_program, runtime.h) names its forward and
// backward hooks by unit and mfsdp_hook. Header-only, so the runtime that
// executes the hooks (runtime/common/Execute.cpp) and the compiler's static
// memory plan that replays them (lib/step/RuntimeMemory.cpp) find them the
// same way.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_RUNTIME_PROGRAMHOOKS_H
#define MFSDP_RUNTIME_PROGRAMHOOKS_H

#include "mfsdp/runtime.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mfsdp::runtime {

/// The hooks a unit has: pre_forward, post_forward, pre_backward,
/// post_backward (MFSDP_HOOK_PRE_FORWARD .. MFSDP_HOOK_POST_BACKWARD).
inline constexpr int32_t kUnitHooks = MFSDP_HOOK_OPTIMIZER_STEP;

/// The slot of `unit`'s `hook` in a table indexed by unit and hook.
inline size_t hookSlot(int32_t unit, int32_t hook) {
  return static_cast<size_t>(unit) * kUnitHooks + static_cast<size_t>(hook);
}

/// The name of a program op kind (mfsdp_program_kind), as diagnostics say it.
inline const char *programKindName(int32_t kind) {
  switch (kind) {
  case MFSDP_PROGRAM_WAIT_REDUCTION:
    return "wait_reduction";
  case MFSDP_PROGRAM_OPTIMIZER:
    return "optimizer";
  case MFSDP_PROGRAM_BROADCAST_UPDATES:
    return "broadcast_updates";
  case MFSDP_PROGRAM_GATHER:
    return "gather";
  case MFSDP_PROGRAM_START_GATHER:
    return "start_gather";
  case MFSDP_PROGRAM_WAIT_GATHER:
    return "wait_gather";
  case MFSDP_PROGRAM_RELEASE:
    return "release";
  case MFSDP_PROGRAM_PLACE_GRADS:
    return "place_grads";
  case MFSDP_PROGRAM_START_REDUCTION:
    return "start_reduction";
  case MFSDP_PROGRAM_UNPACK:
    return "unpack";
  case MFSDP_PROGRAM_PACK:
    return "pack";
  default:
    return "unknown";
  }
}

/// The name of a hook (mfsdp_hook), as diagnostics say it.
inline const char *hookName(int32_t hook) {
  switch (hook) {
  case MFSDP_HOOK_PRE_FORWARD:
    return "pre_forward";
  case MFSDP_HOOK_POST_FORWARD:
    return "post_forward";
  case MFSDP_HOOK_PRE_BACKWARD:
    return "pre_backward";
  case MFSDP_HOOK_POST_BACKWARD:
    return "post_backward";
  case MFSDP_HOOK_OPTIMIZER_STEP:
    return "optimizer_step";
  default:
    return "unknown";
  }
}

/// Whether `program` (may be NULL) carries any forward or backward hook.
inline bool programHasHooks(const mfsdp_program *program) {
  if (!program || !program->hooks)
    return false;
  for (int32_t i = 0; i < program->num_hooks; ++i)
    if (program->hooks[i].hook != MFSDP_HOOK_OPTIMIZER_STEP)
      return true;
  return false;
}

/// `program`'s entry for the optimizer step (may be NULL; NULL when it has
/// none). mfsdp_create refuses a program with two.
inline const mfsdp_program_hook *optimizerStepEntry(const mfsdp_program *program) {
  if (!program || !program->hooks)
    return nullptr;
  for (int32_t i = 0; i < program->num_hooks; ++i)
    if (program->hooks[i].hook == MFSDP_HOOK_OPTIMIZER_STEP)
      return &program->hooks[i];
  return nullptr;
}

/// Per hookSlot of `units` units, the index of its entry in
/// program.hooks (-1: none, the hook runs no ops). Entries whose unit or
/// hook is out of range are left out (mfsdp_create refuses them).
inline std::vector<int32_t> hookEntries(const mfsdp_program &program, int32_t units) {
  std::vector<int32_t> entry(static_cast<size_t>(units > 0 ? units : 0) * kUnitHooks, -1);
  for (int32_t h = 0; program.hooks && h < program.num_hooks; ++h) {
    const mfsdp_program_hook &k = program.hooks[h];
    if (k.unit >= 0 && k.unit < units && k.hook >= 0 && k.hook < kUnitHooks)
      entry[hookSlot(k.unit, k.hook)] = h;
  }
  return entry;
}

/// Per unit of `plan`, its first row-shard bucket (-1: none). Such a unit
/// is staged: its gathers land in staging, unpacked by a program op of its
/// own, and its gradients are packed into staging by one.
inline std::vector<int32_t> firstRowBuckets(const mfsdp_plan &plan) {
  std::vector<int32_t> out(static_cast<size_t>(plan.num_units > 0 ? plan.num_units : 0), -1);
  for (int32_t b = 0; plan.buckets && b < plan.num_buckets; ++b) {
    const mfsdp_bucket &k = plan.buckets[b];
    if (k.placement == MFSDP_ROW_SHARD && k.unit >= 0 && k.unit < plan.num_units &&
        out[k.unit] < 0)
      out[k.unit] = b;
  }
  return out;
}

} // namespace mfsdp::runtime

#endif // MFSDP_RUNTIME_PROGRAMHOOKS_H

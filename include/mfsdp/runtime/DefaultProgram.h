//===- DefaultProgram.h - The program of a plan that carries none -*- C++ -*-===//
//
// A step library lowers its scheduled sched.step into a program
// (mfsdp_plan.program, runtime.h) and the runtime runs it. A plan built by
// hand may carry none, or only part of one (an optimizer step without
// forward and backward hooks, or hooks without an optimizer step): the
// parts it leaves out are derived here, so the runtime has one executor
// and decides no order of its own. The derived hooks are those of a
// schedule with one unit in flight at a time:
//
//   pre_forward(u)   wait_gather u, [unpack u], [start_gather u+1]
//   post_forward(u)  release u
//   pre_backward(u)  wait_gather u, [unpack u], place_grads u,
//                    [start_gather u-1]
//   post_backward(u) [wait_reduction u+1], [pack u], start_reduction u,
//                    [wait_reduction u]
//   optimizer_step   wait_reduction of every unit, one optimizer op over
//                    every stepped parameter (one fused call per optimizer,
//                    then Muon's matrices in table order), [broadcast of
//                    the owners' updates over replicas], [gather u]
//
// The bracketed starts are the prefetch (depth 1, ZeRO-3): the next unit's
// gather runs during this unit's compute, and a unit's reduction during
// the next unit's backward (waited for in its post_backward); without
// prefetch each reduction is waited for in its own post_backward. unpack
// and pack are for units with row-shard buckets, gather (of the updated
// parameters) for ZeRO-1/2. Header-only, so that the runtime that runs the
// program (runtime/common/PlanValidation.cpp) and the compiler's static
// memory plan that replays it (lib/step/RuntimeMemory.cpp) derive the same
// one.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_RUNTIME_DEFAULTPROGRAM_H
#define MFSDP_RUNTIME_DEFAULTPROGRAM_H

#include "mfsdp/runtime.h"
#include "mfsdp/runtime/ProgramHooks.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace mfsdp::runtime {

/// A program with the storage of its tables (program points into them).
struct OwnedProgram {
  std::vector<mfsdp_program_op> ops;
  std::vector<mfsdp_program_hook> hooks;
  std::vector<int32_t> stepped;   // the derived optimizer op's parameters
  std::vector<int32_t> broadcast; // the derived broadcast's
  mfsdp_program program{0, nullptr, 0, nullptr};
  /// Whether any hook was derived (the plan's program was not whole).
  bool derived = false;

  OwnedProgram() = default;
  OwnedProgram(const OwnedProgram &) = delete;
  OwnedProgram &operator=(const OwnedProgram &) = delete;
};

/// `given` (may be NULL; a program mfsdp_create has accepted for `plan`)
/// with the hooks it leaves out derived as the file comment says: every
/// unit's forward and backward hooks where it has none, the optimizer step
/// where it has none. `prefetch`: depth 1 (the memory plan made room for
/// it, under ZeRO-3). The given ops keep their indices (its hooks their
/// ranges and its ops their parameter lists); derived ops follow them.
/// `plan` must be valid (every parameter's unit in range).
inline std::unique_ptr<OwnedProgram> completeProgram(const mfsdp_plan &plan,
                                                     const mfsdp_program *given,
                                                     bool prefetch) {
  auto out = std::make_unique<OwnedProgram>();
  const bool unitHooks = !programHasHooks(given);
  const bool optimizerStep = !optimizerStepEntry(given);
  if (given && given->ops)
    out->ops.assign(given->ops, given->ops + given->num_ops);
  if (given && given->hooks)
    out->hooks.assign(given->hooks, given->hooks + given->num_hooks);
  out->derived = unitHooks || optimizerStep;
  const int32_t N = plan.num_units > 0 ? plan.num_units : 0;
  const bool zero3 = plan.zero >= 3;
  prefetch = prefetch && zero3;
  std::vector<bool> rowBucket(static_cast<size_t>(N), false);
  for (int32_t b = 0; plan.buckets && b < plan.num_buckets; ++b) {
    const mfsdp_bucket &k = plan.buckets[b];
    if (k.placement == MFSDP_ROW_SHARD && k.unit >= 0 && k.unit < N)
      rowBucket[static_cast<size_t>(k.unit)] = true;
  }
  auto op = [&](int32_t kind, int32_t unit) {
    mfsdp_program_op o{};
    o.kind = kind;
    o.unit = unit;
    o.group = -1;
    o.optimizer = MFSDP_OPT_NONE;
    o.only_rank = -1;
    o.num_params = 0;
    o.params = nullptr;
    out->ops.push_back(o);
  };
  auto hook = [&](int32_t kind, int32_t unit, auto body) {
    const int32_t first = static_cast<int32_t>(out->ops.size());
    body();
    out->hooks.push_back(
        {kind, unit, first, static_cast<int32_t>(out->ops.size()) - first});
  };
  if (unitHooks)
    for (int32_t u = 0; u < N; ++u) {
      const bool packed = rowBucket[static_cast<size_t>(u)];
      hook(MFSDP_HOOK_PRE_FORWARD, u, [&] {
        op(MFSDP_PROGRAM_WAIT_GATHER, u);
        if (packed)
          op(MFSDP_PROGRAM_UNPACK, u);
        if (prefetch && u + 1 < N)
          op(MFSDP_PROGRAM_START_GATHER, u + 1);
      });
      hook(MFSDP_HOOK_POST_FORWARD, u, [&] { op(MFSDP_PROGRAM_RELEASE, u); });
      hook(MFSDP_HOOK_PRE_BACKWARD, u, [&] {
        op(MFSDP_PROGRAM_WAIT_GATHER, u);
        if (packed)
          op(MFSDP_PROGRAM_UNPACK, u);
        op(MFSDP_PROGRAM_PLACE_GRADS, u);
        if (prefetch && u > 0)
          op(MFSDP_PROGRAM_START_GATHER, u - 1);
      });
      hook(MFSDP_HOOK_POST_BACKWARD, u, [&] {
        if (prefetch && u + 1 < N)
          op(MFSDP_PROGRAM_WAIT_REDUCTION, u + 1);
        if (packed)
          op(MFSDP_PROGRAM_PACK, u);
        op(MFSDP_PROGRAM_START_REDUCTION, u);
        if (!prefetch)
          op(MFSDP_PROGRAM_WAIT_REDUCTION, u);
      });
    }
  size_t steppedOp = 0, broadcastOp = 0; // indices + 1 (0: none)
  if (optimizerStep) {
    for (int32_t p = 0; p < plan.num_params; ++p) {
      const mfsdp_param_desc &d = plan.params[p];
      if (d.optimizer == MFSDP_OPT_NONE)
        continue;
      out->stepped.push_back(p);
      if (plan.ns_split && d.placement == MFSDP_OWNER && d.optimizer == MFSDP_OPT_MUON)
        out->broadcast.push_back(p);
    }
    hook(MFSDP_HOOK_OPTIMIZER_STEP, -1, [&] {
      for (int32_t u = 0; u < N; ++u)
        op(MFSDP_PROGRAM_WAIT_REDUCTION, u);
      // The whole table as one group (the parameters of every unit: the
      // reductions have all landed). Its optimizer field names the first
      // parameter's; the runtime steps each with its own.
      if (!out->stepped.empty()) {
        op(MFSDP_PROGRAM_OPTIMIZER, 0);
        out->ops.back().optimizer = plan.params[out->stepped.front()].optimizer;
        steppedOp = out->ops.size();
      }
      if (!out->broadcast.empty()) {
        op(MFSDP_PROGRAM_BROADCAST_UPDATES, 0);
        broadcastOp = out->ops.size();
      }
      if (!zero3)
        for (int32_t u = 0; u < N; ++u)
          op(MFSDP_PROGRAM_GATHER, u);
    });
  }
  // The parameter lists, now that the ops no longer move.
  if (steppedOp) {
    mfsdp_program_op &o = out->ops[steppedOp - 1];
    o.num_params = static_cast<int32_t>(out->stepped.size());
    o.params = out->stepped.data();
  }
  if (broadcastOp) {
    mfsdp_program_op &o = out->ops[broadcastOp - 1];
    o.num_params = static_cast<int32_t>(out->broadcast.size());
    o.params = out->broadcast.data();
  }
  out->program.num_ops = static_cast<int32_t>(out->ops.size());
  out->program.ops = out->ops.data();
  out->program.num_hooks = static_cast<int32_t>(out->hooks.size());
  out->program.hooks = out->hooks.data();
  return out;
}

} // namespace mfsdp::runtime

#endif // MFSDP_RUNTIME_DEFAULTPROGRAM_H

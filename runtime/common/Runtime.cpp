//===- Runtime.cpp - The C ABI: the step engine over a backend ------------===//
//
// Executes a plan's step through the per-unit hooks: gathers before use,
// frees after use (ZeRO-3), reduces gradients after backward (reduce-scatter
// for row shards, reduce-scatter-v to owners, all-reduce for replicated
// tensors, all-reduce between dp_replicate replicas), averages them over the
// data-parallel ranks, and runs AdamW / SGD on shards and Muon on owners
// (under ns_split each owned Muon matrix on one dp_replicate replica, which
// broadcasts the updated master to the others).
//
// The engine holds buffers of its backend (Backend.h: host memory or a CUDA
// device) and asks the backend for every copy, collective and kernel. Row
// shards are kept padded to whole chunks (ceil(rows / S) rows on every
// rank, zero past the tensor's end), so their gathers and reductions are
// one collective straight between the engine's buffers. Block shards keep
// each rank's blocks packed (Kernels.h: BlockGrid); their gathers and
// reductions are an all-gather-v / reduce-scatter-v of packed blocks,
// reordered through a staging buffer (packBlocks / unpackBlocks).
//
// This file holds the C entry points (runtime.h); the engine behind them is
// described in Step.h.
//
//===----------------------------------------------------------------------===//
#include "Step.h"

#include "mfsdp/runtime/PlanHash.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>

using namespace mfsdp::rt;

namespace {

/// The runtimes mfsdp_create handed out that mfsdp_destroy has not freed.
/// Every entry point checks its handle against them, so a runtime destroyed
/// twice, or used after mfsdp_destroy, is an error rather than a use of
/// freed memory. (A new runtime allocated at a freed one's address cannot
/// be told from it: a pointer says no more.)
std::mutex liveMutex;
std::unordered_set<const mfsdp_step *> &liveSteps() {
  static auto *live = new std::unordered_set<const mfsdp_step *>();
  return *live;
}
bool isLive(const mfsdp_step *step) {
  std::lock_guard<std::mutex> lock(liveMutex);
  return liveSteps().count(step) != 0;
}
void setLive(const mfsdp_step *step, bool live) noexcept {
  if (!step)
    return;
  try {
    std::lock_guard<std::mutex> lock(liveMutex);
    if (live)
      liveSteps().insert(step);
    else
      liveSteps().erase(step);
  } catch (...) {
    // Out of memory registering it: the runtime still works; only the
    // check of its handle is lost.
  }
}

/// Why this thread's last call that had no runtime to hold its message
/// failed (a NULL or freed handle, mfsdp_create that could not allocate):
/// what mfsdp_last_error(NULL) returns.
thread_local char noRuntimeError[256] = "";

/// The start of every entry point but create, destroy and last_error: the
/// handle is a live runtime, or the call fails here.
mfsdp_status checkHandle(const mfsdp_step *step, const char *call) noexcept {
  if (!step) {
    std::snprintf(noRuntimeError, sizeof(noRuntimeError),
                  "%s: the runtime is NULL", call);
    return MFSDP_ERROR_INVALID;
  }
  if (!isLive(step)) {
    std::snprintf(noRuntimeError, sizeof(noRuntimeError),
                  "%s: %p is not a live runtime (destroyed, or not made by "
                  "mfsdp_create)",
                  call, static_cast<const void *>(step));
    return MFSDP_ERROR_INVALID;
  }
  return MFSDP_OK;
}

/// The end of an entry point that caught an exception: its message in
/// the runtime's error (a fixed one when the message cannot be built).
mfsdp_status caught(mfsdp_step *step, const char *call, const char *what) noexcept {
  if (step) {
    try {
      step->error = std::string(call) + ": an exception inside the runtime: " + what;
    } catch (...) {
      step->error.assign("out of memory"); // fits without allocating
    }
  }
  return MFSDP_ERROR_BACKEND;
}

/// Runs an entry point's body: nothing escapes the C ABI (runtime.h,
/// "Exceptions"), whatever the engine, a backend or a library under it
/// throws.
template <typename Body>
mfsdp_status barrier(mfsdp_step *step, const char *call, Body &&body) noexcept {
  if (mfsdp_status st = checkHandle(step, call))
    return st;
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return caught(step, call, "out of host memory (std::bad_alloc)");
  } catch (const std::exception &e) {
    return caught(step, call, e.what());
  } catch (...) {
    return caught(step, call, "an unknown exception");
  }
}

} // namespace

extern "C" {

const char *mfsdp_status_string(mfsdp_status status) {
  switch (status) {
  case MFSDP_OK:
    return "MFSDP_OK";
  case MFSDP_ERROR_INVALID:
    return "MFSDP_ERROR_INVALID";
  case MFSDP_ERROR_ORDER:
    return "MFSDP_ERROR_ORDER";
  case MFSDP_ERROR_PLAN:
    return "MFSDP_ERROR_PLAN";
  case MFSDP_ERROR_COMM:
    return "MFSDP_ERROR_COMM";
  case MFSDP_ERROR_BACKEND:
    return "MFSDP_ERROR_BACKEND";
  case MFSDP_ERROR_IO:
    return "MFSDP_ERROR_IO";
  }
  return "unknown mfsdp_status";
}

mfsdp_status mfsdp_get_version(int32_t *version) {
  if (!version)
    return MFSDP_ERROR_INVALID;
  *version = MFSDP_VERSION_CODE;
  return MFSDP_OK;
}

uint64_t mfsdp_plan_hash(const mfsdp_plan *p) {
  // The hash reads the plan only (no allocation); the barrier is for
  // whatever a future field's hashing might throw.
  try {
    return p ? mfsdp::runtime::planHash(*p) : 0;
  } catch (...) {
    return 0;
  }
}

/// The trace span of a C ABI call (Trace.h), in the phase of the step it
/// belongs to (a pre_forward during the unit's backward recomputes); an
/// empty span when tracing is off.
static Trace::Span traced(mfsdp_step *step, const char *call, int32_t unit = -1) {
  if (!step || !step->trace)
    return Trace::Span();
  const bool inRange = unit >= 0 && unit < static_cast<int32_t>(step->state.size());
  const char *phase = "";
  if (std::strstr(call, "backward") ||
      (std::strstr(call, "forward") && inRange &&
       step->state[unit] == UnitState::Backward))
    phase = "backward";
  else if (std::strstr(call, "forward"))
    phase = "forward";
  else if (std::strcmp(call, "optimizer_step") == 0)
    phase = "optimizer";
  return Trace::hook(step->trace.get(), call, unit, phase);
}

mfsdp_status mfsdp_create(const mfsdp_plan *plan, mfsdp_step **out) {
  return mfsdp_create_with_config(plan, nullptr, out);
}

mfsdp_status mfsdp_create_with_config(const mfsdp_plan *plan,
                                      const mfsdp_config *config,
                                      mfsdp_step **out) {
  // Nothing may escape the C ABI: an exception (a plan too large for host
  // memory, say) becomes a status and a message.
  // The message is copied while the exception lives (without allocating).
  char what[512] = "an unknown exception";
  try {
    mfsdp_status st = createStep(plan, config, out);
    if (out) {
      setLive(*out, true);
      if (!*out)
        std::snprintf(noRuntimeError, sizeof(noRuntimeError),
                      "mfsdp_create failed and could not allocate a runtime "
                      "to hold its message");
    }
    return st;
  } catch (const std::bad_alloc &) {
    std::snprintf(what, sizeof(what), "out of host memory (std::bad_alloc)");
  } catch (const std::exception &e) {
    std::snprintf(what, sizeof(what), "%s", e.what());
  } catch (...) {
  }
  if (!out)
    return MFSDP_ERROR_BACKEND;
  // The runtime that failed was freed while the exception left createStep;
  // a new one carries the message (NULL when even that cannot be had).
  mfsdp_step *failed = nullptr;
  try {
    failed = new mfsdp_step();
    failed->error = failed->createError = std::string("mfsdp_create failed: ") + what;
  } catch (...) {
  }
  *out = failed;
  setLive(failed, true);
  if (!failed)
    std::snprintf(noRuntimeError, sizeof(noRuntimeError),
                  "mfsdp_create failed (%.160s) and could not allocate a runtime "
                  "to hold its message",
                  what);
  return MFSDP_ERROR_BACKEND;
}

void mfsdp_destroy(mfsdp_step *step) {
  if (step && !isLive(step)) {
    // Destroyed already, or never created: freeing it again would corrupt
    // the heap. Said on stderr, as destroy returns nothing.
    checkHandle(step, "mfsdp_destroy");
    std::fprintf(stderr, "mfsdp: %s; ignored\n", noRuntimeError);
    return;
  }
  setLive(step, false);
  if (step) {
    // A rank that destroys its runtime while others still call into theirs
    // meets them in the call check (which they then fail); nothing more.
    try {
      step->checkCall("destroy");
    } catch (...) {
    }
  }
  delete step; // the destructor lets no exception out (Step.h)
}

const char *mfsdp_last_error(mfsdp_step *step) {
  if (step && isLive(step))
    return step->error.c_str();
  if (step) {
    checkHandle(step, "mfsdp_last_error");
    return noRuntimeError;
  }
  return noRuntimeError[0] ? noRuntimeError
                           : "no call without a runtime has failed on this thread";
}

/// The start of a hook: a runtime, a unit in range, and the runtime's work
/// ordered after the trainer's. The program's hooks keep every collective
/// in flight: their ops say where each is waited for.
#define ENTER_UNIT(step, unit)                                                  \
  do {                                                                          \
    if (!(step))                                                                \
      return MFSDP_ERROR_INVALID;                                               \
    if (auto bad = (step)->checkUnit(unit))                                     \
      return bad;                                                               \
    if (auto entered = (step)->enter(/*keepReduction=*/true,                    \
                                     /*keepGathers=*/true))                     \
      return entered;                                                           \
  } while (0)

/// A collective call: its place in the ranks' call sequence compared first
/// (MFSDP_CHECK_CALLS, CallCheck.cpp).
#define CHECK_CALL(step, call, unit)                                            \
  do {                                                                          \
    if ((step))                                                                 \
      if (auto checked = (step)->checkCall((call), (unit)))                     \
        return checked;                                                         \
  } while (0)

mfsdp_status mfsdp_pre_forward(mfsdp_step *step, int32_t unit) {
  return barrier(step, "mfsdp_pre_forward", [&]() -> mfsdp_status {
    CHECK_CALL(step, "pre_forward", unit);
    Trace::Span hook = traced(step, "pre_forward", unit);
    ENTER_UNIT(step, unit);
    UnitState &s = step->state[unit];
    if (s == UnitState::Forward || s == UnitState::ForwardDone)
      return step->fail(MFSDP_ERROR_ORDER,
                        "pre_forward of unit " + std::to_string(unit) +
                            " called again before its backward");
    // During backward this is activation-checkpoint recomputation (unit
    // already gathered, by pre_backward).
    const bool recomputing = s == UnitState::Backward;
    // A forward while reductions are in flight is outside the step's order
    // (an evaluation forward between backward and optimizer step, or a
    // microbatch after one that reduced): they land first, so the units'
    // backward copies and transient gradients are gone before its gathers
    // take the places the memory plan gives a forward.
    if (!recomputing && !step->reducing.empty())
      if (auto st = step->completeReduction())
        return st;
    if (recomputing) {
      // The unit's backward copy, gathered by its pre_backward: the
      // recomputation runs no ops of the program.
      if (auto st = step->completePrefetch(unit))
        return st;
      if (auto st = step->gather(unit, true))
        return st;
    } else if (auto st = runHook(step, MFSDP_HOOK_PRE_FORWARD, unit)) {
      return st;
    }
    s = recomputing ? UnitState::Backward : UnitState::Forward;
    if (!recomputing)
      step->reducedBeforeForward[unit] = step->reduced[unit];
    step->reduced[unit] = false;
    return step->finish();
  });
}

mfsdp_status mfsdp_post_forward(mfsdp_step *step, int32_t unit) {
  return barrier(step, "mfsdp_post_forward", [&]() -> mfsdp_status {
    CHECK_CALL(step, "post_forward", unit);
    Trace::Span hook = traced(step, "post_forward", unit);
    ENTER_UNIT(step, unit);
    UnitState &s = step->state[unit];
    if (s == UnitState::Backward)
      return MFSDP_OK; // end of a recomputation: keep the gathered parameters
    if (s != UnitState::Forward)
      return step->fail(MFSDP_ERROR_ORDER, "post_forward of unit " +
                                               std::to_string(unit) +
                                               " without its pre_forward");
    if (auto st = runHook(step, MFSDP_HOOK_POST_FORWARD, unit))
      return st;
    s = UnitState::ForwardDone;
    return MFSDP_OK;
  });
}

mfsdp_status mfsdp_end_forward(mfsdp_step *step, int32_t unit) {
  return barrier(step, "mfsdp_end_forward", [&]() -> mfsdp_status {
    Trace::Span hook = traced(step, "end_forward", unit);
    ENTER_UNIT(step, unit);
    UnitState &s = step->state[unit];
    if (s == UnitState::Forward) { // a forward that stopped (an exception)
      step->release(unit);
      s = UnitState::ForwardDone;
    }
    if (s != UnitState::ForwardDone)
      return step->fail(MFSDP_ERROR_ORDER,
                        "end_forward of unit " + std::to_string(unit) +
                            ": expected a forward of it with no backward started, "
                            "but " +
                            (s == UnitState::Backward ? "its backward has started"
                                                      : "it has no forward in progress"));
    // A program may leave the forward copy to a later hook's free (the next
    // unit's pre_forward): with no backward to come it goes now.
    step->release(unit);
    s = UnitState::Idle;
    step->reduced[unit] = step->reducedBeforeForward[unit];
    // A gather that this forward's pre_forward started ahead for a unit
    // that has not begun its forward (prefetch) goes too: a forward that
    // stopped here will not reach it, and its place is another unit's in
    // the memory plan. (A forward that goes on gathers it again.)
    if (auto st = step->releaseAhead())
      return st;
    return step->finish();
  });
}

mfsdp_status mfsdp_end_backward(mfsdp_step *step, int32_t unit) {
  return barrier(step, "mfsdp_end_backward", [&]() -> mfsdp_status {
    Trace::Span hook = traced(step, "end_backward", unit);
    if (!step)
      return MFSDP_ERROR_INVALID;
    if (auto st = step->checkUnit(unit))
      return st;
    // Whatever is in flight lands first (a program's reductions and
    // prefetched gathers too): nothing is left running over what is freed.
    if (auto st = step->enter())
      return st;
    UnitState &s = step->state[unit];
    if (s != UnitState::Backward)
      return step->fail(MFSDP_ERROR_ORDER,
                        "end_backward of unit " + std::to_string(unit) +
                            ": expected a backward of it in progress (after its "
                            "pre_backward, before its post_backward)");
    step->release(unit);
    step->releaseGrads(unit);
    for (int32_t p : step->unitParams[unit])
      step->params[p].noGradNow = false;
    s = UnitState::Idle;
    if (auto st = step->releaseAhead())
      return st;
    return step->finish();
  });
}

mfsdp_status mfsdp_pre_backward(mfsdp_step *step, int32_t unit) {
  return barrier(step, "mfsdp_pre_backward", [&]() -> mfsdp_status {
    CHECK_CALL(step, "pre_backward", unit);
    Trace::Span hook = traced(step, "pre_backward", unit);
    ENTER_UNIT(step, unit);
    UnitState &s = step->state[unit];
    if (s != UnitState::ForwardDone)
      return step->fail(MFSDP_ERROR_ORDER,
                        "pre_backward of unit " + std::to_string(unit) +
                            " before its forward finished (post_forward)");
    if (auto st = runHook(step, MFSDP_HOOK_PRE_BACKWARD, unit))
      return st;
    s = UnitState::Backward;
    return step->finish();
  });
}

mfsdp_status mfsdp_post_backward(mfsdp_step *step, int32_t unit) {
  return barrier(step, "mfsdp_post_backward", [&]() -> mfsdp_status {
    CHECK_CALL(step, "post_backward", unit);
    Trace::Span hook = traced(step, "post_backward", unit);
    ENTER_UNIT(step, unit);
    UnitState &s = step->state[unit];
    if (s != UnitState::Backward)
      return step->fail(MFSDP_ERROR_ORDER, "post_backward of unit " +
                                               std::to_string(unit) +
                                               " without its pre_backward");
    step->noteGradients(unit);
    if (auto st = runHook(step, MFSDP_HOOK_POST_BACKWARD, unit))
      return st;
    s = UnitState::Idle;
    return step->finish();
  });
}

mfsdp_status mfsdp_set_no_sync(mfsdp_step *step, int32_t noSync) {
  return barrier(step, "mfsdp_set_no_sync", [&]() -> mfsdp_status {
    if (!step)
      return MFSDP_ERROR_INVALID;
    if (auto st = step->usable())
      return st;
    if (noSync && !step->gradsKept())
      return step->fail(MFSDP_ERROR_ORDER,
                        "no-sync needs the gradients kept between microbatches, "
                        "but this library's memory plan frees each unit's "
                        "gradients at post_backward: build it for gradient "
                        "accumulation (mfsdp-compile --accumulate)");
    step->noSync = noSync != 0;
    return MFSDP_OK;
  });
}

mfsdp_status mfsdp_zero_grad(mfsdp_step *step) {
  return barrier(step, "mfsdp_zero_grad", [&]() -> mfsdp_status {
    CHECK_CALL(step, "zero_grad", -1);
    Trace::Span hook = traced(step, "zero_grad");
    if (!step)
      return MFSDP_ERROR_INVALID;
    if (auto st = step->enter())
      return st;
    for (ParamState &ps : step->params) {
      if (ps.gradLive) {
        if (auto s = step->device(step->backend->zero(ps.grad, ps.gradFloats()), "zero-fill"))
          return s;
        ps.gradWide = false; // zero in bf16 too
      }
      ps.gradReduced = false;
      ps.gradSeen = false; // torch's zero_grad: every .grad None again
    }
    std::fill(step->reduced.begin(), step->reduced.end(), false);
    return step->finish();
  });
}

mfsdp_status mfsdp_optimizer_step(mfsdp_step *step) {
  return barrier(step, "mfsdp_optimizer_step",
                 [&]() -> mfsdp_status {
                   CHECK_CALL(step, "optimizer_step", -1);
                   Trace::Span hook = traced(step, "optimizer_step");
                   return optimizerStep(step);
                 });
}

mfsdp_status mfsdp_clip_grad_norm(mfsdp_step *step, double max_norm, double extra_sq,
                                  double *total_norm) {
  return barrier(step, "mfsdp_clip_grad_norm", [&]() -> mfsdp_status {
    CHECK_CALL(step, "clip_grad_norm", -1);
    Trace::Span hook = traced(step, "clip_grad_norm");
    if (!step || !total_norm)
      return MFSDP_ERROR_INVALID;
    if (auto st = step->enter())
      return st;
    if (std::isnan(max_norm) || extra_sq < 0)
      return step->fail(MFSDP_ERROR_INVALID,
                        std::isnan(max_norm)
                            ? "clip_grad_norm: max_norm is nan; expected a norm > 0, "
                              "or <= 0 or infinity to compute the norm only"
                            : "clip_grad_norm: extra_sq is " + number(extra_sq) +
                                  "; expected a sum of squares >= 0");
    if (auto st = step->checkReduced("clip_grad_norm"))
      return st;
    if (auto st = step->clipGradNorm(max_norm, extra_sq, *total_norm))
      return st;
    return step->finish();
  });
}

static mfsdp_status view(mfsdp_step *step, int32_t param, DLTensor *out,
                         bool grad) {
  if (!step || !out)
    return MFSDP_ERROR_INVALID;
  if (auto st = step->checkParam(param))
    return st;
  // A parameter still being prefetched: its gather completes first; one of
  // a unit whose reduction is in flight: the reduction completes first (a
  // plan that frees gradients has then released them).
  if ((!grad && step->prefetchPending(param)) || step->reductionPending(param)) {
    if (auto st = step->enter())
      return st;
    if (auto st = step->finish())
      return st;
  }
  ParamState &ps = step->params[param];
  if (grad && ps.gradLive && ps.gradWide) {
    // A kept bf16 gradient its reduction widened: the trainer's bf16 again.
    if (auto st = step->enter())
      return st;
    if (auto st = step->narrowGrad(ps))
      return st;
    if (auto st = step->finish())
      return st;
  }
  float *buf = grad ? (ps.gradLive ? ps.grad : nullptr) : ps.full;
  if (!buf)
    return step->fail(MFSDP_ERROR_ORDER,
                      std::string(grad ? "the gradient of '" : "parameter '") +
                          ps.name + "' is not available: call " +
                          (grad ? "pre_backward" : "pre_forward or pre_backward") +
                          " of unit " + std::to_string(ps.desc.unit) + " first");
  std::memset(out, 0, sizeof(*out));
  // The compute copy and the gradient in the compute dtype (bf16:
  // kDLBfloat, 16 bits; the gradient at gradBF16()).
  out->data = grad && ps.bf16() ? static_cast<void *>(ps.gradBF16()) : buf;
  out->device = step->backend->device();
  out->dtype = ps.bf16() ? DLDataType{kDLBfloat, 16, 1} : DLDataType{kDLFloat, 32, 1};
  // rows and cols are adjacent int64_t fields of the descriptor, so they
  // serve as the shape array (rows alone for a 1-D tensor).
  out->ndim = ps.desc.cols == 1 ? 1 : 2;
  out->shape = &ps.desc.rows;
  out->strides = nullptr;
  out->byte_offset = 0;
  return MFSDP_OK;
}

mfsdp_status mfsdp_param_view(mfsdp_step *step, int32_t param, DLTensor *out) {
  return barrier(step, "mfsdp_param_view", [&]() -> mfsdp_status {
    return view(step, param, out, false);
  });
}

mfsdp_status mfsdp_grad_view(mfsdp_step *step, int32_t param, DLTensor *out) {
  return barrier(step, "mfsdp_grad_view", [&]() -> mfsdp_status {
    return view(step, param, out, true);
  });
}

mfsdp_status mfsdp_load_param(mfsdp_step *step, int32_t param, const float *full) {
  return barrier(step, "mfsdp_load_param", [&]() -> mfsdp_status {
    CHECK_CALL(step, "load_param", param);
    Trace::Span hook = traced(step, "load_param");
    return loadParam(step, param, full);
  });
}

mfsdp_status mfsdp_store_param(mfsdp_step *step, int32_t param, float *full) {
  return barrier(step, "mfsdp_store_param", [&]() -> mfsdp_status {
    CHECK_CALL(step, "store_param", param);
    Trace::Span hook = traced(step, "store_param");
    return storeParam(step, param, full);
  });
}

mfsdp_status mfsdp_load_state(mfsdp_step *step, int32_t param, int32_t which,
                              const float *full) {
  return barrier(step, "mfsdp_load_state", [&]() -> mfsdp_status {
    CHECK_CALL(step, "load_state", param);
    Trace::Span hook = traced(step, "load_state");
    return loadState(step, param, which, full);
  });
}

mfsdp_status mfsdp_store_state(mfsdp_step *step, int32_t param, int32_t which,
                               float *full) {
  return barrier(step, "mfsdp_store_state", [&]() -> mfsdp_status {
    CHECK_CALL(step, "store_state", param);
    Trace::Span hook = traced(step, "store_state");
    return storeState(step, param, which, full);
  });
}

mfsdp_status mfsdp_get_hparams(mfsdp_step *step, int32_t param, mfsdp_hparams *out) {
  return barrier(step, "mfsdp_get_hparams", [&]() -> mfsdp_status {
    if (!step || !out)
      return MFSDP_ERROR_INVALID;
    if (auto st = step->checkParam(param))
      return st;
    *out = step->params[param].hparams;
    return MFSDP_OK;
  });
}

mfsdp_status mfsdp_set_hparams(mfsdp_step *step, int32_t param,
                               const mfsdp_hparams *in) {
  return barrier(step, "mfsdp_set_hparams", [&]() -> mfsdp_status {
    if (!step || !in)
      return MFSDP_ERROR_INVALID;
    if (auto st = step->checkParam(param))
      return st;
    ParamState &ps = step->params[param];
    const std::string why = hparamsProblem(*in, ps.desc.optimizer);
    if (!why.empty())
      return step->fail(MFSDP_ERROR_INVALID,
                        "set_hparams of parameter " + std::to_string(param) + " ('" +
                            ps.name + "', " + optimizerName(ps.desc.optimizer) + "): " +
                            why);
    ps.hparams = *in;
    return MFSDP_OK;
  });
}

mfsdp_status mfsdp_save(mfsdp_step *step, const char *dir, const char *user) {
  return barrier(step, "mfsdp_save", [&]() -> mfsdp_status {
    CHECK_CALL(step, "save", -1);
    Trace::Span hook = traced(step, "save");
    return mfsdp::rt::saveCheckpoint(step, dir, user);
  });
}

mfsdp_status mfsdp_load(mfsdp_step *step, const char *dir, char *user, int64_t user_size) {
  return barrier(step, "mfsdp_load", [&]() -> mfsdp_status {
    CHECK_CALL(step, "load", -1);
    Trace::Span hook = traced(step, "load");
    return mfsdp::rt::loadCheckpoint(step, dir, user, user_size);
  });
}

mfsdp_status mfsdp_load_hf(mfsdp_step *step, const char *dir) {
  return barrier(step, "mfsdp_load_hf", [&]() -> mfsdp_status {
    CHECK_CALL(step, "load_hf", -1);
    Trace::Span hook = traced(step, "load_hf");
    return mfsdp::rt::loadHF(step, dir);
  });
}

mfsdp_status mfsdp_export_hf(mfsdp_step *step, const char *dir, int32_t dtype,
                             int64_t max_shard_bytes) {
  return barrier(step, "mfsdp_export_hf", [&]() -> mfsdp_status {
    CHECK_CALL(step, "export_hf", -1);
    Trace::Span hook = traced(step, "export_hf");
    return mfsdp::rt::exportHF(step, dir, dtype, max_shard_bytes);
  });
}

mfsdp_status mfsdp_step_count(mfsdp_step *step, int64_t *count) {
  return barrier(step, "mfsdp_step_count", [&]() -> mfsdp_status {
    if (!step || !count)
      return MFSDP_ERROR_INVALID;
    *count = step->steps;
    return MFSDP_OK;
  });
}

mfsdp_status mfsdp_set_step_count(mfsdp_step *step, int64_t count) {
  return barrier(step, "mfsdp_set_step_count", [&]() -> mfsdp_status {
    if (!step)
      return MFSDP_ERROR_INVALID;
    if (count < 0)
      return step->fail(MFSDP_ERROR_INVALID,
                        "step count " + std::to_string(count) + " is negative");
    step->steps = count;
    for (ParamState &ps : step->params)
      ps.steps = count;
    return MFSDP_OK;
  });
}

mfsdp_status mfsdp_set_unused_grads(mfsdp_step *step, int32_t rule) {
  return barrier(step, "mfsdp_set_unused_grads", [&]() -> mfsdp_status {
    CHECK_CALL(step, "set_unused_grads", -1);
    if (!step)
      return MFSDP_ERROR_INVALID;
    if (auto st = step->enter())
      return st;
    return step->setUnusedGrads(rule);
  });
}

mfsdp_status mfsdp_mark_no_grad(mfsdp_step *step, int32_t param) {
  return barrier(step, "mfsdp_mark_no_grad", [&]() -> mfsdp_status {
    if (!step)
      return MFSDP_ERROR_INVALID;
    if (auto st = step->checkParam(param))
      return st;
    ParamState &ps = step->params[param];
    if (!step->skipUnused)
      return step->fail(MFSDP_ERROR_ORDER,
                        "mark_no_grad of parameter '" + ps.name +
                            "' while the optimizer steps unused parameters "
                            "(mfsdp_set_unused_grads(MFSDP_UNUSED_SKIP) first)");
    if (step->state[ps.desc.unit] != UnitState::Backward)
      return step->fail(MFSDP_ERROR_ORDER,
                        "mark_no_grad of parameter '" + ps.name + "' while unit " +
                            std::to_string(ps.desc.unit) +
                            " is not in its backward (expected between its "
                            "pre_backward and post_backward)");
    ps.noGradNow = true;
    return MFSDP_OK;
  });
}

mfsdp_status mfsdp_param_step_count(mfsdp_step *step, int32_t param, int64_t *count) {
  return barrier(step, "mfsdp_param_step_count", [&]() -> mfsdp_status {
    if (!step || !count)
      return MFSDP_ERROR_INVALID;
    if (auto st = step->checkParam(param))
      return st;
    *count = step->params[param].steps;
    return MFSDP_OK;
  });
}

} // extern "C"

mfsdp::rt::WorkCounters mfsdp::rt::workCounters(const mfsdp_step *step) {
  if (!step)
    return WorkCounters{};
  WorkCounters w = step->work;
  w.shardRank = step->shardRank;
  w.replicaRank = step->replicaRank;
  return w;
}

//===- Runtime.cpp - The C ABI: the step engine over a backend -------------===//
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
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime.h"
#include "mfsdp/runtime/Arena.h"
#include "mfsdp/runtime/Backend.h"
#include "mfsdp/runtime/ControlPlane.h"
#include "mfsdp/runtime/HostComm.h"
#include "mfsdp/runtime/Counters.h"
#include "mfsdp/runtime/BufferSizes.h"
#include "mfsdp/runtime/PlanHash.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

using namespace mfsdp::rt;
using mfsdp::runtime::BufferFloats;
using mfsdp::runtime::bufferFloats;

namespace {

enum class UnitState { Idle, Forward, ForwardDone, Backward };

struct ParamState {
  mfsdp_param_desc desc;
  std::string name;
  mfsdp_param_offsets at{-1, -1, -1, -1, -1, -1, -1}; // the static plan's places
  int64_t fullAt = -1; // where `full` is: at.full or at.full_backward
  int64_t chunkRows = 0;  // row shard: ceil(rows / S)
  int64_t localRows = 0;  // rows this rank keeps
  bool ownsAny = false;   // this rank updates something of it
  int64_t localCount = 0; // elements this rank updates (no padding)
  int64_t localSize = 0;  // elements of master, m, v, gradShard (padded)
  int64_t fullSize = 0;   // elements of full and grad (padded)
  BlockGrid grid;                  // block shard: the tiling over dp_shard
  std::vector<int64_t> blockCounts; // block shard: floats per dp_shard rank
  float *master = nullptr;    // shard, owned matrix, or whole
  float *m = nullptr, *v = nullptr; // AdamW / SGD / Muon state
  float *gradShard = nullptr; // the reduced gradient this rank keeps
  float *full = nullptr;      // gathered parameter (null when freed)
  float *grad = nullptr;      // gradient buffer handed to the trainer
  bool gradLive = false;      // grad handed out (pre_backward ran)
  bool gradReduced = false;   // gradShard holds a reduced gradient
  int32_t nsReplica = -1;     // ns_split: the replica that steps it (-1: all)
  int32_t bucket = -1;        // the plan's bucket it is in (-1: none)
  mfsdp_hparams hparams{};    // its optimizer's, from the next step on
  int64_t elements() const { return desc.rows * desc.cols; }
};

/// An optimizer's name, for messages.
const char *optimizerName(int32_t optimizer) {
  static const char *const names[] = {"no optimizer", "AdamW", "SGD", "Muon"};
  return names[optimizer >= 0 && optimizer <= 3 ? optimizer : 0];
}

/// A parameter's hyperparameters after mfsdp_create (runtime.h): the
/// plan's constants of its optimizer, Muon's defaults for Newton-Schulz.
mfsdp_hparams planHparams(const mfsdp_plan &p, int32_t optimizer) {
  const NewtonSchulzHyper ns;
  mfsdp_hparams h{};
  h.beta1 = p.adamw_beta1;
  h.beta2 = p.adamw_beta2;
  h.eps = p.adamw_eps;
  const bool sgd = optimizer == MFSDP_OPT_SGD;
  h.momentum = sgd ? p.sgd_momentum : p.muon_momentum;
  h.nesterov = sgd ? p.sgd_nesterov : p.muon_nesterov;
  h.ns_steps = p.muon_ns_steps;
  h.ns_a = ns.a;
  h.ns_b = ns.b;
  h.ns_c = ns.c;
  h.ns_eps = ns.eps;
  h.ns_norm = static_cast<int32_t>(ns.norm);
  h.adjust_lr = p.muon_scale ? MFSDP_ADJUST_LR_ORIGINAL : MFSDP_ADJUST_LR_MATCH_RMS_ADAMW;
  switch (optimizer) {
  case MFSDP_OPT_ADAMW:
    h.lr = p.adamw_lr;
    h.weight_decay = p.adamw_weight_decay;
    break;
  case MFSDP_OPT_SGD:
    h.lr = p.sgd_lr;
    h.weight_decay = p.sgd_weight_decay;
    break;
  case MFSDP_OPT_MUON:
    h.lr = p.muon_lr;
    h.weight_decay = p.muon_weight_decay;
    break;
  default:
    break; // frozen: 0
  }
  return h;
}

/// A number as printf's %g writes it (1e-07, -0.5, inf, nan), for messages.
std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", x);
  return text;
}

/// What is wrong with hyperparameters for `optimizer` (runtime.h,
/// mfsdp_set_hparams): "" when nothing, else the first field and what it
/// must be. Fields of other optimizers are not looked at.
std::string hparamsProblem(const mfsdp_hparams &h, int32_t optimizer) {
  // Field `name` holds `x`: "" when `ok`, else what it must be.
  auto field = [](const char *name, double x, bool ok,
                  const std::string &expected) -> std::string {
    return ok ? "" : std::string(name) + " is " + number(x) + "; expected " + expected;
  };
  auto atLeast0 = [&](const char *name, float x) {
    return field(name, x, std::isfinite(x) && x >= 0, "a finite value >= 0");
  };
  auto positive = [&](const char *name, float x) {
    return field(name, x, std::isfinite(x) && x > 0, "a finite value > 0");
  };
  auto finite = [&](const char *name, float x) {
    return field(name, x, std::isfinite(x), "a finite value");
  };
  auto beta = [&](const char *name, float x) {
    return field(name, x, x >= 0 && x < 1, std::string("0 <= ") + name + " < 1");
  };
  auto choice = [&](const char *name, int32_t x, int32_t last, const char *what) {
    return field(name, x, x >= 0 && x <= last, what);
  };
  if (optimizer == MFSDP_OPT_NONE)
    return "";
  std::vector<std::string> problems = {atLeast0("lr", h.lr),
                                       atLeast0("weight_decay", h.weight_decay)};
  if (optimizer == MFSDP_OPT_ADAMW)
    problems.insert(problems.end(), {beta("beta1", h.beta1), beta("beta2", h.beta2),
                                     positive("eps", h.eps)});
  if (optimizer == MFSDP_OPT_SGD || optimizer == MFSDP_OPT_MUON)
    problems.insert(problems.end(), {atLeast0("momentum", h.momentum),
                                     choice("nesterov", h.nesterov, 1, "0 or 1")});
  if (optimizer == MFSDP_OPT_MUON)
    problems.insert(
        problems.end(),
        {field("ns_steps", h.ns_steps, h.ns_steps >= 0, ">= 0"), finite("ns_a", h.ns_a),
         finite("ns_b", h.ns_b), finite("ns_c", h.ns_c), positive("ns_eps", h.ns_eps),
         choice("ns_norm", h.ns_norm, MFSDP_NS_NORM_CLAMP,
                "MFSDP_NS_NORM_ADD_EPS (0) or MFSDP_NS_NORM_CLAMP (1)"),
         choice("adjust_lr", h.adjust_lr, MFSDP_ADJUST_LR_SPECTRAL_UNCLAMPED,
                "MFSDP_ADJUST_LR_MATCH_RMS_ADAMW (0), MFSDP_ADJUST_LR_ORIGINAL (1) "
                "or MFSDP_ADJUST_LR_SPECTRAL_UNCLAMPED (2)")});
  for (const std::string &problem : problems)
    if (!problem.empty())
      return problem;
  return "";
}

/// The kernels' hyperparameters from a parameter's.
AdamWHyper adamwHyper(const mfsdp_hparams &h) {
  return {h.lr, h.beta1, h.beta2, h.eps, h.weight_decay};
}
SGDHyper sgdHyper(const mfsdp_hparams &h) {
  return {h.lr, h.momentum, h.weight_decay, h.nesterov != 0};
}
MuonHyper muonHyper(const mfsdp_hparams &h) {
  MuonHyper muon;
  muon.lr = h.lr;
  muon.momentum = h.momentum;
  muon.weightDecay = h.weight_decay;
  muon.nesterov = h.nesterov != 0;
  muon.ns = {h.ns_steps, h.ns_a, h.ns_b, h.ns_c, h.ns_eps,
             h.ns_norm == MFSDP_NS_NORM_CLAMP ? NsNorm::Clamp : NsNorm::AddEps};
  muon.scale = static_cast<MuonScale>(h.adjust_lr);
  return muon;
}

/// What is wrong with a plan entry's block extents ("" when nothing).
std::string blockProblem(const mfsdp_param_desc &d) {
  const std::string extents =
      std::to_string(d.block_rows) + "x" + std::to_string(d.block_cols);
  if (d.placement != MFSDP_BLOCK_SHARD)
    return d.block_rows || d.block_cols
               ? "block extents " + extents + " on a placement other than "
                 "MFSDP_BLOCK_SHARD (expected 0x0)"
               : "";
  if (d.block_rows < 1 || d.block_cols < 1 || d.rows % d.block_rows ||
      d.cols % d.block_cols)
    return "blocks of " + extents + " do not tile the " + std::to_string(d.rows) +
           "x" + std::to_string(d.cols) +
           " tensor (block extents must be positive and divide rows and cols)";
  if (d.optimizer == MFSDP_OPT_MUON)
    return "Muon needs the whole matrix, but MFSDP_BLOCK_SHARD splits it into "
           "blocks (use MFSDP_OWNER)";
  return "";
}

/// A bucket of the plan (mfsdp_bucket) as this rank runs it.
struct BucketState {
  std::vector<int32_t> members;
  int32_t unit = -1;
  bool rows = false; // MFSDP_ROW_SHARD; else MFSDP_OWNER
  // Row shards: one rank's chunk (floats) and each member's place in it.
  int64_t chunk = 0;
  std::vector<int64_t> rel;
  bool gaps = false; // the chunk has alignment gaps between members
  // Owners: each rank's span (floats) of the gathered buffer, and the
  // first member this rank owns (-1: none).
  std::vector<int64_t> counts;
  int32_t firstMine = -1;
  int64_t mine = 0;
  mfsdp_bucket_offsets stagingAt{-1, -1, -1};
  mfsdp_bucket_kernels kernels{nullptr, nullptr}; // the plan's, this backend's
  float *staging = nullptr; // a row-shard gather or reduction in flight
  int64_t stagingAtNow = -1;
};

/// A collective started and not yet waited for: one parameter's or one
/// bucket's.
struct Started {
  int32_t param = -1;
  int32_t bucket = -1;
  CommHandle handle = 0;
};

} // namespace

struct mfsdp_step {
  mfsdp_plan plan;
  std::vector<ParamState> params;
  std::vector<std::vector<int32_t>> unitParams;
  std::vector<UnitState> state;
  std::vector<bool> reduced;
  /// reduced[u] when u's forward started: an evaluation forward that ends
  /// with mfsdp_end_forward leaves the gradients reduced as they were.
  std::vector<bool> reducedBeforeForward;
  /// The last optimizer_step consumed the reduced gradients, and no unit's
  /// gradients were reduced since: another step is refused.
  bool stepped = false;
  std::unique_ptr<Backend> backend;
  float *muonScratch = nullptr;
  const mfsdp_memory_plan *memory = nullptr; // the static plan, if any
  int64_t S = 1, R = 1, shardRank = 0;
  int64_t steps = 0;
  int64_t replicaRank = 0; // this rank's dp_replicate replica
  WorkCounters work;       // for tests (Counters.h)
  bool noSync = false;
  /// Gather prefetch in flight: the unit whose gathered copies are being
  /// gathered ahead of its hook (-1: none), and each parameter's started
  /// collective. Completed (completePrefetch) at the start of the next call
  /// that touches buffers, so no collective is ever left unwaited and every
  /// rank waits in the same order.
  int32_t prefetchUnit = -1;
  std::vector<Started> prefetchStarted;
  /// Gradient reduction in flight (with prefetch 1, overlapped with the
  /// previous unit's backward): the unit post_backward left it running for
  /// (-1: none) and each parameter's started collective. Completed
  /// (completeReduction: wait, scale, then the unit's gathered copy and
  /// transient gradients released) by the next post_backward before its own
  /// reduction, or by any call that needs it (enter()).
  int32_t reduceUnit = -1;
  std::vector<Started> reduceStarted;
  /// The plan's buckets, and each unit's.
  std::vector<BucketState> buckets;
  std::vector<std::vector<int32_t>> unitBuckets;
  std::string error;
  bool created = false;    // mfsdp_create succeeded on every rank
  std::string createError; // why it did not

  ~mfsdp_step() {
    if (backend) {
      completePrefetch();
      completeReduction();
      backend->synchronize();
    }
  }

  /// Whether this runtime prefetches gathers: a static memory plan that
  /// made room for it, under ZeRO-3 (ZeRO-1/2 keep the copies all step).
  bool prefetching() const {
    return memory && memory->prefetch == 1 && plan.zero >= 3;
  }
  bool prefetchPending(int32_t param) const {
    for (const Started &started : prefetchStarted)
      if (started.param == param ||
          (started.bucket >= 0 && started.bucket == params[param].bucket))
        return true;
    return false;
  }

  /// Whether post_backward(u) leaves unit u's reduction running until
  /// post_backward(u - 1) (or the next call that needs it): the same flag.
  bool overlapping() const { return prefetching(); }
  /// Whether a hook of `unit` may leave the reduction in flight running:
  /// the unit right before it (its backward, or its recomputation, in
  /// state `during`), whose buffers the memory plan keeps apart from it.
  bool keepsReductionFor(int32_t unit, UnitState during) const {
    return reduceUnit >= 0 && unit + 1 == reduceUnit && state[unit] == during;
  }
  /// Whether a reduction in flight reads `param`'s buffers.
  bool reductionPending(int32_t param) const {
    return reduceUnit >= 0 && params[param].desc.unit == reduceUnit;
  }

  /// Waits for the reduction in flight, if any: every started collective,
  /// even after a failure; then the scaling, and the unit's gathered copy
  /// and transient gradient buffers are released.
  mfsdp_status completeReduction() {
    std::vector<Started> started;
    started.swap(reduceStarted);
    const int32_t unit = reduceUnit;
    reduceUnit = -1;
    const float scale = 1.f / static_cast<float>(S * R);
    mfsdp_status first = MFSDP_OK;
    std::string firstError;
    for (const Started &st : started) {
      const std::string what =
          st.bucket >= 0 ? "the reduction of bucket " + std::to_string(st.bucket)
                         : "the reduction of '" + params[st.param].name + "'";
      mfsdp_status s = comm(backend->wait(st.handle), what.c_str());
      ++work.reduceWaits;
      if (st.bucket >= 0)
        releaseStaging(buckets[st.bucket]);
      // HSDP: the shard reduction has landed; the all-reduce over replicas
      // of what this rank keeps follows (every rank calls it, with nothing
      // when it keeps nothing). It is called even after a failure, so
      // every rank issues the same sequence and no rank's all-reduce pairs
      // with another entry's on its replicas; the step has failed anyway.
      if (R > 1) {
        float *span = nullptr;
        int64_t count = 0;
        if (st.bucket >= 0) {
          shardSpan(buckets[st.bucket], span, count);
        } else {
          span = params[st.param].gradShard;
          count = params[st.param].localCount;
        }
        const std::string waitError = s ? error : std::string();
        const mfsdp_status r =
            comm(backend->allReduce(Group::Replicate, span, count),
                 ("the all-reduce over replicas after " + what).c_str());
        if (!s)
          s = r;
        else
          error = waitError; // the first failure is the one to report
      }
      const std::vector<int32_t> one{st.param};
      for (int32_t p : st.bucket >= 0 ? buckets[st.bucket].members : one) {
        ParamState &ps = params[p];
        if (!s)
          s = device(backend->scale(ps.gradShard, ps.localCount, scale), "scaling");
        if (!s)
          ps.gradReduced = true;
      }
      if (s && !first) {
        first = s;
        firstError = error;
      }
    }
    if (unit >= 0) {
      if (!first)
        markReduced(unit);
      release(unit);
      releaseGrads(unit);
    }
    if (first)
      error = firstError;
    return first;
  }

  /// Unit `unit`'s gradients are reduced: an optimizer step may use them.
  void markReduced(int32_t unit) {
    reduced[unit] = true;
    stepped = false;
  }

  /// MFSDP_ERROR_ORDER, with `call` in the message, unless every unit's
  /// gradients were reduced since the last optimizer step and zero_grad.
  mfsdp_status checkReduced(const char *call) {
    for (int32_t u = 0; u < plan.num_units; ++u) {
      if (unitParams[u].empty())
        continue; // nothing to reduce, nothing to consume
      if (stepped)
        return fail(MFSDP_ERROR_ORDER,
                    std::string(call) + ": no gradients were reduced since the "
                                        "last optimizer_step, which consumed them "
                                        "(run a backward first)");
      if (state[u] != UnitState::Idle || !reduced[u])
        return fail(MFSDP_ERROR_ORDER, std::string(call) +
                                           " before the gradients of unit " +
                                           std::to_string(u) +
                                           " were reduced (post_backward "
                                           "without no-sync)");
    }
    return MFSDP_OK;
  }

  /// Whether clipping counts and scales `ps`'s reduced gradient on this
  /// rank: it keeps some of it and an optimizer steps it.
  static bool clipped(const ParamState &ps) {
    return ps.ownsAny && ps.desc.optimizer != MFSDP_OPT_NONE;
  }

  /// clip_grad_norm (runtime.h): `total` = the norm of every reduced
  /// gradient, each element once over the data-parallel ranks, with
  /// `extraSq`; the gradients scaled when it exceeds `maxNorm`.
  mfsdp_status clipGradNorm(double maxNorm, double extraSq, double &total) {
    // Row shards' rows (not their padding), packed blocks and owned
    // matrices on the dp_shard rank that keeps them; replicated tensors,
    // whole on every rank, on dp_shard rank 0. The replicas hold the same
    // reduced gradients: the sum runs over dp_shard only.
    std::vector<FloatSpan> counted;
    for (const ParamState &ps : params)
      if (clipped(ps) && (ps.desc.placement != MFSDP_REPLICATE || shardRank == 0))
        counted.push_back({ps.gradShard, ps.localCount});
    double sum = 0;
    if (auto s = device(backend->sumSquares(counted, sum), "the sum of squared gradients"))
      return s;
    if (auto s = comm(backend->allReduceDoubles(Group::Shard, &sum, 1),
                      "the all-reduce of the squared gradient norm over dp_shard"))
      return s;
    if (R > 1) {
      // Replica 0's sum everywhere (the others add zeros), so every replica
      // scales its gradients by the same bits.
      if (replicaRank != 0)
        sum = 0;
      if (auto s = comm(backend->allReduceDoubles(Group::Replicate, &sum, 1),
                        "sending the squared gradient norm over dp_replicate"))
        return s;
    }
    total = std::sqrt(sum + extraSq);
    // torch.nn.utils.clip_grad_norm_, except that a non-finite total
    // scales nothing (torch would multiply by nan or 0).
    if (!(maxNorm > 0) || std::isinf(maxNorm) || !std::isfinite(total))
      return MFSDP_OK;
    const double coef = maxNorm / (total + 1e-6);
    if (coef >= 1)
      return MFSDP_OK;
    for (ParamState &ps : params)
      if (clipped(ps))
        if (auto s = device(backend->scale(ps.gradShard, ps.localCount,
                                           static_cast<float>(coef)),
                            "clipping the gradient of '" + ps.name + "'"))
          return s;
    return MFSDP_OK;
  }

  /// Starts gathering `unit` (for its backward: at the memory plan's
  /// backward place) without waiting, where that needs no work after the
  /// collective but bf16 rounding: row shards and owned matrices not yet
  /// gathered. Block shards (reordered after the collective) and
  /// replicated tensors (a copy) are gathered at the unit's own hook.
  mfsdp_status startPrefetch(int32_t unit, bool forBackward) {
    if (!prefetching() || unit < 0 || unit >= plan.num_units ||
        !prefetchStarted.empty())
      return MFSDP_OK;
    for (int32_t b : unitBuckets[unit]) {
      if (bucketGathered(b))
        continue;
      CommHandle handle = 0;
      if (auto s = gatherBucket(b, forBackward, &handle))
        return s;
      prefetchUnit = unit;
      prefetchStarted.push_back({-1, b, handle});
      ++work.prefetchStarts;
    }
    for (int32_t p : unitParams[unit]) {
      ParamState &ps = params[p];
      if (ps.full || ps.bucket >= 0 || (ps.desc.placement != MFSDP_ROW_SHARD &&
                      ps.desc.placement != MFSDP_OWNER))
        continue;
      ps.fullAt = forBackward ? ps.at.full_backward : ps.at.full;
      if (auto s = place(ps.fullAt, ps.fullSize, ps.full,
                         "the prefetched '" + ps.name + "'" +
                             (forBackward ? " for backward" : "")))
        return s;
      CommHandle handle = 0;
      int rc = 0;
      if (ps.desc.placement == MFSDP_ROW_SHARD) {
        rc = backend->startAllGather(Group::Shard, ps.master, ps.full, ps.localSize,
                                     handle);
      } else {
        std::vector<int64_t> counts(S, 0);
        counts[ps.desc.owner] = ps.elements();
        rc = backend->startAllGatherV(Group::Shard, ps.ownsAny ? ps.master : nullptr,
                                      ps.full, counts, handle);
      }
      if (rc) {
        releaseFull(ps);
        return comm(rc, "starting the prefetch all-gather");
      }
      prefetchUnit = unit;
      prefetchStarted.push_back({p, -1, handle});
      ++work.prefetchStarts;
    }
    return MFSDP_OK;
  }

  /// Waits for the prefetch in flight, if any (then bf16 rounding). Every
  /// started collective is waited for, even after a failure.
  mfsdp_status completePrefetch() {
    std::vector<Started> started;
    started.swap(prefetchStarted);
    prefetchUnit = -1;
    mfsdp_status first = MFSDP_OK;
    std::string firstError;
    for (const Started &st : started) {
      mfsdp_status s = MFSDP_OK;
      if (st.bucket >= 0) {
        s = comm(backend->wait(st.handle),
                 ("the prefetched all-gather of bucket " + std::to_string(st.bucket))
                     .c_str());
        s = finishBucketGather(st.bucket, s);
      } else {
        ParamState &ps = params[st.param];
        s = comm(backend->wait(st.handle),
                 ("the prefetched all-gather of '" + ps.name + "'").c_str());
        if (!s && ps.desc.compute_dtype == MFSDP_COMPUTE_BF16)
          s = device(backend->roundToBF16(ps.full, ps.elements()), "bf16 rounding");
        if (s)
          releaseFull(ps);
      }
      ++work.prefetchWaits;
      if (s && !first) {
        first = s;
        firstError = error;
      }
    }
    if (first)
      error = firstError;
    return first;
  }

  /// A row-shard bucket's staging buffer for a gather (forward or
  /// backward) or a reduction: `which` 0, 1 or 2 (mfsdp_bucket_offsets).
  mfsdp_status placeStaging(BucketState &bs, int which, const std::string &what) {
    const int64_t at[3] = {bs.stagingAt.gather, bs.stagingAt.gather_backward,
                           bs.stagingAt.reduce};
    bs.stagingAtNow = at[which];
    return place(at[which], S * bs.chunk, bs.staging, what);
  }
  void releaseStaging(BucketState &bs) {
    backend->release(bs.staging);
    bs.staging = nullptr;
  }

  /// Whether every member of bucket `b` has its gathered copy (a load
  /// releases one member's: the whole bucket is gathered again).
  bool bucketGathered(int32_t b) const {
    for (int32_t p : buckets[b].members)
      if (!params[p].full)
        return false;
    return true;
  }

  /// Gathers bucket `b` into its members' gathered copies (for backward:
  /// the memory plan's backward places): one all-gather of every rank's
  /// chunk into staging (row shards) or one all-gather-v straight into the
  /// copies (owners). With `handle` it is only started, and
  /// finishBucketGather completes it after the wait.
  mfsdp_status gatherBucket(int32_t b, bool forBackward, CommHandle *handle) {
    BucketState &bs = buckets[b];
    const std::string what = "bucket " + std::to_string(b) + " (unit " +
                             std::to_string(bs.unit) + ")";
    for (int32_t p : bs.members)
      releaseFull(params[p]);
    for (int32_t p : bs.members) {
      ParamState &ps = params[p];
      ps.fullAt = forBackward ? ps.at.full_backward : ps.at.full;
      if (auto s = place(ps.fullAt, ps.fullSize, ps.full,
                         "the gathered '" + ps.name + "'" +
                             (forBackward ? " for backward" : ""))) {
        for (int32_t q : bs.members)
          releaseFull(params[q]);
        return s;
      }
    }
    ParamState &first = params[bs.members.front()];
    int rc = 0;
    if (bs.rows) {
      if (auto s = placeStaging(bs, forBackward && plan.zero >= 3 ? 1 : 0,
                                "the gather staging of " + what)) {
        for (int32_t q : bs.members)
          releaseFull(params[q]);
        return s;
      }
      rc = handle ? backend->startAllGather(Group::Shard, first.master, bs.staging,
                                            bs.chunk, *handle)
                  : backend->allGather(Group::Shard, first.master, bs.staging, bs.chunk);
    } else {
      const float *send = bs.firstMine >= 0 ? params[bs.firstMine].master : nullptr;
      rc = handle ? backend->startAllGatherV(Group::Shard, send, first.full, bs.counts,
                                             *handle)
                  : backend->allGatherV(Group::Shard, send, first.full, bs.counts);
    }
    ++work.bucketGathers;
    mfsdp_status s = comm(rc, ((handle ? "starting the all-gather of "
                                       : "the all-gather of ") + what).c_str());
    if (s || !handle)
      return finishBucketGather(b, s);
    return MFSDP_OK;
  }

  /// After a bucket's all-gather (status `s`): row shards unpacked from
  /// staging, bf16 rounding; on failure the copies are released.
  mfsdp_status finishBucketGather(int32_t b, mfsdp_status s) {
    BucketState &bs = buckets[b];
    if (!s && bs.rows && bs.kernels.unpack) {
      // The plan's kernel: one pass with the bucket's constants.
      std::vector<float *> full;
      for (int32_t p : bs.members)
        full.push_back(params[p].full);
      s = device(bs.kernels.unpack(bs.staging, full.data(), backend->kernelStream()),
                 "the plan's unpack kernel of bucket " + std::to_string(b));
    }
    for (size_t j = 0; j < bs.members.size(); ++j) {
      ParamState &ps = params[bs.members[j]];
      if (!s && bs.rows && !bs.kernels.unpack)
        s = device(backend->copy2D(ps.full, ps.localSize, bs.staging + bs.rel[j],
                                   bs.chunk, ps.localSize, S),
                   "unpacking bucket " + std::to_string(b));
      if (!s && ps.desc.compute_dtype == MFSDP_COMPUTE_BF16)
        s = device(backend->roundToBF16(ps.full, ps.elements()), "bf16 rounding");
    }
    if (bs.rows)
      releaseStaging(bs);
    if (s)
      for (int32_t p : bs.members)
        releaseFull(params[p]);
    return s;
  }

  /// This rank's reduced-gradient span of a bucket: row shards its chunk,
  /// owners the matrices it owns (none: null and 0).
  void shardSpan(const BucketState &bs, float *&span, int64_t &count) const {
    if (bs.rows) {
      span = params[bs.members.front()].gradShard;
      count = bs.chunk;
    } else {
      span = bs.firstMine >= 0 ? params[bs.firstMine].gradShard : nullptr;
      count = bs.mine;
    }
  }

  /// Reduces bucket `b`'s gradients into the members' shards: row shards
  /// packed by rank into staging, one reduce-scatter into the grad_shard
  /// span; owners one reduce-scatter-v from the gradient span. With
  /// `handle` it is only started; completeReduction runs HSDP's all-reduce
  /// over replicas and the scaling. Otherwise they follow here.
  mfsdp_status reduceBucket(int32_t b, CommHandle *handle) {
    BucketState &bs = buckets[b];
    const std::string what = "bucket " + std::to_string(b) + " (unit " +
                             std::to_string(bs.unit) + ")";
    for (int32_t p : bs.members) {
      ParamState &ps = params[p];
      if (ps.desc.compute_dtype == MFSDP_COMPUTE_BF16)
        if (auto s = device(backend->roundToBF16(ps.grad, ps.elements()), "bf16 rounding"))
          return s;
    }
    ParamState &first = params[bs.members.front()];
    float *shards = nullptr; // this rank's grad_shard span
    int64_t count = 0;
    shardSpan(bs, shards, count);
    int rc = 0;
    if (bs.rows) {
      if (auto s = placeStaging(bs, 2, "the reduce staging of " + what))
        return s;
      mfsdp_status s = MFSDP_OK;
      if (bs.kernels.pack) {
        // The plan's kernel writes the whole staging buffer, gaps included.
        std::vector<const float *> grad;
        for (int32_t p : bs.members)
          grad.push_back(params[p].grad);
        s = device(bs.kernels.pack(grad.data(), bs.staging, backend->kernelStream()),
                   "the plan's pack kernel of bucket " + std::to_string(b));
      } else if (bs.gaps) {
        s = device(backend->zero(bs.staging, S * bs.chunk), "zero-fill");
      }
      for (size_t j = 0; !s && !bs.kernels.pack && j < bs.members.size(); ++j) {
        ParamState &ps = params[bs.members[j]];
        s = device(backend->copy2D(bs.staging + bs.rel[j], bs.chunk, ps.grad, ps.localSize,
                                   ps.localSize, S),
                   "packing bucket " + std::to_string(b));
      }
      if (s) {
        releaseStaging(bs);
        return s;
      }
      rc = handle ? backend->startReduceScatter(Group::Shard, bs.staging, shards, count,
                                                *handle)
                  : backend->reduceScatter(Group::Shard, bs.staging, shards, count);
    } else {
      rc = handle ? backend->startReduceScatterV(Group::Shard, first.grad, shards,
                                                 bs.counts, *handle)
                  : backend->reduceScatterV(Group::Shard, first.grad, shards, bs.counts);
    }
    ++work.bucketReductions;
    mfsdp_status s = comm(rc, ((handle ? "starting the reduce-scatter of "
                                       : "the reduce-scatter of ") + what).c_str());
    if (handle && !s)
      return MFSDP_OK; // staging released by completeReduction
    if (bs.rows)
      releaseStaging(bs);
    if (s)
      return s;
    if (R > 1)
      // Every rank calls it, with nothing when it keeps nothing.
      if (auto st = comm(backend->allReduce(Group::Replicate, shards, count),
                         ("the all-reduce over replicas of " + what).c_str()))
        return st;
    const float scale = 1.f / static_cast<float>(S * R);
    for (int32_t p : bs.members) {
      ParamState &ps = params[p];
      if (auto st = device(backend->scale(ps.gradShard, ps.localCount, scale), "scaling"))
        return st;
      ps.gradReduced = true;
    }
    return MFSDP_OK;
  }

  /// Checks the plan's buckets against the parameters and the memory
  /// plan's offsets (mfsdp_bucket) and lays them out for this rank; a
  /// message in `error` when they do not fit.
  mfsdp_status layOutBuckets() {
    unitBuckets.assign(plan.num_units, {});
    if (plan.num_buckets == 0 && !plan.buckets)
      return MFSDP_OK;
    auto bad = [&](std::string why) {
      return fail(MFSDP_ERROR_PLAN, "invalid plan: " + why);
    };
    if (plan.num_buckets < 0 || (plan.num_buckets > 0 && !plan.buckets))
      return bad("num_buckets is " + std::to_string(plan.num_buckets) +
                 " with buckets " + (plan.buckets ? "set" : "NULL"));
    if (!memory || !memory->buckets)
      return bad("buckets need the static memory plan, with their staging "
                 "offsets (mfsdp_memory_plan.buckets), which lays their "
                 "members out in one piece");
    auto off = [](int64_t bytes) { return bytes / static_cast<int64_t>(sizeof(float)); };
    for (int32_t b = 0; b < plan.num_buckets; ++b) {
      const mfsdp_bucket &k = plan.buckets[b];
      const std::string name = "bucket " + std::to_string(b);
      if (k.unit < 0 || k.unit >= plan.num_units || k.num_params < 1 || !k.params ||
          (k.placement != MFSDP_ROW_SHARD && k.placement != MFSDP_OWNER))
        return bad(name + " needs a unit in [0, " + std::to_string(plan.num_units) +
                   "), members, and placement MFSDP_ROW_SHARD or MFSDP_OWNER");
      BucketState bs;
      bs.unit = k.unit;
      bs.rows = k.placement == MFSDP_ROW_SHARD;
      bs.stagingAt = memory->buckets[b];
      const mfsdp_bucket_kernels *table =
          backend->device().device_type == kDLCUDA ? plan.cuda_kernels : plan.host_kernels;
      if (table)
        bs.kernels = table[b];
      for (int32_t j = 0; j < k.num_params; ++j) {
        const int32_t p = k.params[j];
        if (p < 0 || p >= plan.num_params)
          return bad(name + " names parameter " + std::to_string(p) + ", out of range");
        ParamState &ps = params[p];
        if (ps.bucket >= 0)
          return bad("'" + ps.name + "' is in bucket " + std::to_string(ps.bucket) +
                     " and in " + name);
        if (ps.desc.unit != k.unit || ps.desc.placement != k.placement)
          return bad("'" + ps.name + "' (unit " + std::to_string(ps.desc.unit) +
                     ") is in " + name + " of unit " + std::to_string(k.unit) +
                     " and another placement or unit");
        if (!bs.rows && j > 0 && params[bs.members.back()].desc.owner > ps.desc.owner)
          return bad(name + " is not ordered by owner at '" + ps.name + "'");
        ps.bucket = b;
        bs.members.push_back(p);
      }
      // Offsets relative to the first member, in floats; each kind's must
      // repeat the reference layout.
      auto rel = [&](int32_t p, int64_t mfsdp_param_offsets::*f, int32_t base) {
        return off(params[p].at.*f - params[base].at.*f);
      };
      const int32_t m0 = bs.members.front();
      int64_t end = 0;
      // Each member starts where the one before it ends, rounded up to the
      // arena's alignment: the gap between them belongs to the one before
      // (its arena block), so no other buffer can lie there, and a
      // collective over the bucket's span reads and writes only its own.
      auto next = [](int64_t floats) {
        return Arena::roundUp(floats * static_cast<int64_t>(sizeof(float))) /
               static_cast<int64_t>(sizeof(float));
      };
      if (bs.rows) {
        for (int32_t p : bs.members) {
          const int64_t r = rel(p, &mfsdp_param_offsets::master, m0);
          if (r != next(end) || rel(p, &mfsdp_param_offsets::grad_shard, m0) != r)
            return bad("the memory plan does not lay out " + name +
                       "'s masters and reduced gradients in one piece, in order, "
                       "each at the aligned end of the one before, at the same "
                       "distances ('" + params[p].name + "')");
          bs.gaps |= r != end;
          bs.rel.push_back(r);
          end = r + params[p].localSize;
        }
        bs.chunk = end;
        if (bs.stagingAt.gather < 0 || bs.stagingAt.reduce < 0 ||
            (plan.zero >= 3 && bs.stagingAt.gather_backward < 0))
          return bad("the memory plan has no staging buffers for " + name);
      } else {
        bs.counts.assign(S, 0);
        std::vector<int64_t> start(S, -1);
        for (int32_t p : bs.members) {
          const ParamState &ps = params[p];
          const int64_t r = rel(p, &mfsdp_param_offsets::full, m0);
          const int32_t o = ps.desc.owner;
          if (start[o] < 0)
            start[o] = r;
          if (r != next(end) || rel(p, &mfsdp_param_offsets::grad, m0) != r ||
              (plan.zero >= 3 && rel(p, &mfsdp_param_offsets::full_backward, m0) != r))
            return bad("the memory plan does not lay out " + name +
                       "'s gathered copies and gradients in one piece, in owner "
                       "order, each at the aligned end of the one before, at the "
                       "same distances ('" + ps.name + "')");
          end = r + ps.elements();
        }
        // Each owner's span runs from its first member to the next owner's.
        int64_t next = end;
        for (int32_t o = static_cast<int32_t>(S) - 1; o >= 0; --o)
          if (start[o] >= 0) {
            bs.counts[o] = next - start[o];
            next = start[o];
          }
        for (int32_t p : bs.members) {
          const ParamState &ps = params[p];
          const int32_t o = ps.desc.owner;
          int32_t firstOfOwner = -1;
          for (int32_t q : bs.members)
            if (params[q].desc.owner == o) {
              firstOfOwner = q;
              break;
            }
          const int64_t r = rel(p, &mfsdp_param_offsets::full, m0) - start[o];
          if (rel(p, &mfsdp_param_offsets::master, firstOfOwner) != r ||
              rel(p, &mfsdp_param_offsets::grad_shard, firstOfOwner) != r)
            return bad("the memory plan does not lay out owner " + std::to_string(o) +
                       "'s masters and reduced gradients of " + name +
                       " as they lie in its gathered copy ('" + ps.name + "')");
          if (o == shardRank && bs.firstMine < 0)
            bs.firstMine = p;
        }
        bs.mine = bs.counts[shardRank];
      }
      unitBuckets[k.unit].push_back(b);
      buckets.push_back(std::move(bs));
    }
    return MFSDP_OK;
  }


  mfsdp_status fail(mfsdp_status s, std::string message) {
    error = std::move(message);
    return s;
  }
  /// MFSDP_ERROR_INVALID with a message unless `param` indexes the plan.
  mfsdp_status checkParam(int32_t param) {
    if (auto s = usable())
      return s;
    if (param < 0 || static_cast<size_t>(param) >= params.size())
      return fail(MFSDP_ERROR_INVALID,
                  "parameter " + std::to_string(param) + " is out of range");
    return MFSDP_OK;
  }
  /// ns_split (runtime.h): the replica that steps each owned Muon matrix,
  /// the i-th of each owner's (by unit, then table order) on replica
  /// i % R. False when the plan's flag is neither 0 nor 1.
  bool assignNsReplicas() {
    if (plan.ns_split != 0 && plan.ns_split != 1)
      return false;
    if (!plan.ns_split || R < 2)
      return true;
    std::vector<int64_t> held(S, 0);
    for (const std::vector<int32_t> &unit : unitParams)
      for (int32_t p : unit) {
        ParamState &ps = params[p];
        if (ps.desc.placement == MFSDP_OWNER && ps.desc.optimizer == MFSDP_OPT_MUON)
          ps.nsReplica = static_cast<int32_t>(held[ps.desc.owner]++ % R);
      }
    return true;
  }
  /// Whether this rank runs the optimizer step of `ps` (when it keeps any
  /// of it): under ns_split only the owner on the chosen replica does.
  bool stepsHere(const ParamState &ps) const {
    return ps.nsReplica < 0 || ps.nsReplica == replicaRank;
  }
  /// The status of a collective.
  mfsdp_status comm(int code, const char *what) {
    if (code == 0)
      return MFSDP_OK;
    return fail(MFSDP_ERROR_COMM, std::string(what) + ": " + backend->lastError());
  }
  /// The status of any other backend call.
  mfsdp_status device(int code, const std::string &what) {
    if (code == 0)
      return MFSDP_OK;
    return fail(MFSDP_ERROR_BACKEND, what + " on the " + backend->name() +
                                         " backend: " + backend->lastError());
  }
  mfsdp_status allocate(int64_t count, float *&out, const std::string &what) {
    return device(backend->allocate(count, out), "allocating " + what);
  }

  /// What holds arena bytes [lo, hi) of the static plan now (empty if
  /// nothing the engine knows of).
  std::string occupant(int64_t lo, int64_t hi) const {
    auto overlaps = [&](const float *buf, int64_t at, int64_t count) {
      const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
      return buf && at >= 0 && count > 0 && at < hi && lo < at + bytes;
    };
    for (const ParamState &ps : params) {
      const std::string unit = " (unit " + std::to_string(ps.desc.unit) + ")";
      if (overlaps(ps.full, ps.fullAt, ps.fullSize))
        return "the gathered '" + ps.name + "'" + unit;
      if (overlaps(ps.grad, ps.at.grad, ps.fullSize))
        return "the gradient of '" + ps.name + "'" + unit;
      if (overlaps(ps.master, ps.at.master, ps.localSize) ||
          overlaps(ps.m, ps.at.exp_avg, ps.localSize) ||
          overlaps(ps.v, ps.at.exp_avg_sq, ps.localSize) ||
          overlaps(ps.gradShard, ps.at.grad_shard, ps.localSize))
        return "the sharded state of '" + ps.name + "'";
    }
    return "";
  }

  /// `count` floats for `what`: at `offset` of the static plan, else from
  /// the arena. A place still held by another buffer is a hook-order
  /// error naming both.
  mfsdp_status place(int64_t offset, int64_t count, float *&out,
                     const std::string &what) {
    if (!memory || count <= 0)
      return allocate(count, out, what);
    if (offset < 0)
      return fail(MFSDP_ERROR_PLAN, "the library's memory plan has no place for " +
                                        what);
    if (backend->allocateAt(offset, count, out) == 0)
      return MFSDP_OK;
    const std::string reason = backend->lastError();
    const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
    const std::string who = occupant(offset, offset + bytes);
    if (who.empty())
      return fail(MFSDP_ERROR_PLAN, "the library's memory plan does not fit this "
                                    "runtime: no room for " + what + " at arena "
                                    "offset " + std::to_string(offset) + ": " +
                                    reason);
    return fail(MFSDP_ERROR_ORDER,
                "the memory plan puts " + what + " at arena bytes [" +
                    std::to_string(offset) + ", " + std::to_string(offset + bytes) +
                    "), which " + who +
                    " still holds: the plan has one unit's gathered parameters "
                    "and gradients live at a time" +
                    (prefetching() ? std::string(" (and the next unit's gathered "
                                                 "copy, prefetched)")
                                   : std::string()) +
                    ", forward in unit order and "
                    "backward in reverse (finish that unit's hooks first)");
  }
  /// The start of a call that touches buffers the trainer may still be
  /// using: the runtime's work goes after the trainer's.
  /// With `keepReduction` a reduction in flight stays so (the hooks of the
  /// unit before it, whose buffers the memory plan keeps apart from it).
  mfsdp_status enter(bool keepReduction = false) {
    if (auto s = usable())
      return s;
    if (auto s = device(backend->afterTrainer(), "ordering after the trainer's stream"))
      return s;
    // A gather prefetched by the last hook is complete before anything
    // else runs (the collectives of every rank stay in one order).
    mfsdp_status s = completePrefetch();
    if (!keepReduction) {
      mfsdp_status r = completeReduction();
      if (!s)
        s = r;
    }
    return s;
  }
  /// MFSDP_ERROR_INVALID unless mfsdp_create succeeded on this runtime.
  mfsdp_status usable() {
    if (!created)
      return fail(MFSDP_ERROR_INVALID,
                  "this runtime was not created (mfsdp_create failed: " +
                      createError + ")");
    return MFSDP_OK;
  }

  /// The end of a call that hands buffers to the trainer or reads its
  /// writes: everything issued is done.
  mfsdp_status finish() { return device(backend->synchronize(), "synchronize"); }

  /// Gathers `local`, laid out like `ps.master` (this rank's padded rows,
  /// the owned matrix, or the whole tensor), into the whole tensor `full`
  /// (ps.fullSize elements) on every rank of the dp_shard group.
  mfsdp_status gatherWhole(const ParamState &ps, const float *local, float *full) {
    switch (ps.desc.placement) {
    case MFSDP_ROW_SHARD:
      return comm(backend->allGather(Group::Shard, local, full, ps.localSize),
                  "all-gather");
    case MFSDP_OWNER: {
      std::vector<int64_t> counts(S, 0);
      counts[ps.desc.owner] = ps.elements();
      return comm(backend->allGatherV(Group::Shard, ps.ownsAny ? local : nullptr,
                                      full, counts),
                  "all-gather-v");
    }
    case MFSDP_BLOCK_SHARD: {
      // Every rank's packed blocks into a staging buffer, then each block
      // to its place in the whole tensor.
      float *packed = nullptr;
      if (auto s = blockStaging(ps, packed, "gathering"))
        return s;
      mfsdp_status s = gatherPacked(ps, local, packed);
      if (!s)
        s = device(backend->unpackBlocks(packed, full, ps.grid, 0, ps.grid.blocks()),
                   "unpacking the blocks of '" + ps.name + "'");
      backend->release(packed);
      return s;
    }
    default:
      return device(backend->copy(full, local, ps.elements()), "copy");
    }
  }

  /// Block shards: every rank's packed blocks (`local`) concatenated in
  /// packed order (BlockGrid) into `packed` (ps.fullSize floats).
  mfsdp_status gatherPacked(const ParamState &ps, const float *local, float *packed) {
    return comm(backend->allGatherV(Group::Shard, ps.ownsAny ? local : nullptr,
                                    packed, ps.blockCounts),
                "all-gather-v of blocks");
  }

  /// Block shards: a whole-tensor buffer for the packed blocks while a
  /// gather or reduction reorders them (the memory plan's staging place,
  /// else from the arena); released by the caller.
  mfsdp_status blockStaging(const ParamState &ps, float *&out, const char *why) {
    return place(memory ? memory->staging : -1, ps.fullSize, out,
                 std::string("the staging buffer for ") + why + " the blocks of '" +
                     ps.name + "'");
  }

  /// This rank's part of the whole tensor `full` (host memory) into
  /// `local`, laid out like ps.master.
  mfsdp_status scatterWhole(const ParamState &ps, const float *full, float *local) {
    if (ps.localCount == 0)
      return MFSDP_OK;
    if (ps.desc.placement == MFSDP_BLOCK_SHARD) {
      // This rank's blocks, packed on the host.
      std::vector<float> packed(static_cast<size_t>(ps.localCount));
      host::packBlocks(full, packed.data(), ps.grid, ps.grid.firstBlockOf(shardRank),
                       ps.grid.blocksOf(shardRank));
      return device(backend->copyFromHost(local, packed.data(), ps.localCount),
                    "copy from the host");
    }
    const float *from = full;
    if (ps.desc.placement == MFSDP_ROW_SHARD)
      from += shardRank * ps.chunkRows * ps.desc.cols;
    return device(backend->copyFromHost(local, from, ps.localCount),
                  "copy from the host");
  }

  /// The whole tensor laid out like ps.master (`local`) into `full` (host
  /// memory, ps.elements() floats) on every rank. With `fromReplica` >= 0
  /// only that dp_replicate replica's `local` is read (ns_split momentum,
  /// which only the replica that steps the matrix keeps) and broadcast to
  /// the other replicas.
  mfsdp_status storeWhole(const ParamState &ps, const float *local, float *full,
                          int32_t fromReplica = -1) {
    float *whole = nullptr;
    if (auto s = place(memory ? memory->staging : -1, ps.fullSize, whole,
                       "the staging buffer for storing '" + ps.name + "'"))
      return s;
    if (ps.desc.placement == MFSDP_BLOCK_SHARD) {
      // The packed blocks of every rank, put in place on the host (the
      // staging buffer is the only whole-tensor buffer a store takes).
      mfsdp_status s = gatherPacked(ps, local, whole);
      std::vector<float> packed(static_cast<size_t>(ps.fullSize));
      if (!s)
        s = device(backend->copyToHost(packed.data(), whole, ps.fullSize),
                   "copy to the host");
      backend->release(whole);
      if (!s)
        host::unpackBlocks(packed.data(), full, ps.grid, 0, ps.grid.blocks());
      return s;
    }
    mfsdp_status s = fromReplica < 0 || fromReplica == replicaRank
                         ? gatherWhole(ps, local, whole)
                         : MFSDP_OK;
    if (!s && fromReplica >= 0)
      s = comm(backend->broadcast(Group::Replicate, whole, ps.elements(), fromReplica),
               "broadcast over replicas");
    if (!s)
      s = device(backend->copyToHost(full, whole, ps.elements()), "copy to the host");
    backend->release(whole);
    return s;
  }

  /// Gathers a unit's parameters (for its backward: where the memory plan
  /// puts the backward gather).
  mfsdp_status gather(int32_t unit, bool forBackward = false) {
    for (int32_t b : unitBuckets[unit])
      if (!bucketGathered(b))
        if (auto s = gatherBucket(b, forBackward, nullptr))
          return s;
    for (int32_t p : unitParams[unit]) {
      ParamState &ps = params[p];
      if (ps.full || ps.bucket >= 0)
        continue;
      ps.fullAt = forBackward ? ps.at.full_backward : ps.at.full;
      if (auto s = place(ps.fullAt, ps.fullSize, ps.full,
                         "the gathered '" + ps.name + "'" +
                             (forBackward ? " for backward" : "")))
        return s;
      mfsdp_status s = gatherWhole(ps, ps.master, ps.full);
      if (!s && ps.desc.compute_dtype == MFSDP_COMPUTE_BF16)
        s = device(backend->roundToBF16(ps.full, ps.elements()), "bf16 rounding");
      if (s) {
        backend->release(ps.full);
        ps.full = nullptr;
        return s;
      }
    }
    return MFSDP_OK;
  }

  void releaseFull(ParamState &ps) {
    backend->release(ps.full);
    ps.full = nullptr;
  }

  void release(int32_t unit) {
    if (plan.zero < 3)
      return;
    for (int32_t p : unitParams[unit])
      releaseFull(params[p]);
  }

  /// Reduces a unit's gradients into the shards. With `async`, the
  /// dp_shard reduction of every bucket and parameter is started and left
  /// to completeReduction (recorded in reduceStarted), which runs HSDP's
  /// all-reduce over replicas and the scaling once it has landed; block
  /// shards are packed into their gathered copy first (a block shard with
  /// no copy, which a hook protocol kept by the runtime never leaves, is
  /// packed through the shared staging buffer and reduced here).
  mfsdp_status reduce(int32_t unit, bool async = false) {
    const float scale = 1.f / static_cast<float>(S * R);
    for (int32_t b : unitBuckets[unit]) {
      CommHandle handle = 0;
      const bool start = async;
      if (auto s = reduceBucket(b, start ? &handle : nullptr))
        return s;
      if (start) {
        reduceStarted.push_back({-1, b, handle});
        ++work.reduceStarts;
      }
    }
    for (int32_t p : unitParams[unit]) {
      ParamState &ps = params[p];
      if (ps.bucket >= 0)
        continue;
      const int64_t n = ps.elements();
      if (ps.desc.compute_dtype == MFSDP_COMPUTE_BF16)
        if (auto s = device(backend->roundToBF16(ps.grad, n), "bf16 rounding"))
          return s;
      // A block shard's gradient is packed by rank into the unit's gathered
      // copy, which nothing reads once the unit's backward is over and
      // which the memory plan keeps until the reduction's wait (the shared
      // staging buffer is not: the next unit's gather may use it).
      const bool packInCopy = ps.desc.placement == MFSDP_BLOCK_SHARD && ps.full;
      if (async && (ps.desc.placement != MFSDP_BLOCK_SHARD || packInCopy)) {
        CommHandle handle = 0;
        int rc = 0;
        if (packInCopy) {
          if (auto s = device(backend->packBlocks(ps.grad, ps.full, ps.grid, 0,
                                                  ps.grid.blocks()),
                              "packing the blocks of '" + ps.name + "'"))
            return s;
          rc = backend->startReduceScatterV(Group::Shard, ps.full,
                                            ps.ownsAny ? ps.gradShard : nullptr,
                                            ps.blockCounts, handle);
        } else if (ps.desc.placement == MFSDP_ROW_SHARD) {
          rc = backend->startReduceScatter(Group::Shard, ps.grad, ps.gradShard,
                                           ps.localSize, handle);
        } else if (ps.desc.placement == MFSDP_OWNER) {
          std::vector<int64_t> counts(S, 0);
          counts[ps.desc.owner] = n;
          rc = backend->startReduceScatterV(Group::Shard, ps.grad,
                                            ps.ownsAny ? ps.gradShard : nullptr,
                                            counts, handle);
        } else {
          if (auto s = device(backend->copy(ps.gradShard, ps.grad, n), "copy"))
            return s;
          rc = backend->startAllReduce(Group::Shard, ps.gradShard, n, handle);
        }
        if (auto s = comm(rc, "starting the reduction"))
          return s;
        reduceStarted.push_back({p, -1, handle});
        ++work.reduceStarts;
        continue;
      }
      switch (ps.desc.placement) {
      case MFSDP_ROW_SHARD:
        // grad is padded with zeros to S whole chunks.
        if (auto s = comm(backend->reduceScatter(Group::Shard, ps.grad,
                                                 ps.gradShard, ps.localSize),
                          "reduce-scatter"))
          return s;
        break;
      case MFSDP_OWNER: {
        std::vector<int64_t> counts(S, 0);
        counts[ps.desc.owner] = n;
        if (auto s = comm(backend->reduceScatterV(Group::Shard, ps.grad,
                                                  ps.ownsAny ? ps.gradShard : nullptr,
                                                  counts),
                          "reduce-scatter-v"))
          return s;
        break;
      }
      case MFSDP_BLOCK_SHARD: {
        // The whole gradient packed by rank, then each rank's blocks
        // reduced to it.
        float *packed = nullptr;
        if (auto s = blockStaging(ps, packed, "reducing"))
          return s;
        mfsdp_status s =
            device(backend->packBlocks(ps.grad, packed, ps.grid, 0, ps.grid.blocks()),
                   "packing the blocks of '" + ps.name + "'");
        if (!s)
          s = comm(backend->reduceScatterV(Group::Shard, packed,
                                           ps.ownsAny ? ps.gradShard : nullptr,
                                           ps.blockCounts),
                   "reduce-scatter-v of blocks");
        backend->release(packed);
        if (s)
          return s;
        break;
      }
      default:
        // Reduced in the shard buffer, so the trainer's gradient (kept for
        // accumulation) is never summed twice.
        if (auto s = device(backend->copy(ps.gradShard, ps.grad, n), "copy"))
          return s;
        if (auto s = comm(backend->allReduce(Group::Shard, ps.gradShard, n),
                          "all-reduce"))
          return s;
      }
      if (R > 1) {
        // Every rank calls it, with nothing when it keeps nothing.
        if (auto s = comm(backend->allReduce(Group::Replicate, ps.gradShard,
                                             ps.localCount),
                          "all-reduce over replicas"))
          return s;
      }
      if (auto s = device(backend->scale(ps.gradShard, ps.localCount, scale),
                          "scaling"))
        return s;
      ps.gradReduced = true;
    }
    return MFSDP_OK;
  }

  /// The sizes of a parameter's buffers on this rank, and whether the plan
  /// entry is one the engine can run.
  bool layOut(ParamState &ps) {
    const mfsdp_param_desc &d = ps.desc;
    if (d.unit < 0 || d.unit >= plan.num_units || d.rows < 1 || d.cols < 1 ||
        d.placement < MFSDP_ROW_SHARD || d.placement > MFSDP_BLOCK_SHARD ||
        (d.placement == MFSDP_OWNER && (d.owner < 0 || d.owner >= plan.dp_shard)) ||
        (d.optimizer == MFSDP_OPT_MUON && d.placement != MFSDP_OWNER &&
         d.placement != MFSDP_REPLICATE) ||
        (d.compute_dtype != MFSDP_COMPUTE_F32 && d.compute_dtype != MFSDP_COMPUTE_BF16) ||
        !blockProblem(d).empty())
      return false;
    const int64_t cols = d.cols;
    switch (d.placement) {
    case MFSDP_ROW_SHARD:
      ps.chunkRows = (d.rows + S - 1) / S;
      ps.localRows = std::clamp<int64_t>(d.rows - shardRank * ps.chunkRows, 0,
                                         ps.chunkRows);
      ps.ownsAny = ps.localRows > 0;
      ps.localCount = ps.localRows * cols;
      ps.localSize = ps.chunkRows * cols; // every rank sends a whole chunk
      ps.fullSize = ps.localSize * S;
      break;
    case MFSDP_OWNER:
      ps.ownsAny = d.owner == shardRank;
      ps.localCount = ps.localSize = ps.ownsAny ? ps.elements() : 0;
      ps.fullSize = ps.elements();
      break;
    case MFSDP_BLOCK_SHARD:
      // This rank's blocks, packed; no padding (ranks may keep unequal
      // numbers of blocks, or none).
      ps.grid = BlockGrid{d.rows, cols, d.block_rows, d.block_cols, S};
      ps.localCount = ps.localSize = ps.grid.blocksOf(shardRank) * ps.grid.blockElems();
      ps.ownsAny = ps.localCount > 0;
      ps.fullSize = ps.elements();
      for (int64_t r = 0; r < S; ++r)
        ps.blockCounts.push_back(ps.grid.blocksOf(r) * ps.grid.blockElems());
      break;
    default:
      ps.ownsAny = true;
      ps.localCount = ps.localSize = ps.fullSize = ps.elements();
    }
    return true;
  }

  /// Bytes of the arena: every buffer the engine can hold at once (all
  /// units gathered, one more gathered copy for a store, the Muon scratch).
  int64_t arenaBytes() const {
    auto bytes = [](int64_t count) {
      return Arena::roundUp(count * static_cast<int64_t>(sizeof(float)));
    };
    int64_t total = 0, largestFull = 0, scratch = 0, largestBlocks = 0;
    for (const ParamState &ps : params) {
      total += bytes(ps.localSize) * (2 + (ps.desc.optimizer != MFSDP_OPT_NONE) +
                                      (ps.desc.optimizer == MFSDP_OPT_ADAMW));
      total += bytes(ps.fullSize) * 2;
      largestFull = std::max(largestFull, ps.fullSize);
      if (ps.desc.placement == MFSDP_BLOCK_SHARD) // its staging buffer
        largestBlocks = std::max(largestBlocks, ps.fullSize);
      if (ps.ownsAny && ps.desc.optimizer == MFSDP_OPT_MUON)
        scratch = std::max(scratch, backend->muonScratch(ps.desc.rows, ps.desc.cols));
    }
    return total + bytes(largestFull) + bytes(largestBlocks) + bytes(scratch);
  }

  /// Whether gradient buffers live for the whole run (no static plan, or
  /// one that keeps them for no-sync accumulation).
  bool gradsKept() const { return !memory || memory->keep_grads; }

  /// A unit's gradient buffers, zeroed, when the plan keeps them only
  /// during its backward.
  mfsdp_status placeGrads(int32_t unit) {
    if (gradsKept())
      return MFSDP_OK;
    for (int32_t p : unitParams[unit])
      if (params[p].gradReduced)
        // The freed gradient cannot be added to: a second backward would
        // replace the reduced gradient instead of adding to it.
        return fail(MFSDP_ERROR_ORDER,
                    "the gradients of unit " + std::to_string(unit) +
                        " were already reduced in this step, and this "
                        "library's memory plan frees them after the "
                        "reduction: call zero_grad (after optimizer_step) "
                        "before the next backward, or accumulate microbatches "
                        "with no-sync in a library built with --accumulate");
    for (int32_t p : unitParams[unit]) {
      ParamState &ps = params[p];
      if (ps.grad)
        continue;
      if (auto s = place(ps.at.grad, ps.fullSize, ps.grad,
                         "the gradient of '" + ps.name + "'"))
        return s;
      if (auto s = device(backend->zero(ps.grad, ps.fullSize), "zero-fill")) {
        backend->release(ps.grad);
        ps.grad = nullptr;
        return s;
      }
    }
    return MFSDP_OK;
  }

  /// Frees a unit's gradient buffers after their reduction (plans that do
  /// not keep them).
  void releaseGrads(int32_t unit) {
    if (gradsKept())
      return;
    for (int32_t p : unitParams[unit]) {
      ParamState &ps = params[p];
      backend->release(ps.grad);
      ps.grad = nullptr;
      ps.gradLive = false;
    }
  }

  /// The buffers a parameter keeps for the whole run, zeroed.
  mfsdp_status allocateKept(ParamState &ps) {
    const int32_t opt = ps.desc.optimizer;
    struct Kept {
      float *&buf;
      int64_t count;
      const char *what;
      int64_t offset;
    } kept[] = {
        {ps.master, ps.localSize, "master", ps.at.master},
        {ps.m, opt != MFSDP_OPT_NONE ? ps.localSize : 0, "exp_avg", ps.at.exp_avg},
        {ps.v, opt == MFSDP_OPT_ADAMW ? ps.localSize : 0, "exp_avg_sq",
         ps.at.exp_avg_sq},
        {ps.gradShard, ps.localSize, "reduced gradient", ps.at.grad_shard},
        // Gradients the plan does not keep live from pre_backward to
        // post_backward only.
        {ps.grad, gradsKept() ? ps.fullSize : 0, "gradient", ps.at.grad},
    };
    for (Kept &k : kept) {
      if (auto s = place(k.offset, k.count, k.buf,
                         std::string("the ") + k.what + " of '" + ps.name + "'"))
        return s;
      if (auto s = device(backend->zero(k.buf, k.count), "zero-fill"))
        return s;
    }
    return MFSDP_OK;
  }
};


namespace {

/// The mesh the runtime forms its groups on: the plan's (a missing
/// dp_shard or dp_replicate dim added with size 1), or without one
/// [other, dp_replicate, dp_shard], the rest of the world outermost.
/// Empty with `error` when the plan's mesh is malformed or its product is
/// not `world`.
std::vector<MeshDimSpec> planMesh(const mfsdp_plan &plan, int world,
                                  std::string &error) {
  std::vector<MeshDimSpec> mesh;
  const int64_t dp = static_cast<int64_t>(plan.dp_shard) * plan.dp_replicate;
  if (plan.num_mesh_dims == 0 && !plan.mesh_dims) {
    if (dp < 1 || world % dp != 0) {
      error = "invalid plan: dp_shard x dp_replicate (" + std::to_string(dp) +
              ") does not divide the world (" + std::to_string(world) + ")";
      return {};
    }
    return {{"other", world / dp},
            {"dp_replicate", plan.dp_replicate},
            {"dp_shard", plan.dp_shard}};
  }
  if (plan.num_mesh_dims < 1 || plan.num_mesh_dims > 64 || !plan.mesh_dims) {
    error = "invalid plan: " + std::to_string(plan.num_mesh_dims) +
            " mesh dims" + (plan.mesh_dims ? "" : " and no mesh_dims table") +
            "; expected 1 to 64 dims in mesh_dims, or 0 and NULL";
    return {};
  }
  int64_t product = 1;
  bool haveShard = false, haveReplicate = false;
  std::string text;
  for (int32_t i = 0; i < plan.num_mesh_dims; ++i) {
    const mfsdp_mesh_dim &d = plan.mesh_dims[i];
    const std::string name = d.name ? d.name : "";
    text += (i ? "," : "") + name + "=" + std::to_string(d.size);
    if (name.empty() || d.size < 1) {
      error = "invalid plan: mesh dim " + std::to_string(i) +
              " has no name or a size below 1";
      return {};
    }
    for (const MeshDimSpec &seen : mesh)
      if (seen.name == name) {
        error = "invalid plan: the mesh names dim '" + name + "' twice";
        return {};
      }
    const int32_t want = name == "dp_shard"       ? plan.dp_shard
                         : name == "dp_replicate" ? plan.dp_replicate
                                                  : d.size;
    if (d.size != want) {
      error = "invalid plan: the mesh's '" + name + "' has size " +
              std::to_string(d.size) + " but the plan's " + name + " is " +
              std::to_string(want);
      return {};
    }
    haveShard |= name == "dp_shard";
    haveReplicate |= name == "dp_replicate";
    product *= d.size;
    if (product > world)
      break;
    mesh.push_back({name, d.size});
  }
  if (product != world) {
    error = "invalid plan: the mesh " + text + " has " +
            (product > world ? "more than " + std::to_string(world)
                             : std::to_string(product)) +
            " ranks, but the world is " + std::to_string(world);
    return {};
  }
  if ((!haveShard && plan.dp_shard != 1) || (!haveReplicate && plan.dp_replicate != 1)) {
    error = "invalid plan: the mesh " + text + " has no dp_shard or "
            "dp_replicate dim, but the plan's is larger than 1";
    return {};
  }
  // Size-1 dims change no rank's coordinates; the groups need both names.
  if (!haveReplicate)
    mesh.push_back({"dp_replicate", 1});
  if (!haveShard)
    mesh.push_back({"dp_shard", 1});
  return mesh;
}

} // namespace

extern "C" {

uint64_t mfsdp_plan_hash(const mfsdp_plan *p) {
  return p ? mfsdp::runtime::planHash(*p) : 0;
}

mfsdp_status mfsdp_create(const mfsdp_plan *plan, mfsdp_step **out) {
  return mfsdp_create_with_config(plan, nullptr, out);
}

static mfsdp_status createRuntime(const mfsdp_plan *plan,
                                  const mfsdp_config *config,
                                  mfsdp_step **out) {
  if (!plan || !out)
    return MFSDP_ERROR_INVALID;
  *out = nullptr;
  auto step = std::make_unique<mfsdp_step>();
  step->plan = *plan;
  // Every failure below is returned with the runtime, for its message.
  auto failed = [&](mfsdp_status s, std::string message) {
    step->error = std::move(message);
    step->createError = step->error;
    *out = step.release();
    return s;
  };
  const int32_t choice = config ? config->backend : MFSDP_BACKEND_HOST;
  const int32_t bootstrap = config ? config->bootstrap : MFSDP_BOOTSTRAP_MPI;
  // The world and the agreements below: MPI, or the torchrun variables
  // and TCP through rank 0 (ControlPlane.h).
  std::unique_ptr<ControlPlane> control;
  int timeoutMs = 0; // torchrun: each wait of the bootstrap
  if (bootstrap == MFSDP_BOOTSTRAP_MPI) {
    control.reset(createMpiControlPlane());
    if (!control)
      return failed(MFSDP_ERROR_INVALID,
                    "MPI is not initialized: call MPI_Init before mfsdp_create "
                    "(or, under torchrun, set mfsdp_config.bootstrap to "
                    "MFSDP_BOOTSTRAP_TORCHRUN)");
  } else if (bootstrap == MFSDP_BOOTSTRAP_TORCHRUN) {
    if (config->bootstrap_timeout_ms < 0)
      return failed(MFSDP_ERROR_INVALID,
                    "bootstrap_timeout_ms is " +
                        std::to_string(config->bootstrap_timeout_ms) +
                        " in mfsdp_config; expected milliseconds > 0, or 0 for "
                        "the default");
    timeoutMs = config->bootstrap_timeout_ms ? config->bootstrap_timeout_ms
                                             : MFSDP_BOOTSTRAP_TIMEOUT_MS_DEFAULT;
    RankEnv env;
    std::string error;
    if (!readRankEnv(processEnvironment(), env, error))
      return failed(MFSDP_ERROR_INVALID, "the torchrun bootstrap: " + error);
    control.reset(createTorchrunControlPlane(env, timeoutMs, error));
    if (!control)
      return failed(MFSDP_ERROR_COMM, "the torchrun bootstrap: " + error);
  } else {
    return failed(MFSDP_ERROR_INVALID,
                  "unknown bootstrap " + std::to_string(bootstrap) +
                      " in mfsdp_config: expected MFSDP_BOOTSTRAP_MPI (0) or "
                      "MFSDP_BOOTSTRAP_TORCHRUN (1)");
  }
  const bool torchrun = bootstrap == MFSDP_BOOTSTRAP_TORCHRUN;
  const int world = control->world();
  // The checks that need no communicator, then the ranks agree: every rank
  // goes on with the same plan and backend, or none does (a rank left
  // alone would wait in the first collective).
  mfsdp_status local = MFSDP_OK;
  if (choice != MFSDP_BACKEND_HOST && choice != MFSDP_BACKEND_CUDA)
    local = step->fail(MFSDP_ERROR_INVALID,
                       "unknown backend " + std::to_string(choice) +
                           " in mfsdp_config: expected MFSDP_BACKEND_HOST (0) or "
                           "MFSDP_BACKEND_CUDA (1)");
  else if (torchrun && choice == MFSDP_BACKEND_HOST && !hasGloo())
    local = step->fail(MFSDP_ERROR_INVALID,
                       "this libmfsdp_rt was built without gloo (libgloo-dev), "
                       "which the host backend's collectives need under the "
                       "torchrun bootstrap (MFSDP_BOOTSTRAP_TORCHRUN): ask for "
                       "the CUDA backend (MFSDP_BACKEND_CUDA), or start the "
                       "job with mpirun and the MPI bootstrap");
  else if (mfsdp_plan_hash(plan) != plan->hash)
    local = step->fail(MFSDP_ERROR_PLAN,
                       "the plan's hash does not match its contents: the plan is "
                       "corrupt or was written by another compiler version");
  else if (world != plan->world)
    local = step->fail(MFSDP_ERROR_PLAN, "this library was built for a plan of " +
                                             std::to_string(plan->world) +
                                             " ranks, but " +
                                             (torchrun ? "WORLD_SIZE is "
                                                       : "MPI runs ") +
                                             std::to_string(world));
  else if (plan->zero < 1 || plan->zero > 3 || plan->dp_shard < 1 ||
           plan->dp_replicate < 1 || plan->num_params < 0 || plan->num_units < 0)
    local = step->fail(MFSDP_ERROR_PLAN, "invalid plan: zero, dp_shard, "
                                         "dp_replicate or counts out of range");
  // The mesh as the runtime sees it (the plan's, or the rest of the world
  // outermost); the dp_shard and dp_replicate groups follow its layout.
  std::vector<MeshDimSpec> mesh;
  if (local == MFSDP_OK) {
    std::string error;
    mesh = planMesh(*plan, world, error);
    if (mesh.empty())
      local = step->fail(MFSDP_ERROR_PLAN, error);
  }
  {
    // Status (max), and the plan hash and backend, which must be equal
    // everywhere (min = max).
    const uint64_t h = plan->hash;
    const std::vector<int64_t> mine = {static_cast<int64_t>(local),
                                       static_cast<int64_t>(h >> 32),
                                       static_cast<int64_t>(h & 0xffffffffu), choice};
    std::vector<int64_t> lo, hi;
    std::string error;
    if (!control->minMax(mine, lo, hi, error))
      return failed(MFSDP_ERROR_COMM, error + " while the ranks compared their plans");
    if (local != MFSDP_OK)
      return failed(local, step->error);
    if (hi[0] != MFSDP_OK)
      return failed(static_cast<mfsdp_status>(hi[0]),
                    "another rank refused the plan or its config (its "
                    "mfsdp_last_error says why)");
    if (lo[1] != hi[1] || lo[2] != hi[2])
      return failed(MFSDP_ERROR_PLAN, "the ranks passed different plans (their "
                                      "hashes differ): every rank must load the "
                                      "same step library");
    if (lo[3] != hi[3])
      return failed(MFSDP_ERROR_INVALID, "the ranks asked for different backends "
                                         "in mfsdp_config");
  }
  BackendOptions options;
  options.mesh = std::move(mesh);
  options.trainerStream = config ? config->cuda_stream : nullptr;
  options.control = control.get();
  options.timeoutMs = timeoutMs;
  std::string error;
  mfsdp_status s = MFSDP_OK;
  if (choice == MFSDP_BACKEND_CUDA) {
    step->backend.reset(loadCudaBackend(options, error));
    if (!step->backend)
      s = step->fail(MFSDP_ERROR_BACKEND, error);
  } else {
    step->backend.reset(createHostBackend(options, error));
    if (!step->backend)
      s = step->fail(MFSDP_ERROR_COMM, "cannot create communicators: " + error);
  }
  // Rank-dependent checks and the buffers: failures are collected, so the
  // ranks still agree below.
  auto layOutAll = [&]() -> mfsdp_status {
    step->S = plan->dp_shard;
    step->R = plan->dp_replicate;
    step->shardRank = step->backend->rank(Group::Shard);
    if (const mfsdp_memory_plan *m = plan->memory) {
      if (m->num_shard_ranks != plan->dp_shard || !m->arena_bytes ||
          (plan->num_params > 0 && !m->params) ||
          (m->keep_grads != 0 && m->keep_grads != 1) ||
          (m->prefetch != 0 && m->prefetch != 1) ||
          m->arena_bytes[step->shardRank] < 0)
        return step->fail(MFSDP_ERROR_PLAN,
                      "invalid memory plan: it must have one arena size per "
                      "dp_shard rank (" + std::to_string(plan->dp_shard) +
                          "), one entry per parameter, keep_grads 0 or 1 and "
                          "prefetch 0 or 1");
      step->memory = m;
    }
    step->unitParams.resize(plan->num_units);
    step->state.assign(plan->num_units, UnitState::Idle);
    step->reduced.assign(plan->num_units, false);
    step->reducedBeforeForward.assign(plan->num_units, false);
    for (int32_t i = 0; i < plan->num_params; ++i) {
      ParamState ps;
      ps.desc = plan->params[i];
      ps.name = ps.desc.name ? ps.desc.name : ("param " + std::to_string(i));
      ps.hparams = planHparams(*plan, ps.desc.optimizer);
      if (!step->layOut(ps)) {
        const std::string why = blockProblem(ps.desc);
        return step->fail(MFSDP_ERROR_PLAN, "invalid plan entry for parameter '" +
                                            ps.name + "'" + (why.empty() ? "" : ": ") +
                                            why);
      }
      if (step->memory) {
        // The compiler sized the plan's buffers with BufferSizes.h; this
        // runtime's layout must agree, or offsets would overlap.
        const BufferFloats want = bufferFloats(ps.desc, plan->dp_shard, step->shardRank);
        if (want.master != ps.localSize || want.full != ps.fullSize)
          return step->fail(MFSDP_ERROR_PLAN,
                        "the library's memory plan sizes '" + ps.name + "' as " +
                            std::to_string(want.master) + " local and " +
                            std::to_string(want.full) + " whole floats, this "
                            "runtime as " + std::to_string(ps.localSize) + " and " +
                            std::to_string(ps.fullSize));
        ps.at = step->memory->params[i];
      }
      step->unitParams[ps.desc.unit].push_back(i);
      step->params.push_back(std::move(ps));
    }
    if (auto st = step->layOutBuckets())
      return st;
    step->replicaRank = step->backend->rank(Group::Replicate);
    if (!step->assignNsReplicas())
      return step->fail(MFSDP_ERROR_PLAN, "invalid plan: ns_split is " +
                                          std::to_string(plan->ns_split) +
                                          "; expected 0 or 1");
    return MFSDP_OK;
  };
  // A rank without a backend still joins the agreement at the end.
  if (!s)
    s = layOutAll();
  int64_t scratch = 0;
  for (ParamState &ps : step->params)
    if (ps.ownsAny && ps.desc.optimizer == MFSDP_OPT_MUON)
      scratch = std::max(scratch, step->backend->muonScratch(ps.desc.rows, ps.desc.cols));
  // With a static plan: its arena, then the backend's Muon scratch after
  // it (its size depends on the backend). Without: every buffer at once.
  const int64_t planned =
      step->memory ? Arena::roundUp(step->memory->arena_bytes[step->shardRank]) : 0;
  const int64_t bytes =
      step->memory
          ? planned + Arena::roundUp(scratch * static_cast<int64_t>(sizeof(float)))
          : step->arenaBytes();
  if (!s && step->backend->reserve(bytes))
    s = step->fail(MFSDP_ERROR_BACKEND,
                   "cannot reserve the arena of " + std::to_string(bytes) +
                       " bytes on the " + step->backend->name() +
                       " backend: " + step->backend->lastError());
  for (size_t i = 0; !s && i < step->params.size(); ++i)
    s = step->allocateKept(step->params[i]);
  if (!s)
    s = step->memory
            ? step->device(step->backend->allocateAt(planned, scratch, step->muonScratch),
                           "placing the Muon scratch")
            : step->allocate(scratch, step->muonScratch, "the Muon scratch");
  if (!s)
    s = step->finish();
  // Every rank goes on or none does: a rank whose buffers did not fit
  // would leave the others waiting in their first collective.
  std::vector<int64_t> lo, hi;
  if (!control->minMax({static_cast<int64_t>(s)}, lo, hi, error))
    s = step->fail(MFSDP_ERROR_COMM,
                   error + " while the ranks agreed that mfsdp_create succeeded");
  else if (!s && hi[0] != MFSDP_OK)
    s = step->fail(static_cast<mfsdp_status>(hi[0]),
                   "another rank could not create its runtime (its "
                   "mfsdp_last_error says why)");
  step->created = s == MFSDP_OK;
  if (!step->created)
    step->createError = step->error;
  *out = step.release();
  return s;
}

mfsdp_status mfsdp_create_with_config(const mfsdp_plan *plan,
                                      const mfsdp_config *config,
                                      mfsdp_step **out) {
  // Nothing may escape the C ABI: an exception (a plan too large for host
  // memory, say) becomes a status and a message.
  try {
    return createRuntime(plan, config, out);
  } catch (const std::exception &e) {
    if (!out)
      return MFSDP_ERROR_BACKEND;
    auto *failed = new (std::nothrow) mfsdp_step();
    if (failed) {
      failed->error = failed->createError =
          std::string("mfsdp_create failed: ") + e.what();
    }
    *out = failed;
    return MFSDP_ERROR_BACKEND;
  }
}

void mfsdp_destroy(mfsdp_step *step) { delete step; }

const char *mfsdp_last_error(mfsdp_step *step) {
  return step ? step->error.c_str() : "no runtime (mfsdp_create failed to allocate)";
}

/// The start of a hook: a runtime, a unit in range, and the runtime's work
/// ordered after the trainer's.
// `keep`: a reduction in flight stays so (see mfsdp_step::enter).
#define ENTER_UNIT(step, unit, keep)                                            \
  do {                                                                          \
    if (!(step))                                                                \
      return MFSDP_ERROR_INVALID;                                               \
    if ((unit) < 0 || (unit) >= (step)->plan.num_units)                         \
      return (step)->fail(MFSDP_ERROR_INVALID,                                  \
                          "unit " + std::to_string(unit) + " is out of range [0, " + \
                              std::to_string((step)->plan.num_units) + ")");    \
    if (auto entered = (step)->enter(keep))                                     \
      return entered;                                                           \
  } while (0)

mfsdp_status mfsdp_pre_forward(mfsdp_step *step, int32_t unit) {
  ENTER_UNIT(step, unit, step->keepsReductionFor(unit, UnitState::Backward));
  UnitState &s = step->state[unit];
  if (s == UnitState::Forward || s == UnitState::ForwardDone)
    return step->fail(MFSDP_ERROR_ORDER,
                      "pre_forward of unit " + std::to_string(unit) +
                          " called again before its backward");
  // During backward this is activation-checkpoint recomputation (unit
  // already gathered, by pre_backward).
  const bool recomputing = s == UnitState::Backward;
  if (auto st = step->gather(unit, recomputing))
    return st;
  s = recomputing ? UnitState::Backward : UnitState::Forward;
  if (!recomputing)
    step->reducedBeforeForward[unit] = step->reduced[unit];
  step->reduced[unit] = false;
  // Prefetch: the next unit's gather runs while the trainer computes this
  // one (waited for by the next call).
  if (!recomputing && unit + 1 < step->plan.num_units &&
      step->state[unit + 1] == UnitState::Idle)
    if (auto st = step->startPrefetch(unit + 1, false))
      return st;
  return step->finish();
}

mfsdp_status mfsdp_post_forward(mfsdp_step *step, int32_t unit) {
  ENTER_UNIT(step, unit, step->keepsReductionFor(unit, UnitState::Backward));
  UnitState &s = step->state[unit];
  if (s == UnitState::Backward)
    return MFSDP_OK; // end of a recomputation: keep the gathered parameters
  if (s != UnitState::Forward)
    return step->fail(MFSDP_ERROR_ORDER, "post_forward of unit " +
                                             std::to_string(unit) +
                                             " without its pre_forward");
  step->release(unit);
  s = UnitState::ForwardDone;
  return MFSDP_OK;
}

mfsdp_status mfsdp_end_forward(mfsdp_step *step, int32_t unit) {
  ENTER_UNIT(step, unit, step->keepsReductionFor(unit, UnitState::Backward));
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
  s = UnitState::Idle;
  step->reduced[unit] = step->reducedBeforeForward[unit];
  return step->finish();
}

mfsdp_status mfsdp_pre_backward(mfsdp_step *step, int32_t unit) {
  ENTER_UNIT(step, unit, step->keepsReductionFor(unit, UnitState::ForwardDone));
  UnitState &s = step->state[unit];
  if (s != UnitState::ForwardDone)
    return step->fail(MFSDP_ERROR_ORDER,
                      "pre_backward of unit " + std::to_string(unit) +
                          " before its forward finished (post_forward)");
  if (auto st = step->gather(unit, true))
    return st;
  // The gradient buffers are zero from mfsdp_create or the last zero_grad,
  // or placed and zeroed now when the memory plan keeps them only during
  // the unit's backward.
  if (auto st = step->placeGrads(unit))
    return st;
  for (int32_t p : step->unitParams[unit])
    step->params[p].gradLive = true;
  s = UnitState::Backward;
  // Prefetch: the backward gather of the unit before runs while the
  // trainer computes this one's backward.
  if (unit > 0 && step->state[unit - 1] == UnitState::ForwardDone)
    if (auto st = step->startPrefetch(unit - 1, true))
      return st;
  return step->finish();
}

mfsdp_status mfsdp_post_backward(mfsdp_step *step, int32_t unit) {
  ENTER_UNIT(step, unit, false);
  UnitState &s = step->state[unit];
  if (s != UnitState::Backward)
    return step->fail(MFSDP_ERROR_ORDER, "post_backward of unit " +
                                             std::to_string(unit) +
                                             " without its pre_backward");
  if (!step->noSync) {
    // Overlap: this unit's reductions run during the previous unit's
    // backward; its gathered copy and gradients are released when they
    // are waited for (completeReduction).
    const bool overlap = step->overlapping();
    if (auto st = step->reduce(unit, overlap)) {
      const std::string why = step->error;
      step->completeReduction(); // waits for what was started (reduceUnit -1)
      step->error = why;
      return st;
    }
    if (overlap) {
      step->reduceUnit = unit;
      s = UnitState::Idle;
      return step->finish();
    }
    step->markReduced(unit);
  }
  step->release(unit);
  step->releaseGrads(unit);
  s = UnitState::Idle;
  // The trainer adds into the gradient buffers next: the reduction that
  // reads them is done first.
  return step->finish();
}

mfsdp_status mfsdp_set_no_sync(mfsdp_step *step, int32_t noSync) {
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
}

mfsdp_status mfsdp_zero_grad(mfsdp_step *step) {
  if (!step)
    return MFSDP_ERROR_INVALID;
  if (auto st = step->enter())
    return st;
  for (ParamState &ps : step->params) {
    if (ps.gradLive)
      if (auto s = step->device(step->backend->zero(ps.grad, ps.fullSize), "zero-fill"))
        return s;
    ps.gradReduced = false;
  }
  std::fill(step->reduced.begin(), step->reduced.end(), false);
  return step->finish();
}

mfsdp_status mfsdp_optimizer_step(mfsdp_step *step) {
  if (!step)
    return MFSDP_ERROR_INVALID;
  if (auto st = step->enter())
    return st;
  if (auto st = step->checkReduced("optimizer_step"))
    return st;
  // The reduced gradients are consumed from here on, even if a kernel
  // fails below: a second step would move what was stepped again.
  step->stepped = true;
  ++step->steps;
  const mfsdp_plan &p = step->plan;
  Backend &b = *step->backend;
  for (ParamState &ps : step->params) {
    if (!ps.ownsAny || ps.desc.optimizer == MFSDP_OPT_NONE)
      continue;
    if (!ps.gradReduced)
      return step->fail(MFSDP_ERROR_ORDER, "parameter '" + ps.name +
                                               "' has no reduced gradient");
    if (!step->stepsHere(ps))
      continue; // ns_split: another replica steps it and sends the result
    const int64_t n = ps.localCount;
    int rc = 0;
    switch (ps.desc.optimizer) {
    case MFSDP_OPT_ADAMW:
      rc = b.adamwStep(ps.master, ps.gradShard, ps.m, ps.v, n, adamwHyper(ps.hparams),
                       step->steps);
      break;
    case MFSDP_OPT_SGD:
      rc = b.sgdStep(ps.master, ps.gradShard, ps.m, n, sgdHyper(ps.hparams), step->steps);
      break;
    case MFSDP_OPT_MUON:
      rc = b.muonStep(ps.master, ps.gradShard, ps.m, ps.desc.rows, ps.desc.cols,
                      muonHyper(ps.hparams), step->muonScratch);
      ++step->work.muonSteps;
      break;
    default:
      break;
    }
    if (auto s = step->device(rc, "the optimizer step of '" + ps.name + "'"))
      return s;
  }
  // ns_split: every replica has stepped its share of the owned matrices;
  // now each updated master goes from its replica to the same owner on
  // the others (in table order on every rank), all of them issued
  // together so their latencies overlap.
  std::vector<ParamState *> split;
  std::vector<BroadcastPart> updates;
  for (ParamState &ps : step->params)
    if (ps.ownsAny && ps.nsReplica >= 0) {
      split.push_back(&ps);
      updates.push_back({ps.master, ps.localCount, ps.nsReplica});
    }
  if (!updates.empty()) {
    if (auto s = step->comm(b.broadcastMany(Group::Replicate, updates),
                            ("the broadcasts of " + std::to_string(updates.size()) +
                             " updated matrices over replicas")
                                .c_str()))
      return s;
    ++step->work.nsSplitBroadcastCalls;
  }
  for (ParamState *ps : split)
    ++(step->stepsHere(*ps) ? step->work.nsSplitSends : step->work.nsSplitReceives);
  // Gathered copies are stale now: ZeRO-1/2 keep parameters whole, so
  // gather the updated ones; ZeRO-3 gathers at the next use.
  for (ParamState &ps : step->params)
    step->releaseFull(ps);
  if (p.zero < 3)
    for (int32_t u = 0; u < p.num_units; ++u)
      if (auto st = step->gather(u))
        return st;
  return step->finish();
}

mfsdp_status mfsdp_clip_grad_norm(mfsdp_step *step, double max_norm, double extra_sq,
                                  double *total_norm) {
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
  float *buf = grad ? (ps.gradLive ? ps.grad : nullptr) : ps.full;
  if (!buf)
    return step->fail(MFSDP_ERROR_ORDER,
                      std::string(grad ? "the gradient of '" : "parameter '") +
                          ps.name + "' is not available: call " +
                          (grad ? "pre_backward" : "pre_forward or pre_backward") +
                          " of unit " + std::to_string(ps.desc.unit) + " first");
  std::memset(out, 0, sizeof(*out));
  out->data = buf;
  out->device = step->backend->device();
  out->dtype = {kDLFloat, 32, 1};
  // rows and cols are adjacent int64_t fields of the descriptor, so they
  // serve as the shape array (rows alone for a 1-D tensor).
  out->ndim = ps.desc.cols == 1 ? 1 : 2;
  out->shape = &ps.desc.rows;
  out->strides = nullptr;
  out->byte_offset = 0;
  return MFSDP_OK;
}

mfsdp_status mfsdp_param_view(mfsdp_step *step, int32_t param, DLTensor *out) {
  return view(step, param, out, false);
}

mfsdp_status mfsdp_grad_view(mfsdp_step *step, int32_t param, DLTensor *out) {
  return view(step, param, out, true);
}

mfsdp_status mfsdp_load_param(mfsdp_step *step, int32_t param, const float *full) {
  if (!step || !full)
    return MFSDP_ERROR_INVALID;
  if (auto st = step->enter())
    return st;
  if (auto st = step->checkParam(param))
    return st;
  ParamState &ps = step->params[param];
  if (auto st = step->scatterWhole(ps, full, ps.master))
    return st;
  step->releaseFull(ps);
  if (step->plan.zero < 3)
    if (auto st = step->gather(ps.desc.unit))
      return st;
  return step->finish();
}

mfsdp_status mfsdp_store_param(mfsdp_step *step, int32_t param, float *full) {
  if (!step || !full)
    return MFSDP_ERROR_INVALID;
  if (auto st = step->enter())
    return st;
  if (auto st = step->checkParam(param))
    return st;
  // The fp32 masters, whole (not the compute copy, which may be bf16).
  return step->storeWhole(step->params[param], step->params[param].master, full);
}

static mfsdp_status stateOf(mfsdp_step *step, int32_t param, int32_t which,
                            float *&state) {
  if (auto st = step->checkParam(param))
    return st;
  ParamState &ps = step->params[param];
  const int32_t opt = ps.desc.optimizer;
  if (which == MFSDP_STATE_EXP_AVG && opt != MFSDP_OPT_NONE) {
    state = ps.m;
    return MFSDP_OK;
  }
  if (which == MFSDP_STATE_EXP_AVG_SQ && opt == MFSDP_OPT_ADAMW) {
    state = ps.v;
    return MFSDP_OK;
  }
  return step->fail(MFSDP_ERROR_INVALID,
                    "parameter " + std::to_string(param) + " ('" + ps.name +
                        "') has " + optimizerName(opt) +
                        ", which keeps no state " + std::to_string(which) +
                        " (exp_avg = 0 for AdamW, SGD and Muon; exp_avg_sq = "
                        "1 for AdamW)");
}

mfsdp_status mfsdp_load_state(mfsdp_step *step, int32_t param, int32_t which,
                              const float *full) {
  if (!step || !full)
    return MFSDP_ERROR_INVALID;
  if (auto st = step->enter())
    return st;
  float *state = nullptr;
  if (auto s = stateOf(step, param, which, state))
    return s;
  return step->scatterWhole(step->params[param], full, state);
}

mfsdp_status mfsdp_store_state(mfsdp_step *step, int32_t param, int32_t which,
                               float *full) {
  if (!step || !full)
    return MFSDP_ERROR_INVALID;
  if (auto st = step->enter())
    return st;
  float *state = nullptr;
  if (auto s = stateOf(step, param, which, state))
    return s;
  // Under ns_split the momentum is current only on the replica that steps
  // the matrix (the others keep the buffer but never update it).
  const ParamState &ps = step->params[param];
  return step->storeWhole(ps, state, full, ps.nsReplica);
}

mfsdp_status mfsdp_get_hparams(mfsdp_step *step, int32_t param, mfsdp_hparams *out) {
  if (!step || !out)
    return MFSDP_ERROR_INVALID;
  if (auto st = step->checkParam(param))
    return st;
  *out = step->params[param].hparams;
  return MFSDP_OK;
}

mfsdp_status mfsdp_set_hparams(mfsdp_step *step, int32_t param,
                               const mfsdp_hparams *in) {
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
}

mfsdp_status mfsdp_step_count(mfsdp_step *step, int64_t *count) {
  if (!step || !count)
    return MFSDP_ERROR_INVALID;
  *count = step->steps;
  return MFSDP_OK;
}

mfsdp_status mfsdp_set_step_count(mfsdp_step *step, int64_t count) {
  if (!step)
    return MFSDP_ERROR_INVALID;
  if (count < 0)
    return step->fail(MFSDP_ERROR_INVALID,
                      "step count " + std::to_string(count) + " is negative");
  step->steps = count;
  return MFSDP_OK;
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

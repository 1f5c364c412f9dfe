//===- Step.h - The step engine's state, private to libmfsdp_rt -*- C++ -*-===//
//
// What one rank's runtime (an mfsdp_step, opaque in the C ABI) holds: the
// plan, each parameter's buffers and sizes, the buckets, the collectives in
// flight, and the engine's operations on them. The operations are defined
// by responsibility:
//   Runtime.cpp         the C entry points (runtime.h), thin shims
//   PlanValidation.cpp  mfsdp_create: the plan checked, laid out, agreed on
//   Placement.cpp       buffers in the arena (the static memory plan)
//   Collectives.cpp     a unit's gathers and reductions
//   Buckets.cpp         the bucket engine: one collective per bucket
//   Pipeline.cpp        prefetched gathers and overlapped reductions
//   Execute.cpp         the forward and backward hooks' compiled ops
//   Optimizer.cpp       the optimizer step
//   Clipping.cpp        hyperparameters and gradient clipping
//   Checkpoint.cpp      load / store of parameters and optimizer state
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_RUNTIME_COMMON_STEP_H
#define MFSDP_RUNTIME_COMMON_STEP_H

#include "mfsdp/runtime.h"
#include "mfsdp/runtime/Arena.h"
#include "mfsdp/runtime/Backend.h"
#include "mfsdp/runtime/ControlPlane.h"
#include "mfsdp/runtime/Counters.h"
#include "mfsdp/runtime/DefaultProgram.h"
#include "Trace.h"

#include <memory>
#include <string>
#include <vector>

namespace mfsdp::rt {

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
  float *full = nullptr;      // gathered parameter (null when freed): fp32,
                              // or bf16 elements (fullBF16) in fullFloats()
  float *grad = nullptr;      // gradient buffer handed to the trainer: fp32,
                              // or bf16 elements at gradBF16() (below)
  bool halfGrad = false;      // `grad` holds bf16 elements at 2 bytes each,
                              // gradFloats() (BufferSizes.h: halfGradient)
  bool gradWide = false;      // bf16: `grad` holds the fp32 gradient a
                              // reduction widened, not the trainer's bf16
  bool gradLive = false;      // grad handed out (pre_backward ran)
  bool gradReduced = false;   // gradShard holds a reduced gradient
  int32_t nsReplica = -1;     // ns_split: the replica that steps it (-1: all)
  int32_t bucket = -1;        // the plan's bucket it is in (-1: none)
  mfsdp_hparams hparams{};    // its optimizer's, from the next step on
  /// Optimizer steps that updated it (AdamW's bias correction, SGD's first
  /// momentum): the runtime's step count, less the steps that skipped it
  /// (mfsdp_set_unused_grads: MFSDP_UNUSED_SKIP).
  int64_t steps = 0;
  /// MFSDP_UNUSED_SKIP: this rank's backward of its unit produced no
  /// gradient for it (mfsdp_mark_no_grad, until the unit's post_backward);
  /// some backward since the last optimizer step or zero_grad did.
  bool noGradNow = false;
  bool gradSeen = false;
  /// The optimizer step running skips it: no rank's backward gave it a
  /// gradient (torch.optim's rule for a .grad that is None).
  bool skipped = false;
  int64_t elements() const { return desc.rows * desc.cols; }
  /// The compute copy is bf16 (MFSDP_COMPUTE_BF16): `full` holds fullSize
  /// 16-bit elements, gathered as such (half the bytes of fp32).
  bool bf16() const { return desc.compute_dtype == MFSDP_COMPUTE_BF16; }
  /// Bytes of one element of the compute copy.
  int64_t computeBytes() const { return bf16() ? 2 : 4; }
  /// Floats of arena the compute copy takes (the arena counts in floats):
  /// bf16 ceil(fullSize / 2), as the static memory plan sizes them
  /// (lib/step/RuntimeMemory.cpp). In a bf16 owner bucket the copies are
  /// one block, the bucket's image (imageOf).
  int64_t fullFloats() const { return bf16() ? (fullSize + 1) / 2 : fullSize; }
  /// A member of a bf16 owner bucket (set by layOutBuckets): the bucket,
  /// whose gathered copies lie in one block, a bf16 image of the members'
  /// fp32 layout; its first member holds the block, and each member's
  /// `full` points at its element imageAt of it. -1: none.
  int32_t imageOf = -1;
  int64_t imageAt = 0;
  /// Its gradient lies in the bucket's image too (bf16, halfGrad).
  bool gradInImage() const { return imageOf >= 0 && halfGrad; }
  uint16_t *fullBF16() const { return reinterpret_cast<uint16_t *>(full); }
  /// A bf16 parameter's gradient as the trainer writes it: fullSize bf16
  /// elements, from the start of a buffer of ceil(fullSize / 2) floats
  /// (halfGrad: reduced in bf16), or in the upper half of its fp32-sized
  /// buffer, which an fp32 reduction widens in place (widenGrad).
  uint16_t *gradBF16() const {
    return reinterpret_cast<uint16_t *>(grad) + (halfGrad ? 0 : fullSize);
  }
  /// Floats of arena the gradient buffer takes.
  int64_t gradFloats() const { return halfGrad ? (fullSize + 1) / 2 : fullSize; }
};

/// A bucket of the plan (mfsdp_bucket) as this rank runs it.
struct BucketState {
  std::vector<int32_t> members;
  int32_t unit = -1;
  bool rows = false; // MFSDP_ROW_SHARD; else MFSDP_OWNER
  // Row shards: one rank's chunk (floats) and each member's place in it.
  int64_t chunk = 0;
  std::vector<int64_t> rel;
  bool gaps = false; // the chunk has alignment gaps between members
  bool bf16 = false; // its members' compute copies are bf16 (all or none)
  int64_t span = 0;  // owners: floats from the first member's copy to the end
  // Owners: each rank's span (floats) of the gathered buffer, and the
  // first member this rank owns (-1: none).
  std::vector<int64_t> counts;
  int32_t firstMine = -1;
  int64_t mine = 0;
  mfsdp_bucket_offsets stagingAt{-1, -1, -1};
  mfsdp_bucket_kernels kernels{nullptr, nullptr}; // the plan's, this backend's
  float *staging = nullptr; // a row-shard gather or reduction in flight
  int64_t stagingAtNow = -1;
  // A program's row-shard gather landed in staging, left for its
  // MFSDP_PROGRAM_UNPACK; the gradients packed into the reduce staging by
  // its MFSDP_PROGRAM_PACK, for the start of the reduction.
  bool unpackDue = false;
  bool packed = false;
};

/// A collective started and not yet waited for: one parameter's or one
/// bucket's.
/// A reduction in the reduce dtype bf16 (plan.reduce_dtype): what follows
/// the dp_shard collective. Its bf16 elements lie in the upper half of
/// fp32-sized buffers (n elements at 16-bit element n; narrowInPlace).
struct BF16Reduction {
  bool on = false;
  /// The trainer's gradient buffer narrowed to send (sendCount elements),
  /// widened back once the collective is done; null: nothing to restore.
  float *send = nullptr;
  int64_t sendCount = 0;
  /// The reduced span this rank keeps (recvCount elements): HSDP's
  /// all-reduce over replicas in bf16, then widened to fp32.
  float *recv = nullptr;
  int64_t recvCount = 0;
};

struct Started {
  int32_t param = -1;
  int32_t bucket = -1;
  CommHandle handle = 0;
  int32_t unit = -1; // whose gather or reduction it is
  BF16Reduction bf16{}; // a reduction in bf16: its completion
};

/// An optimizer's name, for messages.
const char *optimizerName(int32_t optimizer);

/// A parameter's hyperparameters after mfsdp_create (runtime.h): the
/// plan's constants of its optimizer, Muon's defaults for Newton-Schulz.
mfsdp_hparams planHparams(const mfsdp_plan &p, int32_t optimizer);

/// A number as printf's %g writes it (1e-07, -0.5, inf, nan), for messages.
std::string number(double x);

/// What is wrong with hyperparameters for `optimizer` (runtime.h,
/// mfsdp_set_hparams): "" when nothing, else the first field and what it
/// must be. Fields of other optimizers are not looked at.
std::string hparamsProblem(const mfsdp_hparams &h, int32_t optimizer);

/// mfsdp_create_with_config without its exception barrier (PlanValidation.cpp).
mfsdp_status createStep(const mfsdp_plan *plan, const mfsdp_config *config,
                        mfsdp_step **out);
/// What is wrong with plan.program (not NULL) for `plan` ("" when nothing;
/// Program.cpp).
std::string programProblem(const mfsdp_plan &plan);
/// plan.program's entry for the optimizer step, if any (Program.cpp).
const mfsdp_program_hook *optimizerHook(const mfsdp_plan &plan);
/// mfsdp_optimizer_step (Optimizer.cpp).
mfsdp_status optimizerStep(mfsdp_step *step);
/// Runs the compiled ops of `hook` (mfsdp_hook) for `unit` (Execute.cpp).
mfsdp_status runHook(mfsdp_step *step, int32_t hook, int32_t unit);
/// mfsdp_load_param, mfsdp_store_param, mfsdp_load_state and
/// mfsdp_store_state (Checkpoint.cpp).
mfsdp_status loadParam(mfsdp_step *step, int32_t param, const float *full);
mfsdp_status storeParam(mfsdp_step *step, int32_t param, float *full);
mfsdp_status loadState(mfsdp_step *step, int32_t param, int32_t which,
                       const float *full);
mfsdp_status storeState(mfsdp_step *step, int32_t param, int32_t which, float *full);
/// mfsdp_save and mfsdp_load (CheckpointFiles.cpp).
mfsdp_status saveCheckpoint(mfsdp_step *step, const char *dir, const char *user);
mfsdp_status loadCheckpoint(mfsdp_step *step, const char *dir, char *user,
                            int64_t userSize);
/// mfsdp_load_hf (CheckpointHF.cpp).
mfsdp_status loadHF(mfsdp_step *step, const char *dir);
mfsdp_status exportHF(mfsdp_step *step, const char *dir, int32_t dtype,
                      int64_t maxShardBytes);

} // namespace mfsdp::rt

struct mfsdp_step {
  // The engine's types (namespace mfsdp::rt), by their short names.
  using Backend = mfsdp::rt::Backend;
  using BucketState = mfsdp::rt::BucketState;
  using CommHandle = mfsdp::rt::CommHandle;
  using ParamState = mfsdp::rt::ParamState;
  using Started = mfsdp::rt::Started;
  using BF16Reduction = mfsdp::rt::BF16Reduction;
  using UnitState = mfsdp::rt::UnitState;
  using WorkCounters = mfsdp::rt::WorkCounters;

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
  /// How the ranks of mfsdp_create agree (MPI or torchrun), kept for the
  /// calls that need every rank's word (checkpoints); destroyed after the
  /// backend. The mesh the groups were formed on, and this rank in it.
  std::unique_ptr<mfsdp::rt::ControlPlane> control;
  std::vector<mfsdp::rt::MeshDimSpec> mesh;
  int64_t worldRank = 0;
  std::unique_ptr<mfsdp::rt::Trace> trace; // MFSDP_TRACE (Trace.h); null: off
  std::unique_ptr<Backend> backend;
  float *muonScratch = nullptr;
  const mfsdp_memory_plan *memory = nullptr; // the static plan, if any
  int64_t S = 1, R = 1, shardRank = 0;
  int64_t steps = 0;
  /// mfsdp_set_unused_grads: parameters no rank gave a gradient are skipped
  /// by the optimizer step (torch.optim's rule), not stepped with zeros.
  bool skipUnused = false;
  int64_t replicaRank = 0; // this rank's dp_replicate replica
  WorkCounters work;       // for tests (Counters.h)
  bool fusedOptimizer = true; // Counters.h: setFusedOptimizer
  bool noSync = false;
  /// Gathers in flight (started ahead of their wait by the program's
  /// MFSDP_PROGRAM_START_GATHER), each bucket's or parameter's collective
  /// with its unit. The program completes them where it says
  /// (MFSDP_PROGRAM_WAIT_GATHER, completePrefetch), and any call outside
  /// the hooks first. So no collective is ever left unwaited and every
  /// rank waits in the same order.
  std::vector<Started> prefetchStarted;
  /// What the hooks and the optimizer step run (runHook, optimizerStep):
  /// the library's program, completed where a plan built by hand leaves
  /// hooks out (DefaultProgram.h); plan.program points to it.
  std::unique_ptr<mfsdp::runtime::OwnedProgram> program;
  /// plan.program's hook entry per unit and mfsdp_hook
  /// (mfsdp::runtime::hookEntries; -1: none, the hook runs no ops).
  std::vector<int32_t> hookEntry;
  /// Gradient reductions in flight (those the program started and has not
  /// waited for): the units whose reductions run (empty: none) and each
  /// parameter's or bucket's started collective. Completed
  /// (completeReduction: wait, scale, then the unit's gathered copy and
  /// transient gradients released) one unit at a time where the program
  /// waits for that unit's (the others stay in flight, so a group's
  /// optimizer kernel runs while later reductions go on), and all together
  /// by any call that needs them (enter()).
  std::vector<int32_t> reducing;
  std::vector<Started> reduceStarted;
  /// Whether `unit`'s reduction is in flight.
  bool reductionInFlight(int32_t unit) const {
    for (int32_t u : reducing)
      if (u == unit)
        return true;
    return false;
  }
  /// The plan's buckets, and each unit's.
  std::vector<BucketState> buckets;
  std::vector<std::vector<int32_t>> unitBuckets;
  std::string error;
  bool created = false;    // mfsdp_create succeeded on every rank
  std::string createError; // why it did not

  /// Waits for the collectives in flight. A destructor lets no exception
  /// out (it would end the process): one thrown while waiting is dropped,
  /// as the runtime is going away.
  ~mfsdp_step() {
    if (backend) {
      try {
        completePrefetch();
        completeReduction();
        backend->synchronize();
      } catch (...) {
      }
    }
  }

  /// What the next backend calls work on, for the trace.
  void about(int32_t bucket, int32_t param) {
    if (trace)
      trace->about(bucket, param);
  }

  /// Whether this runtime prefetches gathers: a static memory plan that
  /// made room for it, under ZeRO-3 (ZeRO-1/2 keep the copies all step).
  bool prefetching() const {
    return memory && memory->prefetch == 1 && plan.zero >= 3;
  }
  /// Whether a gather of `unit` is in flight.
  bool gatherPending(int32_t unit) const {
    for (const Started &started : prefetchStarted)
      if (started.unit == unit)
        return true;
    return false;
  }
  bool prefetchPending(int32_t param) const {
    for (const Started &started : prefetchStarted)
      if (started.param == param ||
          (started.bucket >= 0 && started.bucket == params[param].bucket))
        return true;
    return false;
  }

  /// Whether a reduction in flight reads `param`'s buffers.
  bool reductionPending(int32_t param) const {
    return reductionInFlight(params[param].desc.unit);
  }

  /// Waits for the reductions in flight, if any: every started collective,
  /// even after a failure; then the scaling, and the units' gathered copies
  /// and transient gradient buffers are released.
  /// Waits for the reductions in flight: `unit`'s alone (its collectives
  /// in the order they were started), or every unit's with unit < 0.
  mfsdp_status completeReduction(int32_t unit = -1);

  /// Unit `unit`'s gradients are reduced: an optimizer step may use them.
  void markReduced(int32_t unit) {
    reduced[unit] = true;
    stepped = false;
  }

  /// MFSDP_ERROR_ORDER, with `call` in the message, unless every unit's
  /// gradients were reduced since the last optimizer step and zero_grad.
  /// With `inFlight`, the unit whose reduction is still in flight counts as
  /// reduced (a program's optimizer step waits for it where it says).
  mfsdp_status checkReduced(const char *call, bool inFlight = false);
  /// post_backward of `unit`: which of its parameters this rank's backward
  /// gave a gradient (every one unless marked, mfsdp_mark_no_grad).
  void noteGradients(int32_t unit) {
    for (int32_t p : unitParams[unit]) {
      ParamState &ps = params[p];
      ps.gradSeen = ps.gradSeen || !ps.noGradNow;
      ps.noGradNow = false;
    }
  }
  /// mfsdp_set_unused_grads: the rule, checked to be every rank's.
  mfsdp_status setUnusedGrads(int32_t rule);
  /// The start of an optimizer step: which parameters it skips (no rank
  /// gave one a gradient, under MFSDP_UNUSED_SKIP), and each stepped
  /// parameter's count advanced.
  mfsdp_status chooseStepped();

  /// Whether clipping counts and scales `ps`'s reduced gradient on this
  /// rank: it keeps some of it and an optimizer steps it.
  static bool clipped(const ParamState &ps) {
    return ps.ownsAny && ps.desc.optimizer != MFSDP_OPT_NONE;
  }

  /// clip_grad_norm (runtime.h): `total` = the norm of every reduced
  /// gradient, each element once over the data-parallel ranks, with
  /// `extraSq`; the gradients scaled when it exceeds `maxNorm`.
  mfsdp_status clipGradNorm(double maxNorm, double extraSq, double &total);

  /// Starts gathering `unit` (for its backward: at the memory plan's
  /// backward place) without waiting, where that needs no work after the
  /// collective but bf16 rounding: row shards and owned matrices not yet
  /// gathered. Block shards (reordered after the collective) and
  /// replicated tensors (a copy) are gathered at the unit's own hook.
  /// What the program's MFSDP_PROGRAM_START_GATHER starts.
  mfsdp_status startGather(int32_t unit, bool forBackward);

  /// Waits for the gathers in flight of `unit` (-1: all), if any (then
  /// bf16 rounding). Every started collective is waited for, even after a
  /// failure.
  /// With `defer`, row-shard buckets' chunks stay in staging for the
  /// program's MFSDP_PROGRAM_UNPACK.
  mfsdp_status completePrefetch(int32_t unit = -1, bool defer = false);

  /// A row-shard bucket's staging buffer for a gather (forward or
  /// backward) or a reduction: `which` 0, 1 or 2 (mfsdp_bucket_offsets).
  mfsdp_status placeStaging(BucketState &bs, int which, const std::string &what);
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
  /// With `defer`, a row-shard bucket's chunks stay in staging for the
  /// program's MFSDP_PROGRAM_UNPACK (finishBucketGather).
  mfsdp_status gatherBucket(int32_t b, bool forBackward, CommHandle *handle,
                            bool defer = false);

  /// After a bucket's all-gather (status `s`): row shards unpacked from
  /// staging (with `defer` left there, unpackDue, for the program's
  /// MFSDP_PROGRAM_UNPACK); on failure the copies are released.
  mfsdp_status finishBucketGather(int32_t b, mfsdp_status s, bool defer = false);
  /// A row-shard bucket's gathered chunks unpacked from staging into the
  /// members' copies (the plan's kernel, or strided copies; bf16 buckets a
  /// bf16 copy), the staging freed; on failure the copies are released.
  mfsdp_status unpackBucket(int32_t b);
  /// A row-shard bucket's gradients packed by rank into its reduce staging
  /// (placed here): fp32 (the trainer's bf16 gradients widened first), or
  /// rounded to bf16 under the reduce dtype bf16. Sets `packed`; the start
  /// of the reduction sends the staging as it is.
  mfsdp_status packBucket(int32_t b);
  /// A row-shard bucket's staging, packed for the start of its reduction:
  /// by the program's MFSDP_PROGRAM_PACK (a program that did not pack it
  /// is MFSDP_ERROR_PLAN).
  mfsdp_status packedForReduction(int32_t b);
  /// Whether a started reduction of block shard `ps` packs its gradient
  /// into its gathered copy: only ZeRO-3's backward copy, which nothing
  /// reads once the backward is over (the memory plan keeps it until the
  /// wait); ZeRO-1/2's copy is the parameter itself, kept all step, and a
  /// bf16 copy has half the bytes an fp32 gradient needs.
  bool packsBlocksInCopy(const ParamState &ps) const {
    return ps.desc.placement == MFSDP_BLOCK_SHARD && ps.full && plan.zero >= 3 &&
           !ps.bf16();
  }
  /// Row-shard buckets whose gathered chunks wait for an unpack.
  int32_t unpacksDue = 0;
  /// Marks a bucket's gathered chunks as waiting for their unpack, or not
  /// (keeping unpacksDue their count).
  void setUnpackDue(BucketState &bs, bool due) {
    if (bs.unpackDue != due)
      unpacksDue += due ? 1 : -1;
    bs.unpackDue = due;
  }
  /// The end of a bucket's gather, unpacked or failed: its staging freed
  /// (row shards), and on failure the members' copies.
  mfsdp_status endBucketGather(BucketState &bs, mfsdp_status s);

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
  /// span; owners one reduce-scatter-v from the gradient span. Only
  /// started (`handle`); completeReduction runs HSDP's all-reduce over
  /// replicas and the scaling.
  mfsdp_status reduceBucket(int32_t b, CommHandle &handle);
  /// reduceBucket under the reduce dtype bf16: row shards packed in fp32
  /// as above and narrowed in the staging buffer, owners' gradient span
  /// narrowed in place (widened back once sent); one bf16 reduce-scatter
  /// (-v) into the upper half of the grad_shard span, widened to fp32 by
  /// finishBF16 when completeReduction waits for it (recorded in
  /// `started`).
  mfsdp_status reduceBucketBF16(int32_t b, CommHandle &handle, BF16Reduction &started);

  /// Checks the plan's buckets against the parameters and the memory
  /// plan's offsets (mfsdp_bucket) and lays them out for this rank; a
  /// message in `error` when they do not fit.
  mfsdp_status layOutBuckets();

  mfsdp_status fail(mfsdp_status s, std::string message) {
    error = std::move(message);
    if (trace)
      trace->flush(); // complete JSON, whatever the trainer does next
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
  /// MFSDP_ERROR_INVALID with a message unless `unit` indexes the plan.
  mfsdp_status checkUnit(int32_t unit) {
    if (unit < 0 || unit >= plan.num_units)
      return fail(MFSDP_ERROR_INVALID, "unit " + std::to_string(unit) +
                                           " is out of range [0, " +
                                           std::to_string(plan.num_units) + ")");
    return MFSDP_OK;
  }
  /// ns_split (runtime.h): the replica that steps each owned Muon matrix,
  /// the i-th of each owner's (by unit, then table order) on replica
  /// i % R. False when the plan's flag is neither 0 nor 1.
  bool assignNsReplicas();
  /// Whether this rank runs the optimizer step of `ps` (when it keeps any
  /// of it): under ns_split only the owner on the chosen replica does.
  bool stepsHere(const ParamState &ps) const {
    return ps.nsReplica < 0 || ps.nsReplica == replicaRank;
  }
  /// The status of a collective.
  mfsdp_status comm(int code, const char *what) {
    if (code == 0)
      return MFSDP_OK;
    // The entry point it happened in (and its unit), as the call check
    // recorded it: a collective of a prefetch or a reduction in flight can
    // belong to another unit than the hook waiting for it.
    std::string during;
    if (currentCall)
      during = std::string(" (during ") + currentCall +
               (currentUnit >= 0 ? "(" + std::to_string(currentUnit) + ")" : "()") + ")";
    return fail(MFSDP_ERROR_COMM,
                std::string(what) + during + ": " + backend->lastError());
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
  std::string occupant(int64_t lo, int64_t hi) const;

  /// `count` floats for `what`: at `offset` of the static plan, else from
  /// the arena. A place still held by another buffer is a hook-order
  /// error naming both.
  mfsdp_status place(int64_t offset, int64_t count, float *&out,
                     const std::string &what);
  /// The start of a call that touches buffers the trainer may still be
  /// using: the runtime's work goes after the trainer's.
  /// With `keepReduction` the reductions in flight stay so, with
  /// `keepGathers` the gathers in flight too (the program's hooks, whose
  /// ops say where each is waited for).
  mfsdp_status enter(bool keepReduction = false, bool keepGathers = false);
  /// MFSDP_ERROR_INVALID unless mfsdp_create succeeded on this runtime.
  mfsdp_status usable() {
    if (!created)
      return fail(MFSDP_ERROR_INVALID,
                  "this runtime was not created (mfsdp_create failed: " +
                      createError + ")");
    if (!stoppedBy.empty())
      return fail(MFSDP_ERROR_ORDER, "this runtime stopped: " + stoppedBy +
                                         "; destroy it (mfsdp_destroy)");
    return MFSDP_OK;
  }

  /// Call-sequence checks (MFSDP_CHECK_CALLS=1, CallCheck.cpp): every
  /// collective call folded into a running hash the ranks compare at that
  /// call; a difference stops the runtime on every rank, naming each
  /// rank's call.
  bool checkCalls = false;
  uint64_t callHash = 0;
  int64_t callCount = 0;
  /// The collective entry point running now and its unit (or parameter),
  /// for messages (set by checkCall whether or not the checks are on).
  const char *currentCall = nullptr;
  int32_t currentUnit = -1;
  std::string stoppedBy; // why the runtime stopped (empty: it has not)
  mfsdp_status checkCall(const char *call, int32_t unit = -1);

  /// The end of a call that hands buffers to the trainer or reads its
  /// writes: everything issued is done.
  mfsdp_status finish() { return device(backend->synchronize(), "synchronize"); }

  /// Gathers `local`, laid out like `ps.master` (this rank's padded rows,
  /// the owned matrix, or the whole tensor), into the whole tensor `full`
  /// (ps.fullSize elements) on every rank of the dp_shard group.
  mfsdp_status gatherWhole(const ParamState &ps, const float *local, float *full);

  /// The compute copy of `ps` gathered from its masters (`ps.master`) into
  /// `ps.full`: gatherWhole for fp32; for bf16 this rank's part cast to
  /// bf16 at its place in the copy (block shards: in the staging buffer)
  /// and all-gathered in place as bf16. With `handle` (row shards and
  /// owned matrices only) it is only started: wait(*handle) completes it.
  mfsdp_status gatherCompute(ParamState &ps, CommHandle *handle);

  /// bf16 gradients (ps.bf16()): the trainer's bf16 gradient widened in
  /// place to the fp32 gradient the reduction reads (ps.gradWide), and
  /// back (exactly: its values are bf16's) before the trainer is handed it
  /// again. Chunks from the front, each written only over bf16 elements
  /// already read: about log2(fullSize) casts. Nothing to do otherwise.
  mfsdp_status widenGrad(ParamState &ps);
  mfsdp_status narrowGrad(ParamState &ps);

  /// The reduce dtype bf16 (plan.reduce_dtype): gradients reduced in bf16.
  bool reduceBF16() const { return plan.reduce_dtype == MFSDP_REDUCE_BF16; }
  /// n floats at buf rounded to bf16 in place, into the upper half (16-bit
  /// elements [n, 2n) of buf), and back (exact); the chunks of widenGrad.
  mfsdp_status narrowInPlace(float *buf, int64_t n, const std::string &what);
  mfsdp_status widenInPlace(float *buf, int64_t n, const std::string &what);
  /// A parameter's reduction in bf16 (reduce() under reduceBF16(), not a
  /// bucket's): narrowed and its reduction over dp_shard in bf16 started
  /// (completeReduction finishes it); a block shard packed in staging is
  /// reduced at once.
  mfsdp_status reduceParamBF16(int32_t p);
  /// After a bf16 reduction's dp_shard collective: the trainer's buffer
  /// widened back, HSDP's all-reduce over replicas in bf16 (every rank
  /// calls it, after a failure too), the kept span widened to fp32.
  mfsdp_status finishBF16(const BF16Reduction &r, const std::string &what);
  /// finishBF16 after the dp_shard collective ended with `s`, run whatever
  /// `s` (every rank issues the same sequence): the first failure is the
  /// one returned, with its message.
  mfsdp_status finishBF16After(mfsdp_status s, const BF16Reduction &r,
                               const std::string &what) {
    const std::string first = s ? error : std::string();
    const mfsdp_status f = finishBF16(r, what);
    if (!s)
      return f;
    error = first;
    return s;
  }

  /// Block shards: every rank's packed blocks (`local`) concatenated in
  /// packed order (BlockGrid) into `packed` (ps.fullSize floats).
  mfsdp_status gatherPacked(const ParamState &ps, const float *local, float *packed);

  /// Block shards: a whole-tensor buffer for the packed blocks while a
  /// gather or reduction reorders them (the memory plan's staging place,
  /// else from the arena); released by the caller.
  mfsdp_status blockStaging(const ParamState &ps, float *&out, const char *why);

  /// This rank's part of the whole tensor `full` (host memory) into
  /// `local`, laid out like ps.master.
  mfsdp_status scatterWhole(const ParamState &ps, const float *full, float *local);

  /// The whole tensor laid out like ps.master (`local`) into `full` (host
  /// memory, ps.elements() floats) on every rank. With `fromReplica` >= 0
  /// only that dp_replicate replica's `local` is read (ns_split momentum,
  /// which only the replica that steps the matrix keeps) and broadcast to
  /// the other replicas. `collectivesDone` (if given) says whether the
  /// failure, if any, came after every collective of the call: the rank
  /// can then go on to the next call's collectives with the others. The
  /// ranks first agree on `mine` (this rank's status of its arguments) and
  /// on the staging buffer's placement, so that a failure of one rank there
  /// fails the call on every rank instead of leaving the others in the
  /// gather.
  mfsdp_status storeWhole(const ParamState &ps, const float *local, float *full,
                          mfsdp_status mine, int32_t fromReplica = -1,
                          bool *collectivesDone = nullptr);

  /// Gathers a unit's parameters (for its backward: where the memory plan
  /// puts the backward gather).
  mfsdp_status gather(int32_t unit, bool forBackward = false, bool defer = false);

  /// Frees a parameter's gathered copy; a member of a bf16 owner bucket
  /// frees the bucket's whole image, so no member points into a freed
  /// block.
  void releaseFull(ParamState &ps) {
    if (ps.imageOf >= 0) {
      for (int32_t q : buckets[ps.imageOf].members) {
        ParamState &member = params[q];
        if (member.imageAt == 0)
          backend->release(member.full);
        member.full = nullptr;
      }
      return;
    }
    backend->release(ps.full);
    ps.full = nullptr;
  }

  void release(int32_t unit);
  /// ZeRO-3: the gathers started ahead (prefetch) for units that are idle
  /// waited for and their copies released (mfsdp_end_forward).
  mfsdp_status releaseAhead();

  /// Places and zeroes a parameter's gradient buffer where the memory plan
  /// puts it; a member of a bf16 owner bucket whose gradients are an image
  /// (halfGrad) points into the block its first member places (and zeroes)
  /// for all. releaseGrad undoes it (the block with its first member).
  mfsdp_status placeGrad(ParamState &ps);
  void releaseGrad(ParamState &ps);

  /// Reduces a unit's gradients into the shards: the dp_shard reduction of
  /// every bucket and parameter is started and left to completeReduction
  /// (recorded in reduceStarted), which runs HSDP's all-reduce over
  /// replicas and the scaling once it has landed. Block shards are packed
  /// into their gathered copy first (packsBlocksInCopy); one with no copy
  /// to pack into (ZeRO-1/2, or a bf16 copy) is packed through the shared
  /// staging buffer and reduced here, at once.
  mfsdp_status reduce(int32_t unit);
  /// A row-shard bucket's gradients packed into its reduce staging buffer
  /// (Buckets.cpp).
  mfsdp_status packGradients(int32_t bucket, BucketState &bs);

  /// The sizes of a parameter's buffers on this rank, and whether the plan
  /// entry is one the engine can run.
  bool layOut(ParamState &ps);

  /// Bytes of the arena: every buffer the engine can hold at once (all
  /// units gathered, one more gathered copy for a store, the Muon scratch).
  int64_t arenaBytes() const;

  /// Whether gradient buffers live for the whole run (no static plan, or
  /// one that keeps them for no-sync accumulation).
  bool gradsKept() const { return !memory || memory->keep_grads; }

  /// A unit's gradient buffers, zeroed, when the plan keeps them only
  /// during its backward.
  mfsdp_status placeGrads(int32_t unit);

  /// Frees a unit's gradient buffers after their reduction (plans that do
  /// not keep them).
  void releaseGrads(int32_t unit);

  /// The buffers a parameter keeps for the whole run, zeroed.
  mfsdp_status allocateKept(ParamState &ps);
};

#endif // MFSDP_RUNTIME_COMMON_STEP_H

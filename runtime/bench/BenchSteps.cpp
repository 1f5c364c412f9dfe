//===- BenchSteps.cpp - Buckets and whole steps through the C ABI ---------===//
//
// Parts 3 and 4 of mfsdp-bench-runtime (RuntimeBench.cpp).
//
//===----------------------------------------------------------------------===//
#include "Bench.h"

namespace mfsdp::bench {

namespace {

constexpr int32_t kUnits = 8, kVectors = 12, kMatrices = 4;

/// The ZeRO-3 plan's parameters of parts 3 and 4: per unit kVectors
/// row-shard vectors of 2048 floats (AdamW) and kMatrices owned 128x128
/// matrices (Muon), dealt round-robin to the owners; each unit's row shards
/// in one bucket and its owned matrices, by owner, in another. The buckets
/// point into `rows` and `owned`, so it is filled in place.
struct StepParams {
  std::vector<mfsdp_param_desc> descs;
  std::vector<std::vector<int32_t>> rows, owned; // per unit
  std::vector<mfsdp_bucket> buckets;
  explicit StepParams(int world) : rows(kUnits), owned(kUnits) {
    for (int32_t u = 0; u < kUnits; ++u)
      for (int32_t k = 0; k < kVectors + kMatrices; ++k) {
        mfsdp_param_desc d{};
        const bool matrix = k >= kVectors;
        d.rows = matrix ? 128 : 2048;
        d.cols = matrix ? 128 : 1;
        d.unit = u;
        d.placement = matrix ? MFSDP_OWNER : MFSDP_ROW_SHARD;
        d.owner = matrix ? (u * kMatrices + k) % world : 0;
        d.optimizer = matrix ? MFSDP_OPT_MUON : MFSDP_OPT_ADAMW;
        d.compute_dtype = MFSDP_COMPUTE_F32;
        (matrix ? owned : rows)[u].push_back(static_cast<int32_t>(descs.size()));
        descs.push_back(d);
      }
    for (std::vector<int32_t> &o : owned) // owner buckets go by owner
      std::stable_sort(o.begin(), o.end(),
                       [&](int32_t a, int32_t b) { return descs[a].owner < descs[b].owner; });
    for (int32_t u = 0; u < kUnits; ++u) {
      buckets.push_back({u, MFSDP_ROW_SHARD, kVectors, rows[u].data()});
      buckets.push_back({u, MFSDP_OWNER, kMatrices, owned[u].data()});
    }
  }
  StepParams(const StepParams &) = delete;
  StepParams &operator=(const StepParams &) = delete;
};

} // namespace

//===-- 3. Bucketed collectives against one per parameter ------------------===//


BucketResult benchBuckets(int world) {
  StepParams sp(world);
  std::vector<mfsdp_param_desc> &descs = sp.descs;
  std::vector<mfsdp_bucket> &buckets = sp.buckets;
  BucketResult out;
  out.params = static_cast<int64_t>(descs.size());
  out.buckets = static_cast<int64_t>(buckets.size());
  auto run = [&](bool bucketed, std::vector<double> &reps) {
    std::vector<mfsdp_bucket> none;
    mfsdp_plan plan = zero3Plan(world, kUnits, descs, bucketed ? buckets : none);
    const Planned planned(plan, /*prefetch=*/0);
    mfsdp_step *step = createLoaded(plan);
    auto check = [&](mfsdp_status st, const char *what) { checkOk(step, st, what); };
    reps = timeReps([&](int) {
      check(mfsdp_zero_grad(step), "zero_grad");
      forwardAll(step, kUnits);
      backwardAll(step, kUnits, [](int32_t) {});
    });
    if (bucketed) {
      mfsdp::rt::WorkCounters w = mfsdp::rt::workCounters(step);
      out.bucketCollectives = w.bucketGathers + w.bucketReductions;
    }
    mfsdp_destroy(step);
  };
  interleaveRounds(run, out.bucketedReps, out.perParamReps);
  out.bucketedS = median(out.bucketedReps);
  out.perParamS = median(out.perParamReps);
  return out;
}


//===-- 4. A whole step: the compiled program against the derived one ----===//


/// The plan of 3. (8 units, each 12 AdamW row-shard vectors of 2048 floats
/// in one bucket and 4 owned 128x128 Muon matrices in another), ZeRO-3 with
/// gather prefetch and overlapped reductions (memory plan prefetch 1). One
/// whole step: zero_grad, forward and backward (the trainer's gradients
/// written into every gradient view), optimizer step. With the program:
/// the optimizer step as the compiler lowers a landing-order schedule of
/// one group per unit (the last unit first, each owner's Muon on its rank,
/// unit 0's kernels after the wait for its reduction, which the others
/// overlap); without: the program the runtime derives for a plan without
/// one (DefaultProgram.h: every reduction waited for first, then every
/// parameter in table order).
/// The forward and backward hooks of `units` units as step::lowerStepProgram
/// lowers a ZeRO-3 schedule with prefetch 1 (one unit per gather group):
/// each gather started one unit ahead, released in post_forward, each
/// reduction waited for in the next post_backward; each wait for a gather
/// followed by the unit's unpack, each reduction preceded by its pack (the
/// runtime does nothing for a unit without row-shard buckets).
void appendPrefetchHooks(int32_t units, std::vector<mfsdp_program_op> &ops,
                         std::vector<mfsdp_program_hook> &hooks) {
  auto unitOp = [&](int32_t kind, int32_t u) {
    ops.push_back({kind, u, u, MFSDP_OPT_NONE, -1, 0, nullptr});
  };
  for (int32_t u = 0; u < units; ++u)
    for (int32_t h = MFSDP_HOOK_PRE_FORWARD; h <= MFSDP_HOOK_POST_BACKWARD; ++h) {
      const int32_t first = static_cast<int32_t>(ops.size());
      switch (h) {
      case MFSDP_HOOK_PRE_FORWARD:
        if (u == 0)
          unitOp(MFSDP_PROGRAM_START_GATHER, 0);
        if (u + 1 < units)
          unitOp(MFSDP_PROGRAM_START_GATHER, u + 1);
        unitOp(MFSDP_PROGRAM_WAIT_GATHER, u);
        unitOp(MFSDP_PROGRAM_UNPACK, u);
        break;
      case MFSDP_HOOK_POST_FORWARD:
        unitOp(MFSDP_PROGRAM_RELEASE, u);
        break;
      case MFSDP_HOOK_PRE_BACKWARD:
        if (u + 1 == units)
          unitOp(MFSDP_PROGRAM_START_GATHER, u);
        if (u > 0)
          unitOp(MFSDP_PROGRAM_START_GATHER, u - 1);
        unitOp(MFSDP_PROGRAM_WAIT_GATHER, u);
        unitOp(MFSDP_PROGRAM_UNPACK, u);
        unitOp(MFSDP_PROGRAM_PLACE_GRADS, u);
        break;
      default:
        if (u + 1 < units)
          unitOp(MFSDP_PROGRAM_WAIT_REDUCTION, u + 1);
        unitOp(MFSDP_PROGRAM_PACK, u);
        unitOp(MFSDP_PROGRAM_START_REDUCTION, u);
        break;
      }
      hooks.push_back({h, u, first, static_cast<int32_t>(ops.size()) - first});
    }
}

ProgramResult benchProgram(int world) {
  StepParams sp(world);
  std::vector<mfsdp_param_desc> &descs = sp.descs;
  const std::vector<std::vector<int32_t>> &rows = sp.rows, &owned = sp.owned;
  std::vector<mfsdp_bucket> &buckets = sp.buckets;
  // The program: per owner its matrices of each unit.
  std::vector<std::vector<std::vector<int32_t>>> byOwner(
      kUnits, std::vector<std::vector<int32_t>>(world));
  for (int32_t u = 0; u < kUnits; ++u)
    for (int32_t p : owned[u])
      byOwner[u][descs[p].owner].push_back(p);
  std::vector<mfsdp_program_op> ops;
  for (int32_t u = kUnits; u-- > 0;) {
    if (u == 0)
      ops.push_back({MFSDP_PROGRAM_WAIT_REDUCTION, 0, 0, MFSDP_OPT_NONE, -1, 0, nullptr});
    ops.push_back({MFSDP_PROGRAM_OPTIMIZER, u, u, MFSDP_OPT_ADAMW, -1, kVectors,
                   rows[u].data()});
    for (int32_t r = 0; r < world; ++r)
      if (!byOwner[u][r].empty())
        ops.push_back({MFSDP_PROGRAM_OPTIMIZER, u, u, MFSDP_OPT_MUON, r,
                       static_cast<int32_t>(byOwner[u][r].size()), byOwner[u][r].data()});
  }
  std::vector<mfsdp_program_hook> hooks = {
      {MFSDP_HOOK_OPTIMIZER_STEP, -1, 0, static_cast<int32_t>(ops.size())}};
  appendPrefetchHooks(kUnits, ops, hooks);
  const mfsdp_program program = {static_cast<int32_t>(ops.size()), ops.data(),
                                 static_cast<int32_t>(hooks.size()), hooks.data()};
  ProgramResult out;
  out.ops = static_cast<int64_t>(ops.size());
  auto run = [&](bool withProgram, std::vector<double> &reps) {
    mfsdp_plan plan = zero3Plan(world, kUnits, descs, buckets);
    if (withProgram)
      plan.program = &program;
    // The program's memory plan takes its lifetimes from the program.
    const Planned planned(plan, /*prefetch=*/1);
    mfsdp_step *step = createLoaded(plan);
    auto check = [&](mfsdp_status st, const char *what) { checkOk(step, st, what); };
    reps = timeReps([&](int) {
      check(mfsdp_zero_grad(step), "zero_grad");
      forwardAll(step, kUnits);
      backwardAll(step, kUnits, [&](int32_t u) {
        for (const std::vector<int32_t> *members : {&rows[u], &owned[u]})
          for (int32_t p : *members) {
            DLTensor g;
            check(mfsdp_grad_view(step, p, &g), "grad_view");
            fill(static_cast<float *>(g.data), descs[p].rows * descs[p].cols,
                 13 + static_cast<unsigned>(p), 0.01f);
          }
      });
      check(mfsdp_optimizer_step(step), "optimizer_step");
    });
    mfsdp_destroy(step);
  };
  interleaveRounds(run, out.programReps, out.runtimeReps);
  out.programS = median(out.programReps);
  out.runtimeS = median(out.runtimeReps);
  return out;
}

} // namespace mfsdp::bench

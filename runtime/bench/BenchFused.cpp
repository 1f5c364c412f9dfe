//===- BenchFused.cpp - Fused optimizer step, against per parameter -------===//
//
// `mfsdp-bench-runtime fused` (RuntimeBench.cpp).
//
//===----------------------------------------------------------------------===//
#include "Bench.h"

namespace mfsdp::bench {

//===-- fused: the optimizer step fused per group against per parameter ---===//

constexpr int kFusedRounds = 4;

struct FusedResult {
  std::string shape;
  int64_t params = 0, floats = 0, ops = 0;
  // Each repetition's optimizer_step alone and whole step (slowest rank).
  std::vector<double> fusedOpt, perParamOpt, fusedWhole, perParamWhole;
  int64_t fusedCalls = 0, perParamCalls = 0; // this rank, last run of each
  bool identical = false; // every parameter bitwise equal after both runs
};

/// An all-AdamW ZeRO-3 plan of 8 units, each with `vectors` row-shard
/// vectors of `vecLen` floats and `matrices` row-shard matrices of
/// `rows` x `cols` (AdamW on every parameter, weight decay off for the
/// vectors as for norms and biases), each unit's parameters in one bucket,
/// gather prefetch and overlapped reductions (memory plan prefetch 1), and
/// the optimizer step as a program of one AdamW op per unit in landing
/// order (unit 0's after the wait for its reduction). One whole step:
/// zero_grad, forward, backward (the trainer writes every gradient view),
/// optimizer step; timed whole and optimizer_step alone, with the fused
/// kernels (one Backend::adamwMulti per op) and with one kernel per
/// parameter (setFusedOptimizer(false)), interleaved rounds (kFusedRounds).
FusedResult benchFused(int world, const char *shape, int32_t vectors, int64_t vecLen,
                       int32_t matrices, int64_t rows, int64_t cols) {
  constexpr int32_t kUnits = 8;
  std::vector<mfsdp_param_desc> descs;
  std::vector<mfsdp_hparams> hparams;
  std::vector<std::vector<int32_t>> members(kUnits);
  for (int32_t u = 0; u < kUnits; ++u)
    for (int32_t k = 0; k < vectors + matrices; ++k) {
      mfsdp_param_desc d{};
      const bool matrix = k >= vectors;
      d.rows = matrix ? rows : vecLen;
      d.cols = matrix ? cols : 1;
      d.unit = u;
      d.placement = MFSDP_ROW_SHARD;
      d.optimizer = MFSDP_OPT_ADAMW;
      d.compute_dtype = MFSDP_COMPUTE_F32;
      members[u].push_back(static_cast<int32_t>(descs.size()));
      descs.push_back(d);
    }
  std::vector<mfsdp_bucket> buckets;
  std::vector<mfsdp_program_op> ops;
  for (int32_t u = 0; u < kUnits; ++u)
    buckets.push_back({u, MFSDP_ROW_SHARD, vectors + matrices, members[u].data()});
  for (int32_t u = kUnits; u-- > 0;) {
    if (u == 0)
      ops.push_back({MFSDP_PROGRAM_WAIT_REDUCTION, 0, 0, MFSDP_OPT_NONE, -1, 0, nullptr});
    ops.push_back({MFSDP_PROGRAM_OPTIMIZER, u, u, MFSDP_OPT_ADAMW, -1, vectors + matrices,
                   members[u].data()});
  }
  const mfsdp_program_hook hook = {MFSDP_HOOK_OPTIMIZER_STEP, -1, 0,
                                   static_cast<int32_t>(ops.size())};
  const mfsdp_program program = {static_cast<int32_t>(ops.size()), ops.data(), 1, &hook};
  FusedResult out;
  out.shape = shape;
  out.params = static_cast<int64_t>(descs.size());
  for (const mfsdp_param_desc &d : descs)
    out.floats += d.rows * d.cols;
  out.ops = static_cast<int64_t>(ops.size());
  std::vector<std::vector<float>> finalFused(descs.size()), finalPerParam(descs.size());
  auto run = [&](bool fused, std::vector<double> &opt, std::vector<double> &whole) {
    mfsdp_plan plan = zero3Plan(world, kUnits, descs, buckets);
    plan.adamw_weight_decay = 0.1f;
    plan.program = &program; // the optimizer step only: the hooks derived
    const Planned planned(plan, /*prefetch=*/1);
    mfsdp_step *step = nullptr;
    checkOk(step, mfsdp_create(&plan, &step), "create");
    mfsdp::rt::setFusedOptimizer(step, fused);
    auto check = [&](mfsdp_status st, const char *what) { checkOk(step, st, what); };
    for (int32_t i = 0; i < plan.num_params; ++i) {
      std::vector<float> init(descs[i].rows * descs[i].cols);
      fill(init.data(), static_cast<int64_t>(init.size()), 11 + unsigned(i), 0.1f);
      check(mfsdp_load_param(step, i, init.data()), "load");
      // Weight decay off for the vectors (norms, biases).
      if (descs[i].cols == 1) {
        mfsdp_hparams h;
        check(mfsdp_get_hparams(step, i, &h), "get_hparams");
        h.weight_decay = 0.f;
        check(mfsdp_set_hparams(step, i, &h), "set_hparams");
      }
    }
    for (int r = 0; r < kWarmup + kReps; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now();
      check(mfsdp_zero_grad(step), "zero_grad");
      forwardAll(step, kUnits);
      for (int32_t u = kUnits; u-- > 0;) {
        check(mfsdp_pre_backward(step, u), "pre_backward");
        for (int32_t p : members[u]) {
          DLTensor g;
          check(mfsdp_grad_view(step, p, &g), "grad_view");
          // A cheap, varying gradient (the trainer's backward is not
          // what is measured).
          float *x = static_cast<float *>(g.data);
          const int64_t n = descs[p].rows * descs[p].cols;
          for (int64_t i = 0; i < n; ++i)
            x[i] = 0.01f * float((i * 7 + p + r) % 13) - 0.06f;
        }
        check(mfsdp_post_backward(step, u), "post_backward");
      }
      const double t1 = now();
      check(mfsdp_optimizer_step(step), "optimizer_step");
      const double t2 = now();
      double mine[2] = {t2 - t1, t2 - t0}, slowest[2];
      MPI_Allreduce(mine, slowest, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (r >= kWarmup) {
        opt.push_back(slowest[0]);
        whole.push_back(slowest[1]);
      }
    }
    mfsdp::rt::WorkCounters w = mfsdp::rt::workCounters(step);
    (fused ? out.fusedCalls : out.perParamCalls) =
        fused ? w.fusedOptimizerCalls : w.perParamOptimizerCalls;
    for (int32_t i = 0; i < plan.num_params; ++i) {
      std::vector<float> &mine = (fused ? finalFused : finalPerParam)[i];
      mine.resize(descs[i].rows * descs[i].cols);
      check(mfsdp_store_param(step, i, mine.data()), "store");
    }
    mfsdp_destroy(step);
  };
  // Four rounds, the first path alternating, so that drift in the
  // machine's speed and the order of the two hit both alike.
  for (int round = 0; round < kFusedRounds; ++round)
    for (bool fused : {round % 2 == 0, round % 2 != 0})
      run(fused, fused ? out.fusedOpt : out.perParamOpt,
          fused ? out.fusedWhole : out.perParamWhole);
  int same = 1;
  for (size_t i = 0; i < descs.size(); ++i)
    same &= std::memcmp(finalFused[i].data(), finalPerParam[i].data(),
                        finalFused[i].size() * sizeof(float)) == 0;
  int all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  out.identical = all != 0;
  return out;
}

/// `mpirun -np N mfsdp-bench-runtime fused`: benchFused on two shapes.
int runFused(int world, int rank) {
  const bool root = rank == 0;
  if (root)
    std::printf("mfsdp-bench-runtime fused: host backend (MPI + OpenBLAS), measured "
                "on this host's CPU, not a GPU\n"
                "%d ranks; wall clock, median of the timed repetitions (%d warm-up, "
                "then %d timed, per round; %d rounds, fused and per parameter "
                "alternating which runs first)\n",
                world, kWarmup, kReps, kFusedRounds);
  const FusedResult results[] = {
      benchFused(world, "small tensors: 8 units x 64 vectors of 1024 floats", 64, 1024,
                 0, 0, 0),
      benchFused(world,
                 "mixed: 8 units x (16 vectors of 4096 floats + 8 matrices 512x256)",
                 16, 4096, 8, 512, 256),
  };
  if (!root)
    return 0;
  for (const FusedResult &r : results) {
    const double fo = median(r.fusedOpt), po = median(r.perParamOpt);
    const double fw = median(r.fusedWhole), pw = median(r.perParamWhole);
    std::printf("\n%s\n   %lld AdamW parameters, %.2f M floats, ZeRO-3, program of %lld "
                "ops (8 AdamW ops)\n",
                r.shape.c_str(), (long long)r.params, double(r.floats) / 1e6,
                (long long)r.ops);
    std::printf("   AdamW kernel calls per step on rank 0 (counted by the runtime): "
                "fused %lld, per parameter %lld\n",
                (long long)(r.fusedCalls / (kWarmup + kReps)),
                (long long)(r.perParamCalls / (kWarmup + kReps)));
    std::printf("   parameters after both runs: %s\n",
                r.identical ? "bitwise equal" : "DIFFERENT");
    std::printf("   optimizer_step  fused        %8.3f ms  (range %s ms, %zu reps)\n",
                fo * 1e3, range(r.fusedOpt, 1e3).c_str(), r.fusedOpt.size());
    std::printf("   optimizer_step  per param    %8.3f ms  (range %s ms, %zu reps)\n",
                po * 1e3, range(r.perParamOpt, 1e3).c_str(), r.perParamOpt.size());
    std::printf("   whole step      fused        %8.3f ms  (range %s ms, %zu reps)\n",
                fw * 1e3, range(r.fusedWhole, 1e3).c_str(), r.fusedWhole.size());
    std::printf("   whole step      per param    %8.3f ms  (range %s ms, %zu reps)\n",
                pw * 1e3, range(r.perParamWhole, 1e3).c_str(), r.perParamWhole.size());
    std::printf("   per param / fused: optimizer_step %.3fx, whole step %.3fx\n", po / fo,
                pw / fw);
  }
  for (const FusedResult &r : results)
    if (!r.identical)
      return 1;
  return 0;
}

} // namespace mfsdp::bench

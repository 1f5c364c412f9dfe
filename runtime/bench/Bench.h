//===- Bench.h - What mfsdp-bench-runtime's parts share ---------*- C++ -*-===//
//
// The timing helpers (warm-up, repetitions between barriers, medians), the
// runtime helpers (a loaded runtime, a ZeRO-3 plan, its memory plan) and
// each part's entry point; RuntimeBench.cpp says what each part measures.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_RUNTIME_BENCH_BENCH_H
#define MFSDP_RUNTIME_BENCH_BENCH_H

#include "mfsdp/planner/OwnerAssignment.h"
#include "mfsdp/runtime.h"
#include "mfsdp/runtime/Counters.h"
#include "mfsdp/runtime/HostComm.h"
#include "mfsdp/runtime/Kernels.h"
#include "mfsdp/step/RuntimeMemory.h"

#include <cblas.h>
#include <fcntl.h>
#include <unistd.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace mfsdp::bench {

using namespace mfsdp::rt;

constexpr int kWarmup = 2;
constexpr int kReps = 7;

struct Matrix {
  std::string name;
  int64_t rows, cols;
  int64_t size() const { return rows * cols; }
};

inline std::vector<Matrix> transformer() {
  std::vector<Matrix> ms;
  for (int l = 0; l < 4; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    for (const char *n : {"q", "k", "v", "o"})
      ms.push_back({p + n, 256, 256});
    ms.push_back({p + "gate", 704, 256});
    ms.push_back({p + "up", 704, 256});
    ms.push_back({p + "down", 256, 704});
  }
  return ms;
}

/// FLOPs of `steps` Newton-Schulz iterations: the planner's count.
inline double nsFlops(const Matrix &m, int64_t steps) {
  return mfsdp::planner::newtonSchulzFlops(m.rows, m.cols, steps);
}

inline void fill(float *x, int64_t n, unsigned seed, float scale) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  for (int64_t i = 0; i < n; ++i)
    x[i] = d(gen);
}

inline void die(const char *what) {
  std::fprintf(stderr, "mfsdp-bench-runtime: %s: %s\n", what, HostComm::lastError());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

inline double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Runs `body` kWarmup + kReps times between barriers; returns the slowest
/// rank's time of each timed repetition (on every rank).
template <typename F> std::vector<double> timeReps(F &&body) {
  std::vector<double> out;
  for (int r = 0; r < kWarmup + kReps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    body(r);
    double t = now() - t0;
    double slowest = 0;
    MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (r >= kWarmup)
      out.push_back(slowest);
  }
  return out;
}

inline std::string range(const std::vector<double> &v, double scale) {
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  char buf[64];
  std::snprintf(buf, sizeof(buf), "[%.1f .. %.1f]", *lo * scale, *hi * scale);
  return buf;
}

/// Two rounds of `run(true, reps)` then `run(false, reps)`, interleaved so
/// that drift in the machine's speed hits both; each side's repetitions
/// appended to `withTrue` and `withFalse`.
template <typename Run>
void interleaveRounds(Run &&run, std::vector<double> &withTrue,
                      std::vector<double> &withFalse) {
  for (int round = 0; round < 2; ++round) {
    std::vector<double> a, b;
    run(true, a);
    run(false, b);
    withTrue.insert(withTrue.end(), a.begin(), a.end());
    withFalse.insert(withFalse.end(), b.begin(), b.end());
  }
}

/// Aborts the run when a call failed, naming it and the runtime's error.
inline void checkOk(mfsdp_step *step, mfsdp_status st, const char *what) {
  if (st != MFSDP_OK) {
    std::fprintf(stderr, "mfsdp-bench-runtime: %s: %s\n", what, mfsdp_last_error(step));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/// The runtime of `plan` with every parameter loaded from the same values
/// (each at most 128 x 128).
inline mfsdp_step *createLoaded(const mfsdp_plan &plan) {
  mfsdp_step *step = nullptr;
  checkOk(step, mfsdp_create(&plan, &step), "create");
  std::vector<float> init(128 * 128);
  fill(init.data(), static_cast<int64_t>(init.size()), 11, 0.1f);
  for (int32_t i = 0; i < plan.num_params; ++i)
    checkOk(step, mfsdp_load_param(step, i, init.data()), "load");
  return step;
}

/// A ZeRO-3 plan on `world` dp_shard ranks over `descs` (and `buckets`,
/// if any): AdamW's and Muon's constants of torch's defaults.
inline mfsdp_plan zero3Plan(int world, int32_t units, std::vector<mfsdp_param_desc> &descs,
                            std::vector<mfsdp_bucket> &buckets) {
  mfsdp_plan plan = MFSDP_PLAN_INITIALIZER;
  plan.zero = 3;
  plan.dp_replicate = 1;
  plan.dp_shard = world;
  plan.world = world;
  plan.num_units = units;
  plan.num_params = static_cast<int32_t>(descs.size());
  plan.params = descs.data();
  plan.adamw_lr = 1e-3f;
  plan.adamw_beta1 = 0.9f;
  plan.adamw_beta2 = 0.95f;
  plan.adamw_eps = 1e-8f;
  plan.muon_lr = 0.02f;
  plan.muon_momentum = 0.95f;
  plan.muon_ns_steps = 5;
  plan.num_buckets = static_cast<int32_t>(buckets.size());
  plan.buckets = buckets.empty() ? nullptr : buckets.data();
  return plan;
}

/// The static memory plan of `plan` (the program's lifetimes when it
/// carries the hooks), or the process ends with the reason.
inline mfsdp::step::RuntimeMemoryPlan memoryOf(const mfsdp_plan &plan, int32_t prefetch) {
  mfsdp::step::RuntimeMemoryPlan memory =
      mfsdp::step::planRuntimeMemory(plan, false, 256, prefetch, plan.program);
  if (!memory.error.empty()) {
    std::fprintf(stderr, "mfsdp-bench-runtime: memory plan: %s\n", memory.error.c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return memory;
}

/// `plan` with its static memory plan attached and its hash made; the
/// memory plan lives here, so this must outlive the runtime made on it.
struct Planned {
  mfsdp::step::RuntimeMemoryPlan memory;
  mfsdp_memory_plan view;
  Planned(mfsdp_plan &plan, int32_t prefetch)
      : memory(memoryOf(plan, prefetch)), view(memory.view()) {
    plan.memory = &view;
    plan.hash = mfsdp_plan_hash(&plan);
  }
  Planned(const Planned &) = delete;
  Planned &operator=(const Planned &) = delete;
};

/// Every unit's forward hooks in order (pre_forward, post_forward).
inline void forwardAll(mfsdp_step *step, int32_t units) {
  for (int32_t u = 0; u < units; ++u) {
    checkOk(step, mfsdp_pre_forward(step, u), "pre_forward");
    checkOk(step, mfsdp_post_forward(step, u), "post_forward");
  }
}

/// Every unit's backward hooks, the last unit first; `between(u)` runs
/// between each unit's pre_backward and post_backward (the trainer's work).
template <typename F> void backwardAll(mfsdp_step *step, int32_t units, F &&between) {
  for (int32_t u = units; u-- > 0;) {
    checkOk(step, mfsdp_pre_backward(step, u), "pre_backward");
    between(u);
    checkOk(step, mfsdp_post_backward(step, u), "post_backward");
  }
}

struct BucketResult {
  double bucketedS = 0, perParamS = 0;
  std::vector<double> bucketedReps, perParamReps;
  int64_t params = 0, buckets = 0, bucketCollectives = 0;
};

/// 3. Bucketed collectives against one per parameter (BenchSteps.cpp).
BucketResult benchBuckets(int world);

struct ProgramResult {
  double programS = 0, runtimeS = 0;
  std::vector<double> programReps, runtimeReps;
  int64_t ops = 0;
};

/// 4. A whole step: the compiled program against the one the runtime
/// derives for the plan without a program (BenchSteps.cpp).
ProgramResult benchProgram(int world);

/// `ns`: the two Newton-Schulz forms, rank 0 only (BenchNS.cpp).
int benchNewtonSchulz(int argc, char **argv);

/// `fused`: the fused optimizer step against one kernel per parameter
/// (BenchFused.cpp); 1 if the two paths' parameters differ.
int runFused(int world, int rank);

/// `checkpoint`: mfsdp_save / mfsdp_load against the disk's own bandwidth
/// (BenchCheckpoint.cpp).
int benchCheckpoint(int world, int rank, const char *where, int kRounds);

} // namespace mfsdp::bench

#endif // MFSDP_RUNTIME_BENCH_BENCH_H

//===- RuntimeBench.cpp - Host runtime benchmark: owner-Muon, AdamW -------===//
//
//   mpirun -np 2 mfsdp-bench-runtime [floats-per-array, default 64M]
//   mfsdp-bench-runtime ns [ROWSxCOLS ...]
//   mpirun -np 2 mfsdp-bench-runtime fused
//   mpirun -np 2 mfsdp-bench-runtime checkpoint [DIR, default $TMPDIR or /tmp]
//                                                [ROUNDS, default 7]
//
// Measures the host backend (MPI + OpenBLAS, one BLAS thread per rank) on
// this machine's CPU, wall clock (steady_clock), median of several
// repetitions after a warm-up; every repetition starts and ends with a
// barrier and counts the slowest rank.
//
// 1. One Muon step over a small transformer's matrices (4 layers of q, k, v,
//    o 256x256, gate and up 704x256, down 256x704; 5 Newton-Schulz steps):
//    owner-Muon (owners from the planner's own assignment,
//    planner::assignOwners, balancing Newton-Schulz FLOPs as the compiler
//    does; each rank steps only its own matrices, then all-gather-v of the
//    updated matrices to every rank) against the gathered baseline (row
//    shards of every gradient, all-gathered per matrix, and every rank steps
//    every matrix). Both start from the same state once and must agree.
// 2. The fused AdamW update's bandwidth against a STREAM copy (and memcpy),
//    on every rank at once, each on its own arrays (bytes counted: copy
//    2 x 4 per element, AdamW 7 x 4: reads p, g, m, v, writes p, m, v).
//    The arrays default to 64M floats (256 MiB) so that even the copy's
//    working set is several times any last-level cache.
// 3. Bucketed collectives through the C ABI (mfsdp_bucket): one forward and
//    backward of a ZeRO-3 plan of 8 units, each with 12 row-shard vectors
//    of 2048 floats (norms, biases) and 4 owned 128x128 matrices, with its
//    row shards in one bucket and its owned matrices in another (what
//    mfsdp-bucket-collectives forms without a size limit) against the same
//    plan with one collective per parameter. Hooks only: gathers,
//    unpacking, packing and reductions; no optimizer step.
// 4. A whole step of the plan of 3. (ZeRO-3 with gather prefetch and
//    overlapped reductions) as a compiled program (mfsdp_program: the
//    forward and backward hooks as the compiler lowers a prefetch-1
//    schedule, the optimizer step in landing order) against the runtime's
//    own hook protocol and order.
//
// Prints everything on rank 0.
//
// `fused` runs only the optimizer step's fused kernels against one kernel
// per parameter (mfsdp::rt::setFusedOptimizer): two all-AdamW ZeRO-3 plans
// of 8 units (64 vectors of 1024 floats per unit; 16 vectors of 4096 floats
// and 8 row-shard 512x256 matrices per unit) whose optimizer step is a
// program of one AdamW op per unit; one whole step (zero_grad, forward,
// backward, optimizer step) timed whole and optimizer_step alone, the two
// paths interleaved in four rounds (alternating which runs first); prints the medians, the ratios, the
// kernel calls per step the runtime counted and whether the two paths left
// every parameter bitwise equal (exit 1 if not).
//
// `ns` runs only Newton-Schulz (host::newtonSchulz, 5 steps, fp32 and bf16)
// on one rank with one OpenBLAS thread: the symmetric form (ssyrk for X X^T
// and A A, 3 s^2 l + s^3 FLOPs per step) against the three-GEMM form
// (4 s^2 l + 2 s^3) on square, tall and wide matrices (1024x1024, 2048x512,
// 512x2048, 256x704 by default), the two forms timed alternately in each
// repetition; prints each form's median, the time ratio syrk / GEMM, the
// FLOP ratio and the largest difference between the two forms' outputs.
//
// `checkpoint` saves and loads (mfsdp_save, mfsdp_load) a ZeRO-3 AdamW plan
// of 32 row-sharded 1024x1024 matrices (masters and both states, 403 MB)
// into DIR, and in the same rounds has every rank write (write + fsync)
// and read its share of the same bytes in a file of its own: the disk's
// bandwidth beside the checkpoint's, the page cache dropped before each
// read (posix_fadvise); three rounds, medians of the slowest rank's time,
// and the two ratios.
//
//===----------------------------------------------------------------------===//
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

using namespace mfsdp::rt;

namespace {

constexpr int kWarmup = 2;
constexpr int kReps = 7;

struct Matrix {
  std::string name;
  int64_t rows, cols;
  int64_t size() const { return rows * cols; }
};

std::vector<Matrix> transformer() {
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
double nsFlops(const Matrix &m, int64_t steps) {
  return mfsdp::planner::newtonSchulzFlops(m.rows, m.cols, steps);
}

void fill(float *x, int64_t n, unsigned seed, float scale) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  for (int64_t i = 0; i < n; ++i)
    x[i] = d(gen);
}

void die(const char *what) {
  std::fprintf(stderr, "mfsdp-bench-runtime: %s: %s\n", what, HostComm::lastError());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
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

std::string range(const std::vector<double> &v, double scale) {
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  char buf[64];
  std::snprintf(buf, sizeof(buf), "[%.1f .. %.1f]", *lo * scale, *hi * scale);
  return buf;
}

//===-- 1. Muon: owners against the gathered baseline ----------------------===//

struct MuonResult {
  double ownerS, baselineS, maxDiff;
  std::vector<double> ownerReps, baselineReps;
};

MuonResult benchMuon(HostComm &comm, const std::vector<Matrix> &ms,
                     const MuonHyper &h, std::vector<int> &owner,
                     std::vector<double> &load) {
  const int W = comm.size(), me = comm.rank();
  const size_t M = ms.size();

  // Owners as the compiler assigns them (mfsdp-assign-layouts calls the
  // same function): Newton-Schulz FLOPs as the cost, the matrix as the
  // memory and the bytes each owner sends.
  std::vector<mfsdp::planner::OwnerItem> items(M);
  for (size_t i = 0; i < M; ++i) {
    items[i].cost = nsFlops(ms[i], h.ns.steps);
    items[i].memory = items[i].bytes = 4.0 * double(ms[i].size());
    items[i].elements = ms[i].size();
    items[i].shapeKey = ms[i].rows * 100003 + ms[i].cols;
  }
  mfsdp::planner::OwnerOptions oo;
  oo.world = W;
  mfsdp::planner::OwnerResult assigned = mfsdp::planner::assignOwners(items, oo);
  owner.assign(M, 0);
  load.assign(W, 0.0);
  for (size_t i = 0; i < M; ++i) {
    owner[i] = int(assigned.owner[i]);
    load[owner[i]] += items[i].cost;
  }

  // The same initial state on every rank: parameters, reduced gradients,
  // zero momentum.
  int64_t total = 0;
  std::vector<int64_t> modelOff(M);
  for (size_t i = 0; i < M; ++i) {
    modelOff[i] = total;
    total += ms[i].size();
  }
  std::vector<float> initParam(total), initGrad(total);
  for (size_t i = 0; i < M; ++i) {
    fill(initParam.data() + modelOff[i], ms[i].size(), 1000 + unsigned(i), 0.05f);
    fill(initGrad.data() + modelOff[i], ms[i].size(), 2000 + unsigned(i), 0.01f);
  }
  int64_t scratchFloats = 0;
  for (const Matrix &m : ms)
    scratchFloats = std::max(scratchFloats,
                             m.size() + host::newtonSchulzWorkspace(m.rows, m.cols) /
                                            int64_t(sizeof(float)));
  std::vector<float> scratch(scratchFloats);

  // Owner-Muon: every rank keeps the masters, momentum and reduced
  // gradients of the matrices it owns, packed in model order; the gathered
  // parameters are laid out by owner (rank 0's matrices, then rank 1's, ...).
  std::vector<int64_t> counts(W, 0), ownerOff(M), segment(W, 0);
  for (size_t i = 0; i < M; ++i)
    counts[owner[i]] += ms[i].size();
  for (int r = 1; r < W; ++r)
    segment[r] = segment[r - 1] + counts[r - 1];
  {
    std::vector<int64_t> next = segment;
    for (size_t i = 0; i < M; ++i) {
      ownerOff[i] = next[owner[i]];
      next[owner[i]] += ms[i].size();
    }
  }
  std::vector<float> master(counts[me]), ograd(counts[me]), obuf(counts[me], 0.f),
      gathered(total);
  auto resetOwner = [&] {
    for (size_t i = 0; i < M; ++i)
      if (owner[i] == me) {
        int64_t local = ownerOff[i] - segment[me];
        std::memcpy(master.data() + local, initParam.data() + modelOff[i],
                    sizeof(float) * ms[i].size());
        std::memcpy(ograd.data() + local, initGrad.data() + modelOff[i],
                    sizeof(float) * ms[i].size());
      }
    std::fill(obuf.begin(), obuf.end(), 0.f);
  };
  auto ownerStep = [&](int) {
    for (size_t i = 0; i < M; ++i) {
      if (owner[i] != me)
        continue;
      int64_t local = ownerOff[i] - segment[me];
      host::muonStep(master.data() + local, ograd.data() + local,
                     obuf.data() + local, ms[i].rows, ms[i].cols, h,
                     scratch.data());
    }
    if (comm.allGatherV(master.data(), gathered.data(), counts))
      die("allGatherV");
    if (comm.barrier())
      die("barrier");
  };

  // Gathered baseline: every rank keeps a row shard (torch.chunk over rows)
  // of every gradient, gathers each matrix's full gradient and steps every
  // matrix, with replicated parameters and momentum.
  std::vector<std::vector<int64_t>> shardCounts(M, std::vector<int64_t>(W, 0));
  std::vector<int64_t> shardOff(M);
  int64_t shardTotal = 0;
  for (size_t i = 0; i < M; ++i) {
    int64_t chunk = (ms[i].rows + W - 1) / W;
    for (int r = 0; r < W; ++r) {
      int64_t lo = std::min(ms[i].rows, r * chunk),
              hi = std::min(ms[i].rows, (r + 1) * chunk);
      shardCounts[i][r] = (hi - lo) * ms[i].cols;
    }
    shardOff[i] = shardTotal;
    shardTotal += shardCounts[i][me];
  }
  std::vector<float> gshard(shardTotal), bparam(total), bbuf(total, 0.f),
      bgrad(total);
  auto resetBaseline = [&] {
    for (size_t i = 0; i < M; ++i) {
      int64_t chunk = (ms[i].rows + W - 1) / W;
      int64_t lo = std::min(ms[i].rows, me * chunk);
      std::memcpy(gshard.data() + shardOff[i],
                  initGrad.data() + modelOff[i] + lo * ms[i].cols,
                  sizeof(float) * shardCounts[i][me]);
    }
    bparam = initParam;
    std::fill(bbuf.begin(), bbuf.end(), 0.f);
  };
  auto baselineStep = [&](int) {
    for (size_t i = 0; i < M; ++i) {
      if (comm.allGatherV(gshard.data() + shardOff[i], bgrad.data() + modelOff[i],
                          shardCounts[i]))
        die("allGatherV");
      host::muonStep(bparam.data() + modelOff[i], bgrad.data() + modelOff[i],
                     bbuf.data() + modelOff[i], ms[i].rows, ms[i].cols, h,
                     scratch.data());
    }
    if (comm.barrier())
      die("barrier");
  };

  // Correctness: one step of each from the same state gives the same
  // parameters on every rank.
  resetOwner();
  resetBaseline();
  ownerStep(0);
  baselineStep(0);
  double diff = 0;
  for (size_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < ms[i].size(); ++k)
      diff = std::max(diff, double(std::fabs(gathered[ownerOff[i] + k] -
                                             bparam[modelOff[i] + k])));
  double maxDiff = 0;
  MPI_Allreduce(&diff, &maxDiff, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

  // Interleave the two so that drift in the machine's speed hits both.
  MuonResult res{};
  res.maxDiff = maxDiff;
  for (int round = 0; round < 2; ++round) {
    auto o = timeReps(ownerStep);
    auto b = timeReps(baselineStep);
    res.ownerReps.insert(res.ownerReps.end(), o.begin(), o.end());
    res.baselineReps.insert(res.baselineReps.end(), b.begin(), b.end());
  }
  res.ownerS = median(res.ownerReps);
  res.baselineS = median(res.baselineReps);
  return res;
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
void checkOk(mfsdp_step *step, mfsdp_status st, const char *what) {
  if (st != MFSDP_OK) {
    std::fprintf(stderr, "mfsdp-bench-runtime: %s: %s\n", what, mfsdp_last_error(step));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/// The runtime of `plan` with every parameter loaded from the same values
/// (each at most 128 x 128).
mfsdp_step *createLoaded(const mfsdp_plan &plan) {
  mfsdp_step *step = nullptr;
  checkOk(step, mfsdp_create(&plan, &step), "create");
  std::vector<float> init(128 * 128);
  fill(init.data(), static_cast<int64_t>(init.size()), 11, 0.1f);
  for (int32_t i = 0; i < plan.num_params; ++i)
    checkOk(step, mfsdp_load_param(step, i, init.data()), "load");
  return step;
}

//===-- 2. AdamW bandwidth against a STREAM copy ---------------------------===//

/// STREAM's copy kernel, b[i] = a[i]. Written with SSE2 loads and stores so
/// that the compiler keeps it a loop rather than a call to memcpy (which is
/// timed separately).
__attribute__((noinline)) void streamCopy(const float *__restrict a,
                                          float *__restrict b, int64_t n) {
  int64_t i = 0;
#if defined(__SSE2__)
  for (; i + 4 <= n; i += 4)
    _mm_storeu_ps(b + i, _mm_loadu_ps(a + i));
#endif
  for (; i < n; ++i)
    b[i] = a[i];
}

struct BandwidthResult {
  double copyGBs, memcpyGBs, adamwGBs; // this rank's medians
};

BandwidthResult benchAdamW(int64_t n) {
  std::vector<float> a(n), b(n), p(n), g(n), m(n), v(n);
  fill(a.data(), n, 7, 1.f);
  fill(p.data(), n, 8, 0.05f);
  fill(g.data(), n, 9, 0.01f);
  std::fill(b.begin(), b.end(), 0.f);
  std::fill(m.begin(), m.end(), 0.f);
  std::fill(v.begin(), v.end(), 0.f);
  AdamWHyper h;
  std::vector<double> copyT, memcpyT, adamT;
  // Every rank runs at once between barriers and times its own kernel; the
  // three kernels are interleaved so drift hits all of them.
  int64_t step = 0;
  auto timed = [](auto &&f) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    f();
    return now() - t0;
  };
  for (int r = 0; r < kWarmup + kReps; ++r) {
    double tc = timed([&] { streamCopy(a.data(), b.data(), n); });
    double tm = timed([&] { std::memcpy(b.data(), a.data(), sizeof(float) * n); });
    double ta = timed([&] {
      host::adamwStep(p.data(), g.data(), m.data(), v.data(), n, h, ++step);
    });
    if (r >= kWarmup) {
      copyT.push_back(tc);
      memcpyT.push_back(tm);
      adamT.push_back(ta);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // Keep the results observable.
  volatile float sink = b[n / 2] + p[n / 3];
  (void)sink;
  double copyBytes = 2.0 * 4 * double(n), adamBytes = 7.0 * 4 * double(n);
  return {copyBytes / median(copyT) / 1e9, copyBytes / median(memcpyT) / 1e9,
          adamBytes / median(adamT) / 1e9};
}

/// A ZeRO-3 plan on `world` dp_shard ranks over `descs` (and `buckets`,
/// if any): AdamW's and Muon's constants of torch's defaults.
mfsdp_plan zero3Plan(int world, int32_t units, std::vector<mfsdp_param_desc> &descs,
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
mfsdp::step::RuntimeMemoryPlan memoryOf(const mfsdp_plan &plan, int32_t prefetch) {
  mfsdp::step::RuntimeMemoryPlan memory =
      mfsdp::step::planRuntimeMemory(plan, false, 256, prefetch, plan.program);
  if (!memory.error.empty()) {
    std::fprintf(stderr, "mfsdp-bench-runtime: memory plan: %s\n", memory.error.c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return memory;
}

//===-- 3. Bucketed collectives against one per parameter ------------------===//

struct BucketResult {
  double bucketedS = 0, perParamS = 0;
  std::vector<double> bucketedReps, perParamReps;
  int64_t params = 0, buckets = 0, bucketCollectives = 0;
};

BucketResult benchBuckets(int world) {
  constexpr int32_t kUnits = 8, kVectors = 12, kMatrices = 4;
  std::vector<std::string> names;
  std::vector<mfsdp_param_desc> descs;
  std::vector<std::vector<int32_t>> rows(kUnits), owned(kUnits);
  for (int32_t u = 0; u < kUnits; ++u) {
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
  }
  for (std::vector<int32_t> &o : owned) // owner buckets go by owner
    std::stable_sort(o.begin(), o.end(),
                     [&](int32_t a, int32_t b) { return descs[a].owner < descs[b].owner; });
  std::vector<mfsdp_bucket> buckets;
  for (int32_t u = 0; u < kUnits; ++u) {
    buckets.push_back({u, MFSDP_ROW_SHARD, kVectors, rows[u].data()});
    buckets.push_back({u, MFSDP_OWNER, kMatrices, owned[u].data()});
  }
  BucketResult out;
  out.params = static_cast<int64_t>(descs.size());
  out.buckets = static_cast<int64_t>(buckets.size());
  auto run = [&](bool bucketed, std::vector<double> &reps) {
    std::vector<mfsdp_bucket> none;
    mfsdp_plan plan = zero3Plan(world, kUnits, descs, bucketed ? buckets : none);
    const mfsdp::step::RuntimeMemoryPlan memory = memoryOf(plan, /*prefetch=*/0);
    const mfsdp_memory_plan view = memory.view();
    plan.memory = &view;
    plan.hash = mfsdp_plan_hash(&plan);
    mfsdp_step *step = createLoaded(plan);
    auto check = [&](mfsdp_status st, const char *what) { checkOk(step, st, what); };
    reps = timeReps([&](int) {
      check(mfsdp_zero_grad(step), "zero_grad");
      for (int32_t u = 0; u < kUnits; ++u) {
        check(mfsdp_pre_forward(step, u), "pre_forward");
        check(mfsdp_post_forward(step, u), "post_forward");
      }
      for (int32_t u = kUnits; u-- > 0;) {
        check(mfsdp_pre_backward(step, u), "pre_backward");
        check(mfsdp_post_backward(step, u), "post_backward");
      }
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

/// `mfsdp-bench-runtime ns`: the two Newton-Schulz forms, rank 0 only.
int benchNewtonSchulz(int argc, char **argv) {
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int i = 2; i < argc; ++i) {
    long long r = 0, c = 0;
    char tail = 0;
    if (std::sscanf(argv[i], "%lldx%lld%c", &r, &c, &tail) != 2 || r < 1 || c < 1 ||
        r > 16384 || c > 16384) {
      std::fprintf(stderr, "mfsdp-bench-runtime: ns: expected ROWSxCOLS (each 1 to "
                           "16384), got '%s'\n", argv[i]);
      return 2;
    }
    shapes.push_back({r, c});
  }
  if (shapes.empty())
    shapes = {{1024, 1024}, {2048, 512}, {512, 2048}, {256, 704}};
  std::printf("mfsdp-bench-runtime ns: host Newton-Schulz (OpenBLAS, 1 thread), "
              "measured on this host's CPU; wall clock, median of %d timed "
              "repetitions after %d warm-up, the two forms alternating\n\n",
              kReps, kWarmup);
  std::printf("%-11s %-5s %11s %11s %12s %11s %10s\n", "shape", "prec", "syrk ms",
              "gemm ms", "syrk / gemm", "FLOP ratio", "max diff");
  for (auto [rows, cols] : shapes) {
    std::vector<float> g(rows * cols), syrk(rows * cols), gemm(rows * cols);
    fill(g.data(), rows * cols, 7, 0.01f);
    std::vector<float> ws(host::newtonSchulzWorkspace(rows, cols) / sizeof(float));
    for (NsPrecision prec : {NsPrecision::FP32, NsPrecision::BF16}) {
      NewtonSchulzHyper h;
      h.precision = prec;
      std::vector<double> ts, tg;
      for (int r = 0; r < kWarmup + kReps; ++r) {
        for (int k = 0; k < 2; ++k) {
          // Alternate which form goes first, so neither always runs warm.
          const bool isSyrk = (k == 0) == (r % 2 == 0);
          h.form = isSyrk ? NsForm::Syrk : NsForm::Gemm;
          double t0 = now();
          host::newtonSchulz(g.data(), isSyrk ? syrk.data() : gemm.data(), rows, cols,
                             h, ws.data());
          double t = now() - t0;
          if (r >= kWarmup)
            (isSyrk ? ts : tg).push_back(t);
        }
      }
      double diff = 0, scale = 0;
      for (int64_t i = 0; i < rows * cols; ++i) {
        diff = std::max(diff, double(std::fabs(syrk[i] - gemm[i])));
        scale = std::max(scale, double(std::fabs(gemm[i])));
      }
      const double sMs = median(ts) * 1e3, gMs = median(tg) * 1e3;
      char shape[32];
      std::snprintf(shape, sizeof(shape), "%lldx%lld", (long long)rows, (long long)cols);
      std::printf("%-11s %-5s %11.2f %11.2f %11.3fx %10.3fx %10.2g\n", shape,
                  prec == NsPrecision::FP32 ? "fp32" : "bf16", sMs, gMs, sMs / gMs,
                  mfsdp::planner::newtonSchulzFlops(rows, cols, h.steps) /
                      mfsdp::planner::newtonSchulzGemmFlops(rows, cols, h.steps),
                  diff / scale);
    }
  }
  std::printf("\n(max diff: the largest |syrk - gemm| over the largest |gemm|)\n");
  return 0;
}

//===-- 4. A whole step: the compiled program against the runtime's order ===//

struct ProgramResult {
  double programS = 0, runtimeS = 0;
  std::vector<double> programReps, runtimeReps;
  int64_t ops = 0;
};

/// The plan of 3. (8 units, each 12 AdamW row-shard vectors of 2048 floats
/// in one bucket and 4 owned 128x128 Muon matrices in another), ZeRO-3 with
/// gather prefetch and overlapped reductions (memory plan prefetch 1). One
/// whole step: zero_grad, forward and backward (the trainer's gradients
/// written into every gradient view), optimizer step. With the program:
/// the optimizer step as the compiler lowers a landing-order schedule of
/// one group per unit (the last unit first, each owner's Muon on its rank,
/// unit 0's kernels after the wait for its reduction, which the others
/// overlap); without: the runtime's own order (every reduction waited for
/// first, then every parameter in table order).
/// The forward and backward hooks of `units` units as step::lowerStepProgram
/// lowers a ZeRO-3 schedule with prefetch 1 (one unit per gather group):
/// each gather started one unit ahead, released in post_forward, each
/// reduction waited for in the next post_backward.
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
        unitOp(MFSDP_PROGRAM_PLACE_GRADS, u);
        break;
      default:
        if (u + 1 < units)
          unitOp(MFSDP_PROGRAM_WAIT_REDUCTION, u + 1);
        unitOp(MFSDP_PROGRAM_START_REDUCTION, u);
        break;
      }
      hooks.push_back({h, u, first, static_cast<int32_t>(ops.size()) - first});
    }
}

ProgramResult benchProgram(int world) {
  constexpr int32_t kUnits = 8, kVectors = 12, kMatrices = 4;
  std::vector<mfsdp_param_desc> descs;
  std::vector<std::vector<int32_t>> rows(kUnits), owned(kUnits);
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
  for (std::vector<int32_t> &o : owned)
    std::stable_sort(o.begin(), o.end(),
                     [&](int32_t a, int32_t b) { return descs[a].owner < descs[b].owner; });
  std::vector<mfsdp_bucket> buckets;
  for (int32_t u = 0; u < kUnits; ++u) {
    buckets.push_back({u, MFSDP_ROW_SHARD, kVectors, rows[u].data()});
    buckets.push_back({u, MFSDP_OWNER, kMatrices, owned[u].data()});
  }
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
    const mfsdp::step::RuntimeMemoryPlan memory = memoryOf(plan, /*prefetch=*/1);
    const mfsdp_memory_plan view = memory.view();
    plan.memory = &view;
    plan.hash = mfsdp_plan_hash(&plan);
    mfsdp_step *step = createLoaded(plan);
    auto check = [&](mfsdp_status st, const char *what) { checkOk(step, st, what); };
    reps = timeReps([&](int) {
      check(mfsdp_zero_grad(step), "zero_grad");
      for (int32_t u = 0; u < kUnits; ++u) {
        check(mfsdp_pre_forward(step, u), "pre_forward");
        check(mfsdp_post_forward(step, u), "post_forward");
      }
      for (int32_t u = kUnits; u-- > 0;) {
        check(mfsdp_pre_backward(step, u), "pre_backward");
        for (const std::vector<int32_t> *members : {&rows[u], &owned[u]})
          for (int32_t p : *members) {
            DLTensor g;
            check(mfsdp_grad_view(step, p, &g), "grad_view");
            fill(static_cast<float *>(g.data), descs[p].rows * descs[p].cols,
                 13 + static_cast<unsigned>(p), 0.01f);
          }
        check(mfsdp_post_backward(step, u), "post_backward");
      }
      check(mfsdp_optimizer_step(step), "optimizer_step");
    });
    mfsdp_destroy(step);
  };
  interleaveRounds(run, out.programReps, out.runtimeReps);
  out.programS = median(out.programReps);
  out.runtimeS = median(out.runtimeReps);
  return out;
}

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
    plan.program = &program; // the optimizer step only: the hooks' protocol
    const mfsdp::step::RuntimeMemoryPlan memory = memoryOf(plan, /*prefetch=*/1);
    const mfsdp_memory_plan view = memory.view();
    plan.memory = &view;
    plan.hash = mfsdp_plan_hash(&plan);
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
      for (int32_t u = 0; u < kUnits; ++u) {
        check(mfsdp_pre_forward(step, u), "pre_forward");
        check(mfsdp_post_forward(step, u), "post_forward");
      }
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

//===-- Checkpoints on disk against the disk's own bandwidth ---------------===//

/// Writes `bytes` to `path` with write() and fsync(), then drops its pages
/// from the page cache (so that a read comes from the disk); seconds.
double writeFileSynced(const std::string &path, const std::vector<char> &bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    die("cannot create the bandwidth file");
  const double t0 = now();
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
    if (n <= 0)
      die("cannot write the bandwidth file");
    at += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0)
    die("cannot fsync the bandwidth file");
  const double t = now() - t0;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  return t;
}

/// Reads `path` whole; seconds.
double readFile(const std::string &path, std::vector<char> &into) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    die("cannot open the bandwidth file");
  const double t0 = now();
  size_t at = 0;
  while (at < into.size()) {
    const ssize_t n = ::pread(fd, into.data() + at, into.size() - at, static_cast<off_t>(at));
    if (n <= 0)
      die("cannot read the bandwidth file");
    at += static_cast<size_t>(n);
  }
  const double t = now() - t0;
  ::close(fd);
  return t;
}

/// Drops the pages of every file in `dir` from the page cache.
void dropPages(const std::string &dir) {
  for (const auto &e : std::filesystem::directory_iterator(dir)) {
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd >= 0) {
      ::fdatasync(fd);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
  }
}

int benchCheckpoint(int world, int rank, const char *where, int kRounds) {
  const bool root = rank == 0;
  constexpr int32_t kUnits = 8, kPerUnit = 4;
  constexpr int64_t kRows = 1024, kCols = 1024;
  std::vector<std::string> names;
  std::vector<mfsdp_param_desc> descs;
  for (int32_t u = 0; u < kUnits; ++u)
    for (int32_t j = 0; j < kPerUnit; ++j)
      names.push_back("u" + std::to_string(u) + ".w" + std::to_string(j));
  for (int32_t i = 0; i < kUnits * kPerUnit; ++i) {
    mfsdp_param_desc d{};
    d.name = names[i].c_str();
    d.rows = kRows;
    d.cols = kCols;
    d.unit = i / kPerUnit;
    d.placement = MFSDP_ROW_SHARD;
    d.optimizer = MFSDP_OPT_ADAMW;
    descs.push_back(d);
  }
  std::vector<mfsdp_bucket> noBuckets;
  mfsdp_plan plan = zero3Plan(world, kUnits, descs, noBuckets);
  const mfsdp::step::RuntimeMemoryPlan memory = memoryOf(plan, 0);
  const mfsdp_memory_plan memoryView = memory.view();
  plan.memory = &memoryView;
  plan.hash = mfsdp_plan_hash(&plan);
  mfsdp_step *step = nullptr;
  checkOk(step, mfsdp_create(&plan, &step), "create");
  std::vector<float> init(kRows * kCols);
  for (int32_t i = 0; i < plan.num_params; ++i) {
    fill(init.data(), kRows * kCols, 100 + i, 0.1f);
    checkOk(step, mfsdp_load_param(step, i, init.data()), "load");
  }
  // Every rank's shards of the masters and both AdamW states.
  const int64_t perRank = 3 * int64_t(plan.num_params) * kRows * kCols / world * 4;
  long long pid = ::getpid(); // rank 0's: one directory for all ranks
  MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  const std::string base = std::string(where) + "/mfsdp-bench-checkpoint-" + std::to_string(pid);
  std::vector<char> bytes(static_cast<size_t>(perRank));
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>(i * 2654435761u >> 13);
  if (root)
    std::filesystem::create_directories(base);
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<double> saveT, loadT, writeT, readT;
  int64_t checkpointBytes = 0;
  auto slowest = [](double t) {
    double m = 0;
    MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
  };
  for (int round = 0; round < kRounds; ++round) {
    // The disk alone: each rank writes and reads the same bytes in a file
    // of its own, at the same time as the others.
    const std::string raw = base + "/raw-" + std::to_string(rank);
    MPI_Barrier(MPI_COMM_WORLD);
    writeT.push_back(slowest(writeFileSynced(raw, bytes)));
    std::vector<char> back(bytes.size());
    MPI_Barrier(MPI_COMM_WORLD);
    readT.push_back(slowest(readFile(raw, back)));
    if (back != bytes)
      die("the bandwidth file read back differs");
    std::filesystem::remove(raw);
    // The checkpoint.
    const std::string dir = base + "/ck-" + std::to_string(round);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    checkOk(step, mfsdp_save(step, dir.c_str(), "{}"), "save");
    saveT.push_back(slowest(now() - t0));
    if (root) {
      checkpointBytes = 0;
      for (const auto &e : std::filesystem::directory_iterator(dir))
        checkpointBytes += static_cast<int64_t>(e.file_size());
      dropPages(dir);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = now();
    checkOk(step, mfsdp_load(step, dir.c_str(), nullptr, 0), "load");
    loadT.push_back(slowest(now() - t0));
    MPI_Barrier(MPI_COMM_WORLD);
    if (root)
      std::filesystem::remove_all(dir);
  }
  mfsdp_destroy(step);
  if (root) {
    std::filesystem::remove_all(base);
    const double mb = double(checkpointBytes) / 1e6;
    const double rawMb = double(perRank) * world / 1e6;
    const double ws = median(writeT), rs = median(readT), ss = median(saveT),
                 ls = median(loadT);
    std::printf("mfsdp-bench-runtime checkpoint: host backend, %d ranks, into %s\n"
                "%d AdamW matrices %lldx%lld row-sharded (ZeRO-3): masters, exp_avg and "
                "exp_avg_sq, %.1f MB of checkpoint (%.1f MB of data); median of %d "
                "rounds, the slowest rank's time\n",
                world, where, plan.num_params, (long long)kRows, (long long)kCols, mb,
                rawMb, kRounds);
    std::printf("   disk write (write + fsync, every rank its own file)  %8.3f s  "
                "%8.1f MB/s  (range %s s)\n",
                ws, rawMb / ws, range(writeT, 1).c_str());
    std::printf("   mfsdp_save                                           %8.3f s  "
                "%8.1f MB/s  (range %s s)\n",
                ss, mb / ss, range(saveT, 1).c_str());
    std::printf("   disk read (pages dropped first)                      %8.3f s  "
                "%8.1f MB/s  (range %s s)\n",
                rs, rawMb / rs, range(readT, 1).c_str());
    std::printf("   mfsdp_load (pages dropped first)                     %8.3f s  "
                "%8.1f MB/s  (range %s s)\n",
                ls, mb / ls, range(loadT, 1).c_str());
    std::printf("   save / disk write: %.2f of the bandwidth; load / disk read: %.2f\n",
                (mb / ss) / (rawMb / ws), (mb / ls) / (rawMb / rs));
    std::printf("   each round (s): disk write, save, disk read, load\n");
    for (int r = 0; r < kRounds; ++r)
      std::printf("     %d   %.3f  %.3f  %.3f  %.3f\n", r + 1, writeT[r], saveT[r],
                  readT[r], loadT[r]);
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  openblas_set_num_threads(1);
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc == 2 && std::strcmp(argv[1], "fused") == 0) {
    int rc = runFused(world, rank);
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return rc;
  }
  if (argc >= 2 && std::strcmp(argv[1], "checkpoint") == 0) {
    const char *tmp = std::getenv("TMPDIR");
    const int rounds = argc > 3 ? std::atoi(argv[3]) : 7;
    if (rounds < 1 || rounds > 1000) {
      if (rank == 0)
        std::fprintf(stderr, "mfsdp-bench-runtime checkpoint: ROUNDS must be 1..1000\n");
      MPI_Finalize();
      return 2;
    }
    int rc = benchCheckpoint(world, rank, argc > 2 ? argv[2] : tmp ? tmp : "/tmp", rounds);
    MPI_Finalize();
    return rc;
  }
  if (argc > 1 && std::strcmp(argv[1], "ns") == 0) {
    int rc = rank == 0 ? benchNewtonSchulz(argc, argv) : 0;
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return rc;
  }
  int64_t adamN = int64_t(64) << 20;
  if (argc > 1) {
    char *end = nullptr;
    long long n = std::strtoll(argv[1], &end, 10);
    if (argc > 2 || !end || *end || n < 1024) {
      if (rank == 0)
        std::fprintf(stderr, "mfsdp-bench-runtime: expected one optional argument, the "
                             "AdamW array length in floats (>= 1024), or 'ns' and "
                             "shapes, got '%s'\n",
                     argv[argc > 2 ? 2 : 1]);
      MPI_Finalize();
      return 2;
    }
    adamN = n;
  }

  std::string error;
  HostComm *comm = HostComm::createMpi({{"dp", world}}, "dp", error);
  if (!comm) {
    std::fprintf(stderr, "mfsdp-bench-runtime: %s\n", error.c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const bool root = rank == 0;
  if (root)
    std::printf("mfsdp-bench-runtime: host backend (MPI + OpenBLAS), measured "
                "on this host's CPU, not a GPU\n"
                "%d ranks, 1 OpenBLAS thread per rank; wall clock, median of "
                "the timed repetitions (%d warm-up, then %d timed, per round)\n\n",
                world, kWarmup, kReps);

  // 1. Muon.
  std::vector<Matrix> ms = transformer();
  MuonHyper h; // 5 Newton-Schulz steps, Nesterov, match_rms_adamw
  std::vector<int> owner;
  std::vector<double> load;
  MuonResult mr = benchMuon(*comm, ms, h, owner, load);
  if (root) {
    double flops = 0, elems = 0;
    for (const Matrix &m : ms) {
      flops += nsFlops(m, h.ns.steps);
      elems += double(m.size());
    }
    double maxLoad = *std::max_element(load.begin(), load.end());
    std::printf("1. Muon step (measured, host CPU): %zu matrices, %.2f M "
                "elements, %lld Newton-Schulz steps, %.1f GFLOP of "
                "Newton-Schulz in all\n",
                ms.size(), elems / 1e6, (long long)h.ns.steps, flops / 1e9);
    std::printf("   owners by planner::assignOwners: max/mean Newton-Schulz load %.3f (",
                maxLoad / (flops / world));
    for (int r = 0; r < world; ++r) {
      int count = int(std::count(owner.begin(), owner.end(), r));
      std::printf("%srank %d: %d matrices, %.2f GFLOP", r ? "; " : "", r, count,
                  load[r] / 1e9);
    }
    std::printf(")\n");
    std::printf("   owner vs baseline after one step from the same state: max "
                "|diff| %.3g\n",
                mr.maxDiff);
    std::printf("   owner-Muon (own matrices + all-gather-v)   %8.1f ms  "
                "(range %s ms, %zu reps)\n",
                mr.ownerS * 1e3, range(mr.ownerReps, 1e3).c_str(),
                mr.ownerReps.size());
    std::printf("   gathered baseline (all-gather + all)       %8.1f ms  "
                "(range %s ms, %zu reps)\n",
                mr.baselineS * 1e3, range(mr.baselineReps, 1e3).c_str(),
                mr.baselineReps.size());
    double ratio = mr.baselineS / mr.ownerS;
    std::printf("   baseline / owner: %.2fx (target >= 1.8: %s)\n\n", ratio,
                ratio >= 1.8 ? "met" : "NOT met");
  }

  // 2. AdamW against copy.
  BandwidthResult br = benchAdamW(adamN);
  std::vector<double> all(3 * world);
  double mine[3] = {br.copyGBs, br.memcpyGBs, br.adamwGBs};
  MPI_Gather(mine, 3, MPI_DOUBLE, all.data(), 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (root) {
    std::printf("2. Fused AdamW vs STREAM copy (measured, host CPU): %lld "
                "floats (%.0f MiB) per array, all %d ranks at once, each on "
                "its own arrays\n",
                (long long)adamN, double(adamN) * 4 / (1 << 20), world);
    std::printf("   bytes counted: copy 8 B/element, AdamW 28 B/element "
                "(reads p, g, m, v; writes p, m, v)\n");
    double copySum = 0, memcpySum = 0, adamSum = 0;
    for (int r = 0; r < world; ++r) {
      const double *x = &all[3 * r];
      std::printf("   rank %d: STREAM copy %6.2f GB/s, memcpy %6.2f GB/s, "
                  "AdamW %6.2f GB/s\n",
                  r, x[0], x[1], x[2]);
      copySum += x[0];
      memcpySum += x[1];
      adamSum += x[2];
    }
    std::printf("   all ranks: STREAM copy %.2f GB/s, memcpy %.2f GB/s, AdamW "
                "%.2f GB/s\n",
                copySum, memcpySum, adamSum);
    double ratio = adamSum / copySum;
    std::printf("   AdamW / STREAM copy: %.2f (target >= 0.70: %s); AdamW / "
                "memcpy: %.2f\n",
                ratio, ratio >= 0.70 ? "met" : "NOT met", adamSum / memcpySum);
  }

  // 3. Buckets.
  BucketResult bk = benchBuckets(world);
  if (root) {
    const int64_t reps = kWarmup + kReps; // the last bucketed run's counters
    std::printf("\n3. Bucketed collectives through the C ABI (measured, host CPU): ZeRO-3, "
                "%lld parameters in 8 units (per unit 12 row-shard vectors of 2048 "
                "floats, 4 owned 128x128 matrices), %lld buckets; one forward and "
                "backward (hooks only)\n",
                (long long)bk.params, (long long)bk.buckets);
    std::printf("   collectives per step: bucketed %lld (counted by the runtime), one "
                "per parameter %lld (3 per parameter)\n",
                (long long)(bk.bucketCollectives / reps), (long long)(3 * bk.params));
    std::printf("   bucketed               %8.3f ms  (range %s ms, %zu reps)\n",
                bk.bucketedS * 1e3, range(bk.bucketedReps, 1e3).c_str(),
                bk.bucketedReps.size());
    std::printf("   one per parameter      %8.3f ms  (range %s ms, %zu reps)\n",
                bk.perParamS * 1e3, range(bk.perParamReps, 1e3).c_str(),
                bk.perParamReps.size());
    std::printf("   one per parameter / bucketed: %.2fx\n", bk.perParamS / bk.bucketedS);
  }

  // 4. The step as a compiled program.
  ProgramResult pg = benchProgram(world);
  if (root) {
    std::printf("\n4. A whole step as a compiled program (hooks and optimizer step) "
                "against the runtime's own protocol and order (measured, host CPU): the "
                "plan of 3. with gather prefetch and overlapped reductions (ZeRO-3); "
                "zero_grad, forward, backward, optimizer step; program of %lld ops, the "
                "optimizer step in landing order\n",
                (long long)pg.ops);
    std::printf("   program                %8.3f ms  (range %s ms, %zu reps)\n",
                pg.programS * 1e3, range(pg.programReps, 1e3).c_str(),
                pg.programReps.size());
    std::printf("   runtime's order        %8.3f ms  (range %s ms, %zu reps)\n",
                pg.runtimeS * 1e3, range(pg.runtimeReps, 1e3).c_str(),
                pg.runtimeReps.size());
    std::printf("   runtime's order / program: %.3fx\n", pg.runtimeS / pg.programS);
  }

  delete comm;
  MPI_Finalize();
  return 0;
}

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
//    schedule, the optimizer step in landing order) against the program the
//    runtime derives for the same plan without one (DefaultProgram.h).
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
#include "Bench.h"

using namespace mfsdp::bench;

namespace {

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
                "against the program the runtime derives without one (measured, host CPU): the "
                "plan of 3. with gather prefetch and overlapped reductions (ZeRO-3); "
                "zero_grad, forward, backward, optimizer step; program of %lld ops, the "
                "optimizer step in landing order\n",
                (long long)pg.ops);
    std::printf("   program                %8.3f ms  (range %s ms, %zu reps)\n",
                pg.programS * 1e3, range(pg.programReps, 1e3).c_str(),
                pg.programReps.size());
    std::printf("   derived program        %8.3f ms  (range %s ms, %zu reps)\n",
                pg.runtimeS * 1e3, range(pg.runtimeReps, 1e3).c_str(),
                pg.runtimeReps.size());
    std::printf("   derived / compiled program: %.3fx\n", pg.runtimeS / pg.programS);
  }

  delete comm;
  MPI_Finalize();
  return 0;
}

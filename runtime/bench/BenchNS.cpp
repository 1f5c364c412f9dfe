//===- BenchNS.cpp - Newton-Schulz: symmetric form against GEMMs ----------===//
//
// `mfsdp-bench-runtime ns` (RuntimeBench.cpp).
//
//===----------------------------------------------------------------------===//
#include "Bench.h"

namespace mfsdp::bench {

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

} // namespace mfsdp::bench

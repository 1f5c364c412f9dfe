//===- CudaKernelBench.cpp - Time the CUDA optimizer kernels on a GPU -----===//
//
//   mfsdp-bench-cuda-kernels [--reps N] [--adamw COUNT,COUNT,...]
//                            [--ns ROWSxCOLS,ROWSxCOLS,...|none]
//
// Times the optimizer kernels of mfsdp/runtime/CudaKernels.h on the first
// CUDA device with CUDA events on one stream (median of N repetitions after
// two warm-ups) and prints one JSON object per line, for
// scripts/gpu-kernel-bench.py to set beside PyTorch's own kernels on the
// same tensors:
//
//   - {"kind":"copy"}: a device-to-device cudaMemcpy of the AdamW tensors'
//     fp32 bytes (the bandwidth floor the elementwise update is held to);
//   - {"kind":"adamw","form":"multi"}: one fused AdamW launch over every
//     tensor of the list (cuda::adamwMulti), and "per_tensor": one
//     cuda::adamwStep launch per tensor; bytes counted as 7 x 4 per element
//     (reads param, grad, exp_avg, exp_avg_sq; writes param and both moments);
//   - {"kind":"ns"}: Newton-Schulz (cuda::newtonSchulz, 5 iterations, Muon's
//     coefficients) per shape in both precisions (fp32; bf16 operands with
//     fp32 accumulation) and both forms (syrk, gemm), with the FLOPs of the
//     form that ran and of the three-GEMM form; {"kind":"ns_strip"}: the
//     symmetric form again with the rows of each strip GEMM set
//     (NewtonSchulzHyper::syrkStrip: 128 to 2048, below the short side),
//     beside the default strip.
//
// The defaults are the tensors of one Llama-3-8B decoder layer (q and o
// 4096x4096, k and v 1024x4096, gate and up 14336x4096, down 4096x14336, two
// norms of 4096) and Newton-Schulz on 1024x1024, 4096x4096, 4096x14336 and
// 14336x4096. Exits 3 when there is no CUDA device, 2 on an error.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/CudaKernels.h"
#include "mfsdp/runtime/Kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace mfsdp::rt;

namespace {

[[noreturn]] void die(const std::string &what) {
  std::fprintf(stderr, "mfsdp-bench-cuda-kernels: error: %s\n", what.c_str());
  std::exit(2);
}

void cudaOk(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    die(std::string(what) + ": " + cudaGetErrorString(e));
}

void kernelOk(int rc, const char *what) {
  if (rc != 0)
    die(std::string(what) + ": " + cuda::lastError());
}

float *deviceArray(int64_t n, std::mt19937 &rng, float lo, float hi) {
  std::vector<float> host(static_cast<size_t>(n));
  std::uniform_real_distribution<float> dist(lo, hi);
  for (float &x : host)
    x = dist(rng);
  float *ptr = nullptr;
  cudaOk(cudaMalloc(&ptr, sizeof(float) * std::max<int64_t>(1, n)), "cudaMalloc");
  cudaOk(cudaMemcpy(ptr, host.data(), sizeof(float) * n, cudaMemcpyHostToDevice),
         "cudaMemcpy to the device");
  return ptr;
}

/// Median milliseconds of `reps` timed calls of `body` (each between two
/// events on `stream`), after two untimed ones.
double medianMs(int reps, cudaStream_t stream, const std::function<void()> &body) {
  cudaEvent_t start, stop;
  cudaOk(cudaEventCreate(&start), "cudaEventCreate");
  cudaOk(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < 2; ++i)
    body();
  cudaOk(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    cudaOk(cudaEventRecord(start, stream), "cudaEventRecord");
    body();
    cudaOk(cudaEventRecord(stop, stream), "cudaEventRecord");
    cudaOk(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0;
    cudaOk(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::vector<int64_t> parseCounts(const char *text) {
  std::vector<int64_t> out;
  for (const char *p = text; *p;) {
    char *end = nullptr;
    long long v = std::strtoll(p, &end, 10);
    if (end == p || v <= 0)
      die(std::string("--adamw wants positive counts separated by commas, got '") +
          text + "'");
    out.push_back(v);
    p = *end == ',' ? end + 1 : end;
    if (*end && *end != ',')
      die(std::string("--adamw: unexpected '") + end + "'");
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> parseShapes(const char *text) {
  std::vector<std::pair<int64_t, int64_t>> out;
  if (std::strcmp(text, "none") == 0)
    return out;
  for (const char *p = text; *p;) {
    char *end = nullptr;
    long long r = std::strtoll(p, &end, 10);
    if (end == p || *end != 'x' || r <= 0)
      die(std::string("--ns wants ROWSxCOLS separated by commas, got '") + text + "'");
    const char *q = end + 1;
    long long c = std::strtoll(q, &end, 10);
    if (end == q || c <= 0 || (*end && *end != ','))
      die(std::string("--ns wants ROWSxCOLS separated by commas, got '") + text + "'");
    out.push_back({r, c});
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

} // namespace

int main(int argc, char **argv) {
  int reps = 20;
  std::vector<int64_t> counts = {4096LL * 4096, 1024LL * 4096, 1024LL * 4096,
                                 4096LL * 4096, 14336LL * 4096, 14336LL * 4096,
                                 4096LL * 14336, 4096, 4096};
  std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1024, 1024}, {4096, 4096}, {4096, 14336}, {14336, 4096}};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
      if (reps < 1)
        die("--reps wants a positive count");
    } else if (a == "--adamw" && i + 1 < argc) {
      counts = parseCounts(argv[++i]);
    } else if (a == "--ns" && i + 1 < argc) {
      shapes = parseShapes(argv[++i]);
    } else {
      die("unknown argument '" + a +
          "' (usage: mfsdp-bench-cuda-kernels [--reps N] [--adamw C,C,...] "
          "[--ns RxC,RxC,...])");
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "mfsdp-bench-cuda-kernels: no CUDA device\n");
    return 3;
  }
  cudaDeviceProp prop{};
  cudaOk(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("{\"kind\":\"device\",\"name\":\"%s\",\"reps\":%d}\n", prop.name, reps);

  cudaStream_t stream;
  cudaOk(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::mt19937 rng(7);

  // AdamW over the list of tensors.
  {
    int64_t total = 0;
    std::vector<AdamWTensor> tensors;
    for (int64_t n : counts) {
      AdamWTensor t;
      t.param = deviceArray(n, rng, -1.f, 1.f);
      t.grad = deviceArray(n, rng, -1e-2f, 1e-2f);
      t.m = deviceArray(n, rng, -1e-3f, 1e-3f);
      t.v = deviceArray(n, rng, 0.f, 1e-5f);
      t.count = n;
      t.h = AdamWHyper{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
      t.step = 10;
      tensors.push_back(t);
      total += n;
    }
    float *copyDst = nullptr, *copySrc = nullptr;
    cudaOk(cudaMalloc(&copySrc, sizeof(float) * total), "cudaMalloc");
    cudaOk(cudaMalloc(&copyDst, sizeof(float) * total), "cudaMalloc");
    cudaOk(cudaMemsetAsync(copySrc, 0, sizeof(float) * total, stream), "cudaMemset");
    const double copyMs = medianMs(reps, stream, [&] {
      cudaOk(cudaMemcpyAsync(copyDst, copySrc, sizeof(float) * total,
                             cudaMemcpyDeviceToDevice, stream),
             "cudaMemcpyAsync");
    });
    std::printf("{\"kind\":\"copy\",\"elements\":%lld,\"bytes\":%lld,\"ms\":%.5f}\n",
                static_cast<long long>(total), static_cast<long long>(8 * total),
                copyMs);
    cudaFree(copySrc);
    cudaFree(copyDst);

    cuda::MultiTensorTable table;
    const double multiMs = medianMs(reps, stream, [&] {
      kernelOk(cuda::adamwMulti(tensors.data(), static_cast<int64_t>(tensors.size()),
                                table, stream),
               "adamwMulti");
    });
    const double perTensorMs = medianMs(reps, stream, [&] {
      for (const AdamWTensor &t : tensors)
        kernelOk(cuda::adamwStep(t.param, t.grad, t.m, t.v, t.count, t.h, t.step,
                                 stream),
                 "adamwStep");
    });
    cudaOk(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cuda::releaseMultiTensorTable(table);
    for (const char *form : {"multi", "per_tensor"})
      std::printf("{\"kind\":\"adamw\",\"form\":\"%s\",\"tensors\":%zu,"
                  "\"elements\":%lld,\"bytes\":%lld,\"ms\":%.5f}\n",
                  form, tensors.size(), static_cast<long long>(total),
                  static_cast<long long>(28 * total),
                  std::strcmp(form, "multi") == 0 ? multiMs : perTensorMs);
    for (AdamWTensor &t : tensors) {
      cudaFree(t.param);
      cudaFree(const_cast<float *>(t.grad));
      cudaFree(t.m);
      cudaFree(t.v);
    }
  }

  // Newton-Schulz per shape, precision and form.
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS)
    die("cublasCreate failed");
  for (auto [rows, cols] : shapes) {
    float *in = deviceArray(rows * cols, rng, -1.f, 1.f);
    float *out = nullptr;
    void *ws = nullptr;
    cudaOk(cudaMalloc(&out, sizeof(float) * rows * cols), "cudaMalloc");
    cudaOk(cudaMalloc(&ws, cuda::newtonSchulzWorkspace(rows, cols)), "cudaMalloc");
    const double s = static_cast<double>(std::min(rows, cols));
    const double l = static_cast<double>(std::max(rows, cols));
    auto time = [&](const NewtonSchulzHyper &h) {
      return medianMs(reps, stream, [&] {
        kernelOk(cuda::newtonSchulz(blas, in, out, rows, cols, h, ws, stream),
                 "newtonSchulz");
      });
    };
    for (NsPrecision precision : {NsPrecision::FP32, NsPrecision::BF16}) {
      const std::string spelling(enumName(precision));
      for (NsForm form : {NsForm::Syrk, NsForm::Gemm}) {
        NewtonSchulzHyper h;
        h.precision = precision;
        h.form = form;
        const double ms = time(h);
        const double gemmFlops = 2.0 * h.steps * (2 * s * s * l + s * s * s);
        const double syrkFlops = 2.0 * h.steps * (1.5 * s * s * l + 0.5 * s * s * s);
        std::printf("{\"kind\":\"ns\",\"rows\":%lld,\"cols\":%lld,\"steps\":%lld,"
                    "\"precision\":\"%s\",\"form\":\"%s\",\"flops\":%.6g,"
                    "\"gemm_flops\":%.6g,\"ms\":%.5f}\n",
                    static_cast<long long>(rows), static_cast<long long>(cols),
                    static_cast<long long>(h.steps), spelling.c_str(),
                    form == NsForm::Syrk ? "syrk" : "gemm",
                    form == NsForm::Syrk ? syrkFlops : gemmFlops, gemmFlops, ms);
      }
      // The symmetric form's strip rows (NewtonSchulzHyper::syrkStrip).
      const int64_t byDefault = syrkStripRows(static_cast<int64_t>(s), precision);
      for (int64_t strip : {128, 256, 512, 1024, 2048}) {
        if (strip >= static_cast<int64_t>(s))
          continue;
        NewtonSchulzHyper h;
        h.precision = precision;
        h.syrkStrip = strip;
        const double ms = time(h);
        std::printf("{\"kind\":\"ns_strip\",\"rows\":%lld,\"cols\":%lld,"
                    "\"precision\":\"%s\",\"strip\":%lld,\"default\":%lld,"
                    "\"ms\":%.5f}\n",
                    static_cast<long long>(rows), static_cast<long long>(cols),
                    spelling.c_str(), static_cast<long long>(strip),
                    static_cast<long long>(byDefault), ms);
      }
    }
    cudaFree(in);
    cudaFree(out);
    cudaFree(ws);
  }
  cublasDestroy(blas);
  cudaStreamDestroy(stream);
  return 0;
}

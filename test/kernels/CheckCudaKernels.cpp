//===- CheckCudaKernels.cpp - Every CUDA kernel against its host twin -----===//
//
//   mfsdp-check-cuda-kernels
//
// Runs every kernel of mfsdp/runtime/CudaKernels.h on the first CUDA device
// and its twin of mfsdp/runtime/Kernels.h on the host, on the same random
// inputs, and compares the results: AdamW and SGD over three steps, their
// fused forms over a list of tensors (also bitwise against the device's
// per-tensor kernels), Muon's
// momentum, Newton-Schulz in both precisions and both forms on square,
// wide and tall matrices (sides past one strip of the symmetric products,
// with the default strip rows and with 96), Muon's update, the sum of squares, the bf16 casts and
// rounding, the scaling and the block packing. Tolerances, as a fraction
// of the host result's largest magnitude: 1e-5 for the elementwise
// optimizer kernels (the device may contract a multiply and an add into an
// FMA), 1e-4 for fp32 Newton-Schulz and 2e-2 for bf16 Newton-Schulz (the
// fp32 sums in another order move a value across a bf16 rounding tie),
// 1e-12 for the sum of squares (double, summed in another order); the
// casts, rounding, scaling and packing must be bitwise equal.
//
// Prints one line per check and "N checks, N failed"; exits 0 when every
// check passes, 1 when one fails, 3 when there is no CUDA device (nothing
// was checked), 2 on another error.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/CudaKernels.h"
#include "mfsdp/runtime/Kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace mfsdp::rt;

namespace {

int checks = 0, failures = 0;

[[noreturn]] void die(const std::string &what) {
  std::fprintf(stderr, "mfsdp-check-cuda-kernels: error: %s\n", what.c_str());
  std::exit(2);
}

void cudaOk(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    die(std::string(what) + ": " + cudaGetErrorString(e));
}

void kernelOk(int rc, const char *what) {
  if (rc != 0)
    die(std::string(what) + ": " + cuda::lastError());
  cudaOk(cudaDeviceSynchronize(), what);
}

/// A device copy of a host array, freed with the object.
template <typename T> struct Device {
  T *ptr = nullptr;
  size_t n = 0;
  explicit Device(const std::vector<T> &host) : n(host.size()) {
    cudaOk(cudaMalloc(&ptr, std::max<size_t>(1, n) * sizeof(T)), "cudaMalloc");
    cudaOk(cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice),
           "cudaMemcpy to the device");
  }
  explicit Device(size_t bytes) : n(bytes / sizeof(T)) {
    cudaOk(cudaMalloc(&ptr, std::max<size_t>(1, bytes)), "cudaMalloc");
  }
  Device(const Device &) = delete;
  Device &operator=(const Device &) = delete;
  ~Device() { cudaFree(ptr); }
  std::vector<T> get() const {
    std::vector<T> host(n);
    cudaOk(cudaMemcpy(host.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost),
           "cudaMemcpy to the host");
    return host;
  }
};

std::vector<float> random(int64_t n, unsigned seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = d(gen);
  return v;
}

/// The largest |device - host| over the host's largest finite magnitude
/// (0 when both are zero); equal values (infinities too) differ by 0, and a
/// NaN on either side fails.
template <typename T>
void compare(const std::string &what, const std::vector<T> &device,
             const std::vector<T> &host, double tolerance) {
  ++checks;
  double diff = 0, scale = 0;
  bool nan = device.size() != host.size();
  for (size_t i = 0; !nan && i < host.size(); ++i) {
    const double dv = double(device[i]), hv = double(host[i]);
    const double d = dv == hv ? 0.0 : std::fabs(dv - hv);
    nan |= std::isnan(d);
    diff = std::max(diff, d);
    if (std::isfinite(hv))
      scale = std::max(scale, std::fabs(hv));
  }
  const double rel = scale > 0 ? diff / scale : diff;
  const bool ok = !nan && (tolerance == 0 ? diff == 0 : rel <= tolerance);
  failures += !ok;
  char limit[32] = "bitwise";
  if (tolerance != 0)
    std::snprintf(limit, sizeof(limit), "%g relative", tolerance);
  std::printf("%-48s %s (max diff %.3g of %.3g, limit %s)\n", what.c_str(),
              ok ? "ok" : "FAILED", diff, scale, limit);
}

/// ||device - host|| / ||host|| (Frobenius) against `tolerance`, with the
/// largest element difference printed beside it: for bf16 results, whose
/// elements may differ by a few bf16 ulps where the two backends' fp32
/// sums (in different orders) round to neighbouring bf16 values.
void compareNorm(const std::string &what, const std::vector<float> &device,
                 const std::vector<float> &host, double tolerance) {
  ++checks;
  double num = 0, den = 0, diff = 0;
  bool nan = device.size() != host.size();
  for (size_t i = 0; !nan && i < host.size(); ++i) {
    const double d = double(device[i]) - double(host[i]);
    nan |= std::isnan(d);
    num += d * d;
    den += double(host[i]) * double(host[i]);
    diff = std::max(diff, std::fabs(d));
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  const bool ok = !nan && rel <= tolerance;
  failures += !ok;
  std::printf("%-48s %s (relative Frobenius %.3g, limit %g; max element diff %.3g)\n",
              what.c_str(), ok ? "ok" : "FAILED", rel, tolerance, diff);
}

/// ||a - b|| / ||b|| (Frobenius).
double frobeniusRel(const std::vector<float> &a, const std::vector<float> &b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

void checkAdamW() {
  const int64_t n = 100003;
  std::vector<float> p = random(n, 1, -1, 1), m(n, 0.f), v(n, 0.f);
  Device<float> dp(p), dm(m), dv(v);
  AdamWHyper h;
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<float> g = random(n, 10 + unsigned(step), -0.1f, 0.1f);
    Device<float> dg(g);
    host::adamwStep(p.data(), g.data(), m.data(), v.data(), n, h, step);
    kernelOk(cuda::adamwStep(dp.ptr, dg.ptr, dm.ptr, dv.ptr, n, h, step, nullptr),
             "adamwStep");
  }
  compare("adamwStep (3 steps): param", dp.get(), p, 1e-5);
  compare("adamwStep (3 steps): exp_avg_sq", dv.get(), v, 1e-5);
}

void checkSGD() {
  const int64_t n = 65537;
  std::vector<float> p = random(n, 2, -1, 1), buf(n, 0.f);
  Device<float> dp(p), db(buf);
  SGDHyper h;
  h.momentum = 0.9f;
  h.weightDecay = 0.01f;
  h.nesterov = true;
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<float> g = random(n, 20 + unsigned(step), -0.1f, 0.1f);
    Device<float> dg(g);
    host::sgdStep(p.data(), g.data(), buf.data(), n, h, step);
    kernelOk(cuda::sgdStep(dp.ptr, dg.ptr, db.ptr, n, h, step, nullptr), "sgdStep");
  }
  compare("sgdStep (3 steps, Nesterov): param", dp.get(), p, 1e-5);
}

/// The fused kernels (one launch over a table of chunks): tensors of
/// several chunks, exactly one chunk, one element and none, each with its
/// own hyperparameters and step, over three steps; against the host's
/// per-tensor kernels (1e-5) and the device's per-tensor kernels (bitwise:
/// the same element code). The table grows between calls (a longer list on
/// the third step) and is reused while the previous upload may be in
/// flight.
void checkMultiTensor() {
  const int64_t chunk = cuda::kMultiTensorChunk;
  const std::vector<int64_t> sizes = {3 * chunk + 5, 1, 0, chunk, chunk + 1, 257};
  const size_t k = sizes.size();
  std::vector<std::vector<float>> p(k), m(k), v(k), buf(k);
  std::vector<std::unique_ptr<Device<float>>> fp, fm, fv, fb, sp, sm, sv, sb;
  for (size_t i = 0; i < k; ++i) {
    p[i] = random(sizes[i], 60 + unsigned(i), -1, 1);
    m[i].assign(sizes[i], 0.f);
    v[i].assign(sizes[i], 0.f);
    buf[i].assign(sizes[i], 0.f);
    for (auto *set : {&fp, &sp})
      set->push_back(std::make_unique<Device<float>>(p[i]));
    for (auto *set : {&fm, &fv, &fb, &sm, &sv, &sb})
      set->push_back(std::make_unique<Device<float>>(m[i]));
  }
  std::vector<std::vector<float>> hp = p, hb = buf; // SGD's host state
  std::vector<std::unique_ptr<Device<float>>> gp, gb, tp, tb; // SGD's devices
  for (size_t i = 0; i < k; ++i) {
    gp.push_back(std::make_unique<Device<float>>(p[i]));
    tp.push_back(std::make_unique<Device<float>>(p[i]));
    gb.push_back(std::make_unique<Device<float>>(buf[i]));
    tb.push_back(std::make_unique<Device<float>>(buf[i]));
  }
  cuda::MultiTensorTable table;
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<std::unique_ptr<Device<float>>> grads;
    std::vector<AdamWTensor> adamw;
    std::vector<SGDTensor> sgd;
    for (size_t i = 0; i < k; ++i) {
      std::vector<float> g = random(sizes[i], 70 + unsigned(10 * step + i), -0.1f, 0.1f);
      grads.push_back(std::make_unique<Device<float>>(g));
      const float *dg = grads.back()->ptr;
      AdamWHyper ha;
      ha.lr = 1e-3f * float(i + 1);
      ha.weightDecay = i % 2 ? 0.f : 0.1f;
      ha.beta2 = i % 3 ? 0.95f : 0.999f;
      SGDHyper hs;
      hs.lr = 0.05f / float(i + 1);
      hs.momentum = i == 0 ? 0.f : 0.9f;
      hs.weightDecay = i % 2 ? 0.01f : 0.f;
      hs.nesterov = i == 3;
      const int64_t t = step + int64_t(i % 2);
      host::adamwStep(p[i].data(), g.data(), m[i].data(), v[i].data(), sizes[i], ha, t);
      host::sgdStep(hp[i].data(), g.data(), hb[i].data(), sizes[i], hs, t);
      if (sizes[i] > 0) {
        kernelOk(cuda::adamwStep(sp[i]->ptr, dg, sm[i]->ptr, sv[i]->ptr, sizes[i], ha, t,
                                 nullptr),
                 "adamwStep");
        kernelOk(cuda::sgdStep(tp[i]->ptr, dg, tb[i]->ptr, sizes[i], hs, t, nullptr),
                 "sgdStep");
      }
      adamw.push_back({fp[i]->ptr, dg, fm[i]->ptr, fv[i]->ptr, sizes[i], ha, t});
      sgd.push_back({gp[i]->ptr, dg, gb[i]->ptr, sizes[i], hs, t});
      if (step == 3) { // empty entries: skipped
        adamw.push_back({nullptr, nullptr, nullptr, nullptr, 0, ha, t});
        sgd.push_back({nullptr, nullptr, nullptr, 0, hs, t});
      }
    }
    // Steps 1 and 2: two calls each (the first half of the list, then the
    // rest), issued back to back; step 3: one call over the whole longer
    // list.
    const size_t half = step < 3 ? k / 2 : adamw.size();
    const int rc = cuda::adamwMulti(adamw.data(), int64_t(half), table, nullptr) ||
                   cuda::sgdMulti(sgd.data(), int64_t(half), table, nullptr) ||
                   cuda::adamwMulti(adamw.data() + half, int64_t(adamw.size() - half),
                                    table, nullptr) ||
                   cuda::sgdMulti(sgd.data() + half, int64_t(sgd.size() - half), table,
                                  nullptr);
    kernelOk(rc, "adamwMulti / sgdMulti");
  }
  cuda::releaseMultiTensorTable(table);
  for (size_t i = 0; i < k; ++i) {
    if (sizes[i] == 0)
      continue;
    const std::string n = " [" + std::to_string(sizes[i]) + "]";
    compare("adamwMulti (3 steps): param vs host" + n, fp[i]->get(), p[i], 1e-5);
    compare("adamwMulti (3 steps): exp_avg_sq vs host" + n, fv[i]->get(), v[i], 1e-5);
    compare("adamwMulti: param vs adamwStep" + n, fp[i]->get(), sp[i]->get(), 0);
    compare("adamwMulti: exp_avg vs adamwStep" + n, fm[i]->get(), sm[i]->get(), 0);
    compare("sgdMulti (3 steps): param vs host" + n, gp[i]->get(), hp[i], 1e-5);
    compare("sgdMulti: param vs sgdStep" + n, gp[i]->get(), tp[i]->get(), 0);
    compare("sgdMulti: buffer vs sgdStep" + n, gb[i]->get(), tb[i]->get(), 0);
  }
}

void checkMuonMomentum() {
  const int64_t n = 4099;
  std::vector<float> g = random(n, 3, -1, 1), buf = random(n, 4, -1, 1), out(n);
  Device<float> dg(g), db(buf), dout(out);
  host::muonMomentum(g.data(), buf.data(), out.data(), n, 0.95f, true);
  kernelOk(cuda::muonMomentum(dg.ptr, db.ptr, dout.ptr, n, 0.95f, true, nullptr),
           "muonMomentum");
  compare("muonMomentum: update", dout.get(), out, 1e-5);
  compare("muonMomentum: buffer", db.get(), buf, 1e-5);
}

void checkNewtonSchulz(cublasHandle_t blas) {
  const std::pair<int64_t, int64_t> shapes[] = {
      {64, 64}, {37, 101}, {101, 37}, {300, 700}, {700, 300}, {512, 512}};
  for (auto [rows, cols] : shapes) {
    const std::vector<float> g = random(rows * cols, 5, -0.01f, 0.01f);
    Device<float> dg(g);
    // The fp32 result on the host: how far each backend's bf16 iteration
    // lands from it.
    std::vector<float> exact(rows * cols);
    {
      NewtonSchulzHyper h;
      std::vector<float> ws(host::newtonSchulzWorkspace(rows, cols) / sizeof(float));
      host::newtonSchulz(g.data(), exact.data(), rows, cols, h, ws.data());
    }
    for (NsPrecision prec : {NsPrecision::FP32, NsPrecision::BF16})
      for (auto [form, strip] : {std::pair{NsForm::Syrk, int64_t(0)},
                                 std::pair{NsForm::Syrk, int64_t(96)},
                                 std::pair{NsForm::Gemm, int64_t(0)}}) {
        NewtonSchulzHyper h;
        h.precision = prec;
        h.form = form;
        h.syrkStrip = strip;
        std::vector<float> out(rows * cols);
        std::vector<float> ws(host::newtonSchulzWorkspace(rows, cols) / sizeof(float));
        host::newtonSchulz(g.data(), out.data(), rows, cols, h, ws.data());
        Device<float> dout(out.size() * sizeof(float));
        Device<char> dws(static_cast<size_t>(cuda::newtonSchulzWorkspace(rows, cols)));
        kernelOk(cuda::newtonSchulz(blas, dg.ptr, dout.ptr, rows, cols, h, dws.ptr,
                                    nullptr),
                 "newtonSchulz");
        const std::string what = "newtonSchulz " + std::to_string(rows) + "x" +
                                 std::to_string(cols) +
                                 (prec == NsPrecision::FP32 ? " fp32" : " bf16") +
                                 (form == NsForm::Syrk ? " syrk" : " gemm") +
                                 (strip ? " strip " + std::to_string(strip) : "");
        // fp32: element-wise to 1e-4 of the largest; bf16 (bf16 operands,
        // fp32 sums, each product rounded once to bf16 on both backends):
        // to 1e-2 in the Frobenius norm, the range of bf16 operands.
        // And the CUDA bf16 result no farther from the fp32 one than the
        // host's bf16 result is, give or take a quarter.
        if (prec == NsPrecision::FP32) {
          compare(what, dout.get(), out, 1e-4);
        } else {
          const std::vector<float> got = dout.get();
          compareNorm(what, got, out, 1e-2);
          const double cudaErr = frobeniusRel(got, exact), hostErr = frobeniusRel(out, exact);
          ++checks;
          const bool ok = cudaErr <= 1.25 * hostErr + 1e-6;
          failures += !ok;
          std::printf("%-48s %s (from the fp32 result: cuda %.3g, host %.3g, limit 1.25x)\n",
                      (what + " vs fp32").c_str(), ok ? "ok" : "FAILED", cudaErr, hostErr);
        }
      }
  }
}

void checkMuonApply() {
  const int64_t rows = 48, cols = 80;
  std::vector<float> p = random(rows * cols, 6, -1, 1), o = random(rows * cols, 7, -1, 1);
  Device<float> dp(p), dout(o);
  MuonHyper h;
  host::muonApply(p.data(), o.data(), rows, cols, h);
  kernelOk(cuda::muonApply(dp.ptr, dout.ptr, rows, cols, h, nullptr), "muonApply");
  compare("muonApply: param", dp.get(), p, 1e-5);
}

void checkSumSquares() {
  const int64_t n = 1000003;
  std::vector<float> x = random(n, 8, -2, 2);
  Device<float> dx(x);
  Device<double> sum(std::vector<double>{0.0});
  kernelOk(cuda::sumSquares(dx.ptr, n, sum.ptr, nullptr), "sumSquares");
  compare("sumSquares (double)", sum.get(), {host::sumSquares(x.data(), n)}, 1e-12);
}

void checkBF16() {
  const int64_t n = 70001;
  std::vector<float> x = random(n, 9, -3, 3);
  x[0] = 0.f;
  x[1] = -0.f;
  x[2] = 1.00390625f;    // a tie: rounds to even (1.0)
  x[3] = 1.01171875f;    // a tie: rounds to even (1.015625)
  x[4] = 3.4e38f;        // past the largest bf16 and half an ulp: infinity
  x[5] = 1e-40f;         // a subnormal
  Device<float> dx(x);
  std::vector<uint16_t> bits(n);
  host::castF32ToBF16(x.data(), bits.data(), n);
  Device<uint16_t> dbits(n * sizeof(uint16_t));
  kernelOk(cuda::castF32ToBF16(dx.ptr, dbits.ptr, n, nullptr), "castF32ToBF16");
  compare("castF32ToBF16", dbits.get(), bits, 0);
  std::vector<float> back(n);
  host::castBF16ToF32(bits.data(), back.data(), n);
  Device<uint16_t> dsrc(bits);
  Device<float> dback(n * sizeof(float));
  kernelOk(cuda::castBF16ToF32(dsrc.ptr, dback.ptr, n, nullptr), "castBF16ToF32");
  compare("castBF16ToF32", dback.get(), back, 0);
  kernelOk(cuda::roundToBF16(dx.ptr, n, nullptr), "roundToBF16");
  compare("roundToBF16", dx.get(), back, 0);
  // The strided form: 7 rows of 333 elements, pitches 1000 and 400.
  Device<float> dfresh(x);
  std::vector<uint16_t> strided(7 * 400, 0x7fc1);
  host::castF32ToBF16Strided(strided.data(), 400, x.data(), 1000, 333, 7);
  Device<uint16_t> dstrided(std::vector<uint16_t>(7 * 400, 0x7fc1));
  kernelOk(cuda::castF32ToBF16Strided(dstrided.ptr, 400, dfresh.ptr, 1000, 333, 7, nullptr),
           "castF32ToBF16Strided");
  compare("castF32ToBF16Strided", dstrided.get(), strided, 0);
}

void checkScale() {
  const int64_t n = 5000;
  std::vector<float> x = random(n, 11, -1, 1);
  Device<float> dx(x);
  for (float &v : x)
    v *= 0.125f;
  kernelOk(cuda::scale(dx.ptr, n, 0.125f, nullptr), "scale");
  compare("scale", dx.get(), x, 0);
}

void checkBlocks() {
  BlockGrid g;
  g.rows = 12;
  g.cols = 18;
  g.blockRows = 4;
  g.blockCols = 6;
  g.ranks = 4; // 9 blocks: rank 0 keeps 3, the others 2
  const std::vector<float> whole = random(g.rows * g.cols, 12, -1, 1);
  Device<float> dwhole(whole);
  for (int64_t r = 0; r < g.ranks; ++r) {
    const int64_t first = g.firstBlockOf(r), count = g.blocksOf(r);
    std::vector<float> packed(count * g.blockElems());
    host::packBlocks(whole.data(), packed.data(), g, first, count);
    Device<float> dpacked(packed.size() * sizeof(float));
    kernelOk(cuda::packBlocks(dwhole.ptr, dpacked.ptr, g, first, count, nullptr),
             "packBlocks");
    compare("packBlocks, rank " + std::to_string(r), dpacked.get(), packed, 0);
    std::vector<float> target(whole.size(), 0.f);
    Device<float> dtarget(target);
    host::unpackBlocks(packed.data(), target.data(), g, first, count);
    kernelOk(cuda::unpackBlocks(dpacked.ptr, dtarget.ptr, g, first, count, nullptr),
             "unpackBlocks");
    compare("unpackBlocks, rank " + std::to_string(r), dtarget.get(), target, 0);
  }
}

} // namespace

int main(int argc, char **) {
  if (argc != 1) {
    std::fprintf(stderr, "usage: mfsdp-check-cuda-kernels\n");
    return 2;
  }
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("mfsdp-check-cuda-kernels: no CUDA device (%s); nothing checked\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    return 3;
  }
  cudaDeviceProp prop;
  cudaOk(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("mfsdp-check-cuda-kernels: device 0: %s (sm_%d%d)\n", prop.name, prop.major,
              prop.minor);
  cublasHandle_t blas = nullptr;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS)
    die("cublasCreate failed");
  checkAdamW();
  checkSGD();
  checkMultiTensor();
  checkMuonMomentum();
  checkNewtonSchulz(blas);
  checkMuonApply();
  checkSumSquares();
  checkBF16();
  checkScale();
  checkBlocks();
  cublasDestroy(blas);
  std::printf("%d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}

//===- RuntimeKernelsTest.cpp - Host kernels against a reference ----------===//
//
// The reference below is written from the definitions in PRODUCT.md and
// torch.optim, independently of runtime/host: double precision, naive
// loops, no BLAS. The host twins must agree within fp32 tolerances.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/Kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace mfsdp::rt;

namespace {

namespace ref {

using Mat = std::vector<double>; // row-major

Mat matmul(const Mat &a, const Mat &b, int64_t n, int64_t k, int64_t m) {
  Mat c(n * m, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < m; ++j)
        c[i * m + j] += a[i * k + p] * b[p * m + j];
  return c;
}

Mat transpose(const Mat &a, int64_t r, int64_t c) {
  Mat t(r * c);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j)
      t[j * r + i] = a[i * c + j];
  return t;
}

/// Newton-Schulz's options: Muon's by default; `clamp` is torch.optim.Muon's
/// X / max(||X||, eps) instead of X / (||X|| + eps); `bf16` rounds X, A, B
/// and each new X to the nearest bf16 when they are made (the products
/// themselves exact, in double).
struct Ns {
  int64_t steps = 5;
  double a = 3.4445, b = -4.7750, c = 2.0315, eps = 1e-7;
  bool clamp = false;
  bool bf16 = false;
};

/// x rounded to the nearest bf16, ties to even, from double: the nearest
/// multiple of 2^(e-7) where 2^e <= |x| < 2^(e+1) (normal range only).
double roundBF16(double x) {
  if (x == 0 || !std::isfinite(x))
    return x;
  int e;
  std::frexp(x, &e); // |x| = m 2^e, 0.5 <= m < 1
  const double ulp = std::ldexp(1.0, e - 8);
  return std::nearbyint(x / ulp) * ulp; // the default mode: ties to even
}

void roundAll(Mat &m, bool bf16) {
  if (bf16)
    for (double &x : m)
      x = roundBF16(x);
}

Mat newtonSchulz(Mat g, int64_t rows, int64_t cols, const Ns &o = {}) {
  const double a = o.a, b = o.b, c = o.c;
  double norm = 0;
  for (double x : g)
    norm += x * x;
  norm = o.clamp ? std::max(std::sqrt(norm), o.eps) : std::sqrt(norm) + o.eps;
  for (double &x : g)
    x /= norm;
  bool tall = rows > cols;
  int64_t s = tall ? cols : rows, l = tall ? rows : cols;
  Mat X = tall ? transpose(g, rows, cols) : g;
  roundAll(X, o.bf16);
  for (int64_t k = 0; k < o.steps; ++k) {
    Mat A = matmul(X, transpose(X, s, l), s, l, s);
    roundAll(A, o.bf16);
    Mat AA = matmul(A, A, s, s, s);
    Mat B(s * s);
    for (int64_t i = 0; i < s * s; ++i)
      B[i] = b * A[i] + c * AA[i];
    roundAll(B, o.bf16);
    Mat BX = matmul(B, X, s, s, l);
    for (int64_t i = 0; i < s * l; ++i)
      X[i] = a * X[i] + BX[i];
    roundAll(X, o.bf16);
  }
  return tall ? transpose(X, s, l) : X;
}

} // namespace ref

std::vector<float> random(int64_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

void expectClose(const std::vector<float> &got, const std::vector<double> &want,
                 double rel, const char *what) {
  ASSERT_EQ(got.size(), want.size());
  double maxAbs = 0;
  for (double w : want)
    maxAbs = std::max(maxAbs, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rel * std::max(1.0, maxAbs)) << what << " at " << i;
}

TEST(RuntimeKernels, AdamWMatchesReferenceOverSteps) {
  const int64_t n = 257;
  AdamWHyper h{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  std::vector<float> p = random(n, 1), m(n, 0.f), v(n, 0.f);
  std::vector<double> rp(p.begin(), p.end()), rm(n, 0), rv(n, 0);
  for (int64_t t = 1; t <= 5; ++t) {
    std::vector<float> g = random(n, 100 + t);
    host::adamwStep(p.data(), g.data(), m.data(), v.data(), n, h, t);
    for (int64_t i = 0; i < n; ++i) {
      rp[i] -= h.lr * h.weightDecay * rp[i];
      rm[i] = h.beta1 * rm[i] + (1 - h.beta1) * g[i];
      rv[i] = h.beta2 * rv[i] + (1 - h.beta2) * double(g[i]) * g[i];
      double mh = rm[i] / (1 - std::pow(double(h.beta1), double(t)));
      double vh = rv[i] / (1 - std::pow(double(h.beta2), double(t)));
      rp[i] -= h.lr * mh / (std::sqrt(vh) + h.eps);
    }
  }
  expectClose(p, rp, 1e-5, "adamw");
}

TEST(RuntimeKernels, SGDMatchesTorchSemantics) {
  const int64_t n = 64;
  for (bool nesterov : {false, true}) {
    SGDHyper h{0.05f, 0.9f, 0.01f, nesterov};
    std::vector<float> p = random(n, 2), buf(n, 0.f);
    std::vector<double> rp(p.begin(), p.end()), rb(n, 0);
    for (int64_t t = 1; t <= 4; ++t) {
      std::vector<float> g = random(n, 200 + t);
      host::sgdStep(p.data(), g.data(), buf.data(), n, h, t);
      for (int64_t i = 0; i < n; ++i) {
        double d = g[i] + h.weightDecay * rp[i];
        rb[i] = t == 1 ? d : h.momentum * rb[i] + d;
        d = nesterov ? d + h.momentum * rb[i] : rb[i];
        rp[i] -= h.lr * d;
      }
    }
    expectClose(p, rp, 1e-5, "sgd");
  }
}

// The fused kernels step a list of tensors, each with its own
// hyperparameters and step, in one call; every tensor must come out bitwise
// as one per-tensor call leaves it (the optimizer step of a group may use
// either). Sizes cover the four-wide body and its 1-3 element tail, a
// tensor of one element and an empty one (skipped: null pointers).
TEST(RuntimeKernels, AdamWMultiIsBitwiseThePerTensorKernel) {
  const std::vector<int64_t> sizes = {257, 1, 0, 64, 3, 1030};
  struct Buffers {
    std::vector<float> p, m, v;
  };
  std::vector<Buffers> fused(sizes.size()), single(sizes.size());
  std::vector<AdamWHyper> hypers;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const int64_t n = sizes[k];
    fused[k] = {random(n, 10 + k), std::vector<float>(n, 0.f), std::vector<float>(n, 0.f)};
    single[k] = fused[k];
    // Weight decay off for some (norms, biases), other rates and betas.
    hypers.push_back({1e-3f * float(k + 1), k % 2 ? 0.8f : 0.9f, k % 3 ? 0.95f : 0.999f,
                      k % 2 ? 1e-6f : 1e-8f, k % 2 ? 0.f : 0.1f});
  }
  for (int64_t t = 1; t <= 4; ++t) {
    std::vector<std::vector<float>> grads;
    std::vector<AdamWTensor> list;
    for (size_t k = 0; k < sizes.size(); ++k) {
      grads.push_back(random(sizes[k], 300 + 10 * t + k));
      // Each tensor at its own step (a tensor added to the group later).
      const int64_t step = t + int64_t(k % 2);
      if (sizes[k] == 0) {
        list.push_back({nullptr, nullptr, nullptr, nullptr, 0, hypers[k], step});
        continue;
      }
      list.push_back({fused[k].p.data(), grads[k].data(), fused[k].m.data(),
                      fused[k].v.data(), sizes[k], hypers[k], step});
      host::adamwStep(single[k].p.data(), grads[k].data(), single[k].m.data(),
                      single[k].v.data(), sizes[k], hypers[k], step);
    }
    host::adamwMulti(list.data(), static_cast<int64_t>(list.size()));
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    const size_t bytes = sizeof(float) * sizes[k];
    if (bytes == 0)
      continue;
    EXPECT_EQ(std::memcmp(fused[k].p.data(), single[k].p.data(), bytes), 0) << "p " << k;
    EXPECT_EQ(std::memcmp(fused[k].m.data(), single[k].m.data(), bytes), 0) << "m " << k;
    EXPECT_EQ(std::memcmp(fused[k].v.data(), single[k].v.data(), bytes), 0) << "v " << k;
  }
  // And the values moved: a list the fused kernel skipped would not.
  EXPECT_NE(fused[0].p, random(sizes[0], 10));
}

TEST(RuntimeKernels, SGDMultiIsBitwiseThePerTensorKernel) {
  const std::vector<int64_t> sizes = {64, 7, 0, 1};
  std::vector<std::vector<float>> fp(sizes.size()), fb(sizes.size()), sp, sb;
  std::vector<SGDHyper> hypers;
  for (size_t k = 0; k < sizes.size(); ++k) {
    fp[k] = random(sizes[k], 20 + k);
    fb[k].assign(sizes[k], 0.f);
    // Plain, momentum, Nesterov, weight decay or not.
    hypers.push_back({0.05f / float(k + 1), k == 0 ? 0.f : 0.9f, k % 2 ? 0.01f : 0.f,
                      k == 3});
  }
  sp = fp;
  sb = fb;
  for (int64_t t = 1; t <= 3; ++t) {
    std::vector<std::vector<float>> grads;
    std::vector<SGDTensor> list;
    for (size_t k = 0; k < sizes.size(); ++k) {
      grads.push_back(random(sizes[k], 400 + 10 * t + k));
      list.push_back({sizes[k] ? fp[k].data() : nullptr,
                      sizes[k] ? grads[k].data() : nullptr,
                      sizes[k] ? fb[k].data() : nullptr, sizes[k], hypers[k], t});
      host::sgdStep(sp[k].data(), grads[k].data(), sb[k].data(), sizes[k], hypers[k], t);
    }
    host::sgdMulti(list.data(), static_cast<int64_t>(list.size()));
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    const size_t bytes = sizeof(float) * sizes[k];
    if (bytes == 0)
      continue;
    EXPECT_EQ(std::memcmp(fp[k].data(), sp[k].data(), bytes), 0) << "p " << k;
    EXPECT_EQ(std::memcmp(fb[k].data(), sb[k].data(), bytes), 0) << "buf " << k;
  }
  EXPECT_NE(fp[0], random(sizes[0], 20));
}

TEST(RuntimeKernels, NewtonSchulzMatchesReference) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{16, 48}, {48, 16}, {32, 32}}) {
    std::vector<float> g = random(rows * cols, 3);
    std::vector<float> out(rows * cols);
    std::vector<float> ws(host::newtonSchulzWorkspace(rows, cols) / sizeof(float));
    host::newtonSchulz(g.data(), out.data(), rows, cols, NewtonSchulzHyper{}, ws.data());
    std::vector<double> want =
        ref::newtonSchulz(std::vector<double>(g.begin(), g.end()), rows, cols);
    expectClose(out, want, 1e-4, "newton-schulz");
  }
}

TEST(RuntimeKernels, NewtonSchulzNormalisationsByHand) {
  // G = [3, 4] * 1e-6 (||G|| = 5e-6) with eps 1e-5 and no iteration: the
  // output is the normalised input. Adding eps: G / 1.5e-5 = [0.2, 0.2667];
  // clamping (torch.optim.Muon): G / max(5e-6, 1e-5) = [0.3, 0.4]. A 2x1
  // matrix (worked transposed) gives the same; a norm above eps is clamped
  // to itself: [3, 4] -> [0.6, 0.8].
  NewtonSchulzHyper h;
  h.steps = 0;
  h.eps = 1e-5f;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 2}, {2, 1}}) {
    std::vector<float> ws(host::newtonSchulzWorkspace(rows, cols) / sizeof(float));
    std::vector<float> g = {3e-6f, 4e-6f}, out(2);
    h.norm = NsNorm::AddEps;
    host::newtonSchulz(g.data(), out.data(), rows, cols, h, ws.data());
    EXPECT_NEAR(out[0], 0.2, 1e-6);
    EXPECT_NEAR(out[1], 0.8 / 3, 1e-6);
    h.norm = NsNorm::Clamp;
    host::newtonSchulz(g.data(), out.data(), rows, cols, h, ws.data());
    EXPECT_NEAR(out[0], 0.3, 1e-6);
    EXPECT_NEAR(out[1], 0.4, 1e-6);
    g = {3.f, 4.f};
    host::newtonSchulz(g.data(), out.data(), rows, cols, h, ws.data());
    EXPECT_FLOAT_EQ(out[0], 0.6f);
    EXPECT_FLOAT_EQ(out[1], 0.8f);
  }
}

TEST(RuntimeKernels, NewtonSchulzCoefficientsByHand) {
  // A 1 x 2 matrix X: A = X X^T is the scalar s = ||X||^2, so each step
  // multiplies X by a + b s + c s^2. From [3, 4] clamped to [0.6, 0.8]
  // (s = 1) with (a, b, c) = (1.5, -0.5, 0.25): x1.25 (s = 1.5625), then
  // x(1.5 - 0.78125 + 0.6103515625) = x1.3291015625.
  NewtonSchulzHyper h;
  h.steps = 2;
  h.a = 1.5f;
  h.b = -0.5f;
  h.c = 0.25f;
  h.norm = NsNorm::Clamp;
  std::vector<float> g = {3.f, 4.f}, out(2);
  std::vector<float> ws(host::newtonSchulzWorkspace(1, 2) / sizeof(float));
  host::newtonSchulz(g.data(), out.data(), 1, 2, h, ws.data());
  EXPECT_FLOAT_EQ(out[0], 0.6f * 1.25f * 1.3291015625f);
  EXPECT_FLOAT_EQ(out[1], 0.8f * 1.25f * 1.3291015625f);
}

TEST(RuntimeKernels, NewtonSchulzOptionsMatchReference) {
  // A gradient small beside eps (||G|| about 2.8e-3, eps 1e-2), so the two
  // normalisations differ by a third; torch's coefficients and the cubic
  // iteration (1.5, -0.5, 0).
  struct Case {
    NsNorm norm;
    int64_t steps;
    float a, b, c;
  } cases[] = {{NsNorm::Clamp, 5, 3.4445f, -4.7750f, 2.0315f},
               {NsNorm::AddEps, 5, 3.4445f, -4.7750f, 2.0315f},
               {NsNorm::Clamp, 8, 1.5f, -0.5f, 0.f},
               {NsNorm::AddEps, 3, 1.5f, -0.5f, 0.f}};
  for (const Case &k : cases)
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{16, 48}, {48, 16}}) {
      NewtonSchulzHyper h;
      h.steps = k.steps;
      h.a = k.a;
      h.b = k.b;
      h.c = k.c;
      h.eps = 1e-2f;
      h.norm = k.norm;
      std::vector<float> g = random(rows * cols, 7, 1e-4f), out(rows * cols);
      std::vector<float> ws(host::newtonSchulzWorkspace(rows, cols) / sizeof(float));
      host::newtonSchulz(g.data(), out.data(), rows, cols, h, ws.data());
      ref::Ns o{k.steps, k.a, k.b, k.c, h.eps, k.norm == NsNorm::Clamp};
      expectClose(out, ref::newtonSchulz(std::vector<double>(g.begin(), g.end()), rows,
                                         cols, o),
                  1e-4, "newton-schulz with options");
    }
}

/// The largest |got - want| over the largest |want|.
double relDiff(const std::vector<float> &got, const std::vector<float> &want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return diff / scale;
}

/// Square, wide and tall shapes, with sides that are not multiples of a
/// BLAS block.
const std::pair<int64_t, int64_t> nsShapes[] = {{64, 64}, {37, 101}, {101, 37}, {5, 200}};

TEST(RuntimeKernels, NewtonSchulzSyrkFormMatchesGemmForm) {
  // The symmetric form (ssyrk, one triangle mirrored) and the three GEMMs
  // compute the same products in another order: in fp32 they agree within
  // 2e-5 of the largest magnitude after 5 steps, and each is within 1e-4 of
  // the double reference.
  for (auto [rows, cols] : nsShapes) {
    std::vector<float> g = random(rows * cols, 11);
    std::vector<float> ws(host::newtonSchulzWorkspace(rows, cols) / sizeof(float));
    NewtonSchulzHyper h;
    std::vector<float> syrk(rows * cols), gemm(rows * cols);
    h.form = NsForm::Syrk;
    host::newtonSchulz(g.data(), syrk.data(), rows, cols, h, ws.data());
    h.form = NsForm::Gemm;
    host::newtonSchulz(g.data(), gemm.data(), rows, cols, h, ws.data());
    EXPECT_LE(relDiff(syrk, gemm), 2e-5) << rows << "x" << cols;
    const ref::Mat want =
        ref::newtonSchulz(std::vector<double>(g.begin(), g.end()), rows, cols);
    expectClose(syrk, want, 1e-4, "newton-schulz, syrk form");
    expectClose(gemm, want, 1e-4, "newton-schulz, gemm form");
  }
}

/// ||got - want||_F / ||want||_F.
double frobeniusRel(const std::vector<float> &got, const ref::Mat &want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

TEST(RuntimeKernels, NewtonSchulzBF16MatchesRoundingReference) {
  // NsPrecision::BF16 against the double reference that rounds X, A, B and
  // each new X to bf16 at the same points. Every output is a bf16 value.
  // A value near a rounding tie may round the other way from the
  // reference's (double there, fp32 sums here), and the iteration carries
  // that on, so the bound is on the whole matrix: within 8e-3 of the
  // reference in the Frobenius norm (4.1e-3 at most on these matrices),
  // while the unrounded fp32 reference is more than 1e-2 away (1.3e-2 or
  // more): the rounding is the reference's, not merely some rounding. Both
  // forms give the same.
  for (auto [rows, cols] : nsShapes) {
    std::vector<float> g = random(rows * cols, 13);
    std::vector<float> ws(host::newtonSchulzWorkspace(rows, cols) / sizeof(float));
    NewtonSchulzHyper h;
    h.precision = NsPrecision::BF16;
    std::vector<float> syrk(rows * cols), gemm(rows * cols);
    h.form = NsForm::Syrk;
    host::newtonSchulz(g.data(), syrk.data(), rows, cols, h, ws.data());
    h.form = NsForm::Gemm;
    host::newtonSchulz(g.data(), gemm.data(), rows, cols, h, ws.data());
    for (float x : syrk)
      ASSERT_EQ(host::fromBF16(host::toBF16(x)), x) << "not a bf16 value";
    const std::vector<double> in(g.begin(), g.end());
    ref::Ns o;
    o.bf16 = true;
    const ref::Mat want = ref::newtonSchulz(in, rows, cols, o);
    const ref::Mat fp32 = ref::newtonSchulz(in, rows, cols);
    EXPECT_LE(frobeniusRel(syrk, want), 8e-3) << rows << "x" << cols << " syrk";
    EXPECT_LE(frobeniusRel(gemm, want), 8e-3) << rows << "x" << cols << " gemm";
    EXPECT_GT(frobeniusRel(syrk, fp32), 1e-2) << rows << "x" << cols;
  }
}

TEST(RuntimeKernels, NewtonSchulzApproximatelyOrthogonalises) {
  // After 5 quintic steps the singular values sit near [0.7, 1.2]: X X^T is
  // near identity-like in trace (s singular values squared, each in range).
  const int64_t rows = 24, cols = 64;
  std::vector<float> g = random(rows * cols, 4);
  std::vector<float> out(rows * cols);
  std::vector<float> ws(host::newtonSchulzWorkspace(rows, cols) / sizeof(float));
  host::newtonSchulz(g.data(), out.data(), rows, cols, NewtonSchulzHyper{}, ws.data());
  double trace = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < cols; ++k)
      trace += double(out[i * cols + k]) * out[i * cols + k];
  EXPECT_GT(trace / rows, 0.5);
  EXPECT_LT(trace / rows, 1.5);
}

TEST(RuntimeKernels, MuonStepMatchesReference) {
  const int64_t rows = 8, cols = 12;
  MuonHyper h;
  h.lr = 0.02f;
  h.momentum = 0.95f;
  h.weightDecay = 0.01f;
  // Muon's defaults with each scale, then torch.optim.Muon's options:
  // Nesterov off, clamping, another eps, 4 steps of other coefficients.
  for (int variant = 0; variant < 3; ++variant) {
    const MuonScale scale = variant == 0 ? MuonScale::MatchRmsAdamW : MuonScale::Original;
    h.scale = scale;
    h.nesterov = variant < 2;
    ref::Ns o;
    if (variant == 2) {
      h.ns = {4, 3.f, -3.2f, 1.2f, 1e-4f, NsNorm::Clamp};
      o = {4, 3.0, -3.2, 1.2, 1e-4, true};
    }
    std::vector<float> p = random(rows * cols, 5), buf(rows * cols, 0.f);
    std::vector<float> scratch(rows * cols +
                               host::newtonSchulzWorkspace(rows, cols) / sizeof(float));
    std::vector<double> rp(p.begin(), p.end()), rb(rows * cols, 0);
    for (int64_t t = 1; t <= 3; ++t) {
      std::vector<float> g = random(rows * cols, 300 + t);
      host::muonStep(p.data(), g.data(), buf.data(), rows, cols, h, scratch.data());
      std::vector<double> u(rows * cols);
      for (int64_t i = 0; i < rows * cols; ++i) {
        rb[i] = h.momentum * rb[i] + (1 - h.momentum) * g[i];
        u[i] = h.nesterov ? g[i] + h.momentum * (rb[i] - g[i]) : rb[i];
      }
      std::vector<double> ortho = ref::newtonSchulz(u, rows, cols, o);
      double s = scale == MuonScale::MatchRmsAdamW
                     ? 0.2 * std::sqrt(double(std::max(rows, cols)))
                     : std::sqrt(std::max(1.0, double(rows) / double(cols)));
      for (int64_t i = 0; i < rows * cols; ++i)
        rp[i] = rp[i] - h.lr * h.weightDecay * rp[i] - h.lr * s * ortho[i];
    }
    expectClose(p, rp, 1e-5, "muon");
  }
}

TEST(RuntimeKernels, MuonScalesByHand) {
  // p = 1, O = 1, lr 0.1, wd 0.5: p = 1 - 0.05 - 0.1 * scale, where scale
  // for 8 x 12 is 0.2 sqrt(12) = 0.69282 (match_rms_adamw), sqrt(max(1,
  // 2/3)) = 1 (original), sqrt(2/3) = 0.81650 (spectral_unclamped); for
  // 12 x 8 the same, sqrt(3/2) = 1.22474, sqrt(3/2).
  const double want[2][3] = {{0.692820323, 1.0, 0.816496581},
                             {0.692820323, 1.224744871, 1.224744871}};
  for (int tall = 0; tall < 2; ++tall)
    for (int k = 0; k < 3; ++k) {
      const int64_t rows = tall ? 12 : 8, cols = tall ? 8 : 12;
      MuonHyper h;
      h.lr = 0.1f;
      h.weightDecay = 0.5f;
      h.scale = static_cast<MuonScale>(k);
      std::vector<float> p(rows * cols, 1.f), o(rows * cols, 1.f);
      host::muonApply(p.data(), o.data(), rows, cols, h);
      EXPECT_NEAR(p[0], 0.95 - 0.1 * want[tall][k], 1e-6) << rows << "x" << cols << " " << k;
      EXPECT_EQ(p.back(), p[0]);
    }
}

TEST(RuntimeKernels, SumSquaresAccumulatesInDouble) {
  EXPECT_EQ(host::sumSquares(nullptr, 0), 0.0);
  const float x[] = {3.f, -4.f, 12.f};
  EXPECT_EQ(host::sumSquares(x, 3), 169.0);
  // Squares beyond fp32's range, and small ones that an fp32 sum would
  // lose beside 1: 1 + 10^6 x (2^-10)^2 = 1 + 10^6 / 2^20.
  const float big[] = {1e20f, -1e20f};
  EXPECT_NEAR(host::sumSquares(big, 2), 2 * double(1e20f) * double(1e20f), 1e25);
  std::vector<float> many(1000001, 1.f / 1024);
  many[0] = 1.f;
  EXPECT_DOUBLE_EQ(host::sumSquares(many.data(), int64_t(many.size())),
                   1.0 + 1e6 / 1048576.0);
}

TEST(RuntimeKernels, BF16RoundsToNearestEven) {
  EXPECT_EQ(host::toBF16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between two bf16 values: ties go to even (1.0).
  EXPECT_EQ(host::toBF16(1.0f + 1.0f / 256), 0x3f80);
  // 1 + 3 * 2^-8 is halfway too: rounds up to the even neighbour.
  EXPECT_EQ(host::toBF16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_TRUE(std::isnan(host::fromBF16(host::toBF16(std::nanf("")))));
  std::vector<float> x = random(100, 6, 10.f), back(100);
  std::vector<uint16_t> h(100);
  host::castF32ToBF16(x.data(), h.data(), 100);
  host::castBF16ToF32(h.data(), back.data(), 100);
  for (int i = 0; i < 100; ++i)
    EXPECT_NEAR(back[i], x[i], std::fabs(x[i]) / 128);
}

} // namespace

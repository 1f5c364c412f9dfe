//===- Kernels.cpp - Host twins of the runtime kernels --------------------===//
#include "mfsdp/runtime/Kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace mfsdp::rt::host {

void adamwStep(float *p, const float *g, float *m, float *v, int64_t n,
               const AdamWHyper &h, int64_t step) {
  const float c1 = 1.f - std::pow(h.beta1, static_cast<float>(step));
  const float c2 = 1.f - std::pow(h.beta2, static_cast<float>(step));
  const float decay = 1.f - h.lr * h.weightDecay;
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i];
    float mi = h.beta1 * m[i] + (1.f - h.beta1) * gi;
    float vi = h.beta2 * v[i] + (1.f - h.beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float denom = std::sqrt(vi / c2) + h.eps;
    p[i] = p[i] * decay - h.lr * (mi / c1) / denom;
  }
}

void sgdStep(float *p, const float *g, float *buf, int64_t n, const SGDHyper &h,
             int64_t step) {
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i] + h.weightDecay * p[i];
    if (h.momentum != 0.f) {
      float b = step <= 1 ? d : h.momentum * buf[i] + d;
      buf[i] = b;
      d = h.nesterov ? d + h.momentum * b : b;
    }
    p[i] -= h.lr * d;
  }
}

void muonMomentum(const float *g, float *buf, float *out, int64_t n, float mu,
                  bool nesterov) {
  for (int64_t i = 0; i < n; ++i) {
    float b = mu * buf[i] + (1.f - mu) * g[i];
    buf[i] = b;
    out[i] = nesterov ? g[i] + mu * (b - g[i]) : b;
  }
}

int64_t newtonSchulzWorkspace(int64_t rows, int64_t cols) {
  int64_t s = std::min(rows, cols), l = std::max(rows, cols);
  // X (s x l), A and B (s x s), and the new X (s x l).
  return static_cast<int64_t>(sizeof(float)) * (2 * s * l + 2 * s * s);
}

void newtonSchulz(const float *in, float *out, int64_t rows, int64_t cols,
                  int64_t steps, float *ws) {
  const bool transposed = rows > cols;
  const int64_t s = std::min(rows, cols), l = std::max(rows, cols);
  float *X = ws, *A = X + s * l, *B = A + s * s, *Y = B + s * s;
  double norm = 0;
  for (int64_t i = 0; i < rows * cols; ++i)
    norm += static_cast<double>(in[i]) * in[i];
  const float inv = 1.f / (static_cast<float>(std::sqrt(norm)) + 1e-7f);
  // X is the s x l (wide) orientation, row-major.
  if (!transposed) {
    for (int64_t i = 0; i < s * l; ++i)
      X[i] = in[i] * inv;
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        X[c * l + r] = in[r * cols + c] * inv;
  }
  const int S = static_cast<int>(s), L = static_cast<int>(l);
  for (int64_t k = 0; k < steps; ++k) {
    // A = X X^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, S, S, L, 1.f, X, L, X,
                L, 0.f, A, S);
    // B = b A + c A A
    std::memcpy(B, A, sizeof(float) * s * s);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, S, S, kNsC, A, S,
                A, S, kNsB, B, S);
    // X = a X + B X
    std::memcpy(Y, X, sizeof(float) * s * l);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, L, S, 1.f, B, S,
                X, L, kNsA, Y, L);
    std::swap(X, Y);
  }
  if (!transposed) {
    std::memcpy(out, X, sizeof(float) * s * l);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        out[r * cols + c] = X[c * l + r];
  }
}

void muonApply(float *p, const float *o, int64_t rows, int64_t cols,
               const MuonHyper &h) {
  const float scale =
      h.scale == MuonScale::MatchRmsAdamW
          ? 0.2f * std::sqrt(static_cast<float>(std::max(rows, cols)))
          : std::sqrt(std::max(1.f, static_cast<float>(rows) / static_cast<float>(cols)));
  const float decay = 1.f - h.lr * h.weightDecay;
  for (int64_t i = 0; i < rows * cols; ++i)
    p[i] = p[i] * decay - h.lr * scale * o[i];
}

void muonStep(float *p, const float *g, float *buf, int64_t rows, int64_t cols,
              const MuonHyper &h, float *scratch) {
  float *update = scratch;
  float *ws = scratch + rows * cols;
  muonMomentum(g, buf, update, rows * cols, h.momentum, h.nesterov);
  newtonSchulz(update, update, rows, cols, h.nsSteps, ws);
  muonApply(p, update, rows, cols, h);
}

uint16_t toBF16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu))
    return static_cast<uint16_t>((bits >> 16) | 0x0040u); // quiet NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float fromBF16(uint16_t x) {
  uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

void castF32ToBF16(const float *in, uint16_t *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = toBF16(in[i]);
}

void castBF16ToF32(const uint16_t *in, float *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = fromBF16(in[i]);
}

} // namespace mfsdp::rt::host

//===- Kernels.cpp - Host twins of the runtime kernels --------------------===//
#include "mfsdp/runtime/Kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace mfsdp::rt::host {

namespace {
/// Four elements of adamwStep. The same operations in the same order as
/// the scalar form (div and sqrt are correctly rounded, nothing is
/// contracted into an FMA), so every element is bitwise what the scalar
/// loop gives; written with SSE2 because GCC does not vectorise std::sqrt
/// under -fmath-errno, and the scalar loop is bound by its divisions
/// (about a third of the memory bandwidth).
struct AdamW4 {
#if defined(__SSE2__)
  __m128 b1, b2, ob1, ob2, c1, c2, decay, lr, eps;
  AdamW4(float b1_, float b2_, float c1_, float c2_, float decay_, float lr_,
         float eps_)
      : b1(_mm_set1_ps(b1_)), b2(_mm_set1_ps(b2_)), ob1(_mm_set1_ps(1.f - b1_)),
        ob2(_mm_set1_ps(1.f - b2_)), c1(_mm_set1_ps(c1_)), c2(_mm_set1_ps(c2_)),
        decay(_mm_set1_ps(decay_)), lr(_mm_set1_ps(lr_)), eps(_mm_set1_ps(eps_)) {}
  void operator()(float *p, const float *g, float *m, float *v) const {
    __m128 gi = _mm_loadu_ps(g);
    __m128 mi = _mm_add_ps(_mm_mul_ps(b1, _mm_loadu_ps(m)), _mm_mul_ps(ob1, gi));
    __m128 vi = _mm_add_ps(_mm_mul_ps(b2, _mm_loadu_ps(v)),
                           _mm_mul_ps(_mm_mul_ps(ob2, gi), gi));
    _mm_storeu_ps(m, mi);
    _mm_storeu_ps(v, vi);
    __m128 denom = _mm_add_ps(_mm_sqrt_ps(_mm_div_ps(vi, c2)), eps);
    __m128 step = _mm_div_ps(_mm_mul_ps(lr, _mm_div_ps(mi, c1)), denom);
    _mm_storeu_ps(p, _mm_sub_ps(_mm_mul_ps(_mm_loadu_ps(p), decay), step));
  }
#else
  float b1, b2, c1, c2, decay, lr, eps;
  AdamW4(float b1_, float b2_, float c1_, float c2_, float decay_, float lr_,
         float eps_)
      : b1(b1_), b2(b2_), c1(c1_), c2(c2_), decay(decay_), lr(lr_), eps(eps_) {}
  void operator()(float *p, const float *g, float *m, float *v) const {
    for (int k = 0; k < 4; ++k) {
      float gi = g[k];
      float mi = b1 * m[k] + (1.f - b1) * gi;
      float vi = b2 * v[k] + (1.f - b2) * gi * gi;
      m[k] = mi;
      v[k] = vi;
      float denom = std::sqrt(vi / c2) + eps;
      p[k] = p[k] * decay - lr * (mi / c1) / denom;
    }
  }
#endif
};
} // namespace

namespace {
/// n elements of AdamW at step `step` (adamwStep's loop; adamwMulti's per
/// tensor).
void adamwRange(float *p, const float *g, float *m, float *v, int64_t n,
                const AdamWHyper &h, int64_t step) {
  // Per element: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g g;
  // p = p (1 - lr wd) - lr (m / c1) / (sqrt(v / c2) + eps).
  const float c1 = 1.f - std::pow(h.beta1, static_cast<float>(step));
  const float c2 = 1.f - std::pow(h.beta2, static_cast<float>(step));
  const float decay = 1.f - h.lr * h.weightDecay;
  const AdamW4 update(h.beta1, h.beta2, c1, c2, decay, h.lr, h.eps);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    update(p + i, g + i, m + i, v + i);
  if (i < n) {
    // The last 1-3 elements through the same four-wide form, zero-padded.
    float tp[4] = {}, tg[4] = {}, tm[4] = {}, tv[4] = {};
    const int64_t r = n - i;
    std::memcpy(tp, p + i, sizeof(float) * r);
    std::memcpy(tg, g + i, sizeof(float) * r);
    std::memcpy(tm, m + i, sizeof(float) * r);
    std::memcpy(tv, v + i, sizeof(float) * r);
    update(tp, tg, tm, tv);
    std::memcpy(p + i, tp, sizeof(float) * r);
    std::memcpy(m + i, tm, sizeof(float) * r);
    std::memcpy(v + i, tv, sizeof(float) * r);
  }
}

/// n elements of SGD at step `step` (sgdStep's loop; sgdMulti's per tensor).
void sgdRange(float *p, const float *g, float *buf, int64_t n, const SGDHyper &h,
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
} // namespace

void adamwStep(float *p, const float *g, float *m, float *v, int64_t n,
               const AdamWHyper &h, int64_t step) {
  adamwRange(p, g, m, v, n, h, step);
}

void adamwMulti(const AdamWTensor *tensors, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    const AdamWTensor &t = tensors[k];
    if (t.count > 0)
      adamwRange(t.param, t.grad, t.m, t.v, t.count, t.h, t.step);
  }
}

void sgdStep(float *p, const float *g, float *buf, int64_t n, const SGDHyper &h,
             int64_t step) {
  sgdRange(p, g, buf, n, h, step);
}

void sgdMulti(const SGDTensor *tensors, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    const SGDTensor &t = tensors[k];
    if (t.count > 0)
      sgdRange(t.param, t.grad, t.buf, t.count, t.h, t.step);
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

namespace {
/// C (n x n, row-major) whose lower triangle holds a symmetric matrix:
/// the upper triangle gets its mirror, tile by tile.
void mirrorLower(float *C, int64_t n) {
  constexpr int64_t T = 64;
  for (int64_t i0 = 0; i0 < n; i0 += T)
    for (int64_t j0 = i0; j0 < n; j0 += T)
      for (int64_t i = i0; i < std::min(i0 + T, n); ++i)
        for (int64_t j = std::max(j0, i + 1); j < std::min(j0 + T, n); ++j)
          C[i * n + j] = C[j * n + i];
}

/// Each of n floats rounded to the nearest bf16 (kept in fp32).
void roundBF16(float *x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    x[i] = fromBF16(toBF16(x[i]));
}
} // namespace

void newtonSchulz(const float *in, float *out, int64_t rows, int64_t cols,
                  const NewtonSchulzHyper &h, float *ws) {
  const bool transposed = rows > cols;
  const int64_t s = std::min(rows, cols), l = std::max(rows, cols);
  float *X = ws, *A = X + s * l, *B = A + s * s, *Y = B + s * s;
  double norm = 0;
  for (int64_t i = 0; i < rows * cols; ++i)
    norm += static_cast<double>(in[i]) * in[i];
  const float frobenius = static_cast<float>(std::sqrt(norm));
  const float inv = 1.f / (h.norm == NsNorm::Clamp ? std::max(frobenius, h.eps)
                                                   : frobenius + h.eps);
  // X is the s x l (wide) orientation, row-major.
  if (!transposed) {
    for (int64_t i = 0; i < s * l; ++i)
      X[i] = in[i] * inv;
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        X[c * l + r] = in[r * cols + c] * inv;
  }
  // bf16 (NsPrecision::BF16): every matrix rounded to bf16 when it is
  // made, so each product below has bf16 operands; its fp32 accumulation
  // and the fused combination are rounded once, as a bf16 GEMM does.
  const bool bf16 = h.precision == NsPrecision::BF16;
  if (bf16)
    roundBF16(X, s * l);
  const bool syrk = h.form == NsForm::Syrk;
  const int S = static_cast<int>(s), L = static_cast<int>(l);
  for (int64_t k = 0; k < h.steps; ++k) {
    // A = X X^T: syrk computes the lower triangle (s^2 l FLOPs, not 2 s^2 l).
    if (syrk) {
      cblas_ssyrk(CblasRowMajor, CblasLower, CblasNoTrans, S, L, 1.f, X, L,
                  0.f, A, S);
      mirrorLower(A, s);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, S, S, L, 1.f, X, L,
                  X, L, 0.f, A, S);
    }
    if (bf16)
      roundBF16(A, s * s);
    // B = b A + c A A; A is symmetric, so A A = A A^T, a syrk of A.
    std::memcpy(B, A, sizeof(float) * s * s);
    if (syrk) {
      cblas_ssyrk(CblasRowMajor, CblasLower, CblasNoTrans, S, S, h.c, A, S,
                  h.b, B, S);
      mirrorLower(B, s);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, S, S, h.c, A,
                  S, A, S, h.b, B, S);
    }
    if (bf16)
      roundBF16(B, s * s);
    // X = a X + B X
    std::memcpy(Y, X, sizeof(float) * s * l);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, L, S, 1.f, B, S, X,
                L, h.a, Y, L);
    if (bf16)
      roundBF16(Y, s * l);
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
  const float scale = muonScaleFactor(rows, cols, h.scale);
  const float decay = 1.f - h.lr * h.weightDecay;
  for (int64_t i = 0; i < rows * cols; ++i)
    p[i] = p[i] * decay - h.lr * scale * o[i];
}

void muonStep(float *p, const float *g, float *buf, int64_t rows, int64_t cols,
              const MuonHyper &h, float *scratch) {
  float *update = scratch;
  float *ws = scratch + rows * cols;
  muonMomentum(g, buf, update, rows * cols, h.momentum, h.nesterov);
  newtonSchulz(update, update, rows, cols, h.ns, ws);
  muonApply(p, update, rows, cols, h);
}

double sumSquares(const float *x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

namespace {
/// Copies each block row (blockCols contiguous floats of the whole tensor)
/// of the blocks at packed positions [first, first + n) between `whole`
/// and `packed`, in the direction `toPacked` says.
void moveBlocks(const float *src, float *dst, const BlockGrid &g, int64_t first,
                int64_t n, bool toPacked) {
  const int64_t elems = g.blockElems();
  const size_t rowBytes = sizeof(float) * static_cast<size_t>(g.blockCols);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = g.blockAt(first + i);
    for (int64_t r = 0; r < g.blockRows; ++r) {
      const int64_t w = g.wholeOffset(k, r * g.blockCols);
      const int64_t p = i * elems + r * g.blockCols;
      if (toPacked)
        std::memcpy(dst + p, src + w, rowBytes);
      else
        std::memcpy(dst + w, src + p, rowBytes);
    }
  }
}
} // namespace

void packBlocks(const float *whole, float *packed, const BlockGrid &g,
                int64_t firstBlock, int64_t numBlocks) {
  moveBlocks(whole, packed, g, firstBlock, numBlocks, true);
}

void unpackBlocks(const float *packed, float *whole, const BlockGrid &g,
                  int64_t firstBlock, int64_t numBlocks) {
  moveBlocks(packed, whole, g, firstBlock, numBlocks, false);
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

uint16_t addBF16(uint16_t a, uint16_t b) { return toBF16(fromBF16(a) + fromBF16(b)); }

void sumBF16(const uint16_t *in, uint16_t *inout, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    inout[i] = addBF16(in[i], inout[i]);
}

void castF32ToBF16(const float *in, uint16_t *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = toBF16(in[i]);
}

void castF32ToBF16Strided(uint16_t *dst, int64_t dstPitch, const float *src,
                          int64_t srcPitch, int64_t width, int64_t height) {
  for (int64_t i = 0; i < height && width > 0; ++i)
    castF32ToBF16(src + i * srcPitch, dst + i * dstPitch, width);
}

void castBF16ToF32(const uint16_t *in, float *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = fromBF16(in[i]);
}

} // namespace mfsdp::rt::host

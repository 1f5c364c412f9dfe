//===- Model.cpp - A small transformer-style model with host backward -----===//
#include "Model.h"

#include <cmath>
#include <cstring>

namespace mfsdp::example {

namespace {

// splitmix64 (Steele, Lea, Flood): a bijective 64-bit mixer.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// FNV-1a, 64 bit.
uint64_t hashName(const std::string &s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001B3ull;
  }
  return h;
}

// Uniform in [0, 1) with 24 bits: exact in float and double.
double unit(uint64_t x) {
  return static_cast<double>(x >> 40) * (1.0 / 16777216.0);
}

// Element i of stream `stream`: approximately N(0, 1), as the centred sum of
// four uniforms scaled to unit variance (Irwin-Hall). Only integer hashing,
// exact additions and one correctly rounded sqrt: bit-identical everywhere.
double gauss(uint64_t stream, uint64_t i) {
  uint64_t k = mix(stream ^ mix(i));
  double s = unit(mix(k)) + unit(mix(k + 1)) + unit(mix(k + 2)) +
             unit(mix(k + 3));
  return (s - 2.0) * std::sqrt(3.0);
}

bool endsWith(const std::string &s, const char *suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

template <typename T> T gelu(T u) {
  const T k = static_cast<T>(0.7978845608028654); // sqrt(2/pi)
  const T c = static_cast<T>(0.044715);
  T t = std::tanh(k * (u + c * u * u * u));
  return static_cast<T>(0.5) * u * (static_cast<T>(1) + t);
}

template <typename T> T geluGrad(T u) {
  const T k = static_cast<T>(0.7978845608028654);
  const T c = static_cast<T>(0.044715);
  T t = std::tanh(k * (u + c * u * u * u));
  return static_cast<T>(0.5) * (static_cast<T>(1) + t) +
         static_cast<T>(0.5) * u * (static_cast<T>(1) - t * t) * k *
             (static_cast<T>(1) + static_cast<T>(3) * c * u * u);
}

template <typename T>
double lossAndGradT(const T *y, const T *target, int64_t n, T *dy) {
  if (n <= 0)
    return 0.0;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double d = static_cast<double>(y[i]) - static_cast<double>(target[i]);
    sum += d * d;
    dy[i] = static_cast<T>(d / static_cast<double>(n));
  }
  return 0.5 * sum / static_cast<double>(n);
}

} // namespace

double geluTanh(double u) { return gelu<double>(u); }
double geluTanhGrad(double u) { return geluGrad<double>(u); }

std::vector<ParamInfo> modelParams(const ModelConfig &c) {
  std::vector<ParamInfo> out;
  for (int64_t l = 0; l < c.layers; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    out.push_back({p + "norm.weight", {c.hidden}, l});
    out.push_back({p + "fc1.weight", {c.inter, c.hidden}, l});
    out.push_back({p + "fc2.weight", {c.hidden, c.inter}, l});
    out.push_back({p + "fc2.bias", {c.hidden}, l});
  }
  return out;
}

int64_t numel(const ParamInfo &p) {
  int64_t n = 1;
  for (int64_t d : p.shape)
    n *= d;
  return n;
}

float initParamElement(const ParamInfo &p, int64_t flatIndex) {
  double z = gauss(hashName(p.name), static_cast<uint64_t>(flatIndex));
  if (endsWith(p.name, "norm.weight"))
    return static_cast<float>(1.0 + 0.1 * z);
  if (endsWith(p.name, ".bias") || p.shape.size() < 2)
    return static_cast<float>(0.1 * z);
  double fanIn = static_cast<double>(p.shape.back() > 0 ? p.shape.back() : 1);
  return static_cast<float>(z / std::sqrt(fanIn));
}

void initParam(const ParamInfo &p, float *out) {
  int64_t n = numel(p);
  for (int64_t i = 0; i < n; ++i)
    out[i] = initParamElement(p, i);
}

void makeBatch(const ModelConfig &c, uint64_t seed, int64_t rank, int64_t step,
               int64_t micro, std::vector<float> &input,
               std::vector<float> &target) {
  const int64_t T = c.tokens > 0 ? c.tokens : 0;
  const int64_t H = c.hidden > 0 ? c.hidden : 0;
  uint64_t base = mix(mix(mix(mix(seed) ^ static_cast<uint64_t>(rank)) ^
                          static_cast<uint64_t>(step)) ^
                      static_cast<uint64_t>(micro));
  uint64_t inStream = mix(base ^ 0x1ull), noiseStream = mix(base ^ 0x2ull);
  input.assign(static_cast<size_t>(T * H), 0.f);
  target.assign(static_cast<size_t>(T * H), 0.f);
  for (int64_t i = 0; i < T * H; ++i)
    input[i] = static_cast<float>(gauss(inStream, static_cast<uint64_t>(i)));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < H; ++j) {
      int64_t i = t * H + j;
      double shifted = static_cast<double>(input[t * H + (j + 1) % H]);
      target[i] = static_cast<float>(
          0.5 * shifted + 0.1 * gauss(noiseStream, static_cast<uint64_t>(i)));
    }
}

template <typename T>
BasicBlock<T>::BasicBlock(int64_t hidden, int64_t inter, int64_t tokens)
    : hidden_(hidden > 0 ? hidden : 0), inter_(inter > 0 ? inter : 0),
      tokens_(tokens > 0 ? tokens : 0) {
  size_t th = static_cast<size_t>(tokens_ * hidden_);
  size_t ti = static_cast<size_t>(tokens_ * inter_);
  x_.assign(th, T(0));
  h_.assign(th, T(0));
  dh_.assign(static_cast<size_t>(hidden_), T(0));
  inv_.assign(static_cast<size_t>(tokens_), T(0));
  u_.assign(ti, T(0));
  a_.assign(ti, T(0));
  du_.assign(static_cast<size_t>(inter_), T(0));
}

template <typename T>
void BasicBlock<T>::forward(const T *norm, const T *fc1, const T *fc2,
                            const T *bias, const T *x, T *y) {
  const int64_t H = hidden_, I = inter_;
  for (int64_t t = 0; t < tokens_; ++t) {
    const T *xr = x + t * H;
    T *xs = x_.data() + t * H, *hr = h_.data() + t * H;
    T *ur = u_.data() + t * I, *ar = a_.data() + t * I;
    T ms = T(0);
    for (int64_t j = 0; j < H; ++j) {
      xs[j] = xr[j];
      ms += xr[j] * xr[j];
    }
    ms /= static_cast<T>(H);
    T inv = T(1) / std::sqrt(ms + static_cast<T>(kRmsEps));
    inv_[t] = inv;
    for (int64_t j = 0; j < H; ++j)
      hr[j] = xs[j] * inv * norm[j];
    for (int64_t k = 0; k < I; ++k) {
      const T *w = fc1 + k * H;
      T s = T(0);
      for (int64_t j = 0; j < H; ++j)
        s += hr[j] * w[j];
      ur[k] = s;
      ar[k] = gelu<T>(s);
    }
    T *yr = y + t * H;
    for (int64_t j = 0; j < H; ++j) {
      const T *w = fc2 + j * I;
      T s = T(0);
      for (int64_t k = 0; k < I; ++k)
        s += ar[k] * w[k];
      yr[j] = xs[j] + s + bias[j];
    }
  }
}

template <typename T>
void BasicBlock<T>::backward(const T *norm, const T *fc1, const T *fc2,
                             const T * /*bias*/, const T *dy, T *dx, T *gNorm,
                             T *gFc1, T *gFc2, T *gBias) {
  const int64_t H = hidden_, I = inter_;
  for (int64_t t = 0; t < tokens_; ++t) {
    const T *dyr = dy + t * H;
    const T *xs = x_.data() + t * H, *hr = h_.data() + t * H;
    const T *ur = u_.data() + t * I, *ar = a_.data() + t * I;
    const T inv = inv_[t];
    // y = x + a W2^T + b2
    for (int64_t j = 0; j < H; ++j) {
      gBias[j] += dyr[j];
      T *g = gFc2 + j * I;
      for (int64_t k = 0; k < I; ++k)
        g[k] += dyr[j] * ar[k];
    }
    // da = dy W2 ; du = da * gelu'(u)
    for (int64_t k = 0; k < I; ++k) {
      T s = T(0);
      for (int64_t j = 0; j < H; ++j)
        s += dyr[j] * fc2[j * I + k];
      du_[k] = s * geluGrad<T>(ur[k]);
    }
    // u = h W1^T: gW1 += du^T h ; dh = du W1
    for (int64_t j = 0; j < H; ++j)
      dh_[j] = T(0);
    for (int64_t k = 0; k < I; ++k) {
      T *g = gFc1 + k * H;
      const T *w = fc1 + k * H;
      const T d = du_[k];
      for (int64_t j = 0; j < H; ++j) {
        g[j] += d * hr[j];
        dh_[j] += d * w[j];
      }
    }
    // h = r * g, r = x * inv: gG += dh * r ; dr = dh * g
    // dx = dy + inv * (dr - r * mean(dr * r))
    T dot = T(0);
    for (int64_t j = 0; j < H; ++j) {
      T r = xs[j] * inv;
      gNorm[j] += dh_[j] * r;
      dh_[j] *= norm[j]; // now dr
      dot += dh_[j] * r;
    }
    dot /= static_cast<T>(H);
    T *dxr = dx + t * H;
    for (int64_t j = 0; j < H; ++j) {
      T r = xs[j] * inv;
      dxr[j] = dyr[j] + inv * (dh_[j] - r * dot);
    }
  }
}

template class BasicBlock<float>;
template class BasicBlock<double>;

double lossAndGrad(const float *y, const float *target, int64_t n, float *dy) {
  return lossAndGradT<float>(y, target, n, dy);
}

double lossAndGrad(const double *y, const double *target, int64_t n,
                   double *dy) {
  return lossAndGradT<double>(y, target, n, dy);
}

} // namespace mfsdp::example

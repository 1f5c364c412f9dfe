//===- Reference.cpp - Single-process reference trainer -------------------===//
#include "Reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace mfsdp::reference {

using example::BasicBlock;
using example::ParamInfo;

namespace {

// C (m x n) = A (m x k) * B (k x n), row-major, double.
void matmul(const double *a, const double *b, double *c, int64_t m, int64_t k,
            int64_t n) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t l = 0; l < k; ++l)
        s += a[i * k + l] * b[l * n + j];
      c[i * n + j] = s;
    }
}

std::vector<double> transpose(const std::vector<double> &x, int64_t rows,
                              int64_t cols) {
  std::vector<double> t(x.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      t[j * rows + i] = x[i * cols + j];
  return t;
}

std::string checkConfig(const TrainConfig &c) {
  const example::ModelConfig &m = c.model;
  if (m.layers < 1 || m.hidden < 1 || m.inter < 1 || m.tokens < 1)
    return "model dimensions must be positive";
  if (c.ranks < 1 || c.microbatches < 1 || c.steps < 0)
    return "ranks and microbatches must be positive, steps non-negative";
  if (c.optimizerOf)
    for (const ParamInfo &p : example::modelParams(m))
      if (c.optimizerOf(p) == Opt::Muon && p.shape.size() != 2)
        return "Muon asked for '" + p.name + "', which is not 2-D";
  if (c.muon.nsSteps < 0)
    return "nsSteps must be non-negative";
  return "";
}

} // namespace

Opt mixedMuonAdamW(const ParamInfo &p) {
  return p.shape.size() == 2 ? Opt::Muon : Opt::AdamW;
}

ParamMap initialParams(const example::ModelConfig &m) {
  ParamMap out;
  for (const ParamInfo &p : example::modelParams(m)) {
    std::vector<float> f(static_cast<size_t>(example::numel(p)));
    example::initParam(p, f.data());
    out[p.name] = std::vector<double>(f.begin(), f.end());
  }
  return out;
}

namespace {
/// x rounded to fp32, then to the nearest bf16 (ties to even): a value of
/// the runtime's (an fp32 master or gradient) cast to bf16.
double toBF16(double x) {
  const float f = static_cast<float>(x);
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if (!std::isfinite(f))
    return f;
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, sizeof(r));
  return r;
}
} // namespace

double globalLossAndGrad(const TrainConfig &c, int64_t step,
                         const ParamMap &params, ParamMap &grads) {
  const example::ModelConfig &m = c.model;
  const std::vector<ParamInfo> infos = example::modelParams(m);
  grads.clear();
  for (const ParamInfo &p : infos)
    grads[p.name].assign(static_cast<size_t>(example::numel(p)), 0.0);
  if (!checkConfig(c).empty())
    return 0.0;

  const int64_t L = m.layers, n = m.tokens * m.hidden;
  // Per layer: pointers to params and grads, in modelParams order.
  std::vector<const double *> P(static_cast<size_t>(4 * L));
  std::vector<double *> G(static_cast<size_t>(4 * L));
  // bf16: the compute copies, one microbatch's gradients, and one rank's
  // bf16 gradient buffers (accumulated over its microbatches).
  ParamMap rounded, microGrads, rankGrads;
  for (size_t i = 0; i < infos.size(); ++i) {
    auto it = params.find(infos[i].name);
    if (it == params.end() ||
        static_cast<int64_t>(it->second.size()) != example::numel(infos[i]))
      return 0.0;
    P[i] = it->second.data();
    G[i] = grads[infos[i].name].data();
    if (c.bf16Compute) {
      std::vector<double> &r = rounded[infos[i].name];
      for (double x : it->second)
        r.push_back(toBF16(x));
      P[i] = r.data();
      rankGrads[infos[i].name].assign(it->second.size(), 0.0);
      microGrads[infos[i].name].assign(it->second.size(), 0.0);
      G[i] = microGrads[infos[i].name].data();
    }
  }

  std::vector<BasicBlock<double>> blocks;
  for (int64_t l = 0; l < L; ++l)
    blocks.emplace_back(m.hidden, m.inter, m.tokens);
  std::vector<std::vector<double>> acts(static_cast<size_t>(L + 1),
                                        std::vector<double>(n));
  std::vector<double> target(n), dy(n), dx(n);
  std::vector<float> inF, tgF;
  double lossSum = 0.0;
  for (int64_t r = 0; r < c.ranks; ++r)
    for (int64_t mb = 0; mb < c.microbatches; ++mb) {
      example::makeBatch(m, c.seed, r, step, mb, inF, tgF);
      std::copy(inF.begin(), inF.end(), acts[0].begin());
      std::copy(tgF.begin(), tgF.end(), target.begin());
      for (int64_t l = 0; l < L; ++l) {
        const double *const *p = &P[4 * l];
        blocks[l].forward(p[0], p[1], p[2], p[3], acts[l].data(),
                          acts[l + 1].data());
      }
      lossSum += example::lossAndGrad(acts[L].data(), target.data(), n,
                                      dy.data());
      for (int64_t l = L - 1; l >= 0; --l) {
        const double *const *p = &P[4 * l];
        double *const *g = &G[4 * l];
        blocks[l].backward(p[0], p[1], p[2], p[3], dy.data(), dx.data(), g[0],
                           g[1], g[2], g[3]);
        dy.swap(dx);
      }
      if (c.bf16Compute)
        // The microbatch's share of the rank's mean gradient added into its
        // bf16 buffer (rounded), which goes to the reduction after the last.
        for (auto &kv : microGrads) {
          std::vector<double> &acc = rankGrads[kv.first];
          std::vector<double> &sum = grads[kv.first];
          for (size_t k = 0; k < kv.second.size(); ++k) {
            acc[k] = toBF16(acc[k] + kv.second[k] / static_cast<double>(c.microbatches));
            kv.second[k] = 0.0;
            if (mb + 1 == c.microbatches) {
              sum[k] += acc[k];
              acc[k] = 0.0;
            }
          }
        }
    }
  const double count = static_cast<double>(c.ranks * c.microbatches);
  for (auto &kv : grads)
    for (double &x : kv.second)
      x /= c.bf16Compute ? static_cast<double>(c.ranks) : count;
  return lossSum / count;
}

void adamwStep(const AdamW &h, int64_t step, std::vector<double> &p,
               const std::vector<double> &g, std::vector<double> &m,
               std::vector<double> &v) {
  const double t = static_cast<double>(step);
  const double c1 = 1.0 - std::pow(h.beta1, t);
  const double c2 = 1.0 - std::pow(h.beta2, t);
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] -= h.lr * h.weightDecay * p[i];
    m[i] = h.beta1 * m[i] + (1.0 - h.beta1) * g[i];
    v[i] = h.beta2 * v[i] + (1.0 - h.beta2) * g[i] * g[i];
    const double mHat = m[i] / c1, vHat = v[i] / c2;
    p[i] -= h.lr * mHat / (std::sqrt(vHat) + h.eps);
  }
}

void sgdStep(const SGD &h, int64_t step, std::vector<double> &p,
             const std::vector<double> &g, std::vector<double> &buf) {
  for (size_t i = 0; i < p.size(); ++i) {
    double d = g[i] + h.weightDecay * p[i];
    if (h.momentum != 0.0) {
      buf[i] = step <= 1 ? d : h.momentum * buf[i] + d;
      d = h.nesterov ? d + h.momentum * buf[i] : buf[i];
    }
    p[i] -= h.lr * d;
  }
}

namespace {
/// x rounded to the nearest bf16 (8 significant bits), ties to even.
double roundBF16(double x) {
  if (x == 0 || !std::isfinite(x))
    return x;
  int e;
  std::frexp(x, &e); // |x| = m 2^e, 0.5 <= m < 1
  const double ulp = std::ldexp(1.0, e - 8);
  return std::nearbyint(x / ulp) * ulp; // the default mode: ties to even
}
void roundAll(std::vector<double> &m, bool bf16) {
  if (bf16)
    for (double &x : m)
      x = roundBF16(x);
}
} // namespace

std::vector<double> newtonSchulz(const std::vector<double> &g, int64_t rows,
                                 int64_t cols, int steps, const NewtonSchulz &o) {
  double norm = 0.0;
  for (double x : g)
    norm += x * x;
  norm = o.clamp ? std::max(std::sqrt(norm), o.eps) : std::sqrt(norm) + o.eps;
  const bool tall = rows > cols;
  std::vector<double> X = tall ? transpose(g, rows, cols) : g;
  const int64_t s = tall ? cols : rows, l = tall ? rows : cols; // s <= l
  for (double &x : X)
    x /= norm;
  roundAll(X, o.bf16);
  std::vector<double> A(s * s), AA(s * s), B(s * s), BX(s * l);
  std::vector<double> Xt(l * s);
  for (int it = 0; it < steps; ++it) {
    Xt = transpose(X, s, l);
    matmul(X.data(), Xt.data(), A.data(), s, l, s); // A = X X^T
    roundAll(A, o.bf16);
    matmul(A.data(), A.data(), AA.data(), s, s, s);
    for (int64_t i = 0; i < s * s; ++i)
      B[i] = o.b * A[i] + o.c * AA[i];
    roundAll(B, o.bf16);
    matmul(B.data(), X.data(), BX.data(), s, s, l);
    for (int64_t i = 0; i < s * l; ++i)
      X[i] = o.a * X[i] + BX[i];
    roundAll(X, o.bf16);
  }
  return tall ? transpose(X, s, l) : X;
}

void muonStep(const Muon &h, int64_t rows, int64_t cols,
              std::vector<double> &p, const std::vector<double> &g,
              std::vector<double> &buf) {
  const double mu = h.momentum;
  std::vector<double> u(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    buf[i] = mu * buf[i] + (1.0 - mu) * g[i];
    u[i] = h.nesterov ? g[i] + mu * (buf[i] - g[i]) : buf[i];
  }
  std::vector<double> O = newtonSchulz(u, rows, cols, h.nsSteps, h.ns);
  const double r = static_cast<double>(rows), c = static_cast<double>(cols);
  const double scale = h.matchRmsAdamW ? 0.2 * std::sqrt(std::max(r, c))
                                       : std::sqrt(std::max(1.0, r / c));
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] -= h.lr * h.weightDecay * p[i];
    p[i] -= h.lr * scale * O[i];
  }
}

Result train(const TrainConfig &c) {
  Result res;
  res.error = checkConfig(c);
  if (!res.error.empty())
    return res;
  const std::vector<ParamInfo> infos = example::modelParams(c.model);
  ParamMap params = initialParams(c.model), grads;
  // Optimizer state per parameter: AdamW (m, v); SGD and Muon (buf).
  ParamMap s1, s2;
  std::vector<Opt> opts;
  for (const ParamInfo &p : infos) {
    opts.push_back(c.optimizerOf ? c.optimizerOf(p) : Opt::AdamW);
    s1[p.name].assign(params[p.name].size(), 0.0);
    s2[p.name].assign(params[p.name].size(), 0.0);
  }
  for (int64_t s = 0; s < c.steps; ++s) {
    res.losses.push_back(globalLossAndGrad(c, s, params, grads));
    double squares = c.clipExtraSq;
    for (const auto &kv : grads)
      for (double x : kv.second)
        squares += x * x;
    const double total = std::sqrt(squares);
    res.gradNorms.push_back(total);
    if (c.clipMaxNorm > 0) {
      const double coef = std::min(1.0, c.clipMaxNorm / (total + 1e-6));
      for (auto &kv : grads)
        for (double &x : kv.second)
          x *= coef;
    }
    for (size_t i = 0; i < infos.size(); ++i) {
      const std::string &name = infos[i].name;
      std::vector<double> &p = params[name];
      const std::vector<double> &g = grads[name];
      const Hyper h = c.hyperOf ? c.hyperOf(s, infos[i]) : Hyper{c.adamw, c.sgd, c.muon};
      switch (opts[i]) {
      case Opt::AdamW:
        adamwStep(h.adamw, s + 1, p, g, s1[name], s2[name]);
        break;
      case Opt::SGD:
        sgdStep(h.sgd, s + 1, p, g, s1[name]);
        break;
      case Opt::Muon:
        muonStep(h.muon, infos[i].shape[0], infos[i].shape[1], p, g, s1[name]);
        break;
      }
    }
  }
  for (auto &kv : params)
    res.params[kv.first] = std::vector<float>(kv.second.begin(), kv.second.end());
  return res;
}

} // namespace mfsdp::reference

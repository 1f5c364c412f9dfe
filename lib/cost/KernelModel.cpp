//===- KernelModel.cpp - Per-kernel GPU roofline --------------------------===//
//
// The formulas are stated in mfsdp/cost/KernelModel.h; the profiles' rates
// and where they come from in lib/planner/Hardware.cpp.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/cost/KernelModel.h"

#include <algorithm>
#include <cmath>

namespace mfsdp::cost {

using planner::AttentionRate;
using planner::HardwareProfile;

namespace {

double gemmRate(const HardwareProfile &p) { return p.gemmFlops * p.gemmEfficiency; }
double memoryRate(const HardwareProfile &p) { return p.hbmBytes * p.hbmEfficiency; }

/// FLOPs of the forward: 2 b h s^2 (d + dv), halved when causal.
double attentionFlops(double batch, int64_t heads, int64_t d, int64_t dv, bool causal,
                      int64_t seq) {
  const double s = static_cast<double>(seq);
  const double f = 2.0 * batch * static_cast<double>(heads) * s * s *
                   static_cast<double>(d + dv);
  return causal ? f / 2 : f;
}

} // namespace

double gemmSeconds(double m, double n, double k, const HardwareProfile &p) {
  if (m <= 0 || n <= 0 || k <= 0)
    return 0;
  const double flops = 2.0 * m * n * k;
  const double bytes = 2.0 * (m * k + k * n + m * n);
  return std::max(p.dispatchSeconds,
                  p.launchSeconds + std::max((flops + p.smallGemmFlops) / gemmRate(p),
                                             bytes / memoryRate(p)));
}

double attentionRate(int64_t headDim, int64_t seq, bool fwdBwd, const HardwareProfile &p) {
  const std::vector<AttentionRate> &rates = p.attention;
  if (rates.empty())
    return gemmRate(p);
  const double d = static_cast<double>(headDim);
  // The two entries around d (or the nearest end).
  size_t hi = 0;
  while (hi < rates.size() && rates[hi].headDim < d)
    ++hi;
  const AttentionRate &b = rates[std::min(hi, rates.size() - 1)];
  const AttentionRate &a = rates[hi == 0 ? 0 : std::min(hi, rates.size()) - 1];
  const double t = (b.headDim > a.headDim && d > a.headDim)
                       ? std::min(1.0, (d - a.headDim) / (b.headDim - a.headDim))
                       : (d >= b.headDim ? 1.0 : 0.0);
  const double s = static_cast<double>(seq);
  auto at = [&](const AttentionRate &r) {
    return fwdBwd ? r.fwdBwdRate * s / (s + r.fwdBwdSeq0) : r.fwdRate * s / (s + r.fwdSeq0);
  };
  return (1 - t) * at(a) + t * at(b);
}

double attentionSeconds(double batch, int64_t heads, int64_t headDim, int64_t headDimV,
                        bool causal, int64_t seq, bool backward, const HardwareProfile &p) {
  const double f = attentionFlops(batch, heads, headDim, headDimV, causal, seq);
  if (f <= 0)
    return 0;
  const double fwd = f / attentionRate(headDim, seq, false, p);
  if (!backward)
    return std::max(p.dispatchSeconds, p.launchSeconds + fwd);
  const double both = 3.5 * f / attentionRate(headDim, seq, true, p);
  // Backward alone: what the pair takes beyond the forward, and never less
  // than its own FLOPs (2.5 F) at the pair's rate.
  return std::max(p.dispatchSeconds, p.launchSeconds + std::max(both - fwd, both * 2.5 / 3.5));
}

double kernelFlops(const UnitKernel &k, double tokens, bool backward) {
  switch (k.kind) {
  case KernelKind::Gemm: {
    const double f = 2.0 * k.scale * tokens * static_cast<double>(k.shape[0]) *
                     static_cast<double>(k.shape[1]) * static_cast<double>(k.shape[2]);
    return backward ? 2 * f : f;
  }
  case KernelKind::Attention: {
    const double batch = tokens / static_cast<double>(k.shape[4]);
    const double f = attentionFlops(batch, k.shape[0], k.shape[1], k.shape[2],
                                    k.shape[3] != 0, k.shape[4]);
    return backward ? 2.5 * f : f;
  }
  case KernelKind::Memory:
    return 0;
  }
  return 0;
}

double kernelSeconds(const UnitKernel &k, double tokens, bool backward,
                     const HardwareProfile &p) {
  if (kernelProblem(k) || !(tokens > 0))
    return 0;
  switch (k.kind) {
  case KernelKind::Gemm: {
    const double m = k.scale * tokens, n = static_cast<double>(k.shape[0]),
                 kk = static_cast<double>(k.shape[1]);
    const double one = backward ? gemmSeconds(m, kk, n, p) + gemmSeconds(n, kk, m, p)
                                : gemmSeconds(m, n, kk, p);
    return static_cast<double>(k.shape[2]) * one;
  }
  case KernelKind::Attention:
    return attentionSeconds(tokens / static_cast<double>(k.shape[4]), k.shape[0], k.shape[1],
                            k.shape[2], k.shape[3] != 0, k.shape[4], backward, p);
  case KernelKind::Memory: {
    double bytes = k.scale * tokens + (k.shape.empty() ? 0.0 : static_cast<double>(k.shape[0]));
    double launches = k.shape.size() == 2 ? static_cast<double>(k.shape[1]) : 1.0;
    if (backward) {
      bytes *= 2;
      launches *= 2;
    }
    return bytes > 0 ? std::max(launches * p.dispatchSeconds,
                                launches * p.launchSeconds + bytes / memoryRate(p))
                     : 0;
  }
  }
  return 0;
}

double kernelsSeconds(const std::vector<UnitKernel> &kernels, double tokens, bool backward,
                      const HardwareProfile &p) {
  double t = 0;
  for (const UnitKernel &k : kernels)
    t += kernelSeconds(k, tokens, backward, p);
  return t;
}

} // namespace mfsdp::cost

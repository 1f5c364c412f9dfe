//===- KernelModel.h - Per-kernel GPU roofline ------------------*- C++ -*-===//
//
// Prices the kernels of a unit's compute (mfsdp/Kernel.h) on a hardware
// profile. Every time here is a PREDICTION from the profile's rates:
//
//   GEMM (m x k @ k x n, bf16 operands and result):
//     launchSeconds + max((F + smallGemmFlops) / (gemmFlops * gemmEfficiency),
//                         2 (m k + k n + m n) / (hbmBytes * hbmEfficiency)),
//     F = 2 m n k: small products run far from the peak, skinny ones at
//     memory bandwidth. Backward: the two products dX = dY W (m x n @ n x k)
//     and dW = dY^T X (n x m @ m x k).
//   Attention (b sequences of s tokens, h heads, head dims d and dv):
//     F = 2 b h s^2 (d + dv), halved when causal; forward F / rate_fwd(s),
//     forward plus backward 3.5 F / rate_fb(s), with rate(s) = R s / (s +
//     s0) from the profile's AttentionRate at that head dim (interpolated);
//     backward is the difference (at least 2.5 F / rate_fb(s) / 3.5 of it).
//   Memory-bound work: launches * launchSeconds + bytes / (hbmBytes *
//     hbmEfficiency), backward twice the bytes and the launches.
//   Each operation takes at least the profile's dispatchSeconds (an eager
//   framework's host time per op: a shorter kernel leaves the GPU waiting
//   for the next): max(dispatchSeconds, the time above) per GEMM and per
//   attention, max(launches * dispatchSeconds, ...) for memory work.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_COST_KERNELMODEL_H
#define MFSDP_COST_KERNELMODEL_H

#include "mfsdp/Kernel.h"
#include "mfsdp/planner/Hardware.h"

#include <vector>

namespace mfsdp::cost {

/// One bf16 GEMM, (m x k) @ (k x n).
double gemmSeconds(double m, double n, double k, const planner::HardwareProfile &p);

/// Attention over `batch` sequences of `seq` tokens (batch may be
/// fractional: tokens / seq); forward, or backward alone.
double attentionSeconds(double batch, int64_t heads, int64_t headDim, int64_t headDimV,
                        bool causal, int64_t seq, bool backward,
                        const planner::HardwareProfile &p);

/// The profile's rate for attention at `headDim` and `seq`: forward, or
/// forward plus backward.
double attentionRate(int64_t headDim, int64_t seq, bool fwdBwd,
                     const planner::HardwareProfile &p);

/// FLOPs of one kernel for `tokens` (forward; backward of GEMMs and
/// attention: twice and 2.5 times; memory work: 0).
double kernelFlops(const UnitKernel &k, double tokens, bool backward);

/// One kernel for `tokens`, forward or backward.
double kernelSeconds(const UnitKernel &k, double tokens, bool backward,
                     const planner::HardwareProfile &p);

/// The sum over `kernels`.
double kernelsSeconds(const std::vector<UnitKernel> &kernels, double tokens, bool backward,
                      const planner::HardwareProfile &p);

} // namespace mfsdp::cost

#endif // MFSDP_COST_KERNELMODEL_H

//===- Hardware.h - The hardware profiles of the cost model -----*- C++ -*-===//
//
// The one registry of hardware profiles: the planner, the simulator
// (mfsdp/cost/Simulator.h, where a profile is a SimProfile), the passes and
// the tools look names up here, and refuse an unknown one with the same
// message. Every rate is an assumption of the cost model (datasheet peaks,
// assumed efficiencies); every time computed from them is a prediction.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_PLANNER_HARDWARE_H
#define MFSDP_PLANNER_HARDWARE_H

#include "mfsdp/Vocabulary.h"

#include <string>
#include <string_view>
#include <vector>

namespace mfsdp::planner {

/// Causal flash attention's rate at one head dim: rate(s) = rate * s / (s +
/// seq0) FLOP/s for sequences of s tokens, forward and forward plus
/// backward (FLOPs as in mfsdp/cost/KernelModel.h).
struct AttentionRate {
  double headDim = 0;
  double fwdRate = 0, fwdSeq0 = 0;
  double fwdBwdRate = 0, fwdBwdSeq0 = 0;
};

struct HardwareProfile {
  std::string name;           // "a100", "h100", "h100-ib", ...
  std::string description;    // one line for reports
  double gemmFlops = 0;       // peak dense bf16 FLOP/s (datasheet)
  double fp32Flops = 0;       // peak fp32 FLOP/s without tensor cores (datasheet)
  double hbmBytes = 0;        // peak HBM bandwidth, B/s (datasheet)
  double hbmCapacityBytes = 0; // memory per GPU, bytes (datasheet)
  /// Link rates the planner prices gathers and replica traffic with, B/s:
  /// per GPU inside a node (NVLink, per direction) and between nodes (one
  /// InfiniBand NIC per GPU, line rate).
  double intraBytes = 0;
  double interBytes = 0;
  int gpusPerNode = 8;        // ranks that share the intra-node fabric

  // The simulator's model (lib/cost/CostModel.cpp says how each is used).
  double gemmEfficiency = 1;  // fraction of peak that large GEMMs reach
  /// Fraction of peak the trainer's own forward, backward and recomputation
  /// reach as a whole (attention, norms and elementwise work included); 0
  /// means gemmEfficiency.
  double trainerEfficiency = 0;
  double smallGemmFlops = 0;  // a kernel of this many FLOPs runs at half of
                              // gemmEfficiency (see computeSeconds)
  double hbmEfficiency = 1;   // fraction of HBM that streaming kernels reach
  double launchSeconds = 0;   // per kernel / op launch overhead
  /// The per-op model's floor per operation of an eager framework: the
  /// host's time to dispatch one (PyTorch's Python and dispatcher); a
  /// kernel shorter than that leaves the GPU waiting. 0: no floor.
  double dispatchSeconds = 0;
  double intraBusBytes = 0;   // NCCL bus bandwidth per GPU inside a node, B/s
  double interBusBytes = 0;   // NCCL bus bandwidth per GPU between nodes, B/s
  double intraHopSeconds = 0; // latency of one ring step inside a node
  double interHopSeconds = 0; // latency of one ring step between nodes
  double collBaseSeconds = 0; // fixed cost of any collective (launch, setup)
  /// PyTorch's CUDA caching allocator: the bytes it holds reserved at the
  /// peak per byte allocated then (its block rounding and fragmentation);
  /// 1: not modelled. The simulator reports the allocated peak and, beside
  /// it, the reserved peak as the allocated one times this.
  double allocatorReserve = 1;
  /// Newton-Schulz (Muon's optimizer step) as the CUDA backend runs it: the
  /// fraction of the peak of its precision (fp32Flops; gemmFlops for bf16
  /// operands with fp32 sums) it reaches, counted with the FLOPs the
  /// compiler counts (planner::newtonSchulzFlops, the symmetric form's).
  double nsFp32Efficiency = 1;
  double nsBf16Efficiency = 1;
  /// Its time per kernel launched beside the FLOPs (the latency floor of
  /// the short kernels of a small matrix), per precision: a call's time is
  /// kernels x this + FLOPs / rate (rt::newtonSchulzKernels counts them).
  double nsFp32KernelSeconds = 0;
  double nsBf16KernelSeconds = 0;
  /// torch.optim.Muon's Newton-Schulz (the baselines of mfsdp-sim
  /// --compare): bf16, three GEMMs per iteration, counted with their FLOPs
  /// (4 s^2 l + 2 s^3), as a fraction of gemmFlops.
  double nsTorchEfficiency = 1;
  /// torch.optim.Muon's time per CUDA kernel it launches
  /// (planner::torchMuonKernels): eager PyTorch launches them from Python,
  /// one at a time, while the GPU runs what was launched before, so an op's
  /// time is the larger of its kernels x this (the host) and its FLOPs and
  /// bytes at their rates (the GPU). 0: no floor.
  double nsTorchKernelSeconds = 0;
  /// The precision the runtime's Newton-Schulz runs in, which sets its
  /// rate: the runtime's `ns_precision` hyperparameter, fp32 unless the
  /// trainer sets bf16 (tool and pass option `ns-precision`).
  bool nsBf16 = false;
  /// The per-op model's attention rates by head dim, ascending (interpolated
  /// linearly between, held at the ends); empty: attention at
  /// gemmFlops * gemmEfficiency.
  std::vector<AttentionRate> attention;
};

/// "a100" (8x A100-SXM4-80GB, NVLink3), "h100" (8x H100-SXM, NVLink4) and
/// "h100-ib" (H100 nodes, one 400 Gb/s InfiniBand NIC per GPU, the
/// data-parallel group placed one rank per node, so every data-parallel
/// collective of two or more ranks crosses InfiniBand), "a100-pcie" and
/// "h100-pcie" (the PCIe parts, 8 per node joined by PCIe without NVLink).
/// Order and contents are fixed.
const std::vector<HardwareProfile> &hardwareProfiles();
/// nullptr if there is no profile of that name.
const HardwareProfile *findHardwareProfile(std::string_view name);
/// "a100, h100, h100-ib, a100-pcie or h100-pcie".
std::string hardwareProfileNames();
/// "unknown hardware profile '<name>'; expected a100, h100, ..., h100-pcie".
std::string unknownHardwareMessage(std::string_view name);

/// Newton-Schulz's FLOP rate on `p` at its precision (nsBf16): the peak
/// times the efficiency; nsPeakFlops is the peak alone (the floor).
double nsFlopsRate(const HardwareProfile &p);
double nsPeakFlops(const HardwareProfile &p);
/// Newton-Schulz's time per kernel on `p` at its precision (nsBf16).
double nsKernelSeconds(const HardwareProfile &p);
/// The precision `p` prices Newton-Schulz in (nsBf16).
inline NsPrecision nsPrecision(const HardwareProfile &p) {
  return p.nsBf16 ? NsPrecision::BF16 : NsPrecision::FP32;
}

/// Overrides rates of `p` from "key=value[,key=value...]" (for fitting the
/// model, e.g. mfsdp-sim --profile-set): the keys are the numeric fields'
/// names (gemmFlops, fp32Flops, gemmEfficiency, trainerEfficiency,
/// nsFp32Efficiency, nsBf16Efficiency, nsTorchEfficiency, nsTorchKernelSeconds, smallGemmFlops,
/// nsFp32KernelSeconds, nsBf16KernelSeconds,
/// hbmBytes, hbmEfficiency, launchSeconds, dispatchSeconds, intraBusBytes,
/// interBusBytes, intraHopSeconds, interHopSeconds, collBaseSeconds,
/// allocatorReserve),
/// attentionScale (multiplies every attention rate), computeScale (every
/// attention rate and the GEMM, trainer, HBM and Newton-Schulz
/// efficiencies, held at most 1) and commScale (the NCCL bus bandwidths). False with
/// `error` (naming the key or value) on an unknown key or a value that is
/// not a finite number; the caller validates the result.
bool applyProfileOverrides(HardwareProfile &p, std::string_view spec, std::string &error);

} // namespace mfsdp::planner

#endif // MFSDP_PLANNER_HARDWARE_H

//===- Profiles.cpp - Checking a simulator profile ------------------------===//
//
// The profiles themselves are the one registry in lib/planner/Hardware.cpp.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/cost/Simulator.h"

#include <cmath>
#include <fmt/format.h>

namespace mfsdp::cost {

namespace {

bool positiveFinite(double v) { return std::isfinite(v) && v > 0; }

} // namespace

std::string validateProfile(const SimProfile &p) {
  struct Rate {
    const char *what;
    double value;
  };
  for (Rate r : {Rate{"gemmFlops", p.gemmFlops}, Rate{"fp32Flops", p.fp32Flops},
                 Rate{"hbmBytes", p.hbmBytes},
                 Rate{"hbmCapacityBytes", p.hbmCapacityBytes},
                 Rate{"intraBusBytes", p.intraBusBytes},
                 Rate{"interBusBytes", p.interBusBytes}})
    if (!positiveFinite(r.value))
      return fmt::format("profile '{}': {} must be positive and finite, got {}",
                         p.name, r.what, r.value);
  if (!(std::isfinite(p.trainerEfficiency) && p.trainerEfficiency >= 0 &&
        p.trainerEfficiency <= 1))
    return fmt::format("profile '{}': trainerEfficiency must be in [0, 1], got {}",
                       p.name, p.trainerEfficiency);
  for (Rate r : {Rate{"gemmEfficiency", p.gemmEfficiency},
                 Rate{"hbmEfficiency", p.hbmEfficiency},
                 Rate{"nsFp32Efficiency", p.nsFp32Efficiency},
                 Rate{"nsBf16Efficiency", p.nsBf16Efficiency},
                 Rate{"nsTorchEfficiency", p.nsTorchEfficiency}})
    if (!(std::isfinite(r.value) && r.value > 0 && r.value <= 1))
      return fmt::format("profile '{}': {} must be in (0, 1], got {}", p.name,
                         r.what, r.value);
  for (Rate r : {Rate{"smallGemmFlops", p.smallGemmFlops},
                 Rate{"launchSeconds", p.launchSeconds},
                 Rate{"nsFp32KernelSeconds", p.nsFp32KernelSeconds},
                 Rate{"nsBf16KernelSeconds", p.nsBf16KernelSeconds},
                 Rate{"nsTorchKernelSeconds", p.nsTorchKernelSeconds},
                 Rate{"dispatchSeconds", p.dispatchSeconds},
                 Rate{"intraHopSeconds", p.intraHopSeconds},
                 Rate{"interHopSeconds", p.interHopSeconds},
                 Rate{"collBaseSeconds", p.collBaseSeconds}})
    if (!(std::isfinite(r.value) && r.value >= 0))
      return fmt::format(
          "profile '{}': {} must be non-negative and finite, got {}", p.name,
          r.what, r.value);
  for (size_t i = 0; i < p.attention.size(); ++i) {
    const planner::AttentionRate &r = p.attention[i];
    if (!(positiveFinite(r.headDim) && positiveFinite(r.fwdRate) &&
          positiveFinite(r.fwdBwdRate) && std::isfinite(r.fwdSeq0) && r.fwdSeq0 >= 0 &&
          std::isfinite(r.fwdBwdSeq0) && r.fwdBwdSeq0 >= 0))
      return fmt::format("profile '{}': attention rate {} (head dim {}) must have positive "
                         "rates and non-negative sequence constants",
                         p.name, i, r.headDim);
    if (i > 0 && !(r.headDim > p.attention[i - 1].headDim))
      return fmt::format("profile '{}': attention rates must be in ascending head dim, got "
                         "{} after {}",
                         p.name, r.headDim, p.attention[i - 1].headDim);
  }
  if (!(std::isfinite(p.allocatorReserve) && p.allocatorReserve >= 1))
    return fmt::format("profile '{}': allocatorReserve must be at least 1 (reserved "
                       "bytes per allocated byte), got {}",
                       p.name, p.allocatorReserve);
  if (p.gpusPerNode < 1)
    return fmt::format("profile '{}': gpusPerNode must be at least 1, got {}",
                       p.name, p.gpusPerNode);
  return "";
}

} // namespace mfsdp::cost

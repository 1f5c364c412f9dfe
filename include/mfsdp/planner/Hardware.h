//===- Hardware.h - Hardware profiles for planning costs --------*- C++ -*-===//
//
// Rates the planner turns work into time with. These are datasheet-level
// figures; every time computed from them is a prediction.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_PLANNER_HARDWARE_H
#define MFSDP_PLANNER_HARDWARE_H

#include <string>
#include <string_view>
#include <vector>

namespace mfsdp::planner {

struct HardwareProfile {
  std::string name;
  double gemmFlops = 0;    // dense bf16 GEMM rate, FLOP/s
  double hbmBytes = 0;     // memory bandwidth, B/s
  double intraBytes = 0;   // per-GPU link bandwidth inside a node, B/s
  double interBytes = 0;   // per-GPU bandwidth between nodes, B/s
  int gpusPerNode = 8;
};

/// "a100" (8x A100-SXM4-80GB, NVLink), "h100" (8x H100-SXM, NVLink);
/// inter-node rates are those of one 200/400 Gb/s InfiniBand NIC per GPU.
const std::vector<HardwareProfile> &hardwareProfiles();
const HardwareProfile *findHardwareProfile(std::string_view name);

} // namespace mfsdp::planner

#endif // MFSDP_PLANNER_HARDWARE_H

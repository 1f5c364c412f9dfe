//===- Hardware.cpp - Hardware profiles -----------------------------------===//
#include "mfsdp/planner/Hardware.h"

namespace mfsdp::planner {

const std::vector<HardwareProfile> &hardwareProfiles() {
  static const std::vector<HardwareProfile> profiles = {
      // A100-SXM4-80GB: 312 TFLOP/s bf16 dense, 2039 GB/s HBM2e, NVLink3
      // 300 GB/s per direction, HDR InfiniBand 200 Gb/s = 25 GB/s.
      {"a100", 312e12, 2039e9, 300e9, 25e9, 8},
      // H100-SXM: 989 TFLOP/s bf16 dense, 3350 GB/s HBM3, NVLink4 450 GB/s
      // per direction, NDR InfiniBand 400 Gb/s = 50 GB/s.
      {"h100", 989e12, 3350e9, 450e9, 50e9, 8},
  };
  return profiles;
}

const HardwareProfile *findHardwareProfile(std::string_view name) {
  for (const auto &p : hardwareProfiles())
    if (p.name == name)
      return &p;
  return nullptr;
}

} // namespace mfsdp::planner

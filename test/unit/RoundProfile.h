//===- RoundProfile.h - A hardware profile of round numbers for tests -----===//
//
// 1 TFLOP/s, 100 GB/s HBM, 10 GB/s inside a node, 1 GB/s between nodes,
// perfect efficiencies, no launch, latency or small-kernel costs: times the
// tests can work out by hand.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_TEST_UNIT_ROUNDPROFILE_H
#define MFSDP_TEST_UNIT_ROUNDPROFILE_H

#include "mfsdp/cost/Simulator.h"

namespace mfsdp::test {

inline cost::SimProfile roundProfile() {
  cost::SimProfile p;
  p.name = "round";
  p.gemmFlops = 1e12;
  p.fp32Flops = 1e12; // Newton-Schulz in fp32 at the same round rate
  p.gemmEfficiency = 1;
  p.smallGemmFlops = 0;
  p.hbmBytes = 1e11;
  p.hbmCapacityBytes = 1e12;
  p.hbmEfficiency = 1;
  p.launchSeconds = 0;
  p.intraBusBytes = 1e10;
  p.interBusBytes = 1e9;
  p.intraHopSeconds = 0;
  p.interHopSeconds = 0;
  p.collBaseSeconds = 0;
  p.gpusPerNode = 8;
  return p;
}

} // namespace mfsdp::test

#endif // MFSDP_TEST_UNIT_ROUNDPROFILE_H

//===- OwnerAssignment.h - Matrix owners balanced by optimizer work -*- C++ -*-===//
//
// Chooses, for every matrix that lives whole on one rank (the matrix-owner
// layout Muon needs), which rank of the data-parallel group owns it. Plain
// C++, no MLIR: the mfsdp-assign-layouts pass calls it, unit tests check it
// against brute force and lower bounds.
//
// Objective, in order:
//   1. minimise the maximum per-rank optimizer cost (Newton-Schulz plus
//      elementwise work, in seconds), balanced over the whole model;
//   2. keep per-rank resident memory balanced;
//   3. keep each gather group's owner fan-out even: the owner collective of
//      a group (an all-gather-v / reduce-to-owners of its matrices, grouped
//      ring broadcasts / reduces) puts every share but the smallest through
//      its busiest link, least when the shares are even;
// with deterministic tie-breaks (lowest rank, then lowest item index).
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_PLANNER_OWNERASSIGNMENT_H
#define MFSDP_PLANNER_OWNERASSIGNMENT_H

#include "mfsdp/Vocabulary.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mfsdp::planner {

/// FLOPs of `steps` quintic Newton-Schulz iterations on a rows x cols matrix
/// as the runtime runs them: with s = min(rows, cols), l = max(rows, cols),
/// each step costs 3 s^2 l + s^3 (X X^T and A A as symmetric rank-k
/// products, s^2 l and s^3, then B X, 2 s^2 l).
double newtonSchulzFlops(int64_t rows, int64_t cols, int64_t steps);

/// The same iterations as three general products (X X^T, A A, B X):
/// 4 s^2 l + 2 s^3 per step, what torch.optim.Muon runs.
double newtonSchulzGemmFlops(int64_t rows, int64_t cols, int64_t steps);

/// The CUDA kernels torch.optim.Muon launches for one matrix (PyTorch's
/// torch/optim/_muon.py, eager): its Newton-Schulz
/// (_zeropower_via_newtonschulz) the bf16 copy, norm, clamp and div_, then
/// per step one mm and two addmm, each addmm a copy of its input and a
/// GEMM: 4 + 5 steps. Its whole step (_single_tensor_muon, Nesterov) adds
/// the momentum's lerp_ and lerp before and the weight decay's mul_ and the
/// update's add_ after: 8 + 5 steps.
constexpr int64_t kTorchMuonMomentumKernels = 2; // lerp_, lerp
constexpr int64_t kTorchMuonUpdateKernels = 2;   // mul_, add_
constexpr int64_t kTorchNsCopyKernels = 1;       // the bf16 copy
constexpr int64_t kTorchNsNormaliseKernels = 3;  // norm, clamp, div_
constexpr int64_t kTorchMmKernels = 1;           // a GEMM
constexpr int64_t kTorchAddmmKernels = 2;        // a copy of its input, a GEMM
constexpr int64_t kTorchNsStepKernels = kTorchMmKernels + 2 * kTorchAddmmKernels;
inline int64_t torchNewtonSchulzKernels(int64_t steps) {
  return kTorchNsCopyKernels + kTorchNsNormaliseKernels +
         kTorchNsStepKernels * std::max<int64_t>(steps, 0);
}
inline int64_t torchMuonKernels(int64_t steps) {
  return kTorchMuonMomentumKernels + torchNewtonSchulzKernels(steps) +
         kTorchMuonUpdateKernels;
}

/// One matrix to place.
struct OwnerItem {
  double cost = 0;    // optimizer work on the owner (seconds)
  double memory = 0;  // resident bytes on the owner
  double bytes = 0;   // bytes the owner sends in its group's collectives
  int64_t elements = 0; // element count (the MatrixFSDP baseline balances it)
  int64_t group = 0;  // gather group (a unit, or adjacent units grouped)
  /// Items with the same key have identical cost, memory and bytes, so
  /// swapping their owners changes no per-rank total.
  int64_t shapeKey = 0;
};

/// balanced, matrixfsdp or round_robin (mfsdp/Vocabulary.h says what each
/// does).
using ::mfsdp::OwnerStrategy;

struct OwnerOptions {
  int64_t world = 1;
  OwnerStrategy strategy = OwnerStrategy::Balanced;
  /// Work every rank already has (its share of row-sharded AdamW, say).
  double baseCost = 0;
  /// Resident bytes every rank already has.
  double baseMemory = 0;
  /// Swap passes that even out group fan-out (Balanced only).
  bool refineFanout = true;
};

struct OwnerResult {
  std::vector<int64_t> owner;   // per item, in [0, world)
  std::vector<double> rankCost; // baseCost + owned items' cost
  std::vector<double> rankMemory;
  double maxCost = 0, meanCost = 0;
  double maxMemory = 0, meanMemory = 0;
  /// max(largest single item cost, total / world) + baseCost: no assignment
  /// can have a smaller maximum.
  double lowerBound = 0;
  /// Per group: largest per-rank share of the group's bytes over the mean
  /// share (bytes / world); 1 is perfectly even. Groups without bytes: 1.
  std::vector<double> groupSkew;
  double maxGroupSkew = 0, meanGroupSkew = 0;
};

/// Assigns an owner to every item. Deterministic: the same input gives the
/// same output. world must be >= 1 (else every owner is 0 and world is 1).
OwnerResult assignOwners(const std::vector<OwnerItem> &items,
                         const OwnerOptions &options);

/// Recomputes the statistics of a given assignment (used for baselines and
/// tests).
OwnerResult evaluateOwners(const std::vector<OwnerItem> &items,
                           const std::vector<int64_t> &owner,
                           const OwnerOptions &options);

/// Groups adjacent units so that each group holds at least `world` owner
/// matrices (when the whole model has that many): returns, per unit, its
/// group index (0, 0, 1, 1, 1, ...). A trailing group that would be short is
/// merged into the one before. `matricesPerUnit[u]` counts the owner
/// matrices of unit u (units with none join the group around them).
/// maxUnitsPerGroup caps the group length (0: no cap).
std::vector<int64_t> groupUnits(const std::vector<int64_t> &matricesPerUnit,
                                int64_t world, int64_t maxUnitsPerGroup = 0);

} // namespace mfsdp::planner

#endif // MFSDP_PLANNER_OWNERASSIGNMENT_H

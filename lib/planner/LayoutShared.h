//===- LayoutShared.h - Helpers of planning and accounting ------*- C++ -*-===//
//
// Private to lib/planner: what Layout.cpp and Accounting.cpp both use.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_LIB_PLANNER_LAYOUTSHARED_H
#define MFSDP_LIB_PLANNER_LAYOUTSHARED_H

#include "mfsdp/planner/Layout.h"

#include <string>
#include <vector>

namespace mfsdp::planner::detail {

/// A parameter's optimizer step at the profile's sustained rates (as the
/// simulator prices it): elementwise bytes at hbmBytes x hbmEfficiency,
/// Newton-Schulz at the rate of its precision plus its kernels' time.
double optimSecondsWhole(const Param &p, const Options &opts);

/// `b` bytes in B, KiB, MiB, ... (two decimals above B).
std::string bytesText(double b);

/// What a unit's row-sharded parameters cost under each row layout: the
/// padding per parameter and flat, the copies around the collectives of
/// the per-parameter layout, and the time of each layout's extra traffic.
struct UnitCostModel {
  double padPerParam = 0, padFlat = 0, copies = 0;
  double tPerParam = 0, tFlat = 0;
};
UnitCostModel unitRowCosts(const std::vector<const Param *> &rowParams,
                           const Options &o);

} // namespace mfsdp::planner::detail

#endif // MFSDP_LIB_PLANNER_LAYOUTSHARED_H

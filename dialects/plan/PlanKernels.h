//===- PlanKernels.h - #plan.cost kernels <-> mfsdp::UnitKernel -*- C++ -*-===//
//
// The conversion between a unit's kernels in the plan dialect (#plan.cost's
// `kernels`, a list of #plan.kernel) and their plain C++ form
// (mfsdp/Kernel.h), shared by the graph import and export, the step
// builder pass and the step bridge.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_DIALECTS_PLAN_PLANKERNELS_H
#define MFSDP_DIALECTS_PLAN_PLANKERNELS_H

#include "dialects/plan/PlanDialect.h"
#include "mfsdp/Kernel.h"

#include <vector>

namespace mfsdp::plan {

/// `kernels` as #plan.cost's `kernels`: null when there are none.
mlir::ArrayAttr kernelsAttr(mlir::MLIRContext *ctx, const std::vector<UnitKernel> &kernels);

/// The kernels of a #plan.cost (empty without `kernels`).
std::vector<UnitKernel> unitKernels(CostAttr cost);

} // namespace mfsdp::plan

#endif // MFSDP_DIALECTS_PLAN_PLANKERNELS_H

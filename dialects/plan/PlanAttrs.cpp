//===- PlanAttrs.cpp - Verifiers of placements, optimizers and costs ------===//
#include "dialects/plan/PlanDialect.h"
#include "dialects/plan/PlanKernels.h"
#include "mfsdp/Kernel.h"

#include "llvm/ADT/DenseSet.h"

#include <cmath>

using namespace mlir;
using namespace mfsdp::plan;
using mfsdp::KernelKind;
using mfsdp::UnitKernel;

/// Mesh axes of a placement: a non-empty list of distinct, non-empty names.
static LogicalResult verifyAxes(function_ref<InFlightDiagnostic()> emitError,
                                ArrayAttr axes, StringRef what) {
  if (!axes || axes.empty())
    return emitError() << what << " needs at least one mesh axis";
  llvm::DenseSet<StringRef> seen;
  for (Attribute a : axes) {
    auto s = dyn_cast<StringAttr>(a);
    if (!s || s.getValue().empty())
      return emitError() << what << " axes must be non-empty strings, got "
                         << a;
    if (!seen.insert(s.getValue()).second)
      return emitError() << what << " lists mesh axis \"" << s.getValue()
                         << "\" twice";
  }
  return success();
}

LogicalResult RowShardAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   int64_t dim, ArrayAttr axes) {
  if (dim < 0)
    return emitError() << "row_shard dim must be non-negative, got " << dim;
  return verifyAxes(emitError, axes, "row_shard");
}

LogicalResult
BlockShardAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                       ArrayRef<int64_t> block, ArrayAttr axes) {
  if (block.empty())
    return emitError() << "block_shard needs one block extent per tensor dim";
  for (int64_t b : block)
    if (b <= 0)
      return emitError() << "block_shard extents must be positive, got " << b;
  return verifyAxes(emitError, axes, "block_shard");
}

LogicalResult OwnerAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                int64_t rank, ArrayAttr axes) {
  if (rank < 0)
    return emitError() << "owner rank must be non-negative, got " << rank;
  return verifyAxes(emitError, axes, "owner");
}

LogicalResult ExternalAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   ArrayAttr axes) {
  if (!axes || axes.empty())
    return emitError() << "an external parameter needs at least one owning "
                          "mesh dim (for example \"tp\" or \"ep\")";
  if (failed(verifyAxes(emitError, axes, "external")))
    return failure();
  for (Attribute a : axes) {
    StringRef name = cast<StringAttr>(a).getValue();
    if (name == "dp_shard" || name == "dp_replicate")
      return emitError() << "external parameters are owned by a tensor/expert-"
                            "parallel dim, not the data-parallel dim \""
                         << name << "\"";
  }
  return success();
}

namespace {
struct RangeCheck {
  function_ref<InFlightDiagnostic()> emitError;
  StringRef attr;
  LogicalResult positive(double v, StringRef name) {
    if (!(v > 0) || !std::isfinite(v))
      return emitError() << attr << " " << name << " must be positive, got "
                         << formatF64(v);
    return success();
  }
  LogicalResult nonNegative(double v, StringRef name) {
    if (!(v >= 0) || !std::isfinite(v))
      return emitError() << attr << " " << name
                         << " must be non-negative, got " << formatF64(v);
    return success();
  }
  LogicalResult unitInterval(double v, StringRef name) {
    if (!(v >= 0 && v < 1))
      return emitError() << attr << " " << name << " must be in [0, 1), got "
                         << formatF64(v);
    return success();
  }
};
} // namespace

LogicalResult AdamWAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                F64 lr, F64 beta1, F64 beta2, F64 eps,
                                F64 weightDecay) {
  RangeCheck c{emitError, "adamw"};
  return success(succeeded(c.positive(lr, "lr")) &&
                 succeeded(c.unitInterval(beta1, "beta1")) &&
                 succeeded(c.unitInterval(beta2, "beta2")) &&
                 succeeded(c.positive(eps, "eps")) &&
                 succeeded(c.nonNegative(weightDecay, "weight_decay")));
}

LogicalResult SGDAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                              F64 lr, F64 momentum, F64 weightDecay,
                              bool nesterov) {
  RangeCheck c{emitError, "sgd"};
  if (failed(c.positive(lr, "lr")) ||
      failed(c.unitInterval(momentum, "momentum")) ||
      failed(c.nonNegative(weightDecay, "weight_decay")))
    return failure();
  if (nesterov && double(momentum) == 0)
    return emitError() << "sgd nesterov needs a non-zero momentum";
  return success();
}

LogicalResult MuonAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               F64 lr, F64 momentum, F64 weightDecay,
                               bool nesterov, int64_t nsSteps,
                               MuonScale scale, NsPrecision nsPrecision) {
  RangeCheck c{emitError, "muon"};
  if (failed(c.positive(lr, "lr")) ||
      failed(c.unitInterval(momentum, "momentum")) ||
      failed(c.nonNegative(weightDecay, "weight_decay")))
    return failure();
  if (nsSteps < 1)
    return emitError() << "muon ns_steps must be at least 1, got " << nsSteps;
  if (nsSteps > MFSDP_MAX_NS_STEPS)
    return emitError() << "muon ns_steps must be at most " << MFSDP_MAX_NS_STEPS
                       << ", got " << nsSteps;
  return success();
}

LogicalResult CostAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               F64 fwdFlops, F64 bwdFlops, F64 actBytes,
                               bool recompute, ArrayAttr kernels) {
  RangeCheck c{emitError, "cost"};
  if (!(succeeded(c.nonNegative(fwdFlops, "fwd_flops")) &&
        succeeded(c.nonNegative(bwdFlops, "bwd_flops")) &&
        succeeded(c.nonNegative(actBytes, "act_bytes"))))
    return failure();
  if (kernels)
    for (auto [i, k] : llvm::enumerate(kernels))
      if (!isa<KernelAttr>(k))
        return emitError() << "cost kernels[" << i << "] must be a #plan.kernel, got " << k;
  return success();
}

LogicalResult KernelAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 StringRef kind, DenseI64ArrayAttr shape, F64 scale) {
  ::mfsdp::UnitKernel k;
  std::optional<KernelKind> parsed = ::mfsdp::parseEnum<KernelKind>(kind);
  if (!parsed)
    return emitError() << "kernel kind must be "
                       << ::mfsdp::enumSpellings<KernelKind>() << ", got '" << kind << "'";
  k.kind = *parsed;
  if (shape)
    k.shape.assign(shape.asArrayRef().begin(), shape.asArrayRef().end());
  k.scale = scale;
  const std::string bad = ::mfsdp::validateKernel(k);
  if (!bad.empty())
    return emitError() << "kernel '" << kind << "': " << bad;
  return success();
}

//===----------------------------------------------------------------------===//
// Kernels <-> mfsdp::UnitKernel
//===----------------------------------------------------------------------===//

ArrayAttr mfsdp::plan::kernelsAttr(MLIRContext *ctx,
                                   const std::vector<mfsdp::UnitKernel> &kernels) {
  if (kernels.empty())
    return {};
  SmallVector<Attribute> out;
  for (const UnitKernel &k : kernels)
    out.push_back(KernelAttr::get(ctx, ::mfsdp::enumName(k.kind),
                                  DenseI64ArrayAttr::get(ctx, k.shape), k.scale));
  return ArrayAttr::get(ctx, out);
}

FailureOr<DenseI64ArrayAttr> mfsdp::plan::parseShape(AsmParser &parser) {
  if (failed(parser.parseOptionalLSquare()))
    return FieldParser<DenseI64ArrayAttr>::parse(parser);
  SmallVector<int64_t, 8> values;
  if (failed(parser.parseOptionalRSquare())) {
    do {
      int64_t v = 0;
      if (parser.parseInteger(v))
        return failure();
      values.push_back(v);
    } while (succeeded(parser.parseOptionalComma()));
    if (parser.parseRSquare())
      return failure();
  }
  return DenseI64ArrayAttr::get(parser.getContext(), values);
}

void mfsdp::plan::printKernels(AsmPrinter &printer, ArrayAttr kernels) {
  raw_ostream &os = printer.getStream();
  os << '[';
  llvm::interleaveComma(kernels, os, [&](Attribute a) {
    auto k = dyn_cast<KernelAttr>(a);
    if (!k) { // (the verifier refuses it; printed as MLIR would)
      printer.printAttribute(a);
      return;
    }
    os << "#plan.kernel<";
    printer.printString(k.getKind());
    os << ", shape = [";
    llvm::interleaveComma(k.getShape().asArrayRef(), os);
    os << "], scale = ";
    printF64(printer, k.getScale());
    os << '>';
  });
  os << ']';
}

std::vector<mfsdp::UnitKernel> mfsdp::plan::unitKernels(CostAttr cost) {
  std::vector<UnitKernel> out;
  if (!cost || !cost.getKernels())
    return out;
  for (Attribute a : cost.getKernels()) {
    auto k = dyn_cast<KernelAttr>(a);
    if (!k)
      continue; // the verifier refuses it
    UnitKernel u;
    u.kind = ::mfsdp::parseEnum<KernelKind>(k.getKind()).value_or(KernelKind::Gemm);
    if (k.getShape())
      u.shape.assign(k.getShape().asArrayRef().begin(), k.getShape().asArrayRef().end());
    u.scale = k.getScale();
    out.push_back(std::move(u));
  }
  return out;
}

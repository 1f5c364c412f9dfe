//===- PlanDialect.h - The plan dialect, its enums and attributes -*- C++ -*-===//
#ifndef MFSDP_DIALECTS_PLAN_PLANDIALECT_H
#define MFSDP_DIALECTS_PLAN_PLANDIALECT_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"

#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/bit.h"

namespace mfsdp::plan {
/// A double attribute parameter: converts to and from double, compares and
/// hashes by bits (so attribute uniquing is exact).
struct F64 {
  double value = 0;
  F64() = default;
  F64(double v) : value(v) {}
  operator double() const { return value; }
  bool operator==(const F64 &o) const {
    return llvm::bit_cast<uint64_t>(value) == llvm::bit_cast<uint64_t>(o.value);
  }
  friend llvm::hash_code hash_value(const F64 &f) {
    return llvm::hash_value(llvm::bit_cast<uint64_t>(f.value));
  }
};

/// Parses a float or integer literal as a double.
mlir::FailureOr<F64> parseF64(mlir::AsmParser &parser);
/// Prints `value` in the shortest form that parses back to the same double.
void printF64(mlir::AsmPrinter &printer, double value);
/// Same spelling as printF64, for messages and reports.
std::string formatF64(double value);
} // namespace mfsdp::plan

#include "dialects/plan/PlanOpsDialect.h.inc"
#include "dialects/plan/PlanEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/plan/PlanAttrs.h.inc"

#endif // MFSDP_DIALECTS_PLAN_PLANDIALECT_H

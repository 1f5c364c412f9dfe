//===- PlanDialect.h - The plan dialect, its enums and attributes -*- C++ -*-===//
#ifndef MFSDP_DIALECTS_PLAN_PLANDIALECT_H
#define MFSDP_DIALECTS_PLAN_PLANDIALECT_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/bit.h"

#include <mutex>
#include <string>

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
/// Prints a cost's kernels as `[#plan.kernel<...>, ...]`, as MLIR prints
/// the array, without its generic attribute path per kernel. Each kernel's
/// text is KernelAttr's assembly format, written out: a change to one is a
/// change to the other (test/Dialect/Plan/round-trip.mlir checks the text).
void printKernels(mlir::AsmPrinter &printer, mlir::ArrayAttr kernels);
/// A kernel's shape: `[1, 2, 3]` read integer by integer (anything else is
/// left to MLIR's dense i64 array parser, which refuses it).
mlir::FailureOr<mlir::DenseI64ArrayAttr> parseShape(mlir::AsmParser &parser);
} // namespace mfsdp::plan

#include "dialects/plan/PlanOpsDialect.h.inc"
#include "dialects/plan/PlanEnums.h.inc"

#include "dialects/VocabularyTie.h"

namespace mfsdp::plan {
// The plan dialect's enums carry the values of the shared vocabulary
// (dialects/VocabularyTie.h), case by case, so converting is a cast. Each ODS
// case is spelled as its vocabulary value (checked by the round-trip lit
// tests and test/unit/VocabularyTest.cpp through the graph format).
MFSDP_TIE_CASE(ParamKind::linear, ModuleKind::Linear)
MFSDP_TIE_CASE(ParamKind::embedding, ModuleKind::Embedding)
MFSDP_TIE_CASE(ParamKind::output, ModuleKind::Output)
MFSDP_TIE_CASE(ParamKind::norm, ModuleKind::Norm)
MFSDP_TIE_CASE(ParamKind::router, ModuleKind::Router)
MFSDP_TIE_CASE(ParamKind::expert, ModuleKind::Expert)
MFSDP_TIE_CASE(ParamKind::other, ModuleKind::Other)
MFSDP_TIE_ENUM(ParamKind, ::mfsdp::ModuleKind)
MFSDP_TIE_CASE(PolicyKind::adamw, ::mfsdp::PolicyKind::AdamW)
MFSDP_TIE_CASE(PolicyKind::sgd, ::mfsdp::PolicyKind::SGD)
MFSDP_TIE_CASE(PolicyKind::muon, ::mfsdp::PolicyKind::Muon)
MFSDP_TIE_CASE(PolicyKind::mixed_muon_adamw, ::mfsdp::PolicyKind::MixedMuonAdamW)
MFSDP_TIE_ENUM(PolicyKind, ::mfsdp::PolicyKind)
MFSDP_TIE_CASE(MuonScale::match_rms_adamw, ::mfsdp::MuonScale::MatchRmsAdamW)
MFSDP_TIE_CASE(MuonScale::original, ::mfsdp::MuonScale::Original)
MFSDP_TIE_ENUM(MuonScale, ::mfsdp::MuonScale)
MFSDP_TIE_CASE(NsPrecision::fp32, ::mfsdp::NsPrecision::FP32)
MFSDP_TIE_CASE(NsPrecision::bf16, ::mfsdp::NsPrecision::BF16)
MFSDP_TIE_ENUM(NsPrecision, ::mfsdp::NsPrecision)
MFSDP_TIE_CASE(RowLayout::per_param, ::mfsdp::RowLayout::PerParam)
MFSDP_TIE_CASE(RowLayout::flat, ::mfsdp::RowLayout::Flat)
MFSDP_TIE_ENUM(RowLayout, ::mfsdp::RowLayout)
} // namespace mfsdp::plan

#define GET_ATTRDEF_CLASSES
#include "dialects/plan/PlanAttrs.h.inc"

#endif // MFSDP_DIALECTS_PLAN_PLANDIALECT_H

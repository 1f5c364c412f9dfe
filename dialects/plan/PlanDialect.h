//===- PlanDialect.h - The plan dialect, its enums and attributes -*- C++ -*-===//
#ifndef MFSDP_DIALECTS_PLAN_PLANDIALECT_H
#define MFSDP_DIALECTS_PLAN_PLANDIALECT_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/Hashing.h"
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

#include "mfsdp/Vocabulary.h"

namespace mfsdp::plan {
// The plan dialect's enums carry the values of the shared vocabulary
// (mfsdp/Vocabulary.h), case by case, so converting is a cast. Each ODS case
// is spelled as its vocabulary value (checked by the round-trip lit tests and
// test/unit/VocabularyTest.cpp through the graph format).
#define MFSDP_PLAN_TIE(ods, vocab)                                             \
  static_assert(static_cast<int32_t>(ods) == static_cast<int32_t>(vocab),     \
                #ods " must have the value of " #vocab);
MFSDP_PLAN_TIE(ParamKind::linear, ModuleKind::Linear)
MFSDP_PLAN_TIE(ParamKind::embedding, ModuleKind::Embedding)
MFSDP_PLAN_TIE(ParamKind::output, ModuleKind::Output)
MFSDP_PLAN_TIE(ParamKind::norm, ModuleKind::Norm)
MFSDP_PLAN_TIE(ParamKind::router, ModuleKind::Router)
MFSDP_PLAN_TIE(ParamKind::expert, ModuleKind::Expert)
MFSDP_PLAN_TIE(ParamKind::other, ModuleKind::Other)
MFSDP_PLAN_TIE(PolicyKind::adamw, ::mfsdp::PolicyKind::AdamW)
MFSDP_PLAN_TIE(PolicyKind::sgd, ::mfsdp::PolicyKind::SGD)
MFSDP_PLAN_TIE(PolicyKind::muon, ::mfsdp::PolicyKind::Muon)
MFSDP_PLAN_TIE(PolicyKind::mixed_muon_adamw, ::mfsdp::PolicyKind::MixedMuonAdamW)
MFSDP_PLAN_TIE(MuonScale::match_rms_adamw, ::mfsdp::MuonScale::MatchRmsAdamW)
MFSDP_PLAN_TIE(MuonScale::original, ::mfsdp::MuonScale::Original)
MFSDP_PLAN_TIE(NsPrecision::fp32, ::mfsdp::NsPrecision::FP32)
MFSDP_PLAN_TIE(NsPrecision::bf16, ::mfsdp::NsPrecision::BF16)
MFSDP_PLAN_TIE(RowLayout::per_param, ::mfsdp::RowLayout::PerParam)
MFSDP_PLAN_TIE(RowLayout::flat, ::mfsdp::RowLayout::Flat)
#undef MFSDP_PLAN_TIE
static_assert(getMaxEnumValForParamKind() + 1 ==
                  ::mfsdp::enumValues<ModuleKind>().size() &&
              getMaxEnumValForPolicyKind() + 1 ==
                  ::mfsdp::enumValues<::mfsdp::PolicyKind>().size() &&
              getMaxEnumValForMuonScale() + 1 ==
                  ::mfsdp::enumValues<::mfsdp::MuonScale>().size() &&
              getMaxEnumValForNsPrecision() + 1 ==
                  ::mfsdp::enumValues<::mfsdp::NsPrecision>().size() &&
              getMaxEnumValForRowLayout() + 1 ==
                  ::mfsdp::enumValues<::mfsdp::RowLayout>().size(),
              "the plan dialect's enums have the vocabulary's cases");

inline ::mfsdp::ModuleKind toVocab(ParamKind k) {
  return static_cast<::mfsdp::ModuleKind>(k);
}
inline ParamKind fromVocab(::mfsdp::ModuleKind k) {
  return static_cast<ParamKind>(k);
}
inline ::mfsdp::PolicyKind toVocab(PolicyKind k) {
  return static_cast<::mfsdp::PolicyKind>(k);
}
inline PolicyKind fromVocab(::mfsdp::PolicyKind k) {
  return static_cast<PolicyKind>(k);
}
inline ::mfsdp::MuonScale toVocab(MuonScale s) {
  return static_cast<::mfsdp::MuonScale>(s);
}
inline MuonScale fromVocab(::mfsdp::MuonScale s) {
  return static_cast<MuonScale>(s);
}
inline ::mfsdp::NsPrecision toVocab(NsPrecision p) {
  return static_cast<::mfsdp::NsPrecision>(p);
}
inline NsPrecision fromVocab(::mfsdp::NsPrecision p) {
  return static_cast<NsPrecision>(p);
}
inline ::mfsdp::RowLayout toVocab(RowLayout l) {
  return static_cast<::mfsdp::RowLayout>(l);
}
inline RowLayout fromVocab(::mfsdp::RowLayout l) {
  return static_cast<RowLayout>(l);
}
} // namespace mfsdp::plan

#define GET_ATTRDEF_CLASSES
#include "dialects/plan/PlanAttrs.h.inc"

#endif // MFSDP_DIALECTS_PLAN_PLANDIALECT_H

//===- SchedDialect.h - The sched dialect and its types ---------*- C++ -*-===//
#ifndef MFSDP_DIALECTS_SCHED_SCHEDDIALECT_H
#define MFSDP_DIALECTS_SCHED_SCHEDDIALECT_H

#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/Types.h"

#include "dialects/sched/SchedOpsDialect.h.inc"
#include "dialects/sched/SchedEnums.h.inc"

#include "mfsdp/Vocabulary.h"

namespace mfsdp::sched {
// sched's phases carry the shared vocabulary's values (mfsdp/Vocabulary.h),
// so converting is a cast.
static_assert(static_cast<int32_t>(Phase::forward) ==
                      static_cast<int32_t>(::mfsdp::Phase::Forward) &&
                  static_cast<int32_t>(Phase::backward) ==
                      static_cast<int32_t>(::mfsdp::Phase::Backward) &&
                  static_cast<int32_t>(Phase::optimizer) ==
                      static_cast<int32_t>(::mfsdp::Phase::Optimizer) &&
                  getMaxEnumValForPhase() + 1 ==
                      ::mfsdp::enumValues<::mfsdp::Phase>().size(),
              "sched.phase must have the vocabulary's phases");
static_assert(static_cast<int32_t>(ReduceDType::f32) ==
                      static_cast<int32_t>(::mfsdp::ReduceDType::F32) &&
                  static_cast<int32_t>(ReduceDType::bf16) ==
                      static_cast<int32_t>(::mfsdp::ReduceDType::BF16) &&
                  getMaxEnumValForReduceDType() + 1 ==
                      ::mfsdp::enumValues<::mfsdp::ReduceDType>().size(),
              "sched's reduce dtypes must be the vocabulary's");
static_assert(static_cast<int32_t>(NsPrecision::fp32) ==
                      static_cast<int32_t>(::mfsdp::NsPrecision::FP32) &&
                  static_cast<int32_t>(NsPrecision::bf16) ==
                      static_cast<int32_t>(::mfsdp::NsPrecision::BF16) &&
                  getMaxEnumValForNsPrecision() + 1 ==
                      ::mfsdp::enumValues<::mfsdp::NsPrecision>().size(),
              "sched's Newton-Schulz precisions must be the vocabulary's");
inline ::mfsdp::NsPrecision toVocab(NsPrecision p) {
  return static_cast<::mfsdp::NsPrecision>(p);
}
inline NsPrecision fromVocab(::mfsdp::NsPrecision p) {
  return static_cast<NsPrecision>(p);
}
inline ::mfsdp::ReduceDType toVocab(ReduceDType d) {
  return static_cast<::mfsdp::ReduceDType>(d);
}
inline ::mfsdp::Phase toVocab(Phase p) {
  return static_cast<::mfsdp::Phase>(p);
}
inline Phase fromVocab(::mfsdp::Phase p) { return static_cast<Phase>(p); }
} // namespace mfsdp::sched

#define GET_TYPEDEF_CLASSES
#include "dialects/sched/SchedTypes.h.inc"

#endif // MFSDP_DIALECTS_SCHED_SCHEDDIALECT_H

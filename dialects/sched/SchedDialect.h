//===- SchedDialect.h - The sched dialect and its types ---------*- C++ -*-===//
#ifndef MFSDP_DIALECTS_SCHED_SCHEDDIALECT_H
#define MFSDP_DIALECTS_SCHED_SCHEDDIALECT_H

#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/Types.h"

#include "dialects/sched/SchedOpsDialect.h.inc"
#include "dialects/sched/SchedEnums.h.inc"

#include "dialects/VocabularyTie.h"

namespace mfsdp::sched {
// sched's enums carry the shared vocabulary's values (dialects/VocabularyTie.h).
MFSDP_TIE_CASE(Phase::forward, ::mfsdp::Phase::Forward)
MFSDP_TIE_CASE(Phase::backward, ::mfsdp::Phase::Backward)
MFSDP_TIE_CASE(Phase::optimizer, ::mfsdp::Phase::Optimizer)
MFSDP_TIE_ENUM(Phase, ::mfsdp::Phase)
MFSDP_TIE_CASE(ReduceDType::f32, ::mfsdp::ReduceDType::F32)
MFSDP_TIE_CASE(ReduceDType::bf16, ::mfsdp::ReduceDType::BF16)
MFSDP_TIE_ENUM(ReduceDType, ::mfsdp::ReduceDType)
MFSDP_TIE_CASE(NsPrecision::fp32, ::mfsdp::NsPrecision::FP32)
MFSDP_TIE_CASE(NsPrecision::bf16, ::mfsdp::NsPrecision::BF16)
MFSDP_TIE_ENUM(NsPrecision, ::mfsdp::NsPrecision)
} // namespace mfsdp::sched

#define GET_TYPEDEF_CLASSES
#include "dialects/sched/SchedTypes.h.inc"

#endif // MFSDP_DIALECTS_SCHED_SCHEDDIALECT_H

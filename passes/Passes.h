//===- Passes.h - mfsdp passes ----------------------------------*- C++ -*-===//
#ifndef MFSDP_PASSES_PASSES_H
#define MFSDP_PASSES_PASSES_H

#include "dialects/plan/PlanOps.h"
#include "dialects/sched/SchedDialect.h"
#include "dialects/sched/SchedOps.h"
#include "passes/VocabularyOptions.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mfsdp {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace mfsdp

#endif // MFSDP_PASSES_PASSES_H

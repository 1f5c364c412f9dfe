//===- FuzzPlanIR.cpp - Fuzz target: plan and sched IR, parsed and verified ===//
//
// Bytes as MLIR text: parsed (with the nesting limit mfsdp-opt applies) and
// verified with the plan and sched dialects' verifiers.
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include "mfsdp/import/PlanImport.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <memory>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  auto sourceMgr = std::make_shared<llvm::SourceMgr>();
  sourceMgr->AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(reinterpret_cast<const char *>(data), size), "fuzz.mlir"),
      llvm::SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mfsdp::parseModule(sourceMgr, &mfsdp::fuzz::context());
  return 0;
}

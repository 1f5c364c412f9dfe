//===- FuzzHF.cpp - Fuzz target: the Hugging Face config importer ----------===//
//
// Bytes as a config.json: the HF importer (both transformers layouts), and
// the import of what it builds into plan IR and its verifiers.
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include "mfsdp/graph/HFConfig.h"
#include "mfsdp/import/PlanImport.h"

#include "mlir/IR/BuiltinOps.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  for (int version : {5, 4}) {
    mfsdp::graph::HFImportOptions opts;
    opts.transformersVersion = version;
    opts.seqLen = 128;
    mlir::OwningOpRef<mlir::ModuleOp> module =
        mfsdp::importGraphText(text, "config.json", &opts, &mfsdp::fuzz::context());
  }
  return 0;
}

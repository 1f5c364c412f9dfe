//===- FuzzGraph.cpp - Fuzz target: the graph reader and import ------------===//
//
// Bytes as a graph (format 1, JSON): the reader with its limits, then, for
// a graph it accepts, the import into plan IR and its verifiers.
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include "mfsdp/graph/Graph.h"
#include "mfsdp/import/PlanImport.h"

#include "mlir/IR/BuiltinOps.h"

#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view text(reinterpret_cast<const char *>(data), size);
  mfsdp::graph::Graph g;
  mfsdp::graph::Diagnostic diag;
  if (!mfsdp::graph::parseGraph(text, g, diag))
    return 0;
  (void)mfsdp::graph::writeGraph(g);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mfsdp::importGraphText(llvm::StringRef(text.data(), text.size()), "fuzz.json",
                             nullptr, &mfsdp::fuzz::context());
  return 0;
}

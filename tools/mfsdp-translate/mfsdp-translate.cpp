//===- mfsdp-translate.cpp - Model graphs in and out of the plan dialect --===//
//
//   mfsdp-translate --import-mfsdp-graph model.json   (graph format 1 -> IR)
//   mfsdp-translate --import-hf-config config.json    (HF config -> IR)
//   mfsdp-translate --export-mfsdp-graph model.mlir   (IR -> graph format 1)
//   mfsdp-translate --emit-step-c planned.mlir        (IR -> step library C)
//
//===----------------------------------------------------------------------===//
#include "mfsdp/emit/EmitStep.h"
#include "mfsdp/import/PlanImport.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <vector>

/// MLIR prints the op under each diagnostic on it by default; for a
/// plan.graph that is the whole model (69 KB for Llama-3-8B) while the
/// location already says where. Off unless the command line asks for it.
static std::vector<char *> withQuietDiagnostics(int argc, char **argv) {
  static char quiet[] = "--mlir-print-op-on-diagnostic=false";
  std::vector<char *> args(argv, argv + argc);
  bool given = std::any_of(args.begin(), args.end(), [](const char *a) {
    return llvm::StringRef(a).ltrim('-').starts_with("mlir-print-op-on-diagnostic");
  });
  if (!given)
    args.insert(args.begin() + 1, quiet);
  args.push_back(nullptr);
  return args;
}

int main(int argc, char **argv) {
  std::vector<char *> args = withQuietDiagnostics(argc, argv);
  argc = static_cast<int>(args.size()) - 1;
  argv = args.data();
  mfsdp::registerGraphTranslations();
  mfsdp::registerEmitTranslations();
  return mlir::failed(mlir::mlirTranslateMain(
             argc, argv, "mfsdp translation driver: model graphs and step libraries\n"))
             ? 1
             : 0;
}

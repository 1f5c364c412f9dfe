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

#include <vector>

int main(int argc, char **argv) {
  std::vector<char *> args = mfsdp::withToolDefaults(argc, argv);
  argc = static_cast<int>(args.size()) - 1;
  argv = args.data();
  mfsdp::registerGraphTranslations();
  mfsdp::registerEmitTranslations();
  return mlir::failed(mlir::mlirTranslateMain(
             argc, argv, "mfsdp translation driver: model graphs and step libraries\n"))
             ? 1
             : 0;
}

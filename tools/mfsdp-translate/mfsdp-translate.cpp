//===- mfsdp-translate.cpp - Model graphs in and out of the plan dialect --===//
//
//   mfsdp-translate --import-mfsdp-graph model.json   (graph format 1 -> IR)
//   mfsdp-translate --import-hf-config config.json    (HF config -> IR)
//   mfsdp-translate --export-mfsdp-graph model.mlir   (IR -> graph format 1)
//
//===----------------------------------------------------------------------===//
#include "mfsdp/import/PlanImport.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

int main(int argc, char **argv) {
  mfsdp::registerGraphTranslations();
  return mlir::failed(mlir::mlirTranslateMain(
             argc, argv, "mfsdp translation driver: model graphs\n"))
             ? 1
             : 0;
}

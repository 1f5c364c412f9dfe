//===- mfsdp-opt.cpp - The mfsdp optimizer driver -------------------------===//
#include "dialects/plan/PlanDialect.h"
#include "dialects/sched/SchedDialect.h"
#include "passes/Passes.h"
#include "passes/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mfsdp::registerMFSDPPasses();
  mfsdp::registerDefaultPipeline();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();

  mlir::DialectRegistry registry;
  registry.insert<mfsdp::plan::PlanDialect, mfsdp::sched::SchedDialect,
                  mlir::func::FuncDialect>();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "mfsdp optimizer driver: sharded training plans\n",
      registry));
}

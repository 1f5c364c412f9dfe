//===- FuzzCommon.cpp - What the fuzz targets share -----------------------===//
#include "FuzzCommon.h"

#include "dialects/plan/PlanDialect.h"
#include "dialects/sched/SchedDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"

mlir::MLIRContext &mfsdp::fuzz::context() {
  static mlir::MLIRContext *ctx = [] {
    mlir::DialectRegistry registry;
    registry.insert<mfsdp::plan::PlanDialect, mfsdp::sched::SchedDialect,
                    mlir::func::FuncDialect>();
    auto *c = new mlir::MLIRContext(registry, mlir::MLIRContext::Threading::DISABLED);
    c->loadAllAvailableDialects();
    c->getDiagEngine().registerHandler([](mlir::Diagnostic &) { return mlir::success(); });
    return c;
  }();
  return *ctx;
}

//===- BucketCollectives.cpp - mfsdp-bucket-collectives -------------------===//
#include "passes/Passes.h"
#include "dialects/sched/StepBridge.h"

#include "mfsdp/step/Schedule.h"

namespace mfsdp {
#define GEN_PASS_DEF_BUCKETCOLLECTIVES
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;

namespace {
struct BucketCollectivesPass
    : public mfsdp::impl::BucketCollectivesBase<BucketCollectivesPass> {
  using Base::Base;
  void runOnOperation() override {
    if (bucketMB < 0) {
      getOperation().emitError("bucket-mb must be >= 0, got ")
          << bucketMB.getValue();
      return signalPassFailure();
    }
    sched::StepOp op = getOperation();
    step::Step s;
    SmallVector<Location> locations;
    if (failed(readStep(op, s, &locations)))
      return signalPassFailure();
    step::bucketCollectives(s, static_cast<double>(bucketMB) * 1024 * 1024);
    if (failed(rewriteStep(op, s, locations)))
      return signalPassFailure();
  }
};
} // namespace

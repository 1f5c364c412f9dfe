//===- BucketCollectives.cpp - mfsdp-bucket-collectives -------------------===//
#include "passes/Passes.h"
#include "passes/StepBridge.h"

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
    SmallVector<sched::StepOp> steps(getOperation().getOps<sched::StepOp>());
    for (sched::StepOp op : steps) {
      step::Step s;
      if (failed(readStep(op, s)))
        return signalPassFailure();
      step::bucketCollectives(s, static_cast<double>(bucketMB) * 1024 * 1024);
      replaceStep(op, s);
    }
  }
};
} // namespace

//===- BucketCollectives.cpp - mfsdp-bucket-collectives -------------------===//
#include "passes/Passes.h"
#include "passes/ScheduleStages.h"
#include "dialects/sched/StepBridge.h"

#include "mfsdp/step/Schedule.h"

namespace mfsdp {
#define GEN_PASS_DEF_BUCKETCOLLECTIVES
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;

LogicalResult mfsdp::bucketStage(sched::StepOp op, step::Step &s,
                                 const BucketCollectivesOptions &options) {
  if (!(options.bucketMB >= 0))
    return emitOptionError(op.getContext(), "mfsdp-bucket-collectives", "bucket-mb")
           << "expected 0 or more, got " << options.bucketMB;
  // At most 2^62 bytes: the limit is written as an integer byte count.
  if (!(options.bucketMB <= 4398046511104.0))
    return emitOptionError(op.getContext(), "mfsdp-bucket-collectives", "bucket-mb")
           << "expected at most 2^42 MiB, got " << options.bucketMB;
  const int64_t limit = step::bucketLimitBytes(options.bucketMB * 1024 * 1024);
  step::bucketCollectives(s, static_cast<double>(limit));
  // The limit the step library's runtime buckets keep to (and
  // mfsdp-verify-schedule's lowering of the step).
  op.setBucketBytesAttr(mlir::Builder(op.getContext()).getI64IntegerAttr(limit));
  return success();
}

namespace {
struct BucketCollectivesPass
    : public mfsdp::impl::BucketCollectivesBase<BucketCollectivesPass> {
  using Base::Base;
  void runOnOperation() override {
    sched::StepOp op = getOperation();
    BucketCollectivesOptions options;
    options.bucketMB = bucketMB;
    step::Step s;
    SmallVector<Location> locations;
    if (failed(readStep(op, s, &locations)) ||
        failed(bucketStage(op, s, options)) ||
        failed(rewriteStep(op, s, locations)))
      return signalPassFailure();
  }
};
} // namespace

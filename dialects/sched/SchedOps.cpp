//===- SchedOps.cpp - Verifiers of the sched ops --------------------------===//
#include "dialects/sched/SchedOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <cmath>

using namespace mlir;
using namespace mfsdp::sched;

#define GET_OP_CLASSES
#include "dialects/sched/SchedOps.cpp.inc"

static bool finiteNonNegative(double v) { return std::isfinite(v) && v >= 0; }

LogicalResult AllocOp::verify() {
  if (!finiteNonNegative(getBytes().convertToDouble()))
    return emitOpError("bytes must be a finite non-negative number");
  if (getOnlyRank() && static_cast<int64_t>(*getOnlyRank()) < 0)
    return emitOpError("only_rank must be non-negative");
  return success();
}

/// Shared by every collective op.
template <typename OpTy>
static LogicalResult verifyCollective(OpTy op, bool variable) {
  int64_t ranks = static_cast<int64_t>(op.getRanks());
  if (ranks < 1)
    return op.emitOpError("ranks must be at least 1, got ") << ranks;
  if (op.getMeshAxes().empty())
    return op.emitOpError("needs at least one mesh axis");
  double bytes = op.getBytes().convertToDouble();
  if (!finiteNonNegative(bytes))
    return op.emitOpError("bytes must be a finite non-negative number");
  if (op.getAsync() != bool(op.getToken()))
    return op.emitOpError(op.getAsync()
                              ? "is async and must return a !sched.token"
                              : "returns a token but is not async");
  if (auto chunks = op.getChunks()) {
    if (!variable)
      return op.emitOpError("takes no chunks; only the _v collectives do");
    if (static_cast<int64_t>(chunks->size()) != ranks)
      return op.emitOpError("has ")
             << chunks->size() << " chunks for " << ranks << " ranks";
    double sum = 0;
    for (double c : *chunks) {
      if (!finiteNonNegative(c))
        return op.emitOpError("chunks must be finite and non-negative");
      sum += c;
    }
    if (std::fabs(sum - bytes) > 1e-6 * std::max(1.0, bytes))
      return op.emitOpError("chunks sum to ")
             << sum << " bytes but the collective moves " << bytes;
  } else if (variable) {
    return op.emitOpError("needs the bytes each rank contributes (chunks)");
  }
  if (static_cast<int64_t>(op.getComm()) < 0)
    return op.emitOpError("comm must be non-negative");
  return success();
}

LogicalResult AllGatherOp::verify() { return verifyCollective(*this, false); }
LogicalResult ReduceScatterOp::verify() { return verifyCollective(*this, false); }
LogicalResult AllReduceOp::verify() { return verifyCollective(*this, false); }
LogicalResult AllGatherVOp::verify() { return verifyCollective(*this, true); }
LogicalResult ReduceScatterVOp::verify() { return verifyCollective(*this, true); }

LogicalResult ComputeOp::verify() {
  if (!finiteNonNegative(getFlops().convertToDouble()) ||
      !finiteNonNegative(getBytes().convertToDouble()))
    return emitOpError("flops and bytes must be finite and non-negative");
  return success();
}

LogicalResult OptimizerOp::verify() {
  if (!finiteNonNegative(getFlops().convertToDouble()) ||
      !finiteNonNegative(getBytes().convertToDouble()))
    return emitOpError("flops and bytes must be finite and non-negative");
  if (getOnlyRank() && static_cast<int64_t>(*getOnlyRank()) < 0)
    return emitOpError("only_rank must be non-negative");
  return success();
}

LogicalResult StepOp::verifyRegions() {
  int64_t world = static_cast<int64_t>(getWorld());
  if (world < 1)
    return emitOpError("world must be at least 1, got ") << world;
  if (static_cast<int64_t>(getMicrobatches()) < 1)
    return emitOpError("microbatches must be at least 1");
  // Tokens: each waited exactly once, after its collective (SSA order
  // guarantees the after). Buffers: deallocated at most once, never used
  // after, persistent ones never.
  llvm::DenseMap<Value, Operation *> waited;
  llvm::DenseSet<Value> freed;
  for (Operation &op : getBody().front()) {
    if (auto only = op.getAttrOfType<IntegerAttr>("only_rank"))
      if (only.getInt() >= world)
        return op.emitOpError("only_rank ")
               << only.getInt() << " is outside the " << world << " ranks";
    for (Value v : op.getOperands())
      if (freed.contains(v))
        return op.emitOpError("uses a buffer after its sched.dealloc");
    if (auto w = dyn_cast<WaitOp>(op)) {
      auto [it, fresh] = waited.try_emplace(w.getToken(), &op);
      if (!fresh)
        return w.emitOpError("waits for a token that was already waited for");
    }
    if (auto d = dyn_cast<DeallocOp>(op)) {
      auto alloc = d.getBuffer().getDefiningOp<AllocOp>();
      if (alloc && alloc.getPersistent())
        return d.emitOpError("deallocates a persistent buffer");
      freed.insert(d.getBuffer());
    }
    if (op.getNumResults() == 1 &&
        isa<TokenType>(op.getResult(0).getType()) &&
        op.getResult(0).use_empty())
      return op.emitOpError("starts a collective whose token is never waited "
                            "for");
  }
  return success();
}

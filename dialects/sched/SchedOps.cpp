//===- SchedOps.cpp - Verifiers of the sched ops --------------------------===//
#include "dialects/sched/SchedOps.h"
#include "dialects/FastText.h"
#include "dialects/plan/PlanOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mfsdp::sched;

#define GET_OP_CLASSES
#include "dialects/sched/SchedOps.cpp.inc"

#include "dialects/sched/SchedInterfaces.cpp.inc"

static bool finiteNonNegative(double v) { return std::isfinite(v) && v >= 0; }

LogicalResult AllocOp::verify() {
  if (static_cast<int64_t>(getBytes()) < 0)
    return emitOpError("bytes must be non-negative, got ")
           << static_cast<int64_t>(getBytes());
  if (getOnlyRank() && static_cast<int64_t>(*getOnlyRank()) < 0)
    return emitOpError("only_rank must be non-negative");
  return success();
}

/// Bytes of the buffer `v` when a sched.alloc defines it.
static std::optional<int64_t> allocatedBytes(Value v) {
  if (auto alloc = v.getDefiningOp<AllocOp>())
    return static_cast<int64_t>(alloc.getBytes());
  return std::nullopt;
}

LogicalResult mfsdp::sched::detail::verifyCollective(Operation *op) {
  auto c = cast<CollectiveOpInterface>(op);
  int64_t ranks = static_cast<int64_t>(c.getRanks());
  if (ranks < 1)
    return op->emitOpError("ranks must be at least 1, got ") << ranks;
  if (c.getMeshAxes().empty())
    return op->emitOpError("needs at least one mesh axis");
  int64_t bytes = static_cast<int64_t>(c.getBytes());
  if (bytes < 0)
    return op->emitOpError("bytes must be non-negative, got ") << bytes;
  if (static_cast<int64_t>(c.getComm()) < 0)
    return op->emitOpError("comm must be non-negative");
  if (c.getAsync() != bool(c.getToken()))
    return op->emitOpError(c.getAsync()
                               ? "is async and must return a !sched.token"
                               : "returns a token but is not async");
  // The side that holds the full buffer must hold all of it.
  auto holds = [&](Value buffer, StringRef side) -> LogicalResult {
    std::optional<int64_t> have = allocatedBytes(buffer);
    if (have && *have < bytes)
      return op->emitOpError("moves ")
             << bytes << " bytes but its " << side << " buffer holds "
             << *have;
    return success();
  };
  // In place (src == dst) the step builder names the rank's shard buffer
  // for a gather whose full result is the trainer's parameters (ZeRO-1/2
  // after the optimizer); only distinct buffers are held to the size.
  if (c.getSrc() != c.getDst()) {
    if (c.fullDestination() && failed(holds(c.getDst(), "destination")))
      return failure();
    if (c.fullSource() && failed(holds(c.getSrc(), "source")))
      return failure();
  }
  // Every rank of the group calls the collective, so its buffers exist on
  // every rank.
  for (Value buffer : {c.getSrc(), c.getDst()})
    if (auto alloc = buffer.getDefiningOp<AllocOp>())
      if (alloc.getOnlyRank())
        return op->emitOpError("uses buffer '")
               << alloc.getName() << "', which exists on rank "
               << static_cast<int64_t>(*alloc.getOnlyRank())
               << " only; every rank of the group calls a collective";
  if (auto chunks = c.getChunks()) {
    if (!c.isVariable())
      return op->emitOpError("takes no chunks; only the _v collectives do");
    if (static_cast<int64_t>(chunks->size()) != ranks)
      return op->emitOpError("has ")
             << chunks->size() << " chunks for " << ranks << " ranks";
    int64_t sum = 0;
    for (int64_t chunk : *chunks) {
      if (chunk < 0)
        return op->emitOpError("chunks must be non-negative, got ") << chunk;
      sum += chunk;
    }
    if (sum != bytes)
      return op->emitOpError("chunks sum to ")
             << sum << " bytes but the collective moves " << bytes;
  } else if (c.isVariable()) {
    return op->emitOpError("needs the bytes each rank contributes (chunks)");
  }
  return success();
}

LogicalResult ComputeOp::verify() {
  if (!finiteNonNegative(getFlops().convertToDouble()) ||
      static_cast<int64_t>(getBytes()) < 0)
    return emitOpError("flops and bytes must be finite and non-negative");
  return success();
}

LogicalResult OptimizerOp::verify() {
  if (!finiteNonNegative(getFlops().convertToDouble()) ||
      static_cast<int64_t>(getBytes()) < 0)
    return emitOpError("flops and bytes must be finite and non-negative");
  if (getOnlyRank() && static_cast<int64_t>(*getOnlyRank()) < 0)
    return emitOpError("only_rank must be non-negative");
  if (auto k = getNsKernels()) {
    const int64_t n = static_cast<int64_t>(*k);
    if (n < 0 || n > std::numeric_limits<int32_t>::max())
      return emitOpError("ns_kernels must be in [0, 2^31), got ") << n;
  }
  return success();
}

LogicalResult StepOp::verifyRegions() {
  int64_t world = static_cast<int64_t>(getWorld());
  if (world < 1)
    return emitOpError("world must be at least 1, got ") << world;
  if (static_cast<int64_t>(getMicrobatches()) < 1)
    return emitOpError("microbatches must be at least 1");
  // The step library's memory plan: all of it or none, one arena per rank,
  // seven offsets a parameter and three a bucket, each -1 or an offset.
  const bool runtimeMemory = getRuntimeArenaBytesAttr() || getRuntimeOffsetsAttr() ||
                             getRuntimeStagingAttr() || getRuntimeKeepGrads() ||
                             getRuntimeBucketOffsetsAttr();
  if (runtimeMemory) {
    if (!getRuntimeArenaBytesAttr() || !getRuntimeOffsetsAttr() || !getRuntimeStagingAttr())
      return emitOpError("has a part of the runtime's memory plan without the rest "
                         "(runtime_arena_bytes, runtime_staging and runtime_offsets go "
                         "together)");
    ArrayRef<int64_t> arena = *getRuntimeArenaBytes();
    if (static_cast<int64_t>(arena.size()) != world)
      return emitOpError("runtime_arena_bytes has ")
             << arena.size() << " arenas; expected one per rank (" << world << ")";
    for (int64_t bytes : arena)
      if (bytes < 0)
        return emitOpError("runtime_arena_bytes has a negative arena (") << bytes << ")";
    ArrayRef<int64_t> offsets = *getRuntimeOffsets();
    if (offsets.size() % 7 != 0)
      return emitOpError("runtime_offsets has ")
             << offsets.size() << " offsets; expected seven per parameter";
    ArrayRef<int64_t> buckets =
        getRuntimeBucketOffsets() ? *getRuntimeBucketOffsets() : ArrayRef<int64_t>();
    if (buckets.size() % 3 != 0)
      return emitOpError("runtime_bucket_offsets has ")
             << buckets.size() << " offsets; expected three per bucket";
    const int64_t staging = static_cast<int64_t>(*getRuntimeStaging());
    for (ArrayRef<int64_t> list : {offsets, buckets, ArrayRef<int64_t>(staging)})
      for (int64_t o : list)
        if (o < -1)
          return emitOpError("the runtime's memory plan has offset ")
                 << o << "; expected an offset or -1 (none)";
  }
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

LogicalResult StepOp::verifySymbolUses(SymbolTableCollection &tables) {
  SymbolRefAttr meshRef = getMeshAttr();
  if (!meshRef)
    return success();
  Operation *scope = (*this)->getParentOp();
  auto graph = dyn_cast_or_null<plan::GraphOp>(
      scope ? tables.lookupSymbolIn(scope, meshRef.getRootReference())
            : nullptr);
  if (!graph)
    return emitOpError("names mesh ")
           << meshRef << ", but @" << meshRef.getRootReference().getValue()
           << " is not a plan.graph beside the step";
  auto mesh = dyn_cast_or_null<plan::MeshOp>(
      meshRef.getNestedReferences().size() == 1
          ? tables.lookupSymbolIn(graph, meshRef.getLeafReference())
          : nullptr);
  if (!mesh)
    return emitOpError("names mesh ")
           << meshRef << ", which is not a plan.mesh of graph @"
           << graph.getSymName();
  int64_t world = static_cast<int64_t>(getWorld());
  std::optional<int64_t> shard = mesh.getDimSize("dp_shard");
  if (shard && *shard != world)
    return emitOpError("world ")
           << world << " is not the size of dp_shard in mesh " << meshRef
           << " (" << *shard << ")";
  // The graph's table, found once: each of a large step's millions of
  // references is one lookup in it.
  SymbolTable &graphSymbols = tables.getSymbolTable(graph);
  auto resolve = [&](Operation *user, FlatSymbolRefAttr ref, StringRef field,
                     auto tag) -> LogicalResult {
    using T = decltype(tag);
    if (!isa_and_nonnull<T>(graphSymbols.lookup(ref.getAttr())))
      return user->emitOpError(field)
             << " " << ref << " is not a " << T::getOperationName()
             << " of graph @" << graph.getSymName();
    return success();
  };
  // A unit's gathers, reduction and optimizer name one uniqued array, and
  // the ops of a step a few sets of axes: each is checked once.
  llvm::DenseSet<Attribute> resolvedParams;
  llvm::DenseMap<Attribute, int64_t> groupOf;
  auto resolveParams = [&](Operation *user, ArrayAttr params) {
    if (params && resolvedParams.insert(params).second)
      for (Attribute p : params)
        if (failed(resolve(user, cast<FlatSymbolRefAttr>(p), "params",
                           plan::ParamOp())))
          return failure();
    return success();
  };
  for (Operation &op : getBody().front()) {
    if (auto c = dyn_cast<CollectiveOpInterface>(op)) {
      auto [known, inserted] = groupOf.try_emplace(c.getMeshAxes(), 1);
      if (inserted)
        for (Attribute a : c.getMeshAxes()) {
          StringRef axis = cast<StringAttr>(a).getValue();
          std::optional<int64_t> size = mesh.getDimSize(axis);
          if (!size)
            return op.emitOpError("mesh axis '")
                   << axis << "' is not a dim of mesh " << meshRef;
          known->second *= *size;
        }
      const int64_t group = known->second;
      if (static_cast<int64_t>(c.getRanks()) != group)
        return op.emitOpError("ranks ")
               << static_cast<int64_t>(c.getRanks())
               << " is not the size of the group over " << c.getMeshAxes()
               << " in mesh " << meshRef << " (" << group << ")";
      if (failed(resolveParams(&op, op.getAttrOfType<ArrayAttr>("params"))))
        return failure();
    } else if (auto compute = dyn_cast<ComputeOp>(op)) {
      if (FlatSymbolRefAttr unit = compute.getUnitAttr())
        if (failed(resolve(&op, unit, "unit", plan::UnitOp())))
          return failure();
    } else if (auto opt = dyn_cast<OptimizerOp>(op)) {
      if (failed(resolveParams(&op, opt.getParamsAttr())))
        return failure();
    }
  }
  return success();
}

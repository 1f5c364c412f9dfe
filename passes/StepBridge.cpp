//===- StepBridge.cpp - sched IR <-> step::Step ---------------------------===//
#include "passes/StepBridge.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mfsdp;
using namespace mfsdp::sched;

static step::Phase toStep(sched::Phase p) {
  switch (p) {
  case sched::Phase::forward:
    return step::Phase::Forward;
  case sched::Phase::backward:
    return step::Phase::Backward;
  case sched::Phase::optimizer:
    return step::Phase::Optimizer;
  }
  return step::Phase::Forward;
}

static sched::Phase toIR(step::Phase p) {
  switch (p) {
  case step::Phase::Forward:
    return sched::Phase::forward;
  case step::Phase::Backward:
    return sched::Phase::backward;
  case step::Phase::Optimizer:
    return sched::Phase::optimizer;
  }
  return sched::Phase::forward;
}

static std::vector<std::string> symbols(ArrayAttr a) {
  std::vector<std::string> out;
  if (a)
    for (Attribute e : a)
      out.push_back(cast<FlatSymbolRefAttr>(e).getValue().str());
  return out;
}

LogicalResult mfsdp::readStep(StepOp op, step::Step &s) {
  s = step::Step();
  s.name = op.getSymName().str();
  s.world = static_cast<int64_t>(op.getWorld());
  s.tokens = static_cast<int64_t>(op.getTokens());
  s.microbatches = static_cast<int64_t>(op.getMicrobatches());
  llvm::DenseMap<Value, int64_t> bufferOf;
  llvm::DenseMap<Operation *, int64_t> indexOf;
  step::Phase phase = step::Phase::Forward;
  auto ids = [&](ValueRange values) {
    std::vector<int64_t> out;
    for (Value v : values)
      out.push_back(bufferOf.lookup(v));
    return out;
  };
  for (Operation &child : op.getBody().front()) {
    step::Op o;
    o.phase = phase;
    bool ok = true;
    llvm::TypeSwitch<Operation *>(&child)
        .Case<AllocOp>([&](AllocOp a) {
          step::Buffer b;
          b.name = a.getName().str();
          b.bytes = a.getBytes().convertToDouble();
          b.persistent = a.getPersistent();
          if (auto r = a.getOnlyRank())
            b.onlyRank = static_cast<int64_t>(*r);
          if (auto off = a.getOffset())
            b.offset = static_cast<int64_t>(*off);
          s.buffers.push_back(b);
          int64_t id = static_cast<int64_t>(s.buffers.size()) - 1;
          bufferOf[a.getBuffer()] = id;
          o.kind = step::OpKind::Alloc;
          o.name = "alloc " + b.name;
          o.onlyRank = b.onlyRank;
          o.writes = {id};
        })
        .Case<DeallocOp>([&](DeallocOp d) {
          o.kind = step::OpKind::Free;
          int64_t id = bufferOf.lookup(d.getBuffer());
          o.name = "free " + s.buffers[id].name;
          o.writes = {id};
        })
        .Case<AllGatherOp, ReduceScatterOp, AllReduceOp, AllGatherVOp,
              ReduceScatterVOp>([&](auto c) {
          o.kind = step::OpKind::Collective;
          using T = decltype(c);
          o.coll = std::is_same_v<T, AllGatherOp>       ? step::CollKind::AllGather
                   : std::is_same_v<T, ReduceScatterOp> ? step::CollKind::ReduceScatter
                   : std::is_same_v<T, AllReduceOp>     ? step::CollKind::AllReduce
                   : std::is_same_v<T, AllGatherVOp>    ? step::CollKind::AllGatherV
                                                        : step::CollKind::ReduceScatterV;
          o.phase = phase = toStep(c.getPhase());
          o.name = c->hasAttr("name")
                       ? c->template getAttrOfType<StringAttr>("name").getValue().str()
                       : c->getName().stripDialect().str();
          for (Attribute a : c.getMeshAxes())
            o.meshAxes.push_back(cast<StringAttr>(a).getValue().str());
          o.ranks = static_cast<int64_t>(c.getRanks());
          o.interNode = c.getInterNode();
          o.collBytes = c.getBytes().convertToDouble();
          if (auto chunks = c.getChunks())
            o.chunks.assign(chunks->begin(), chunks->end());
          o.comm = static_cast<int64_t>(c.getComm());
          o.async = c.getAsync();
          o.params = symbols(c.getParamsAttr());
          if (auto g = c.getGroup())
            o.group = static_cast<int64_t>(*g);
          o.reads = {bufferOf.lookup(c.getSrc())};
          o.writes = {bufferOf.lookup(c.getDst())};
        })
        .Case<WaitOp>([&](WaitOp w) {
          o.kind = step::OpKind::Wait;
          Operation *def = w.getToken().getDefiningOp();
          o.waitFor = def ? indexOf.lookup(def) : -1;
          o.name = "wait";
        })
        .Case<ComputeOp>([&](ComputeOp c) {
          o.kind = step::OpKind::Compute;
          o.phase = phase = toStep(c.getPhase());
          o.compute = stringifyComputeKind(c.getKind()).str();
          o.name = c.getName().str();
          o.flops = c.getFlops().convertToDouble();
          o.bytes = c.getBytes().convertToDouble();
          if (auto g = c.getGroup())
            o.group = static_cast<int64_t>(*g);
          if (auto u = c.getUnitAttr())
            o.unitName = u.getValue().str();
          o.reads = ids(c.getReads());
          o.writes = ids(c.getWrites());
        })
        .Case<OptimizerOp>([&](OptimizerOp c) {
          o.kind = step::OpKind::Optimizer;
          o.phase = phase = toStep(c.getPhase());
          o.optimizer = stringifyOptimizerKind(c.getKind()).str();
          o.name = c.getName().str();
          o.flops = c.getFlops().convertToDouble();
          o.bytes = c.getBytes().convertToDouble();
          if (auto r = c.getOnlyRank())
            o.onlyRank = static_cast<int64_t>(*r);
          if (auto g = c.getGroup())
            o.group = static_cast<int64_t>(*g);
          o.params = symbols(c.getParamsAttr());
          o.reads = ids(c.getReads());
          o.writes = ids(c.getWrites());
        })
        .Default([&](Operation *other) {
          other->emitOpError("is not a sched op the schedule passes know");
          ok = false;
        });
    if (!ok)
      return failure();
    indexOf[&child] = static_cast<int64_t>(s.ops.size());
    s.ops.push_back(std::move(o));
  }
  return success();
}

StepOp mfsdp::writeStep(OpBuilder &b, Location loc, const step::Step &s) {
  MLIRContext *ctx = b.getContext();
  auto stepOp = StepOp::create(b, loc, b.getStringAttr(s.name),
                               b.getI64IntegerAttr(s.world),
                               b.getI64IntegerAttr(s.tokens),
                               b.getI64IntegerAttr(s.microbatches),
                               DenseF64ArrayAttr(), DenseF64ArrayAttr());
  Block *body = new Block();
  stepOp.getBody().push_back(body);
  OpBuilder ib = OpBuilder::atBlockEnd(body);
  std::vector<Value> buffers(s.buffers.size());
  std::vector<Value> tokens(s.ops.size());
  auto values = [&](const std::vector<int64_t> &ids) {
    SmallVector<Value> out;
    for (int64_t id : ids)
      if (id >= 0 && id < static_cast<int64_t>(buffers.size()) && buffers[id])
        out.push_back(buffers[id]);
    return out;
  };
  auto symbolArray = [&](const std::vector<std::string> &names) -> ArrayAttr {
    if (names.empty())
      return {};
    SmallVector<Attribute> refs;
    for (const auto &n : names)
      refs.push_back(FlatSymbolRefAttr::get(ctx, n));
    return b.getArrayAttr(refs);
  };
  auto optI64 = [&](int64_t v) { return v >= 0 ? b.getI64IntegerAttr(v) : IntegerAttr(); };
  Type bufferType = BufferType::get(ctx);
  Type tokenType = TokenType::get(ctx);
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const step::Op &o = s.ops[i];
    switch (o.kind) {
    case step::OpKind::Alloc: {
      int64_t id = o.writes.front();
      const step::Buffer &buf = s.buffers[id];
      buffers[id] = AllocOp::create(ib, loc, bufferType, b.getStringAttr(buf.name),
                                    b.getF64FloatAttr(buf.bytes),
                                    buf.persistent ? b.getUnitAttr() : UnitAttr(),
                                    optI64(buf.onlyRank), optI64(buf.offset));
      break;
    }
    case step::OpKind::Free:
      DeallocOp::create(ib, loc, buffers[o.writes.front()]);
      break;
    case step::OpKind::Wait:
      WaitOp::create(ib, loc, tokens[o.waitFor]);
      break;
    case step::OpKind::Collective: {
      Value src = buffers[o.reads.front()], dst = buffers[o.writes.front()];
      SmallVector<StringRef> axes(o.meshAxes.begin(), o.meshAxes.end());
      auto axesAttr = b.getStrArrayAttr(axes);
      DenseF64ArrayAttr chunks =
          o.chunks.empty() ? DenseF64ArrayAttr() : b.getDenseF64ArrayAttr(o.chunks);
      Type tok = o.async ? tokenType : Type();
      auto phase = PhaseAttr::get(ctx, toIR(o.phase));
      UnitAttr inter = o.interNode ? b.getUnitAttr() : UnitAttr();
      UnitAttr async = o.async ? b.getUnitAttr() : UnitAttr();
      Operation *created = nullptr;
      auto make = [&](auto tag) {
        using T = decltype(tag);
        created = T::create(ib, loc, tok, src, dst, axesAttr,
                            b.getI64IntegerAttr(o.ranks),
                            b.getF64FloatAttr(o.collBytes), chunks,
                            b.getI64IntegerAttr(o.comm), phase, inter,
                            symbolArray(o.params), optI64(o.group), async);
      };
      switch (o.coll) {
      case step::CollKind::AllGather: make(AllGatherOp()); break;
      case step::CollKind::ReduceScatter: make(ReduceScatterOp()); break;
      case step::CollKind::AllReduce: make(AllReduceOp()); break;
      case step::CollKind::AllGatherV: make(AllGatherVOp()); break;
      case step::CollKind::ReduceScatterV: make(ReduceScatterVOp()); break;
      }
      created->setAttr("name", b.getStringAttr(o.name));
      if (o.async)
        tokens[i] = created->getResult(0);
      break;
    }
    case step::OpKind::Compute: {
      auto kind = symbolizeComputeKind(o.compute).value_or(ComputeKind::copy);
      FlatSymbolRefAttr unit;
      if (!o.unitName.empty())
        unit = FlatSymbolRefAttr::get(ctx, o.unitName);
      ComputeOp::create(ib, loc, ComputeKindAttr::get(ctx, kind),
                        b.getStringAttr(o.name), unit, values(o.reads),
                        values(o.writes), b.getF64FloatAttr(o.flops),
                        b.getF64FloatAttr(o.bytes),
                        PhaseAttr::get(ctx, toIR(o.phase)), optI64(o.group));
      break;
    }
    case step::OpKind::Optimizer: {
      auto kind = symbolizeOptimizerKind(o.optimizer).value_or(OptimizerKind::adamw);
      OptimizerOp::create(ib, loc, OptimizerKindAttr::get(ctx, kind),
                          b.getStringAttr(o.name), values(o.reads),
                          values(o.writes), b.getF64FloatAttr(o.flops),
                          b.getF64FloatAttr(o.bytes), optI64(o.onlyRank),
                          PhaseAttr::get(ctx, toIR(o.phase)), optI64(o.group),
                          symbolArray(o.params));
      break;
    }
    }
  }
  return stepOp;
}

void mfsdp::replaceStep(StepOp op, const step::Step &s) {
  OpBuilder b(op);
  writeStep(b, op.getLoc(), s);
  op.erase();
}

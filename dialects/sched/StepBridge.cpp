//===- StepBridge.cpp - sched IR <-> step::Step ---------------------------===//
#include "dialects/sched/StepBridge.h"

#include "dialects/plan/PlanKernels.h"
#include "dialects/plan/PlanOps.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <array>
#include <cmath>

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
  llvm_unreachable("unknown sched phase");
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
  llvm_unreachable("unknown step phase");
}

/// The names an array holds: symbols (`params`) or strings (`on`).
static step::NameList names(ArrayAttr a) {
  std::vector<std::string> out;
  for (Attribute e : a)
    out.push_back(isa<FlatSymbolRefAttr>(e) ? cast<FlatSymbolRefAttr>(e).getValue().str()
                                            : cast<StringAttr>(e).getValue().str());
  return out;
}

/// The graph a step names by its mesh, if any.
static plan::GraphOp graphOf(StepOp op) {
  if (SymbolRefAttr meshRef = op.getMeshAttr())
    if (Operation *scope = op->getParentOp())
      return dyn_cast_or_null<plan::GraphOp>(
          SymbolTable::lookupSymbolIn(scope, meshRef.getRootReference()));
  return {};
}

/// The kernels of each unit of `graph` that has any (none without a graph),
/// which readStep puts on the unit's compute ops.
static llvm::StringMap<KernelList> unitKernelsOf(plan::GraphOp graph) {
  llvm::StringMap<KernelList> kernelsOf;
  if (graph)
    for (plan::UnitOp u : graph.getBody().front().getOps<plan::UnitOp>())
      if (std::vector<UnitKernel> k = plan::unitKernels(u.getCost()); !k.empty())
        kernelsOf[u.getSymName()] = std::move(k);
  return kernelsOf;
}

LogicalResult mfsdp::readStep(StepOp op, step::Step &s,
                              SmallVectorImpl<Location> *locations) {
  s = step::Step();
  if (locations)
    locations->clear();
  s.name = op.getSymName().str();
  s.world = static_cast<int64_t>(op.getWorld());
  s.tokens = static_cast<int64_t>(op.getTokens());
  s.microbatches = static_cast<int64_t>(op.getMicrobatches());
  llvm::DenseMap<Value, int64_t> bufferOf;
  llvm::DenseMap<Operation *, int64_t> indexOf;
  step::Phase phase = step::Phase::Forward;
  // The graph the step names (by its mesh): its units' kernels go onto
  // their compute ops, for the cost model's per-op roofline.
  llvm::StringMap<KernelList> kernelsOf = unitKernelsOf(graphOf(op));
  // Sized once: the side tables grow with the step.
  {
    size_t ops = 0, allocs = 0, collectives = 0;
    for (Operation &child : op.getBody().front()) {
      ++ops;
      allocs += isa<AllocOp>(child);
      collectives += isa<AllGatherOp, ReduceScatterOp, AllReduceOp,
                         AllGatherVOp, ReduceScatterVOp>(child);
    }
    s.ops.reserve(ops);
    s.buffers.reserve(allocs);
    bufferOf.reserve(allocs);
    indexOf.reserve(collectives);
    if (locations)
      locations->reserve(ops);
  }
  auto ids = [&](ValueRange values) {
    std::vector<int64_t> out;
    for (Value v : values)
      out.push_back(bufferOf.lookup(v));
    return out;
  };
  // The ops naming the same parameters or mesh axes (one uniqued array)
  // share one list.
  llvm::DenseMap<Attribute, step::NameList> listOf;
  auto namesOf = [&](ArrayAttr a) -> step::NameList {
    if (!a)
      return {};
    auto [it, inserted] = listOf.try_emplace(a);
    if (inserted)
      it->second = names(a);
    return it->second;
  };
  for (Operation &child : op.getBody().front()) {
    step::Op o;
    o.phase = phase;
    o.origin = static_cast<int64_t>(s.ops.size());
    bool ok = true;
    llvm::TypeSwitch<Operation *>(&child)
        .Case<AllocOp>([&](AllocOp a) {
          step::Buffer b;
          b.name = a.getName().str();
          b.bytes = static_cast<double>(static_cast<int64_t>(a.getBytes()));
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
          o.name = c.getName().str();
          o.meshAxes = namesOf(c.getMeshAxes());
          o.ranks = static_cast<int64_t>(c.getRanks());
          o.interNode = c.getInterNode();
          o.collBytes = static_cast<double>(static_cast<int64_t>(c.getBytes()));
          if (auto chunks = c.getChunks())
            for (int64_t chunk : *chunks)
              o.chunks.push_back(static_cast<double>(chunk));
          o.comm = static_cast<int64_t>(c.getComm());
          o.async = c.getAsync();
          o.params = namesOf(c.getParamsAttr());
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
          o.bytes = static_cast<double>(static_cast<int64_t>(c.getBytes()));
          if (auto g = c.getGroup())
            o.group = static_cast<int64_t>(*g);
          if (auto u = c.getUnitAttr()) {
            o.unitName = u.getValue().str();
            auto k = kernelsOf.find(o.unitName.str());
            if (k != kernelsOf.end() && o.compute != "copy") {
              o.kernels = k->second;
              o.kernelTokens = static_cast<double>(s.tokens);
            }
          }
          o.reads = ids(c.getReads());
          o.writes = ids(c.getWrites());
        })
        .Case<OptimizerOp>([&](OptimizerOp c) {
          o.kind = step::OpKind::Optimizer;
          o.phase = phase = toStep(c.getPhase());
          o.optimizer = stringifyOptimizerKind(c.getKind()).str();
          o.name = c.getName().str();
          o.flops = c.getFlops().convertToDouble();
          o.torchNs = c.getTorchNs();
          if (auto k = c.getNsKernels())
            o.nsKernels = static_cast<int32_t>(*k);
          o.bytes = static_cast<double>(static_cast<int64_t>(c.getBytes()));
          if (auto r = c.getOnlyRank())
            o.onlyRank = static_cast<int64_t>(*r);
          if (auto g = c.getGroup())
            o.group = static_cast<int64_t>(*g);
          o.params = namesOf(c.getParamsAttr());
          o.reads = ids(c.getReads());
          o.writes = ids(c.getWrites());
        })
        .Default([&](Operation *other) {
          other->emitOpError("is not a sched op the schedule passes know");
          ok = false;
        });
    if (!ok)
      return failure();
    // A wait names its collective by the token it returns.
    if (o.kind == step::OpKind::Collective)
      indexOf[&child] = static_cast<int64_t>(s.ops.size());
    s.ops.push_back(std::move(o));
    if (locations)
      locations->push_back(child.getLoc());
  }
  return success();
}

/// The location of op `o`: the op it was read from, else for a wait its
/// collective's (`originOf(j)`: the origin of op j, for j < `ops`), else
/// `fallback`.
static Location locationOf(const step::Op &o, int64_t ops,
                           llvm::function_ref<int64_t(int64_t)> originOf,
                           ArrayRef<Location> locations, Location fallback) {
  auto located = [&](int64_t origin) {
    return origin >= 0 && origin < static_cast<int64_t>(locations.size());
  };
  if (located(o.origin))
    return locations[o.origin];
  if (o.kind == step::OpKind::Wait && o.waitFor >= 0 && o.waitFor < ops &&
      located(originOf(o.waitFor)))
    return locations[originOf(o.waitFor)];
  return fallback;
}

/// Checks that every op of `s` can be written as a sched op: known kinds,
/// buffers and waited ops that exist. The diagnostic goes on the op's
/// location.
static LogicalResult checkWritable(const step::Step &s,
                                   ArrayRef<Location> locations,
                                   Location fallback) {
  const int64_t numBuffers = static_cast<int64_t>(s.buffers.size());
  std::vector<bool> startsAsync(s.ops.size(), false);
  for (const step::Buffer &buf : s.buffers)
    if (!(buf.bytes >= 0 && buf.bytes == std::floor(buf.bytes)))
      return emitError(fallback)
             << "buffer '" << buf.name << "' has " << buf.bytes
             << " bytes, not a whole non-negative number";
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const step::Op &o = s.ops[i];
    Location loc = locationOf(
        o, static_cast<int64_t>(s.ops.size()),
        [&](int64_t j) { return s.ops[j].origin; }, locations, fallback);
    auto bad = [&](const Twine &what) {
      return emitError(loc) << "step op " << i << " ('" << o.name << "'): "
                            << what;
    };
    auto whole = [](double v) { return v >= 0 && v == std::floor(v); };
    if (o.kind == step::OpKind::Collective) {
      if (!whole(o.collBytes))
        return bad("moves " + Twine(std::to_string(o.collBytes)) +
                   " bytes, not a whole non-negative number");
      for (double chunk : o.chunks)
        if (!whole(chunk))
          return bad("has a chunk of " + Twine(std::to_string(chunk)) +
                     " bytes, not a whole non-negative number");
    }
    for (const std::vector<int64_t> *ids : {&o.reads, &o.writes})
      for (int64_t id : *ids)
        if (id < 0 || id >= numBuffers)
          return bad("refers to buffer " + Twine(id) + " but the step has " +
                     Twine(numBuffers));
    switch (o.kind) {
    case step::OpKind::Alloc:
    case step::OpKind::Free:
      if (o.writes.size() != 1)
        return bad("an alloc or free names exactly one buffer in its writes, "
                   "got " + Twine(o.writes.size()));
      break;
    case step::OpKind::Collective:
      if (o.reads.size() != 1 || o.writes.size() != 1)
        return bad("a collective reads one buffer and writes one, got " +
                   Twine(o.reads.size()) + " and " + Twine(o.writes.size()));
      startsAsync[i] = o.async;
      break;
    case step::OpKind::Wait:
      if (o.waitFor < 0 || o.waitFor >= static_cast<int64_t>(i) ||
          !startsAsync[o.waitFor])
        return bad("waits for op " + Twine(o.waitFor) +
                   ", which is not an async collective before it");
      break;
    case step::OpKind::Compute:
      if (!symbolizeComputeKind(o.compute.str()))
        return bad("unknown compute kind '" + o.compute +
                   "'; expected forward, backward, recompute or copy");
      break;
    case step::OpKind::Optimizer:
      if (!symbolizeOptimizerKind(o.optimizer.str()))
        return bad("unknown optimizer kind '" + o.optimizer +
                   "'; expected adamw, sgd, muon, cast or accumulate");
      break;
    }
  }
  return success();
}

/// A compute or optimizer op's memory traffic, an estimate, to the byte.
static int64_t trafficBytes(double bytes) {
  return static_cast<int64_t>(std::llround(bytes));
}

/// Appends the ops of `s` to `body` (checked by checkWritable). With
/// `consumed` (`s` itself), the ops are freed chunk by chunk as they are
/// written, and `s` is left with none.
static void fillBody(Block *body, const step::Step &s,
                     ArrayRef<Location> locations, Location fallback,
                     step::Step *consumed = nullptr) {
  MLIRContext *ctx = fallback.getContext();
  OpBuilder b = OpBuilder::atBlockEnd(body);
  std::vector<Value> buffers(s.buffers.size());
  std::vector<Value> tokens(s.ops.size());
  auto values = [&](const std::vector<int64_t> &ids) {
    SmallVector<Value> out;
    for (int64_t id : ids)
      out.push_back(buffers[id]);
    return out;
  };
  // A parameter is named by the ops of its gathers, its reduction and its
  // optimizer, a unit by its forward and backward: each symbol reference
  // is made once (the context's uniquer hashes under a lock, twice a
  // reference).
  // Keyed by the references' own text (the context's, which outlives the
  // map): a million parameter names are not copied.
  llvm::DenseMap<StringRef, FlatSymbolRefAttr> symbols;
  // The graph's units already name every parameter: their references are
  // taken as they are, not made again (at 100,000 units a million lookups
  // in the context's tables of millions of attributes).
  if (auto step = dyn_cast_or_null<StepOp>(body->getParentOp()))
    if (plan::GraphOp graph = graphOf(step)) {
      size_t params = 0;
      for (plan::UnitOp u : graph.getBody().front().getOps<plan::UnitOp>())
        params += u.getParams().size();
      symbols.reserve(params);
      for (plan::UnitOp u : graph.getBody().front().getOps<plan::UnitOp>())
        for (Attribute ref : u.getParams())
          if (auto flat = dyn_cast<FlatSymbolRefAttr>(ref))
            symbols.try_emplace(flat.getValue(), flat);
    }
  auto symbol = [&](const std::string &name) {
    if (auto it = symbols.find(name); it != symbols.end())
      return it->second;
    FlatSymbolRefAttr ref = FlatSymbolRefAttr::get(ctx, name);
    symbols.try_emplace(ref.getValue(), ref);
    return ref;
  };
  // One array per list: the ops that share a list share its array. A
  // shared list is kept with it, so that its address names it while ops
  // are released; one op's own list is not (it goes with the op, and on a
  // large step most lists are one op's).
  SmallVector<Attribute> refs;
  llvm::DenseMap<const void *, std::pair<step::NameList, ArrayAttr>> arrayOf;
  auto symbolArray = [&](const step::NameList &names) -> ArrayAttr {
    if (names.empty())
      return {};
    auto make = [&] {
      refs.clear();
      for (const auto &n : names)
        refs.push_back(symbol(n));
      return b.getArrayAttr(refs);
    };
    if (!names.shared())
      return make();
    auto &[list, array] = arrayOf[&names.names()];
    if (!array) {
      list = names;
      array = make();
    }
    return array;
  };
  // Byte counts, groups and offsets repeat across ops, as do FLOP counts,
  // phases and mesh axes: each attribute is made once here too. (The maps
  // key unsigned integers, whose DenseMapInfo mixes the bits: the signed
  // one multiplies by 37 and keeps the low bits, and byte counts and
  // offsets are multiples of 256.)
  llvm::DenseMap<uint64_t, IntegerAttr> ints;
  auto i64 = [&](int64_t v) {
    if (v < 0) // (-1 and -2 are the map's empty and tombstone keys)
      return b.getI64IntegerAttr(v);
    IntegerAttr &attr = ints[static_cast<uint64_t>(v)];
    if (!attr)
      attr = b.getI64IntegerAttr(v);
    return attr;
  };
  auto optI64 = [&](int64_t v) { return v >= 0 ? i64(v) : IntegerAttr(); };
  llvm::DenseMap<uint64_t, FloatAttr> floats;
  auto f64 = [&](double v) {
    if (std::isnan(v))
      return b.getF64FloatAttr(v);
    FloatAttr &attr = floats[llvm::bit_cast<uint64_t>(v)];
    if (!attr)
      attr = b.getF64FloatAttr(v);
    return attr;
  };
  std::array<PhaseAttr, 4> phases{};
  auto phaseAttr = [&](step::Phase ph) {
    PhaseAttr &attr = phases.at(static_cast<size_t>(ph));
    if (!attr)
      attr = PhaseAttr::get(ctx, toIR(ph));
    return attr;
  };
  std::vector<std::string> lastAxes; // (a copy: ops are released as written)
  ArrayAttr axesAttr;
  Type bufferType = BufferType::get(ctx);
  Type tokenType = TokenType::get(ctx);
  // Each op's origin as it is written: a wait takes its collective's
  // location, and the collective (before it) may be freed by then.
  std::vector<int64_t> origins(s.ops.size(), -1);
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const step::Op &o = s.ops[i];
    origins[i] = o.origin;
    Location loc = locationOf(
        o, static_cast<int64_t>(i), [&](int64_t j) { return origins[j]; }, locations,
        fallback);
    switch (o.kind) {
    case step::OpKind::Alloc: {
      int64_t id = o.writes.front();
      const step::Buffer &buf = s.buffers[id];
      buffers[id] = AllocOp::create(b, loc, bufferType, buf.name,
                                    i64(static_cast<int64_t>(buf.bytes)),
                                    buf.persistent ? b.getUnitAttr() : UnitAttr(),
                                    optI64(buf.onlyRank), optI64(buf.offset));
      break;
    }
    case step::OpKind::Free:
      DeallocOp::create(b, loc, buffers[o.writes.front()]);
      break;
    case step::OpKind::Wait:
      WaitOp::create(b, loc, tokens[o.waitFor]);
      break;
    case step::OpKind::Collective: {
      Value src = buffers[o.reads.front()], dst = buffers[o.writes.front()];
      if (!axesAttr || lastAxes != o.meshAxes.names()) {
        SmallVector<StringRef> axes(o.meshAxes.begin(), o.meshAxes.end());
        axesAttr = b.getStrArrayAttr(axes);
        lastAxes = o.meshAxes.names();
      }
      DenseI64ArrayAttr chunks;
      if (!o.chunks.empty()) {
        SmallVector<int64_t> whole;
        for (double chunk : o.chunks)
          whole.push_back(static_cast<int64_t>(chunk));
        chunks = b.getDenseI64ArrayAttr(whole);
      }
      Type tok = o.async ? tokenType : Type();
      PhaseAttr phase = phaseAttr(o.phase);
      UnitAttr inter = o.interNode ? b.getUnitAttr() : UnitAttr();
      UnitAttr async = o.async ? b.getUnitAttr() : UnitAttr();
      Operation *created = nullptr;
      auto make = [&](auto tag) {
        using T = decltype(tag);
        created = T::create(b, loc, tok, o.name, src, dst,
                            axesAttr, i64(o.ranks),
                            i64(static_cast<int64_t>(o.collBytes)), chunks,
                            i64(o.comm), phase, inter,
                            symbolArray(o.params), optI64(o.group), async);
      };
      switch (o.coll) {
      case step::CollKind::AllGather: make(AllGatherOp()); break;
      case step::CollKind::ReduceScatter: make(ReduceScatterOp()); break;
      case step::CollKind::AllReduce: make(AllReduceOp()); break;
      case step::CollKind::AllGatherV: make(AllGatherVOp()); break;
      case step::CollKind::ReduceScatterV: make(ReduceScatterVOp()); break;
      }
      if (o.async)
        tokens[i] = created->getResult(0);
      break;
    }
    case step::OpKind::Compute: {
      FlatSymbolRefAttr unit;
      if (!o.unitName.empty())
        unit = symbol(o.unitName);
      ComputeOp::create(b, loc, ComputeKindAttr::get(ctx, *symbolizeComputeKind(o.compute.str())),
                        o.name, unit, values(o.reads),
                        values(o.writes), f64(o.flops), i64(trafficBytes(o.bytes)),
                        phaseAttr(o.phase), optI64(o.group));
      break;
    }
    case step::OpKind::Optimizer: {
      OptimizerOp::create(b, loc,
                          OptimizerKindAttr::get(ctx, *symbolizeOptimizerKind(o.optimizer.str())),
                          o.name, values(o.reads),
                          values(o.writes), f64(o.flops), o.torchNs,
                          i64(trafficBytes(o.bytes)),
                          optI64(o.onlyRank), phaseAttr(o.phase), optI64(o.group),
                          symbolArray(o.params), o.nsKernels > 0 ? optI64(o.nsKernels) : nullptr);
      break;
    }
    }
    if (consumed)
      consumed->ops.releaseBefore(i + 1);
  }
  if (consumed)
    consumed->ops.clear();
}

static FailureOr<StepOp> write(OpBuilder &b, Location loc, const step::Step &s,
                               ArrayRef<Location> locations,
                               step::Step *consumed) {
  if (failed(checkWritable(s, locations, loc)))
    return failure();
  auto stepOp = StepOp::create(b, loc, b.getStringAttr(s.name),
                               SymbolRefAttr(), b.getI64IntegerAttr(s.world),
                               b.getI64IntegerAttr(s.tokens),
                               b.getI64IntegerAttr(s.microbatches),
                               ReduceDTypeAttr(), NsPrecisionAttr(), IntegerAttr(),
                               DenseI64ArrayAttr(), DenseI64ArrayAttr(),
                               DenseI64ArrayAttr(), IntegerAttr(), UnitAttr(),
                               DenseI64ArrayAttr(), DenseI64ArrayAttr());
  Block *body = new Block();
  stepOp.getBody().push_back(body);
  fillBody(body, s, locations, loc, consumed);
  return stepOp;
}

FailureOr<StepOp> mfsdp::writeStep(OpBuilder &b, Location loc,
                                   const step::Step &s,
                                   ArrayRef<Location> locations) {
  return write(b, loc, s, locations, nullptr);
}

FailureOr<StepOp> mfsdp::writeStep(OpBuilder &b, Location loc, step::Step &&s,
                                   ArrayRef<Location> locations) {
  return write(b, loc, s, locations, &s);
}

static LogicalResult rewrite(StepOp op, const step::Step &s,
                             ArrayRef<Location> locations,
                             step::Step *consumed) {
  if (failed(checkWritable(s, locations, op.getLoc())))
    return failure();
  Builder b(op.getContext());
  op.setWorldAttr(b.getI64IntegerAttr(s.world));
  op.setTokensAttr(b.getI64IntegerAttr(s.tokens));
  op.setMicrobatchesAttr(b.getI64IntegerAttr(s.microbatches));
  op.removeArenaBytesAttr();
  op.removePeakBytesAttr();
  Block &body = op.getBody().front();
  body.clear();
  fillBody(&body, s, locations, op.getLoc(), consumed);
  return success();
}

LogicalResult mfsdp::rewriteStep(StepOp op, const step::Step &s,
                                 ArrayRef<Location> locations) {
  return rewrite(op, s, locations, nullptr);
}

LogicalResult mfsdp::rewriteStep(StepOp op, step::Step &&s,
                                 ArrayRef<Location> locations) {
  return rewrite(op, s, locations, &s);
}

LogicalResult mfsdp::asWritten(step::Step &s, plan::GraphOp graph, Location loc) {
  // What writeStep would refuse, it refuses alike.
  if (failed(checkWritable(s, {}, loc)))
    return failure();
  // What readStep takes from each op, field by field, as writeStep writes
  // it: buffers in the order of their allocs, an alloc, free or wait in the
  // phase of the op before it, byte counts as the integers written, the
  // unit's kernels from the graph.
  llvm::StringMap<KernelList> kernelsOf = unitKernelsOf(graph);
  std::vector<int64_t> renumber(s.buffers.size(), -1);
  std::vector<step::Buffer> buffers;
  buffers.reserve(s.buffers.size());
  auto ids = [&](const std::vector<int64_t> &in) {
    std::vector<int64_t> out;
    out.reserve(in.size());
    for (int64_t id : in)
      out.push_back(id >= 0 && id < static_cast<int64_t>(renumber.size()) ? renumber[id]
                                                                         : -1);
    return out;
  };
  auto nonNegative = [](int64_t v) { return v >= 0 ? v : -1; };
  step::Phase phase = step::Phase::Forward;
  for (size_t i = 0; i < s.ops.size(); ++i) {
    step::Op &in = s.ops[i];
    step::Op o;
    o.kind = in.kind;
    o.phase = phase;
    o.origin = static_cast<int64_t>(i);
    switch (in.kind) {
    case step::OpKind::Alloc: {
      const step::Buffer &from = s.buffers[in.writes.front()];
      step::Buffer b;
      b.name = from.name;
      b.bytes = static_cast<double>(static_cast<int64_t>(from.bytes));
      b.persistent = from.persistent;
      b.onlyRank = nonNegative(from.onlyRank);
      b.offset = nonNegative(from.offset);
      renumber[in.writes.front()] = static_cast<int64_t>(buffers.size());
      buffers.push_back(b);
      o.name = "alloc " + b.name;
      o.onlyRank = b.onlyRank;
      o.writes = {renumber[in.writes.front()]};
      break;
    }
    case step::OpKind::Free:
      o.writes = ids(in.writes);
      o.name = "free " + buffers[o.writes.front()].name;
      break;
    case step::OpKind::Wait:
      o.waitFor = in.waitFor;
      o.name = "wait";
      break;
    case step::OpKind::Collective:
      o.phase = phase = in.phase;
      o.coll = in.coll;
      o.name = std::move(in.name);
      o.meshAxes = std::move(in.meshAxes);
      o.ranks = in.ranks;
      o.interNode = in.interNode;
      o.collBytes = static_cast<double>(static_cast<int64_t>(in.collBytes));
      // (Whole bytes already: checkWritable refuses any other.) Moved, so
      // that the ops sharing a list still share it.
      o.chunks = std::move(in.chunks);
      o.comm = in.comm;
      o.async = in.async;
      o.params = std::move(in.params);
      o.group = nonNegative(in.group);
      o.reads = ids(in.reads);
      o.writes = ids(in.writes);
      break;
    case step::OpKind::Compute: {
      o.phase = phase = in.phase;
      o.compute = std::move(in.compute);
      o.name = std::move(in.name);
      o.flops = in.flops;
      o.bytes = static_cast<double>(trafficBytes(in.bytes));
      o.group = nonNegative(in.group);
      if (!in.unitName.empty()) {
        o.unitName = std::move(in.unitName);
        auto k = kernelsOf.find(o.unitName.str());
        if (k != kernelsOf.end() && o.compute != "copy") {
          o.kernels = k->second;
          o.kernelTokens = static_cast<double>(s.tokens);
        }
      }
      o.reads = ids(in.reads);
      o.writes = ids(in.writes);
      break;
    }
    case step::OpKind::Optimizer:
      o.phase = phase = in.phase;
      o.optimizer = std::move(in.optimizer);
      o.name = std::move(in.name);
      o.flops = in.flops;
      o.torchNs = in.torchNs;
      o.nsKernels = in.nsKernels;
      o.bytes = static_cast<double>(trafficBytes(in.bytes));
      o.onlyRank = nonNegative(in.onlyRank);
      o.group = nonNegative(in.group);
      o.params = std::move(in.params);
      o.reads = ids(in.reads);
      o.writes = ids(in.writes);
      break;
    }
    in = std::move(o);
  }
  s.buffers = std::move(buffers);
  return success();
}

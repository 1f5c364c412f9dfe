//===- PlanOps.cpp - Verifiers and helpers of the plan ops ----------------===//
#include "dialects/plan/PlanOps.h"
#include "dialects/FastText.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

#include <cstring>

using namespace mlir;
using namespace mfsdp::plan;

//===----------------------------------------------------------------------===//
// custom<MeshDims>: ["dp_shard" = 4, "tp" = 2]
//===----------------------------------------------------------------------===//

static ParseResult parseMeshDims(OpAsmParser &parser, ArrayAttr &names,
                                 DenseI64ArrayAttr &sizes) {
  SmallVector<Attribute> nameAttrs;
  SmallVector<int64_t> sizeValues;
  auto parseOne = [&]() -> ParseResult {
    std::string name;
    int64_t size = 0;
    if (parser.parseString(&name) || parser.parseEqual() ||
        parser.parseInteger(size))
      return failure();
    nameAttrs.push_back(parser.getBuilder().getStringAttr(name));
    sizeValues.push_back(size);
    return success();
  };
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseOne))
    return failure();
  names = parser.getBuilder().getArrayAttr(nameAttrs);
  sizes = parser.getBuilder().getDenseI64ArrayAttr(sizeValues);
  return success();
}

static void printMeshDims(OpAsmPrinter &p, Operation *, ArrayAttr names,
                          DenseI64ArrayAttr sizes) {
  p << "[";
  for (auto [i, name] : llvm::enumerate(names)) {
    if (i)
      p << ", ";
    p << name << " = ";
    if (i < static_cast<size_t>(sizes.size()))
      p << sizes[i];
  }
  p << "]";
}

#define GET_OP_CLASSES
// The placement and optimizer of a parameter: parsed as any attribute,
// printed from the dialect's text of it (PlanDialect::printCachedAttr).
static ParseResult parseCachedAttr(OpAsmParser &parser, Attribute &attr) {
  return parser.parseAttribute(attr);
}
static void printCachedAttr(OpAsmPrinter &printer, Operation *op, Attribute attr) {
  cast<PlanDialect>(op->getDialect())->printCachedAttr(printer.getStream(), attr);
}

#include "dialects/plan/PlanOps.cpp.inc"

//===----------------------------------------------------------------------===//
// MeshOp
//===----------------------------------------------------------------------===//

std::optional<int64_t> MeshOp::getDimSize(StringRef name) {
  for (auto [n, s] : llvm::zip(getDimNames(), getDimSizes()))
    if (cast<StringAttr>(n).getValue() == name)
      return s;
  return std::nullopt;
}

int64_t MeshOp::getWorldSize() {
  int64_t n = 1;
  for (int64_t s : getDimSizes())
    n *= s;
  return n;
}

LogicalResult MeshOp::verify() {
  ArrayAttr names = getDimNames();
  ArrayRef<int64_t> sizes = getDimSizes();
  if (names.empty())
    return emitOpError("needs at least one dim");
  if (names.size() != sizes.size())
    return emitOpError("has ") << names.size() << " dim names but "
                               << sizes.size() << " sizes";
  llvm::DenseSet<StringRef> seen;
  int64_t world = 1;
  for (auto [n, s] : llvm::zip(names, sizes)) {
    StringRef name = cast<StringAttr>(n).getValue();
    if (name.empty())
      return emitOpError("dim names must be non-empty");
    if (!seen.insert(name).second)
      return emitOpError("dim \"") << name << "\" appears twice";
    if (s < 1)
      return emitOpError("dim \"") << name << "\" must have size >= 1, got "
                                   << s;
    // The planner keeps tables per rank of a dim; no machine has more than
    // 2^20 ranks along one dim, and larger sizes only exhaust memory.
    if (s > (int64_t(1) << 20))
      return emitOpError("dim \"")
             << name << "\" has " << s
             << " ranks; a dim has at most 2^20 (1048576)";
    if (world > (int64_t(1) << 40) / s)
      return emitOpError("mesh has more than 2^40 ranks");
    world *= s;
  }
  if (!seen.contains("dp_shard"))
    return emitOpError("needs a \"dp_shard\" dim: parameters are sharded over "
                       "it");
  if (auto ids = getDeviceIds()) {
    if (static_cast<int64_t>(ids->size()) != world)
      return emitOpError("device_ids has ")
             << ids->size() << " entries, expected " << world
             << " (the product of the dim sizes)";
    std::vector<bool> used(world, false);
    for (int64_t id : *ids) {
      if (id < 0 || id >= world)
        return emitOpError("device id ")
               << id << " is outside [0, " << world << ")";
      if (used[id])
        return emitOpError("device id ") << id << " appears twice";
      used[id] = true;
    }
  }
  return success();
}

//===----------------------------------------------------------------------===//
// PolicyOp
//===----------------------------------------------------------------------===//

LogicalResult PolicyOp::verify() {
  int64_t zero = getZero();
  if (zero < 1 || zero > 3)
    return emitOpError("zero must be 1, 2 or 3, got ") << zero;
  PolicyKind kind = getKind();
  bool usesMuon = kind == PolicyKind::muon || kind == PolicyKind::mixed_muon_adamw;
  bool usesAdamW = kind == PolicyKind::adamw || kind == PolicyKind::mixed_muon_adamw;
  if (getMuonAttr() && !usesMuon)
    return emitOpError("has muon hyperparameters but policy ")
           << stringifyPolicyKind(kind) << " does not use Muon";
  if (getSgdAttr() && kind != PolicyKind::sgd)
    return emitOpError("has sgd hyperparameters but policy ")
           << stringifyPolicyKind(kind) << " does not use SGD";
  if (getAdamwAttr() && !usesAdamW && kind != PolicyKind::muon)
    return emitOpError("has adamw hyperparameters but policy ")
           << stringifyPolicyKind(kind) << " does not use AdamW";
  return success();
}

//===----------------------------------------------------------------------===//
// ParamOp
//===----------------------------------------------------------------------===//

int64_t ParamOp::getNumElements() {
  RankedTensorType t = getTensorType();
  return t ? t.getNumElements() : 0;
}

int64_t ParamOp::getNumBytes() {
  RankedTensorType t = getTensorType();
  if (!t)
    return 0;
  return t.getNumElements() *
         static_cast<int64_t>(t.getElementTypeBitWidth() / 8);
}

static bool isSupportedElementType(Type t) {
  return t.isF64() || t.isF32() || t.isBF16() || t.isF16() ||
         isa<Float8E4M3FNType, Float8E5M2Type>(t);
}

/// Whether any byte of `w` is below 0x20 or is 0x7F (the classic word
/// tests: a byte below n borrows into its top bit, for n <= 0x80).
static bool hasControlByte(uint64_t w) {
  constexpr uint64_t ones = ~uint64_t(0) / 255, highs = ones * 0x80;
  const uint64_t del = w ^ (ones * 0x7F);
  return (((w - ones * 0x20) & ~w) | ((del - ones) & ~del)) & highs;
}

/// A name with a control character (NUL included) prints and compares
/// unlike what it looks: two distinct names could be emitted as one C
/// string. Refused, naming the first such byte.
static LogicalResult verifyPrintableName(Operation *op, StringRef name) {
  // Every graph verification checks every name: 8 bytes at a time, then
  // byte by byte only where a control byte may be.
  size_t words = name.size() / 8;
  size_t w = 0;
  for (; w < words; ++w) {
    uint64_t word;
    std::memcpy(&word, name.data() + 8 * w, sizeof(word));
    if (hasControlByte(word))
      break;
  }
  for (size_t i = 8 * w; i < name.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7F) {
      const char hex[] = "0123456789ABCDEF";
      return op->emitOpError("name holds the control character \\x")
             << hex[c >> 4] << hex[c & 15] << " at byte " << i
             << "; names are printable text";
    }
  }
  return success();
}

LogicalResult ParamOp::verify() {
  if (failed(verifyPrintableName(*this, getSymName())))
    return failure();
  auto type = dyn_cast<RankedTensorType>(getType());
  if (!type)
    return emitOpError("type must be a ranked tensor, got ") << getType();
  if (type.getRank() == 0)
    return emitOpError("type must have at least one dimension");
  int64_t elements = 1;
  for (auto [i, d] : llvm::enumerate(type.getShape())) {
    if (ShapedType::isDynamic(d))
      return emitOpError("dimension ") << i << " must be static";
    if (d <= 0)
      return emitOpError("dimension ") << i << " must be positive, got " << d;
    if (d > MFSDP_MAX_PARAM_ELEMENTS / elements)
      return emitOpError("has more than 2^40 (")
             << MFSDP_MAX_PARAM_ELEMENTS
             << ") elements; a parameter has at most that many";
    elements *= d;
  }
  if (!isSupportedElementType(type.getElementType()))
    return emitOpError("element type must be one of f64, f32, bf16, f16, "
                       "f8E4M3FN, f8E5M2, got ")
           << type.getElementType();
  if (getTiedTo() && getPlacementAttr())
    return emitOpError("is tied to ")
           << getTiedToAttr()
           << " and has no storage of its own; it cannot have a placement";
  if (auto muon = dyn_cast_or_null<MuonAttr>(getOptimizerAttr())) {
    if (type.getRank() != 2)
      return emitOpError("Muon needs a 2-D matrix, but this parameter has rank ")
             << type.getRank() << "; use AdamW for it";
    if (isa_and_nonnull<BlockShardAttr, RowShardAttr>(getPlacementAttr()))
      return emitOpError("Muon needs the whole matrix on one rank; a ")
             << (isa<BlockShardAttr>(getPlacementAttr()) ? "block_shard"
                                                         : "row_shard")
             << " placement splits it (use #plan.owner)";
  }
  if (isExternal() && getOptimizerAttr())
    return emitOpError("is external (owned by ")
           << cast<ExternalAttr>(getPlacementAttr()).getAxes()
           << "); mfsdp does not run its optimizer";
  return success();
}

//===----------------------------------------------------------------------===//
// UnitOp
//===----------------------------------------------------------------------===//

LogicalResult UnitOp::verify() {
  if (failed(verifyPrintableName(*this, getSymName())))
    return failure();
  if (static_cast<int64_t>(getIndex()) < 0)
    return emitOpError("index must be non-negative, got ")
           << static_cast<int64_t>(getIndex());
  if (getParams().empty())
    return emitOpError("needs at least one parameter");
  llvm::DenseSet<Attribute> seen;
  for (Attribute p : getParams())
    if (!seen.insert(p).second)
      return emitOpError("lists parameter ") << p << " twice";
  return success();
}

//===----------------------------------------------------------------------===//
// GraphOp
//===----------------------------------------------------------------------===//

/// I64Attr getters are unsigned; indices are signed.
static int64_t unitIndex(UnitOp u) { return static_cast<int64_t>(u.getIndex()); }

void GraphOp::build(OpBuilder &builder, OperationState &state, StringRef name,
                    int64_t seqLen) {
  state.addAttribute(getSymNameAttrName(state.name),
                     builder.getStringAttr(name));
  state.addAttribute(getSeqLenAttrName(state.name),
                     builder.getI64IntegerAttr(seqLen));
  Region *body = state.addRegion();
  body->push_back(new Block());
}

MeshOp GraphOp::getMesh() {
  for (Operation &op : getBody().front())
    if (auto mesh = dyn_cast<MeshOp>(op))
      return mesh;
  return {};
}

PolicyOp GraphOp::getPolicy() {
  for (Operation &op : getBody().front())
    if (auto policy = dyn_cast<PolicyOp>(op))
      return policy;
  return {};
}

/// Checks the mesh axes a placement names: they exist and are data-parallel.
/// Returns the product of their sizes (the group size) through `group`.
static LogicalResult verifyPlacementAxes(ParamOp param, MeshOp mesh,
                                         ArrayAttr axes, StringRef what,
                                         int64_t &group) {
  group = 1;
  if (!mesh)
    return param.emitOpError("has a ")
           << what << " placement but the graph has no plan.mesh";
  for (Attribute a : axes) {
    StringRef name = cast<StringAttr>(a).getValue();
    std::optional<int64_t> size = mesh.getDimSize(name);
    if (!size)
      return param.emitOpError(what)
             << " axis \"" << name << "\" is not a dim of mesh @"
             << mesh.getSymName();
    if (name != "dp_shard" && name != "dp_replicate")
      return param.emitOpError(what)
             << " axis \"" << name
             << "\" is not a data-parallel dim (dp_shard or dp_replicate)";
    group *= *size;
  }
  return success();
}

static LogicalResult verifyPlacement(ParamOp param, MeshOp mesh) {
  Attribute placement = param.getPlacementAttr();
  if (!placement)
    return success();
  RankedTensorType type = param.getTensorType();
  int64_t group = 1;
  if (auto row = dyn_cast<RowShardAttr>(placement)) {
    if (row.getDim() >= type.getRank())
      return param.emitOpError("row_shard dim ")
             << row.getDim() << " is out of range for a rank-"
             << type.getRank() << " tensor";
    return verifyPlacementAxes(param, mesh, row.getAxes(), "row_shard", group);
  }
  if (auto block = dyn_cast<BlockShardAttr>(placement)) {
    ArrayRef<int64_t> extents = block.getBlock();
    if (static_cast<int64_t>(extents.size()) != type.getRank())
      return param.emitOpError("block_shard has ")
             << extents.size() << " block extents for a rank-"
             << type.getRank() << " tensor";
    for (auto [i, e] : llvm::enumerate(extents))
      if (type.getDimSize(i) % e != 0)
        return param.emitOpError("block extent ")
               << e << " does not tile dimension " << i << " of size "
               << type.getDimSize(i);
    return verifyPlacementAxes(param, mesh, block.getAxes(), "block_shard",
                               group);
  }
  if (auto owner = dyn_cast<OwnerAttr>(placement)) {
    if (failed(verifyPlacementAxes(param, mesh, owner.getAxes(), "owner",
                                   group)))
      return failure();
    if (owner.getRank() >= group)
      return param.emitOpError("owner rank ")
             << owner.getRank() << " is outside the mesh: its group "
             << owner.getAxes() << " has " << group << " ranks";
    return success();
  }
  if (auto ext = dyn_cast<ExternalAttr>(placement)) {
    if (!mesh)
      return success(); // A graph without a mesh may still name its owners.
    for (Attribute a : ext.getAxes()) {
      StringRef name = cast<StringAttr>(a).getValue();
      if (!mesh.getDimSize(name))
        return param.emitOpError("owning dim \"")
               << name << "\" is not a dim of mesh @" << mesh.getSymName();
    }
  }
  return success();
}

GraphSizes mfsdp::plan::graphSizes(GraphOp graph) {
  GraphSizes sizes;
  for (Operation &op : graph.getBody().front()) {
    sizes.params += isa<ParamOp>(op);
    sizes.units += isa<UnitOp>(op);
  }
  return sizes;
}

LogicalResult GraphOp::verifyRegions() {
  if (getSeqLen() > static_cast<uint64_t>(MFSDP_MAX_TOKENS))
    return emitOpError("seq_len ")
           << getSeqLen() << " is over the limit of " << MFSDP_MAX_TOKENS
           << " tokens";
  Block &body = getBody().front();
  MeshOp mesh;
  PolicyOp policy;
  // Keyed by the uniqued name attributes: a pointer hash, not a string's.
  // Each parameter with the unit that lists it (none yet).
  struct Listed {
    ParamOp param;
    UnitOp unit;
  };
  llvm::DenseMap<StringAttr, Listed> params;
  SmallVector<ParamOp> paramList; // op order, for deterministic diagnostics
  SmallVector<UnitOp> units;
  const GraphSizes sizes = graphSizes(*this);
  params.reserve(sizes.params);
  paramList.reserve(sizes.params);
  units.reserve(sizes.units);
  for (Operation &op : body) {
    if (auto m = dyn_cast<MeshOp>(op)) {
      if (mesh)
        return m.emitOpError("is the second mesh of graph @")
               << getSymName() << "; a graph has at most one";
      mesh = m;
    } else if (auto p = dyn_cast<PolicyOp>(op)) {
      if (policy)
        return p.emitOpError("is the second policy of graph @")
               << getSymName() << "; a graph has at most one";
      policy = p;
    } else if (auto p = dyn_cast<ParamOp>(op)) {
      params[p.getSymNameAttr()] = {p, UnitOp()};
      paramList.push_back(p);
    } else if (auto u = dyn_cast<UnitOp>(op)) {
      units.push_back(u);
    } else {
      return op.emitOpError("is not allowed in a plan.graph; expected "
                            "plan.mesh, plan.policy, plan.param or plan.unit");
    }
  }

  // Ties: an untied target of the same type.
  for (ParamOp p : paramList) {
    FlatSymbolRefAttr tied = p.getTiedToAttr();
    if (!tied)
      continue;
    auto it = params.find(tied.getAttr());
    if (it == params.end())
      return p.emitOpError("is tied to unknown parameter ") << tied;
    ParamOp target = it->second.param;
    if (target == p)
      return p.emitOpError("cannot be tied to itself");
    if (target.getTiedTo())
      return p.emitOpError("is tied to ")
             << tied << ", which is itself tied to " << target.getTiedToAttr()
             << "; tie to the parameter that holds the storage";
    if (target.getType() != p.getType())
      return p.emitOpError("has type ")
             << p.getType() << " but is tied to " << tied << " of type "
             << target.getType();
  }

  // Units: indices 0..N-1, each untied parameter in exactly one unit. Each
  // unit goes to its index's place: the units in index order, no sort.
  const int64_t numUnits = static_cast<int64_t>(units.size());
  SmallVector<UnitOp> ordered(units.size());
  for (UnitOp u : units) {
    // Checked before it is a map key: the largest int64 is the map's empty
    // key, and an index past the count leaves a gap anyway.
    if (unitIndex(u) < 0 || unitIndex(u) >= numUnits)
      return u.emitOpError("has index ")
             << unitIndex(u) << " but the graph has " << numUnits
             << " unit" << (numUnits == 1 ? "" : "s")
             << "; unit indices must be 0.." << numUnits - 1 << " without gaps";
    UnitOp &place = ordered[static_cast<size_t>(unitIndex(u))];
    if (place)
      return u.emitOpError("index ")
             << unitIndex(u) << " is already used by unit @" << place.getSymName();
    place = u;
    for (Attribute a : u.getParams()) {
      StringAttr name = cast<FlatSymbolRefAttr>(a).getAttr();
      auto pit = params.find(name);
      if (pit == params.end())
        return u.emitOpError("refers to unknown parameter @") << name.getValue();
      ParamOp listed = pit->second.param;
      if (listed.getTiedTo())
        return u.emitOpError("lists @")
               << name.getValue() << ", which is tied to " << listed.getTiedToAttr()
               << " and has no storage of its own";
      if (UnitOp already = pit->second.unit)
        return u.emitOpError("lists parameter @")
               << name.getValue() << ", which is already in unit @"
               << already.getSymName();
      pit->second.unit = u;
    }
  }
  // Indices in 0..N-1 and unique: no gaps either.

  // Gather groups: all units or none, numbered 0.. without gaps and
  // non-decreasing in unit order (a group is a run of adjacent units).
  int64_t grouped = llvm::count_if(ordered, [](UnitOp u) { return bool(u.getGroupAttr()); });
  if (grouped != 0 && grouped != static_cast<int64_t>(ordered.size())) {
    UnitOp missing = *llvm::find_if(ordered, [](UnitOp u) { return !u.getGroupAttr(); });
    return missing.emitOpError("has no gather group while other units of the "
                               "graph have one; group every unit or none");
  }
  if (grouped) {
    int64_t expect = 0;
    for (auto [i, u] : llvm::enumerate(ordered)) {
      int64_t g = static_cast<int64_t>(*u.getGroup());
      if (i == 0 ? g != 0 : (g != expect && g != expect + 1))
        return u.emitOpError("has gather group ")
               << g << " but groups must run 0, 1, 2, ... over adjacent units "
               << "(expected " << (i == 0 ? 0 : expect) << " or "
               << (i == 0 ? 0 : expect + 1) << ")";
      expect = g;
    }
  }

  for (ParamOp p : paramList) {
    if (!p.getTiedTo() && !params.lookup(p.getSymNameAttr()).unit)
      return p.emitOpError("is in no unit; every parameter that is not tied "
                           "belongs to exactly one unit");
    if (failed(verifyPlacement(p, mesh)))
      return failure();
  }
  return success();
}

//===- PlanImport.cpp - Model graphs to and from the plan dialect ---------===//
#include "mfsdp/import/PlanImport.h"

#include "dialects/plan/PlanKernels.h"

#include "dialects/plan/PlanOps.h"
#include "mfsdp/graph/HFConfig.h"
#include "mfsdp/graph/TextLimits.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"

using namespace mlir;
using namespace mfsdp;
using namespace mfsdp::plan;

static Type elementType(MLIRContext *ctx, graph::DType t) {
  switch (t) {
  case graph::DType::F64:
    return Float64Type::get(ctx);
  case graph::DType::F32:
    return Float32Type::get(ctx);
  case graph::DType::BF16:
    return BFloat16Type::get(ctx);
  case graph::DType::F16:
    return Float16Type::get(ctx);
  case graph::DType::F8E4M3:
    return Float8E4M3FNType::get(ctx);
  case graph::DType::F8E5M2:
    return Float8E5M2Type::get(ctx);
  }
  return {};
}

static std::optional<graph::DType> graphDType(Type t) {
  if (t.isF64())
    return graph::DType::F64;
  if (t.isF32())
    return graph::DType::F32;
  if (t.isBF16())
    return graph::DType::BF16;
  if (t.isF16())
    return graph::DType::F16;
  if (isa<Float8E4M3FNType>(t))
    return graph::DType::F8E4M3;
  if (isa<Float8E5M2Type>(t))
    return graph::DType::F8E5M2;
  return std::nullopt;
}


static ArrayAttr stringArray(Builder &b, const std::vector<std::string> &v) {
  SmallVector<Attribute> attrs;
  for (const auto &s : v)
    attrs.push_back(b.getStringAttr(s));
  return b.getArrayAttr(attrs);
}

OwningOpRef<ModuleOp> mfsdp::importGraph(const graph::Graph &g,
                                         MLIRContext *ctx, StringRef file,
                                         StringRef text) {
  ctx->loadDialect<PlanDialect>();
  // Ops point at their JSON value: "/params/3", "/units/0", "/mesh".
  auto where = file.empty() ? decltype(graph::indexPointers("", 0))()
                            : graph::indexPointers(
                                  std::string_view(text.data(), text.size()), 2);
  auto locOf = [&](const std::string &pointer) -> Location {
    if (file.empty())
      return UnknownLoc::get(ctx);
    auto it = where.find(pointer);
    if (it == where.end())
      return FileLineColLoc::get(ctx, file, 0, 0);
    return FileLineColLoc::get(ctx, file, it->second.first, it->second.second);
  };
  OpBuilder b(ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(locOf(""));
  b.setInsertionPointToEnd(module->getBody());
  auto graphOp = GraphOp::create(b, locOf(""), g.model, g.seqLen);
  b.setInsertionPointToEnd(&graphOp.getBody().front());

  if (g.mesh) {
    SmallVector<Attribute> names;
    SmallVector<int64_t> sizes;
    for (const auto &d : g.mesh->dims) {
      names.push_back(b.getStringAttr(d.name));
      sizes.push_back(d.size);
    }
    DenseI64ArrayAttr ids;
    if (!g.mesh->deviceIds.empty())
      ids = b.getDenseI64ArrayAttr(g.mesh->deviceIds);
    MeshOp::create(b, locOf("/mesh"), "mesh", b.getArrayAttr(names),
                   b.getDenseI64ArrayAttr(sizes), ids);
  }
  if (g.policy) {
    const graph::Policy &p = *g.policy;
    AdamWAttr adamw;
    SGDAttr sgd;
    MuonAttr muon;
    if (p.adamw)
      adamw = AdamWAttr::get(ctx, p.adamw->lr, p.adamw->beta1, p.adamw->beta2,
                             p.adamw->eps, p.adamw->weightDecay);
    if (p.sgd)
      sgd = SGDAttr::get(ctx, p.sgd->lr, p.sgd->momentum, p.sgd->weightDecay,
                         p.sgd->nesterov);
    if (p.muon)
      muon = MuonAttr::get(ctx, p.muon->lr, p.muon->momentum,
                           p.muon->weightDecay, p.muon->nesterov,
                           p.muon->nsSteps,
                           fromVocab(p.muon->scale),
                           fromVocab(p.muon->nsPrecision));
    PolicyOp::create(
        b, locOf("/policy"),
        PolicyKindAttr::get(ctx, fromVocab(p.kind)),
        b.getI64IntegerAttr(p.zero), adamw, sgd, muon, UnitAttr(), UnitAttr());
  }
  for (size_t i = 0; i < g.params.size(); ++i) {
    const graph::Param &p = g.params[i];
    auto type = RankedTensorType::get(p.shape, elementType(ctx, p.dtype));
    FlatSymbolRefAttr tied;
    if (!p.tiedTo.empty())
      tied = FlatSymbolRefAttr::get(ctx, p.tiedTo);
    Attribute placement;
    if (!p.ownedBy.empty())
      placement = ExternalAttr::get(ctx, stringArray(b, p.ownedBy));
    ParamOp::create(b, locOf("/params/" + std::to_string(i)),
                    b.getStringAttr(p.name), TypeAttr::get(type),
                    ParamKindAttr::get(ctx, fromVocab(p.kind)),
                    p.module,
                    p.requiresGrad ? UnitAttr() : b.getUnitAttr(), tied,
                    placement, Attribute());
  }
  for (size_t i = 0; i < g.units.size(); ++i) {
    const graph::Unit &u = g.units[i];
    SmallVector<Attribute> refs;
    for (const auto &name : u.params)
      refs.push_back(FlatSymbolRefAttr::get(ctx, name));
    const graph::UnitCost &c = u.cost;
    UnitOp::create(b, locOf("/units/" + std::to_string(i)),
                   b.getStringAttr(u.name),
                   b.getI64IntegerAttr(static_cast<int64_t>(i)),
                   b.getArrayAttr(refs),
                   CostAttr::get(ctx, c.fwdFlopsPerToken, c.bwdFlopsPerToken,
                                 c.activationBytesPerToken, c.recompute,
                                 kernelsAttr(ctx, c.kernels)),
                   RowLayoutAttr(), IntegerAttr());
  }
  if (failed(verify(*module)))
    return nullptr;
  return module;
}

static std::vector<std::string> strings(ArrayAttr a) {
  std::vector<std::string> out;
  for (Attribute e : a)
    out.push_back(cast<StringAttr>(e).getValue().str());
  return out;
}

LogicalResult mfsdp::exportGraph(GraphOp op, graph::Graph &out) {
  graph::Graph g;
  g.model = op.getSymName().str();
  g.seqLen = op.getSeqLen();
  if (MeshOp mesh = op.getMesh()) {
    graph::Mesh m;
    for (auto [n, s] : llvm::zip(mesh.getDimNames(), mesh.getDimSizes()))
      m.dims.push_back({cast<StringAttr>(n).getValue().str(), s});
    if (auto ids = mesh.getDeviceIds())
      m.deviceIds.assign(ids->begin(), ids->end());
    g.mesh = m;
  }
  if (PolicyOp policy = op.getPolicy()) {
    if (policy.getNoMaster())
      return policy.emitOpError("has no_master, a planning decision the graph "
                                "format does not carry; export the graph "
                                "before planning");
    if (policy.getNsSplit())
      return policy.emitOpError("has ns_split, a planning decision the graph "
                                "format does not carry; export the graph "
                                "before planning");
    graph::Policy p;
    p.kind = toVocab(policy.getKind());
    p.zero = policy.getZero();
    if (AdamWAttr a = policy.getAdamwAttr())
      p.adamw = graph::AdamW{a.getLr(), a.getBeta1(), a.getBeta2(), a.getEps(),
                             a.getWeightDecay()};
    if (SGDAttr s = policy.getSgdAttr())
      p.sgd = graph::SGD{s.getLr(), s.getMomentum(), s.getWeightDecay(),
                         s.getNesterov()};
    if (MuonAttr m = policy.getMuonAttr())
      p.muon = graph::Muon{m.getLr(),        m.getMomentum(),
                           m.getWeightDecay(), m.getNesterov(),
                           m.getNsSteps(),
                           toVocab(m.getScale()),
                           toVocab(m.getNsPrecision())};
    g.policy = p;
  }
  for (Operation &child : op.getBody().front()) {
    if (auto p = dyn_cast<ParamOp>(child)) {
      graph::Param gp;
      gp.name = p.getSymName().str();
      RankedTensorType t = p.getTensorType();
      gp.shape.assign(t.getShape().begin(), t.getShape().end());
      std::optional<graph::DType> dt = graphDType(t.getElementType());
      if (!dt)
        return p.emitOpError("has an element type the graph format cannot "
                             "express: ")
               << t.getElementType();
      gp.dtype = *dt;
      gp.module = p.getModule().str();
      gp.kind = toVocab(p.getKind());
      gp.requiresGrad = !p.getFrozen();
      if (auto tied = p.getTiedToAttr())
        gp.tiedTo = tied.getValue().str();
      if (Attribute placement = p.getPlacementAttr()) {
        auto ext = dyn_cast<ExternalAttr>(placement);
        if (!ext)
          return p.emitOpError("has placement ")
                 << placement
                 << ", a planning decision the graph format does not carry; "
                    "export the graph before planning";
        gp.ownedBy = strings(ext.getAxes());
      }
      if (p.getOptimizerAttr())
        return p.emitOpError("has an optimizer chosen by planning, which the "
                             "graph format does not carry");
      g.params.push_back(std::move(gp));
    }
  }
  SmallVector<UnitOp> units;
  for (Operation &child : op.getBody().front())
    if (auto u = dyn_cast<UnitOp>(child))
      units.push_back(u);
  llvm::stable_sort(units, [](UnitOp a, UnitOp b) {
    return a.getIndex() < b.getIndex();
  });
  for (UnitOp u : units) {
    if (u.getRowLayoutAttr() || u.getGroupAttr())
      return u.emitOpError("has a row layout or gather group chosen by "
                           "planning, which the graph format does not carry; "
                           "export the graph before planning");
    graph::Unit gu;
    gu.name = u.getSymName().str();
    for (Attribute a : u.getParams())
      gu.params.push_back(cast<FlatSymbolRefAttr>(a).getValue().str());
    CostAttr c = u.getCost();
    gu.cost = {c.getFwdFlops(), c.getBwdFlops(), c.getActBytes(),
               c.getRecompute(), unitKernels(c)};
    g.units.push_back(std::move(gu));
  }
  out = std::move(g);
  return success();
}

GraphOp mfsdp::findSingleGraph(ModuleOp module) {
  GraphOp found;
  for (Operation &op : *module.getBody()) {
    if (auto g = dyn_cast<GraphOp>(op)) {
      if (found) {
        g.emitOpError("is a second plan.graph; expected exactly one");
        return {};
      }
      found = g;
    }
  }
  if (!found)
    module.emitError("expected a module with one plan.graph");
  return found;
}

//===----------------------------------------------------------------------===//
// Translations for mfsdp-translate
//===----------------------------------------------------------------------===//

namespace {
struct HFOptions {
  llvm::cl::opt<int64_t> seqLen{
      "hf-seq-len", llvm::cl::desc("--import-hf-config: sequence length the "
                                   "unit compute estimates assume"),
      llvm::cl::init(4096)};
  llvm::cl::opt<bool> recompute{
      "hf-recompute",
      llvm::cl::desc("--import-hf-config: units use activation checkpointing"),
      llvm::cl::init(false)};
  llvm::cl::opt<std::string> experts{
      "hf-experts-owned-by",
      llvm::cl::desc("--import-hf-config: mark routed experts as owned by "
                     "this mesh dim (for example ep)"),
      llvm::cl::init("")};
  llvm::cl::opt<std::string> dtype{
      "hf-dtype",
      llvm::cl::desc("--import-hf-config: parameter dtype (default: the "
                     "config's torch_dtype, else bf16)"),
      llvm::cl::init("")};
  llvm::cl::opt<std::string> name{
      "hf-model-name",
      llvm::cl::desc("--import-hf-config: model name (default: from config)"),
      llvm::cl::init("")};
  llvm::cl::opt<int> transformers{
      "hf-transformers",
      llvm::cl::desc("--import-hf-config: the transformers major version "
                     "whose parameters to write: 5 (MoE experts fused into "
                     "gate_up_proj/down_proj, written as their matrices) or "
                     "4 (one module per expert)"),
      llvm::cl::init(5)};
};
} // namespace

static HFOptions &hfOptions() {
  static HFOptions opts;
  return opts;
}

/// Reports a graph diagnostic at its line and column in the input buffer.
/// A source line longer than this is not echoed under a diagnostic (a
/// graph written on one line would be echoed whole).
static constexpr size_t kMaxEchoedLine = 512;

/// The length of line `line` (1-based) of `text`.
static size_t lineLength(StringRef text, int line) {
  size_t start = 0;
  for (int l = 1; l < line; ++l) {
    size_t nl = text.find('\n', start);
    if (nl == StringRef::npos)
      return 0;
    start = nl + 1;
  }
  size_t end = text.find('\n', start);
  return (end == StringRef::npos ? text.size() : end) - start;
}

void mfsdp::printErrorAt(StringRef file, int line, int column,
                         StringRef message) {
  llvm::errs() << file << ':' << line << ':' << column << ": ";
  llvm::WithColor::error(llvm::errs()) << message << '\n';
}

void mfsdp::emitErrorAt(MLIRContext *ctx, StringRef file, StringRef text,
                        int line, int column, const std::string &message) {
  if (line > 0 && lineLength(text, line) > kMaxEchoedLine) {
    printErrorAt(file, line, column, message);
    return;
  }
  emitError(FileLineColLoc::get(ctx, file, std::max(line, 0), std::max(column, 0)))
      << message;
}

/// Reports a graph diagnostic at its line and column in the input buffer.
static void emitGraphError(MLIRContext *ctx, StringRef file, StringRef text,
                           const graph::Diagnostic &d) {
  emitErrorAt(ctx, file, text, d.line, d.column,
              d.pointer.empty() ? d.message : d.pointer + ": " + d.message);
}

OwningOpRef<ModuleOp>
mfsdp::parseModule(const std::shared_ptr<llvm::SourceMgr> &sourceMgr,
                   MLIRContext *ctx) {
  const llvm::MemoryBuffer *buf =
      sourceMgr->getMemoryBuffer(sourceMgr->getMainFileID());
  if (std::optional<graph::TextProblem> p =
          graph::checkMlirNesting(std::string_view(buf->getBufferStart(),
                                                   buf->getBufferSize()))) {
    emitErrorAt(ctx, buf->getBufferIdentifier(), buf->getBuffer(), p->line,
                p->column, p->message);
    return nullptr;
  }
  return parseSourceFile<ModuleOp>(sourceMgr, ParserConfig(ctx));
}

OwningOpRef<ModuleOp> mfsdp::importGraphText(StringRef text, StringRef file,
                                             const graph::HFImportOptions *hf,
                                             MLIRContext *ctx) {
  std::string_view view(text.data(), text.size());
  graph::Graph g;
  graph::Diagnostic diag;
  bool ok;
  if (hf) {
    ok = graph::graphFromHFConfig(view, *hf, g, diag);
    if (!ok && diag.line == 0) {
      auto [line, col] = graph::locatePointer(view, diag.pointer);
      diag.line = line;
      diag.column = col;
    }
  } else {
    ok = graph::parseGraph(view, g, diag);
  }
  if (!ok) {
    emitGraphError(ctx, file, text, diag);
    return nullptr;
  }
  // Ops of an HF import point into the generated graph, not the config.
  return hf ? importGraph(g, ctx) : importGraph(g, ctx, file, text);
}

static OwningOpRef<Operation *>
importFromBuffer(llvm::SourceMgr &sourceMgr, MLIRContext *ctx, bool hf) {
  const llvm::MemoryBuffer *buf =
      sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
  graph::HFImportOptions opts;
  opts.seqLen = hfOptions().seqLen;
  opts.recompute = hfOptions().recompute;
  opts.expertsOwnedBy = hfOptions().experts;
  opts.dtype = hfOptions().dtype;
  opts.modelName = hfOptions().name;
  opts.transformersVersion = hfOptions().transformers;
  OwningOpRef<ModuleOp> module = importGraphText(
      buf->getBuffer(), buf->getBufferIdentifier(), hf ? &opts : nullptr, ctx);
  if (!module)
    return nullptr;
  return OwningOpRef<Operation *>(module.release());
}

void mfsdp::registerGraphTranslations() {
  (void)hfOptions();
  static TranslateToMLIRRegistration importGraphReg(
      "import-mfsdp-graph", "Import an exported model graph (JSON, format 1)",
      [](llvm::SourceMgr &sourceMgr, MLIRContext *ctx) {
        return importFromBuffer(sourceMgr, ctx, /*hf=*/false);
      });
  static TranslateToMLIRRegistration importHFReg(
      "import-hf-config", "Import a Hugging Face config.json as a model graph",
      [](llvm::SourceMgr &sourceMgr, MLIRContext *ctx) {
        return importFromBuffer(sourceMgr, ctx, /*hf=*/true);
      });
  static TranslateRegistration exportGraphReg(
      "export-mfsdp-graph", "Export a plan.graph as a model graph (JSON)",
      [](const std::shared_ptr<llvm::SourceMgr> &sourceMgr, raw_ostream &os,
         MLIRContext *ctx) -> LogicalResult {
        ctx->loadDialect<PlanDialect>();
        OwningOpRef<ModuleOp> module = parseModule(sourceMgr, ctx);
        if (!module)
          return failure();
        GraphOp graphOp = findSingleGraph(*module);
        if (!graphOp)
          return failure();
        graph::Graph g;
        if (failed(exportGraph(graphOp, g)))
          return failure();
        os << graph::writeGraph(g);
        return success();
      });
}

std::vector<char *> mfsdp::withToolDefaults(int argc, char **argv, bool localScope) {
  static char quiet[] = "--mlir-print-op-on-diagnostic=false";
  static char local[] = "--mlir-print-local-scope";
  std::vector<char *> args(argv, argv + argc);
  auto given = [&](StringRef option) {
    return llvm::any_of(args, [&](const char *a) {
      return StringRef(a).ltrim('-').starts_with(option);
    });
  };
  if (!given("mlir-print-op-on-diagnostic"))
    args.insert(args.begin() + 1, quiet);
  if (localScope && !given("mlir-print-local-scope") && !given("mlir-print-debuginfo"))
    args.insert(args.begin() + 1, local);
  args.push_back(nullptr);
  return args;
}

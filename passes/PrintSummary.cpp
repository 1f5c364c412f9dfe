//===- PrintSummary.cpp - mfsdp-print-summary -----------------------------===//
//
// A human-readable account of what a graph holds, so a user can check an
// import before planning.
//
//===----------------------------------------------------------------------===//
#include "dialects/plan/PlanOps.h"
#include "passes/Passes.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/ToolOutputFile.h"

namespace mfsdp {
#define GEN_PASS_DEF_PRINTSUMMARY
#include "passes/Passes.h.inc"
} // namespace mfsdp

using namespace mlir;
using namespace mfsdp;
using namespace mfsdp::plan;

namespace {

std::string human(double v, const char *unit) {
  static const char *prefixes[] = {"", "K", "M", "G", "T", "P", "E"};
  int i = 0;
  while (v >= 1000 && i < 6) {
    v /= 1000;
    ++i;
  }
  std::string out;
  llvm::raw_string_ostream os(out);
  os << llvm::format(i == 0 ? "%.0f" : "%.2f", v) << " " << prefixes[i]
     << unit;
  return out;
}

std::string bytes(double v) {
  static const char *prefixes[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int i = 0;
  while (v >= 1024 && i < 5) {
    v /= 1024;
    ++i;
  }
  std::string out;
  llvm::raw_string_ostream os(out);
  os << llvm::format(i == 0 ? "%.0f" : "%.2f", v) << " " << prefixes[i];
  return out;
}

std::string typeString(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

void summarize(GraphOp graph, raw_ostream &os) {
  os << "graph @" << graph.getSymName();
  if (graph.getSeqLen())
    os << " (seq_len " << graph.getSeqLen() << ")";
  os << "\n";
  if (MeshOp mesh = graph.getMesh()) {
    os << "  mesh: ";
    for (auto [i, n, s] : llvm::enumerate(mesh.getDimNames(),
                                          mesh.getDimSizes()))
      os << (i ? " x " : "") << cast<StringAttr>(n).getValue() << "=" << s;
    os << " (" << mesh.getWorldSize() << " ranks)\n";
  } else {
    os << "  mesh: none\n";
  }
  if (PolicyOp policy = graph.getPolicy())
    os << "  policy: " << stringifyPolicyKind(policy.getKind()) << ", ZeRO-"
       << policy.getZero() << "\n";

  struct Tally {
    int64_t count = 0, elements = 0, bytes = 0;
  };
  llvm::MapVector<StringRef, Tally> byKind;
  std::map<std::string, Tally> byDType;
  Tally total, external, tied;
  SmallVector<ParamOp> externals, tiedParams;
  for (ParamOp p : graph.getBody().front().getOps<ParamOp>()) {
    if (p.getTiedTo()) {
      tied.count++;
      tiedParams.push_back(p);
      continue; // no storage of its own
    }
    int64_t n = p.getNumElements(), b = p.getNumBytes();
    Tally &k = byKind[stringifyParamKind(p.getKind())];
    Tally &d = byDType[typeString(p.getTensorType().getElementType())];
    for (Tally *t : {&k, &d, &total}) {
      t->count++;
      t->elements += n;
      t->bytes += b;
    }
    if (p.isExternal()) {
      external.count++;
      external.elements += n;
      external.bytes += b;
      externals.push_back(p);
    }
  }
  os << "  parameters: " << total.count << " tensors, "
     << human(total.elements, "") << "elements, " << bytes(total.bytes)
     << "\n";
  os << "  by kind:\n";
  for (auto &[kind, t] : byKind)
    os << llvm::format("    %-10s %6lld tensors %14lld elements\n",
                       kind.str().c_str(), (long long)t.count,
                       (long long)t.elements);
  os << "  bytes per dtype:\n";
  for (auto &[dt, t] : byDType)
    os << llvm::format("    %-10s %6lld tensors %14lld bytes (%s)\n",
                       dt.c_str(), (long long)t.count, (long long)t.bytes,
                       bytes(t.bytes).c_str());

  SmallVector<UnitOp> units(graph.getBody().front().getOps<UnitOp>());
  llvm::stable_sort(units, [](UnitOp a, UnitOp b) {
    return a.getIndex() < b.getIndex();
  });
  double fwd = 0, bwd = 0;
  int64_t largest = 0;
  StringRef largestName;
  llvm::StringMap<int64_t> elementsOf;
  for (ParamOp p : graph.getBody().front().getOps<ParamOp>())
    elementsOf[p.getSymName()] = p.getNumElements();
  os << "  units: " << units.size() << " (forward order)\n";
  for (UnitOp u : units) {
    int64_t n = 0;
    for (Attribute a : u.getParams())
      n += elementsOf.lookup(cast<FlatSymbolRefAttr>(a).getValue());
    CostAttr c = u.getCost();
    fwd += c.getFwdFlops();
    bwd += c.getBwdFlops();
    if (n > largest) {
      largest = n;
      largestName = u.getSymName();
    }
    // Long models list their first and last units only.
    int64_t i = u.getIndex(), e = units.size();
    if (e <= 12 || i < 4 || i >= e - 4)
      os << llvm::format("    %4lld %-32s %4zu params %14lld elements  "
                         "fwd %s/token%s\n",
                         (long long)i, u.getSymName().str().c_str(),
                         u.getParams().size(), (long long)n,
                         human(c.getFwdFlops(), "FLOP").c_str(),
                         c.getRecompute() ? "  recompute" : "");
    else if (i == 4)
      os << "    ...  (" << (e - 8) << " more)\n";
  }
  if (!units.empty())
    os << "  largest unit: " << largestName << " (" << largest
       << " elements); compute per token: fwd " << human(fwd, "FLOP")
       << ", bwd " << human(bwd, "FLOP") << "\n";
  os << "  tied: " << tied.count;
  for (ParamOp p : tiedParams)
    os << (tiedParams.front() == p ? " (" : ", ") << p.getSymName() << " -> "
       << p.getTiedToAttr().getValue();
  os << (tiedParams.empty() ? "\n" : ")\n");
  os << "  external: " << external.count << " tensors, "
     << human(external.elements, "") << "elements";
  if (externals.empty()) {
    os << "\n";
    return;
  }
  // Group external parameters by owning dims; list a few names of each.
  std::map<std::string, SmallVector<ParamOp>> byOwner;
  for (ParamOp p : externals) {
    std::string key;
    for (Attribute a : cast<ExternalAttr>(p.getPlacementAttr()).getAxes())
      key += (key.empty() ? "" : ",") + cast<StringAttr>(a).getValue().str();
    byOwner[key].push_back(p);
  }
  os << "\n";
  for (auto &[owner, ps] : byOwner) {
    os << "    owned by " << owner << ": " << ps.size() << " tensors";
    for (size_t i = 0; i < ps.size() && i < 3; ++i)
      os << (i ? ", " : ": ") << ps[i].getSymName();
    if (ps.size() > 3)
      os << ", ...";
    os << "\n";
  }
}

struct PrintSummaryPass : public mfsdp::impl::PrintSummaryBase<PrintSummaryPass> {
  using Base::Base;
  void runOnOperation() override {
    std::string error;
    auto file = openOutputFile(output, &error);
    if (!file) {
      getOperation().emitError("cannot open summary output '")
          << output << "': " << error;
      return signalPassFailure();
    }
    for (GraphOp g : getOperation().getOps<GraphOp>())
      summarize(g, file->os());
    file->keep();
    markAllAnalysesPreserved();
  }
};

} // namespace

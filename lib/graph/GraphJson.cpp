//===- GraphJson.cpp - Reading and writing model graphs as JSON -----------===//
//
// nlohmann/json is used only in lib/graph and is compiled with exceptions;
// every exception is caught here and turned into a Diagnostic, so callers
// (MLIR code built with -fno-exceptions) never see one.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/graph/Graph.h"
#include "mfsdp/graph/TextLimits.h"
#include "JsonText.h"
#include "mfsdp/Vocabulary.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <tuple>

using json = nlohmann::ordered_json;

namespace mfsdp::graph {

//===----------------------------------------------------------------------===//
// JSON reading
//===----------------------------------------------------------------------===//

namespace {

/// Thrown only inside this file, caught by parseGraph.
struct ReadError {
  std::string pointer;
  std::string message;
};

std::string typeName(const json &v) { return jsonTypeName(v.type()); }

std::string show(const json &v) {
  std::string s = v.dump();
  if (s.size() > 40)
    s = s.substr(0, 37) + "...";
  return s;
}

/// A cursor on one JSON value with its pointer, for precise diagnostics.
class Reader {
public:
  Reader(const json &v, std::string ptr) : v(v), ptr(std::move(ptr)) {}

  [[noreturn]] void error(const std::string &msg) const {
    throw ReadError{ptr, msg};
  }
  const std::string &pointer() const { return ptr; }
  const json &value() const { return v; }

  void expectObject(const std::set<std::string> &allowed) const {
    if (!v.is_object())
      error("expected an object, got " + typeName(v));
    for (auto it = v.begin(); it != v.end(); ++it)
      if (!allowed.count(it.key()))
        Reader(it.value(), ptr + "/" + jsonPointerToken(it.key()))
            .error(fmt::format("unknown field '{}'; expected one of: {}",
                               brief(it.key()), join(allowed)));
  }
  bool has(const std::string &key) const {
    return v.is_object() && v.contains(key) && !v.at(key).is_null();
  }
  Reader field(const std::string &key) const {
    if (!v.is_object())
      error("expected an object, got " + typeName(v));
    auto it = v.find(key);
    if (it == v.end())
      error(fmt::format("missing required field '{}'", key));
    return Reader(*it, ptr + "/" + jsonPointerToken(key));
  }
  Reader at(size_t i) const { return Reader(v[i], fmt::format("{}/{}", ptr, i)); }
  size_t arraySize() const {
    if (!v.is_array())
      error("expected an array, got " + typeName(v));
    return v.size();
  }
  std::string str() const {
    if (!v.is_string())
      error("expected a string, got " + typeName(v) + " " + show(v));
    const std::string &s = v.get_ref<const std::string &>();
    if (s.size() > kMaxNameBytes)
      error(fmt::format("a string of {} bytes ('{}'); names and values are "
                        "at most {} bytes",
                        s.size(), brief(s, 40), kMaxNameBytes));
    for (size_t i = 0; i < s.size(); ++i) {
      unsigned char c = static_cast<unsigned char>(s[i]);
      if (c < 0x20 || c == 0x7F)
        error(fmt::format("'{}' holds the control character \\x{:02X} at "
                          "byte {}; names and values are printable text",
                          brief(s), c, i));
    }
    return s;
  }
  std::string nonEmptyStr() const {
    std::string s = str();
    if (s.empty())
      error("expected a non-empty string");
    return s;
  }
  bool boolean() const {
    if (!v.is_boolean())
      error("expected true or false, got " + typeName(v) + " " + show(v));
    return v.get<bool>();
  }
  int64_t integer() const {
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > (uint64_t)std::numeric_limits<int64_t>::max())
        error("integer " + show(v) + " is too large");
      return (int64_t)v.get<uint64_t>();
    }
    if (v.is_number_integer())
      return v.get<int64_t>();
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (std::floor(d) == d && std::fabs(d) < 9.0e15)
        return (int64_t)d;
    }
    error("expected an integer, got " + typeName(v) + " " + show(v));
  }
  double number() const {
    if (!v.is_number())
      error("expected a number, got " + typeName(v) + " " + show(v));
    double d = v.get<double>();
    if (!std::isfinite(d))
      error("expected a finite number");
    return d;
  }

private:
  static std::string join(const std::set<std::string> &s) {
    std::string out;
    for (const auto &e : s)
      out += (out.empty() ? "" : ", ") + e;
    return out;
  }
  const json &v;
  std::string ptr;
};

Param readParam(const Reader &r) {
  r.expectObject({"name", "shape", "dtype", "module", "kind", "requires_grad",
                  "tied_to", "owned_by"});
  Param p;
  p.name = r.field("name").nonEmptyStr();
  Reader shape = r.field("shape");
  size_t rank = shape.arraySize();
  if (rank == 0)
    shape.error("expected at least one dimension");
  for (size_t i = 0; i < rank; ++i) {
    Reader dim = shape.at(i);
    int64_t n = dim.integer();
    if (n <= 0)
      dim.error(fmt::format("expected a positive dimension, got {}", n));
    p.shape.push_back(n);
  }
  for (size_t i = 1, n = 1; i <= rank; ++i) {
    if (p.shape[i - 1] > MFSDP_MAX_PARAM_ELEMENTS / (int64_t)n)
      shape.error(fmt::format("more than 2^40 ({}) elements; a parameter has "
                              "at most that many",
                              MFSDP_MAX_PARAM_ELEMENTS));
    n *= p.shape[i - 1];
  }
  Reader dt = r.field("dtype");
  std::string dts = dt.str();
  auto dtype = parseEnum<DType>(dts);
  if (!dtype)
    dt.error(fmt::format("unknown dtype '{}'; expected one of: {}", dts,
                         enumSpellings<DType>(", ")));
  p.dtype = *dtype;
  p.module = r.field("module").str();
  Reader kr = r.field("kind");
  std::string ks = kr.str();
  auto kind = parseEnum<ModuleKind>(ks);
  if (!kind)
    kr.error(fmt::format("unknown module kind '{}'; expected one of: {}", ks,
                         enumSpellings<ModuleKind>(", ")));
  p.kind = *kind;
  if (r.has("requires_grad"))
    p.requiresGrad = r.field("requires_grad").boolean();
  if (r.has("tied_to"))
    p.tiedTo = r.field("tied_to").nonEmptyStr();
  if (r.has("owned_by")) {
    Reader ob = r.field("owned_by");
    size_t n = ob.arraySize();
    for (size_t i = 0; i < n; ++i)
      p.ownedBy.push_back(ob.at(i).nonEmptyStr());
  }
  return p;
}

Unit readUnit(const Reader &r) {
  r.expectObject({"name", "params", "cost"});
  Unit u;
  u.name = r.field("name").nonEmptyStr();
  Reader ps = r.field("params");
  size_t n = ps.arraySize();
  for (size_t i = 0; i < n; ++i)
    u.params.push_back(ps.at(i).nonEmptyStr());
  if (r.has("cost")) {
    Reader c = r.field("cost");
    c.expectObject({"fwd_flops_per_token", "bwd_flops_per_token",
                    "activation_bytes_per_token", "recompute", "kernels"});
    auto nonneg = [&](const char *key, double &out) {
      if (!c.has(key))
        return;
      Reader f = c.field(key);
      out = f.number();
      if (out < 0)
        f.error(fmt::format("expected a non-negative number, got {}", out));
    };
    nonneg("fwd_flops_per_token", u.cost.fwdFlopsPerToken);
    nonneg("bwd_flops_per_token", u.cost.bwdFlopsPerToken);
    nonneg("activation_bytes_per_token", u.cost.activationBytesPerToken);
    if (c.has("recompute"))
      u.cost.recompute = c.field("recompute").boolean();
    if (c.has("kernels")) {
      Reader ks = c.field("kernels");
      for (size_t i = 0, e = ks.arraySize(); i < e; ++i) {
        Reader kr = ks.at(i);
        kr.expectObject({"kind", "shape", "scale"});
        UnitKernel k;
        Reader kind = kr.field("kind");
        std::optional<KernelKind> parsed = parseEnum<KernelKind>(kind.nonEmptyStr());
        if (!parsed)
          kind.error("expected a kernel kind: " + enumSpellings<KernelKind>());
        k.kind = *parsed;
        if (kr.has("shape")) {
          Reader sh = kr.field("shape");
          for (size_t j = 0, n = sh.arraySize(); j < n; ++j)
            k.shape.push_back(sh.at(j).integer());
        }
        k.scale = kr.field("scale").number();
        const std::string bad = validateKernel(k);
        if (!bad.empty())
          kr.error(bad);
        u.cost.kernels.push_back(std::move(k));
      }
    }
  }
  return u;
}

Mesh readMesh(const Reader &r) {
  r.expectObject({"dims", "device_ids"});
  Mesh m;
  Reader dims = r.field("dims");
  size_t n = dims.arraySize();
  for (size_t i = 0; i < n; ++i) {
    Reader d = dims.at(i);
    d.expectObject({"name", "size"});
    MeshDim md;
    md.name = d.field("name").nonEmptyStr();
    Reader sz = d.field("size");
    md.size = sz.integer();
    if (md.size < 1)
      sz.error(fmt::format("expected a mesh dim size >= 1, got {}", md.size));
    m.dims.push_back(md);
  }
  if (r.has("device_ids")) {
    Reader ids = r.field("device_ids");
    size_t k = ids.arraySize();
    for (size_t i = 0; i < k; ++i)
      m.deviceIds.push_back(ids.at(i).integer());
  }
  return m;
}

Policy readPolicy(const Reader &r) {
  r.expectObject({"optimizer", "zero", "adamw", "sgd", "muon"});
  Policy p;
  Reader o = r.field("optimizer");
  std::string os = o.str();
  auto kind = parseEnum<PolicyKind>(os);
  if (!kind)
    o.error(fmt::format("unknown optimizer policy '{}'; expected one of: {}", os,
                        enumSpellings<PolicyKind>(", ")));
  p.kind = *kind;
  if (r.has("zero")) {
    Reader z = r.field("zero");
    p.zero = z.integer();
    if (p.zero < 1 || p.zero > 3)
      z.error(fmt::format("expected ZeRO level 1, 2 or 3, got {}", p.zero));
  }
  auto num = [](const Reader &obj, const char *key, double &out) {
    if (obj.has(key))
      out = obj.field(key).number();
  };
  if (r.has("adamw")) {
    Reader a = r.field("adamw");
    a.expectObject({"lr", "beta1", "beta2", "eps", "weight_decay"});
    AdamW v;
    num(a, "lr", v.lr);
    num(a, "beta1", v.beta1);
    num(a, "beta2", v.beta2);
    num(a, "eps", v.eps);
    num(a, "weight_decay", v.weightDecay);
    p.adamw = v;
  }
  if (r.has("sgd")) {
    Reader s = r.field("sgd");
    s.expectObject({"lr", "momentum", "weight_decay", "nesterov"});
    SGD v;
    num(s, "lr", v.lr);
    num(s, "momentum", v.momentum);
    num(s, "weight_decay", v.weightDecay);
    if (s.has("nesterov"))
      v.nesterov = s.field("nesterov").boolean();
    p.sgd = v;
  }
  if (r.has("muon")) {
    Reader m = r.field("muon");
    m.expectObject(
        {"lr", "momentum", "weight_decay", "nesterov", "ns_steps", "scale",
         "ns_precision"});
    Muon v;
    num(m, "lr", v.lr);
    num(m, "momentum", v.momentum);
    num(m, "weight_decay", v.weightDecay);
    if (m.has("nesterov"))
      v.nesterov = m.field("nesterov").boolean();
    if (m.has("ns_steps"))
      v.nsSteps = m.field("ns_steps").integer();
    if (m.has("scale")) {
      Reader sc = m.field("scale");
      std::string s = sc.str();
      auto scale = parseEnum<MuonScale>(s);
      if (!scale)
        sc.error(fmt::format(
            "unknown Muon scale '{}'; expected {}", s, enumSpellings<MuonScale>()));
      v.scale = *scale;
    }
    if (m.has("ns_precision")) {
      Reader np = m.field("ns_precision");
      std::string s = np.str();
      auto precision = parseEnum<NsPrecision>(s);
      if (!precision)
        np.error(fmt::format("unknown Newton-Schulz precision '{}'; expected {}", s,
                             enumSpellings<NsPrecision>()));
      v.nsPrecision = *precision;
    }
    p.muon = v;
  }
  return p;
}

Graph readGraph(const json &root) {
  Reader r(root, "");
  r.expectObject({"format", "version", "model", "seq_len", "params", "units",
                  "mesh", "policy"});
  Reader fmtTag = r.field("format");
  if (fmtTag.str() != kFormatTag)
    fmtTag.error(fmt::format("expected format \"{}\", got {}", kFormatTag,
                             show(fmtTag.value())));
  Reader ver = r.field("version");
  int64_t version = ver.integer();
  if (version != kFormatVersion)
    ver.error(fmt::format("unsupported format version {}; this reader "
                          "understands version {}",
                          version, kFormatVersion));
  Graph g;
  g.model = r.field("model").nonEmptyStr();
  if (r.has("seq_len")) {
    Reader s = r.field("seq_len");
    g.seqLen = s.integer();
    if (g.seqLen < 0 || g.seqLen > MFSDP_MAX_TOKENS)
      s.error(fmt::format("expected a sequence length of 0 to {}, got {}",
                          MFSDP_MAX_TOKENS, g.seqLen));
  }
  Reader params = r.field("params");
  size_t np = params.arraySize();
  for (size_t i = 0; i < np; ++i)
    g.params.push_back(readParam(params.at(i)));
  Reader units = r.field("units");
  size_t nu = units.arraySize();
  for (size_t i = 0; i < nu; ++i)
    g.units.push_back(readUnit(units.at(i)));
  if (r.has("mesh"))
    g.mesh = readMesh(r.field("mesh"));
  if (r.has("policy"))
    g.policy = readPolicy(r.field("policy"));
  return g;
}

} // namespace

bool parseGraph(std::string_view text, Graph &out, Diagnostic &diag) {
  diag = Diagnostic();
  if (std::optional<TextProblem> p = checkJsonText(text)) {
    diag.line = p->line;
    diag.column = p->column;
    diag.message = std::move(p->message);
    return false;
  }
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::parse_error &e) {
    diag = invalidJson(text, e.what(), e.byte);
    return false;
  } catch (const std::exception &e) {
    diag.message = std::string("invalid JSON: ") + e.what();
    return false;
  }
  try {
    Graph g = readGraph(root);
    if (!validate(g, diag)) {
      auto [line, col] = locatePointer(text, diag.pointer);
      diag.line = line;
      diag.column = col;
      return false;
    }
    out = std::move(g);
    return true;
  } catch (const ReadError &e) {
    diag.pointer = e.pointer;
    diag.message = e.message;
  } catch (const std::exception &e) {
    diag.message = std::string("internal error while reading the graph: ") +
                   e.what();
  }
  auto [line, col] = locatePointer(text, diag.pointer);
  diag.line = line;
  diag.column = col;
  return false;
}

//===----------------------------------------------------------------------===//
// JSON writing
//===----------------------------------------------------------------------===//

namespace {
/// One value on one line, with a space after ':' and ','.
void writeInline(const json &v, std::string &out) {
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      out += first ? "" : ", ";
      first = false;
      out += json(it.key()).dump();
      out += ": ";
      writeInline(it.value(), out);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      out += i ? ", " : "";
      writeInline(v[i], out);
    }
    out += ']';
  } else {
    out += v.dump();
  }
}

json graphToJson(const Graph &g) {
  json root;
  root["format"] = kFormatTag;
  root["version"] = kFormatVersion;
  root["model"] = g.model;
  if (g.seqLen)
    root["seq_len"] = g.seqLen;
  json params = json::array();
  for (const Param &p : g.params) {
    json jp;
    jp["name"] = p.name;
    jp["shape"] = p.shape;
    jp["dtype"] = enumName(p.dtype);
    jp["module"] = p.module;
    jp["kind"] = enumName(p.kind);
    if (!p.requiresGrad)
      jp["requires_grad"] = false;
    if (!p.tiedTo.empty())
      jp["tied_to"] = p.tiedTo;
    if (!p.ownedBy.empty())
      jp["owned_by"] = p.ownedBy;
    params.push_back(std::move(jp));
  }
  root["params"] = std::move(params);
  json units = json::array();
  for (const Unit &u : g.units) {
    json ju;
    ju["name"] = u.name;
    ju["params"] = u.params;
    json c;
    c["fwd_flops_per_token"] = u.cost.fwdFlopsPerToken;
    c["bwd_flops_per_token"] = u.cost.bwdFlopsPerToken;
    c["activation_bytes_per_token"] = u.cost.activationBytesPerToken;
    c["recompute"] = u.cost.recompute;
    if (!u.cost.kernels.empty()) {
      json ks = json::array();
      for (const UnitKernel &k : u.cost.kernels)
        ks.push_back(
            {{"kind", std::string(enumName(k.kind))}, {"shape", k.shape}, {"scale", k.scale}});
      c["kernels"] = std::move(ks);
    }
    ju["cost"] = std::move(c);
    units.push_back(std::move(ju));
  }
  root["units"] = std::move(units);
  if (g.mesh) {
    json m;
    json dims = json::array();
    for (const MeshDim &d : g.mesh->dims)
      dims.push_back({{"name", d.name}, {"size", d.size}});
    m["dims"] = std::move(dims);
    if (!g.mesh->deviceIds.empty())
      m["device_ids"] = g.mesh->deviceIds;
    root["mesh"] = std::move(m);
  }
  if (g.policy) {
    const Policy &p = *g.policy;
    json jp;
    jp["optimizer"] = enumName(p.kind);
    jp["zero"] = p.zero;
    if (p.adamw)
      jp["adamw"] = {{"lr", p.adamw->lr},
                     {"beta1", p.adamw->beta1},
                     {"beta2", p.adamw->beta2},
                     {"eps", p.adamw->eps},
                     {"weight_decay", p.adamw->weightDecay}};
    if (p.sgd)
      jp["sgd"] = {{"lr", p.sgd->lr},
                   {"momentum", p.sgd->momentum},
                   {"weight_decay", p.sgd->weightDecay},
                   {"nesterov", p.sgd->nesterov}};
    if (p.muon)
      jp["muon"] = {{"lr", p.muon->lr},
                    {"momentum", p.muon->momentum},
                    {"weight_decay", p.muon->weightDecay},
                    {"nesterov", p.muon->nesterov},
                    {"ns_steps", p.muon->nsSteps},
                    {"scale", enumName(p.muon->scale)}};
    // fp32, the default, is left out (graphs written before it read alike).
    if (p.muon && p.muon->nsPrecision != NsPrecision::FP32)
      jp["muon"]["ns_precision"] = enumName(p.muon->nsPrecision);
    root["policy"] = std::move(jp);
  }
  return root;
}

} // namespace

std::string writeGraph(const Graph &g) {
  // Top-level fields one per line; each parameter and unit on a line of its
  // own, so graphs diff and read well.
  json root = graphToJson(g);
  std::string out = "{\n";
  bool first = true;
  for (auto it = root.begin(); it != root.end(); ++it) {
    out += first ? "" : ",\n";
    first = false;
    out += "  " + json(it.key()).dump() + ": ";
    const json &v = it.value();
    if (v.is_array() && !v.empty()) {
      out += "[\n";
      for (size_t i = 0; i < v.size(); ++i) {
        out += "    ";
        writeInline(v[i], out);
        out += i + 1 < v.size() ? ",\n" : "\n";
      }
      out += "  ]";
    } else {
      writeInline(v, out);
    }
  }
  out += "\n}\n";
  return out;
}

} // namespace mfsdp::graph

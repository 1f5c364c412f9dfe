//===- Graph.cpp - Model graphs as values, and their checks ---------------===//
//
// The graph's value types and its semantic validation. Reading and writing
// the JSON format is in GraphJson.cpp, locating a JSON pointer in the text
// in JsonPointer.cpp.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/graph/Graph.h"
#include "mfsdp/graph/TextLimits.h"
#include "mfsdp/Vocabulary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

namespace mfsdp::graph {

//===----------------------------------------------------------------------===//
// Value types
//===----------------------------------------------------------------------===//

int64_t Param::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}
bool Param::operator==(const Param &o) const {
  return name == o.name && shape == o.shape && dtype == o.dtype &&
         module == o.module && kind == o.kind && requiresGrad == o.requiresGrad &&
         tiedTo == o.tiedTo && ownedBy == o.ownedBy;
}
bool UnitCost::operator==(const UnitCost &o) const {
  return fwdFlopsPerToken == o.fwdFlopsPerToken &&
         bwdFlopsPerToken == o.bwdFlopsPerToken &&
         activationBytesPerToken == o.activationBytesPerToken &&
         recompute == o.recompute && kernels == o.kernels;
}
bool Unit::operator==(const Unit &o) const {
  return name == o.name && params == o.params && cost == o.cost;
}
bool MeshDim::operator==(const MeshDim &o) const {
  return name == o.name && size == o.size;
}
int64_t Mesh::worldSize() const {
  int64_t n = 1;
  for (const auto &d : dims)
    n *= d.size;
  return n;
}
const MeshDim *Mesh::find(std::string_view name) const {
  for (const auto &d : dims)
    if (d.name == name)
      return &d;
  return nullptr;
}
bool Mesh::operator==(const Mesh &o) const {
  return dims == o.dims && deviceIds == o.deviceIds;
}
bool AdamW::operator==(const AdamW &o) const {
  return lr == o.lr && beta1 == o.beta1 && beta2 == o.beta2 && eps == o.eps &&
         weightDecay == o.weightDecay;
}
bool SGD::operator==(const SGD &o) const {
  return lr == o.lr && momentum == o.momentum &&
         weightDecay == o.weightDecay && nesterov == o.nesterov;
}
bool Muon::operator==(const Muon &o) const {
  return lr == o.lr && momentum == o.momentum &&
         weightDecay == o.weightDecay && nesterov == o.nesterov &&
         nsSteps == o.nsSteps && scale == o.scale && nsPrecision == o.nsPrecision;
}
bool Policy::operator==(const Policy &o) const {
  return kind == o.kind && zero == o.zero && adamw == o.adamw && sgd == o.sgd &&
         muon == o.muon;
}
const Param *Graph::findParam(std::string_view name) const {
  for (const auto &p : params)
    if (p.name == name)
      return &p;
  return nullptr;
}
bool Graph::operator==(const Graph &o) const {
  return model == o.model && seqLen == o.seqLen && params == o.params &&
         units == o.units && mesh == o.mesh && policy == o.policy;
}

std::string Diagnostic::format(std::string_view file) const {
  std::string where(file);
  if (line > 0)
    where += fmt::format(":{}:{}", line, column);
  if (pointer.empty())
    return fmt::format("{}: error: {}", where, message);
  return fmt::format("{}: error: {}: {}", where, pointer, message);
}

//===----------------------------------------------------------------------===//
// Semantic validation
//===----------------------------------------------------------------------===//

namespace {
bool fail(Diagnostic &d, std::string pointer, std::string message) {
  d.pointer = std::move(pointer);
  d.message = std::move(message);
  return false;
}
} // namespace

bool validate(const Graph &g, Diagnostic &d) {
  if (g.model.empty())
    return fail(d, "/model", "expected a non-empty model name");
  if (g.seqLen < 0 || g.seqLen > MFSDP_MAX_TOKENS)
    return fail(d, "/seq_len",
                fmt::format("expected a sequence length of 0 to {}, got {}",
                            MFSDP_MAX_TOKENS, g.seqLen));

  // Mesh first: owning dims refer to it.
  if (g.mesh) {
    std::set<std::string> names;
    if (g.mesh->dims.empty())
      return fail(d, "/mesh/dims", "expected at least one mesh dim");
    for (size_t i = 0; i < g.mesh->dims.size(); ++i) {
      const auto &dim = g.mesh->dims[i];
      std::string at = fmt::format("/mesh/dims/{}", i);
      if (dim.name.empty())
        return fail(d, at + "/name", "expected a non-empty mesh dim name");
      if (!names.insert(dim.name).second)
        return fail(d, at + "/name",
                    fmt::format("duplicate mesh dim '{}'", dim.name));
      if (dim.size < 1)
        return fail(d, at + "/size",
                    fmt::format("expected a mesh dim size >= 1, got {}", dim.size));
    }
    if (!g.mesh->find("dp_shard"))
      return fail(d, "/mesh/dims",
                  "expected a 'dp_shard' dim: parameters are sharded over it");
    if (!g.mesh->deviceIds.empty()) {
      int64_t world = g.mesh->worldSize();
      if ((int64_t)g.mesh->deviceIds.size() != world)
        return fail(d, "/mesh/device_ids",
                    fmt::format("expected {} device ids (the mesh size), got {}",
                                world, g.mesh->deviceIds.size()));
      std::vector<bool> seen(world, false);
      for (size_t i = 0; i < g.mesh->deviceIds.size(); ++i) {
        int64_t id = g.mesh->deviceIds[i];
        if (id < 0 || id >= world || seen[id])
          return fail(d, fmt::format("/mesh/device_ids/{}", i),
                      fmt::format("expected a permutation of 0..{}; {} is {}",
                                  world - 1, id,
                                  (id < 0 || id >= world) ? "out of range"
                                                          : "repeated"));
        seen[id] = true;
      }
    }
  }

  std::map<std::string, size_t> index;
  for (size_t i = 0; i < g.params.size(); ++i) {
    const Param &p = g.params[i];
    std::string at = fmt::format("/params/{}", i);
    if (p.name.empty())
      return fail(d, at + "/name", "expected a non-empty parameter name");
    if (!index.emplace(p.name, i).second)
      return fail(d, at + "/name",
                  fmt::format("duplicate parameter '{}' (first at /params/{})",
                              p.name, index[p.name]));
    if (p.shape.empty())
      return fail(d, at + "/shape", "expected at least one dimension");
    for (size_t k = 0; k < p.shape.size(); ++k)
      if (p.shape[k] <= 0)
        return fail(d, fmt::format("{}/shape/{}", at, k),
                    fmt::format("expected a positive dimension, got {}",
                                p.shape[k]));
    std::set<std::string> owned;
    for (size_t k = 0; k < p.ownedBy.size(); ++k) {
      const std::string &dim = p.ownedBy[k];
      std::string dat = fmt::format("{}/owned_by/{}", at, k);
      if (dim.empty())
        return fail(d, dat, "expected a non-empty mesh dim name");
      if (dim == "dp_shard" || dim == "dp_replicate")
        return fail(d, dat,
                    fmt::format("'{}' is a data-parallel dim; expected the "
                                "tensor/expert-parallel dim that owns the "
                                "parameter",
                                dim));
      if (!owned.insert(dim).second)
        return fail(d, dat, fmt::format("owning dim '{}' listed twice", dim));
      if (g.mesh && !g.mesh->find(dim))
        return fail(d, dat,
                    fmt::format("owning dim '{}' is not a dim of the mesh", dim));
    }
  }
  for (size_t i = 0; i < g.params.size(); ++i) {
    const Param &p = g.params[i];
    if (p.tiedTo.empty())
      continue;
    std::string at = fmt::format("/params/{}/tied_to", i);
    auto it = index.find(p.tiedTo);
    if (it == index.end())
      return fail(d, at,
                  fmt::format("tied to unknown parameter '{}'", p.tiedTo));
    const Param &t = g.params[it->second];
    if (&t == &p)
      return fail(d, at, "a parameter cannot be tied to itself");
    if (!t.tiedTo.empty())
      return fail(d, at,
                  fmt::format("'{}' is itself tied to '{}'; tie to the storage "
                              "parameter '{}' directly",
                              t.name, t.tiedTo, t.tiedTo));
    if (t.shape != p.shape || t.dtype != p.dtype)
      return fail(d, at,
                  fmt::format("tied parameters must have the same shape and "
                              "dtype as '{}'",
                              t.name));
  }

  std::map<std::string, std::string> unitOf; // param -> pointer of first use
  std::set<std::string> unitNames;
  for (size_t u = 0; u < g.units.size(); ++u) {
    const Unit &unit = g.units[u];
    std::string at = fmt::format("/units/{}", u);
    if (unit.name.empty())
      return fail(d, at + "/name", "expected a non-empty unit name");
    if (!unitNames.insert(unit.name).second)
      return fail(d, at + "/name", fmt::format("duplicate unit '{}'", unit.name));
    if (index.count(unit.name))
      return fail(d, at + "/name",
                  fmt::format("unit name '{}' is also a parameter name",
                              unit.name));
    if (unit.params.empty())
      return fail(d, at + "/params", "expected at least one parameter");
    for (size_t k = 0; k < unit.params.size(); ++k) {
      const std::string &name = unit.params[k];
      std::string pat = fmt::format("{}/params/{}", at, k);
      auto it = index.find(name);
      if (it == index.end())
        return fail(d, pat, fmt::format("unknown parameter '{}'", name));
      if (!g.params[it->second].tiedTo.empty())
        return fail(d, pat,
                    fmt::format("'{}' is tied to '{}' and has no storage of its "
                                "own; list '{}' instead",
                                name, g.params[it->second].tiedTo,
                                g.params[it->second].tiedTo));
      auto [prev, inserted] = unitOf.emplace(name, pat);
      if (!inserted)
        return fail(d, pat,
                    fmt::format("parameter '{}' is already in a unit (at {})",
                                name, prev->second));
    }
    const UnitCost &c = unit.cost;
    auto checkCost = [&](double v, const char *field) {
      if (!(v >= 0) || !std::isfinite(v))
        return fail(d, fmt::format("{}/cost/{}", at, field),
                    fmt::format("expected a finite non-negative number, got {}", v));
      return true;
    };
    if (!checkCost(c.fwdFlopsPerToken, "fwd_flops_per_token") ||
        !checkCost(c.bwdFlopsPerToken, "bwd_flops_per_token") ||
        !checkCost(c.activationBytesPerToken, "activation_bytes_per_token"))
      return false;
  }
  for (size_t i = 0; i < g.params.size(); ++i) {
    const Param &p = g.params[i];
    if (p.tiedTo.empty() && !unitOf.count(p.name))
      return fail(d, fmt::format("/params/{}", i),
                  fmt::format("parameter '{}' is in no unit; every parameter "
                              "that is not tied belongs to exactly one unit",
                              p.name));
  }

  if (g.policy) {
    const Policy &pol = *g.policy;
    if (pol.zero < 1 || pol.zero > 3)
      return fail(d, "/policy/zero",
                  fmt::format("expected 1, 2 or 3, got {}", pol.zero));
    auto unit01 = [&](double v, const std::string &at) {
      if (!(v >= 0 && v < 1))
        return fail(d, at, fmt::format("expected a value in [0, 1), got {}", v));
      return true;
    };
    auto positive = [&](double v, const std::string &at) {
      if (!(v > 0) || !std::isfinite(v))
        return fail(d, at, fmt::format("expected a positive number, got {}", v));
      return true;
    };
    auto nonneg = [&](double v, const std::string &at) {
      if (!(v >= 0) || !std::isfinite(v))
        return fail(d, at,
                    fmt::format("expected a non-negative number, got {}", v));
      return true;
    };
    if (pol.adamw) {
      const AdamW &a = *pol.adamw;
      if (!positive(a.lr, "/policy/adamw/lr") ||
          !unit01(a.beta1, "/policy/adamw/beta1") ||
          !unit01(a.beta2, "/policy/adamw/beta2") ||
          !positive(a.eps, "/policy/adamw/eps") ||
          !nonneg(a.weightDecay, "/policy/adamw/weight_decay"))
        return false;
    }
    if (pol.sgd) {
      const SGD &s = *pol.sgd;
      if (!positive(s.lr, "/policy/sgd/lr") ||
          !unit01(s.momentum, "/policy/sgd/momentum") ||
          !nonneg(s.weightDecay, "/policy/sgd/weight_decay"))
        return false;
    }
    if (pol.muon) {
      const Muon &m = *pol.muon;
      if (!positive(m.lr, "/policy/muon/lr") ||
          !unit01(m.momentum, "/policy/muon/momentum") ||
          !nonneg(m.weightDecay, "/policy/muon/weight_decay"))
        return false;
      if (m.nsSteps < 1 || m.nsSteps > MFSDP_MAX_NS_STEPS)
        return fail(d, "/policy/muon/ns_steps",
                    fmt::format("expected 1 to {} Newton-Schulz steps, got {}",
                                MFSDP_MAX_NS_STEPS, m.nsSteps));
    }
  }
  return true;
}

} // namespace mfsdp::graph

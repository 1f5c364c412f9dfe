//===- Accounting.cpp - What a layout plan costs each rank, and its report ===//
//
// The per-rank accounting of a plan (memory, communication, optimizer
// work, by the conventions of Layout.cpp) and its text and JSON reports.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/planner/Layout.h"

#include "LayoutShared.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

namespace mfsdp::planner {

using detail::bytesText;
using detail::optimSecondsWhole;
using detail::UnitCostModel;
using detail::unitRowCosts;

//===----------------------------------------------------------------------===//
// Accounting
//===----------------------------------------------------------------------===//

Report account(const Problem &pr, const Options &o, const Decisions &d) {
  Report r;
  const int64_t S = std::max<int64_t>(o.shard, 1);
  const double Sd = static_cast<double>(S);
  const double R = static_cast<double>(std::max<int64_t>(o.replicate, 1));
  r.policy = o.policy;
  r.zero = o.zero;
  r.shard = S;
  r.replicate = o.replicate;
  r.hardware = o.hw.name;
  r.nsSteps = o.nsSteps;
  r.nsPrecision = o.hw.nsBf16 ? NsPrecision::BF16 : NsPrecision::FP32;
  r.ranks.resize(S);
  r.nsSplit = d.nsSplit;
  r.nsSplitReason = d.nsSplitReason;
  const double ring = (Sd - 1) / Sd;
  const double ringR = (R - 1) / R;
  auto addAll = [&](const char *kind, double bytes) {
    for (RankStats &rs : r.ranks)
      rs.commBytes[kind] += bytes;
  };
  std::vector<double> ownerWork(S, 0);

  // Unit row-shard groups and owner groups.
  std::vector<std::vector<const Param *>> rowParams(pr.units.size());
  int64_t groups = 0;
  for (const Unit &u : pr.units)
    groups = std::max(groups, u.group + 1);
  r.groups = groups;
  std::vector<std::vector<double>> shares(groups, std::vector<double>(S, 0));

  for (const Param &p : pr.params) {
    const double n = static_cast<double>(p.numElements());
    const double pb = static_cast<double>(p.elemBytes);
    const double bytes = n * pb;
    if (p.placement == PlacementKind::None && p.tied)
      continue;
    if (p.placement == PlacementKind::External || p.external) {
      r.externals.push_back({p.name, p.externalAxes, bytes});
      r.placementCounts["external"]++;
      continue;
    }
    r.optimizerCounts[std::string(enumName(p.optim))]++;
    r.placementCounts[std::string(enumName(p.placement))]++;
    const double master = masterBytesPerElem(p, o) * (p.optim == Optim::None ? 0 : 1);
    const double state = stateBytesPerElem(p.optim, o);
    const double grad = p.frozen ? 0 : pb;
    const double work = optimSecondsWhole(p, o);

    switch (p.placement) {
    case PlacementKind::RowShard:
    case PlacementKind::BlockShard: {
      std::vector<double> frac(S, 1.0 / Sd);
      if (p.placement == PlacementKind::BlockShard && p.block.size() == 2) {
        int64_t blocks = (p.shape[0] / p.block[0]) * (p.shape[1] / p.block[1]);
        for (int64_t k = 0; k < S; ++k)
          frac[k] = static_cast<double>(blocks / S + (k < blocks % S ? 1 : 0)) /
                    static_cast<double>(blocks);
      }
      for (int64_t k = 0; k < S; ++k) {
        RankStats &rs = r.ranks[k];
        double e = n * frac[k];
        rs.paramBytes += o.zero >= 3 ? e * pb : bytes;
        rs.gradBytes += o.zero >= 2 ? e * grad : n * grad;
        rs.masterBytes += e * master;
        rs.optimBytes += e * state;
        rs.optimSeconds += work * frac[k];
      }
      if (p.placement == PlacementKind::RowShard && p.unit >= 0)
        rowParams[p.unit].push_back(&p);
      else {
        // Block shards: one all-gather / reduce-scatter of the parameter.
        addAll("all_gather", (o.zero >= 3 ? 2 : 1) * ring * bytes);
        if (!p.frozen) {
          // Every ZeRO level reduce-scatters (ZeRO-1 into a whole gradient
          // buffer, as Megatron's distributed optimizer does): each rank
          // steps its own part only.
          addAll("reduce_scatter", ring * bytes);
          if (R > 1)
            addAll("hsdp_all_reduce", 2 * ringR * bytes / Sd);
        }
      }
      break;
    }
    case PlacementKind::Owner: {
      int64_t own = std::clamp<int64_t>(p.ownerRank, 0, S - 1);
      double split = d.nsSplit && p.optim == Optim::Muon ? R : 1;
      for (int64_t k = 0; k < S; ++k) {
        RankStats &rs = r.ranks[k];
        bool owner = k == own;
        if (o.zero >= 3)
          rs.paramBytes += owner ? bytes : 0;
        else
          rs.paramBytes += bytes;
        if (o.zero >= 2)
          rs.gradBytes += owner ? n * grad : 0;
        else
          rs.gradBytes += n * grad;
        if (owner) {
          rs.masterBytes += n * master;
          rs.optimBytes += n * state;
          rs.optimSeconds += work / split;
          ownerWork[k] += work / split;
          rs.ownedMatrices++;
          rs.owned.push_back(p.name);
          if (p.optim == Optim::Muon)
            rs.nsFlops += newtonSchulzFlops(p.shape[0], p.shape[1], o.nsSteps) / split;
        }
      }
      if (p.unit >= 0 && p.unit < static_cast<int64_t>(pr.units.size()))
        shares[pr.units[p.unit].group][own] += bytes;
      if (R > 1 && !p.frozen)
        r.ranks[own].commBytes["hsdp_all_reduce"] += 2 * ringR * n * grad;
      if (d.nsSplit && p.optim == Optim::Muon)
        r.ranks[own].commBytes["ns_split_all_gather"] += ringR * bytes;
      break;
    }
    case PlacementKind::Replicate:
    case PlacementKind::None: {
      for (RankStats &rs : r.ranks) {
        rs.paramBytes += bytes;
        rs.gradBytes += n * grad;
        rs.masterBytes += n * master;
        rs.optimBytes += n * state;
        rs.optimSeconds += work;
      }
      if (!p.frozen) {
        addAll("all_reduce", 2 * ring * n * grad);
        if (R > 1)
          addAll("hsdp_all_reduce", 2 * ringR * n * grad);
      }
      break;
    }
    case PlacementKind::External:
      break;
    }
  }

  // Row-sharded units: one padded buffer per unit.
  for (size_t u = 0; u < pr.units.size(); ++u) {
    UnitStats us;
    us.name = pr.units[u].name;
    us.group = pr.units[u].group;
    us.layout = pr.units[u].layout;
    us.hasRowShards = !rowParams[u].empty();
    if (us.hasRowShards) {
      UnitCostModel m = unitRowCosts(rowParams[u], o);
      us.paddingPerParam = m.padPerParam;
      us.paddingFlat = m.padFlat;
      us.copyBytesPerParam = m.copies;
      double unitBytes = 0, gradBytes = 0;
      for (const Param *p : rowParams[u]) {
        unitBytes += static_cast<double>(p->numElements()) * p->elemBytes;
        if (!p->frozen)
          gradBytes += static_cast<double>(p->numElements()) * p->elemBytes;
      }
      double pad = us.layout == RowLayout::Flat ? m.padFlat : m.padPerParam;
      double padded = unitBytes + pad;
      for (RankStats &rs : r.ranks) {
        if (o.zero >= 3)
          rs.paramBytes += pad / Sd;
        if (o.zero >= 2 && gradBytes > 0)
          rs.gradBytes += pad / Sd;
      }
      addAll("all_gather", (o.zero >= 3 ? 2 : 1) * ring * padded);
      if (gradBytes > 0) {
        double gpad = gradBytes + pad;
        addAll("reduce_scatter", ring * gpad);
        if (R > 1)
          addAll("hsdp_all_reduce", 2 * ringR * gpad / Sd);
      }
      const UnitCostModel &c = m;
      // What the layout is and how it compares (the same text whether
      // the cost model or the row-layout option decided it).
      const bool flat = us.layout == RowLayout::Flat;
      const bool cheaper = flat ? c.tFlat <= c.tPerParam : c.tPerParam <= c.tFlat;
      const std::string why = fmt::format(
          "{} ({}; {})", flat ? "flat" : "per_param",
          flat ? "planned only: the step runtime runs per_param"
               : "what the step runtime runs",
          cheaper ? "the cheaper" : flat ? "per_param costs less" : "flat would cost less");
      us.reason = fmt::format(
          "{}: flat pads {} per collective and copies nothing; per_param "
          "pads {} and copies {} per step (predicted {:.4g} ms vs {:.4g} ms "
          "per step on {})",
          why, bytesText(c.padFlat), bytesText(c.padPerParam), bytesText(c.copies),
          c.tFlat * 1e3, c.tPerParam * 1e3, o.hw.name);
    }
    r.units.push_back(std::move(us));
  }

  // Owner groups: an all-gather-v to gather and a reduce-scatter-v to reduce.
  double skewSum = 0;
  int64_t skewCount = 0;
  r.fanoutMax = 1;
  for (int64_t g = 0; g < groups; ++g) {
    double total = std::accumulate(shares[g].begin(), shares[g].end(), 0.0);
    if (total <= 0)
      continue;
    double maxShare = *std::max_element(shares[g].begin(), shares[g].end());
    double skew = maxShare / (total / Sd);
    r.fanoutMax = std::max(r.fanoutMax, skew);
    skewSum += skew;
    skewCount++;
    for (int64_t k = 0; k < S; ++k) {
      RankStats &rs = r.ranks[k];
      rs.commBytes["all_gather_v"] +=
          (o.zero >= 3 ? 2 : 1) * (total - shares[g][(k + 1) % S]);
      rs.commBytes["reduce_scatter_v"] += total - shares[g][k];
    }
  }
  r.fanoutMean = skewCount ? skewSum / skewCount : 1;

  // Imbalance and bounds.
  double sumWork = 0, sumMem = 0;
  for (int64_t k = 0; k < S; ++k) {
    const RankStats &rs = r.ranks[k];
    r.optimMax = std::max(r.optimMax, rs.optimSeconds);
    r.memMax = std::max(r.memMax, rs.memory());
    sumWork += rs.optimSeconds;
    sumMem += rs.memory();
  }
  double minBase = 1e300;
  for (int64_t k = 0; k < S; ++k)
    minBase = std::min(minBase, r.ranks[k].optimSeconds - ownerWork[k]);
  if (minBase > 1e299)
    minBase = 0;
  std::vector<double> itemCosts;
  for (const Param &p : pr.params)
    if (p.placement == PlacementKind::Owner)
      itemCosts.push_back(optimSecondsWhole(p, o) /
                          (d.nsSplit && p.optim == Optim::Muon ? R : 1));
  std::sort(itemCosts.rbegin(), itemCosts.rend());
  r.optimMean = sumWork / Sd;
  r.memMean = sumMem / Sd;
  // Lower bounds on the largest per-rank optimizer time: the mean, and the
  // indivisibility bound. Among the j*S+1 most expensive matrices some rank
  // holds j+1, so it carries at least the j+1 cheapest of them (j = 0 is
  // the largest matrix alone).
  double indivisible = 0;
  for (size_t j = 0; j * S < itemCosts.size(); ++j) {
    double sum = 0;
    for (size_t i = j * S - j; i <= j * S; ++i)
      sum += itemCosts[i];
    indivisible = std::max(indivisible, sum);
  }
  r.optimIndivisibleBound = indivisible + minBase;
  r.optimBound = std::max(r.optimMean, r.optimIndivisibleBound);
  return r;
}

//===----------------------------------------------------------------------===//
// Rendering
//===----------------------------------------------------------------------===//

namespace {
const char *kCommKinds[] = {"all_gather",      "reduce_scatter",
                            "all_reduce",      "all_gather_v",
                            "reduce_scatter_v", "hsdp_all_reduce",
                            "ns_split_all_gather"};

double ratio(double a, double b) { return b > 0 ? a / b : 1.0; }

std::string jsonString(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    default:
      if (static_cast<unsigned char>(c) < 0x20)
        out += fmt::format("\\u{:04x}", c);
      else
        out += c;
    }
  }
  return out + "\"";
}

std::string num(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    return fmt::format("{:.0f}", v);
  return fmt::format("{:.6g}", v);
}
} // namespace

std::string renderText(const Report &r) {
  std::string o;
  o += fmt::format("plan report: policy {}, ZeRO-{}, dp_shard {} x "
                   "dp_replicate {}; times predicted for {}\n",
                   enumName(r.policy), r.zero, r.shard, r.replicate,
                   r.hardware);
  o += "  optimizers:";
  for (auto &[k, v] : r.optimizerCounts)
    o += fmt::format(" {} {}", k, v);
  o += "; placements:";
  for (auto &[k, v] : r.placementCounts)
    o += fmt::format(" {} {}", k, v);
  o += "\n";
  if (r.optimizerCounts.count("muon"))
    o += fmt::format("  Newton-Schulz: {} steps in {} (#plan.muon ns_precision)\n", r.nsSteps,
                     enumName(r.nsPrecision));
  int64_t flat = 0, perParam = 0;
  for (const UnitStats &u : r.units)
    if (u.hasRowShards)
      (u.layout == RowLayout::Flat ? flat : perParam)++;
  o += fmt::format("  units: {} in {} gather groups; row layout: {} flat, {} "
                   "per_param\n",
                   r.units.size(), r.groups, flat, perParam);
  o += fmt::format("  {:>4} {:>6} {:>10} {:>9} {:>10} {:>10} {:>10} {:>10} "
                   "{:>10} {:>10} {:>10}\n",
                   "rank", "owned", "NS TFLOP", "opt ms", "params", "grads",
                   "master", "state", "memory", "gather", "reduce");
  size_t shown = 0;
  for (size_t k = 0; k < r.ranks.size(); ++k) {
    const RankStats &rs = r.ranks[k];
    if (r.ranks.size() > 16 && k >= 8 && k + 8 < r.ranks.size()) {
      if (!shown++)
        o += fmt::format("  {:>4} ({} ranks not shown; see the JSON report)\n",
                         "...", r.ranks.size() - 16);
      continue;
    }
    auto get = [&](const char *kind) {
      auto it = rs.commBytes.find(kind);
      return it == rs.commBytes.end() ? 0.0 : it->second;
    };
    double gather = get("all_gather") + get("all_gather_v");
    double reduce = get("reduce_scatter") + get("reduce_scatter_v") +
                    get("all_reduce") + get("hsdp_all_reduce") +
                    get("ns_split_all_gather");
    o += fmt::format("  {:>4} {:>6} {:>10.4g} {:>9.4g} {:>10} {:>10} {:>10} "
                     "{:>10} {:>10} {:>10} {:>10}\n",
                     k, rs.ownedMatrices, rs.nsFlops / 1e12,
                     rs.optimSeconds * 1e3, bytesText(rs.paramBytes),
                     bytesText(rs.gradBytes), bytesText(rs.masterBytes),
                     bytesText(rs.optimBytes), bytesText(rs.memory()),
                     bytesText(gather), bytesText(reduce));
  }
  o += fmt::format(
      "  imbalance (max/mean): optimizer work {:.3f}, memory {:.3f}, owner "
      "fan-out per gather group max {:.3f} mean {:.3f}\n",
      ratio(r.optimMax, r.optimMean), ratio(r.memMax, r.memMean), r.fanoutMax,
      r.fanoutMean);
  o += fmt::format(
      "  optimizer step: max {:.4g} ms, mean {:.4g} ms, indivisibility bound "
      "{:.4g} ms, lower bound max(mean, indivisibility) {:.4g} ms; max/bound "
      "{:.3f}\n",
      r.optimMax * 1e3, r.optimMean * 1e3, r.optimIndivisibleBound * 1e3,
      r.optimBound * 1e3, ratio(r.optimMax, r.optimBound));
  if (!r.ranks.empty()) {
    o += "  bytes sent per rank per step (rank 0):";
    for (const char *kind : kCommKinds) {
      auto it = r.ranks[0].commBytes.find(kind);
      if (it != r.ranks[0].commBytes.end() && it->second > 0)
        o += fmt::format(" {} {}", kind, bytesText(it->second));
    }
    o += "\n";
  }
  if (r.replicate > 1)
    o += "  HSDP Newton-Schulz: " + r.nsSplitReason + "\n";
  // Row layouts: list the distinct reasons once each.
  std::map<std::string, int64_t> reasons;
  for (const UnitStats &u : r.units)
    if (u.hasRowShards)
      reasons[std::string(enumName(u.layout))]++;
  for (const UnitStats &u : r.units)
    if (u.hasRowShards) {
      o += fmt::format("  row layout of {} (first row-sharded unit): {}\n",
                       u.name, u.reason);
      break;
    }
  o += fmt::format("  external: {} tensors", r.externals.size());
  double extBytes = 0;
  for (const auto &e : r.externals)
    extBytes += e.bytes;
  if (!r.externals.empty())
    o += fmt::format(" ({}), left to their owners", bytesText(extBytes));
  for (size_t i = 0; i < r.externals.size() && i < 3; ++i) {
    std::string axes;
    for (const auto &a : r.externals[i].axes)
      axes += (axes.empty() ? "" : ",") + a;
    o += fmt::format("{}{} [{}]", i ? ", " : ": ", r.externals[i].name, axes);
  }
  if (r.externals.size() > 3)
    o += ", ...";
  o += "\n";
  return o;
}

std::string renderJson(const Report &r) {
  std::string o = "{\n";
  if (!r.graph.empty())
    o += fmt::format("  \"graph\": {},\n", jsonString(r.graph));
  o += fmt::format("  \"policy\": \"{}\",\n  \"zero\": {},\n  \"dp_shard\": "
                   "{},\n  \"dp_replicate\": {},\n  \"hardware\": {},\n",
                   enumName(r.policy), r.zero, r.shard, r.replicate,
                   jsonString(r.hardware));
  auto counts = [&](const std::map<std::string, int64_t> &m) {
    std::string s = "{";
    for (auto &[k, v] : m)
      s += fmt::format("{}{}: {}", s.size() > 1 ? ", " : "", jsonString(k), v);
    return s + "}";
  };
  o += fmt::format("  \"optimizers\": {},\n  \"placements\": {},\n",
                   counts(r.optimizerCounts), counts(r.placementCounts));
  if (r.optimizerCounts.count("muon"))
    o += fmt::format("  \"newton_schulz\": {{\"steps\": {}, \"precision\": \"{}\"}},\n",
                     r.nsSteps, enumName(r.nsPrecision));
  o += fmt::format(
      "  \"imbalance\": {{\"optimizer_work\": {}, \"memory\": {}, "
      "\"fanout_max\": {}, \"fanout_mean\": {}}},\n",
      num(ratio(r.optimMax, r.optimMean)), num(ratio(r.memMax, r.memMean)),
      num(r.fanoutMax), num(r.fanoutMean));
  o += fmt::format(
      "  \"optimizer_seconds\": {{\"max\": {}, \"mean\": {}, "
      "\"indivisibility_bound\": {}, \"lower_bound\": {}, "
      "\"ratio_to_bound\": {}}},\n",
      num(r.optimMax), num(r.optimMean), num(r.optimIndivisibleBound),
      num(r.optimBound), num(ratio(r.optimMax, r.optimBound)));
  o += fmt::format("  \"memory_bytes\": {{\"max\": {}, \"mean\": {}}},\n",
                   num(r.memMax), num(r.memMean));
  o += fmt::format("  \"ns_split\": {},\n  \"ns_split_reason\": {},\n",
                   r.nsSplit ? "true" : "false", jsonString(r.nsSplitReason));
  o += "  \"ranks\": [\n";
  for (size_t k = 0; k < r.ranks.size(); ++k) {
    const RankStats &rs = r.ranks[k];
    std::string owned;
    for (const auto &n : rs.owned)
      owned += (owned.empty() ? "" : ", ") + jsonString(n);
    std::string comm;
    for (auto &[kind, b] : rs.commBytes)
      comm += fmt::format("{}{}: {}", comm.empty() ? "" : ", ", jsonString(kind),
                          num(b));
    o += fmt::format(
        "    {{\"rank\": {}, \"owned\": [{}], \"ns_flops\": {}, "
        "\"optimizer_seconds\": {}, \"param_bytes\": {}, \"grad_bytes\": {}, "
        "\"master_bytes\": {}, \"optimizer_state_bytes\": {}, "
        "\"memory_bytes\": {}, \"comm_bytes\": {{{}}}}}{}\n",
        k, owned, num(rs.nsFlops), num(rs.optimSeconds), num(rs.paramBytes),
        num(rs.gradBytes), num(rs.masterBytes), num(rs.optimBytes),
        num(rs.memory()), comm, k + 1 < r.ranks.size() ? "," : "");
  }
  o += "  ],\n  \"units\": [\n";
  for (size_t u = 0; u < r.units.size(); ++u) {
    const UnitStats &us = r.units[u];
    o += fmt::format("    {{\"name\": {}, \"group\": {}, \"row_layout\": {}",
                     jsonString(us.name), us.group,
                     us.hasRowShards ? jsonString(std::string(enumName(us.layout)))
                                     : std::string("null"));
    if (us.hasRowShards)
      o += fmt::format(", \"padding_flat\": {}, \"padding_per_param\": {}, "
                       "\"copy_bytes_per_param\": {}, \"reason\": {}",
                       num(us.paddingFlat), num(us.paddingPerParam),
                       num(us.copyBytesPerParam), jsonString(us.reason));
    o += fmt::format("}}{}\n", u + 1 < r.units.size() ? "," : "");
  }
  o += "  ],\n  \"external\": [";
  for (size_t i = 0; i < r.externals.size(); ++i) {
    std::string axes;
    for (const auto &a : r.externals[i].axes)
      axes += (axes.empty() ? "" : ", ") + jsonString(a);
    o += fmt::format("{}\n    {{\"name\": {}, \"axes\": [{}], \"bytes\": {}}}",
                     i ? "," : "", jsonString(r.externals[i].name), axes,
                     num(r.externals[i].bytes));
  }
  o += r.externals.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return o;
}

} // namespace mfsdp::planner

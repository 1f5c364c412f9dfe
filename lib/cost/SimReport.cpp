//===- SimReport.cpp - Chrome traces and text reports of a simulation -----===//
//
// A simulated step written out: Trace Event Format JSON for Perfetto and
// chrome://tracing, and the text report mfsdp-sim prints. Every time in
// them is labelled predicted.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/cost/Simulator.h"

#include "RankMemory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <string_view>

namespace mfsdp::cost {

using step::Op;
using step::OpKind;
using step::Phase;
using step::Step;
using detail::RankMemory;

namespace {

bool runsOn(const Op &op, int64_t rank) {
  return op.onlyRank < 0 || op.onlyRank == rank;
}

} // namespace

//===----------------------------------------------------------------------===//
// Chrome trace
//===----------------------------------------------------------------------===//

namespace {

std::string jsonString(std::string_view v) {
  std::string out = "\"";
  for (char c : v) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\r':
      out += "\\r";
      break;
    default:
      if (static_cast<unsigned char>(c) < 0x20)
        out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
      else
        out += c;
    }
  }
  out += '"';
  return out;
}

/// A JSON number (finite; non-finite values become 0).
std::string jsonNumber(double v) {
  if (!std::isfinite(v))
    return "0";
  return fmt::format("{}", v);
}

std::string micros(double seconds) {
  return fmt::format("{:.3f}", seconds * 1e6);
}

} // namespace

std::string chromeTrace(const Step &s, const SimResult &r, int64_t maxRanks) {
  std::string out = "{\"traceEvents\":[";
  bool first = true;
  auto emit = [&](const std::string &event) {
    out += first ? "\n" : ",\n";
    out += event;
    first = false;
  };
  auto finish = [&](std::string_view error) {
    out += "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"step\":";
    out += jsonString(s.name);
    out += ",\"note\":\"predicted by the mfsdp cost model, not measured\"";
    if (!error.empty()) {
      out += ",\"error\":";
      out += jsonString(error);
    }
    out += "}}\n";
    return out;
  };
  if (!r.ok)
    return finish(r.error.empty() ? "simulation failed" : r.error);
  if (static_cast<int64_t>(r.timings.size()) != s.world ||
      (!r.timings.empty() && r.timings.front().size() != s.ops.size()))
    return finish("the result does not belong to this step");

  int64_t shown = maxRanks <= 0 ? s.world : std::min(maxRanks, s.world);
  std::set<int64_t> comms;
  for (const Op &op : s.ops)
    if (op.kind == OpKind::Collective)
      comms.insert(op.comm);

  for (int64_t rank = 0; rank < shown; ++rank) {
    emit(fmt::format("{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},"
                     "\"tid\":0,\"args\":{{\"name\":\"rank {}\"}}}}",
                     rank, rank));
    emit(fmt::format("{{\"name\":\"process_sort_index\",\"ph\":\"M\","
                     "\"pid\":{},\"tid\":0,\"args\":{{\"sort_index\":{}}}}}",
                     rank, rank));
    emit(fmt::format("{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},"
                     "\"tid\":0,\"args\":{{\"name\":\"compute stream\"}}}}",
                     rank));
    for (int64_t c : comms)
      emit(fmt::format("{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},"
                       "\"tid\":{},\"args\":{{\"name\":\"comm {}\"}}}}",
                       rank, c + 1, c));
  }

  for (int64_t rank = 0; rank < shown; ++rank) {
    RankMemory memory(s, rank);
    emit(fmt::format("{{\"name\":\"live bytes\",\"ph\":\"C\",\"pid\":{},"
                     "\"ts\":0.000,\"args\":{{\"bytes\":{}}}}}",
                     rank, jsonNumber(memory.live)));
    for (size_t i = 0; i < s.ops.size(); ++i) {
      const Op &op = s.ops[i];
      const OpTiming &t = r.timings[rank][i];
      if (!runsOn(op, rank) || t.start < 0)
        continue;
      if (op.kind == OpKind::Alloc || op.kind == OpKind::Free) {
        if (memory.apply(s, op) == RankMemory::Event::Ok)
          emit(fmt::format("{{\"name\":\"live bytes\",\"ph\":\"C\",\"pid\":{},"
                           "\"ts\":{},\"args\":{{\"bytes\":{}}}}}",
                           rank, micros(t.end), jsonNumber(memory.live)));
        continue;
      }
      int64_t tid = op.kind == OpKind::Collective ? op.comm + 1 : 0;
      std::string args = fmt::format(
          "\"phase\":{},\"kind\":{},\"flops\":{},\"bytes\":{},\"collBytes\":{}",
          jsonString(mfsdp::enumName(op.phase)),
          jsonString(op.kind == OpKind::Collective ? mfsdp::enumName(op.coll)
                                                   : step::opKindName(op.kind)),
          jsonNumber(op.flops), jsonNumber(op.bytes), jsonNumber(op.collBytes));
      if (op.kind == OpKind::Collective)
        args += fmt::format(",\"ranks\":{},\"comm\":{},\"async\":{}", op.ranks,
                            op.comm, op.async ? "true" : "false");
      if (op.kind == OpKind::Wait)
        args += fmt::format(",\"waitFor\":{}", op.waitFor);
      // What the op works on, for comparing orders with the runtime's
      // trace (docs/runtime.md, "Trace").
      args += fmt::format(",\"unit\":{},\"group\":{}", op.unit, op.group);
      if (op.kind == OpKind::Optimizer)
        args += ",\"optimizer\":" + jsonString(op.optimizer);
      if (!op.params.empty()) {
        args += ",\"params\":[";
        for (size_t k = 0; k < op.params.size(); ++k)
          args += (k ? "," : "") + jsonString(op.params[k]);
        args += "]";
      }
      emit(fmt::format("{{\"name\":{},\"cat\":{},\"ph\":\"X\",\"pid\":{},"
                       "\"tid\":{},\"ts\":{},\"dur\":{},\"args\":{{{}}}}}",
                       jsonString(op.name),
                       jsonString(mfsdp::enumName(op.phase)), rank, tid,
                       micros(t.start), micros(t.end - t.start), args));
    }
  }
  return finish("");
}

//===----------------------------------------------------------------------===//
// Text report
//===----------------------------------------------------------------------===//

std::string renderText(const Step &s, const SimResult &r, const SimProfile &p) {
  std::string out = fmt::format(
      "step '{}' on '{}' ({}), {} ranks\n"
      "all times are predicted by the mfsdp cost model, not measured\n",
      s.name, p.name, p.description, s.world);
  if (!r.ok) {
    out += fmt::format("cannot simulate: {}\n", r.error);
    return out;
  }
  auto ms = [](double seconds) { return seconds * 1e3; };
  auto share = [](double exposed, double busy) -> std::string {
    if (busy <= 0)
      return exposed > 0 ? "n/a" : "0.0%";
    return fmt::format("{:.1f}%", 100.0 * exposed / busy);
  };
  auto line = [&](std::string_view label, double span, double busy,
                  double exposed, int64_t rank) {
    out += fmt::format("  {:<10} predicted {:>11.3f} ms  compute {:>11.3f} ms"
                       "  exposed comm {:>11.3f} ms ({} of compute)",
                       label, ms(span), ms(busy), ms(exposed),
                       share(exposed, busy));
    if (rank >= 0)
      out += fmt::format("  [rank {}]", rank);
    out += "\n";
  };
  for (Phase ph : {Phase::Forward, Phase::Backward, Phase::Optimizer}) {
    const PhaseStats &st = r.phase(ph);
    line(mfsdp::enumName(ph), st.span(), st.computeBusy, st.exposedComm,
         st.rank);
  }
  line("total", r.stepSeconds, r.computeBusy, r.exposedComm, r.slowestRank);

  if (!r.rankStepSeconds.empty()) {
    auto [lo, hi] =
        std::minmax_element(r.rankStepSeconds.begin(), r.rankStepSeconds.end());
    out += fmt::format("  predicted step per rank: {:.3f} .. {:.3f} ms\n",
                       ms(*lo), ms(*hi));
  }
  out += fmt::format("  predicted communicator streams busy: {:.3f} ms\n",
                     ms(r.commBusy));
  if (r.firstGroup >= 0)
    out += fmt::format(
        "  predicted first group (g{}) updated at {:.3f} ms, {:.3f} ms before "
        "the step ends; its gather waited {:.3f} ms; steady-state step with "
        "that gather issued then: {:.3f} ms\n",
        r.firstGroup, ms(r.firstGroupReady), ms(r.stepSeconds - r.firstGroupReady),
        ms(r.firstComputeWait), ms(r.steadyStepSeconds));
  out += fmt::format(
      "  predicted optimizer floor (peak rates, PRODUCT.md): {:.3f} ms\n",
      ms(optimizerFloorSeconds(s, p)));
  out += fmt::format(
      "  against the physical floor (each op at datasheet peak: FLOPs / {:.0f} "
      "TFLOP/s, the runtime's Newton-Schulz in {} / {:.0f} TFLOP/s, or bytes / "
      "{:.0f} GB/s, whichever is larger), slowest rank:\n",
      p.gemmFlops / 1e12, p.nsBf16 ? "bf16" : "fp32",
      planner::nsPeakFlops(p) / 1e12, p.hbmBytes / 1e9);
  for (Phase ph : {Phase::Forward, Phase::Backward, Phase::Optimizer}) {
    PhaseGap g = phaseGap(s, r, p, ph);
    if (g.rank < 0)
      continue;
    out += fmt::format("  {:<10} predicted {:>11.3f} ms = floor {:.3f} + "
                       "imbalance {:.3f} + below peak {:.3f} + exposed comm "
                       "{:.3f} ms (floor / predicted {:.1f}%)\n",
                       mfsdp::enumName(ph), ms(g.span), ms(g.floor),
                       ms(g.imbalance), ms(g.belowPeak), ms(g.exposedComm),
                       g.span > 0 ? 100.0 * g.floor / g.span : 0.0);
    if (g.nsKernels > 0)
      out += fmt::format("  {:<10} below peak includes {:.3f} ms of Newton-Schulz kernel "
                         "latency ({:.1f} us a kernel in {})\n",
                         "", ms(g.nsKernels), planner::nsKernelSeconds(p) * 1e6,
                         p.nsBf16 ? "bf16" : "fp32");
  }

  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  if (!r.rankPeakBytes.empty()) {
    // First rank on ties, both ways.
    auto hi = std::max_element(r.rankPeakBytes.begin(), r.rankPeakBytes.end());
    auto lo = std::min_element(r.rankPeakBytes.begin(), r.rankPeakBytes.end());
    out += fmt::format("  peak memory per rank (allocated: the live buffers' bytes): "
                       "{:.3f} GiB (rank {}), lowest {:.3f} GiB (rank {})\n",
                       *hi / GiB, hi - r.rankPeakBytes.begin(), *lo / GiB,
                       lo - r.rankPeakBytes.begin());
    if (p.allocatorReserve > 1)
      out += fmt::format("  peak reserved through PyTorch's caching allocator (every "
                         "buffer through it, as under FSDP2; the allocated peak x {:.3f}, "
                         "the profile's allocatorReserve): {:.3f} GiB\n",
                         p.allocatorReserve, r.peakReservedBytes / GiB);
  }
  if (!r.issues.empty()) {
    out += fmt::format("  {} issue(s):\n", r.issues.size());
    for (const auto &issue : r.issues)
      out += fmt::format("    {}\n", issue);
  }
  return out;
}

} // namespace mfsdp::cost

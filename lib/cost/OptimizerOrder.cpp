//===- OptimizerOrder.cpp - Choosing the optimizer phase's order ----------===//
#include "mfsdp/cost/OptimizerOrder.h"

#include <algorithm>
#include <optional>
#include <set>

namespace mfsdp::cost {

namespace {
/// `s` without the names of its ops and buffers and the parameters its
/// collectives carry: neither the schedule nor the simulated times depend
/// on them (the simulator names ops only in its errors), and on large steps
/// copying those strings was most of a candidate's copy.
step::Step withoutNames(const step::Step &s) {
  step::Step out;
  out.name = s.name;
  out.world = s.world;
  out.tokens = s.tokens;
  out.microbatches = s.microbatches;
  out.buffers.reserve(s.buffers.size());
  for (const step::Buffer &b : s.buffers) {
    step::Buffer c;
    c.bytes = b.bytes;
    c.persistent = b.persistent;
    c.onlyRank = b.onlyRank;
    c.offset = b.offset;
    out.buffers.push_back(std::move(c));
  }
  out.ops.reserve(s.ops.size());
  for (const step::Op &op : s.ops) {
    step::Op c;
    c.kind = op.kind;
    c.phase = op.phase;
    c.unit = op.unit;
    c.group = op.group;
    c.onlyRank = op.onlyRank;
    c.flops = op.flops;
    c.bytes = op.bytes;
    c.coll = op.coll;
    c.meshAxes = op.meshAxes;
    c.ranks = op.ranks;
    c.interNode = op.interNode;
    c.collBytes = op.collBytes;
    c.chunks = op.chunks;
    c.comm = op.comm;
    c.async = op.async;
    c.waitFor = op.waitFor;
    c.reads = op.reads;
    c.writes = op.writes;
    c.optimizer = op.optimizer;
    c.compute = op.compute;
    c.origin = op.origin;
    out.ops.push_back(std::move(c));
  }
  return out;
}
} // namespace

OrderChoice chooseOptimizerFill(const step::Step &unscheduled,
                                const step::OverlapOptions &options,
                                const SimProfile &profile, int64_t maxFill) {
  OrderChoice choice;
  std::set<int64_t> groups;
  for (const step::Op &op : unscheduled.ops)
    if (op.phase == step::Phase::Optimizer && op.group >= 0)
      groups.insert(op.group);
  const int64_t last =
      std::min<int64_t>(static_cast<int64_t>(groups.size()), std::max<int64_t>(maxFill, 0));
  constexpr double tie = 1e-9;
  const OrderCandidate *best = nullptr;
  // What does not depend on the order is scheduled once, without names;
  // then each candidate only finishes the optimizer phase
  // (step::finishOverlapEach).
  step::Step prepared = withoutNames(unscheduled);
  step::prepareOverlap(prepared, options);
  std::vector<int64_t> fills;
  for (int64_t fill = -1; fill <= last; ++fill)
    fills.push_back(fill);
  SimOptions so;
  so.timings = false; // the summary is all the choice needs
  std::optional<int64_t> failedFill;
  step::finishOverlapEach(
      prepared, options, fills, [&](int64_t fill, const step::Step &s) {
        SimResult r = simulate(s, profile, so);
        if (!r.ok) {
          failedFill = fill;
          return false;
        }
        choice.candidates.push_back(
            {fill, r.stepSeconds, r.firstGroupReady, r.steadyStepSeconds});
        return true;
      });
  if (failedFill) {
    // The error names ops and buffers: take it from the step itself.
    step::Step named = unscheduled;
    step::OverlapOptions o = options;
    o.optimizerFill = *failedFill;
    step::scheduleOverlap(named, o);
    choice.error = simulate(named, profile, so).error;
    return choice;
  }
  for (const OrderCandidate &c : choice.candidates) {
    if (!best || c.steadyStepSeconds < best->steadyStepSeconds - tie ||
        (c.steadyStepSeconds <= best->steadyStepSeconds + tie &&
         c.firstGroupReady < best->firstGroupReady - tie))
      best = &c;
  }
  choice.ok = true;
  choice.fill = best ? best->fill : -1;
  return choice;
}

} // namespace mfsdp::cost

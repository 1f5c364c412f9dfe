//===- OptimizerOrder.cpp - Choosing the optimizer phase's order ----------===//
#include "mfsdp/cost/OptimizerOrder.h"

#include <algorithm>
#include <set>

namespace mfsdp::cost {

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
  for (int64_t fill = -1; fill <= last; ++fill) {
    step::Step s = unscheduled;
    step::OverlapOptions o = options;
    o.optimizerFill = fill;
    step::scheduleOverlap(s, o);
    SimOptions so;
    so.timings = false; // the summary is all the choice needs
    SimResult r = simulate(s, profile, so);
    if (!r.ok) {
      choice.error = r.error;
      return choice;
    }
    choice.candidates.push_back(
        {fill, r.stepSeconds, r.firstGroupReady, r.steadyStepSeconds});
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

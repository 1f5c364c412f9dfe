//===- OptimizerOrder.cpp - Choosing the optimizer phase's order ----------===//
#include "mfsdp/cost/OptimizerOrder.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <set>

namespace mfsdp::cost {

OrderChoice scheduleOptimizerFill(step::Step &s,
                                  const step::OverlapOptions &options,
                                  const SimProfile &profile, int64_t maxFill) {
  OrderChoice choice;
  std::set<int64_t> groups;
  for (const step::Op &op : s.ops)
    if (op.phase == step::Phase::Optimizer && op.group >= 0)
      groups.insert(op.group);
  const int64_t last =
      std::min<int64_t>(static_cast<int64_t>(groups.size()), std::max<int64_t>(maxFill, 0));
  constexpr double tie = 1e-9;
  SimOptions so;
  so.timings = false; // the summary is all the choice needs
  // What does not depend on the order is scheduled once, and so is the
  // part of the step before the optimizer phase; each candidate only
  // schedules the optimizer phase (step::finishOverlapEach), and the step
  // is left scheduled for the chosen one.
  step::prepareOverlap(s, options);
  bool chosen = false;
  // The ops every candidate shares are simulated once.
  size_t shared = 0;
  std::unique_ptr<PrefixSimulator> sim;
  step::finishOverlapEach(
      s, options, -1,
      [&](int64_t fill, const step::Step &scheduled) -> std::optional<int64_t> {
        if (chosen)
          return std::nullopt;
        if (!sim)
          sim = std::make_unique<PrefixSimulator>(profile, so, shared);
        SimResult r = sim->simulate(scheduled);
        if (!r.ok) {
          choice.error = r.error;
          return std::nullopt;
        }
        choice.candidates.push_back(
            {fill, r.stepSeconds, r.firstGroupReady, r.steadyStepSeconds});
        if (fill < last)
          return fill + 1;
        const OrderCandidate *best = nullptr;
        for (const OrderCandidate &c : choice.candidates) {
          if (!best || c.steadyStepSeconds < best->steadyStepSeconds - tie ||
              (c.steadyStepSeconds <= best->steadyStepSeconds + tie &&
               c.firstGroupReady < best->firstGroupReady - tie))
            best = &c;
        }
        choice.ok = true;
        choice.fill = best->fill;
        chosen = true;
        if (choice.fill == fill)
          return std::nullopt; // the step is scheduled for it already
        return choice.fill;
      },
      &shared);
  return choice;
}

OrderChoice chooseOptimizerFill(const step::Step &unscheduled,
                                const step::OverlapOptions &options,
                                const SimProfile &profile, int64_t maxFill) {
  step::Step s = unscheduled;
  return scheduleOptimizerFill(s, options, profile, maxFill);
}

} // namespace mfsdp::cost

//===- RuntimeProgram.h - The scheduled step as the runtime's program -*- C++ -*-===//
//
// Lowers a scheduled step program (after mfsdp-schedule-overlap and
// mfsdp-plan-memory) into the table the runtime executes (mfsdp_program in
// runtime.h): per unit its forward and backward hooks (the starts and
// waits of its gathers and reductions, the frees, the gradient buffers)
// and the optimizer phase (the waits for reductions still in flight, each
// group's optimizer kernels, the ns_split broadcasts and the ZeRO-1/2
// gathers of the updated parameters), all in the schedule's order.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_STEP_RUNTIMEPROGRAM_H
#define MFSDP_STEP_RUNTIMEPROGRAM_H

#include "mfsdp/runtime.h"
#include "mfsdp/step/Step.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mfsdp::step {

/// The name of the sched op a program op was lowered from: 8 bytes where
/// there is none (a program lowered without origins has millions of ops
/// and no names).
class OriginName {
public:
  OriginName() = default;
  OriginName(std::string text) { *this = std::move(text); } // NOLINT: a string converts
  OriginName(const OriginName &o)
      : text_(o.text_ ? std::make_unique<std::string>(*o.text_) : nullptr) {}
  OriginName(OriginName &&) noexcept = default;
  OriginName &operator=(const OriginName &o) {
    if (this != &o)
      text_ = o.text_ ? std::make_unique<std::string>(*o.text_) : nullptr;
    return *this;
  }
  OriginName &operator=(OriginName &&) noexcept = default;
  OriginName &operator=(std::string text) {
    text_ = text.empty() ? nullptr : std::make_unique<std::string>(std::move(text));
    return *this;
  }

  const std::string &str() const {
    static const std::string none;
    return text_ ? *text_ : none;
  }
  operator const std::string &() const { return str(); } // NOLINT: reads as a string
  friend bool operator==(const OriginName &a, std::string_view b) { return a.str() == b; }
  friend bool operator!=(const OriginName &a, std::string_view b) { return a.str() != b; }

private:
  std::unique_ptr<std::string> text_;
};

/// One op of the runtime's program, its parameters owned.
struct ProgramOp {
  int32_t kind = MFSDP_PROGRAM_OPTIMIZER;
  int32_t unit = -1;
  int32_t group = -1;
  int32_t optimizer = MFSDP_OPT_NONE;
  int32_t onlyRank = -1;
  std::vector<int32_t> params;
  OriginName from; // the sched op it was lowered from (its name)
};

/// The runtime's program: ops and the ranges of the hooks it covers.
struct RuntimeProgram {
  std::vector<ProgramOp> ops;
  std::vector<mfsdp_program_hook> hooks;
  std::string error; // set when the step cannot be lowered
  /// The error names an op the runtime does not run at all (a kernel or
  /// collective of a baseline's step, e.g. gathered Muon): a step no
  /// library can carry, rather than one that lowers wrongly.
  bool unsupported = false;

  /// The C view (mfsdp_plan::program); valid while this object and the
  /// returned storage live and neither changes.
  struct View {
    std::vector<mfsdp_program_op> ops;
    mfsdp_program program{};
    /// After release: the ops' parameters (one array) and the hooks.
    std::vector<int32_t> params;
    std::vector<mfsdp_program_hook> hooks;
  };
  void view(View &out) const;
  /// The C view made to hold everything it points to, and this program
  /// emptied: for a caller that needs only the view (a large step's program
  /// takes a third of the memory so).
  void release(View &out);
};

/// The optimizer phase of `step` as the runtime's program for `plan` (its
/// parameters found by name):
///  - a Wait for a gradient reduction of an earlier phase: one
///    MFSDP_PROGRAM_WAIT_REDUCTION per unit the reduction carries;
///  - an Optimizer op (adamw, sgd, muon): per unit of its parameters (of
///    the group's replicated tensors when it names none), one
///    MFSDP_PROGRAM_OPTIMIZER per optimizer they are stepped by, with the
///    op's only_rank;
///  - the all-gather of updated owned matrices over dp_replicate (ns_split):
///    MFSDP_PROGRAM_BROADCAST_UPDATES per unit of the group;
///  - a gather of updated parameters over dp_shard (ZeRO-1/2):
///    MFSDP_PROGRAM_GATHER per unit of the group, once per unit.
/// Allocs and frees lower to nothing (the memory plan placed the buffers).
/// Under ZeRO-1/2 a unit that the schedule gathers nowhere (replicated
/// tensors only) is gathered at the end. Fails (error) on an op it does
/// not know, a parameter not in the plan, or a parameter stepped twice.
RuntimeProgram lowerOptimizerProgram(const Step &step, const mfsdp_plan &plan);

/// The whole scheduled step as the runtime's program: the optimizer phase
/// (lowerOptimizerProgram) and each unit's forward and backward hooks.
/// The hooks split the forward and backward ops at the compute ops: what
/// comes before a unit's first compute op of a phase belongs to its pre
/// hook, what follows its last one to its post hook, split between the two
/// hooks where the next unit's gather work (a start or a wait of a gather)
/// begins, so every op keeps its place in the schedule's order. Then
///  - an all-gather (-v) over dp_shard: MFSDP_PROGRAM_START_GATHER of the
///    unit (once per hook), and its Wait: MFSDP_PROGRAM_WAIT_GATHER;
///  - a reduction over dp_shard: MFSDP_PROGRAM_START_REDUCTION, its Wait:
///    MFSDP_PROGRAM_WAIT_REDUCTION (HSDP's all-reduce over replicas is part
///    of the wait, as the runtime runs it);
///  - the free of a unit's forward gather: MFSDP_PROGRAM_RELEASE;
///  - a synchronous collective: its start and its wait.
/// Every pre hook ends with the unit's MFSDP_PROGRAM_WAIT_GATHER (if no op
/// waited for it: ZeRO-1/2 keep the copy, a no-op then) and pre_backward
/// with MFSDP_PROGRAM_PLACE_GRADS. A gather group of several units is
/// gathered, freed and reduced together: its work goes to its first unit's
/// pre hooks and its last unit's post hooks (in the phase's compute order),
/// each op naming the units whose parameters it carries. A step that
/// accumulates microbatches runs each microbatch's forward and backward in
/// turn, with the same hooks but for the reduction, which the last one
/// alone runs (the trainer runs the others under no-sync, where
/// MFSDP_PROGRAM_START_REDUCTION reduces nothing and releases what a
/// reduction would): the hooks are the last microbatch's, and every other
/// microbatch's must be those without their reductions (an error names the
/// microbatch, the hook and the op that differ). A compute op names its
/// unit by index (Op::unit) or, as read from IR, by name: `unitNames` are
/// the plan's units in index order. Without `origins`, every op's `from`
/// is left empty and errors name no op (the same program otherwise): a
/// verifier that only checks the program, lowering again with them for a
/// message, holds a text less per op.
RuntimeProgram lowerStepProgram(const Step &step, const mfsdp_plan &plan,
                                const std::vector<std::string> &unitNames = {},
                                bool origins = true);

/// What verifyProgram found first: its message ("" when nothing) and the
/// op it is at (an index in the program's ops; -1 for the program as a
/// whole), so a caller can name the sched op it was lowered from.
struct ProgramIssue {
  std::string message;
  int32_t op = -1;
};

/// The first way `program` (as lowerStepProgram lowers `step` for `plan`)
/// would run other than the step says (an empty message when none). It replays the hooks
/// in the order the runtime runs them in a training step (every unit's
/// pre_forward and post_forward in unit order, pre_backward and
/// post_backward in reverse, the optimizer step last) and checks that
///  - every hook entry names a hook and unit that exist, at most once, and
///    every unit has its four hooks and the optimizer step its entry;
///    every op names a kind, unit and parameters that exist;
///  - each unit is whole (a WAIT_GATHER since its copy was released) before
///    its forward and backward compute, has its gradient buffers before
///    its backward, and is released only after its forward compute and
///    while no gather of it is in flight;
///  - every started gather and reduction is waited for, none started or
///    waited for twice, a reduction started only after its unit's backward;
///  - every parameter's reduction has landed before the optimizer kernel
///    that steps it, and every parameter an optimizer steps is stepped
///    exactly once, by its unit's op of its optimizer;
///  - under ZeRO-1/2 each unit's updated parameters are gathered once,
///    after its parameters are stepped; under ZeRO-3 never;
///  - under ZeRO-3 the gathered copies are allocated (their first gather)
///    in each phase in the order the step allocates them, and the forward
///    copies freed in the order the step frees them (a backward copy lives
///    until its unit's reduction lands, as the runtime's memory plan
///    keeps it).
/// Messages name the hook (its name and unit) and the op (its index and
/// kind). `unitNames`: the plan's units in index order, for the messages
/// and for compute ops that name their unit by name.
ProgramIssue verifyProgram(const Step &step, const mfsdp_plan &plan,
                           const mfsdp_program &program,
                           const std::vector<std::string> &unitNames = {});

} // namespace mfsdp::step

#endif // MFSDP_STEP_RUNTIMEPROGRAM_H

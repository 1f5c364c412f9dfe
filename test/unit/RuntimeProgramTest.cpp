//===- RuntimeProgramTest.cpp - The optimizer phase lowered to the program ===//
//
// A hand-built step of three units, one group each, on 2 ranks under
// ZeRO-2: unit 0 an AdamW row shard, unit 1 a Muon matrix owned by rank 1
// and a replicated AdamW vector, unit 2 an SGD row shard and a frozen one.
// Backward reduces each group into its gradient shard; the optimizer phase
// steps each group and gathers its updated parameters. The schedule's
// optimizer order must reach the program, op for op.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/step/RuntimeProgram.h"
#include "mfsdp/step/Schedule.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <string>
#include <utility>
#include <vector>

using namespace mfsdp;
using namespace mfsdp::step;

namespace {

Op make(OpKind kind, Phase phase, std::string name, int64_t unit, int64_t group,
        std::vector<int64_t> reads, std::vector<int64_t> writes) {
  Op op;
  op.kind = kind;
  op.phase = phase;
  op.name = std::move(name);
  op.unit = unit;
  op.group = group;
  op.reads = std::move(reads);
  op.writes = std::move(writes);
  return op;
}

Op collective(CollKind kind, Phase phase, std::string name, int64_t group,
              std::vector<std::string> params, int64_t src, int64_t dst) {
  Op op = make(OpKind::Collective, phase, std::move(name), -1, group, {src}, {dst});
  op.coll = kind;
  op.meshAxes = {"dp_shard"};
  op.ranks = 2;
  op.collBytes = 1e6;
  op.params = std::move(params);
  return op;
}

Op optimizer(std::string kernel, int64_t group, std::vector<std::string> params,
             int64_t onlyRank, int64_t buf) {
  Op op = make(OpKind::Optimizer, Phase::Optimizer, kernel + " g" + std::to_string(group),
               -1, group, {buf}, {buf});
  op.optimizer = std::move(kernel);
  op.params = std::move(params);
  op.onlyRank = onlyRank;
  return op;
}

/// Buffers: per group a shard (0..2) and a gradient shard (3..5).
Step threeUnits() {
  Step s;
  s.name = "three";
  s.world = 2;
  for (const char *n : {"shard g0", "shard g1", "shard g2", "grad g0", "grad g1",
                        "grad g2"}) {
    Buffer b;
    b.name = n;
    b.bytes = 64;
    b.persistent = true;
    s.buffers.push_back(b);
  }
  const Phase F = Phase::Forward, B = Phase::Backward, O = Phase::Optimizer;
  for (int64_t g = 0; g < 3; ++g) {
    Op fwd = make(OpKind::Compute, F, "forward u" + std::to_string(g), g, g, {g}, {});
    fwd.compute = "forward";
    s.ops.push_back(fwd);
  }
  const std::vector<std::vector<std::string>> reduced = {
      {"u0.w"}, {"u1.w", "u1.b"}, {"u2.w", "u2.frozen"}};
  for (int64_t g = 2; g >= 0; --g) {
    Op bwd = make(OpKind::Compute, B, "backward u" + std::to_string(g), g, g, {g}, {});
    bwd.compute = "backward";
    s.ops.push_back(bwd);
    s.ops.push_back(collective(CollKind::ReduceScatter, B,
                               "reduce_scatter g" + std::to_string(g), g, reduced[g],
                               g, 3 + g));
  }
  s.ops.push_back(optimizer("adamw", 0, {"u0.w"}, -1, 3));
  s.ops.push_back(collective(CollKind::AllGather, O, "all_gather updated g0", 0,
                             {"u0.w"}, 0, 0));
  s.ops.push_back(optimizer("muon", 1, {"u1.w"}, 1, 4));
  s.ops.push_back(optimizer("adamw", 1, {}, -1, 4)); // the replicated tensors
  s.ops.push_back(collective(CollKind::AllGatherV, O, "all_gather_v updated g1", 1,
                             {"u1.w"}, 1, 1));
  s.ops.push_back(optimizer("sgd", 2, {"u2.w"}, -1, 5));
  s.ops.push_back(collective(CollKind::AllGather, O, "all_gather updated g2", 2,
                             {"u2.w", "u2.frozen"}, 2, 2));
  return s;
}

struct Plan {
  std::vector<mfsdp_param_desc> descs;
  mfsdp_plan plan{};
  Plan() {
    descs = {
        {"u0.w", 4, 4, 0, MFSDP_ROW_SHARD, 0, MFSDP_OPT_ADAMW, 0, 0, 0},
        {"u1.w", 4, 4, 1, MFSDP_OWNER, 1, MFSDP_OPT_MUON, 0, 0, 0},
        {"u1.b", 4, 1, 1, MFSDP_REPLICATE, 0, MFSDP_OPT_ADAMW, 0, 0, 0},
        {"u2.w", 4, 4, 2, MFSDP_ROW_SHARD, 0, MFSDP_OPT_SGD, 0, 0, 0},
        {"u2.frozen", 4, 1, 2, MFSDP_ROW_SHARD, 0, MFSDP_OPT_NONE, 0, 0, 0},
    };
    plan.zero = 2;
    plan.dp_shard = 2;
    plan.dp_replicate = 1;
    plan.world = 2;
    plan.num_units = 3;
    plan.num_params = static_cast<int32_t>(descs.size());
    plan.params = descs.data();
  }
};

/// The program's ops as "kind unit [params] @rank" lines, for comparison.
std::vector<std::string> text(const RuntimeProgram &p) {
  static const char *kinds[] = {"wait", "optimizer", "broadcast", "gather"};
  std::vector<std::string> out;
  for (const ProgramOp &op : p.ops) {
    std::string line = std::string(kinds[op.kind]) + " u" + std::to_string(op.unit);
    for (int32_t i : op.params)
      line += " " + std::to_string(i);
    if (op.onlyRank >= 0)
      line += " @" + std::to_string(op.onlyRank);
    out.push_back(line);
  }
  return out;
}

RuntimeProgram scheduled(int64_t fill, const Plan &plan) {
  Step s = threeUnits();
  OverlapOptions o;
  o.prefetch = 1;
  o.optimizerFill = fill;
  scheduleOverlap(s, o);
  return lowerOptimizerProgram(s, plan.plan);
}

// Landing order: group 2's reduction lands first (backward runs 2, 1, 0),
// so group 2 is stepped first while the others' reductions are in flight;
// each group's kernels come right after the wait for its own reduction
// (not for all of them), and its gather right after its kernels.
TEST(RuntimeProgram, LandingOrder) {
  Plan plan;
  RuntimeProgram p = scheduled(-1, plan);
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(text(p), (std::vector<std::string>{
                         "wait u2", "optimizer u2 3", "gather u2",
                         "wait u1", "optimizer u1 1 @1", "optimizer u1 2", "gather u1",
                         "wait u0", "optimizer u0 0", "gather u0"}));
  ASSERT_EQ(p.hooks.size(), 1u);
  EXPECT_EQ(p.hooks[0].hook, MFSDP_HOOK_OPTIMIZER_STEP);
  EXPECT_EQ(p.hooks[0].first_op, 0);
  EXPECT_EQ(p.hooks[0].num_ops, 10);
}

// First units first with one group filling the wait: group 2 (the first
// to land), then groups 0 and 1 in unit order. Another order, another
// program.
TEST(RuntimeProgram, FirstUnitsOrder) {
  Plan plan;
  RuntimeProgram p = scheduled(1, plan);
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(text(p), (std::vector<std::string>{
                         "wait u2", "optimizer u2 3", "gather u2",
                         "wait u0", "optimizer u0 0", "gather u0",
                         "wait u1", "optimizer u1 1 @1", "optimizer u1 2", "gather u1"}));
  EXPECT_NE(text(p), text(scheduled(-1, plan)));
}

// The C view points into the program.
TEST(RuntimeProgram, View) {
  Plan plan;
  RuntimeProgram p = scheduled(-1, plan);
  RuntimeProgram::View v;
  p.view(v);
  ASSERT_EQ(v.program.num_ops, 10);
  EXPECT_EQ(v.program.ops[4].kind, MFSDP_PROGRAM_OPTIMIZER);
  EXPECT_EQ(v.program.ops[4].optimizer, MFSDP_OPT_MUON);
  EXPECT_EQ(v.program.ops[4].only_rank, 1);
  EXPECT_EQ(v.program.ops[4].num_params, 1);
  EXPECT_EQ(v.program.ops[4].params[0], 1);
  EXPECT_EQ(v.program.num_hooks, 1);
}

// ZeRO-3 keeps no gathers in the optimizer phase: a gather there is an
// op the runtime does not run.
TEST(RuntimeProgram, GatherUnderZero3) {
  Plan plan;
  plan.plan.zero = 3;
  RuntimeProgram p = scheduled(-1, plan);
  EXPECT_EQ(p.error, "'all_gather updated g2' (all_gather) in the optimizer phase is "
                     "a collective the runtime does not run (ZeRO-3)");
}

TEST(RuntimeProgram, Errors) {
  Plan plan;
  {
    Step s = threeUnits();
    s.ops.push_back(optimizer("cast", 0, {"u0.w"}, -1, 3));
    EXPECT_EQ(lowerOptimizerProgram(s, plan.plan).error,
              "'cast g0' runs optimizer kernel 'cast'; the runtime runs adamw, sgd "
              "and muon");
  }
  {
    Step s = threeUnits();
    s.ops.push_back(optimizer("adamw", 0, {"nowhere"}, -1, 3));
    EXPECT_EQ(lowerOptimizerProgram(s, plan.plan).error,
              "'adamw g0' names parameter 'nowhere', which is not in the plan");
  }
  {
    Step s = threeUnits();
    s.ops.push_back(optimizer("adamw", 0, {"u0.w"}, -1, 3));
    EXPECT_EQ(lowerOptimizerProgram(s, plan.plan).error,
              "'adamw g0' steps parameter 'u0.w', which an earlier op of the "
              "schedule stepped");
  }
  {
    Step s = threeUnits();
    s.ops.erase(std::find_if(s.ops.begin(), s.ops.end(),
                             [](const Op &op) { return op.name == "sgd g2"; }));
    EXPECT_EQ(lowerOptimizerProgram(s, plan.plan).error,
              "parameter 'u2.w' is stepped by no optimizer op of the schedule");
  }
}


/// One hook's ops as "kind unit" words (hook entries of lowerStepProgram).
std::string hookText(const RuntimeProgram &p, int32_t hook, int32_t unit) {
  static const char *kinds[] = {"wait_reduction", "optimizer",   "broadcast",
                                "gather",         "start_gather", "wait_gather",
                                "release",        "place_grads",  "start_reduction"};
  for (const mfsdp_program_hook &h : p.hooks) {
    if (h.hook != hook || h.unit != unit)
      continue;
    std::string out;
    for (int32_t i = h.first_op; i < h.first_op + h.num_ops; ++i)
      out += std::string(out.empty() ? "" : ", ") + kinds[p.ops[i].kind] + " u" +
             std::to_string(p.ops[i].unit);
    return out;
  }
  return "(no entry)";
}

// The forward and backward hooks of the same step: ZeRO-2 keeps the copies
// (each pre hook only makes sure of its unit); each unit's reduction starts
// in its post_backward. This hand-built step reads the gradient shards only
// in the optimizer phase, so the schedule waits for every reduction there
// (the runtime keeps one in flight: a start lands the one before).
TEST(RuntimeProgram, HooksFollowTheSchedule) {
  Plan plan;
  Step s = threeUnits();
  OverlapOptions o;
  o.prefetch = 1;
  scheduleOverlap(s, o);
  const RuntimeProgram p = lowerStepProgram(s, plan.plan);
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(p.hooks.size(), 1u + 3 * 4);
  EXPECT_EQ(hookText(p, MFSDP_HOOK_PRE_FORWARD, 0), "wait_gather u0");
  EXPECT_EQ(hookText(p, MFSDP_HOOK_POST_FORWARD, 0), "");
  EXPECT_EQ(hookText(p, MFSDP_HOOK_PRE_BACKWARD, 2), "wait_gather u2, place_grads u2");
  EXPECT_EQ(hookText(p, MFSDP_HOOK_POST_BACKWARD, 2), "start_reduction u2");
  EXPECT_EQ(hookText(p, MFSDP_HOOK_POST_BACKWARD, 1), "start_reduction u1");
  EXPECT_EQ(hookText(p, MFSDP_HOOK_POST_BACKWARD, 0), "start_reduction u0");
  const mfsdp_program_hook &opt = p.hooks.front();
  ASSERT_EQ(opt.hook, MFSDP_HOOK_OPTIMIZER_STEP);
  EXPECT_EQ(p.ops[opt.first_op].kind, MFSDP_PROGRAM_WAIT_REDUCTION);
}

// ZeRO-3 with prefetch: each forward gather starts one unit ahead and the
// copy is freed in post_forward; the backward gather of the unit before
// starts in pre_backward.
/// The step of threeUnits() under ZeRO-3: per group a gathered buffer,
/// gathered before each phase's compute and freed after it.
Step zero3Step() {
  Step s = threeUnits();
  // ZeRO-3's gathers: per group a gathered buffer, gathered before each
  // phase's compute and freed after it.
  Step z;
  z.name = s.name;
  z.world = s.world;
  z.buffers = s.buffers;
  std::vector<int64_t> fwdBuf, bwdBuf;
  for (int64_t g = 0; g < 3; ++g)
    for (int k = 0; k < 2; ++k) {
      Buffer b;
      b.name = (k ? "bwd gathered g" : "fwd gathered g") + std::to_string(g);
      b.bytes = 128;
      z.buffers.push_back(b);
      (k ? bwdBuf : fwdBuf).push_back(static_cast<int64_t>(z.buffers.size()) - 1);
    }
  for (const Op &op : s.ops) {
    if (op.kind == OpKind::Compute) {
      const bool fwd = op.phase == Phase::Forward;
      const int64_t g = op.group, buf = fwd ? fwdBuf[g] : bwdBuf[g];
      Op alloc = make(OpKind::Alloc, op.phase, "alloc", -1, g, {}, {buf});
      z.ops.push_back(alloc);
      z.ops.push_back(collective(CollKind::AllGather, op.phase,
                                 std::string(fwd ? "gather" : "bwd gather") + " g" +
                                     std::to_string(g),
                                 g, {}, g, buf));
      z.ops.push_back(op);
      z.ops.push_back(make(OpKind::Free, op.phase, "free", -1, g, {}, {buf}));
      continue;
    }
    if (op.phase == Phase::Optimizer && op.kind == OpKind::Collective)
      continue; // ZeRO-3 gathers at the next use
    z.ops.push_back(op);
  }
  return z;
}

TEST(RuntimeProgram, HooksPrefetchUnderZero3) {
  Plan plan;
  plan.plan.zero = 3;
  Step z = zero3Step();
  OverlapOptions o;
  o.prefetch = 1;
  scheduleOverlap(z, o);
  const RuntimeProgram p = lowerStepProgram(z, plan.plan);
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(hookText(p, MFSDP_HOOK_PRE_FORWARD, 0),
            "start_gather u0, start_gather u1, wait_gather u0");
  EXPECT_EQ(hookText(p, MFSDP_HOOK_POST_FORWARD, 0), "release u0");
  EXPECT_EQ(hookText(p, MFSDP_HOOK_PRE_FORWARD, 2), "wait_gather u2");
  EXPECT_EQ(hookText(p, MFSDP_HOOK_PRE_BACKWARD, 1),
            "start_gather u0, wait_gather u1, place_grads u1");
}

// Another schedule, another program: two groups ahead, pre_forward(0)
// starts three units' gathers; with no prefetch each hook gathers its own.
TEST(RuntimeProgram, HooksFollowThePrefetchDepth) {
  Plan plan;
  plan.plan.zero = 3;
  for (int64_t depth : {0, 2}) {
    Step z = zero3Step();
    OverlapOptions o;
    o.prefetch = depth;
    scheduleOverlap(z, o);
    const RuntimeProgram p = lowerStepProgram(z, plan.plan);
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(hookText(p, MFSDP_HOOK_PRE_FORWARD, 0),
              depth == 2 ? "start_gather u0, start_gather u1, start_gather u2, wait_gather u0"
                         : "start_gather u0, wait_gather u0")
        << "depth " << depth;
    EXPECT_EQ(hookText(p, MFSDP_HOOK_PRE_FORWARD, 1),
              depth == 2 ? "wait_gather u1" : "start_gather u1, wait_gather u1")
        << "depth " << depth;
  }
}

// A gather group of two units runs the group's work in its first unit's
// pre hooks and its last unit's post hooks; what the step puts between two
// units of the group goes with the unit before (this unscheduled step
// reduces each unit, synchronously, right after its backward).
TEST(RuntimeProgram, HooksOfAGroupOfUnits) {
  Plan plan;
  Step s = threeUnits();
  for (Op &op : s.ops)
    if (op.group == 2)
      op.group = 1;
  const RuntimeProgram p = lowerStepProgram(s, plan.plan);
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(hookText(p, MFSDP_HOOK_PRE_BACKWARD, 2), "wait_gather u2, place_grads u2");
  EXPECT_EQ(hookText(p, MFSDP_HOOK_POST_BACKWARD, 2),
            "start_reduction u2, wait_reduction u2");
  EXPECT_EQ(hookText(p, MFSDP_HOOK_POST_BACKWARD, 1),
            "start_reduction u1, wait_reduction u1");
  EXPECT_EQ(hookText(p, MFSDP_HOOK_PRE_BACKWARD, 1), "wait_gather u1, place_grads u1");
}

/// `one` (a step of one microbatch, not yet scheduled) accumulating `n`
/// microbatches: its forward and backward ops `n` times, the reductions in
/// the last only, then its optimizer phase.
Step microbatched(const Step &one, int64_t n) {
  Step s = one;
  s.microbatches = n;
  s.ops.clear();
  for (int64_t m = 0; m < n; ++m)
    for (const Op &op : one.ops)
      if (op.phase != Phase::Optimizer &&
          (m + 1 == n || op.kind != OpKind::Collective ||
           op.coll != CollKind::ReduceScatter))
        s.ops.push_back(op);
  for (const Op &op : one.ops)
    if (op.phase == Phase::Optimizer)
      s.ops.push_back(op);
  return s;
}

/// Every forward and backward hook of `p`, one line each.
std::string allHooks(const RuntimeProgram &p, int32_t units) {
  std::string out;
  for (int32_t u = 0; u < units; ++u)
    for (int32_t h = MFSDP_HOOK_PRE_FORWARD; h <= MFSDP_HOOK_POST_BACKWARD; ++h)
      out += std::to_string(h) + " u" + std::to_string(u) + ": " + hookText(p, h, u) + "\n";
  return out;
}

// Microbatches run the same hooks: the program of a step that accumulates
// two microbatches (the first with no reduction) is the program of its one
// microbatch, for each prefetch depth (the schedule prefetches within a
// microbatch).
TEST(RuntimeProgram, HooksOfMicrobatches) {
  Plan plan;
  plan.plan.zero = 3;
  for (int64_t depth : {0, 1, 2}) {
    OverlapOptions o;
    o.prefetch = depth;
    Step one = zero3Step();
    Step two = microbatched(one, 2);
    scheduleOverlap(one, o);
    scheduleOverlap(two, o);
    const RuntimeProgram p1 = lowerStepProgram(one, plan.plan);
    const RuntimeProgram p2 = lowerStepProgram(two, plan.plan);
    ASSERT_EQ(p1.error, "") << "depth " << depth;
    ASSERT_EQ(p2.error, "") << "depth " << depth;
    EXPECT_EQ(p2.hooks.size(), 1u + 3 * 4) << "depth " << depth;
    EXPECT_EQ(allHooks(p2, 3), allHooks(p1, 3)) << "depth " << depth;
  }
}

// Microbatches whose hooks differ cannot run one program: the error names
// the microbatch, the hook and the op.
TEST(RuntimeProgram, HooksOfMicrobatchesMustAgree) {
  Plan plan;
  plan.plan.zero = 3;
  Step two = microbatched(zero3Step(), 2);
  // The first microbatch does not gather unit 1 for its backward.
  auto bwd = std::find_if(two.ops.begin(), two.ops.end(),
                          [](const Op &op) { return op.name == "bwd gather g1"; });
  ASSERT_NE(bwd, two.ops.end());
  two.ops.erase(bwd);
  EXPECT_EQ(lowerStepProgram(two, plan.plan).error,
            "microbatch 0's pre_backward of unit 1 runs wait_gather of unit 1 ('the unit "
            "whole for its hook') where the last microbatch's runs start_gather of unit 1 "
            "('bwd gather g1'): the microbatches' hooks must agree (one program runs "
            "them all)");
  // The first microbatch reduces.
  Step reducing = microbatched(zero3Step(), 2);
  auto first = std::find_if(reducing.ops.begin(), reducing.ops.end(),
                            [](const Op &op) { return op.name == "backward u1"; });
  ASSERT_NE(first, reducing.ops.end());
  reducing.ops.insert(first + 1, collective(CollKind::ReduceScatter, Phase::Backward,
                                            "early reduce_scatter g1", 1,
                                            {"u1.w", "u1.b"}, 1, 4));
  EXPECT_EQ(lowerStepProgram(reducing, plan.plan).error,
            "microbatch 0's post_backward of unit 1 runs start_reduction of unit 1 "
            "('early reduce_scatter g1'); only the last microbatch reduces (the others "
            "accumulate under no-sync)");
  // The step says more microbatches than its ops run.
  Step short3 = microbatched(zero3Step(), 2);
  short3.microbatches = 3;
  EXPECT_EQ(lowerStepProgram(short3, plan.plan).error,
            "the step says 3 microbatches but its ops run 2 forward and backward passes");
}

// A unit whose gradients no collective reduces cannot be run by the hooks.
TEST(RuntimeProgram, HooksRefuseAnUnreducedUnit) {
  Plan plan;
  Step s = threeUnits();
  s.ops.erase(std::remove_if(s.ops.begin(), s.ops.end(),
                             [](const Op &op) { return op.name == "reduce_scatter g1"; }),
              s.ops.end());
  const RuntimeProgram p = lowerStepProgram(s, plan.plan);
  EXPECT_EQ(p.error, "unit 1 ('?') has parameters whose gradients no collective of "
                     "the schedule's backward reduces");
}

} // namespace

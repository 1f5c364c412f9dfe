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
#include <set>
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

/// `s` scheduled with a prefetch of one unit and `fill` (landing order
/// when negative).
Step overlapped(Step s, int64_t fill = -1) {
  OverlapOptions o;
  o.prefetch = 1;
  o.optimizerFill = fill;
  scheduleOverlap(s, o);
  return s;
}

RuntimeProgram scheduled(int64_t fill, const Plan &plan) {
  return lowerOptimizerProgram(overlapped(threeUnits(), fill), plan.plan);
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
  static const char *kinds[] = {"wait_reduction", "optimizer",    "broadcast",
                                "gather",         "start_gather",  "wait_gather",
                                "release",        "place_grads",   "start_reduction",
                                "unpack",         "pack"};
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
  const Step s = overlapped(threeUnits());
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
/// A copy of group `g`'s row shards (`compute` "copy") reading `from`:
/// out of the staging a gather fills into the gathered buffer `to` (an
/// unpack), or of the gradients (a pack).
Op copyOp(Phase phase, std::string name, int64_t g, int64_t from, int64_t to = -1) {
  Op op = make(OpKind::Compute, phase, std::move(name), -1, g, {from},
               to >= 0 ? std::vector<int64_t>{to} : std::vector<int64_t>{});
  op.compute = "copy";
  return op;
}

/// The step of threeUnits() under ZeRO-3: per group a gathered buffer,
/// gathered before each phase's compute and freed after it. Group 2 (two
/// row shards, per_param) gathers them into a staging buffer and copies
/// them out into its gathered buffer, and copies its gradients before
/// their reduction, as mfsdp-build-step does;
/// a plan that stages unit 2 (BucketedPlan) runs them as unpack and pack.
Step zero3Step() {
  Step s = threeUnits();
  // ZeRO-3's gathers: per group a gathered buffer, gathered before each
  // phase's compute and freed after it.
  Step z;
  z.name = s.name;
  z.world = s.world;
  z.buffers = s.buffers;
  std::vector<int64_t> fwdBuf, bwdBuf, staging;
  for (int64_t g = 0; g < 3; ++g)
    for (int k = 0; k < 2; ++k) {
      Buffer b;
      b.name = (k ? "bwd gathered g" : "fwd gathered g") + std::to_string(g);
      b.bytes = 128;
      z.buffers.push_back(b);
      (k ? bwdBuf : fwdBuf).push_back(static_cast<int64_t>(z.buffers.size()) - 1);
    }
  for (int k = 0; k < 2; ++k) { // group 2's, forward and backward
    Buffer b;
    b.name = k ? "bwd staging g2" : "fwd staging g2";
    b.bytes = 128;
    z.buffers.push_back(b);
    staging.push_back(static_cast<int64_t>(z.buffers.size()) - 1);
  }
  for (const Op &op : s.ops) {
    if (op.kind == OpKind::Compute) {
      const bool fwd = op.phase == Phase::Forward;
      const int64_t g = op.group, buf = fwd ? fwdBuf[g] : bwdBuf[g];
      const int64_t stage = g == 2 ? staging[fwd ? 0 : 1] : -1;
      if (stage >= 0)
        z.ops.push_back(make(OpKind::Alloc, op.phase, "alloc staging", -1, g, {}, {stage}));
      Op alloc = make(OpKind::Alloc, op.phase, "alloc", -1, g, {}, {buf});
      z.ops.push_back(alloc);
      z.ops.push_back(collective(CollKind::AllGather, op.phase,
                                 std::string(fwd ? "gather" : "bwd gather") + " g" +
                                     std::to_string(g),
                                 g, {}, g, stage >= 0 ? stage : buf));
      if (stage >= 0) {
        z.ops.push_back(
            copyOp(op.phase, std::string(fwd ? "" : "bwd ") + "unpack g2", 2, stage, buf));
        z.ops.push_back(make(OpKind::Free, op.phase, "free staging", -1, g, {}, {stage}));
      }
      z.ops.push_back(op);
      z.ops.push_back(make(OpKind::Free, op.phase, "free", -1, g, {}, {buf}));
      continue;
    }
    if (op.phase == Phase::Optimizer && op.kind == OpKind::Collective)
      continue; // ZeRO-3 gathers at the next use
    if (op.kind == OpKind::Collective && op.group == 2)
      z.ops.push_back(copyOp(op.phase, "pack g2", 2, op.reads.front()));
    z.ops.push_back(op);
  }
  return z;
}

TEST(RuntimeProgram, HooksPrefetchUnderZero3) {
  Plan plan;
  plan.plan.zero = 3;
  const RuntimeProgram p = lowerStepProgram(overlapped(zero3Step()), plan.plan);
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(hookText(p, MFSDP_HOOK_PRE_FORWARD, 0),
            "start_gather u0, start_gather u1, wait_gather u0");
  EXPECT_EQ(hookText(p, MFSDP_HOOK_POST_FORWARD, 0), "release u0");
  EXPECT_EQ(hookText(p, MFSDP_HOOK_PRE_FORWARD, 2), "wait_gather u2");
  EXPECT_EQ(hookText(p, MFSDP_HOOK_PRE_BACKWARD, 1),
            "start_gather u0, wait_gather u1, place_grads u1");
}

/// `plan` with unit 2's two row shards (u2.w, u2.frozen) in one bucket.
struct BucketedPlan : Plan {
  const int32_t members[2] = {3, 4};
  mfsdp_bucket bucket{2, MFSDP_ROW_SHARD, 2, members};
  BucketedPlan() {
    plan.zero = 3;
    plan.num_buckets = 1;
    plan.buckets = &bucket;
  }
};

// A unit with a row-shard bucket gathers every rank's chunk into staging
// and reduces from it: each wait for its gathers is followed by its
// unpack, each start of its reduction preceded by its pack, in the same
// hook; the other units' hooks are as without buckets.
TEST(RuntimeProgram, HooksPackAndUnpackBuckets) {
  BucketedPlan plan;
  for (int64_t depth : {0, 1}) {
    Step z = zero3Step();
    OverlapOptions o;
    o.prefetch = depth;
    scheduleOverlap(z, o);
    const RuntimeProgram p = lowerStepProgram(z, plan.plan);
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(hookText(p, MFSDP_HOOK_PRE_FORWARD, 2),
              depth ? "wait_gather u2, unpack u2" : "start_gather u2, wait_gather u2, unpack u2")
        << depth;
    EXPECT_EQ(hookText(p, MFSDP_HOOK_PRE_BACKWARD, 2),
              "start_gather u2, " + std::string(depth ? "start_gather u1, " : "") +
                  "wait_gather u2, unpack u2, place_grads u2")
        << depth;
    EXPECT_EQ(hookText(p, MFSDP_HOOK_POST_BACKWARD, 2), "pack u2, start_reduction u2") << depth;
    EXPECT_EQ(hookText(p, MFSDP_HOOK_PRE_BACKWARD, 1),
              std::string(depth ? "" : "start_gather u1, ") +
                  (depth ? "start_gather u0, " : "") + "wait_gather u1, place_grads u1")
        << depth;
    EXPECT_EQ(hookText(p, MFSDP_HOOK_POST_BACKWARD, 1), "start_reduction u1") << depth;
  }
}

// The pack and unpack of a staged unit come from the step's copies: a step
// without them (one built with flat rows) is refused, naming the unit, the
// hook and what is missing; a copy that reads nothing cannot say which it
// is. A plan that does not stage the unit lowers the copies to nothing.
TEST(RuntimeProgram, StagedUnitsNeedTheStepsCopies) {
  BucketedPlan plan;
  auto without = [](const std::string &name) {
    Step z = zero3Step();
    z.ops.erase(std::remove_if(z.ops.begin(), z.ops.end(),
                               [&](const Op &op) { return op.name == name; }),
                z.ops.end());
    return overlapped(z);
  };
  RuntimeProgram p = lowerStepProgram(without("unpack g2"), plan.plan);
  EXPECT_EQ(p.error,
            "the step waits for the gathers of unit 2 in the pre_forward of unit 2 but copies "
            "nothing out of them after: the library gathers the unit's row shards into "
            "staging (row-shard buckets), which a copy of the step unpacks (build the "
            "step with row-layout per_param)");
  p = lowerStepProgram(without("pack g2"), plan.plan);
  EXPECT_EQ(p.error,
            "the step starts the reduction of unit 2 in the post_backward of unit 2 "
            "with no copy into it before, in that hook: the library reduces the unit's row "
            "shards from staging (row-shard buckets), which a copy of the step packs (build "
            "the step with row-layout per_param)");
  Step blind = zero3Step();
  for (Op &op : blind.ops)
    if (op.name == "pack g2")
      op.reads.clear();
  p = lowerStepProgram(overlapped(blind), plan.plan);
  EXPECT_EQ(p.error, "'pack g2' copies and reads no buffer: the lowering tells an unpack "
                     "(it reads a gathered buffer) from a pack (the gradients) by what it "
                     "reads");
  // Unit 2 not staged: the copies run nothing.
  Plan unstaged;
  unstaged.plan.zero = 3;
  p = lowerStepProgram(overlapped(zero3Step()), unstaged.plan);
  ASSERT_EQ(p.error, "");
  for (const ProgramOp &op : p.ops)
    EXPECT_TRUE(op.kind != MFSDP_PROGRAM_PACK && op.kind != MFSDP_PROGRAM_UNPACK);
}

// Without origins (the verifier's lowering) the program is the same but
// for the texts naming what each op is lowered from; with them, every op
// names its step op, a pack or unpack the step's copy it is lowered from.
TEST(RuntimeProgram, OriginsOnlyName) {
  BucketedPlan plan;
  const Step z = overlapped(zero3Step());
  const RuntimeProgram with = lowerStepProgram(z, plan.plan, {}, /*origins=*/true);
  const RuntimeProgram without = lowerStepProgram(z, plan.plan, {}, /*origins=*/false);
  ASSERT_EQ(with.error, "");
  ASSERT_EQ(without.error, "");
  ASSERT_EQ(with.ops.size(), without.ops.size());
  ASSERT_EQ(with.hooks.size(), without.hooks.size());
  for (size_t h = 0; h < with.hooks.size(); ++h) {
    EXPECT_EQ(with.hooks[h].hook, without.hooks[h].hook) << h;
    EXPECT_EQ(with.hooks[h].unit, without.hooks[h].unit) << h;
    EXPECT_EQ(with.hooks[h].first_op, without.hooks[h].first_op) << h;
    EXPECT_EQ(with.hooks[h].num_ops, without.hooks[h].num_ops) << h;
  }
  std::set<std::string> packs, unpacks;
  for (size_t i = 0; i < with.ops.size(); ++i) {
    const ProgramOp &a = with.ops[i], &b = without.ops[i];
    EXPECT_EQ(a.kind, b.kind) << i;
    EXPECT_EQ(a.unit, b.unit) << i;
    EXPECT_EQ(a.group, b.group) << i;
    EXPECT_EQ(a.optimizer, b.optimizer) << i;
    EXPECT_EQ(a.onlyRank, b.onlyRank) << i;
    EXPECT_EQ(a.params, b.params) << i;
    EXPECT_NE(a.from, "") << i;
    EXPECT_EQ(b.from, "") << i;
    if (a.kind == MFSDP_PROGRAM_PACK)
      packs.insert(a.from);
    if (a.kind == MFSDP_PROGRAM_UNPACK)
      unpacks.insert(a.from);
  }
  EXPECT_EQ(packs, (std::set<std::string>{"pack g2"}));
  EXPECT_EQ(unpacks, (std::set<std::string>{"unpack g2", "bwd unpack g2"}));
}

// A released program's view is the view, holding its own parameters and
// hooks (one array), and the program is empty: the view alone stays valid.
TEST(RuntimeProgram, ReleasedViewOwnsItsData) {
  BucketedPlan plan;
  RuntimeProgram p = lowerStepProgram(overlapped(zero3Step()), plan.plan);
  ASSERT_EQ(p.error, "");
  RuntimeProgram::View before;
  p.view(before);
  std::vector<std::vector<int32_t>> params;
  for (const ProgramOp &op : p.ops)
    params.push_back(op.params);
  const std::vector<mfsdp_program_hook> hooks = p.hooks;
  RuntimeProgram::View after;
  p.release(after);
  EXPECT_TRUE(p.ops.empty());
  EXPECT_TRUE(p.hooks.empty());
  ASSERT_EQ(after.program.num_ops, before.program.num_ops);
  ASSERT_EQ(after.program.num_hooks, static_cast<int32_t>(hooks.size()));
  for (int32_t i = 0; i < after.program.num_ops; ++i) {
    const mfsdp_program_op &a = after.program.ops[i], &b = before.ops[i];
    EXPECT_EQ(a.kind, b.kind) << i;
    EXPECT_EQ(a.unit, b.unit) << i;
    EXPECT_EQ(a.group, b.group) << i;
    EXPECT_EQ(a.optimizer, b.optimizer) << i;
    EXPECT_EQ(a.only_rank, b.only_rank) << i;
    ASSERT_EQ(a.num_params, static_cast<int32_t>(params[i].size())) << i;
    EXPECT_EQ(std::vector<int32_t>(a.params, a.params + a.num_params), params[i]) << i;
    if (a.num_params > 0) { // its own copy, in the view's one array
      EXPECT_TRUE(a.params >= after.params.data() &&
                  a.params < after.params.data() + after.params.size())
          << i;
    }
  }
  for (size_t h = 0; h < hooks.size(); ++h) {
    EXPECT_EQ(after.program.hooks[h].first_op, hooks[h].first_op) << h;
    EXPECT_EQ(after.program.hooks[h].num_ops, hooks[h].num_ops) << h;
  }
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
          (m + 1 == n ||
           ((op.kind != OpKind::Collective || op.coll != CollKind::ReduceScatter) &&
            op.name != "pack g2")))
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

//===----------------------------------------------------------------------===//
// verifyProgram: a lowered program passes; each corruption of it is the
// checker's first violation, named by hook and op.
//===----------------------------------------------------------------------===//

namespace {

/// A lowered program whose tables the tests corrupt.
struct Lowered {
  Step step;
  RuntimeProgram program;
  RuntimeProgram::View view;
  std::string check(const mfsdp_plan &plan) {
    program.view(view);
    const ProgramIssue issue = verifyProgram(step, plan, view.program);
    // The op is named where the message names one ("op N (...)").
    if (issue.op >= 0) {
      EXPECT_NE(issue.message.find("op " + std::to_string(issue.op) + " ("), std::string::npos)
          << issue.message;
    }
    return issue.message;
  }
  /// The index of the `n`-th op of `kind` on `unit` in `hook` of `hookUnit`.
  int32_t find(int32_t hook, int32_t hookUnit, int32_t kind, int32_t unit, int n = 0) {
    for (const mfsdp_program_hook &h : program.hooks)
      if (h.hook == hook && h.unit == hookUnit)
        for (int32_t i = h.first_op; i < h.first_op + h.num_ops; ++i)
          if (program.ops[i].kind == kind && program.ops[i].unit == unit && n-- == 0)
            return i;
    return -1;
  }
  mfsdp_program_hook &entry(int32_t hook, int32_t unit) {
    for (mfsdp_program_hook &h : program.hooks)
      if (h.hook == hook && h.unit == unit)
        return h;
    static mfsdp_program_hook none{};
    ADD_FAILURE() << "no entry for hook " << hook << " of unit " << unit;
    return none;
  }
};

Lowered lowered(Step s, const mfsdp_plan &plan, int64_t prefetch) {
  OverlapOptions o;
  o.prefetch = prefetch;
  scheduleOverlap(s, o);
  Lowered l;
  l.step = std::move(s);
  l.program = lowerStepProgram(l.step, plan);
  EXPECT_EQ(l.program.error, "");
  return l;
}

} // namespace

// What lowerStepProgram lowers passes, under ZeRO-2 and ZeRO-3 at each
// prefetch depth, with microbatches too.
TEST(VerifyProgram, LoweredProgramsPass) {
  Plan zero2;
  Plan zero3;
  zero3.plan.zero = 3;
  for (int64_t depth : {0, 1, 2}) {
    EXPECT_EQ(lowered(threeUnits(), zero2.plan, depth).check(zero2.plan), "") << depth;
    EXPECT_EQ(lowered(zero3Step(), zero3.plan, depth).check(zero3.plan), "") << depth;
    EXPECT_EQ(lowered(microbatched(zero3Step(), 2), zero3.plan, depth).check(zero3.plan), "")
        << depth;
  }
}

// The bucket's unpack after each wait for its gather, its pack before the
// start of its reduction: a program without one is caught, naming the op.
TEST(VerifyProgram, BucketsPackedAndUnpacked) {
  BucketedPlan plan;
  for (int64_t depth : {0, 1, 2})
    EXPECT_EQ(lowered(zero3Step(), plan.plan, depth).check(plan.plan), "") << depth;
  {
    Lowered l = lowered(zero3Step(), plan.plan, 1);
    const int32_t unpack = l.find(MFSDP_HOOK_PRE_BACKWARD, 2, MFSDP_PROGRAM_UNPACK, 2);
    const int32_t wait = l.find(MFSDP_HOOK_PRE_BACKWARD, 2, MFSDP_PROGRAM_WAIT_GATHER, 2);
    ASSERT_GE(unpack, 0);
    l.program.ops[unpack].kind = MFSDP_PROGRAM_PLACE_GRADS;
    EXPECT_EQ(l.check(plan.plan),
              "pre_backward of unit 2: op " + std::to_string(wait) +
                  " (wait_gather of unit 2) waits for the unit's gather, whose row-shard "
                  "buckets (bucket 0, ...) land in staging, but no unpack of the unit "
                  "follows in the hook");
  }
  {
    Lowered l = lowered(zero3Step(), plan.plan, 1);
    const int32_t pack = l.find(MFSDP_HOOK_POST_BACKWARD, 2, MFSDP_PROGRAM_PACK, 2);
    const int32_t start = l.find(MFSDP_HOOK_POST_BACKWARD, 2, MFSDP_PROGRAM_START_REDUCTION, 2);
    ASSERT_GE(pack, 0);
    std::swap(l.program.ops[pack], l.program.ops[start]);
    EXPECT_EQ(l.check(plan.plan),
              "post_backward of unit 2: op " + std::to_string(pack) +
                  " (start_reduction of unit 2) starts the reduction of row-shard buckets "
                  "(bucket 0, ...) that no pack of the unit has packed in this hook");
  }
}

TEST(VerifyProgram, HookEntries) {
  Plan plan;
  plan.plan.zero = 3;
  {
    Lowered l = lowered(zero3Step(), plan.plan, 1);
    l.program.hooks.push_back(l.entry(MFSDP_HOOK_PRE_FORWARD, 1));
    EXPECT_EQ(l.check(plan.plan),
              "hook entry 13 (pre_forward of unit 1) is a second entry for that hook");
  }
  {
    Lowered l = lowered(zero3Step(), plan.plan, 1);
    l.entry(MFSDP_HOOK_POST_BACKWARD, 2).unit = 7;
    EXPECT_EQ(l.check(plan.plan), "hook entry 12 (post_backward of unit 7) names unit 7, "
                                  "which is not one of the plan's 3 units");
  }
  {
    Lowered l = lowered(zero3Step(), plan.plan, 1);
    l.entry(MFSDP_HOOK_POST_FORWARD, 0).hook = MFSDP_HOOK_PRE_FORWARD;
    EXPECT_EQ(l.check(plan.plan),
              "hook entry 2 (pre_forward of unit 0) is a second entry for that hook");
  }
  {
    Lowered l = lowered(zero3Step(), plan.plan, 1);
    l.entry(MFSDP_HOOK_PRE_BACKWARD, 1).num_ops = 1000;
    EXPECT_EQ(l.check(plan.plan),
              "hook entry 7 (pre_backward of unit 1) runs ops [" +
                  std::to_string(l.entry(MFSDP_HOOK_PRE_BACKWARD, 1).first_op) + ", " +
                  std::to_string(l.entry(MFSDP_HOOK_PRE_BACKWARD, 1).first_op + 1000) +
                  "), outside the program's " + std::to_string(l.program.ops.size()) +
                  " ops");
  }
}

// Each unit whole before its compute, released after it.
TEST(VerifyProgram, UnitsWholeForTheirCompute) {
  Plan plan;
  plan.plan.zero = 3;
  {
    // pre_forward(1) waits for nothing: its prefetched gather is never
    // waited for before its compute.
    Lowered l = lowered(zero3Step(), plan.plan, 1);
    const int32_t wait = l.find(MFSDP_HOOK_PRE_FORWARD, 1, MFSDP_PROGRAM_WAIT_GATHER, 1);
    ASSERT_GE(wait, 0);
    l.program.ops[wait].kind = MFSDP_PROGRAM_PLACE_GRADS;
    EXPECT_EQ(l.check(plan.plan),
              "pre_forward of unit 1: op " + std::to_string(wait) +
                  " (place_grads of unit 1) hands out gradient buffers outside the "
                  "backward hooks");
    l.program.ops[wait].kind = MFSDP_PROGRAM_RELEASE;
    EXPECT_EQ(l.check(plan.plan),
              "pre_forward of unit 1: op " + std::to_string(wait) +
                  " (release of unit 1) releases the unit while its gather (op " +
                  std::to_string(l.find(MFSDP_HOOK_PRE_FORWARD, 0,
                                        MFSDP_PROGRAM_START_GATHER, 1)) +
                  ") is in flight");
  }
  {
    // The release of unit 0 moved into its own pre_forward.
    Lowered l = lowered(zero3Step(), plan.plan, 0);
    const int32_t wait = l.find(MFSDP_HOOK_PRE_FORWARD, 0, MFSDP_PROGRAM_WAIT_GATHER, 0);
    const int32_t release = l.find(MFSDP_HOOK_POST_FORWARD, 0, MFSDP_PROGRAM_RELEASE, 0);
    ASSERT_GE(release, 0);
    std::swap(l.program.ops[wait], l.program.ops[release]);
    EXPECT_EQ(l.check(plan.plan),
              "pre_forward of unit 0: op " + std::to_string(wait) +
                  " (release of unit 0) releases the unit while its gather (op " +
                  std::to_string(wait - 1) + ") is in flight");
  }
  {
    // No wait_gather in pre_backward(2): unit 2 is not whole for its backward.
    Lowered l = lowered(zero3Step(), plan.plan, 0);
    const int32_t wait = l.find(MFSDP_HOOK_PRE_BACKWARD, 2, MFSDP_PROGRAM_WAIT_GATHER, 2);
    const int32_t start = l.find(MFSDP_HOOK_PRE_BACKWARD, 2, MFSDP_PROGRAM_START_GATHER, 2);
    ASSERT_GE(wait, 0);
    ASSERT_GE(start, 0);
    l.program.ops[wait].kind = MFSDP_PROGRAM_PLACE_GRADS;
    l.program.ops[start].kind = MFSDP_PROGRAM_PLACE_GRADS;
    EXPECT_EQ(l.check(plan.plan),
              "pre_backward of unit 2 leaves the unit not whole for its backward compute: "
              "no wait_gather of it has run since its copy was released after forward");
  }
}

// Every started gather and reduction waited for, once.
TEST(VerifyProgram, StartsAndWaits) {
  Plan plan;
  plan.plan.zero = 3;
  {
    Lowered l = lowered(zero3Step(), plan.plan, 1);
    const int32_t start = l.find(MFSDP_HOOK_POST_BACKWARD, 1, MFSDP_PROGRAM_START_REDUCTION, 1);
    ASSERT_GE(start, 0);
    l.program.ops[start].kind = MFSDP_PROGRAM_WAIT_REDUCTION;
    EXPECT_EQ(l.check(plan.plan),
              "post_backward of unit 1: op " + std::to_string(start) +
                  " (wait_reduction of unit 1) waits for a reduction that no op started");
  }
  {
    // The optimizer step's waits dropped: unit 0's reduction lands nowhere.
    Lowered l = lowered(zero3Step(), plan.plan, 1);
    mfsdp_program_hook &opt = l.entry(MFSDP_HOOK_OPTIMIZER_STEP, -1);
    while (l.program.ops[opt.first_op].kind == MFSDP_PROGRAM_WAIT_REDUCTION) {
      ++opt.first_op;
      --opt.num_ops;
    }
    const std::string error = l.check(plan.plan);
    EXPECT_NE(error.find("before the reduction of its unit lands (op "), std::string::npos)
        << error;
    EXPECT_EQ(error.rfind("optimizer_step: op ", 0), 0u) << error;
  }
  {
    // A reduction started twice.
    Lowered l = lowered(zero3Step(), plan.plan, 1);
    const int32_t start = l.find(MFSDP_HOOK_POST_BACKWARD, 2, MFSDP_PROGRAM_START_REDUCTION, 2);
    const int32_t other = l.find(MFSDP_HOOK_POST_BACKWARD, 1, MFSDP_PROGRAM_START_REDUCTION, 1);
    ASSERT_GE(other, 0);
    l.program.ops[other].unit = 2;
    EXPECT_EQ(l.check(plan.plan),
              "post_backward of unit 1: op " + std::to_string(other) +
                  " (start_reduction of unit 2) starts the unit's reduction a second time "
                  "(op " + std::to_string(start) + " started it)");
  }
  {
    // A gather started and never waited for: pre_forward(2) starts unit
    // 1's instead of its own (whose wait then gathers it in place).
    Lowered l = lowered(zero3Step(), plan.plan, 0);
    const int32_t start = l.find(MFSDP_HOOK_PRE_FORWARD, 2, MFSDP_PROGRAM_START_GATHER, 2);
    ASSERT_GE(start, 0);
    l.program.ops[start].unit = 1;
    EXPECT_EQ(l.check(plan.plan),
              "op " + std::to_string(start) +
                  " (start_gather of unit 1) starts a gather that no op of the forward "
                  "hooks waits for");
  }
  {
    // A gather of a unit that is whole: post_forward(0) gathers instead of
    // releasing.
    Lowered l = lowered(zero3Step(), plan.plan, 0);
    const int32_t release = l.find(MFSDP_HOOK_POST_FORWARD, 0, MFSDP_PROGRAM_RELEASE, 0);
    ASSERT_GE(release, 0);
    l.program.ops[release].kind = MFSDP_PROGRAM_START_GATHER;
    EXPECT_EQ(l.check(plan.plan),
              "post_forward of unit 0: op " + std::to_string(release) +
                  " (start_gather of unit 0) starts a gather of a unit that is whole "
                  "(gathered and not released)");
  }
}

// The optimizer step: each parameter once, by its op, after its reduction;
// ZeRO-1/2's gathers once per unit, after the update.
TEST(VerifyProgram, OptimizerStep) {
  Plan plan; // ZeRO-2
  {
    Lowered l = lowered(threeUnits(), plan.plan, 1);
    const int32_t sgd = l.find(MFSDP_HOOK_OPTIMIZER_STEP, -1, MFSDP_PROGRAM_OPTIMIZER, 2);
    ASSERT_GE(sgd, 0);
    l.program.ops[sgd].params = {0};
    EXPECT_EQ(l.check(plan.plan), "optimizer_step: op " + std::to_string(sgd) +
                                      " (optimizer of unit 2) steps 'u0.w', a parameter "
                                      "of unit 0");
    l.program.ops[sgd].params = {3, 3};
    EXPECT_EQ(l.check(plan.plan), "optimizer_step: op " + std::to_string(sgd) +
                                      " (optimizer of unit 2) steps 'u2.w' a second time "
                                      "in the step");
    l.program.ops[sgd].params = {};
    EXPECT_EQ(l.check(plan.plan),
              "optimizer_step: op " +
                  std::to_string(l.find(MFSDP_HOOK_OPTIMIZER_STEP, -1, MFSDP_PROGRAM_GATHER, 2)) +
                  " (gather of unit 2) gathers the unit before its parameter 'u2.w' is "
                  "stepped");
  }
  {
    Lowered l = lowered(threeUnits(), plan.plan, 1);
    // Landing order steps unit 2 first: its gather names unit 0 instead.
    const int32_t gather = l.find(MFSDP_HOOK_OPTIMIZER_STEP, -1, MFSDP_PROGRAM_GATHER, 2);
    ASSERT_GE(gather, 0);
    l.program.ops[gather].unit = 0;
    EXPECT_EQ(l.check(plan.plan), "optimizer_step: op " + std::to_string(gather) +
                                      " (gather of unit 0) gathers the unit before its "
                                      "parameter 'u0.w' is stepped");
  }
  {
    Lowered l = lowered(threeUnits(), plan.plan, 1);
    const int32_t gather = l.find(MFSDP_HOOK_OPTIMIZER_STEP, -1, MFSDP_PROGRAM_GATHER, 2);
    ASSERT_GE(gather, 0);
    l.program.ops[gather].kind = MFSDP_PROGRAM_BROADCAST_UPDATES;
    EXPECT_EQ(l.check(plan.plan), "the optimizer step does not gather unit 2's updated "
                                  "parameters (ZeRO-2)");
  }
  {
    // An owner's Muon on another rank: the owner would never step it.
    Lowered l = lowered(threeUnits(), plan.plan, 1);
    const int32_t muon = l.find(MFSDP_HOOK_OPTIMIZER_STEP, -1, MFSDP_PROGRAM_OPTIMIZER, 1);
    ASSERT_GE(muon, 0);
    ASSERT_EQ(l.program.ops[muon].onlyRank, 1);
    l.program.ops[muon].onlyRank = 0;
    EXPECT_EQ(l.check(plan.plan), "optimizer_step: op " + std::to_string(muon) +
                                      " (optimizer of unit 1) steps 'u1.w' on dp_shard rank "
                                      "0 alone, which does not own it (rank 1 does)");
  }
  {
    // ns_split over two replicas: a replica steps each owned matrix and
    // the others receive it; a program that broadcasts nothing leaves them
    // behind, and one that broadcasts before the step sends the old one.
    Plan split;
    split.plan.ns_split = 1;
    split.plan.dp_replicate = 2;
    split.plan.world = 4;
    Lowered l = lowered(threeUnits(), split.plan, 1);
    EXPECT_EQ(l.check(split.plan), "under ns_split no op broadcasts the updated 'u1.w' to "
                                   "the other replicas");
    const int32_t wait = l.program.hooks.front().first_op;
    ASSERT_EQ(l.program.hooks.front().hook, MFSDP_HOOK_OPTIMIZER_STEP);
    ProgramOp early;
    early.kind = MFSDP_PROGRAM_BROADCAST_UPDATES;
    early.unit = 1;
    early.params = {1};
    l.program.ops.insert(l.program.ops.begin() + wait, early);
    for (mfsdp_program_hook &h : l.program.hooks)
      if (h.hook == MFSDP_HOOK_OPTIMIZER_STEP)
        ++h.num_ops;
      else if (h.first_op >= wait)
        ++h.first_op;
    EXPECT_EQ(l.check(split.plan), "optimizer_step: op " + std::to_string(wait) +
                                       " (broadcast_updates of unit 1) broadcasts 'u1.w' "
                                       "before any op steps it");
  }
}

// Under ZeRO-3 the program allocates and frees the gathered copies in the
// step's order.
TEST(VerifyProgram, CopiesInTheStepsOrder) {
  Plan plan;
  plan.plan.zero = 3;
  Lowered l = lowered(zero3Step(), plan.plan, 0);
  // The step's forward gathers of groups 1 and 2 swapped (not the program's).
  auto g1 = std::find_if(l.step.ops.begin(), l.step.ops.end(),
                         [](const Op &op) { return op.name == "gather g1"; });
  auto g2 = std::find_if(l.step.ops.begin(), l.step.ops.end(),
                         [](const Op &op) { return op.name == "gather g2"; });
  ASSERT_NE(g1, l.step.ops.end());
  ASSERT_NE(g2, l.step.ops.end());
  std::swap(g1->group, g2->group);
  const int32_t start = l.find(MFSDP_HOOK_PRE_FORWARD, 1, MFSDP_PROGRAM_START_GATHER, 1);
  EXPECT_EQ(l.check(plan.plan),
            "pre_forward of unit 1: op " + std::to_string(start) +
                " (start_gather of unit 1) allocates group 1's forward gathered copy "
                "where the step allocates group 2's ('alloc')");
}

// Under ZeRO-3 a group of replicated tensors only is gathered nowhere in the
// step (the runtime copies them whole at the unit's wait): it has no
// gathered copy whose order the program must follow.
TEST(VerifyProgram, GroupGatheredNowhere) {
  Plan plan;
  plan.plan.zero = 3;
  // Unit 1: its matrix replicated and stepped by AdamW with its vector.
  plan.descs[1].placement = MFSDP_REPLICATE;
  plan.descs[1].optimizer = MFSDP_OPT_ADAMW;
  Step z = zero3Step();
  z.ops.erase(std::remove_if(z.ops.begin(), z.ops.end(),
                             [](const Op &op) {
                               if (op.name == "muon g1")
                                 return true;
                               if (op.group != 1 || op.phase == Phase::Optimizer)
                                 return false;
                               return op.kind == OpKind::Alloc || op.kind == OpKind::Free ||
                                      (op.kind == OpKind::Collective &&
                                       op.coll == CollKind::AllGather);
                             }),
              z.ops.end());
  for (int64_t depth : {0, 1})
    EXPECT_EQ(lowered(z, plan.plan, depth).check(plan.plan), "") << depth;
}

// Microbatches: each forward then backward; the next starts at the first
// forward op after a backward compute (an alloc of the forward phase), not
// at an op of the forward phase inside the backward.
TEST(Step, MicrobatchOf) {
  Step one = zero3Step();
  Step two = microbatched(one, 2);
  const std::vector<int64_t> of = microbatchOf(two);
  ASSERT_EQ(of.size(), two.ops.size());
  size_t firstOfSecond = 0;
  while (firstOfSecond < of.size() && of[firstOfSecond] == 0)
    ++firstOfSecond;
  size_t firstOps = 0; // the first microbatch: no reductions, no copy into one
  for (const Op &op : one.ops)
    firstOps += op.phase != Phase::Optimizer &&
                !(op.kind == OpKind::Collective && op.coll == CollKind::ReduceScatter) &&
                op.name != "pack g2";
  EXPECT_EQ(firstOfSecond, firstOps);
  EXPECT_EQ(two.ops[firstOfSecond].kind, OpKind::Alloc);
  EXPECT_EQ(of.back(), 1);
  // An alloc said to be of the forward phase inside the backward (as hand-
  // built steps have) starts nothing.
  Step odd = one;
  auto bwd = std::find_if(odd.ops.begin(), odd.ops.end(),
                          [](const Op &op) { return op.name == "backward u2"; });
  ASSERT_NE(bwd, odd.ops.end());
  odd.ops.insert(bwd + 1, make(OpKind::Alloc, Phase::Forward, "alloc", -1, 1, {}, {0}));
  for (int64_t m : microbatchOf(odd))
    EXPECT_EQ(m, 0);
}

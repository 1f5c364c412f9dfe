//===- DefaultProgramTest.cpp - The program of a plan that carries none ---===//
//
// mfsdp::runtime::completeProgram: the hooks a plan built by hand leaves
// out, derived as runtime/DefaultProgram.h says, and the compiler's memory
// plan replaying the same program as the runtime runs.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/DefaultProgram.h"
#include "mfsdp/runtime/ProgramHooks.h"
#include "mfsdp/step/RuntimeMemory.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace mfsdp;

namespace {

mfsdp_param_desc param(const char *name, int32_t unit, int32_t placement = MFSDP_ROW_SHARD,
                       int32_t optimizer = MFSDP_OPT_ADAMW, int32_t owner = 0) {
  mfsdp_param_desc d{};
  d.name = name;
  d.rows = 4;
  d.cols = 64;
  d.unit = unit;
  d.placement = placement;
  d.owner = owner;
  d.optimizer = optimizer;
  return d;
}

mfsdp_plan planOf(const std::vector<mfsdp_param_desc> &params, int32_t zero,
                  int32_t units) {
  mfsdp_plan p = MFSDP_PLAN_INITIALIZER;
  p.zero = zero;
  p.dp_shard = 2;
  p.dp_replicate = 1;
  p.world = 2;
  p.num_units = units;
  p.num_params = static_cast<int32_t>(params.size());
  p.params = params.data();
  return p;
}

/// A hook's ops as "kind unit" words, e.g. "wait_gather 1, start_gather 2".
std::string hookText(const mfsdp_program &g, int32_t hook, int32_t unit) {
  for (int32_t h = 0; h < g.num_hooks; ++h) {
    const mfsdp_program_hook &k = g.hooks[h];
    if (k.hook != hook || k.unit != unit)
      continue;
    std::string out;
    for (int32_t i = k.first_op; i < k.first_op + k.num_ops; ++i)
      out += (out.empty() ? "" : ", ") + std::string(runtime::programKindName(g.ops[i].kind)) +
             " " + std::to_string(g.ops[i].unit);
    return out;
  }
  return "(no entry)";
}

} // namespace

// Three units under ZeRO-3 with prefetch: the next unit's gather starts in
// each pre hook, each unit's reduction is waited for in the next
// post_backward (unit 0's by the optimizer step), and the optimizer step
// steps every parameter in one op after every reduction.
TEST(DefaultProgram, PrefetchOneUnitAhead) {
  std::vector<mfsdp_param_desc> ps = {param("a", 0), param("b", 1),
                                      param("frozen", 1, MFSDP_ROW_SHARD, MFSDP_OPT_NONE),
                                      param("c", 2)};
  const mfsdp_plan plan = planOf(ps, 3, 3);
  auto p = runtime::completeProgram(plan, nullptr, /*prefetch=*/true);
  ASSERT_TRUE(p->derived);
  const mfsdp_program &g = p->program;
  EXPECT_EQ(hookText(g, MFSDP_HOOK_PRE_FORWARD, 0), "wait_gather 0, start_gather 1");
  EXPECT_EQ(hookText(g, MFSDP_HOOK_PRE_FORWARD, 2), "wait_gather 2");
  EXPECT_EQ(hookText(g, MFSDP_HOOK_POST_FORWARD, 1), "release 1");
  EXPECT_EQ(hookText(g, MFSDP_HOOK_PRE_BACKWARD, 2),
            "wait_gather 2, place_grads 2, start_gather 1");
  EXPECT_EQ(hookText(g, MFSDP_HOOK_PRE_BACKWARD, 0), "wait_gather 0, place_grads 0");
  EXPECT_EQ(hookText(g, MFSDP_HOOK_POST_BACKWARD, 2), "start_reduction 2");
  EXPECT_EQ(hookText(g, MFSDP_HOOK_POST_BACKWARD, 1), "wait_reduction 2, start_reduction 1");
  EXPECT_EQ(hookText(g, MFSDP_HOOK_OPTIMIZER_STEP, -1),
            "wait_reduction 0, wait_reduction 1, wait_reduction 2, optimizer 0");
  // The optimizer op names every stepped parameter, of every unit; the
  // frozen one is not stepped.
  const mfsdp_program_op *opt = nullptr;
  for (int32_t i = 0; i < g.num_ops; ++i)
    if (g.ops[i].kind == MFSDP_PROGRAM_OPTIMIZER)
      opt = &g.ops[i];
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(std::vector<int32_t>(opt->params, opt->params + opt->num_params),
            (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(opt->only_rank, -1);
}

// Without prefetch (or under ZeRO-1/2, where prefetch means nothing) each
// reduction is waited for in its own post_backward; ZeRO-1/2 gather every
// unit's updated parameters after the update; a unit with a row-shard
// bucket is unpacked after each wait for its gather and packed before its
// reduction; ns_split broadcasts the owners' updated Muon matrices.
TEST(DefaultProgram, NoPrefetchBucketsAndZeroTwo) {
  std::vector<mfsdp_param_desc> ps = {
      param("a", 0), param("b", 0), param("m", 1, MFSDP_OWNER, MFSDP_OPT_MUON, 1)};
  mfsdp_plan plan = planOf(ps, 2, 2);
  plan.ns_split = 1;
  const int32_t members[2] = {0, 1};
  const mfsdp_bucket bucket = {0, MFSDP_ROW_SHARD, 2, members};
  plan.num_buckets = 1;
  plan.buckets = &bucket;
  auto p = runtime::completeProgram(plan, nullptr, /*prefetch=*/true);
  const mfsdp_program &g = p->program;
  EXPECT_EQ(hookText(g, MFSDP_HOOK_PRE_FORWARD, 0), "wait_gather 0, unpack 0");
  EXPECT_EQ(hookText(g, MFSDP_HOOK_PRE_FORWARD, 1), "wait_gather 1");
  EXPECT_EQ(hookText(g, MFSDP_HOOK_PRE_BACKWARD, 0), "wait_gather 0, unpack 0, place_grads 0");
  EXPECT_EQ(hookText(g, MFSDP_HOOK_POST_BACKWARD, 0),
            "pack 0, start_reduction 0, wait_reduction 0");
  EXPECT_EQ(hookText(g, MFSDP_HOOK_POST_BACKWARD, 1), "start_reduction 1, wait_reduction 1");
  EXPECT_EQ(hookText(g, MFSDP_HOOK_OPTIMIZER_STEP, -1),
            "wait_reduction 0, wait_reduction 1, optimizer 0, broadcast_updates 0, "
            "gather 0, gather 1");
  for (int32_t i = 0; i < g.num_ops; ++i) {
    if (g.ops[i].kind == MFSDP_PROGRAM_BROADCAST_UPDATES) {
      EXPECT_EQ(std::vector<int32_t>(g.ops[i].params, g.ops[i].params + g.ops[i].num_params),
                std::vector<int32_t>{2});
    }
  }
}

// A program that carries some hooks keeps them, at their indices; only
// what it leaves out is derived. One that carries everything is kept as it
// is.
TEST(DefaultProgram, CompletesWhatThePlanLeavesOut) {
  std::vector<mfsdp_param_desc> ps = {param("a", 0), param("b", 1)};
  const mfsdp_plan plan = planOf(ps, 3, 2);
  const int32_t both[1] = {1};
  const int32_t first[1] = {0};
  const mfsdp_program_op ops[3] = {
      {MFSDP_PROGRAM_WAIT_REDUCTION, 1, 0, MFSDP_OPT_NONE, -1, 0, nullptr},
      {MFSDP_PROGRAM_OPTIMIZER, 1, 0, MFSDP_OPT_ADAMW, -1, 1, both},
      {MFSDP_PROGRAM_OPTIMIZER, 0, 1, MFSDP_OPT_ADAMW, -1, 1, first}};
  const mfsdp_program_hook hook = {MFSDP_HOOK_OPTIMIZER_STEP, -1, 0, 3};
  const mfsdp_program optimizerOnly = {3, ops, 1, &hook};
  auto p = runtime::completeProgram(plan, &optimizerOnly, false);
  ASSERT_TRUE(p->derived);
  const mfsdp_program &g = p->program;
  EXPECT_EQ(hookText(g, MFSDP_HOOK_OPTIMIZER_STEP, -1),
            "wait_reduction 1, optimizer 1, optimizer 0");
  EXPECT_EQ(g.ops[1].params, both); // the library's list, not a copy
  EXPECT_EQ(hookText(g, MFSDP_HOOK_POST_BACKWARD, 1), "start_reduction 1, wait_reduction 1");
  int32_t optimizerEntries = 0;
  for (int32_t h = 0; h < g.num_hooks; ++h)
    optimizerEntries += g.hooks[h].hook == MFSDP_HOOK_OPTIMIZER_STEP;
  EXPECT_EQ(optimizerEntries, 1);

  auto whole = runtime::completeProgram(plan, &p->program, true);
  EXPECT_FALSE(whole->derived);
  EXPECT_EQ(whole->program.num_ops, g.num_ops);
  EXPECT_EQ(whole->program.num_hooks, g.num_hooks);
}

// The compiler's memory plan for a plan without a program replays the
// program the runtime derives: planned with that program given, it is the
// same plan, offset for offset, with and without prefetch.
TEST(DefaultProgram, MemoryPlanReplaysTheDerivedProgram) {
  std::vector<mfsdp_param_desc> ps = {param("a", 0), param("b", 1), param("c", 2),
                                      param("m", 1, MFSDP_OWNER, MFSDP_OPT_MUON, 1)};
  const mfsdp_plan plan = planOf(ps, 3, 3);
  for (int32_t prefetch : {0, 1}) {
    step::RuntimeMemoryPlan implicit = step::planRuntimeMemory(plan, false, 256, prefetch);
    auto derived = runtime::completeProgram(plan, nullptr, prefetch == 1);
    step::RuntimeMemoryPlan explicitly =
        step::planRuntimeMemory(plan, false, 256, prefetch, &derived->program);
    ASSERT_TRUE(implicit.error.empty()) << implicit.error;
    ASSERT_TRUE(explicitly.error.empty()) << explicitly.error;
    EXPECT_EQ(implicit.arenaBytes, explicitly.arenaBytes) << "prefetch " << prefetch;
    for (size_t i = 0; i < ps.size(); ++i) {
      EXPECT_EQ(implicit.params[i].full, explicitly.params[i].full);
      EXPECT_EQ(implicit.params[i].full_backward, explicitly.params[i].full_backward);
      EXPECT_EQ(implicit.params[i].grad, explicitly.params[i].grad);
    }
  }
  // Prefetch keeps a second unit's copy live: more arena than without.
  EXPECT_GT(step::planRuntimeMemory(plan, false, 256, 1).arenaBytes[0],
            step::planRuntimeMemory(plan, false, 256, 0).arenaBytes[0]);
}

//===- FuzzCreate.cpp - Fuzz target: mfsdp_create on mutated plan tables ---===//
//
// Bytes decoded into a plan for one rank (world 1): a parameter table with
// any placement, owner, optimizer and dtype values (valid or not), shapes
// from 0 to 24 rows and columns or past the element limit, units in and
// out of range, hyperparameters including NaN, infinity and negatives,
// and optionally a memory plan with arbitrary offsets, a bucket and a
// program of arbitrary ops and hooks. The plan carries its own hash, so
// mfsdp_create validates it whole; a plan it accepts then runs one step
// (every unit's four hooks, the optimizer step) and a store. Every status
// is accepted; a crash or a sanitizer report is the failure.
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include "mfsdp/runtime.h"

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

namespace {

/// The input read front to back; zeros once it is used up.
struct Reader {
  const uint8_t *p;
  size_t n;
  uint8_t u8() {
    if (!n)
      return 0;
    --n;
    return *p++;
  }
  int32_t pick(int32_t k) { return static_cast<int32_t>(u8() % k); }
  /// 1..24 mostly; 0, -1 and 2^41 (past MFSDP_MAX_PARAM_ELEMENTS) too.
  int64_t dim() {
    const uint8_t b = u8();
    if (b == 255)
      return int64_t(1) << 41;
    if (b == 254)
      return -1;
    if (b == 253)
      return 0;
    return 1 + b % 24;
  }
  float value() {
    static const float table[] = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 0.02f, 0.95f, 1.f,
                                  -1.f, std::numeric_limits<float>::quiet_NaN(),
                                  std::numeric_limits<float>::infinity(), 1e30f};
    return table[u8() % (sizeof(table) / sizeof(table[0]))];
  }
  int64_t offset() {
    const uint8_t b = u8();
    if (b >= 250)
      return b == 250 ? -1 : b == 251 ? int64_t(1) << 40 : -256;
    return static_cast<int64_t>(b) * 256;
  }
};

} // namespace

extern "C" int LLVMFuzzerInitialize(int *argc, char ***argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    MPI_Init(argc, argv);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Reader r{data, size};
  const int32_t numParams = 1 + r.pick(6);
  const int32_t numUnits = 1 + r.pick(3);
  std::vector<std::string> names(static_cast<size_t>(numParams));
  std::vector<mfsdp_param_desc> params(static_cast<size_t>(numParams));
  for (int32_t i = 0; i < numParams; ++i) {
    names[i] = "p" + std::to_string(i) + (r.u8() == 7 ? std::string("\0x", 2) : "");
    mfsdp_param_desc &d = params[i];
    d.name = names[i].c_str();
    d.rows = r.dim();
    d.cols = r.dim();
    const uint8_t unit = r.u8();
    d.unit = unit == 255 ? -1 : unit % (numUnits + 1);
    d.placement = r.pick(7);
    d.owner = r.pick(3) - 1;
    d.optimizer = r.pick(5);
    d.compute_dtype = r.pick(3);
    if (d.placement == MFSDP_BLOCK_SHARD) {
      d.block_rows = r.dim();
      d.block_cols = r.dim();
    }
  }
  mfsdp_plan plan = MFSDP_PLAN_INITIALIZER;
  plan.zero = r.pick(4);
  plan.dp_replicate = 1;
  plan.dp_shard = 1;
  plan.world = 1;
  plan.num_units = r.u8() == 255 ? 0 : numUnits;
  plan.num_params = numParams;
  plan.params = params.data();
  plan.adamw_lr = r.value();
  plan.adamw_beta1 = r.value();
  plan.adamw_beta2 = r.value();
  plan.adamw_eps = r.value();
  plan.adamw_weight_decay = r.value();
  plan.sgd_lr = r.value();
  plan.sgd_momentum = r.value();
  plan.muon_lr = r.value();
  plan.muon_momentum = r.value();
  plan.muon_ns_steps = r.pick(8);
  plan.muon_scale = r.pick(3);
  plan.ns_split = r.pick(2);
  plan.reduce_dtype = r.pick(3);
  plan.muon_ns_precision = r.pick(3);

  const uint8_t extras = r.u8();
  // A memory plan: one rank's arena and every buffer's offset.
  std::vector<int64_t> arena(static_cast<size_t>(1 + (extras >> 6 & 1)));
  std::vector<mfsdp_param_offsets> offsets(static_cast<size_t>(numParams));
  mfsdp_memory_plan memory{};
  if (extras & 1) {
    for (int64_t &a : arena)
      a = r.offset() * 4;
    for (mfsdp_param_offsets &o : offsets) {
      o.master = r.offset();
      o.exp_avg = r.offset();
      o.exp_avg_sq = r.offset();
      o.grad_shard = r.offset();
      o.full = r.offset();
      o.full_backward = r.offset();
      o.grad = r.offset();
    }
    memory.num_shard_ranks = static_cast<int32_t>(arena.size());
    memory.arena_bytes = arena.data();
    memory.params = offsets.data();
    memory.staging = r.offset();
    memory.keep_grads = r.pick(3) - 1;
    memory.prefetch = r.pick(3);
    plan.memory = &memory;
  }
  // A bucket of up to four members, any indices.
  std::vector<int32_t> members;
  mfsdp_bucket bucket{};
  if (extras & 2) {
    const int32_t n = r.pick(5);
    for (int32_t k = 0; k < n; ++k)
      members.push_back(r.pick(numParams + 2) - 1);
    bucket.unit = r.pick(numUnits + 1);
    bucket.placement = r.pick(7);
    bucket.num_params = static_cast<int32_t>(members.size());
    bucket.params = members.data();
    plan.num_buckets = 1;
    plan.buckets = &bucket;
  }
  // A program of up to eight ops and four hooks, any values.
  std::vector<std::vector<int32_t>> opParams;
  std::vector<mfsdp_program_op> ops;
  std::vector<mfsdp_program_hook> hooks;
  mfsdp_program program{};
  if (extras & 4) {
    const int32_t numOps = r.pick(9);
    opParams.resize(static_cast<size_t>(numOps));
    for (int32_t k = 0; k < numOps; ++k) {
      mfsdp_program_op op{};
      op.kind = r.pick(12) - 1;
      op.unit = r.pick(numUnits + 2) - 1;
      op.group = r.pick(4) - 1;
      op.optimizer = r.pick(5);
      op.only_rank = r.pick(3) - 1;
      const int32_t n = r.pick(4);
      for (int32_t j = 0; j < n; ++j)
        opParams[k].push_back(r.pick(numParams + 2) - 1);
      op.num_params = static_cast<int32_t>(opParams[k].size());
      op.params = opParams[k].empty() ? nullptr : opParams[k].data();
      ops.push_back(op);
    }
    const int32_t numHooks = r.pick(5);
    for (int32_t k = 0; k < numHooks; ++k) {
      mfsdp_program_hook h{};
      h.hook = r.pick(7) - 1;
      h.unit = r.pick(numUnits + 2) - 1;
      h.first_op = r.pick(numOps + 2) - 1;
      h.num_ops = r.pick(numOps + 2) - 1;
      hooks.push_back(h);
    }
    program.num_ops = numOps;
    program.ops = ops.empty() ? nullptr : ops.data();
    program.num_hooks = numHooks;
    program.hooks = hooks.empty() ? nullptr : hooks.data();
    plan.program = &program;
  }
  plan.hash = mfsdp_plan_hash(&plan);

  mfsdp_step *step = nullptr;
  const mfsdp_status created = mfsdp_create(&plan, &step);
  // MFSDP_FUZZ_VERBOSE=1: what mfsdp_create said (to check what seeds reach).
  if (const char *v = std::getenv("MFSDP_FUZZ_VERBOSE"); v && *v == '1')
    std::fprintf(stderr, "mfsdp_create: %s %s\n", mfsdp_status_string(created),
                 created == MFSDP_OK ? "" : mfsdp_last_error(step));
  if (created != MFSDP_OK) {
    mfsdp_destroy(step);
    return 0;
  }
  // One step, every status accepted.
  for (int32_t u = 0; u < plan.num_units; ++u) {
    mfsdp_pre_forward(step, u);
    mfsdp_post_forward(step, u);
  }
  for (int32_t u = plan.num_units - 1; u >= 0; --u) {
    mfsdp_pre_backward(step, u);
    mfsdp_post_backward(step, u);
  }
  mfsdp_optimizer_step(step);
  const int64_t elements = params[0].rows * params[0].cols;
  if (params[0].rows > 0 && params[0].cols > 0 && elements <= 576) {
    std::vector<float> whole(static_cast<size_t>(elements));
    mfsdp_store_param(step, 0, whole.data());
  }
  mfsdp_destroy(step);
  return 0;
}

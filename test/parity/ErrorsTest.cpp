//===- ErrorsTest.cpp - The runtime's errors under mpirun -----------------===//
//
//   mpirun -np 2 mfsdp-runtime-errors          every misuse gives a clear error
//   mpirun -np 2 mfsdp-runtime-errors die      rank 1 dies mid-step; rank 0
//                                              is in a collective, and the job
//                                              must end with an error, not hang
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime.h"
#include "mfsdp/runtime/Counters.h"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

// An allocator that fails on request: the runtime's C++ allocations go
// through this executable's operator new, so a case can make the next one
// on this thread throw std::bad_alloc, as an exhausted heap would.
namespace {
thread_local int allocationsBeforeFailure = -1; // -1: never fail
} // namespace

void *operator new(std::size_t size) {
  if (allocationsBeforeFailure >= 0 && allocationsBeforeFailure-- == 0)
    throw std::bad_alloc();
  if (void *p = std::malloc(size ? size : 1))
    return p;
  throw std::bad_alloc();
}
// The replacement pair above allocates with malloc, so free is its delete.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace {
int passed = 0, failed = 0, rank = 0;

void expect(bool ok, const std::string &what) {
  (ok ? passed : failed)++;
  if (!ok)
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
}

bool says(mfsdp_step *s, const char *text) {
  return std::strstr(mfsdp_last_error(s), text) != nullptr;
}

/// A call that must fail with `want` and an error that says `text`. The
/// status is in hand before the message is read.
void fails(mfsdp_step *s, mfsdp_status got, mfsdp_status want, const char *text) {
  bool ok = got == want && says(s, text);
  expect(ok, std::string("expected status ") + std::to_string(want) + " and '" +
                 text + "', got status " + std::to_string(got) + ": " +
                 mfsdp_last_error(s));
}
} // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  bool die = argc > 1 && std::strcmp(argv[1], "die") == 0;

  mfsdp_param_desc params[2] = {
      {"w", 4, 3, 0, MFSDP_ROW_SHARD, 0, MFSDP_OPT_ADAMW, MFSDP_COMPUTE_F32},
      {"v", 3, 3, 1, MFSDP_OWNER, 1, MFSDP_OPT_MUON, MFSDP_COMPUTE_F32},
  };
  mfsdp_plan plan = MFSDP_PLAN_INITIALIZER;
  plan.zero = 3;
  plan.dp_replicate = 1;
  plan.dp_shard = world;
  plan.world = world;
  plan.num_units = 2;
  plan.num_params = 2;
  plan.params = params;
  plan.adamw_lr = 1e-3f;
  plan.adamw_beta1 = 0.9f;
  plan.adamw_beta2 = 0.999f;
  plan.adamw_eps = 1e-8f;
  plan.muon_lr = 0.02f;
  plan.muon_momentum = 0.95f;
  plan.muon_ns_steps = 5;
  plan.hash = mfsdp_plan_hash(&plan);

  // Versions: the library's is the header's, statuses have names, and a
  // plan or config of another layout (size or version) is refused before
  // anything else in it is read, naming both layouts.
  {
    int32_t version = 0;
    expect(mfsdp_get_version(&version) == MFSDP_OK && version == MFSDP_VERSION_CODE,
           "mfsdp_get_version is " + std::to_string(version) + "; expected " +
               std::to_string(MFSDP_VERSION_CODE));
    expect(mfsdp_get_version(nullptr) == MFSDP_ERROR_INVALID,
           "mfsdp_get_version(NULL) is MFSDP_ERROR_INVALID");
    expect(std::strcmp(mfsdp_status_string(MFSDP_ERROR_ORDER), "MFSDP_ERROR_ORDER") == 0 &&
               std::strcmp(mfsdp_status_string(MFSDP_OK), "MFSDP_OK") == 0 &&
               std::strcmp(mfsdp_status_string(static_cast<mfsdp_status>(42)),
                           "unknown mfsdp_status") == 0,
           "mfsdp_status_string");
    mfsdp_step *s = nullptr;
    mfsdp_plan zeroed{}; // not initialised with MFSDP_PLAN_INITIALIZER
    fails(s, mfsdp_create(&zeroed, &s), MFSDP_ERROR_PLAN,
          "the mfsdp_plan has struct_size 0 and version 0, but this libmfsdp_rt");
    mfsdp_destroy(s);
    s = nullptr;
    mfsdp_plan newer = plan;
    newer.version = MFSDP_PLAN_VERSION + 1;
    fails(s, mfsdp_create(&newer, &s), MFSDP_ERROR_PLAN,
          ("version " + std::to_string(MFSDP_PLAN_VERSION + 1) + ", but").c_str());
    mfsdp_destroy(s);
    s = nullptr;
    mfsdp_plan smaller = plan;
    smaller.struct_size -= 8;
    fails(s, mfsdp_create(&smaller, &s), MFSDP_ERROR_PLAN, "MFSDP_PLAN_INITIALIZER");
    mfsdp_destroy(s);
    s = nullptr;
    mfsdp_config config = MFSDP_CONFIG_INITIALIZER;
    config.struct_size += 4;
    fails(s, mfsdp_create_with_config(&plan, &config, &s), MFSDP_ERROR_INVALID,
          ("the mfsdp_config has struct_size " + std::to_string(sizeof(config) + 4))
              .c_str());
    mfsdp_destroy(s);
    s = nullptr;
  }

  // A reduce dtype that is neither fp32 nor bf16 is refused, naming both;
  // the hash covers the field (a bf16 plan's differs from the fp32 one's).
  {
    mfsdp_plan bad = plan;
    bad.reduce_dtype = 7;
    bad.hash = mfsdp_plan_hash(&bad);
    mfsdp_step *s = nullptr;
    fails(s, mfsdp_create(&bad, &s), MFSDP_ERROR_PLAN,
          "reduce_dtype is 7; expected MFSDP_REDUCE_F32 (0) or MFSDP_REDUCE_BF16 (1)");
    mfsdp_destroy(s);
    mfsdp_plan half = plan;
    half.reduce_dtype = MFSDP_REDUCE_BF16;
    expect(mfsdp_plan_hash(&half) != plan.hash, "the plan hash covers reduce_dtype");
  }

  // Likewise the Newton-Schulz precision: neither fp32 nor bf16 is refused;
  // the hash covers it, and not as it covers the reduce dtype; a bf16 plan
  // makes bf16 every Muon parameter's default.
  {
    mfsdp_plan bad = plan;
    bad.muon_ns_precision = 7;
    bad.hash = mfsdp_plan_hash(&bad);
    mfsdp_step *s = nullptr;
    fails(s, mfsdp_create(&bad, &s), MFSDP_ERROR_PLAN,
          "muon_ns_precision is 7; expected MFSDP_NS_PRECISION_FP32 (0) or "
          "MFSDP_NS_PRECISION_BF16 (1)");
    mfsdp_destroy(s);
    s = nullptr;
    mfsdp_plan bf16 = plan;
    bf16.muon_ns_precision = MFSDP_NS_PRECISION_BF16;
    bf16.hash = mfsdp_plan_hash(&bf16);
    mfsdp_plan reduce = plan;
    reduce.reduce_dtype = MFSDP_REDUCE_BF16;
    expect(bf16.hash != plan.hash && bf16.hash != mfsdp_plan_hash(&reduce),
           "the plan hash covers muon_ns_precision, apart from reduce_dtype");
    expect(mfsdp_create(&bf16, &s) == MFSDP_OK, "create a bf16 Newton-Schulz plan");
    mfsdp_hparams v{};
    expect(mfsdp_get_hparams(s, 1, &v) == MFSDP_OK &&
               v.ns_precision == MFSDP_NS_PRECISION_BF16,
           "a plan's muon_ns_precision is its Muon parameters' default ns_precision");
    mfsdp_destroy(s);
  }

  // A library built for another world size is refused.
  mfsdp_plan other = plan;
  other.world = world * 4;
  other.dp_shard = world * 4;
  other.hash = mfsdp_plan_hash(&other);
  // (The status is taken before the message is built: the order in which
  // a call's arguments are evaluated is unspecified.)
  mfsdp_step *s = nullptr;
  mfsdp_status st = mfsdp_create(&other, &s);
  expect(st == MFSDP_ERROR_PLAN && says(s, "built for a plan of"),
         std::string("other world: ") + mfsdp_last_error(s));
  mfsdp_destroy(s);
  s = nullptr;
  // A plan whose contents do not match its hash is refused.
  mfsdp_plan corrupt = plan;
  corrupt.zero = 2;
  st = mfsdp_create(&corrupt, &s);
  expect(st == MFSDP_ERROR_PLAN && says(s, "hash"),
         std::string("corrupt plan: ") + mfsdp_last_error(s));
  mfsdp_destroy(s);
  s = nullptr;
  // The Newton-Schulz split is in the hash: a library whose flag was
  // edited is refused, and a flag other than 0 or 1 is named.
  mfsdp_plan split = plan;
  split.ns_split = 1;
  st = mfsdp_create(&split, &s);
  expect(st == MFSDP_ERROR_PLAN && says(s, "hash"),
         std::string("ns_split edited: ") + mfsdp_last_error(s));
  mfsdp_destroy(s);
  s = nullptr;
  split.ns_split = 2;
  split.hash = mfsdp_plan_hash(&split);
  st = mfsdp_create(&split, &s);
  expect(st == MFSDP_ERROR_PLAN && says(s, "ns_split is 2; expected 0 or 1"),
         std::string("ns_split 2: ") + mfsdp_last_error(s));
  mfsdp_destroy(s);
  s = nullptr;
  // The plan's mesh: its product must be the world, its dp dims the plan's,
  // each dim named once; the mesh is in the hash.
  {
    const int32_t S = plan.dp_shard;
    struct BadMesh {
      std::vector<mfsdp_mesh_dim> dims;
      const char *says;
    } badMeshes[] = {
        {{{"dp_shard", S}, {"tp", 2}}, "ranks, but the world is"},
        {{{"dp_shard", S + 1}}, "the mesh's 'dp_shard' has size"},
        {{{"tp", 1}, {"dp_shard", S}, {"tp", 1}}, "names dim 'tp' twice"},
        {{{"tp", S}}, "has no dp_shard or dp_replicate dim"},
    };
    for (BadMesh &bad : badMeshes) {
      if (S == 1 && std::strstr(bad.says, "no dp_shard"))
        continue; // a mesh without dp_shard is right for dp_shard = 1
      mfsdp_plan meshed = plan;
      meshed.num_mesh_dims = static_cast<int32_t>(bad.dims.size());
      meshed.mesh_dims = bad.dims.data();
      meshed.hash = mfsdp_plan_hash(&meshed);
      st = mfsdp_create(&meshed, &s);
      expect(st == MFSDP_ERROR_PLAN && says(s, bad.says),
             std::string("bad mesh: ") + mfsdp_last_error(s));
      mfsdp_destroy(s);
      s = nullptr;
    }
    // The mesh is hashed: one given (or edited) without a new hash is refused.
    mfsdp_mesh_dim dims[2] = {{"tp", 1}, {"dp_shard", S}};
    mfsdp_plan meshed = plan;
    meshed.num_mesh_dims = 2;
    meshed.mesh_dims = dims;
    st = mfsdp_create(&meshed, &s);
    expect(st == MFSDP_ERROR_PLAN && says(s, "hash"),
           std::string("mesh added without a new hash: ") + mfsdp_last_error(s));
    mfsdp_destroy(s);
    s = nullptr;
  }
  // Block shards: extents that do not tile the tensor, Muon on blocks and
  // extents on another placement are named; placements outside the ABI's
  // four are refused.
  struct BadBlocks {
    int32_t placement, optimizer;
    int64_t blockRows, blockCols;
    const char *says;
  } badBlocks[] = {
      {MFSDP_BLOCK_SHARD, MFSDP_OPT_ADAMW, 3, 3,
       "'w': blocks of 3x3 do not tile the 4x3 tensor"},
      {MFSDP_BLOCK_SHARD, MFSDP_OPT_ADAMW, 0, 3, "'w': blocks of 0x3 do not tile"},
      {MFSDP_BLOCK_SHARD, MFSDP_OPT_MUON, 2, 3,
       "'w': Muon needs the whole matrix, but MFSDP_BLOCK_SHARD splits it"},
      {MFSDP_ROW_SHARD, MFSDP_OPT_ADAMW, 2, 3,
       "'w': block extents 2x3 on a placement other than MFSDP_BLOCK_SHARD"},
      // The compiler's placements that no runtime plan may hold.
      {MFSDP_PLACEMENT_NONE, MFSDP_OPT_ADAMW, 0, 0,
       "invalid plan entry for parameter 'w'"},
      {MFSDP_EXTERNAL, MFSDP_OPT_ADAMW, 0, 0,
       "invalid plan entry for parameter 'w'"},
  };
  for (const BadBlocks &bad : badBlocks) {
    mfsdp_param_desc blockParams[2] = {params[0], params[1]};
    blockParams[0].placement = bad.placement;
    blockParams[0].optimizer = bad.optimizer;
    blockParams[0].block_rows = bad.blockRows;
    blockParams[0].block_cols = bad.blockCols;
    mfsdp_plan blocks = plan;
    blocks.params = blockParams;
    blocks.hash = mfsdp_plan_hash(&blocks);
    st = mfsdp_create(&blocks, &s);
    expect(st == MFSDP_ERROR_PLAN && says(s, bad.says),
           std::string("bad block entry: ") + mfsdp_last_error(s));
    mfsdp_destroy(s);
    s = nullptr;
  }

  // The compiled program (mfsdp_plan.program) must match the plan: each
  // malformed table is refused, naming the op and what was expected. The
  // well-formed one: v's Muon on its owner, then w's AdamW.
  {
    auto opt = [](int32_t unit, int32_t optimizer, int32_t onlyRank,
                  const int32_t *params, int32_t n) {
      mfsdp_program_op op{};
      op.kind = MFSDP_PROGRAM_OPTIMIZER;
      op.unit = unit;
      op.group = unit;
      op.optimizer = optimizer;
      op.only_rank = onlyRank;
      op.num_params = n;
      op.params = params;
      return op;
    };
    static const int32_t w[1] = {0}, v[1] = {1};
    const mfsdp_program_op good[2] = {opt(1, MFSDP_OPT_MUON, 1, v, 1),
                                      opt(0, MFSDP_OPT_ADAMW, -1, w, 1)};
    mfsdp_program_op unknown = good[0];
    unknown.kind = 42;
    mfsdp_program_op gather{};
    gather.kind = MFSDP_PROGRAM_GATHER;
    gather.unit = 0;
    // An op of a forward or backward hook: a unit, no parameters, every rank.
    auto hookOp = [](int32_t kind, int32_t unit) {
      mfsdp_program_op op{};
      op.kind = kind;
      op.unit = unit;
      op.group = unit;
      op.only_rank = -1;
      return op;
    };
    struct BadProgram {
      std::vector<mfsdp_program_op> ops;
      mfsdp_program_hook hook;
      const char *says;
    } badPrograms[] = {
        {{good[0], good[1]}, {MFSDP_HOOK_OPTIMIZER_STEP, -1, 0, 2}, nullptr},
        {{unknown, good[1]}, {MFSDP_HOOK_OPTIMIZER_STEP, -1, 0, 2},
         "invalid program: op 0 (unknown, unit 1, group 1): kind 42 is not one the "
         "optimizer step runs"},
        {{good[0], good[1], good[1]}, {MFSDP_HOOK_OPTIMIZER_STEP, -1, 0, 3},
         "op 2 (optimizer, unit 0, group 0): parameter 'w' is stepped twice"},
        {{good[0]}, {MFSDP_HOOK_OPTIMIZER_STEP, -1, 0, 1},
         "the optimizer step never steps parameter 'w'"},
        {{good[0], opt(1, MFSDP_OPT_ADAMW, -1, w, 1)},
         {MFSDP_HOOK_OPTIMIZER_STEP, -1, 0, 2},
         "op 1 (optimizer, unit 1, group 1): parameter 'w' is of unit 0"},
        {{good[0], opt(0, MFSDP_OPT_SGD, -1, w, 1)}, {MFSDP_HOOK_OPTIMIZER_STEP, -1, 0, 2},
         "parameter 'w' is stepped by optimizer 1, not 2"},
        {{opt(1, MFSDP_OPT_MUON, 0, v, 1), good[1]}, {MFSDP_HOOK_OPTIMIZER_STEP, -1, 0, 2},
         "parameter 'v' is not owned by dp_shard rank 0"},
        {{good[0], good[1], gather}, {MFSDP_HOOK_OPTIMIZER_STEP, -1, 0, 3},
         "op 2 (gather, unit 0, group 0): a gather of updated parameters under ZeRO-3"},
        {{good[0], good[1]}, {MFSDP_HOOK_OPTIMIZER_STEP, -1, 1, 2},
         "hook entry 0 (optimizer_step): ops [1, +2) out of the 2 ops"},
        {{good[0], good[1]}, {MFSDP_HOOK_PRE_FORWARD, 0, 0, 2},
         "op 0 (optimizer, unit 1) of pre_forward(0): kind 1 is not one a forward or "
         "backward hook runs"},
        {{hookOp(MFSDP_PROGRAM_PLACE_GRADS, 0)}, {MFSDP_HOOK_POST_FORWARD, 0, 0, 1},
         "op 0 (place_grads, unit 0) of post_forward(0): a forward hook runs no "
         "gradient work"},
        {{hookOp(MFSDP_PROGRAM_START_GATHER, 2)}, {MFSDP_HOOK_PRE_FORWARD, 1, 0, 1},
         "op 0 (start_gather, unit 2) of pre_forward(1): unit out of range"},
        {{hookOp(MFSDP_PROGRAM_START_REDUCTION, 1)}, {MFSDP_HOOK_POST_BACKWARD, 1, 0, 1},
         "no backward hook reduces the gradients of unit 0"},
        {{hookOp(MFSDP_PROGRAM_START_GATHER, 0)}, {MFSDP_HOOK_PRE_FORWARD, 5, 0, 1},
         "hook entry 0 (pre_forward): unit 5 out of range"},
    };
    for (BadProgram &bad : badPrograms) {
      mfsdp_program program{};
      program.num_ops = static_cast<int32_t>(bad.ops.size());
      program.ops = bad.ops.data();
      program.num_hooks = 1;
      program.hooks = &bad.hook;
      mfsdp_plan programmed = plan;
      programmed.program = &program;
      programmed.hash = mfsdp_plan_hash(&programmed);
      st = mfsdp_create(&programmed, &s);
      if (bad.says)
        expect(st == MFSDP_ERROR_PLAN && says(s, bad.says),
               std::string("bad program (") + bad.says + "): " + mfsdp_last_error(s));
      else
        expect(st == MFSDP_OK, std::string("a well-formed program: ") +
                                   mfsdp_last_error(s));
      mfsdp_destroy(s);
      s = nullptr;
      // The program is hashed: one added without a new hash is refused.
      if (!bad.says) {
        programmed.hash = plan.hash;
        st = mfsdp_create(&programmed, &s);
        expect(st == MFSDP_ERROR_PLAN && says(s, "hash"),
               std::string("program added without a new hash: ") + mfsdp_last_error(s));
        mfsdp_destroy(s);
        s = nullptr;
      }
    }
  }

  // A backend that does not exist is refused.
  mfsdp_config config = MFSDP_CONFIG_INITIALIZER;
  config.backend = 7;
  fails(s, mfsdp_create_with_config(&plan, &config, &s), MFSDP_ERROR_INVALID,
        "unknown backend 7 in mfsdp_config");
  mfsdp_destroy(s);
  s = nullptr;
  // The CUDA backend, where it cannot run (no driver, no libmfsdp_rt_cuda,
  // no device: this machine), fails on every rank with a message instead
  // of a crash or a hang; where it runs, views are on the rank's device.
  config.backend = MFSDP_BACKEND_CUDA;
  st = mfsdp_create_with_config(&plan, &config, &s);
  if (st == MFSDP_OK) {
    DLTensor cudaView;
    expect(mfsdp_pre_forward(s, 0) == MFSDP_OK &&
               mfsdp_param_view(s, 0, &cudaView) == MFSDP_OK &&
               cudaView.device.device_type == kDLCUDA,
           "a view of the CUDA backend is on a CUDA device");
    if (rank == 0)
      std::printf("cuda backend: available\n");
  } else {
    expect(st == MFSDP_ERROR_BACKEND &&
               says(s, "the CUDA backend is not available: "),
           std::string("cuda backend: status ") + std::to_string(st) + ": " +
               mfsdp_last_error(s));
    if (rank == 0)
      std::printf("cuda backend: %s\n", mfsdp_last_error(s));
  }
  mfsdp_destroy(s);
  s = nullptr;

  // The default config (MFSDP_CONFIG_INITIALIZER) is the host backend.
  config.backend = 0;
  expect(mfsdp_create_with_config(&plan, &config, &s) == MFSDP_OK, "create");
  // Hyperparameters start as the plan's constants of each parameter's
  // optimizer (Muon's Newton-Schulz defaults); set_hparams checks the fields
  // the parameter's optimizer uses, names the parameter and the field, and
  // changes nothing when it refuses; the other fields are kept unchecked.
  {
    mfsdp_hparams w{}, v{}, got{};
    expect(mfsdp_get_hparams(s, 0, &w) == MFSDP_OK && w.lr == plan.adamw_lr &&
               w.weight_decay == plan.adamw_weight_decay &&
               w.beta1 == plan.adamw_beta1 && w.beta2 == plan.adamw_beta2 &&
               w.eps == plan.adamw_eps,
           "the AdamW parameter's hyperparameters are the plan's");
    expect(mfsdp_get_hparams(s, 1, &v) == MFSDP_OK && v.lr == plan.muon_lr &&
               v.weight_decay == plan.muon_weight_decay &&
               v.momentum == plan.muon_momentum && v.nesterov == plan.muon_nesterov &&
               v.ns_steps == plan.muon_ns_steps && v.ns_a == 3.4445f &&
               v.ns_b == -4.7750f && v.ns_c == 2.0315f && v.ns_eps == 1e-7f &&
               v.ns_norm == MFSDP_NS_NORM_ADD_EPS && v.adjust_lr == plan.muon_scale &&
               v.ns_precision == MFSDP_NS_PRECISION_FP32,
           "the Muon parameter's hyperparameters are the plan's and Muon's defaults");
    struct Bad {
      int32_t param;
      void (*edit)(mfsdp_hparams &);
      const char *says;
    } bad[] = {
        {0, [](mfsdp_hparams &h) { h.lr = -1; },
         "set_hparams of parameter 0 ('w', AdamW): lr is -1; expected a finite value >= 0"},
        {0, [](mfsdp_hparams &h) { h.weight_decay = INFINITY; },
         "weight_decay is inf; expected a finite value >= 0"},
        {0, [](mfsdp_hparams &h) { h.beta1 = 1; }, "beta1 is 1; expected 0 <= beta1 < 1"},
        {0, [](mfsdp_hparams &h) { h.beta2 = NAN; }, "beta2 is nan; expected 0 <= beta2 < 1"},
        {0, [](mfsdp_hparams &h) { h.eps = 0; }, "eps is 0; expected a finite value > 0"},
        {1, [](mfsdp_hparams &h) { h.momentum = -0.5f; },
         "set_hparams of parameter 1 ('v', Muon): momentum is -0.5; expected a finite value >= 0"},
        {1, [](mfsdp_hparams &h) { h.nesterov = 2; }, "nesterov is 2; expected 0 or 1"},
        {1, [](mfsdp_hparams &h) { h.ns_steps = -1; }, "ns_steps is -1; expected >= 0"},
        {1, [](mfsdp_hparams &h) { h.ns_b = -INFINITY; }, "ns_b is -inf; expected a finite value"},
        {1, [](mfsdp_hparams &h) { h.ns_eps = 0; }, "ns_eps is 0; expected a finite value > 0"},
        {1, [](mfsdp_hparams &h) { h.ns_norm = 2; },
         "ns_norm is 2; expected MFSDP_NS_NORM_ADD_EPS (0) or MFSDP_NS_NORM_CLAMP (1)"},
        {1, [](mfsdp_hparams &h) { h.ns_precision = 2; },
         "ns_precision is 2; expected MFSDP_NS_PRECISION_FP32 (0) or MFSDP_NS_PRECISION_BF16 (1)"},
        {1, [](mfsdp_hparams &h) { h.adjust_lr = 3; },
         "adjust_lr is 3; expected MFSDP_ADJUST_LR_MATCH_RMS_ADAMW (0), "
         "MFSDP_ADJUST_LR_ORIGINAL (1) or MFSDP_ADJUST_LR_SPECTRAL_UNCLAMPED (2)"},
    };
    for (const Bad &b : bad) {
      mfsdp_hparams h = b.param ? v : w;
      b.edit(h);
      fails(s, mfsdp_set_hparams(s, b.param, &h), MFSDP_ERROR_INVALID, b.says);
      expect(mfsdp_get_hparams(s, b.param, &got) == MFSDP_OK &&
                 std::memcmp(&got, b.param ? &v : &w, sizeof(got)) == 0,
             std::string("a refused set_hparams changes nothing: ") + b.says);
    }
    // Fields of another optimizer are neither checked nor used, but kept.
    mfsdp_hparams h = w;
    h.lr = 0;
    h.ns_norm = 7;
    h.momentum = -1;
    expect(mfsdp_set_hparams(s, 0, &h) == MFSDP_OK &&
               mfsdp_get_hparams(s, 0, &got) == MFSDP_OK &&
               std::memcmp(&got, &h, sizeof(h)) == 0,
           std::string("AdamW keeps Muon's and SGD's fields as given: ") +
               mfsdp_last_error(s));
    h = v;
    h.beta1 = 2;
    h.ns_norm = MFSDP_NS_NORM_CLAMP;
    expect(mfsdp_set_hparams(s, 1, &h) == MFSDP_OK,
           std::string("Muon ignores AdamW's fields: ") + mfsdp_last_error(s));
    fails(s, mfsdp_set_hparams(s, 2, &h), MFSDP_ERROR_INVALID, "parameter 2 is out of range");
    fails(s, mfsdp_get_hparams(s, -1, &h), MFSDP_ERROR_INVALID, "parameter -1 is out of range");
    expect(mfsdp_set_hparams(s, 0, nullptr) == MFSDP_ERROR_INVALID &&
               mfsdp_get_hparams(s, 0, nullptr) == MFSDP_ERROR_INVALID,
           "null hyperparameters are refused");
    expect(mfsdp_set_hparams(s, 0, &w) == MFSDP_OK && mfsdp_set_hparams(s, 1, &v) == MFSDP_OK,
           "the plan's hyperparameters set back");
  }
  DLTensor t;
  // Hooks out of order.
  fails(s, mfsdp_post_forward(s, 0), MFSDP_ERROR_ORDER, "post_forward of unit 0 without its pre_forward");
  fails(s, mfsdp_pre_backward(s, 1), MFSDP_ERROR_ORDER, "pre_backward of unit 1 before its forward finished");
  fails(s, mfsdp_param_view(s, 0, &t), MFSDP_ERROR_ORDER, "call pre_forward or pre_backward of unit 0 first");
  fails(s, mfsdp_pre_forward(s, 7), MFSDP_ERROR_INVALID, "out of range");
  expect(mfsdp_pre_forward(s, 0) == MFSDP_OK, "pre_forward 0");
  fails(s, mfsdp_pre_forward(s, 0), MFSDP_ERROR_ORDER, "called again before its backward");
  expect(mfsdp_param_view(s, 0, &t) == MFSDP_OK && t.ndim == 2 &&
             t.shape[0] == 4 && t.shape[1] == 3 && t.device.device_type == kDLCPU,
         "view of a gathered parameter, in host memory");
  fails(s, mfsdp_optimizer_step(s), MFSDP_ERROR_ORDER, "optimizer_step before the gradients of unit 0");
  double norm = 0;
  fails(s, mfsdp_clip_grad_norm(s, 1.0, 0.0, &norm), MFSDP_ERROR_ORDER,
        "clip_grad_norm before the gradients of unit 0 were reduced");
  expect(mfsdp_post_forward(s, 0) == MFSDP_OK, "post_forward 0");
  if (die && rank == 1) {
    std::fprintf(stderr, "rank 1: dying mid-step on purpose\n");
    std::exit(3);
  }
  // Rank 0 is now in the gather of unit 1, waiting for rank 1.
  expect(mfsdp_pre_forward(s, 1) == MFSDP_OK, "pre_forward 1");
  expect(mfsdp_post_forward(s, 1) == MFSDP_OK, "post_forward 1");
  mfsdp_destroy(s);
  s = nullptr;

  // A static memory plan, written by hand like the compiler's: every
  // buffer fits 256 bytes; w's (unit 0) and v's (unit 1) gathered copies,
  // and their gradients, share space; the staging buffer shares it too.
  const int64_t K = 256;
  int64_t arena[64];
  for (int64_t &a : arena)
    a = 9 * K;
  mfsdp_param_offsets offsets[2] = {
      {0, K, 2 * K, 3 * K, 4 * K, 4 * K, 5 * K},
      {6 * K, 7 * K, -1, 8 * K, 4 * K, 4 * K, 5 * K},
  };
  mfsdp_memory_plan memory{};
  memory.num_shard_ranks = world;
  memory.arena_bytes = arena;
  memory.params = offsets;
  memory.staging = 4 * K;
  memory.keep_grads = 0;
  mfsdp_plan planned = plan;
  planned.memory = &memory;
  planned.hash = mfsdp_plan_hash(&planned);
  expect(planned.hash != plan.hash, "the memory plan is part of the hash");
  expect(mfsdp_create(&planned, &s) == MFSDP_OK,
         std::string("create with a memory plan: ") + mfsdp_last_error(s));
  expect(mfsdp_pre_forward(s, 0) == MFSDP_OK, "planned: pre_forward 0");
  // Unit 1 would be gathered where unit 0 still is.
  fails(s, mfsdp_pre_forward(s, 1), MFSDP_ERROR_ORDER,
        "which the gathered 'w' (unit 0) still holds");
  expect(mfsdp_post_forward(s, 0) == MFSDP_OK, "planned: post_forward 0");
  expect(mfsdp_pre_forward(s, 1) == MFSDP_OK && mfsdp_post_forward(s, 1) == MFSDP_OK,
         "planned: unit 1 forward once unit 0 is done");
  // Gradients live only during a unit's backward: no accumulation.
  fails(s, mfsdp_set_no_sync(s, 1), MFSDP_ERROR_ORDER,
        "no-sync needs the gradients kept between microbatches");
  // Every rank's gradient of v (3x3, on its owner) is 1, of w (4x3, row
  // shards) 2: the averages are the same.
  expect(mfsdp_pre_backward(s, 1) == MFSDP_OK && mfsdp_grad_view(s, 1, &t) == MFSDP_OK,
         "planned: a gradient view in backward");
  std::fill_n(static_cast<float *>(t.data), 9, 1.f);
  expect(mfsdp_post_backward(s, 1) == MFSDP_OK, "planned: post_backward 1");
  fails(s, mfsdp_grad_view(s, 1, &t), MFSDP_ERROR_ORDER, "call pre_backward of unit 1 first");
  fails(s, mfsdp_clip_grad_norm(s, 1.0, 0.0, &norm), MFSDP_ERROR_ORDER,
        "clip_grad_norm before the gradients of unit 0 were reduced");
  expect(mfsdp_pre_backward(s, 0) == MFSDP_OK && mfsdp_grad_view(s, 0, &t) == MFSDP_OK,
         "planned: backward of unit 0");
  std::fill_n(static_cast<float *>(t.data), 12, 2.f);
  expect(mfsdp_post_backward(s, 0) == MFSDP_OK, "planned: post_backward 0");
  // Clipping, worked by hand: the norm is sqrt(9 * 1 + 12 * 4 + 7) = 8 with
  // 7 of the caller's, each element counted once over the two ranks;
  // max_norm 4 scales the reduced gradients by 4 / (8 + 1e-6); then, only
  // computed (max_norm 0), their norm is sqrt(57) times that.
  fails(s, mfsdp_clip_grad_norm(s, NAN, 0.0, &norm), MFSDP_ERROR_INVALID,
        "clip_grad_norm: max_norm is nan");
  fails(s, mfsdp_clip_grad_norm(s, 1.0, -1.0, &norm), MFSDP_ERROR_INVALID,
        "clip_grad_norm: extra_sq is -1; expected a sum of squares >= 0");
  expect(mfsdp_clip_grad_norm(s, 4.0, 7.0, &norm) == MFSDP_OK && norm == 8.0,
         "planned: the total norm is 8 (" + std::to_string(norm) + "): " +
             mfsdp_last_error(s));
  const double coef = 4.0 / (8.0 + 1e-6);
  expect(mfsdp_clip_grad_norm(s, 0.0, 0.0, &norm) == MFSDP_OK &&
             std::fabs(norm - std::sqrt(57.0) * coef) < 1e-6,
         "planned: the clipped norm is sqrt(57) x 4 / (8 + 1e-6) (" +
             std::to_string(norm) + ")");
  // A non-finite total is returned, and nothing is scaled.
  expect(mfsdp_clip_grad_norm(s, 1.0, INFINITY, &norm) == MFSDP_OK && std::isinf(norm) &&
             mfsdp_clip_grad_norm(s, INFINITY, 0.0, &norm) == MFSDP_OK &&
             std::fabs(norm - std::sqrt(57.0) * coef) < 1e-6,
         "planned: an infinite total scales nothing (" + std::to_string(norm) + ")");
  expect(mfsdp_optimizer_step(s) == MFSDP_OK,
         std::string("planned: optimizer step: ") + mfsdp_last_error(s));
  std::vector<float> whole(12), again(12);
  expect(mfsdp_store_param(s, 0, whole.data()) == MFSDP_OK,
         std::string("planned: store through the staging buffer: ") + mfsdp_last_error(s));
  // The step consumed the reduced gradients: another one without a
  // backward would move the parameters again, so it is refused, and they
  // stay where they are.
  fails(s, mfsdp_optimizer_step(s), MFSDP_ERROR_ORDER,
        "optimizer_step: no gradients were reduced since the last optimizer_step");
  fails(s, mfsdp_clip_grad_norm(s, 1.0, 0.0, &norm), MFSDP_ERROR_ORDER,
        "clip_grad_norm: no gradients were reduced since the last optimizer_step");
  expect(mfsdp_store_param(s, 0, again.data()) == MFSDP_OK && again == whole,
         "planned: a refused step leaves the parameters as they were");
  // The freed gradients cannot be added to: a second backward before
  // zero_grad would replace the reduced gradient, so it is refused.
  expect(mfsdp_pre_forward(s, 0) == MFSDP_OK && mfsdp_post_forward(s, 0) == MFSDP_OK &&
             mfsdp_pre_forward(s, 1) == MFSDP_OK && mfsdp_post_forward(s, 1) == MFSDP_OK,
         "planned: the next forward");
  fails(s, mfsdp_pre_backward(s, 1), MFSDP_ERROR_ORDER,
        "the gradients of unit 1 were already reduced in this step");
  expect(mfsdp_zero_grad(s) == MFSDP_OK && mfsdp_pre_backward(s, 1) == MFSDP_OK,
         std::string("planned: backward after zero_grad: ") + mfsdp_last_error(s));
  // zero_grad does not make the consumed gradients new; a new backward's
  // reductions do.
  fails(s, mfsdp_optimizer_step(s), MFSDP_ERROR_ORDER,
        "optimizer_step: no gradients were reduced since the last optimizer_step");
  expect(mfsdp_post_backward(s, 1) == MFSDP_OK && mfsdp_pre_backward(s, 0) == MFSDP_OK &&
             mfsdp_post_backward(s, 0) == MFSDP_OK && mfsdp_optimizer_step(s) == MFSDP_OK,
         std::string("planned: a step after a new backward: ") + mfsdp_last_error(s));
  mfsdp_destroy(s);
  s = nullptr;
  // Gather prefetch (prefetch 1): pre_forward(0) starts gathering v (unit
  // 1), so the plan gives v's forward copy its own place (9K); in backward
  // pre_backward(1) starts w's backward gather while v's copy and gradient
  // are live (w's at 4K, v's at 9K), and v's reduction, overlapped with
  // w's backward, keeps v's gradient (10K) apart from w's (5K) until
  // post_backward(0).
  {
    int64_t wider[64];
    for (int64_t &a : wider)
      a = 11 * K;
    mfsdp_param_offsets ahead[2] = {
        {0, K, 2 * K, 3 * K, 4 * K, 4 * K, 5 * K},
        {6 * K, 7 * K, -1, 8 * K, 9 * K, 9 * K, 10 * K},
    };
    mfsdp_memory_plan prefetching = memory;
    prefetching.arena_bytes = wider;
    prefetching.params = ahead;
    prefetching.prefetch = 1;
    mfsdp_plan pf = plan;
    pf.memory = &prefetching;
    pf.hash = mfsdp_plan_hash(&pf);
    expect(mfsdp_create(&pf, &s) == MFSDP_OK,
           std::string("create with prefetch: ") + mfsdp_last_error(s));
    expect(mfsdp_pre_forward(s, 0) == MFSDP_OK, "prefetch: pre_forward 0");
    // v is being gathered: its view waits for the gather.
    expect(mfsdp_param_view(s, 1, &t) == MFSDP_OK && t.data != nullptr,
           std::string("prefetch: the prefetched view: ") + mfsdp_last_error(s));
    expect(mfsdp_post_forward(s, 0) == MFSDP_OK && mfsdp_pre_forward(s, 1) == MFSDP_OK &&
               mfsdp_post_forward(s, 1) == MFSDP_OK && mfsdp_pre_backward(s, 1) == MFSDP_OK &&
               mfsdp_post_backward(s, 1) == MFSDP_OK && mfsdp_pre_backward(s, 0) == MFSDP_OK &&
               mfsdp_post_backward(s, 0) == MFSDP_OK && mfsdp_optimizer_step(s) == MFSDP_OK,
           std::string("prefetch: a whole step: ") + mfsdp_last_error(s));
    mfsdp::rt::WorkCounters w = mfsdp::rt::workCounters(s);
    expect(w.prefetchStarts == 2 && w.prefetchWaits == 2,
           "prefetch: v in forward and w in backward, both waited for (" +
               std::to_string(w.prefetchStarts) + " / " +
               std::to_string(w.prefetchWaits) + ")");
    // v's reduction ran during w's backward (waited for by post_backward
    // 0), w's was still in flight at optimizer_step, which waited for it.
    expect(w.reduceStarts == 2 && w.reduceWaits == 2,
           "prefetch: v's and w's reductions started and waited for (" +
               std::to_string(w.reduceStarts) + " / " +
               std::to_string(w.reduceWaits) + ")");
    // A reduction in flight and a far hook (unit 1 again, not the unit
    // before): the hook is refused and the step stays correct.
    expect(mfsdp_zero_grad(s) == MFSDP_OK && mfsdp_pre_forward(s, 0) == MFSDP_OK &&
               mfsdp_post_forward(s, 0) == MFSDP_OK &&
               mfsdp_pre_forward(s, 1) == MFSDP_OK &&
               mfsdp_post_forward(s, 1) == MFSDP_OK &&
               mfsdp_pre_backward(s, 1) == MFSDP_OK &&
               mfsdp_post_backward(s, 1) == MFSDP_OK,
           std::string("prefetch: the second backward of v: ") + mfsdp_last_error(s));
    w = mfsdp::rt::workCounters(s);
    expect(w.reduceStarts == 3 && w.reduceWaits == 2,
           "prefetch: v's reduction in flight after post_backward 1 (" +
               std::to_string(w.reduceStarts) + " / " +
               std::to_string(w.reduceWaits) + ")");
    // v's gradient is still held for the reduction; pre_backward of v again
    // is refused before it runs any op (v's backward is over), and v's
    // reduction stays in flight where the program leaves it.
    fails(s, mfsdp_pre_backward(s, 1), MFSDP_ERROR_ORDER,
          "pre_backward of unit 1 before its forward finished");
    w = mfsdp::rt::workCounters(s);
    expect(w.reduceWaits == 2, "prefetch: the refused hook left the reduction in flight (" +
                                   std::to_string(w.reduceWaits) + ")");
    expect(mfsdp_pre_backward(s, 0) == MFSDP_OK && mfsdp_post_backward(s, 0) == MFSDP_OK,
           std::string("prefetch: w's backward: ") + mfsdp_last_error(s));
    // post_backward(0) waited for v's reduction before starting w's.
    w = mfsdp::rt::workCounters(s);
    expect(w.reduceStarts == 4 && w.reduceWaits == 3,
           "prefetch: post_backward 0 waited for v's reduction (" +
               std::to_string(w.reduceStarts) + " / " + std::to_string(w.reduceWaits) +
               ")");
    // Destroyed with w's reduction in flight: waited for there (no hang,
    // nothing left unwaited; the other rank does the same).
    mfsdp_destroy(s);
    s = nullptr;
    expect(mfsdp_create(&pf, &s) == MFSDP_OK,
           std::string("create with prefetch again: ") + mfsdp_last_error(s));
    // Started and left in flight at destroy: waited for there.
    expect(mfsdp_zero_grad(s) == MFSDP_OK && mfsdp_pre_forward(s, 0) == MFSDP_OK,
           "prefetch: the next forward");
    mfsdp_destroy(s);
    s = nullptr;
    // A plan that claims prefetch but gives v's copy w's place: the
    // prefetch is refused rather than overlap w.
    prefetching.params = offsets;
    prefetching.arena_bytes = arena;
    pf.hash = mfsdp_plan_hash(&pf);
    expect(mfsdp_create(&pf, &s) == MFSDP_OK, "create with a plan too tight to prefetch");
    fails(s, mfsdp_pre_forward(s, 0), MFSDP_ERROR_ORDER,
          "which the gathered 'w' (unit 0) still holds");
    mfsdp_destroy(s);
    s = nullptr;
    prefetching.prefetch = 2;
    pf.hash = mfsdp_plan_hash(&pf);
    fails(s, mfsdp_create(&pf, &s), MFSDP_ERROR_PLAN, "prefetch 0 or 1");
    mfsdp_destroy(s);
    s = nullptr;
  }
  // Ranks that load different plans (each consistent with its hash) are
  // refused together, before any collective of the plan.
  if (world > 1) {
    mfsdp_plan mine = plan;
    if (rank == 1)
      mine.adamw_lr = 2e-3f;
    mine.hash = mfsdp_plan_hash(&mine);
    fails(s, mfsdp_create(&mine, &s), MFSDP_ERROR_PLAN,
          "the ranks passed different plans");
    // A runtime that failed to be created refuses every call.
    fails(s, mfsdp_pre_forward(s, 0), MFSDP_ERROR_INVALID, "this runtime was not created");
    fails(s, mfsdp_param_view(s, 0, &t), MFSDP_ERROR_INVALID, "this runtime was not created");
    mfsdp_destroy(s);
    s = nullptr;
  }
  // A plan of one unit whose two parameters form one bucket.
  auto twoInABucket = [&](mfsdp_param_desc *two, const mfsdp_bucket &bucket) {
    mfsdp_plan b = plan;
    b.num_units = 1;
    b.num_params = 2;
    b.params = two;
    b.num_buckets = 1;
    b.buckets = &bucket;
    return b;
  };
  // Buckets: refused without the static memory plan and its staging
  // offsets, and when the memory plan does not lay the members' masters
  // and reduced gradients out at the same distances; accepted when it does.
  {
    mfsdp_param_desc pq[2] = {
        {"p", 4, 3, 0, MFSDP_ROW_SHARD, 0, MFSDP_OPT_ADAMW, MFSDP_COMPUTE_F32},
        {"q", 4, 3, 0, MFSDP_ROW_SHARD, 0, MFSDP_OPT_ADAMW, MFSDP_COMPUTE_F32}};
    const int32_t members[2] = {0, 1};
    const mfsdp_bucket bucket{0, MFSDP_ROW_SHARD, 2, members};
    mfsdp_plan b = twoInABucket(pq, bucket);
    b.hash = mfsdp_plan_hash(&b);
    fails(s, mfsdp_create(&b, &s), MFSDP_ERROR_PLAN, "buckets need the static memory plan");
    mfsdp_destroy(s);
    s = nullptr;
    // q's reduced gradient 4K after p's, its master K after: not one piece.
    mfsdp_param_offsets at[2] = {{0, 2 * K, 3 * K, 4 * K, 10 * K, 10 * K, 12 * K},
                                 {K, 6 * K, 7 * K, 8 * K, 11 * K, 11 * K, 13 * K}};
    int64_t room[64];
    for (int64_t &a : room)
      a = 26 * K;
    const mfsdp_bucket_offsets staging{14 * K, 18 * K, 22 * K};
    mfsdp_memory_plan mem{};
    mem.num_shard_ranks = world;
    mem.arena_bytes = room;
    mem.params = at;
    mem.staging = 14 * K;
    b.memory = &mem;
    b.hash = mfsdp_plan_hash(&b);
    fails(s, mfsdp_create(&b, &s), MFSDP_ERROR_PLAN, "with their staging offsets");
    mfsdp_destroy(s);
    s = nullptr;
    mem.buckets = &staging;
    b.hash = mfsdp_plan_hash(&b);
    fails(s, mfsdp_create(&b, &s), MFSDP_ERROR_PLAN,
          "does not lay out bucket 0's masters and reduced gradients in one piece");
    mfsdp_destroy(s);
    s = nullptr;
    at[1].grad_shard = 5 * K;
    b.hash = mfsdp_plan_hash(&b);
    expect(mfsdp_create(&b, &s) == MFSDP_OK,
           std::string("create with a bucket laid out in one piece: ") +
               mfsdp_last_error(s));
    // One forward and backward: one all-gather and one reduce-scatter for
    // the two parameters.
    expect(mfsdp_pre_forward(s, 0) == MFSDP_OK && mfsdp_post_forward(s, 0) == MFSDP_OK &&
               mfsdp_pre_backward(s, 0) == MFSDP_OK &&
               mfsdp_post_backward(s, 0) == MFSDP_OK,
           std::string("a bucketed step: ") + mfsdp_last_error(s));
    mfsdp::rt::WorkCounters w = mfsdp::rt::workCounters(s);
    expect(w.bucketGathers == 2 && w.bucketReductions == 1,
           "bucket collectives: " + std::to_string(w.bucketGathers) + " gathers, " +
               std::to_string(w.bucketReductions) + " reductions (expected 2, 1)");
    mfsdp_destroy(s);
    s = nullptr;
    // With a compiled program the bucket's chunks are unpacked by an op of
    // their own after each wait for the gather, and its gradients packed by
    // one before the start of the reduction, in the same hook: a program
    // without them (a library built before they existed) is refused, and
    // with them the copies are the parameters.
    auto unitOp = [](int32_t kind) {
      mfsdp_program_op op{};
      op.kind = kind;
      op.only_rank = -1;
      return op;
    };
    static const int32_t both[2] = {0, 1};
    mfsdp_program_op step = unitOp(MFSDP_PROGRAM_OPTIMIZER);
    step.optimizer = MFSDP_OPT_ADAMW;
    step.num_params = 2;
    step.params = both;
    struct Hooked {
      std::vector<int32_t> kinds[5]; // per mfsdp_hook
      const char *says;
    } programs[] = {
        {{{MFSDP_PROGRAM_START_GATHER, MFSDP_PROGRAM_WAIT_GATHER},
          {MFSDP_PROGRAM_RELEASE},
          {MFSDP_PROGRAM_START_GATHER, MFSDP_PROGRAM_WAIT_GATHER, MFSDP_PROGRAM_UNPACK,
           MFSDP_PROGRAM_PLACE_GRADS},
          {MFSDP_PROGRAM_PACK, MFSDP_PROGRAM_START_REDUCTION, MFSDP_PROGRAM_WAIT_REDUCTION},
          {}},
         "the hook waits for the gathers of unit 0, whose row-shard buckets (bucket 0, "
         "...) land in staging, but no unpack of the unit follows in the hook"},
        {{{MFSDP_PROGRAM_START_GATHER, MFSDP_PROGRAM_UNPACK, MFSDP_PROGRAM_WAIT_GATHER},
          {MFSDP_PROGRAM_RELEASE},
          {MFSDP_PROGRAM_START_GATHER, MFSDP_PROGRAM_WAIT_GATHER, MFSDP_PROGRAM_UNPACK,
           MFSDP_PROGRAM_PLACE_GRADS},
          {MFSDP_PROGRAM_PACK, MFSDP_PROGRAM_START_REDUCTION, MFSDP_PROGRAM_WAIT_REDUCTION},
          {}},
         "no unpack of the unit follows in the hook"},
        {{{MFSDP_PROGRAM_START_GATHER, MFSDP_PROGRAM_WAIT_GATHER, MFSDP_PROGRAM_UNPACK},
          {MFSDP_PROGRAM_RELEASE},
          {MFSDP_PROGRAM_START_GATHER, MFSDP_PROGRAM_WAIT_GATHER, MFSDP_PROGRAM_UNPACK,
           MFSDP_PROGRAM_PLACE_GRADS},
          {MFSDP_PROGRAM_START_REDUCTION, MFSDP_PROGRAM_WAIT_REDUCTION},
          {}},
         "are reduced from packed staging, but no pack of the unit comes before this "
         "start in post_backward(0)"},
        {{{MFSDP_PROGRAM_START_GATHER, MFSDP_PROGRAM_WAIT_GATHER, MFSDP_PROGRAM_UNPACK},
          {MFSDP_PROGRAM_RELEASE},
          {MFSDP_PROGRAM_START_GATHER, MFSDP_PROGRAM_WAIT_GATHER, MFSDP_PROGRAM_UNPACK,
           MFSDP_PROGRAM_PLACE_GRADS},
          {MFSDP_PROGRAM_PACK, MFSDP_PROGRAM_START_REDUCTION, MFSDP_PROGRAM_WAIT_REDUCTION},
          {}},
         nullptr},
    };
    for (const Hooked &h : programs) {
      std::vector<mfsdp_program_op> ops{step};
      std::vector<mfsdp_program_hook> hooks{{MFSDP_HOOK_OPTIMIZER_STEP, -1, 0, 1}};
      for (int32_t k = MFSDP_HOOK_PRE_FORWARD; k <= MFSDP_HOOK_POST_BACKWARD; ++k) {
        const int32_t first = static_cast<int32_t>(ops.size());
        for (int32_t kind : h.kinds[k])
          ops.push_back(unitOp(kind));
        hooks.push_back({k, 0, first, static_cast<int32_t>(ops.size()) - first});
      }
      mfsdp_program program{static_cast<int32_t>(ops.size()), ops.data(),
                            static_cast<int32_t>(hooks.size()), hooks.data()};
      mfsdp_plan programmed = b;
      programmed.program = &program;
      programmed.hash = mfsdp_plan_hash(&programmed);
      if (h.says) {
        fails(s, mfsdp_create(&programmed, &s), MFSDP_ERROR_PLAN, h.says);
        mfsdp_destroy(s);
        s = nullptr;
        continue;
      }
      expect(mfsdp_create(&programmed, &s) == MFSDP_OK,
             std::string("create with a program that packs and unpacks: ") +
                 mfsdp_last_error(s));
      std::vector<float> pv(12), qv(12);
      for (int i = 0; i < 12; ++i) {
        pv[i] = 0.5f + static_cast<float>(i);
        qv[i] = -2.f * static_cast<float>(i) - 0.25f;
      }
      expect(mfsdp_load_param(s, 0, pv.data()) == MFSDP_OK &&
                 mfsdp_load_param(s, 1, qv.data()) == MFSDP_OK &&
                 mfsdp_pre_forward(s, 0) == MFSDP_OK,
             std::string("programmed: load and gather the bucket: ") + mfsdp_last_error(s));
      DLTensor pt{}, qt{};
      expect(mfsdp_param_view(s, 0, &pt) == MFSDP_OK && mfsdp_param_view(s, 1, &qt) == MFSDP_OK &&
                 std::memcmp(pt.data, pv.data(), 48) == 0 &&
                 std::memcmp(qt.data, qv.data(), 48) == 0,
             "programmed: the unpacked copies are the loaded parameters");
      expect(mfsdp_post_forward(s, 0) == MFSDP_OK && mfsdp_pre_backward(s, 0) == MFSDP_OK &&
                 mfsdp_post_backward(s, 0) == MFSDP_OK && mfsdp_optimizer_step(s) == MFSDP_OK,
             std::string("programmed: a bucketed step: ") + mfsdp_last_error(s));
      w = mfsdp::rt::workCounters(s);
      expect(w.bucketGathers == 2 && w.bucketReductions == 1,
             "programmed bucket collectives: " + std::to_string(w.bucketGathers) +
                 " gathers, " + std::to_string(w.bucketReductions) +
                 " reductions (expected 2, 1)");
      mfsdp_destroy(s);
      s = nullptr;
    }
  }
  // An owner bucket of bf16 copies: its copies are one bf16 image of the
  // fp32 layout (docs/runtime.md, "bf16 compute copies"); a memory plan
  // that lays them out at fp32's distances is refused, saying so, and the
  // image's is accepted: one gather of half the fp32 bytes, each member's
  // copy its master rounded to bf16. w0 (owner 0) and w1 (owner 1), 8x8
  // each, on 2 ranks.
  if (world == 2) {
    mfsdp_param_desc ws[2] = {
        {"w0", 8, 8, 0, MFSDP_OWNER, 0, MFSDP_OPT_MUON, MFSDP_COMPUTE_BF16},
        {"w1", 8, 8, 0, MFSDP_OWNER, 1, MFSDP_OPT_MUON, MFSDP_COMPUTE_BF16}};
    const int32_t members[2] = {0, 1};
    const mfsdp_bucket bucket{0, MFSDP_OWNER, 2, members};
    mfsdp_plan b = twoInABucket(ws, bucket);
    // Gradients 256 B apart (64 floats each); w1's copy 256 B after w0's,
    // as fp32 copies lie: not the image.
    mfsdp_param_offsets at[2] = {{0, 2 * K, -1, 4 * K, 8 * K, 8 * K, 12 * K},
                                 {K, 3 * K, -1, 5 * K, 9 * K, 9 * K, 13 * K}};
    int64_t room[64];
    for (int64_t &a : room)
      a = 16 * K;
    const mfsdp_bucket_offsets noStaging{-1, -1, -1};
    mfsdp_memory_plan mem{};
    mem.num_shard_ranks = world;
    mem.arena_bytes = room;
    mem.params = at;
    mem.staging = 14 * K;
    mem.buckets = &noStaging;
    b.memory = &mem;
    b.hash = mfsdp_plan_hash(&b);
    fails(s, mfsdp_create(&b, &s), MFSDP_ERROR_PLAN, "(bf16 copies: half the bytes)");
    mfsdp_destroy(s);
    s = nullptr;
    // The image: w1's copy at the bf16 element where its float lies, 128 B.
    at[1].full = at[1].full_backward = 8 * K + K / 2;
    b.hash = mfsdp_plan_hash(&b);
    expect(mfsdp_create(&b, &s) == MFSDP_OK,
           std::string("create with an owner bucket's bf16 image: ") + mfsdp_last_error(s));
    std::vector<float> value(64);
    for (int i = 0; i < 64; ++i)
      value[i] = 1.f + static_cast<float>(i) / 3.f; // not exact in bf16
    expect(mfsdp_load_param(s, 0, value.data()) == MFSDP_OK &&
               mfsdp_load_param(s, 1, value.data()) == MFSDP_OK &&
               mfsdp_pre_forward(s, 0) == MFSDP_OK,
           std::string("load and gather the bf16 owner bucket: ") + mfsdp_last_error(s));
    DLTensor v{};
    bool rounded = mfsdp_param_view(s, 1, &v) == MFSDP_OK && v.data &&
                   v.dtype.code == kDLBfloat && v.dtype.bits == 16;
    for (int i = 0; rounded && i < 64; ++i) {
      uint32_t u = 0;
      std::memcpy(&u, &value[i], 4);
      const uint32_t want = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
      rounded = static_cast<const uint16_t *>(v.data)[i] == want;
    }
    expect(rounded, "w1's gathered copy in the image is its master rounded to bf16");
    expect(mfsdp::rt::workCounters(s).gatherBytes == 2 * 128,
           "the bf16 owner bucket's gather: " +
               std::to_string(mfsdp::rt::workCounters(s).gatherBytes) +
               " bytes (expected 256: 128 elements, 2 bytes each)");
    expect(mfsdp_post_forward(s, 0) == MFSDP_OK && mfsdp_pre_backward(s, 0) == MFSDP_OK &&
               mfsdp_post_backward(s, 0) == MFSDP_OK,
           std::string("the bf16 owner bucket's backward: ") + mfsdp_last_error(s));
    mfsdp_destroy(s);
    s = nullptr;
  }
  // A memory plan for another mesh, or one too small for the buffers.
  mfsdp_plan wrong = planned;
  mfsdp_memory_plan otherMesh = memory;
  otherMesh.num_shard_ranks = world + 1;
  wrong.memory = &otherMesh;
  wrong.hash = mfsdp_plan_hash(&wrong);
  fails(s, mfsdp_create(&wrong, &s), MFSDP_ERROR_PLAN, "invalid memory plan");
  mfsdp_destroy(s);
  s = nullptr;
  int64_t small[64];
  for (int64_t &a : small)
    a = 4 * K; // w's buffers fit, v's (at 6K on its owner) do not
  mfsdp_memory_plan tooSmall = memory;
  tooSmall.arena_bytes = small;
  wrong.memory = &tooSmall;
  wrong.hash = mfsdp_plan_hash(&wrong);
  // Only the owner of v (dp_shard rank 1) runs out of room; the others
  // fail with it rather than go on alone.
  fails(s, mfsdp_create(&wrong, &s), MFSDP_ERROR_PLAN,
        rank == 1 ? "the library's memory plan does not fit this runtime"
                  : "another rank could not create its runtime");
  // Its buffers were partly placed: every call is still refused.
  fails(s, mfsdp_pre_forward(s, 0), MFSDP_ERROR_INVALID, "this runtime was not created");
  fails(s, mfsdp_set_no_sync(s, 0), MFSDP_ERROR_INVALID, "this runtime was not created");
  fails(s, mfsdp_store_param(s, 0, whole.data()), MFSDP_ERROR_INVALID,
        "this runtime was not created");
  mfsdp_destroy(s);
  s = nullptr;

  // No exception crosses the C ABI: an allocation that fails inside a hook
  // (on every rank at the same point, before any collective) is
  // MFSDP_ERROR_BACKEND naming the call, not the end of the process.
  expect(mfsdp_create(&plan, &s) == MFSDP_OK, "create (allocation failure)");
  allocationsBeforeFailure = 0;
  st = mfsdp_pre_forward(s, 0);
  allocationsBeforeFailure = -1;
  fails(s, st, MFSDP_ERROR_BACKEND,
        "mfsdp_pre_forward: an exception inside the runtime: out of host memory");
  mfsdp_destroy(s);

  // A handle already destroyed: a second mfsdp_destroy is reported on
  // stderr and ignored (no double free), any other call on it fails without
  // touching it, and mfsdp_last_error(NULL) says why. A NULL handle is
  // named as such.
  mfsdp_destroy(s);
  fails(nullptr, mfsdp_pre_forward(s, 0), MFSDP_ERROR_INVALID,
        "is not a live runtime (destroyed, or not made by mfsdp_create)");
  expect(std::strstr(mfsdp_last_error(s), "mfsdp_last_error: ") != nullptr,
         std::string("last_error of a freed handle: ") + mfsdp_last_error(s));
  fails(nullptr, mfsdp_zero_grad(nullptr), MFSDP_ERROR_INVALID,
        "mfsdp_zero_grad: the runtime is NULL");

  // Call-sequence checks (MFSDP_CHECK_CALLS=1): ranks that call different
  // units, a lone optimizer step, or one that destroys its runtime while
  // the other goes on meet in the check; every rank stops with
  // MFSDP_ERROR_ORDER naming each rank's call, and later calls are
  // refused. With the check off, the same calls would pair mismatched
  // collectives. A rank without the check set while others have it is
  // refused at create.
  if (world >= 2) {
    ::setenv("MFSDP_CHECK_CALLS", rank == 0 ? "1" : "0", 1);
    fails(s, mfsdp_create(&plan, &s), MFSDP_ERROR_INVALID,
          rank == 0 ? "MFSDP_CHECK_CALLS is set on this rank but not on every other"
                    : "MFSDP_CHECK_CALLS is not set on this rank but not on every other");
    mfsdp_destroy(s);
    s = nullptr;
    ::setenv("MFSDP_CHECK_CALLS", "1", 1);
    // Same calls: no error, the same results.
    expect(mfsdp_create(&plan, &s) == MFSDP_OK, "create (call checks)");
    expect(mfsdp_pre_forward(s, 0) == MFSDP_OK && mfsdp_post_forward(s, 0) == MFSDP_OK,
           std::string("the same calls pass the check: ") + mfsdp_last_error(s));
    // Different units.
    st = mfsdp_pre_forward(s, rank == 0 ? 1 : 0);
    fails(s, st, MFSDP_ERROR_ORDER,
          "rank 0 called pre_forward(1) (call 3); rank 1 called pre_forward(0) (call 3)");
    fails(s, mfsdp_pre_forward(s, 0), MFSDP_ERROR_ORDER, "this runtime stopped");
    mfsdp_destroy(s);
    s = nullptr;
    // A lone optimizer step.
    expect(mfsdp_create(&plan, &s) == MFSDP_OK, "create (call checks, 2)");
    st = rank == 0 ? mfsdp_optimizer_step(s) : mfsdp_pre_forward(s, 0);
    fails(s, st, MFSDP_ERROR_ORDER, "called optimizer_step() (call 1)");
    mfsdp_destroy(s);
    s = nullptr;
    // Different step counts: rank 1 is done and destroys its runtime while
    // rank 0 starts another forward.
    expect(mfsdp_create(&plan, &s) == MFSDP_OK, "create (call checks, 3)");
    if (rank == 0) {
      fails(s, mfsdp_pre_forward(s, 0), MFSDP_ERROR_ORDER, "called destroy() (call 1)");
      mfsdp_destroy(s);
    } else {
      mfsdp_destroy(s);
    }
    s = nullptr;
    ::unsetenv("MFSDP_CHECK_CALLS");
  }

  // A load whose user dictionary does not fit the caller's buffer is
  // refused before anything is loaded: the parameters and the step count
  // stay as they were; with room, the checkpoint's come back.
  {
    long id = rank == 0 ? static_cast<long>(::getpid()) : 0;
    MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    const std::string dir = std::string(::getenv("TMPDIR") ? ::getenv("TMPDIR") : "/tmp") +
                            "/mfsdp-runtime-errors-ckpt-" + std::to_string(id);
    expect(mfsdp_create(&plan, &s) == MFSDP_OK, "create (checkpoint)");
    std::vector<float> saved(12), changed(12), now(12);
    for (int i = 0; i < 12; ++i) {
      saved[i] = 0.25f * static_cast<float>(i) - 1.f;
      changed[i] = 7.f + static_cast<float>(i);
    }
    const std::string user = "{\"note\": \"" + std::string(5000, 'x') + "\"}";
    expect(mfsdp_load_param(s, 0, saved.data()) == MFSDP_OK &&
               mfsdp_save(s, dir.c_str(), user.c_str()) == MFSDP_OK,
           std::string("save with a 5 KB user dictionary: ") + mfsdp_last_error(s));
    expect(mfsdp_load_param(s, 0, changed.data()) == MFSDP_OK, "load w anew");
    char small[4096];
    fails(s, mfsdp_load(s, dir.c_str(), small, sizeof(small)), MFSDP_ERROR_INVALID,
          "bytes; the buffer has 4096 (nothing was loaded)");
    int64_t count = -1;
    expect(mfsdp_store_param(s, 0, now.data()) == MFSDP_OK && now == changed &&
               mfsdp_step_count(s, &count) == MFSDP_OK && count == 0,
           "a refused load leaves the parameters and the step count as they were");
    std::vector<char> room(user.size() + 64);
    expect(mfsdp_load(s, dir.c_str(), room.data(), static_cast<int64_t>(room.size())) ==
                   MFSDP_OK &&
               std::strstr(room.data(), "xxxxx") &&
               mfsdp_store_param(s, 0, now.data()) == MFSDP_OK && now == saved,
           std::string("a load with room brings the checkpoint back: ") +
               mfsdp_last_error(s));
    mfsdp_destroy(s);
    s = nullptr;
    // One rank's copy fails late in a load, under ZeRO-2, whose gathered
    // copies follow the loaded masters by collectives, and in an HF export,
    // which gathers every tensor: every rank stops with that rank's error,
    // none waits in a gather the failing rank skipped (MFSDP_TEST_FAIL_COPY,
    // the host backend's test hook: rank 1's first copy from or to the host
    // after create's).
    if (world >= 2) {
      mfsdp_plan z2 = plan;
      z2.zero = 2;
      z2.hash = mfsdp_plan_hash(&z2);
      // A ZeRO-2 runtime whose rank 1 fails the copy `spec` names
      // (MFSDP_TEST_FAIL_COPY, read at create).
      auto createFailing = [&](const char *spec) {
        ::setenv("MFSDP_TEST_FAIL_COPY", spec, 1);
        expect(mfsdp_create(&z2, &s) == MFSDP_OK,
               std::string("create (ZeRO-2, a copy that will fail): ") + mfsdp_last_error(s));
        ::unsetenv("MFSDP_TEST_FAIL_COPY");
      };
      createFailing("1:from:3");
      fails(s, mfsdp_load(s, dir.c_str(), nullptr, 0), MFSDP_ERROR_BACKEND,
            rank == 1 ? "a copy from the host failed (injected"
                      : "rank 1 failed writing the loaded parameters");
      // Partly loaded: the runtime stopped, on every rank.
      fails(s, mfsdp_load(s, dir.c_str(), nullptr, 0), MFSDP_ERROR_ORDER,
            "this runtime stopped: a load failed while it wrote the parameters");
      mfsdp_destroy(s);
      s = nullptr;
      createFailing("1:to:1");
      const std::string hf = dir + "-hf";
      fails(s, mfsdp_export_hf(s, hf.c_str(), MFSDP_COMPUTE_F32, 0), MFSDP_ERROR_BACKEND,
            rank == 1 ? "a copy to the host failed (injected"
                      : "rank 1 failed exporting the HF weights");
      struct stat st {};
      expect(::stat(hf.c_str(), &st) != 0, "a failed export leaves no directory");
      mfsdp_destroy(s);
      s = nullptr;
      // An export that works, then an HF load whose copy fails on rank 1.
      expect(mfsdp_create(&z2, &s) == MFSDP_OK &&
                 mfsdp_export_hf(s, hf.c_str(), MFSDP_COMPUTE_F32, 0) == MFSDP_OK,
             std::string("an HF export: ") + mfsdp_last_error(s));
      mfsdp_destroy(s);
      s = nullptr;
      createFailing("1:from:3");
      fails(s, mfsdp_load_hf(s, hf.c_str()), MFSDP_ERROR_BACKEND,
            rank == 1 ? "a copy from the host failed (injected"
                      : "rank 1 failed writing the loaded parameters");
      fails(s, mfsdp_pre_forward(s, 0), MFSDP_ERROR_ORDER,
            "this runtime stopped: an HF load failed while it wrote the parameters");
      mfsdp_destroy(s);
      s = nullptr;
      // The per-parameter calls (a state dict's loop) the same way: one
      // rank's bad argument or failed copy fails the call on every rank
      // before any collective, where the others would wait for it until
      // the collective timeout. A NULL tensor on rank 1 only: refused
      // everywhere, nothing written, the runtime still usable.
      createFailing("1:from:1");
      {
        std::vector<float> whole(12, 0.5f), out(12, -1.0f), before(12, -1.0f);
        expect(mfsdp_store_param(s, 0, before.data()) == MFSDP_OK,
               std::string("store_param before: ") + mfsdp_last_error(s));
        fails(s, mfsdp_store_param(s, 0, rank == 1 ? nullptr : out.data()),
              MFSDP_ERROR_INVALID,
              rank == 1 ? "mfsdp_store_param of 'w': the whole tensor's pointer is NULL"
                        : "rank 1 failed storing 'w': mfsdp_store_param of 'w'");
        fails(s, mfsdp_store_state(s, 0, MFSDP_STATE_EXP_AVG, rank == 1 ? nullptr : out.data()),
              MFSDP_ERROR_INVALID,
              rank == 1 ? "mfsdp_store_state of 'w': the whole tensor's pointer is NULL"
                        : "rank 1 failed storing 'w'");
        fails(s, mfsdp_load_param(s, 0, rank == 1 ? nullptr : whole.data()),
              MFSDP_ERROR_INVALID,
              rank == 1 ? "mfsdp_load_param of 'w': the whole tensor's pointer is NULL"
                        : "rank 1 failed starting mfsdp_load_param of 'w'");
        expect(mfsdp_store_param(s, 0, out.data()) == MFSDP_OK && out == before,
               std::string("a refused load_param wrote nothing: ") + mfsdp_last_error(s));
        // Rank 1's copy from the host fails in load_param: every rank
        // stops (the tensor is partly loaded), none waits in the ZeRO-2
        // gather that follows.
        fails(s, mfsdp_load_param(s, 0, whole.data()), MFSDP_ERROR_BACKEND,
              rank == 1 ? "a copy from the host failed (injected"
                        : "rank 1 failed writing mfsdp_load_param of 'w'");
        fails(s, mfsdp_store_param(s, 0, out.data()), MFSDP_ERROR_ORDER,
              "this runtime stopped: mfsdp_load_param of 'w' failed while it wrote the "
              "tensor");
      }
      mfsdp_destroy(s);
      s = nullptr;
      createFailing("1:from:1");
      {
        // load_state has no collective: without the agreement rank 0 would
        // return success with rank 1's part of the state unwritten.
        std::vector<float> whole(12, 0.25f);
        fails(s, mfsdp_load_state(s, 0, MFSDP_STATE_EXP_AVG, whole.data()),
              MFSDP_ERROR_BACKEND,
              rank == 1 ? "a copy from the host failed (injected"
                        : "rank 1 failed writing mfsdp_load_state of 'w'");
      }
      mfsdp_destroy(s);
      s = nullptr;
      MPI_Barrier(MPI_COMM_WORLD);
      if (rank == 0)
        std::system(("rm -rf '" + hf + "'").c_str());
    }
    // The same model with w stepped by SGD: its momentum buffer is not
    // AdamW's exp_avg, though the state has that name; refused, naming it.
    mfsdp_param_desc sgdParams[2] = {params[0], params[1]};
    sgdParams[0].optimizer = MFSDP_OPT_SGD;
    mfsdp_plan sgdPlan = plan;
    sgdPlan.params = sgdParams;
    sgdPlan.sgd_lr = 0.1f;
    sgdPlan.sgd_momentum = 0.9f;
    sgdPlan.hash = mfsdp_plan_hash(&sgdPlan);
    expect(mfsdp_create(&sgdPlan, &s) == MFSDP_OK, "create (SGD)");
    fails(s, mfsdp_load(s, dir.c_str(), nullptr, 0), MFSDP_ERROR_PLAN,
          "'w' is stepped by SGD here but was saved with AdamW");
    // One rank's bad argument: every rank hears of it at once (the others
    // would otherwise wait for it until the collective timeout).
    if (world >= 2) {
      std::vector<char> buf(user.size() + 64);
      fails(s, mfsdp_load(s, dir.c_str(), buf.data(), rank == 1 ? 0 : 100000),
            MFSDP_ERROR_INVALID,
            rank == 1 ? "expected a directory name, and a user buffer of at least 1 byte"
                      : "another rank could not read the checkpoint");
    }
    // Another save of the same plan, and its rank 1 file copied into the
    // first checkpoint: as many bytes, its own checksums right, but written
    // by another save: refused, naming the file.
    if (world >= 2) {
      const std::string other = dir + "-other";
      mfsdp_destroy(s);
      s = nullptr;
      expect(mfsdp_create(&plan, &s) == MFSDP_OK &&
                 mfsdp_load_param(s, 0, changed.data()) == MFSDP_OK &&
                 mfsdp_save(s, other.c_str(), "{}") == MFSDP_OK,
             std::string("a second save: ") + mfsdp_last_error(s));
      MPI_Barrier(MPI_COMM_WORLD);
      if (rank == 0)
        std::system(("cp '" + other + "/rank-00001.safetensors' '" + dir + "/'").c_str());
      MPI_Barrier(MPI_COMM_WORLD);
      mfsdp_destroy(s);
      s = nullptr;
      expect(mfsdp_create(&plan, &s) == MFSDP_OK, "create (a mixed checkpoint)");
      fails(s, mfsdp_load(s, dir.c_str(), nullptr, 0), MFSDP_ERROR_IO,
            rank == 1 ? "rank-00001.safetensors was written by another save"
                      : "mfsdp_load");
      if (rank == 0)
        std::system(("rm -rf '" + other + "'").c_str());
    }
    mfsdp_destroy(s);
    s = nullptr;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
      std::system(("rm -rf '" + dir + "'").c_str());
  }

  // Parameters without a gradient (MFSDP_UNUSED_SKIP, torch.optim's rule
  // for a .grad that is None): the rule must be every rank's, a mark needs
  // the rule and the unit in its backward. A parameter no rank gave a
  // gradient is not stepped (weights, weight decay 0.1 or not, and step
  // count as they were); one that rank 0 alone gave a gradient is stepped
  // on every rank; each keeps its own count, and a checkpoint keeps them.
  {
    long id = rank == 0 ? static_cast<long>(::getpid()) : 0;
    MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    const std::string dir = std::string(::getenv("TMPDIR") ? ::getenv("TMPDIR") : "/tmp") +
                            "/mfsdp-runtime-errors-unused-" + std::to_string(id);
    expect(mfsdp_create(&plan, &s) == MFSDP_OK, "create (unused gradients)");
    fails(s, mfsdp_mark_no_grad(s, 0), MFSDP_ERROR_ORDER,
          "mfsdp_set_unused_grads(MFSDP_UNUSED_SKIP) first");
    if (world >= 2)
      fails(s,
            mfsdp_set_unused_grads(s, rank == 0 ? MFSDP_UNUSED_SKIP : MFSDP_UNUSED_STEP),
            MFSDP_ERROR_INVALID, "the ranks ask for different rules");
    fails(s, mfsdp_set_unused_grads(s, 5), MFSDP_ERROR_INVALID,
          "rule 5 is not MFSDP_UNUSED_STEP (0) or MFSDP_UNUSED_SKIP (1)");
    expect(mfsdp_set_unused_grads(s, MFSDP_UNUSED_SKIP) == MFSDP_OK,
           std::string("set_unused_grads: ") + mfsdp_last_error(s));
    fails(s, mfsdp_mark_no_grad(s, 0), MFSDP_ERROR_ORDER,
          "while unit 0 is not in its backward (expected between its pre_backward");
    fails(s, mfsdp_mark_no_grad(s, 7), MFSDP_ERROR_INVALID, "parameter 7 is out of range");
    mfsdp_hparams h;
    expect(mfsdp_get_hparams(s, 0, &h) == MFSDP_OK, "hparams of w");
    h.weight_decay = 0.1f;
    expect(mfsdp_set_hparams(s, 0, &h) == MFSDP_OK, "w decays");
    std::vector<float> w0(12), w1(12), w2(12);
    for (int i = 0; i < 12; ++i)
      w0[i] = 1.f + 0.5f * static_cast<float>(i);
    expect(mfsdp_load_param(s, 0, w0.data()) == MFSDP_OK, "load w");
    // One step: gradients of ones, w marked on the ranks in `marks`.
    auto oneStep = [&](bool markW) {
      DLTensor g;
      bool ok = mfsdp_pre_forward(s, 0) == MFSDP_OK && mfsdp_post_forward(s, 0) == MFSDP_OK &&
                mfsdp_pre_forward(s, 1) == MFSDP_OK && mfsdp_post_forward(s, 1) == MFSDP_OK &&
                mfsdp_pre_backward(s, 1) == MFSDP_OK && mfsdp_grad_view(s, 1, &g) == MFSDP_OK;
      if (ok)
        std::fill_n(static_cast<float *>(g.data), 9, 1.f);
      ok = ok && mfsdp_post_backward(s, 1) == MFSDP_OK && mfsdp_pre_backward(s, 0) == MFSDP_OK;
      if (ok && markW)
        ok = mfsdp_mark_no_grad(s, 0) == MFSDP_OK;
      return ok && mfsdp_post_backward(s, 0) == MFSDP_OK &&
             mfsdp_optimizer_step(s) == MFSDP_OK && mfsdp_zero_grad(s) == MFSDP_OK;
    };
    int64_t cw = -1, cv = -1, c = -1;
    expect(oneStep(true) && mfsdp_store_param(s, 0, w1.data()) == MFSDP_OK,
           std::string("a step that no rank gives w a gradient: ") + mfsdp_last_error(s));
    expect(w1 == w0, "w, without a gradient on any rank, is not stepped (not decayed)");
    expect(mfsdp_param_step_count(s, 0, &cw) == MFSDP_OK && cw == 0 &&
               mfsdp_param_step_count(s, 1, &cv) == MFSDP_OK && cv == 1 &&
               mfsdp_step_count(s, &c) == MFSDP_OK && c == 1,
           "step counts after a step that skipped w: w " + std::to_string(cw) + ", v " +
               std::to_string(cv) + ", the runtime " + std::to_string(c));
    expect(oneStep(rank != 0) && mfsdp_store_param(s, 0, w2.data()) == MFSDP_OK,
           std::string("a step that rank 0 alone gives w a gradient: ") +
               mfsdp_last_error(s));
    expect(w2 != w0 && mfsdp_param_step_count(s, 0, &cw) == MFSDP_OK && cw == 1,
           "w, with a gradient from rank 0, is stepped on every rank (count " +
               std::to_string(cw) + ")");
    expect(mfsdp_save(s, dir.c_str(), "{}") == MFSDP_OK,
           std::string("save (own step counts): ") + mfsdp_last_error(s));
    mfsdp_destroy(s);
    s = nullptr;
    expect(mfsdp_create(&plan, &s) == MFSDP_OK && mfsdp_load(s, dir.c_str(), nullptr, 0) ==
                                                      MFSDP_OK,
           "load (own step counts)");
    cw = cv = c = -1;
    expect(mfsdp_param_step_count(s, 0, &cw) == MFSDP_OK && cw == 1 &&
               mfsdp_param_step_count(s, 1, &cv) == MFSDP_OK && cv == 2 &&
               mfsdp_step_count(s, &c) == MFSDP_OK && c == 2,
           "a checkpoint keeps each parameter's step count: w " + std::to_string(cw) +
               ", v " + std::to_string(cv) + ", the runtime " + std::to_string(c));
    expect(mfsdp_set_step_count(s, 5) == MFSDP_OK &&
               mfsdp_param_step_count(s, 0, &cw) == MFSDP_OK && cw == 5,
           "set_step_count sets every parameter's");
    mfsdp_destroy(s);
    s = nullptr;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
      std::system(("rm -rf '" + dir + "'").c_str());
  }

  int counts[2] = {passed, failed}, totals[2] = {0, 0};
  MPI_Reduce(counts, totals, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("runtime errors: %d passed, %d failed\n", totals[0], totals[1]);
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any ? 1 : 0;
}

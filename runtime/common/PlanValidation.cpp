//===- PlanValidation.cpp - mfsdp_create: the plan checked and laid out ---===//
//
// mfsdp_create on every rank: the bootstrap, the checks of the plan that
// need no communicator (hash, world, counts, mesh), the ranks' agreement on
// plan and backend, the backend, each parameter's layout on this rank
// checked against the library's memory plan, the buckets, ns_split, the
// arena and the buffers kept for the whole run; then the ranks agree that
// every one succeeded.
//
//===----------------------------------------------------------------------===//
#include "Step.h"

#include "mfsdp/runtime/BufferSizes.h"
#include "mfsdp/runtime/ControlPlane.h"
#include "mfsdp/runtime/DefaultProgram.h"
#include "mfsdp/runtime/HostComm.h"
#include "mfsdp/runtime/PlanHash.h"
#include "mfsdp/runtime/ProgramHooks.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace mfsdp::rt;
using mfsdp::runtime::BufferFloats;
using mfsdp::runtime::bufferFloats;

namespace {

/// What is wrong with a plan entry's block extents ("" when nothing).
std::string blockProblem(const mfsdp_param_desc &d) {
  const std::string extents =
      std::to_string(d.block_rows) + "x" + std::to_string(d.block_cols);
  if (d.placement != MFSDP_BLOCK_SHARD)
    return d.block_rows || d.block_cols
               ? "block extents " + extents + " on a placement other than "
                 "MFSDP_BLOCK_SHARD (expected 0x0)"
               : "";
  if (d.block_rows < 1 || d.block_cols < 1 || d.rows % d.block_rows ||
      d.cols % d.block_cols)
    return "blocks of " + extents + " do not tile the " + std::to_string(d.rows) +
           "x" + std::to_string(d.cols) +
           " tensor (block extents must be positive and divide rows and cols)";
  if (d.optimizer == MFSDP_OPT_MUON)
    return "Muon needs the whole matrix, but MFSDP_BLOCK_SHARD splits it into "
           "blocks (use MFSDP_OWNER)";
  return "";
}

/// What is wrong with the size and layout version a caller's struct
/// carries ("" when nothing): this library reads `size` bytes of layout
/// `version` only.
std::string layoutProblem(const char *type, uint32_t gotSize, uint32_t gotVersion,
                          size_t size, uint32_t version, const char *initializer) {
  if (gotSize == size && gotVersion == version)
    return "";
  return std::string("the ") + type + " has struct_size " + std::to_string(gotSize) +
         " and version " + std::to_string(gotVersion) + ", but this libmfsdp_rt (mfsdp " +
         std::to_string(MFSDP_VERSION_MAJOR) + "." + std::to_string(MFSDP_VERSION_MINOR) +
         "." + std::to_string(MFSDP_VERSION_PATCH) + ") reads a " + type + " of " +
         std::to_string(size) + " bytes, version " + std::to_string(version) +
         ": initialise it with " + initializer + " from this version's runtime.h";
}

} // namespace

bool mfsdp_step::assignNsReplicas() {
  if (plan.ns_split != 0 && plan.ns_split != 1)
    return false;
  if (!plan.ns_split || R < 2)
    return true;
  std::vector<int64_t> held(S, 0);
  for (const std::vector<int32_t> &unit : unitParams)
    for (int32_t p : unit) {
      ParamState &ps = params[p];
      if (ps.desc.placement == MFSDP_OWNER && ps.desc.optimizer == MFSDP_OPT_MUON)
        ps.nsReplica = static_cast<int32_t>(held[ps.desc.owner]++ % R);
    }
  return true;
}

bool mfsdp_step::layOut(ParamState &ps) {
  const mfsdp_param_desc &d = ps.desc;
  if (d.unit < 0 || d.unit >= plan.num_units || d.rows < 1 || d.cols < 1 ||
      d.rows > MFSDP_MAX_PARAM_ELEMENTS / d.cols ||
      d.placement < MFSDP_ROW_SHARD || d.placement > MFSDP_BLOCK_SHARD ||
      (d.placement == MFSDP_OWNER && (d.owner < 0 || d.owner >= plan.dp_shard)) ||
      (d.optimizer == MFSDP_OPT_MUON && d.placement != MFSDP_OWNER &&
       d.placement != MFSDP_REPLICATE) ||
      (d.compute_dtype != MFSDP_COMPUTE_F32 && d.compute_dtype != MFSDP_COMPUTE_BF16) ||
      !blockProblem(d).empty())
    return false;
  const int64_t cols = d.cols;
  switch (d.placement) {
  case MFSDP_ROW_SHARD:
    ps.chunkRows = (d.rows + S - 1) / S;
    ps.localRows = std::clamp<int64_t>(d.rows - shardRank * ps.chunkRows, 0,
                                       ps.chunkRows);
    ps.ownsAny = ps.localRows > 0;
    ps.localCount = ps.localRows * cols;
    ps.localSize = ps.chunkRows * cols; // every rank sends a whole chunk
    ps.fullSize = ps.localSize * S;
    break;
  case MFSDP_OWNER:
    ps.ownsAny = d.owner == shardRank;
    ps.localCount = ps.localSize = ps.ownsAny ? ps.elements() : 0;
    ps.fullSize = ps.elements();
    break;
  case MFSDP_BLOCK_SHARD:
    // This rank's blocks, packed; no padding (ranks may keep unequal
    // numbers of blocks, or none).
    ps.grid = BlockGrid{d.rows, cols, d.block_rows, d.block_cols, S};
    ps.localCount = ps.localSize = ps.grid.blocksOf(shardRank) * ps.grid.blockElems();
    ps.ownsAny = ps.localCount > 0;
    ps.fullSize = ps.elements();
    for (int64_t r = 0; r < S; ++r)
      ps.blockCounts.push_back(ps.grid.blocksOf(r) * ps.grid.blockElems());
    break;
  default:
    ps.ownsAny = true;
    ps.localCount = ps.localSize = ps.fullSize = ps.elements();
  }
  return true;
}

namespace {

/// The mesh the runtime forms its groups on: the plan's (a missing
/// dp_shard or dp_replicate dim added with size 1), or without one
/// [other, dp_replicate, dp_shard], the rest of the world outermost.
/// Empty with `error` when the plan's mesh is malformed or its product is
/// not `world`.
std::vector<MeshDimSpec> planMesh(const mfsdp_plan &plan, int world,
                                  std::string &error) {
  std::vector<MeshDimSpec> mesh;
  const int64_t dp = static_cast<int64_t>(plan.dp_shard) * plan.dp_replicate;
  if (plan.num_mesh_dims == 0 && !plan.mesh_dims) {
    if (dp < 1 || world % dp != 0) {
      error = "invalid plan: dp_shard x dp_replicate (" + std::to_string(dp) +
              ") does not divide the world (" + std::to_string(world) + ")";
      return {};
    }
    return {{"other", world / dp},
            {"dp_replicate", plan.dp_replicate},
            {"dp_shard", plan.dp_shard}};
  }
  if (plan.num_mesh_dims < 1 || plan.num_mesh_dims > 64 || !plan.mesh_dims) {
    error = "invalid plan: " + std::to_string(plan.num_mesh_dims) +
            " mesh dims" + (plan.mesh_dims ? "" : " and no mesh_dims table") +
            "; expected 1 to 64 dims in mesh_dims, or 0 and NULL";
    return {};
  }
  int64_t product = 1;
  bool haveShard = false, haveReplicate = false;
  std::string text;
  for (int32_t i = 0; i < plan.num_mesh_dims; ++i) {
    const mfsdp_mesh_dim &d = plan.mesh_dims[i];
    const std::string name = d.name ? d.name : "";
    text += (i ? "," : "") + name + "=" + std::to_string(d.size);
    if (name.empty() || d.size < 1) {
      error = "invalid plan: mesh dim " + std::to_string(i) +
              " has no name or a size below 1";
      return {};
    }
    for (const MeshDimSpec &seen : mesh)
      if (seen.name == name) {
        error = "invalid plan: the mesh names dim '" + name + "' twice";
        return {};
      }
    const int32_t want = name == "dp_shard"       ? plan.dp_shard
                         : name == "dp_replicate" ? plan.dp_replicate
                                                  : d.size;
    if (d.size != want) {
      error = "invalid plan: the mesh's '" + name + "' has size " +
              std::to_string(d.size) + " but the plan's " + name + " is " +
              std::to_string(want);
      return {};
    }
    haveShard |= name == "dp_shard";
    haveReplicate |= name == "dp_replicate";
    product *= d.size;
    if (product > world)
      break;
    mesh.push_back({name, d.size});
  }
  if (product != world) {
    error = "invalid plan: the mesh " + text + " has " +
            (product > world ? "more than " + std::to_string(world)
                             : std::to_string(product)) +
            " ranks, but the world is " + std::to_string(world);
    return {};
  }
  if ((!haveShard && plan.dp_shard != 1) || (!haveReplicate && plan.dp_replicate != 1)) {
    error = "invalid plan: the mesh " + text + " has no dp_shard or "
            "dp_replicate dim, but the plan's is larger than 1";
    return {};
  }
  // Size-1 dims change no rank's coordinates; the groups need both names.
  if (!haveReplicate)
    mesh.push_back({"dp_replicate", 1});
  if (!haveShard)
    mesh.push_back({"dp_shard", 1});
  return mesh;
}

} // namespace

/// MFSDP_TRACE or config->trace_path: this rank's trace opened and the
/// backend wrapped to record every call (Trace.h).
static mfsdp_status startTrace(mfsdp_step &step, const mfsdp_config *config, int rank) {
  std::string error;
  step.trace = Trace::open(config ? config->trace_path : nullptr, rank, step.plan, error);
  if (!error.empty())
    return step.fail(MFSDP_ERROR_INVALID, error);
  if (step.trace)
    step.backend = Trace::wrap(std::move(step.backend), *step.trace);
  return MFSDP_OK;
}

mfsdp_status mfsdp::rt::createStep(const mfsdp_plan *plan,
                                   const mfsdp_config *config, mfsdp_step **out) {
  if (!plan || !out)
    return MFSDP_ERROR_INVALID;
  *out = nullptr;
  auto step = std::make_unique<mfsdp_step>();
  // Every failure below is returned with the runtime, for its message.
  auto failed = [&](mfsdp_status s, std::string message) {
    step->error = std::move(message);
    step->createError = step->error;
    *out = step.release();
    return s;
  };
  // The layouts first: nothing else of a struct of another layout is read.
  // Every rank loads the same library and config, so every rank stops
  // here alike, before the ranks agree.
  const std::string planLayout =
      layoutProblem("mfsdp_plan", plan->struct_size, plan->version, sizeof(mfsdp_plan),
                    MFSDP_PLAN_VERSION, "MFSDP_PLAN_INITIALIZER");
  if (!planLayout.empty())
    return failed(MFSDP_ERROR_PLAN,
                  planLayout + " (a step library built by another mfsdp-compile: "
                               "rebuild it with this version's)");
  if (config) {
    const std::string configLayout =
        layoutProblem("mfsdp_config", config->struct_size, config->version,
                      sizeof(mfsdp_config), MFSDP_CONFIG_VERSION,
                      "MFSDP_CONFIG_INITIALIZER");
    if (!configLayout.empty())
      return failed(MFSDP_ERROR_INVALID, configLayout);
  }
  step->plan = *plan;
  const int32_t choice = config ? config->backend : MFSDP_BACKEND_HOST;
  const int32_t bootstrap = config ? config->bootstrap : MFSDP_BOOTSTRAP_MPI;
  // The world and the agreements below: MPI, or the torchrun variables
  // and TCP through rank 0 (ControlPlane.h).
  std::unique_ptr<ControlPlane> control;
  int timeoutMs = 0; // torchrun: each wait of the bootstrap
  if (bootstrap == MFSDP_BOOTSTRAP_MPI) {
    control.reset(createMpiControlPlane());
    if (!control)
      return failed(MFSDP_ERROR_INVALID,
                    "MPI is not initialized: call MPI_Init before mfsdp_create "
                    "(or, under torchrun, set mfsdp_config.bootstrap to "
                    "MFSDP_BOOTSTRAP_TORCHRUN)");
  } else if (bootstrap == MFSDP_BOOTSTRAP_TORCHRUN) {
    if (config->bootstrap_timeout_ms < 0)
      return failed(MFSDP_ERROR_INVALID,
                    "bootstrap_timeout_ms is " +
                        std::to_string(config->bootstrap_timeout_ms) +
                        " in mfsdp_config; expected milliseconds > 0, or 0 for "
                        "the default");
    timeoutMs = config->bootstrap_timeout_ms ? config->bootstrap_timeout_ms
                                             : MFSDP_BOOTSTRAP_TIMEOUT_MS_DEFAULT;
    RankEnv env;
    std::string error;
    if (!readRankEnv(processEnvironment(), env, error))
      return failed(MFSDP_ERROR_INVALID, "the torchrun bootstrap: " + error);
    control.reset(createTorchrunControlPlane(env, timeoutMs, error));
    if (!control)
      return failed(MFSDP_ERROR_COMM, "the torchrun bootstrap: " + error);
  } else {
    return failed(MFSDP_ERROR_INVALID,
                  "unknown bootstrap " + std::to_string(bootstrap) +
                      " in mfsdp_config: expected MFSDP_BOOTSTRAP_MPI (0) or "
                      "MFSDP_BOOTSTRAP_TORCHRUN (1)");
  }
  const bool torchrun = bootstrap == MFSDP_BOOTSTRAP_TORCHRUN;
  const int world = control->world();
  // The checks that need no communicator, then the ranks agree: every rank
  // goes on with the same plan and backend, or none does (a rank left
  // alone would wait in the first collective).
  mfsdp_status local = MFSDP_OK;
  if (choice != MFSDP_BACKEND_HOST && choice != MFSDP_BACKEND_CUDA)
    local = step->fail(MFSDP_ERROR_INVALID,
                       "unknown backend " + std::to_string(choice) +
                           " in mfsdp_config: expected MFSDP_BACKEND_HOST (0) or "
                           "MFSDP_BACKEND_CUDA (1)");
  else if (torchrun && choice == MFSDP_BACKEND_HOST && !hasGloo())
    local = step->fail(MFSDP_ERROR_INVALID,
                       "this libmfsdp_rt was built without gloo (libgloo-dev), "
                       "which the host backend's collectives need under the "
                       "torchrun bootstrap (MFSDP_BOOTSTRAP_TORCHRUN): ask for "
                       "the CUDA backend (MFSDP_BACKEND_CUDA), or start the "
                       "job with mpirun and the MPI bootstrap");
  else if (mfsdp_plan_hash(plan) != plan->hash)
    local = step->fail(MFSDP_ERROR_PLAN,
                       "the plan's hash does not match its contents: the plan is "
                       "corrupt or was written by another compiler version");
  else if (world != plan->world)
    local = step->fail(MFSDP_ERROR_PLAN, "this library was built for a plan of " +
                                             std::to_string(plan->world) +
                                             " ranks, but " +
                                             (torchrun ? "WORLD_SIZE is "
                                                       : "MPI runs ") +
                                             std::to_string(world));
  else if (plan->zero < 1 || plan->zero > 3 || plan->dp_shard < 1 ||
           plan->dp_replicate < 1 || plan->num_params < 0 || plan->num_units < 0)
    local = step->fail(MFSDP_ERROR_PLAN, "invalid plan: zero, dp_shard, "
                                         "dp_replicate or counts out of range");
  else if (plan->reduce_dtype != MFSDP_REDUCE_F32 &&
           plan->reduce_dtype != MFSDP_REDUCE_BF16)
    local = step->fail(MFSDP_ERROR_PLAN,
                       "invalid plan: reduce_dtype is " +
                           std::to_string(plan->reduce_dtype) +
                           "; expected MFSDP_REDUCE_F32 (0) or MFSDP_REDUCE_BF16 (1)");
  else if (plan->muon_ns_precision != MFSDP_NS_PRECISION_FP32 &&
           plan->muon_ns_precision != MFSDP_NS_PRECISION_BF16)
    local = step->fail(MFSDP_ERROR_PLAN,
                       "invalid plan: muon_ns_precision is " +
                           std::to_string(plan->muon_ns_precision) +
                           "; expected MFSDP_NS_PRECISION_FP32 (0) or "
                           "MFSDP_NS_PRECISION_BF16 (1)");
  // The mesh as the runtime sees it (the plan's, or the rest of the world
  // outermost); the dp_shard and dp_replicate groups follow its layout.
  std::vector<MeshDimSpec> mesh;
  if (local == MFSDP_OK) {
    std::string error;
    mesh = planMesh(*plan, world, error);
    if (mesh.empty())
      local = step->fail(MFSDP_ERROR_PLAN, error);
  }
  if (local == MFSDP_OK && plan->program) {
    const std::string problem = programProblem(*plan);
    if (!problem.empty())
      local = step->fail(MFSDP_ERROR_PLAN, problem);
  }
  {
    // Status (max), and the plan hash and backend, which must be equal
    // everywhere (min = max).
    const uint64_t h = plan->hash;
    const std::vector<int64_t> mine = {static_cast<int64_t>(local),
                                       static_cast<int64_t>(h >> 32),
                                       static_cast<int64_t>(h & 0xffffffffu), choice};
    std::vector<int64_t> lo, hi;
    std::string error;
    if (!control->minMax(mine, lo, hi, error))
      return failed(MFSDP_ERROR_COMM, error + " while the ranks compared their plans");
    if (local != MFSDP_OK)
      return failed(local, step->error);
    if (hi[0] != MFSDP_OK)
      return failed(static_cast<mfsdp_status>(hi[0]),
                    "another rank refused the plan or its config (its "
                    "mfsdp_last_error says why)");
    if (lo[1] != hi[1] || lo[2] != hi[2])
      return failed(MFSDP_ERROR_PLAN, "the ranks passed different plans (their "
                                      "hashes differ): every rank must load the "
                                      "same step library");
    if (lo[3] != hi[3])
      return failed(MFSDP_ERROR_INVALID, "the ranks asked for different backends "
                                         "in mfsdp_config");
  }
  step->mesh = mesh;
  step->worldRank = control->rank();
  BackendOptions options;
  options.mesh = std::move(mesh);
  options.trainerStream = config ? config->cuda_stream : nullptr;
  options.control = control.get();
  options.timeoutMs = timeoutMs;
  if (config && config->collective_timeout_ms < 0)
    return failed(MFSDP_ERROR_INVALID,
                  "collective_timeout_ms is " +
                      std::to_string(config->collective_timeout_ms) +
                      " in mfsdp_config; expected milliseconds > 0, or 0 for "
                      "the default (10 minutes)");
  options.collectiveTimeoutMs =
      config && config->collective_timeout_ms ? config->collective_timeout_ms
                                              : MFSDP_COLLECTIVE_TIMEOUT_MS_DEFAULT;
  control->setTimeout(options.collectiveTimeoutMs);
  std::string error;
  mfsdp_status s = MFSDP_OK;
  if (choice == MFSDP_BACKEND_CUDA) {
    step->backend.reset(loadCudaBackend(options, error));
    if (!step->backend)
      s = step->fail(MFSDP_ERROR_BACKEND, error);
  } else {
    step->backend.reset(createHostBackend(options, error));
    if (!step->backend)
      s = step->fail(MFSDP_ERROR_COMM, "cannot create communicators: " + error);
  }
  if (!s)
    s = startTrace(*step, config, control->rank());
  // Rank-dependent checks and the buffers: failures are collected, so the
  // ranks still agree below.
  auto layOutAll = [&]() -> mfsdp_status {
    step->S = plan->dp_shard;
    step->R = plan->dp_replicate;
    step->shardRank = step->backend->rank(Group::Shard);
    if (const mfsdp_memory_plan *m = plan->memory) {
      if (m->num_shard_ranks != plan->dp_shard || !m->arena_bytes ||
          (plan->num_params > 0 && !m->params) ||
          (m->keep_grads != 0 && m->keep_grads != 1) ||
          (m->prefetch != 0 && m->prefetch != 1) ||
          m->arena_bytes[step->shardRank] < 0)
        return step->fail(MFSDP_ERROR_PLAN,
                      "invalid memory plan: it must have one arena size per "
                      "dp_shard rank (" + std::to_string(plan->dp_shard) +
                          "), one entry per parameter, keep_grads 0 or 1 and "
                          "prefetch 0 or 1");
      step->memory = m;
    }
    step->unitParams.resize(plan->num_units);
    step->state.assign(plan->num_units, UnitState::Idle);
    // The program the hooks and the optimizer step run: the library's, with
    // what a plan built by hand leaves out derived (DefaultProgram.h), at
    // the prefetch depth its memory plan made room for.
    step->program = mfsdp::runtime::completeProgram(*plan, plan->program,
                                                    step->prefetching());
    step->plan.program = &step->program->program;
    step->hookEntry = mfsdp::runtime::hookEntries(step->program->program, plan->num_units);
    step->reduced.assign(plan->num_units, false);
    step->reducedBeforeForward.assign(plan->num_units, false);
    for (int32_t i = 0; i < plan->num_params; ++i) {
      ParamState ps;
      ps.desc = plan->params[i];
      ps.name = ps.desc.name ? ps.desc.name : ("param " + std::to_string(i));
      ps.hparams = planHparams(*plan, ps.desc.optimizer);
      if (!step->layOut(ps)) {
        const std::string why = blockProblem(ps.desc);
        return step->fail(MFSDP_ERROR_PLAN, "invalid plan entry for parameter '" +
                                            ps.name + "'" + (why.empty() ? "" : ": ") +
                                            why);
      }
      if (step->memory) {
        // The compiler sized the plan's buffers with BufferSizes.h; this
        // runtime's layout must agree, or offsets would overlap.
        const BufferFloats want = bufferFloats(ps.desc, plan->dp_shard, step->shardRank);
        if (want.master != ps.localSize || want.full != ps.fullSize)
          return step->fail(MFSDP_ERROR_PLAN,
                        "the library's memory plan sizes '" + ps.name + "' as " +
                            std::to_string(want.master) + " local and " +
                            std::to_string(want.full) + " whole floats, this "
                            "runtime as " + std::to_string(ps.localSize) + " and " +
                            std::to_string(ps.fullSize));
        ps.at = step->memory->params[i];
      }
      step->unitParams[ps.desc.unit].push_back(i);
      step->params.push_back(std::move(ps));
    }
    if (auto st = step->layOutBuckets())
      return st;
    // Gradient buffers of bf16 elements at 2 bytes each where the memory
    // plan sized them so (BufferSizes.h: halfGradient).
    for (ParamState &ps : step->params)
      ps.halfGrad = mfsdp::runtime::halfGradient(ps.desc, step->plan.reduce_dtype);
    step->replicaRank = step->backend->rank(Group::Replicate);
    if (!step->assignNsReplicas())
      return step->fail(MFSDP_ERROR_PLAN, "invalid plan: ns_split is " +
                                          std::to_string(plan->ns_split) +
                                          "; expected 0 or 1");
    return MFSDP_OK;
  };
  // A rank without a backend still joins the agreement at the end.
  if (!s)
    s = layOutAll();
  int64_t scratch = 0;
  for (ParamState &ps : step->params)
    if (ps.ownsAny && ps.desc.optimizer == MFSDP_OPT_MUON)
      scratch = std::max(scratch, step->backend->muonScratch(ps.desc.rows, ps.desc.cols));
  // With a static plan: its arena, then the backend's Muon scratch after
  // it (its size depends on the backend). Without: every buffer at once.
  const int64_t planned =
      step->memory ? Arena::roundUp(step->memory->arena_bytes[step->shardRank]) : 0;
  const int64_t bytes =
      step->memory
          ? planned + Arena::roundUp(scratch * static_cast<int64_t>(sizeof(float)))
          : step->arenaBytes();
  if (!s && step->backend->reserve(bytes))
    s = step->fail(MFSDP_ERROR_BACKEND,
                   "cannot reserve the arena of " + std::to_string(bytes) +
                       " bytes on the " + step->backend->name() +
                       " backend: " + step->backend->lastError());
  for (size_t i = 0; !s && i < step->params.size(); ++i)
    s = step->allocateKept(step->params[i]);
  if (!s)
    s = step->memory
            ? step->device(step->backend->allocateAt(planned, scratch, step->muonScratch),
                           "placing the Muon scratch")
            : step->allocate(scratch, step->muonScratch, "the Muon scratch");
  if (!s)
    s = step->finish();
  // Every rank goes on or none does: a rank whose buffers did not fit
  // would leave the others waiting in their first collective.
  // Call-sequence checks (CallCheck.cpp) on every rank or on none: a rank
  // that compares alone would wait for the others.
  const char *checkEnv = std::getenv("MFSDP_CHECK_CALLS");
  const bool checkCalls = checkEnv && *checkEnv && std::strcmp(checkEnv, "0") != 0;
  std::vector<int64_t> lo, hi;
  if (!control->minMax({static_cast<int64_t>(s), checkCalls ? 1 : 0}, lo, hi, error))
    s = step->fail(MFSDP_ERROR_COMM,
                   error + " while the ranks agreed that mfsdp_create succeeded");
  else if (!s && hi[0] != MFSDP_OK)
    s = step->fail(static_cast<mfsdp_status>(hi[0]),
                   "another rank could not create its runtime (its "
                   "mfsdp_last_error says why)");
  else if (!s && lo[1] != hi[1])
    s = step->fail(MFSDP_ERROR_INVALID,
                   std::string("MFSDP_CHECK_CALLS is ") +
                       (checkCalls ? "set" : "not set") +
                       " on this rank but not on every other: set it the same "
                       "on every rank");
  step->checkCalls = checkCalls;
  step->created = s == MFSDP_OK;
  if (!step->created)
    step->createError = step->error;
  step->control = std::move(control);
  *out = step.release();
  return s;
}

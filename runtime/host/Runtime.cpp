//===- Runtime.cpp - The C ABI on the host backend (MPI + OpenBLAS) -------===//
//
// Executes a plan's step through the per-unit hooks: gathers before use,
// frees after use (ZeRO-3), reduces gradients after backward (reduce-scatter
// for row shards, reduce-scatter-v to owners, all-reduce for replicated
// tensors, all-reduce between dp_replicate replicas), averages them over the
// data-parallel ranks, and runs AdamW / SGD on shards and Muon on owners.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime.h"
#include "mfsdp/runtime/PlanHash.h"

#include "mfsdp/runtime/HostComm.h"
#include "mfsdp/runtime/Kernels.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace mfsdp::rt;

namespace {

enum class UnitState { Idle, Forward, ForwardDone, Backward };

struct ParamState {
  mfsdp_param_desc desc;
  std::string name;
  int64_t chunkRows = 0;  // row shard: ceil(rows / S)
  int64_t localRows = 0;  // rows this rank keeps
  bool ownsAny = false;   // this rank updates something of it
  std::vector<float> master;     // shard, owned matrix, or whole
  std::vector<float> m, v;       // AdamW / SGD / Muon state
  std::vector<float> gradShard;  // the reduced gradient this rank keeps
  std::vector<float> full;       // gathered parameter (empty when freed)
  std::vector<float> grad;       // gradient buffer handed to the trainer
  int64_t elements() const { return desc.rows * desc.cols; }
};

} // namespace

struct mfsdp_step {
  mfsdp_plan plan;
  std::vector<ParamState> params;
  std::vector<std::vector<int32_t>> unitParams;
  std::vector<UnitState> state;
  std::vector<bool> reduced;
  std::unique_ptr<HostComm> shard, replicate;
  int64_t S = 1, R = 1, shardRank = 0;
  int64_t steps = 0;
  bool noSync = false;
  std::string error;

  mfsdp_status fail(mfsdp_status s, std::string message) {
    error = std::move(message);
    return s;
  }
  /// MFSDP_ERROR_INVALID with a message unless `param` indexes the plan.
  mfsdp_status checkParam(int32_t param) {
    if (param < 0 || param >= plan.num_params)
      return fail(MFSDP_ERROR_INVALID,
                  "parameter " + std::to_string(param) + " is out of range");
    return MFSDP_OK;
  }
  mfsdp_status comm(int code, const char *what) {
    if (code == 0)
      return MFSDP_OK;
    return fail(MFSDP_ERROR_COMM, std::string(what) + ": " + HostComm::lastError());
  }

  /// Gathers `local`, laid out like `ps.master` (this rank's rows, the
  /// owned matrix, or the whole tensor), into the whole tensor `full`
  /// (ps.elements() floats) on every rank of the dp_shard group.
  mfsdp_status gatherWhole(const ParamState &ps, const std::vector<float> &local,
                           float *full) {
    const int64_t n = ps.elements(), cols = ps.desc.cols;
    switch (ps.desc.placement) {
    case MFSDP_ROW_SHARD: {
      std::vector<float> send(ps.chunkRows * cols, 0.f),
          recv(ps.chunkRows * cols * S);
      std::copy(local.begin(), local.end(), send.begin());
      if (auto s = comm(shard->allGather(send.data(), recv.data(),
                                         ps.chunkRows * cols),
                        "all-gather"))
        return s;
      std::copy(recv.begin(), recv.begin() + n, full);
      return MFSDP_OK;
    }
    case MFSDP_OWNER: {
      std::vector<int64_t> counts(S, 0);
      counts[ps.desc.owner] = n;
      return comm(shard->allGatherV(ps.ownsAny ? local.data() : nullptr, full,
                                    counts),
                  "all-gather-v");
    }
    default:
      std::copy(local.begin(), local.end(), full);
      return MFSDP_OK;
    }
  }

  /// This rank's part of the whole tensor `full`, laid out like ps.master.
  void scatterWhole(const ParamState &ps, const float *full,
                    std::vector<float> &local) {
    const int64_t cols = ps.desc.cols;
    switch (ps.desc.placement) {
    case MFSDP_ROW_SHARD:
      std::copy(full + shardRank * ps.chunkRows * cols,
                full + (shardRank * ps.chunkRows + ps.localRows) * cols,
                local.begin());
      break;
    case MFSDP_OWNER:
      if (ps.ownsAny)
        std::copy(full, full + ps.elements(), local.begin());
      break;
    default:
      std::copy(full, full + ps.elements(), local.begin());
    }
  }

  mfsdp_status gather(int32_t unit) {
    for (int32_t p : unitParams[unit]) {
      ParamState &ps = params[p];
      if (!ps.full.empty())
        continue;
      ps.full.assign(ps.elements(), 0.f);
      if (auto s = gatherWhole(ps, ps.master, ps.full.data()))
        return s;
      if (ps.desc.compute_dtype == MFSDP_COMPUTE_BF16)
        roundToBF16(ps.full);
    }
    return MFSDP_OK;
  }

  static void roundToBF16(std::vector<float> &buf) {
    for (float &x : buf)
      x = host::fromBF16(host::toBF16(x));
  }

  void release(int32_t unit) {
    if (plan.zero < 3)
      return;
    for (int32_t p : unitParams[unit])
      std::vector<float>().swap(params[p].full);
  }

  mfsdp_status reduce(int32_t unit) {
    const float scale = 1.f / static_cast<float>(S * R);
    for (int32_t p : unitParams[unit]) {
      ParamState &ps = params[p];
      if (ps.desc.compute_dtype == MFSDP_COMPUTE_BF16)
        roundToBF16(ps.grad);
      const int64_t n = ps.elements(), cols = ps.desc.cols;
      switch (ps.desc.placement) {
      case MFSDP_ROW_SHARD: {
        std::vector<float> send(ps.chunkRows * cols * S, 0.f),
            recv(ps.chunkRows * cols);
        std::copy(ps.grad.begin(), ps.grad.end(), send.begin());
        if (auto s = comm(shard->reduceScatter(send.data(), recv.data(),
                                               ps.chunkRows * cols),
                          "reduce-scatter"))
          return s;
        ps.gradShard.assign(recv.begin(), recv.begin() + ps.localRows * cols);
        break;
      }
      case MFSDP_OWNER: {
        std::vector<int64_t> counts(S, 0);
        counts[ps.desc.owner] = n;
        ps.gradShard.assign(ps.ownsAny ? n : 0, 0.f);
        if (auto s = comm(shard->reduceScatterV(ps.grad.data(),
                                                ps.ownsAny ? ps.gradShard.data()
                                                           : nullptr,
                                                counts),
                          "reduce-scatter-v"))
          return s;
        break;
      }
      default:
        if (auto s = comm(shard->allReduce(ps.grad.data(), n), "all-reduce"))
          return s;
        ps.gradShard = ps.grad;
      }
      if (R > 1) {
        // Every rank calls it, with an empty buffer when it keeps nothing.
        if (auto s = comm(replicate->allReduce(ps.gradShard.data(),
                                               static_cast<int64_t>(ps.gradShard.size())),
                          "all-reduce over replicas"))
          return s;
      }
      for (float &g : ps.gradShard)
        g *= scale;
    }
    return MFSDP_OK;
  }
};


extern "C" {

uint64_t mfsdp_plan_hash(const mfsdp_plan *p) {
  return p ? mfsdp::runtime::planHash(*p) : 0;
}

mfsdp_status mfsdp_create(const mfsdp_plan *plan, mfsdp_step **out) {
  if (!plan || !out)
    return MFSDP_ERROR_INVALID;
  *out = nullptr;
  auto step = std::make_unique<mfsdp_step>();
  step->plan = *plan;
  if (mfsdp_plan_hash(plan) != plan->hash) {
    step->error = "the plan's hash does not match its contents: the plan is "
                  "corrupt or was written by another compiler version";
    *out = step.release();
    return MFSDP_ERROR_PLAN;
  }
  int initialized = 0, world = 1;
  MPI_Initialized(&initialized);
  if (!initialized) {
    step->error = "MPI is not initialized: call MPI_Init before mfsdp_create";
    *out = step.release();
    return MFSDP_ERROR_INVALID;
  }
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world != plan->world) {
    step->error = "this library was built for a plan of " +
                  std::to_string(plan->world) + " ranks, but MPI runs " +
                  std::to_string(world);
    *out = step.release();
    return MFSDP_ERROR_PLAN;
  }
  if (plan->zero < 1 || plan->zero > 3 || plan->dp_shard < 1 ||
      plan->dp_replicate < 1 || plan->num_params < 0 || plan->num_units < 0 ||
      world % (plan->dp_shard * plan->dp_replicate) != 0) {
    step->error = "invalid plan: zero, dp_shard, dp_replicate or counts out of range";
    *out = step.release();
    return MFSDP_ERROR_PLAN;
  }
  // The mesh as the runtime sees it: [other dims], dp_replicate, dp_shard;
  // the rest of the world (tensor/expert parallel) is outermost.
  std::vector<MeshDimSpec> mesh = {
      {"other", world / (plan->dp_shard * plan->dp_replicate)},
      {"dp_replicate", plan->dp_replicate},
      {"dp_shard", plan->dp_shard}};
  std::string error;
  step->shard.reset(HostComm::create(mesh, "dp_shard", error));
  if (step->shard)
    step->replicate.reset(HostComm::create(mesh, "dp_replicate", error));
  if (!step->shard || !step->replicate) {
    step->error = "cannot create communicators: " + error;
    *out = step.release();
    return MFSDP_ERROR_COMM;
  }
  step->S = plan->dp_shard;
  step->R = plan->dp_replicate;
  step->shardRank = step->shard->rank();
  step->unitParams.resize(plan->num_units);
  step->state.assign(plan->num_units, UnitState::Idle);
  step->reduced.assign(plan->num_units, false);
  for (int32_t i = 0; i < plan->num_params; ++i) {
    ParamState ps;
    ps.desc = plan->params[i];
    ps.name = ps.desc.name ? ps.desc.name : ("param " + std::to_string(i));
    if (ps.desc.unit < 0 || ps.desc.unit >= plan->num_units ||
        ps.desc.rows < 1 || ps.desc.cols < 1 ||
        (ps.desc.placement == MFSDP_OWNER &&
         (ps.desc.owner < 0 || ps.desc.owner >= plan->dp_shard)) ||
        (ps.desc.optimizer == MFSDP_OPT_MUON && ps.desc.placement != MFSDP_OWNER &&
         ps.desc.placement != MFSDP_REPLICATE) ||
        (ps.desc.compute_dtype != MFSDP_COMPUTE_F32 &&
         ps.desc.compute_dtype != MFSDP_COMPUTE_BF16)) {
      step->error = "invalid plan entry for parameter '" + ps.name + "'";
      *out = step.release();
      return MFSDP_ERROR_PLAN;
    }
    const int64_t cols = ps.desc.cols;
    switch (ps.desc.placement) {
    case MFSDP_ROW_SHARD:
      ps.chunkRows = (ps.desc.rows + step->S - 1) / step->S;
      ps.localRows = std::clamp<int64_t>(ps.desc.rows - step->shardRank * ps.chunkRows,
                                         0, ps.chunkRows);
      ps.ownsAny = ps.localRows > 0;
      ps.master.assign(ps.localRows * cols, 0.f);
      break;
    case MFSDP_OWNER:
      ps.ownsAny = ps.desc.owner == step->shardRank;
      ps.master.assign(ps.ownsAny ? ps.elements() : 0, 0.f);
      break;
    default:
      ps.ownsAny = true;
      ps.master.assign(ps.elements(), 0.f);
    }
    ps.m.assign(ps.master.size(), 0.f);
    ps.v.assign(ps.master.size(), 0.f);
    step->unitParams[ps.desc.unit].push_back(i);
    step->params.push_back(std::move(ps));
  }
  *out = step.release();
  return MFSDP_OK;
}

void mfsdp_destroy(mfsdp_step *step) { delete step; }

const char *mfsdp_last_error(mfsdp_step *step) {
  return step ? step->error.c_str() : "no runtime (mfsdp_create failed to allocate)";
}

#define CHECK_UNIT(step, unit)                                                  \
  do {                                                                          \
    if (!(step))                                                                \
      return MFSDP_ERROR_INVALID;                                               \
    if ((unit) < 0 || (unit) >= (step)->plan.num_units)                         \
      return (step)->fail(MFSDP_ERROR_INVALID,                                  \
                          "unit " + std::to_string(unit) + " is out of range [0, " + \
                              std::to_string((step)->plan.num_units) + ")");    \
  } while (0)

mfsdp_status mfsdp_pre_forward(mfsdp_step *step, int32_t unit) {
  CHECK_UNIT(step, unit);
  UnitState &s = step->state[unit];
  if (s == UnitState::Forward || s == UnitState::ForwardDone)
    return step->fail(MFSDP_ERROR_ORDER,
                      "pre_forward of unit " + std::to_string(unit) +
                          " called again before its backward");
  if (auto st = step->gather(unit))
    return st;
  // During backward this is activation-checkpoint recomputation.
  s = s == UnitState::Backward ? UnitState::Backward : UnitState::Forward;
  step->reduced[unit] = false;
  return MFSDP_OK;
}

mfsdp_status mfsdp_post_forward(mfsdp_step *step, int32_t unit) {
  CHECK_UNIT(step, unit);
  UnitState &s = step->state[unit];
  if (s == UnitState::Backward)
    return MFSDP_OK; // end of a recomputation: keep the gathered parameters
  if (s != UnitState::Forward)
    return step->fail(MFSDP_ERROR_ORDER, "post_forward of unit " +
                                             std::to_string(unit) +
                                             " without its pre_forward");
  step->release(unit);
  s = UnitState::ForwardDone;
  return MFSDP_OK;
}

mfsdp_status mfsdp_pre_backward(mfsdp_step *step, int32_t unit) {
  CHECK_UNIT(step, unit);
  UnitState &s = step->state[unit];
  if (s != UnitState::ForwardDone)
    return step->fail(MFSDP_ERROR_ORDER,
                      "pre_backward of unit " + std::to_string(unit) +
                          " before its forward finished (post_forward)");
  if (auto st = step->gather(unit))
    return st;
  for (int32_t p : step->unitParams[unit]) {
    ParamState &ps = step->params[p];
    if (ps.grad.size() != static_cast<size_t>(ps.elements()))
      ps.grad.assign(ps.elements(), 0.f);
  }
  s = UnitState::Backward;
  return MFSDP_OK;
}

mfsdp_status mfsdp_post_backward(mfsdp_step *step, int32_t unit) {
  CHECK_UNIT(step, unit);
  UnitState &s = step->state[unit];
  if (s != UnitState::Backward)
    return step->fail(MFSDP_ERROR_ORDER, "post_backward of unit " +
                                             std::to_string(unit) +
                                             " without its pre_backward");
  if (!step->noSync) {
    if (auto st = step->reduce(unit))
      return st;
    step->reduced[unit] = true;
  }
  step->release(unit);
  s = UnitState::Idle;
  return MFSDP_OK;
}

mfsdp_status mfsdp_set_no_sync(mfsdp_step *step, int32_t noSync) {
  if (!step)
    return MFSDP_ERROR_INVALID;
  step->noSync = noSync != 0;
  return MFSDP_OK;
}

mfsdp_status mfsdp_zero_grad(mfsdp_step *step) {
  if (!step)
    return MFSDP_ERROR_INVALID;
  for (ParamState &ps : step->params) {
    std::fill(ps.grad.begin(), ps.grad.end(), 0.f);
    ps.gradShard.clear();
  }
  std::fill(step->reduced.begin(), step->reduced.end(), false);
  return MFSDP_OK;
}

mfsdp_status mfsdp_optimizer_step(mfsdp_step *step) {
  if (!step)
    return MFSDP_ERROR_INVALID;
  for (int32_t u = 0; u < step->plan.num_units; ++u)
    if (!step->unitParams[u].empty() &&
        (step->state[u] != UnitState::Idle || !step->reduced[u]))
      return step->fail(MFSDP_ERROR_ORDER,
                        "optimizer_step before the gradients of unit " +
                            std::to_string(u) +
                            " were reduced (post_backward without no-sync)");
  ++step->steps;
  const mfsdp_plan &p = step->plan;
  AdamWHyper adamw{p.adamw_lr, p.adamw_beta1, p.adamw_beta2, p.adamw_eps,
                   p.adamw_weight_decay};
  SGDHyper sgd{p.sgd_lr, p.sgd_momentum, p.sgd_weight_decay, p.sgd_nesterov != 0};
  MuonHyper muon;
  muon.lr = p.muon_lr;
  muon.momentum = p.muon_momentum;
  muon.weightDecay = p.muon_weight_decay;
  muon.nesterov = p.muon_nesterov != 0;
  muon.nsSteps = p.muon_ns_steps;
  muon.scale = p.muon_scale ? MuonScale::Original : MuonScale::MatchRmsAdamW;
  std::vector<float> scratch;
  for (ParamState &ps : step->params) {
    if (!ps.ownsAny || ps.desc.optimizer == MFSDP_OPT_NONE)
      continue;
    const int64_t n = static_cast<int64_t>(ps.master.size());
    if (static_cast<int64_t>(ps.gradShard.size()) != n)
      return step->fail(MFSDP_ERROR_ORDER, "parameter '" + ps.name +
                                               "' has no reduced gradient");
    switch (ps.desc.optimizer) {
    case MFSDP_OPT_ADAMW:
      host::adamwStep(ps.master.data(), ps.gradShard.data(), ps.m.data(),
                      ps.v.data(), n, adamw, step->steps);
      break;
    case MFSDP_OPT_SGD:
      host::sgdStep(ps.master.data(), ps.gradShard.data(), ps.m.data(), n, sgd,
                    step->steps);
      break;
    case MFSDP_OPT_MUON: {
      scratch.resize(n + host::newtonSchulzWorkspace(ps.desc.rows, ps.desc.cols) /
                             sizeof(float));
      host::muonStep(ps.master.data(), ps.gradShard.data(), ps.m.data(),
                     ps.desc.rows, ps.desc.cols, muon, scratch.data());
      break;
    }
    default:
      break;
    }
  }
  // Gathered copies are stale now: ZeRO-1/2 keep parameters whole, so
  // gather the updated ones; ZeRO-3 gathers at the next use.
  for (ParamState &ps : step->params)
    std::vector<float>().swap(ps.full);
  if (p.zero < 3)
    for (int32_t u = 0; u < p.num_units; ++u)
      if (auto st = step->gather(u))
        return st;
  return MFSDP_OK;
}

static mfsdp_status view(mfsdp_step *step, int32_t param, DLTensor *out,
                         bool grad) {
  if (!step || !out)
    return MFSDP_ERROR_INVALID;
  if (auto st = step->checkParam(param))
    return st;
  ParamState &ps = step->params[param];
  std::vector<float> &buf = grad ? ps.grad : ps.full;
  if (buf.empty())
    return step->fail(MFSDP_ERROR_ORDER,
                      std::string(grad ? "the gradient of '" : "parameter '") +
                          ps.name + "' is not available: call " +
                          (grad ? "pre_backward" : "pre_forward or pre_backward") +
                          " of unit " + std::to_string(ps.desc.unit) + " first");
  std::memset(out, 0, sizeof(*out));
  out->data = buf.data();
  out->device = {kDLCPU, 0};
  out->dtype = {kDLFloat, 32, 1};
  // rows and cols are adjacent int64_t fields of the descriptor, so they
  // serve as the shape array (rows alone for a 1-D tensor).
  out->ndim = ps.desc.cols == 1 ? 1 : 2;
  out->shape = &ps.desc.rows;
  out->strides = nullptr;
  out->byte_offset = 0;
  return MFSDP_OK;
}

mfsdp_status mfsdp_param_view(mfsdp_step *step, int32_t param, DLTensor *out) {
  return view(step, param, out, false);
}

mfsdp_status mfsdp_grad_view(mfsdp_step *step, int32_t param, DLTensor *out) {
  return view(step, param, out, true);
}

mfsdp_status mfsdp_load_param(mfsdp_step *step, int32_t param, const float *full) {
  if (!step || !full)
    return MFSDP_ERROR_INVALID;
  if (auto st = step->checkParam(param))
    return st;
  ParamState &ps = step->params[param];
  step->scatterWhole(ps, full, ps.master);
  std::vector<float>().swap(ps.full);
  if (step->plan.zero < 3)
    return step->gather(ps.desc.unit);
  return MFSDP_OK;
}

mfsdp_status mfsdp_store_param(mfsdp_step *step, int32_t param, float *full) {
  if (!step || !full)
    return MFSDP_ERROR_INVALID;
  if (auto st = step->checkParam(param))
    return st;
  // The fp32 masters, whole (not the compute copy, which may be bf16).
  return step->gatherWhole(step->params[param], step->params[param].master, full);
}

static mfsdp_status stateOf(mfsdp_step *step, int32_t param, int32_t which,
                            std::vector<float> *&state) {
  if (auto st = step->checkParam(param))
    return st;
  ParamState &ps = step->params[param];
  const int32_t opt = ps.desc.optimizer;
  if (which == MFSDP_STATE_EXP_AVG && opt != MFSDP_OPT_NONE) {
    state = &ps.m;
    return MFSDP_OK;
  }
  if (which == MFSDP_STATE_EXP_AVG_SQ && opt == MFSDP_OPT_ADAMW) {
    state = &ps.v;
    return MFSDP_OK;
  }
  static const char *const optNames[] = {"no optimizer", "AdamW", "SGD", "Muon"};
  return step->fail(MFSDP_ERROR_INVALID,
                    "parameter " + std::to_string(param) + " ('" + ps.name +
                        "') has " + optNames[opt >= 0 && opt <= 3 ? opt : 0] +
                        ", which keeps no state " + std::to_string(which) +
                        " (exp_avg = 0 for AdamW, SGD and Muon; exp_avg_sq = "
                        "1 for AdamW)");
}

mfsdp_status mfsdp_load_state(mfsdp_step *step, int32_t param, int32_t which,
                              const float *full) {
  if (!step || !full)
    return MFSDP_ERROR_INVALID;
  std::vector<float> *state = nullptr;
  if (auto s = stateOf(step, param, which, state))
    return s;
  step->scatterWhole(step->params[param], full, *state);
  return MFSDP_OK;
}

mfsdp_status mfsdp_store_state(mfsdp_step *step, int32_t param, int32_t which,
                               float *full) {
  if (!step || !full)
    return MFSDP_ERROR_INVALID;
  std::vector<float> *state = nullptr;
  if (auto s = stateOf(step, param, which, state))
    return s;
  return step->gatherWhole(step->params[param], *state, full);
}

mfsdp_status mfsdp_step_count(mfsdp_step *step, int64_t *count) {
  if (!step || !count)
    return MFSDP_ERROR_INVALID;
  *count = step->steps;
  return MFSDP_OK;
}

mfsdp_status mfsdp_set_step_count(mfsdp_step *step, int64_t count) {
  if (!step)
    return MFSDP_ERROR_INVALID;
  if (count < 0)
    return step->fail(MFSDP_ERROR_INVALID,
                      "step count " + std::to_string(count) + " is negative");
  step->steps = count;
  return MFSDP_OK;
}

} // extern "C"

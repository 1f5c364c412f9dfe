//===- ParityTest.cpp - Sharded training equals single-device training ----===//
//
//   mpirun -np N mfsdp-parity MESH POLICY ZERO MICROBATCHES [recompute|restart|bf16]
//
// Plans the example model with the layout planner (policy, ZeRO level,
// mesh), trains it for 5 steps through the runtime's C ABI on N ranks (each
// data-parallel rank on its own data), stores the parameters, and compares
// them with an independent single-process double-precision reference that
// trains on the whole global batch. With `restart`, training stops after 3
// steps, the parameters, optimizer state and step count are stored, a fresh
// runtime loads them and trains the last 2 steps: a checkpoint round trip
// must not change the result. With `bf16`, the compute copies and the
// gradients are bf16 (the masters fp32) and the tolerance is 2e-2. fp32
// tolerance: 1e-5 of each tensor's largest magnitude. Prints "N passed, N failed" on rank 0.
//
//===----------------------------------------------------------------------===//
#include "Reference.h"
#include "Trainer.h"

#include "mfsdp/planner/Layout.h"
#include "mfsdp/runtime.h"

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

using namespace mfsdp;

namespace {

struct Mesh {
  int64_t replicate = 1, shard = 1;
};

Mesh parseMesh(const std::string &spec) {
  Mesh m;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto eq = item.find('=');
    int64_t v = std::stoll(item.substr(eq + 1));
    if (item.substr(0, eq) == "dp_shard")
      m.shard = v;
    else if (item.substr(0, eq) == "dp_replicate")
      m.replicate = v;
  }
  return m;
}

} // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (argc < 5) {
    if (rank == 0)
      std::fprintf(stderr, "usage: mfsdp-parity MESH POLICY ZERO MICROBATCHES [recompute|restart|bf16]\n");
    MPI_Finalize();
    return 2;
  }
  Mesh mesh = parseMesh(argv[1]);
  std::string policy = argv[2];
  int zero = std::atoi(argv[3]);
  int64_t micro = std::atoll(argv[4]);
  bool recompute = false, restart = false, bf16 = false;
  for (int i = 5; i < argc; ++i) {
    recompute |= std::strcmp(argv[i], "recompute") == 0;
    restart |= std::strcmp(argv[i], "restart") == 0;
    bf16 |= std::strcmp(argv[i], "bf16") == 0;
  }
  // fp32 compute matches the double-precision reference to 1e-5 of each
  // tensor's largest magnitude. bf16 compute copies and gradients (8-bit
  // mantissas): 2e-2. The bound comes from AdamW, which normalises each
  // element's update: an element whose gradient is near zero can move by up
  // to lr per step in either direction on a rounding difference, 5 x 3e-3
  // = 1.5e-2 of a tensor whose largest magnitude is about 1.
  const double tolerance = bf16 ? 2e-2 : 1e-5;

  example::ModelConfig model;
  model.layers = 3;
  model.hidden = 12;
  model.inter = 20;
  model.tokens = 6;
  std::vector<example::ParamInfo> infos = example::modelParams(model);

  // Plan with the same planner the compiler uses.
  planner::Problem pr;
  for (int64_t l = 0; l < model.layers; ++l)
    pr.units.push_back({"layers." + std::to_string(l)});
  for (const example::ParamInfo &info : infos) {
    planner::Param p;
    p.name = info.name;
    p.shape = info.shape;
    p.elemBytes = 4;
    p.kind = info.name.find("norm") != std::string::npos ? "norm" : "linear";
    p.unit = info.layer;
    pr.params.push_back(p);
  }
  planner::Options opts;
  if (!planner::parsePolicy(policy, opts.policy)) {
    std::fprintf(stderr, "unknown policy %s\n", policy.c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  opts.zero = zero;
  opts.shard = mesh.shard;
  opts.replicate = mesh.replicate;
  opts.sgdMomentum = 0.9;
  opts.hw = *planner::findHardwareProfile("a100");
  planner::Decisions decisions;
  planner::PlanError perr;
  if (!planner::planLayouts(pr, opts, decisions, perr)) {
    std::fprintf(stderr, "planning failed: %s\n", perr.message.c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }

  std::vector<mfsdp_param_desc> descs;
  for (const planner::Param &p : pr.params) {
    mfsdp_param_desc d{};
    d.name = p.name.c_str();
    d.rows = p.shape[0];
    d.cols = p.shape.size() > 1 ? p.shape[1] : 1;
    d.unit = static_cast<int32_t>(p.unit);
    d.placement = p.placement == planner::PlacementKind::Owner       ? MFSDP_OWNER
                  : p.placement == planner::PlacementKind::Replicate ? MFSDP_REPLICATE
                                                                     : MFSDP_ROW_SHARD;
    d.owner = static_cast<int32_t>(p.ownerRank);
    d.optimizer = p.optim == planner::Optim::Muon  ? MFSDP_OPT_MUON
                  : p.optim == planner::Optim::SGD ? MFSDP_OPT_SGD
                                                   : MFSDP_OPT_ADAMW;
    d.compute_dtype = bf16 ? MFSDP_COMPUTE_BF16 : MFSDP_COMPUTE_F32;
    descs.push_back(d);
  }
  mfsdp_plan plan{};
  plan.zero = zero;
  plan.dp_replicate = static_cast<int32_t>(mesh.replicate);
  plan.dp_shard = static_cast<int32_t>(mesh.shard);
  plan.world = world;
  plan.num_units = static_cast<int32_t>(pr.units.size());
  plan.num_params = static_cast<int32_t>(descs.size());
  plan.params = descs.data();
  reference::TrainConfig ref;
  plan.adamw_lr = static_cast<float>(ref.adamw.lr = 3e-3);
  plan.adamw_beta1 = static_cast<float>(ref.adamw.beta1 = 0.9);
  plan.adamw_beta2 = static_cast<float>(ref.adamw.beta2 = 0.95);
  plan.adamw_eps = static_cast<float>(ref.adamw.eps = 1e-8);
  plan.adamw_weight_decay = static_cast<float>(ref.adamw.weightDecay = 0.1);
  plan.sgd_lr = static_cast<float>(ref.sgd.lr = 0.05);
  plan.sgd_momentum = static_cast<float>(ref.sgd.momentum = 0.9);
  plan.sgd_weight_decay = static_cast<float>(ref.sgd.weightDecay = 0.01);
  plan.sgd_nesterov = ref.sgd.nesterov = true;
  plan.muon_lr = static_cast<float>(ref.muon.lr = 0.02);
  plan.muon_momentum = static_cast<float>(ref.muon.momentum = 0.95);
  plan.muon_weight_decay = static_cast<float>(ref.muon.weightDecay = 0.01);
  plan.muon_nesterov = ref.muon.nesterov = true;
  plan.muon_ns_steps = ref.muon.nsSteps = 5;
  plan.muon_scale = 0;
  ref.muon.matchRmsAdamW = true;
  plan.hash = mfsdp_plan_hash(&plan);

  int failures = 0, passes = 0;
  auto expect = [&](bool ok, const std::string &what) {
    (ok ? passes : failures)++;
    if (!ok)
      std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
  };

  mfsdp_step *step = nullptr;
  mfsdp_status st = mfsdp_create(&plan, &step);
  expect(st == MFSDP_OK, std::string("create: ") + mfsdp_last_error(step));
  if (st != MFSDP_OK)
    MPI_Abort(MPI_COMM_WORLD, 1);
  for (size_t i = 0; i < infos.size(); ++i) {
    std::vector<float> init(example::numel(infos[i]));
    example::initParam(infos[i], init.data());
    expect(mfsdp_load_param(step, static_cast<int32_t>(i), init.data()) == MFSDP_OK,
           "load " + infos[i].name);
  }
  example::TrainOptions to;
  to.steps = 5;
  to.microbatches = micro;
  to.seed = 7;
  to.dataRank = rank; // one data-parallel rank per process (no TP here)
  to.recompute = recompute;
  std::vector<double> losses;
  std::string error;
  if (restart) {
    // 3 steps, a checkpoint, a fresh runtime, the last 2 steps.
    to.steps = 3;
    expect(example::train(step, model, to, losses, error), "train: " + error);
    std::vector<std::vector<float>> params(infos.size()), m(infos.size()),
        v(infos.size());
    int64_t count = -1;
    expect(mfsdp_step_count(step, &count) == MFSDP_OK && count == 3,
           "step count after 3 steps: " + std::to_string(count));
    for (size_t i = 0; i < infos.size(); ++i) {
      auto idx = static_cast<int32_t>(i);
      params[i].resize(example::numel(infos[i]));
      m[i].resize(params[i].size());
      v[i].resize(params[i].size());
      expect(mfsdp_store_param(step, idx, params[i].data()) == MFSDP_OK, "store");
      expect(mfsdp_store_state(step, idx, MFSDP_STATE_EXP_AVG, m[i].data()) == MFSDP_OK,
             std::string("store exp_avg: ") + mfsdp_last_error(step));
      if (descs[i].optimizer == MFSDP_OPT_ADAMW)
        expect(mfsdp_store_state(step, idx, MFSDP_STATE_EXP_AVG_SQ, v[i].data()) == MFSDP_OK,
               std::string("store exp_avg_sq: ") + mfsdp_last_error(step));
      else {
        mfsdp_status st2 = mfsdp_store_state(step, idx, MFSDP_STATE_EXP_AVG_SQ, v[i].data());
        expect(st2 == MFSDP_ERROR_INVALID &&
                   std::strstr(mfsdp_last_error(step), "keeps no state 1"),
               std::string("exp_avg_sq of a non-AdamW parameter must be refused: ") +
                   mfsdp_last_error(step));
      }
    }
    mfsdp_destroy(step);
    step = nullptr;
    expect(mfsdp_create(&plan, &step) == MFSDP_OK, "create again");
    for (size_t i = 0; i < infos.size(); ++i) {
      auto idx = static_cast<int32_t>(i);
      expect(mfsdp_load_param(step, idx, params[i].data()) == MFSDP_OK, "load");
      expect(mfsdp_load_state(step, idx, MFSDP_STATE_EXP_AVG, m[i].data()) == MFSDP_OK,
             "load exp_avg");
      if (descs[i].optimizer == MFSDP_OPT_ADAMW)
        expect(mfsdp_load_state(step, idx, MFSDP_STATE_EXP_AVG_SQ, v[i].data()) == MFSDP_OK,
               "load exp_avg_sq");
    }
    expect(mfsdp_set_step_count(step, 3) == MFSDP_OK, "set step count");
    to.firstStep = 3;
    to.steps = 2;
    std::vector<double> more;
    expect(example::train(step, model, to, more, error), "train after restart: " + error);
    to.steps = 5;
  } else {
    expect(example::train(step, model, to, losses, error), "train: " + error);
  }

  // The reference: one process, the whole global batch, double precision.
  ref.model = model;
  ref.seed = to.seed;
  ref.ranks = world;
  ref.steps = to.steps;
  ref.microbatches = micro;
  std::vector<planner::Optim> optimOf;
  for (const planner::Param &p : pr.params)
    optimOf.push_back(p.optim);
  ref.optimizerOf = [&](const example::ParamInfo &info) {
    for (size_t i = 0; i < infos.size(); ++i)
      if (infos[i].name == info.name)
        return optimOf[i] == planner::Optim::Muon  ? reference::Opt::Muon
               : optimOf[i] == planner::Optim::SGD ? reference::Opt::SGD
                                                   : reference::Opt::AdamW;
    return reference::Opt::AdamW;
  };
  reference::Result want = reference::train(ref);
  expect(want.error.empty(), "reference: " + want.error);
  if (!want.error.empty())
    MPI_Abort(MPI_COMM_WORLD, 1);

  double worst = 0;
  for (size_t i = 0; i < infos.size(); ++i) {
    std::vector<float> got(example::numel(infos[i]));
    expect(mfsdp_store_param(step, static_cast<int32_t>(i), got.data()) == MFSDP_OK,
           "store " + infos[i].name);
    const std::vector<float> &w = want.params.at(infos[i].name);
    double scale = 0, diff = 0;
    for (size_t k = 0; k < w.size(); ++k) {
      scale = std::max(scale, std::fabs(double(w[k])));
      diff = std::max(diff, std::fabs(double(got[k]) - double(w[k])));
    }
    double rel = diff / std::max(scale, 1e-12);
    worst = std::max(worst, rel);
    char msg[256];
    std::snprintf(msg, sizeof(msg), "%s: max |sharded - reference| = %.3g of %.3g (%.3g relative, limit %.0e)",
                  infos[i].name.c_str(), diff, scale, rel, tolerance);
    expect(rel <= tolerance, msg);
  }
  if (bf16) {
    // The compute copy holds bf16 values; the stored masters are fp32 (some
    // element of a trained tensor is not a bf16 value).
    auto isBF16 = [](float x) {
      uint32_t u;
      std::memcpy(&u, &x, 4);
      return (u & 0xffffu) == 0;
    };
    expect(mfsdp_pre_forward(step, 0) == MFSDP_OK, "pre_forward for the view check");
    DLTensor t;
    expect(mfsdp_param_view(step, 1, &t) == MFSDP_OK, "view of the first matrix");
    const float *view = static_cast<const float *>(t.data);
    bool allBF16 = true;
    for (int64_t k = 0; k < example::numel(infos[1]); ++k)
      allBF16 &= isBF16(view[k]);
    expect(allBF16, "the compute copy of " + infos[1].name + " holds bf16 values");
    std::vector<float> master(example::numel(infos[1]));
    expect(mfsdp_store_param(step, 1, master.data()) == MFSDP_OK, "store master");
    bool anyFP32 = false;
    for (float x : master)
      anyFP32 |= !isBF16(x);
    expect(anyFP32, "the master of " + infos[1].name + " keeps fp32 precision");
  }
  mfsdp_destroy(step);
  int counts[2] = {passes, failures}, totals[2] = {0, 0};
  MPI_Reduce(counts, totals, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  double worstAll = 0;
  MPI_Reduce(&worst, &worstAll, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("parity %s %s zero=%d microbatches=%lld%s: worst relative "
                "difference %.3g; %d passed, %d failed\n",
                argv[1], policy.c_str(), zero, static_cast<long long>(micro),
                (std::string(recompute ? " recompute" : "") + (restart ? " restart" : "") +
                 (bf16 ? " bf16" : "")).c_str(), worstAll, totals[0], totals[1]);
  int any = 0;
  MPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any ? 1 : 0;
}

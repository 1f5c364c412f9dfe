//===- Clipping.cpp - Hyperparameters and gradient clipping ---------------===//
//
// Each parameter's hyperparameters (the plan's constants of its optimizer
// after mfsdp_create, checked when the trainer sets them) and
// clip_grad_norm over the reduced gradients of every rank.
//
//===----------------------------------------------------------------------===//
#include "Step.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

using namespace mfsdp::rt;

/// An optimizer's name, for messages.
const char *mfsdp::rt::optimizerName(int32_t optimizer) {
  static const char *const names[] = {"no optimizer", "AdamW", "SGD", "Muon"};
  return names[optimizer >= 0 && optimizer <= 3 ? optimizer : 0];
}

/// A parameter's hyperparameters after mfsdp_create (runtime.h): the
/// plan's constants of its optimizer, Muon's defaults for Newton-Schulz.
mfsdp_hparams mfsdp::rt::planHparams(const mfsdp_plan &p, int32_t optimizer) {
  const NewtonSchulzHyper ns;
  mfsdp_hparams h{};
  h.beta1 = p.adamw_beta1;
  h.beta2 = p.adamw_beta2;
  h.eps = p.adamw_eps;
  const bool sgd = optimizer == MFSDP_OPT_SGD;
  h.momentum = sgd ? p.sgd_momentum : p.muon_momentum;
  h.nesterov = sgd ? p.sgd_nesterov : p.muon_nesterov;
  h.ns_steps = p.muon_ns_steps;
  h.ns_a = ns.a;
  h.ns_b = ns.b;
  h.ns_c = ns.c;
  h.ns_eps = ns.eps;
  h.ns_norm = static_cast<int32_t>(ns.norm);
  h.adjust_lr = p.muon_scale ? MFSDP_ADJUST_LR_ORIGINAL : MFSDP_ADJUST_LR_MATCH_RMS_ADAMW;
  h.ns_precision = p.muon_ns_precision;
  switch (optimizer) {
  case MFSDP_OPT_ADAMW:
    h.lr = p.adamw_lr;
    h.weight_decay = p.adamw_weight_decay;
    break;
  case MFSDP_OPT_SGD:
    h.lr = p.sgd_lr;
    h.weight_decay = p.sgd_weight_decay;
    break;
  case MFSDP_OPT_MUON:
    h.lr = p.muon_lr;
    h.weight_decay = p.muon_weight_decay;
    break;
  default:
    break; // frozen: 0
  }
  return h;
}

/// A number as printf's %g writes it (1e-07, -0.5, inf, nan), for messages.
std::string mfsdp::rt::number(double x) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", x);
  return text;
}

/// What is wrong with hyperparameters for `optimizer` (runtime.h,
/// mfsdp_set_hparams): "" when nothing, else the first field and what it
/// must be. Fields of other optimizers are not looked at.
std::string mfsdp::rt::hparamsProblem(const mfsdp_hparams &h, int32_t optimizer) {
  // Field `name` holds `x`: "" when `ok`, else what it must be.
  auto field = [](const char *name, double x, bool ok,
                  const std::string &expected) -> std::string {
    return ok ? "" : std::string(name) + " is " + number(x) + "; expected " + expected;
  };
  auto atLeast0 = [&](const char *name, float x) {
    return field(name, x, std::isfinite(x) && x >= 0, "a finite value >= 0");
  };
  auto positive = [&](const char *name, float x) {
    return field(name, x, std::isfinite(x) && x > 0, "a finite value > 0");
  };
  auto finite = [&](const char *name, float x) {
    return field(name, x, std::isfinite(x), "a finite value");
  };
  auto beta = [&](const char *name, float x) {
    return field(name, x, x >= 0 && x < 1, std::string("0 <= ") + name + " < 1");
  };
  auto choice = [&](const char *name, int32_t x, int32_t last, const char *what) {
    return field(name, x, x >= 0 && x <= last, what);
  };
  if (optimizer == MFSDP_OPT_NONE)
    return "";
  std::vector<std::string> problems = {atLeast0("lr", h.lr),
                                       atLeast0("weight_decay", h.weight_decay)};
  if (optimizer == MFSDP_OPT_ADAMW)
    problems.insert(problems.end(), {beta("beta1", h.beta1), beta("beta2", h.beta2),
                                     positive("eps", h.eps)});
  if (optimizer == MFSDP_OPT_SGD || optimizer == MFSDP_OPT_MUON)
    problems.insert(problems.end(), {atLeast0("momentum", h.momentum),
                                     choice("nesterov", h.nesterov, 1, "0 or 1")});
  if (optimizer == MFSDP_OPT_MUON)
    problems.insert(
        problems.end(),
        {field("ns_steps", h.ns_steps, h.ns_steps >= 0, ">= 0"), finite("ns_a", h.ns_a),
         finite("ns_b", h.ns_b), finite("ns_c", h.ns_c), positive("ns_eps", h.ns_eps),
         choice("ns_norm", h.ns_norm, MFSDP_NS_NORM_CLAMP,
                "MFSDP_NS_NORM_ADD_EPS (0) or MFSDP_NS_NORM_CLAMP (1)"),
         choice("ns_precision", h.ns_precision, MFSDP_NS_PRECISION_BF16,
                "MFSDP_NS_PRECISION_FP32 (0) or MFSDP_NS_PRECISION_BF16 (1)"),
         choice("adjust_lr", h.adjust_lr, MFSDP_ADJUST_LR_SPECTRAL_UNCLAMPED,
                "MFSDP_ADJUST_LR_MATCH_RMS_ADAMW (0), MFSDP_ADJUST_LR_ORIGINAL (1) "
                "or MFSDP_ADJUST_LR_SPECTRAL_UNCLAMPED (2)")});
  for (const std::string &problem : problems)
    if (!problem.empty())
      return problem;
  return "";
}

mfsdp_status mfsdp_step::clipGradNorm(double maxNorm, double extraSq, double &total) {
  // Row shards' rows (not their padding), packed blocks and owned
  // matrices on the dp_shard rank that keeps them; replicated tensors,
  // whole on every rank, on dp_shard rank 0. The replicas hold the same
  // reduced gradients: the sum runs over dp_shard only.
  std::vector<FloatSpan> counted;
  for (const ParamState &ps : params)
    if (clipped(ps) && (ps.desc.placement != MFSDP_REPLICATE || shardRank == 0))
      counted.push_back({ps.gradShard, ps.localCount});
  double sum = 0;
  if (auto s = device(backend->sumSquares(counted, sum), "the sum of squared gradients"))
    return s;
  if (auto s = comm(backend->allReduceDoubles(Group::Shard, &sum, 1),
                    "the all-reduce of the squared gradient norm over dp_shard"))
    return s;
  if (R > 1) {
    // Replica 0's sum everywhere (the others add zeros), so every replica
    // scales its gradients by the same bits.
    if (replicaRank != 0)
      sum = 0;
    if (auto s = comm(backend->allReduceDoubles(Group::Replicate, &sum, 1),
                      "sending the squared gradient norm over dp_replicate"))
      return s;
  }
  total = std::sqrt(sum + extraSq);
  // torch.nn.utils.clip_grad_norm_, except that a non-finite total
  // scales nothing (torch would multiply by nan or 0).
  if (!(maxNorm > 0) || std::isinf(maxNorm) || !std::isfinite(total))
    return MFSDP_OK;
  const double coef = maxNorm / (total + 1e-6);
  if (coef >= 1)
    return MFSDP_OK;
  for (ParamState &ps : params)
    if (clipped(ps))
      if (auto s = device(backend->scale(ps.gradShard, ps.localCount,
                                         static_cast<float>(coef)),
                          "clipping the gradient of '" + ps.name + "'"))
        return s;
  return MFSDP_OK;
}

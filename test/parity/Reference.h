//===- Reference.h - Single-process reference trainer ------------*- C++ -*-===//
//
// An independent reference for parity tests of sharded training: trains the
// example model (examples/trainer/Model.h) on the whole global batch in one
// process, in double precision, with optimizers written from their
// definitions (torch.optim.AdamW, torch.optim.SGD, torch.optim.Muon). It does
// not use the runtime's kernels. Plain C++, no exceptions, deterministic.
//
// Data-parallel semantics: at step s (0-based) the batches are
// makeBatch(seed, r, s, m) for every rank r < ranks and microbatch
// m < microbatches; the gradient is the MEAN over those ranks*microbatches
// batches of each batch's gradient (each batch loss being 0.5 * mean of its
// squared errors), and the reported loss is the mean of the batch losses, at
// the parameters before the step's update. Optimizer steps count from 1.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_TEST_PARITY_REFERENCE_H
#define MFSDP_TEST_PARITY_REFERENCE_H

#include "../../examples/trainer/Model.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace mfsdp::reference {

/// torch.optim.AdamW: p -= lr*wd*p; m = b1 m + (1-b1) g;
/// v = b2 v + (1-b2) g^2; p -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps).
struct AdamW {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.01;
};

/// torch.optim.SGD (dampening 0): d = g + wd*p; if momentum != 0:
/// buf = d at step 1 else momentum*buf + d, and d = nesterov ? d +
/// momentum*buf : buf; p -= lr*d.
struct SGD {
  double lr = 1e-2, momentum = 0, weightDecay = 0;
  bool nesterov = false;
};

/// Newton-Schulz's coefficients and normalisation: X = G / (||G||_F + eps),
/// or with `clamp` G / max(||G||_F, eps) (torch.optim.Muon's). With `bf16`
/// (MFSDP_NS_PRECISION_BF16) X, A, B and each new X are rounded to the
/// nearest bf16 when they are made; the products stay exact (double).
struct NewtonSchulz {
  double a = 3.4445, b = -4.7750, c = 2.0315, eps = 1e-7;
  bool clamp = false;
  bool bf16 = false;
};

/// torch.optim.Muon, EMA momentum: buf = mu*buf + (1-mu)*g (buf starts at 0);
/// u = nesterov ? g + mu*(buf-g) : buf; O = NewtonSchulz(u);
/// p -= lr*wd*p; p -= lr*scale*O, scale = 0.2*sqrt(max(rows,cols)) when
/// matchRmsAdamW, else sqrt(max(1, rows/cols)).
struct Muon {
  double lr = 0.02, momentum = 0.95, weightDecay = 0.01;
  bool nesterov = true;
  int nsSteps = 5;
  NewtonSchulz ns;
  bool matchRmsAdamW = true;
};

/// One parameter's hyperparameters at one step (its optimizer's apply).
struct Hyper {
  AdamW adamw;
  SGD sgd;
  Muon muon;
};

enum class Opt { AdamW, SGD, Muon };

struct TrainConfig {
  example::ModelConfig model;
  uint64_t seed = 1;
  /// Data-parallel ranks simulated: the global batch is every rank's
  /// microbatches.
  int64_t ranks = 1;
  int64_t steps = 5;
  int64_t microbatches = 1;
  AdamW adamw;
  SGD sgd;
  Muon muon;
  /// Optimizer per parameter (e.g. mixedMuonAdamW). Empty: AdamW for all.
  /// Muon is only valid for 2-D parameters.
  std::function<Opt(const example::ParamInfo &)> optimizerOf;
  /// Hyperparameters per step (from 0) and parameter, as torch's
  /// param_groups and an lr scheduler set them. Empty: adamw, sgd and muon
  /// above, for every parameter and step.
  std::function<Hyper(int64_t step, const example::ParamInfo &)> hyperOf;
  /// torch.nn.utils.clip_grad_norm_ before each step: the total norm is
  /// sqrt(sum of every gradient's squares + clipExtraSq); with clipMaxNorm
  /// > 0 every gradient is scaled by min(1, clipMaxNorm / (total + 1e-6)).
  double clipMaxNorm = 0, clipExtraSq = 0;
  /// bf16 compute copies and gradients (MFSDP_COMPUTE_BF16), with the
  /// runtime's roundings: the forward and backward use each parameter's
  /// fp32 master rounded to bf16 (nearest even), and each rank accumulates
  /// its gradient (the mean over its microbatches) in a bf16 buffer, each
  /// microbatch's sum rounded to fp32 then bf16, before the ranks'
  /// gradients are averaged (in fp32 as a reduction is).
  bool bf16Compute = false;
};

struct Result {
  /// Final parameters by name, rounded to float.
  std::map<std::string, std::vector<float>> params;
  /// losses[s]: mean loss of step s's global batch, before its update.
  std::vector<double> losses;
  /// gradNorms[s]: the total gradient norm of step s, before clipping.
  std::vector<double> gradNorms;
  /// Empty on success; otherwise why nothing was trained (bad config, Muon
  /// asked for a parameter that is not 2-D).
  std::string error;
};

/// Trains c.steps steps from the initial parameters of example::initParam.
Result train(const TrainConfig &c);

/// Muon for 2-D parameters, AdamW for the others.
Opt mixedMuonAdamW(const example::ParamInfo &p);

using ParamMap = std::map<std::string, std::vector<double>>;

/// example::initParam of every parameter, widened to double.
ParamMap initialParams(const example::ModelConfig &m);

/// Mean loss and mean gradient (resized and overwritten) of step `step`'s
/// global batch at `params`, in double, as train() computes them.
double globalLossAndGrad(const TrainConfig &c, int64_t step,
                         const ParamMap &params, ParamMap &grads);

/// One optimizer step of a flat parameter; `step` counts from 1; the state
/// vectors must be zero-filled and of the parameter's size before step 1.
void adamwStep(const AdamW &h, int64_t step, std::vector<double> &p,
               const std::vector<double> &g, std::vector<double> &m,
               std::vector<double> &v);
void sgdStep(const SGD &h, int64_t step, std::vector<double> &p,
             const std::vector<double> &g, std::vector<double> &buf);
/// p, g, buf: rows x cols row-major.
void muonStep(const Muon &h, int64_t rows, int64_t cols,
              std::vector<double> &p, const std::vector<double> &g,
              std::vector<double> &buf);

/// Quintic Newton-Schulz of a rows x cols row-major matrix: X = G/(||G||_F +
/// eps) (or / max(||G||_F, eps)), transposed when rows > cols; `steps`
/// times A = X X^T, B = b A + c A A, X = a X + B X, by default (a,b,c) =
/// (3.4445, -4.7750, 2.0315) and eps 1e-7; transposed back. Returns rows x
/// cols.
std::vector<double> newtonSchulz(const std::vector<double> &g, int64_t rows,
                                 int64_t cols, int steps,
                                 const NewtonSchulz &o = NewtonSchulz());

} // namespace mfsdp::reference

#endif // MFSDP_TEST_PARITY_REFERENCE_H

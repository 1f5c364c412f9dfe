//===- Model.h - A small transformer-style model with host backward -*- C++ -*-===//
//
// The example trainer's model: `layers` residual MLP blocks with an RMSNorm
// in front, fp32, hand-written forward and backward on the host. Plain C++,
// no exceptions, deterministic (fixed loop orders, no threads, and initial
// values and batches built from integer hashes and IEEE arithmetic only).
//
// Block l (parameters in this order):
//   "layers.{l}.norm.weight"  [hidden]          g   (RMSNorm gain, eps 1e-6)
//   "layers.{l}.fc1.weight"   [inter, hidden]   W1  (nn.Linear: out x in)
//   "layers.{l}.fc2.weight"   [hidden, inter]   W2
//   "layers.{l}.fc2.bias"     [hidden]          b2
//   r = x / sqrt(mean_j x_j^2 + 1e-6)   (per token row)
//   h = r * g ; u = h W1^T ; a = gelu_tanh(u) ; y = x + a W2^T + b2
// Loss of a batch: L = 0.5 * mean over all tokens*hidden elements of
// (y_last - target)^2.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_EXAMPLES_TRAINER_MODEL_H
#define MFSDP_EXAMPLES_TRAINER_MODEL_H

#include <cstdint>
#include <string>
#include <vector>

namespace mfsdp::example {

struct ModelConfig {
  int64_t layers = 2, hidden = 16, inter = 32;
  int64_t tokens = 8; ///< per rank per microbatch
};

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t layer = 0;
};

/// RMSNorm epsilon.
inline constexpr double kRmsEps = 1e-6;

/// Every parameter, block by block, in the order of the header comment.
std::vector<ParamInfo> modelParams(const ModelConfig &c);

/// Number of elements of a parameter (product of its shape).
int64_t numel(const ParamInfo &p);

/// Deterministic initial value of element `flatIndex` (row-major) of `p`.
/// It depends only on (p.name, p.shape, flatIndex), so a rank can fill its
/// own shard of a flattened parameter without building the whole tensor.
float initParamElement(const ParamInfo &p, int64_t flatIndex);

/// Deterministic initial values of the whole parameter `p` (numel(p) floats):
/// out[i] = initParamElement(p, i).
void initParam(const ParamInfo &p, float *out);

/// Deterministic input and target of one microbatch, tokens x hidden each
/// (resized here), from (seed, rank, step, micro).
void makeBatch(const ModelConfig &c, uint64_t seed, int64_t rank, int64_t step,
               int64_t micro, std::vector<float> &input,
               std::vector<float> &target);

/// One block's forward and backward in scalar type T, on full (unsharded)
/// parameters. Gradients are ACCUMULATED (grad += dL/dparam), so a caller can
/// gather a block's parameters, run it, and hand back gradients per block,
/// and microbatches add up in the same buffers. Keeps the activations of the
/// last forward for backward: use one object per layer. All buffers are
/// row-major, dense, and must not alias each other (dx may alias dy).
template <typename T> class BasicBlock {
public:
  BasicBlock(int64_t hidden, int64_t inter, int64_t tokens);

  int64_t hidden() const { return hidden_; }
  int64_t inter() const { return inter_; }
  int64_t tokens() const { return tokens_; }

  /// x: tokens x hidden; writes y (tokens x hidden); keeps what backward
  /// needs (a copy of x, the per-row 1/rms, h, u, a).
  void forward(const T *norm, const T *fc1, const T *fc2, const T *bias,
               const T *x, T *y);

  /// dy: dL/dy (tokens x hidden); writes dx = dL/dx; ADDS the parameter
  /// gradients into gNorm [hidden], gFc1 [inter x hidden], gFc2
  /// [hidden x inter], gBias [hidden]. Uses the activations of the last
  /// forward, which must have been run with the same parameters.
  void backward(const T *norm, const T *fc1, const T *fc2, const T *bias,
                const T *dy, T *dx, T *gNorm, T *gFc1, T *gFc2, T *gBias);

private:
  int64_t hidden_, inter_, tokens_;
  std::vector<T> x_, inv_, h_, u_, a_; // saved activations
  std::vector<T> du_, dh_;            // backward scratch
};

extern template class BasicBlock<float>;
extern template class BasicBlock<double>;

/// The fp32 block the trainer runs.
class Block : public BasicBlock<float> {
public:
  using BasicBlock<float>::BasicBlock;
};

/// Loss and dL/dy of the last block's output for one batch of n elements:
/// returns 0.5 * mean_i (y_i - target_i)^2 and writes dy_i =
/// (y_i - target_i) / n. The sum is taken in double.
double lossAndGrad(const float *y, const float *target, int64_t n, float *dy);
double lossAndGrad(const double *y, const double *target, int64_t n,
                   double *dy);

/// gelu, tanh approximation, and its exact derivative (exposed for tests).
double geluTanh(double u);
double geluTanhGrad(double u);

} // namespace mfsdp::example

#endif // MFSDP_EXAMPLES_TRAINER_MODEL_H

//===- Trainer.h - The example trainer over the step library ----*- C++ -*-===//
//
// Trains the example model (Model.h) through the mfsdp C ABI: the hooks
// around each block's forward and backward, DLPack views of the gathered
// parameters and the gradient buffers, the optimizer step. Used by the
// example program and by the parity tests.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_EXAMPLES_TRAINER_TRAINER_H
#define MFSDP_EXAMPLES_TRAINER_TRAINER_H

#include "Model.h"
#include "mfsdp/runtime.h"

#include <functional>
#include <string>
#include <vector>

namespace mfsdp::example {

/// Parameters the outer stack keeps itself: external parameters (owned by
/// a TP or EP dim), which the step library's table leaves out. The trainer
/// reads and writes them here instead of through the library's views, and
/// calls step() before the library's optimizer step, zeroGrad() with its
/// zero_grad. Indices are modelParams() order.
struct OuterParams {
  virtual ~OuterParams() = default;
  virtual float *param(int64_t i) = 0;
  virtual float *grad(int64_t i) = 0;
  virtual void zeroGrad() = 0;
  /// Reduces the gradients over the outer stack's group and updates.
  virtual bool step(std::string &error) = 0;
};

struct TrainOptions {
  int64_t steps = 5;
  /// Index of the first step (the batches depend on it): a run resumed
  /// from a checkpoint after k steps starts at k.
  int64_t firstStep = 0;
  int64_t microbatches = 1;
  uint64_t seed = 1;
  int64_t dataRank = 0; // this rank's index among the data-parallel ranks
  /// Recompute each block's forward in backward (activation checkpointing).
  bool recompute = false;
  /// Per model parameter (modelParams() order) its index in the library's
  /// table, -1 for one the outer stack keeps (`outer`). Empty: the table
  /// is the model's parameters in order.
  std::vector<int32_t> tableIndex;
  OuterParams *outer = nullptr;
  /// Called with each step's index (firstStep + s) once its backward is
  /// done, before the optimizer steps (the outer stack's, then the
  /// library's): where a trainer sets the step's hyperparameters (an lr
  /// schedule) and clips gradients. False, with `error`, stops training.
  std::function<bool(int64_t step, std::string &error)> beforeStep;
};

/// Runs the steps; returns false with `error` set on any runtime failure.
/// `losses` gets this rank's mean loss per step.
bool train(mfsdp_step *step, const ModelConfig &model, const TrainOptions &o,
           std::vector<double> &losses, std::string &error);

} // namespace mfsdp::example

#endif // MFSDP_EXAMPLES_TRAINER_TRAINER_H

//===- Trainer.cpp - The example trainer over the step library ------------===//
#include "Trainer.h"

#include <cstring>
#include <memory>
#include <string>

namespace mfsdp::example {

namespace {
struct Views {
  float *norm, *fc1, *fc2, *bias;
};

/// The fp32 value of a bf16 element (exact).
float widen(uint16_t x) {
  const uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

/// x rounded to the nearest bf16, ties to even (as torch).
uint16_t narrow(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu))
    return static_cast<uint16_t>((bits >> 16) | 0x0040u); // quiet NaN
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/// A bf16 view the model reads or adds into through an fp32 buffer.
struct Widened {
  std::vector<float> values;
  uint16_t *view = nullptr; // the runtime's bf16 elements
};
} // namespace

bool train(mfsdp_step *step, const ModelConfig &c, const TrainOptions &o,
           std::vector<double> &losses, std::string &error) {
  auto ok = [&](mfsdp_status s, const char *what) {
    if (s == MFSDP_OK)
      return true;
    error = std::string(what) + ": " + mfsdp_status_string(s) + " " + mfsdp_last_error(step);
    return false;
  };
  // Parameters come in modelParams() order: four per block; the library's
  // table has them at o.tableIndex (by default in order), the outer stack
  // keeps those the table leaves out.
  if (!o.tableIndex.empty() && o.tableIndex.size() != static_cast<size_t>(4 * c.layers)) {
    error = "the table index has " + std::to_string(o.tableIndex.size()) +
            " entries for " + std::to_string(4 * c.layers) + " parameters";
    return false;
  }
  std::vector<Widened> widened(static_cast<size_t>(4 * c.layers)),
      widenedGrads(static_cast<size_t>(4 * c.layers));
  auto narrowGrads = [&](int64_t layer) {
    for (int64_t i = 4 * layer; i < 4 * layer + 4; ++i) {
      Widened &w = widenedGrads[i];
      for (size_t e = 0; w.view && e < w.values.size(); ++e)
        w.view[e] = narrow(w.values[e]);
      w.view = nullptr;
    }
  };
  auto views = [&](int64_t layer, bool grad, Views &v) {
    float **slots[4] = {&v.norm, &v.fc1, &v.fc2, &v.bias};
    for (int k = 0; k < 4; ++k) {
      const int64_t i = 4 * layer + k;
      const int32_t at = o.tableIndex.empty() ? static_cast<int32_t>(i) : o.tableIndex[i];
      if (at < 0) {
        if (!o.outer) {
          error = "parameter " + std::to_string(i) +
                  " is not in the library's table and no outer stack keeps it";
          return false;
        }
        *slots[k] = grad ? o.outer->grad(i) : o.outer->param(i);
        continue;
      }
      DLTensor t;
      mfsdp_status s = grad ? mfsdp_grad_view(step, at, &t) : mfsdp_param_view(step, at, &t);
      if (!ok(s, grad ? "grad view" : "param view"))
        return false;
      if (t.dtype.code == kDLFloat && t.dtype.bits == 32 && t.dtype.lanes == 1) {
        *slots[k] = static_cast<float *>(t.data);
        continue;
      }
      if (t.dtype.code != kDLBfloat || t.dtype.bits != 16 || t.dtype.lanes != 1) {
        error = std::string(grad ? "the gradient" : "the parameter") + " view of table entry " +
                std::to_string(at) + " has DLPack dtype code " +
                std::to_string(t.dtype.code) + ", " + std::to_string(t.dtype.bits) +
                " bits; the example trainer takes fp32 or bf16";
        return false;
      }
      // bf16: the model computes in fp32 on the values widened (exactly)
      // into a buffer of the trainer's; a gradient is added there and
      // rounded back into the runtime's bf16 buffer after the backward
      // (narrowGrads), as a bf16 gradient accumulates.
      int64_t numel = 1;
      for (int32_t d = 0; d < t.ndim; ++d)
        numel *= t.shape[d];
      Widened &w = (grad ? widenedGrads : widened)[i];
      w.values.resize(static_cast<size_t>(numel));
      w.view = static_cast<uint16_t *>(t.data);
      for (int64_t e = 0; e < numel; ++e)
        w.values[e] = widen(w.view[e]);
      *slots[k] = w.values.data();
    }
    return true;
  };
  const int64_t n = c.tokens * c.hidden;
  std::vector<std::unique_ptr<Block>> blocks;
  for (int64_t l = 0; l < c.layers; ++l)
    blocks.push_back(std::make_unique<Block>(c.hidden, c.inter, c.tokens));
  std::vector<std::vector<float>> acts(c.layers + 1, std::vector<float>(n));
  std::vector<float> target, dy(n), dx(n);
  for (int64_t s = 0; s < o.steps; ++s) {
    if (!ok(mfsdp_zero_grad(step), "zero_grad"))
      return false;
    if (o.outer)
      o.outer->zeroGrad();
    double loss = 0;
    for (int64_t m = 0; m < o.microbatches; ++m) {
      if (!ok(mfsdp_set_no_sync(step, m + 1 < o.microbatches), "set_no_sync"))
        return false;
      makeBatch(c, o.seed, o.dataRank, o.firstStep + s, m, acts[0], target);
      for (int64_t l = 0; l < c.layers; ++l) {
        int32_t u = static_cast<int32_t>(l);
        Views v;
        if (!ok(mfsdp_pre_forward(step, u), "pre_forward") || !views(l, false, v))
          return false;
        blocks[l]->forward(v.norm, v.fc1, v.fc2, v.bias, acts[l].data(),
                           acts[l + 1].data());
        if (!ok(mfsdp_post_forward(step, u), "post_forward"))
          return false;
      }
      loss += lossAndGrad(acts[c.layers].data(), target.data(), n, dy.data()) /
              static_cast<double>(o.microbatches);
      // Accumulated microbatches average: scale the loss gradient by 1/M.
      for (float &g : dy)
        g /= static_cast<float>(o.microbatches);
      for (int64_t l = c.layers; l-- > 0;) {
        int32_t u = static_cast<int32_t>(l);
        Views v, g;
        if (!ok(mfsdp_pre_backward(step, u), "pre_backward") || !views(l, false, v))
          return false;
        if (o.recompute) {
          // Recompute the block's forward under the same gathered weights.
          if (!ok(mfsdp_pre_forward(step, u), "pre_forward (recompute)"))
            return false;
          blocks[l]->forward(v.norm, v.fc1, v.fc2, v.bias, acts[l].data(),
                             acts[l + 1].data());
          if (!ok(mfsdp_post_forward(step, u), "post_forward (recompute)"))
            return false;
        }
        if (!views(l, true, g))
          return false;
        blocks[l]->backward(v.norm, v.fc1, v.fc2, v.bias, dy.data(), dx.data(),
                            g.norm, g.fc1, g.fc2, g.bias);
        narrowGrads(l);
        if (!ok(mfsdp_post_backward(step, u), "post_backward"))
          return false;
        dy.swap(dx);
      }
    }
    if (o.beforeStep && !o.beforeStep(o.firstStep + s, error))
      return false;
    if (o.outer && !o.outer->step(error))
      return false;
    if (!ok(mfsdp_optimizer_step(step), "optimizer_step"))
      return false;
    losses.push_back(loss);
  }
  return true;
}

} // namespace mfsdp::example

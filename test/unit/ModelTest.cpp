//===- ModelTest.cpp - Example model gradients and the reference trainer ---===//
//
// Finite-difference checks of the example model's hand-written backward
// (examples/trainer/Model.h), and checks of the single-process reference
// trainer (test/parity/Reference.h): gradient averaging over ranks and
// microbatches, loss decrease per optimizer, determinism, and optimizer steps
// against values computed by hand (or by the small independent formulas
// written out below).
//
//===----------------------------------------------------------------------===//
#include "../../examples/trainer/Model.h"
#include "../parity/Reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

using namespace mfsdp;
using example::BasicBlock;
using example::ModelConfig;
using example::ParamInfo;

namespace {

// A small deterministic generator for test data (independent of the model's).
struct Lcg {
  uint64_t s;
  explicit Lcg(uint64_t seed) : s(seed * 2862933555777941757ull + 3037000493ull) {}
  double next() { // uniform in [-1, 1)
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(s >> 11) * (2.0 / 9007199254740992.0) - 1.0;
  }
};

template <typename T> std::vector<T> randomVec(size_t n, uint64_t seed,
                                               double scale) {
  Lcg g(seed);
  std::vector<T> v(n);
  for (T &x : v)
    x = static_cast<T>(scale * g.next());
  return v;
}

template <typename T> double maxAbs(const std::vector<T> &v) {
  double m = 0;
  for (T x : v)
    m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// The block's parameters, input and a linear functional L = sum c .* y.
template <typename T> struct BlockCase {
  int64_t H = 6, I = 10, Tk = 5;
  std::vector<T> norm, fc1, fc2, bias, x, c;
  BlockCase() {
    norm = randomVec<T>(H, 1, 0.3);
    for (T &g : norm)
      g += T(1);
    fc1 = randomVec<T>(I * H, 2, 0.8);
    fc2 = randomVec<T>(H * I, 3, 0.5);
    bias = randomVec<T>(H, 4, 0.2);
    x = randomVec<T>(Tk * H, 5, 1.5);
    c = randomVec<T>(Tk * H, 6, 1.0);
  }
  double loss() {
    BasicBlock<T> b(H, I, Tk);
    std::vector<T> y(Tk * H);
    b.forward(norm.data(), fc1.data(), fc2.data(), bias.data(), x.data(),
              y.data());
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i)
      s += static_cast<double>(c[i]) * static_cast<double>(y[i]);
    return s;
  }
  // Analytic gradients: [0] norm, [1] fc1, [2] fc2, [3] bias, [4] x.
  // Parameter gradients start at `init` to check accumulation.
  std::vector<std::vector<T>> grads(T init) {
    BasicBlock<T> b(H, I, Tk);
    std::vector<T> y(Tk * H), dx(Tk * H);
    std::vector<std::vector<T>> g = {
        std::vector<T>(H, init), std::vector<T>(I * H, init),
        std::vector<T>(H * I, init), std::vector<T>(H, init)};
    b.forward(norm.data(), fc1.data(), fc2.data(), bias.data(), x.data(),
              y.data());
    b.backward(norm.data(), fc1.data(), fc2.data(), bias.data(), c.data(),
               dx.data(), g[0].data(), g[1].data(), g[2].data(), g[3].data());
    for (auto &v : g)
      for (T &e : v)
        e -= init;
    g.push_back(dx);
    return g;
  }
  std::vector<T> *tensor(int i) {
    switch (i) {
    case 0: return &norm;
    case 1: return &fc1;
    case 2: return &fc2;
    case 3: return &bias;
    default: return &x;
    }
  }
};

// Central differences of every element of every tensor; returns, per tensor,
// max |fd - analytic| / max |analytic|.
template <typename T>
std::vector<double> fdErrors(BlockCase<T> &bc, double eps) {
  std::vector<std::vector<T>> an = bc.grads(T(0.25));
  std::vector<double> err;
  for (int t = 0; t < 5; ++t) {
    std::vector<T> &v = *bc.tensor(t);
    double worst = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      T saved = v[i];
      v[i] = static_cast<T>(saved + eps);
      double lp = bc.loss();
      v[i] = static_cast<T>(saved - eps);
      double lm = bc.loss();
      v[i] = saved;
      // The step actually taken, after rounding to T.
      double h = static_cast<double>(static_cast<T>(saved + eps)) -
                 static_cast<double>(static_cast<T>(saved - eps));
      double fd = (lp - lm) / h;
      worst = std::max(worst, std::fabs(fd - static_cast<double>(an[t][i])));
    }
    err.push_back(worst / maxAbs(an[t]));
  }
  return err;
}

const char *kTensorNames[] = {"norm", "fc1", "fc2", "bias", "x"};

} // namespace

TEST(ExampleModel, BlockBackwardMatchesFiniteDifferencesInDouble) {
  BlockCase<double> bc;
  std::vector<double> err = fdErrors(bc, 1e-5);
  for (int t = 0; t < 5; ++t)
    EXPECT_LT(err[t], 1e-7) << kTensorNames[t];
}

TEST(ExampleModel, BlockBackwardMatchesFiniteDifferencesInFloat) {
  BlockCase<float> bc;
  std::vector<double> err = fdErrors(bc, 1e-2);
  for (int t = 0; t < 5; ++t)
    EXPECT_LT(err[t], 1e-3) << kTensorNames[t];
}

TEST(ExampleModel, FloatBlockAgreesWithDoubleBlock) {
  BlockCase<float> f;
  BlockCase<double> d;
  auto gf = f.grads(0.f);
  auto gd = d.grads(0.0);
  for (int t = 0; t < 5; ++t) {
    double worst = 0;
    for (size_t i = 0; i < gd[t].size(); ++i) {
      // The float case rounds its inputs; compare at 1e-5 relative.
      worst = std::max(worst, std::fabs(gf[t][i] - gd[t][i]));
    }
    EXPECT_LT(worst, 1e-5 * maxAbs(gd[t])) << kTensorNames[t];
  }
}

TEST(ExampleModel, BackwardAccumulatesAndDxMayAliasDy) {
  BlockCase<double> bc;
  const int64_t H = bc.H, I = bc.I, Tk = bc.Tk;
  BasicBlock<double> b(H, I, Tk);
  std::vector<double> y(Tk * H), d1(Tk * H), d2 = bc.c;
  std::vector<double> g0(H), g1(I * H), g2(H * I), g3(H);
  b.forward(bc.norm.data(), bc.fc1.data(), bc.fc2.data(), bc.bias.data(),
            bc.x.data(), y.data());
  b.backward(bc.norm.data(), bc.fc1.data(), bc.fc2.data(), bc.bias.data(),
             bc.c.data(), d1.data(), g0.data(), g1.data(), g2.data(),
             g3.data());
  std::vector<double> once = g1;
  b.backward(bc.norm.data(), bc.fc1.data(), bc.fc2.data(), bc.bias.data(),
             d2.data(), d2.data(), g0.data(), g1.data(), g2.data(), g3.data());
  // Accumulated, not overwritten (up to the order of the sums).
  for (size_t i = 0; i < g1.size(); ++i)
    EXPECT_NEAR(g1[i], 2 * once[i], 1e-14);
  for (size_t i = 0; i < d1.size(); ++i)
    EXPECT_EQ(d1[i], d2[i]);
  // The bias gradient of L = sum c .* y is the column sum of c.
  for (int64_t j = 0; j < H; ++j) {
    double s = 0;
    for (int64_t t = 0; t < Tk; ++t)
      s += bc.c[t * H + j];
    EXPECT_NEAR(g3[j], 2 * s, 1e-12);
  }
}

TEST(ExampleModel, GeluAndLoss) {
  // gelu_tanh(1) = 0.5 (1 + tanh(sqrt(2/pi) * 1.044715)).
  EXPECT_NEAR(example::geluTanh(1.0),
              0.5 * (1 + std::tanh(std::sqrt(2 / 3.14159265358979323846) * 1.044715)), 1e-15);
  EXPECT_EQ(example::geluTanh(0.0), 0.0);
  EXPECT_NEAR(example::geluTanhGrad(0.0), 0.5, 1e-15);
  for (double u : {-3.0, -0.7, 0.2, 1.3, 4.0}) {
    double h = 1e-5;
    double fd = (example::geluTanh(u + h) - example::geluTanh(u - h)) / (2 * h);
    EXPECT_NEAR(example::geluTanhGrad(u), fd, 1e-9) << u;
  }
  float y[4] = {1, 2, 3, 4}, t[4] = {0, 2, 5, 3}, dy[4];
  // 0.5 * mean(1, 0, 4, 1) = 0.75.
  EXPECT_DOUBLE_EQ(example::lossAndGrad(y, t, 4, dy), 0.75);
  EXPECT_FLOAT_EQ(dy[0], 0.25f);
  EXPECT_FLOAT_EQ(dy[1], 0.f);
  EXPECT_FLOAT_EQ(dy[2], -0.5f);
  EXPECT_FLOAT_EQ(dy[3], 0.25f);
}

TEST(ExampleModel, ParamsInOrder) {
  ModelConfig c;
  c.layers = 2;
  c.hidden = 4;
  c.inter = 6;
  std::vector<ParamInfo> ps = example::modelParams(c);
  ASSERT_EQ(ps.size(), 8u);
  EXPECT_EQ(ps[0].name, "layers.0.norm.weight");
  EXPECT_EQ(ps[1].name, "layers.0.fc1.weight");
  EXPECT_EQ(ps[2].name, "layers.0.fc2.weight");
  EXPECT_EQ(ps[3].name, "layers.0.fc2.bias");
  EXPECT_EQ(ps[7].name, "layers.1.fc2.bias");
  EXPECT_EQ(ps[1].shape, (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(ps[2].shape, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(ps[0].shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(ps[5].layer, 1);
}

TEST(ExampleModel, InitAndBatchesAreDeterministicAndDistinct) {
  ModelConfig c;
  c.hidden = 64;
  c.inter = 128;
  std::vector<ParamInfo> ps = example::modelParams(c);
  for (const ParamInfo &p : ps) {
    std::vector<float> a(example::numel(p)), b(example::numel(p));
    example::initParam(p, a.data());
    example::initParam(p, b.data());
    EXPECT_EQ(a, b) << p.name;
    for (int64_t i = 0; i < example::numel(p); i += 37)
      EXPECT_EQ(example::initParamElement(p, i), a[i]);
    double mean = 0, sq = 0;
    for (float x : a)
      mean += x;
    mean /= a.size();
    for (float x : a)
      sq += (x - mean) * (x - mean);
    double sd = std::sqrt(sq / a.size());
    if (p.shape.size() == 2) {
      double want = 1 / std::sqrt(static_cast<double>(p.shape[1]));
      EXPECT_NEAR(sd, want, 0.1 * want) << p.name;
      EXPECT_NEAR(mean, 0, 0.1 * want) << p.name;
    } else if (p.name.find("norm") != std::string::npos) {
      EXPECT_NEAR(mean, 1.0, 0.05) << p.name;
      EXPECT_NEAR(sd, 0.1, 0.03) << p.name;
    } else {
      EXPECT_NEAR(sd, 0.1, 0.03) << p.name;
      for (float x : a)
        EXPECT_NE(x, 0.f);
    }
  }
  // Same shape, different names: different values.
  std::vector<float> l0(example::numel(ps[1])), l1(example::numel(ps[5]));
  example::initParam(ps[1], l0.data());
  example::initParam(ps[5], l1.data());
  EXPECT_NE(l0, l1);

  std::vector<float> in, tg, in2, tg2;
  example::makeBatch(c, 7, 1, 2, 3, in, tg);
  example::makeBatch(c, 7, 1, 2, 3, in2, tg2);
  ASSERT_EQ(in.size(), static_cast<size_t>(c.tokens * c.hidden));
  ASSERT_EQ(tg.size(), in.size());
  EXPECT_EQ(in, in2);
  EXPECT_EQ(tg, tg2);
  const int64_t variants[4][4] = {
      {8, 1, 2, 3}, {7, 0, 2, 3}, {7, 1, 1, 3}, {7, 1, 2, 2}};
  for (const auto &v : variants) {
    example::makeBatch(c, v[0], v[1], v[2], v[3], in2, tg2);
    EXPECT_NE(in, in2);
    EXPECT_NE(tg, tg2);
  }
  // Swapping rank and micro gives a different batch too.
  example::makeBatch(c, 7, 3, 2, 1, in2, tg2);
  EXPECT_NE(in, in2);
}

TEST(Reference, GlobalLossIsTheMeanOverRanksAndMicrobatches) {
  reference::TrainConfig c;
  c.model.layers = 2;
  c.model.hidden = 8;
  c.model.inter = 12;
  c.model.tokens = 4;
  c.seed = 11;
  c.ranks = 2;
  c.microbatches = 3;
  reference::ParamMap params = reference::initialParams(c.model), grads;
  const int64_t step = 4;
  double loss = reference::globalLossAndGrad(c, step, params, grads);

  // Independently: the fp32 model on each (rank, micro) batch of that step.
  std::vector<ParamInfo> ps = example::modelParams(c.model);
  std::vector<std::vector<float>> pf;
  for (const ParamInfo &p : ps) {
    pf.emplace_back(example::numel(p));
    example::initParam(p, pf.back().data());
  }
  const int64_t n = c.model.tokens * c.model.hidden;
  double sum = 0;
  std::vector<double> gsum(pf[1].size(), 0.0); // layers.0.fc1.weight
  for (int64_t r = 0; r < c.ranks; ++r)
    for (int64_t m = 0; m < c.microbatches; ++m) {
      std::vector<float> in, tg, mid(n), out(n), dy(n), dmid(n), dx(n);
      example::makeBatch(c.model, c.seed, r, step, m, in, tg);
      example::Block b0(c.model.hidden, c.model.inter, c.model.tokens),
          b1(c.model.hidden, c.model.inter, c.model.tokens);
      b0.forward(pf[0].data(), pf[1].data(), pf[2].data(), pf[3].data(),
                 in.data(), mid.data());
      b1.forward(pf[4].data(), pf[5].data(), pf[6].data(), pf[7].data(),
                 mid.data(), out.data());
      sum += example::lossAndGrad(out.data(), tg.data(), n, dy.data());
      std::vector<std::vector<float>> g;
      for (auto &p : pf)
        g.emplace_back(p.size(), 0.f);
      b1.backward(pf[4].data(), pf[5].data(), pf[6].data(), pf[7].data(),
                  dy.data(), dmid.data(), g[4].data(), g[5].data(),
                  g[6].data(), g[7].data());
      b0.backward(pf[0].data(), pf[1].data(), pf[2].data(), pf[3].data(),
                  dmid.data(), dx.data(), g[0].data(), g[1].data(),
                  g[2].data(), g[3].data());
      for (size_t i = 0; i < gsum.size(); ++i)
        gsum[i] += g[1][i];
    }
  EXPECT_NEAR(loss, sum / 6, 1e-6 * loss);
  const std::vector<double> &ref = grads["layers.0.fc1.weight"];
  ASSERT_EQ(ref.size(), gsum.size());
  double scale = maxAbs(ref);
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_NEAR(ref[i], gsum[i] / 6, 1e-5 * scale);
}

TEST(Reference, GlobalGradientMatchesFiniteDifferences) {
  reference::TrainConfig c;
  c.model.layers = 2;
  c.model.hidden = 6;
  c.model.inter = 10;
  c.model.tokens = 3;
  c.ranks = 2;
  c.microbatches = 2;
  reference::ParamMap params = reference::initialParams(c.model), grads, tmp;
  reference::globalLossAndGrad(c, 1, params, grads);
  for (const ParamInfo &p : example::modelParams(c.model)) {
    std::vector<double> &v = params[p.name];
    double worst = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      double saved = v[i], h = 1e-5;
      v[i] = saved + h;
      double lp = reference::globalLossAndGrad(c, 1, params, tmp);
      v[i] = saved - h;
      double lm = reference::globalLossAndGrad(c, 1, params, tmp);
      v[i] = saved;
      worst = std::max(worst, std::fabs((lp - lm) / (2 * h) - grads[p.name][i]));
    }
    EXPECT_LT(worst, 1e-7 * maxAbs(grads[p.name])) << p.name;
  }
}

namespace {

reference::TrainConfig smallTrain() {
  reference::TrainConfig c;
  c.model.layers = 2;
  c.model.hidden = 16;
  c.model.inter = 32;
  c.model.tokens = 8;
  c.seed = 3;
  c.ranks = 2;
  c.microbatches = 2;
  c.steps = 30;
  return c;
}

double meanOf(const std::vector<double> &v, size_t from, size_t to) {
  double s = 0;
  for (size_t i = from; i < to; ++i)
    s += v[i];
  return s / static_cast<double>(to - from);
}

void expectLossDecreases(const reference::TrainConfig &c) {
  reference::Result r = reference::train(c);
  ASSERT_TRUE(r.error.empty()) << r.error;
  ASSERT_EQ(r.losses.size(), static_cast<size_t>(c.steps));
  for (double l : r.losses)
    ASSERT_TRUE(std::isfinite(l));
  double first = meanOf(r.losses, 0, 5), last = meanOf(r.losses, c.steps - 5,
                                                       c.steps);
  EXPECT_LT(last, 0.8 * first) << "first " << first << " last " << last;
}

} // namespace

TEST(Reference, LossDecreasesWithAdamW) {
  reference::TrainConfig c = smallTrain();
  c.adamw.lr = 1e-2;
  expectLossDecreases(c);
}

TEST(Reference, LossDecreasesWithNesterovSGD) {
  reference::TrainConfig c = smallTrain();
  c.sgd.lr = 0.1;
  c.sgd.momentum = 0.9;
  c.sgd.nesterov = true;
  c.sgd.weightDecay = 1e-4;
  c.optimizerOf = [](const ParamInfo &) { return reference::Opt::SGD; };
  expectLossDecreases(c);
}

TEST(Reference, LossDecreasesWithMuonOnMatricesAndAdamWOnVectors) {
  reference::TrainConfig c = smallTrain();
  c.adamw.lr = 1e-2;
  c.muon.lr = 0.02;
  c.optimizerOf = reference::mixedMuonAdamW;
  expectLossDecreases(c);
}

TEST(Reference, TrainingIsDeterministicAndUsesEveryParameter) {
  reference::TrainConfig c = smallTrain();
  c.steps = 3;
  c.optimizerOf = reference::mixedMuonAdamW;
  reference::Result a = reference::train(c), b = reference::train(c);
  ASSERT_TRUE(a.error.empty());
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.params, b.params);
  reference::ParamMap init = reference::initialParams(c.model);
  ASSERT_EQ(a.params.size(), init.size());
  for (auto &kv : a.params) {
    const std::vector<double> &p0 = init[kv.first];
    ASSERT_EQ(kv.second.size(), p0.size());
    size_t moved = 0;
    for (size_t i = 0; i < p0.size(); ++i)
      moved += kv.second[i] != static_cast<float>(p0[i]);
    EXPECT_EQ(moved, p0.size()) << kv.first;
  }
  // Zero steps: the initial parameters.
  c.steps = 0;
  reference::Result z = reference::train(c);
  for (auto &kv : z.params)
    EXPECT_EQ(kv.second, std::vector<float>(init[kv.first].begin(),
                                            init[kv.first].end()));
}

TEST(Reference, RejectsMuonOnVectorsAndBadConfigs) {
  reference::TrainConfig c = smallTrain();
  c.optimizerOf = [](const ParamInfo &) { return reference::Opt::Muon; };
  reference::Result r = reference::train(c);
  EXPECT_NE(r.error.find("not 2-D"), std::string::npos) << r.error;
  EXPECT_TRUE(r.params.empty());
  c = smallTrain();
  c.ranks = 0;
  EXPECT_FALSE(reference::train(c).error.empty());
}

TEST(Reference, AdamWStepsByHand) {
  reference::AdamW h;
  h.lr = 0.1;
  h.weightDecay = 0.1;
  std::vector<double> p = {1.0, -2.0, 0.5}, m(3, 0.0), v(3, 0.0);
  reference::adamwStep(h, 1, p, {0.5, -0.25, 0.0}, m, v);
  // Step 1: p *= 1 - lr*wd = 0.99, then m_hat = g, v_hat = g^2, so
  // p -= lr * g / (|g| + eps); a zero gradient moves only by decay.
  EXPECT_NEAR(p[0], 0.99 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-15);
  EXPECT_NEAR(p[1], -1.98 + 0.1 * 0.25 / (0.25 + 1e-8), 1e-15);
  EXPECT_NEAR(p[2], 0.495, 1e-15);
  EXPECT_NEAR(m[0], 0.05, 1e-15);
  EXPECT_NEAR(v[0], 0.00025, 1e-18);
  // Step 2, g = (0.1, 0.3, -0.2). Element 0 by hand: p = 0.890000002 * 0.99
  // = 0.88110000198; m = 0.055, v = 0.00025975; m_hat = 0.055 / 0.19,
  // v_hat = 0.00025975 / 0.001999; p -= 0.1 m_hat / (sqrt(v_hat) + 1e-8).
  reference::adamwStep(h, 2, p, {0.1, 0.3, -0.2}, m, v);
  double mh = 0.055 / 0.19, vh = 0.00025975 / 0.001999;
  EXPECT_NEAR(p[0], 0.88110000198 - 0.1 * mh / (std::sqrt(vh) + 1e-8), 1e-12);
  EXPECT_NEAR(p[0], 0.8007959063646517, 1e-12);
  EXPECT_NEAR(p[1], -1.875494476507747, 1e-12);
  EXPECT_NEAR(p[2], 0.5644636770961723, 1e-12);
}

TEST(Reference, NesterovSGDStepsByHand) {
  reference::SGD h;
  h.lr = 0.1;
  h.momentum = 0.9;
  h.weightDecay = 0.01;
  h.nesterov = true;
  std::vector<double> p = {1.0, -1.0}, buf(2, 0.0);
  // d = g + 0.01 p = (0.51, 0.19); buf = d; d += 0.9 buf -> 1.9 d.
  reference::sgdStep(h, 1, p, {0.5, 0.2}, buf);
  EXPECT_NEAR(p[0], 0.9031, 1e-15);
  EXPECT_NEAR(p[1], -1.0361, 1e-15);
  // d = (-0.090969, 0.389639); buf = 0.9 (0.51, 0.19) + d =
  // (0.368031, 0.560639); d += 0.9 buf -> (0.2402589, 0.8942141).
  reference::sgdStep(h, 2, p, {-0.1, 0.4}, buf);
  EXPECT_NEAR(buf[0], 0.368031, 1e-15);
  EXPECT_NEAR(buf[1], 0.560639, 1e-15);
  EXPECT_NEAR(p[0], 0.87907411, 1e-15);
  EXPECT_NEAR(p[1], -1.12552141, 1e-15);
  // Plain momentum: d = buf.
  h.nesterov = false;
  p = {1.0, -1.0};
  buf = {0.0, 0.0};
  reference::sgdStep(h, 1, p, {0.5, 0.2}, buf);
  reference::sgdStep(h, 2, p, {-0.1, 0.4}, buf);
  // Step 1: p = (1 - 0.051, -1 - 0.019) = (0.949, -1.019).
  // Step 2: d = (-0.1 + 0.00949, 0.4 - 0.01019) = (-0.09051, 0.38981);
  // buf = (0.459 - 0.09051, 0.171 + 0.38981) = (0.36849, 0.56081).
  EXPECT_NEAR(p[0], 0.949 - 0.036849, 1e-15);
  EXPECT_NEAR(p[1], -1.019 - 0.056081, 1e-15);
}

namespace {

// The quintic Newton-Schulz map on one singular value, `steps` times.
double nsScalar(double x, int steps) {
  for (int i = 0; i < steps; ++i)
    x = 3.4445 * x - 4.7750 * x * x * x + 2.0315 * x * x * x * x * x;
  return x;
}

// Row-major product of small dense matrices.
std::vector<double> mul(const std::vector<double> &a, const std::vector<double> &b,
                        int m, int k, int n) {
  std::vector<double> c(m * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int l = 0; l < k; ++l)
        c[i * n + j] += a[i * k + l] * b[l * n + j];
  return c;
}

std::vector<double> rot2(double t) {
  return {std::cos(t), -std::sin(t), std::sin(t), std::cos(t)};
}

std::vector<double> trans(const std::vector<double> &a, int m, int n) {
  std::vector<double> t(m * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      t[j * m + i] = a[i * n + j];
  return t;
}

} // namespace

TEST(Reference, NewtonSchulzOneStepOnTwoByTwoByHand) {
  // G = [[1, 2], [3, 4]], ||G||_F = sqrt(30). One step, written out:
  // X = G / (sqrt 30 + 1e-7); A = X X^T; B = b A + c A^2; X' = a X + B X.
  std::vector<double> g = {1, 2, 3, 4};
  double n = std::sqrt(30.0) + 1e-7;
  double x00 = 1 / n, x01 = 2 / n, x10 = 3 / n, x11 = 4 / n;
  double a00 = x00 * x00 + x01 * x01, a01 = x00 * x10 + x01 * x11,
         a11 = x10 * x10 + x11 * x11;
  double q00 = a00 * a00 + a01 * a01, q01 = a00 * a01 + a01 * a11,
         q11 = a01 * a01 + a11 * a11;
  double b00 = -4.7750 * a00 + 2.0315 * q00, b01 = -4.7750 * a01 + 2.0315 * q01,
         b11 = -4.7750 * a11 + 2.0315 * q11;
  std::vector<double> want = {3.4445 * x00 + b00 * x00 + b01 * x10,
                              3.4445 * x01 + b00 * x01 + b01 * x11,
                              3.4445 * x10 + b01 * x00 + b11 * x10,
                              3.4445 * x11 + b01 * x01 + b11 * x11};
  std::vector<double> got = reference::newtonSchulz(g, 2, 2, 1);
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(got[i], want[i], 1e-14) << i;
  // The same values from a separate Python evaluation.
  const double py1[4] = {-0.007235205859510541, 0.35285058257530455,
                         0.4457938297051556, 0.47195144150876533};
  const double py5[4] = {-0.6806609899651345, 0.8255396103655184,
                         0.7412954177537814, 0.25944002690644563};
  std::vector<double> got5 = reference::newtonSchulz(g, 2, 2, 5);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(got[i], py1[i], 1e-14) << i;
    EXPECT_NEAR(got5[i], py5[i], 1e-12) << i;
  }
}

TEST(Reference, NewtonSchulzActsOnSingularValues) {
  // G = R(0.3) diag(3, 4) R(-1.1)^T: NS(G) = R(0.3) diag(f(s1), f(s2))
  // R(-1.1)^T with f the scalar quintic map and s = (3, 4) / (5 + 1e-7).
  std::vector<double> L = rot2(0.3), R = rot2(-1.1);
  std::vector<double> D = {3, 0, 0, 4};
  std::vector<double> g = mul(mul(L, D, 2, 2, 2), trans(R, 2, 2), 2, 2, 2);
  std::vector<double> F = {nsScalar(3 / (5 + 1e-7), 5), 0, 0,
                           nsScalar(4 / (5 + 1e-7), 5)};
  std::vector<double> want = mul(mul(L, F, 2, 2, 2), trans(R, 2, 2), 2, 2, 2);
  std::vector<double> got = reference::newtonSchulz(g, 2, 2, 5);
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(got[i], want[i], 1e-12) << i;

  // Tall 3 x 2 (transposed inside): G = P [[3,0],[0,4],[0,0]] R^T with P a
  // 3-D rotation.
  double c = std::cos(0.7), s = std::sin(0.7);
  std::vector<double> P = {c, 0, -s, 0, 1, 0, s, 0, c};
  std::vector<double> P2 = {1, 0, 0, 0, c, -s, 0, s, c};
  P = mul(P, P2, 3, 3, 3);
  std::vector<double> D3 = {3, 0, 0, 4, 0, 0};
  std::vector<double> F3 = {F[0], 0, 0, F[3], 0, 0};
  std::vector<double> g3 = mul(mul(P, D3, 3, 3, 2), trans(R, 2, 2), 3, 2, 2);
  std::vector<double> w3 = mul(mul(P, F3, 3, 3, 2), trans(R, 2, 2), 3, 2, 2);
  std::vector<double> got3 = reference::newtonSchulz(g3, 3, 2, 5);
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(got3[i], w3[i], 1e-12) << i;
  // And its transpose, wide 2 x 3, gives the transposed result.
  std::vector<double> got3t = reference::newtonSchulz(trans(g3, 3, 2), 2, 3, 5);
  std::vector<double> w3t = trans(w3, 3, 2);
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(got3t[i], w3t[i], 1e-12) << i;
}

TEST(Reference, MuonStepsByHand) {
  // 2x2, Nesterov, match_rms_adamw: buf = 0.05 g; u = g + 0.95 (buf - g) =
  // 0.0975 g; ||u|| = 0.4875; O = L diag(f(0.2925/n), f(0.39/n)) R^T with
  // n = 0.4875 + 1e-7; p = 0.9998 p - 0.02 * 0.2 sqrt(2) O.
  reference::Muon h; // lr 0.02, mu 0.95, wd 0.01, nesterov, 5 steps
  std::vector<double> L = rot2(0.3), R = rot2(-1.1);
  std::vector<double> g =
      mul(mul(L, {3, 0, 0, 4}, 2, 2, 2), trans(R, 2, 2), 2, 2, 2);
  std::vector<double> p = {0.5, -0.25, 0.125, 1.0}, p0 = p, buf(4, 0.0);
  reference::muonStep(h, 2, 2, p, g, buf);
  double n = 0.4875 + 1e-7;
  std::vector<double> O = mul(
      mul(L, {nsScalar(0.2925 / n, 5), 0, 0, nsScalar(0.39 / n, 5)}, 2, 2, 2),
      trans(R, 2, 2), 2, 2, 2);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(buf[i], 0.05 * g[i], 1e-15);
    EXPECT_NEAR(p[i], p0[i] * (1 - 0.02 * 0.01) - 0.02 * 0.2 * std::sqrt(2.0) * O[i],
                1e-12)
        << i;
  }

  // 3x2, no Nesterov, original scale sqrt(max(1, 3/2)): two steps with the
  // same gradient: buf1 = 0.05 g, buf2 = 0.95 * 0.05 g + 0.05 g = 0.0975 g.
  h.nesterov = false;
  h.matchRmsAdamW = false;
  h.weightDecay = 0.1;
  h.lr = 0.05;
  std::vector<double> D3 = {3, 0, 0, 4, 0, 0};
  std::vector<double> g3 = mul(D3, trans(R, 2, 2), 3, 2, 2);
  std::vector<double> q(6, 0.25), q0 = q, b3(6, 0.0);
  reference::muonStep(h, 3, 2, q, g3, b3);
  reference::muonStep(h, 3, 2, q, g3, b3);
  auto ortho = [&](double norm) {
    return mul({nsScalar(3 * norm, 5), 0, 0, nsScalar(4 * norm, 5), 0, 0},
               trans(R, 2, 2), 3, 2, 2);
  };
  // Singular values of buf / (||buf|| + 1e-7): 3 k/(5 k + 1e-7) with k the
  // multiple of g.
  std::vector<double> O1 = ortho(0.05 / (0.25 + 1e-7)),
                      O2 = ortho(0.0975 / (0.4875 + 1e-7));
  const double sc = std::sqrt(1.5), decay = 1 - 0.05 * 0.1;
  for (int i = 0; i < 6; ++i) {
    double want = (q0[i] * decay - 0.05 * sc * O1[i]) * decay - 0.05 * sc * O2[i];
    EXPECT_NEAR(q[i], want, 1e-12) << i;
    EXPECT_NEAR(b3[i], 0.0975 * g3[i], 1e-15);
  }
}

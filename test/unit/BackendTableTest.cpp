//===- BackendTableTest.cpp - The C tables across dlopen, round trip ------===//
//
// The CUDA backend crosses dlopen as C tables (BackendTable.h). Here a
// recording backend and control plane go through both adapters (to the
// table, and back to the C++ interface), as they do between
// libmfsdp_rt_cuda and libmfsdp_rt: every argument and result must arrive
// as it left, and an exception on the far side must come back as a code
// with its message.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/Backend.h"
#include "mfsdp/runtime/BackendTable.h"
#include "mfsdp/runtime/ControlPlane.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using namespace mfsdp::rt;

namespace {

/// A backend that records what it was asked for.
class Recording final : public Backend {
public:
  explicit Recording(bool *destroyed) : destroyed_(destroyed) {}
  ~Recording() override { *destroyed_ = true; }

  const char *name() const override { return "recording"; }
  DLDevice device() const override { return {kDLCUDA, 3}; }
  int rank(Group g) const override { return g == Group::Shard ? 1 : 5; }
  int size(Group g) const override { return g == Group::Shard ? 2 : 6; }
  int reserve(int64_t bytes) override { return record(bytes); }
  int allocate(int64_t count, float *&out) override {
    out = buffer;
    return record(count);
  }
  int allocateAt(int64_t offset, int64_t count, float *&out) override {
    out = buffer + 1;
    return record(offset + count);
  }
  void release(float *buf) override { released = buf; }
  int copyFromHost(float *, const float *, int64_t count) override { return record(count); }
  int copyToHost(float *, const float *, int64_t count) override { return record(count); }
  int copy(float *, const float *, int64_t) override {
    throw std::runtime_error("the device fell off the bus");
  }
  int copy2D(float *, int64_t dstPitch, const float *, int64_t srcPitch, int64_t width,
             int64_t height) override {
    counts = {dstPitch, srcPitch, width, height};
    return 0;
  }
  int zero(float *, int64_t count) override { return record(count); }
  int allGather(Group g, const float *, float *, int64_t count) override {
    group = g;
    return record(count);
  }
  int reduceScatter(Group g, const float *, float *, int64_t count) override {
    group = g;
    return record(count);
  }
  int allReduce(Group g, float *, int64_t count) override {
    group = g;
    return record(count);
  }
  int allGatherV(Group g, const float *, float *,
                 const std::vector<int64_t> &c) override {
    group = g;
    counts = c;
    return 0;
  }
  int reduceScatterV(Group g, const float *, float *,
                     const std::vector<int64_t> &c) override {
    group = g;
    counts = c;
    return 0;
  }
  int broadcast(Group g, float *, int64_t count, int root) override {
    group = g;
    return record(count * 100 + root);
  }
  int broadcastMany(Group g, const std::vector<BroadcastPart> &parts) override {
    group = g;
    counts.clear();
    for (const BroadcastPart &p : parts)
      counts.insert(counts.end(), {p.count, p.root});
    return 0;
  }
  int allReduceDoubles(Group, double *values, int64_t count) override {
    values[0] = 2.5;
    return record(count);
  }
  int startAllGather(Group, const float *, float *, int64_t, CommHandle &h) override {
    h = 41;
    return 0;
  }
  int startAllGatherV(Group, const float *, float *, const std::vector<int64_t> &c,
                      CommHandle &h) override {
    counts = c;
    h = 42;
    return 0;
  }
  int wait(CommHandle h) override { return record(h); }
  int startReduceScatter(Group, const float *, float *, int64_t, CommHandle &h) override {
    h = 43;
    return 0;
  }
  int startReduceScatterV(Group, const float *, float *, const std::vector<int64_t> &,
                          CommHandle &h) override {
    h = 44;
    return 0;
  }
  int startAllReduce(Group, float *, int64_t, CommHandle &h) override {
    h = 45;
    return 0;
  }
  int allGatherBF16(Group g, const uint16_t *, uint16_t *, const std::vector<int64_t> &c,
                    CommHandle *handle) override {
    group = g;
    counts = c;
    if (handle)
      *handle = 42;
    return 0;
  }
  int reduceScatterBF16(Group g, const uint16_t *, uint16_t *, const std::vector<int64_t> &c,
                        CommHandle *handle) override {
    group = g;
    counts = c;
    counts.push_back(-16);
    if (handle)
      *handle = 43;
    return 0;
  }
  int allReduceBF16(Group g, uint16_t *, int64_t count, CommHandle *handle) override {
    group = g;
    if (handle)
      *handle = 44;
    return record(count + 16);
  }
  int castToBF16(const float *, uint16_t *, int64_t count) override { return record(count); }
  int castFromBF16(const uint16_t *, float *, int64_t count) override {
    return record(count + 1);
  }
  int copy2DBF16(uint16_t *, int64_t dstPitch, const uint16_t *, int64_t srcPitch,
                 int64_t width, int64_t height) override {
    counts = {dstPitch, srcPitch, width, height, 16};
    return 0;
  }
  int castToBF16Strided(uint16_t *, int64_t dstPitch, const float *, int64_t srcPitch,
                        int64_t width, int64_t height) override {
    counts = {dstPitch, srcPitch, width, height, 17};
    return 0;
  }
  int roundToBF16(float *, int64_t count) override { return record(count); }
  int scale(float *, int64_t, float factor) override {
    scaled = factor;
    return 0;
  }
  int packBlocks(const float *, float *, const BlockGrid &g, int64_t first,
                 int64_t n) override {
    grid = g;
    return record(first * 10 + n);
  }
  int unpackBlocks(const float *, float *, const BlockGrid &g, int64_t, int64_t) override {
    grid = g;
    return 0;
  }
  int adamwStep(float *, const float *, float *, float *, int64_t, const AdamWHyper &h,
                int64_t step) override {
    adamw = h;
    return record(step);
  }
  int sgdStep(float *, const float *, float *, int64_t, const SGDHyper &h,
              int64_t step) override {
    sgd = h;
    return record(step);
  }
  int adamwMulti(const AdamWTensor *tensors, int64_t n) override {
    adamwList.assign(tensors, tensors + n);
    return record(n);
  }
  int sgdMulti(const SGDTensor *tensors, int64_t n) override {
    sgdList.assign(tensors, tensors + n);
    return record(n);
  }
  int sumSquares(const std::vector<FloatSpan> &spans, double &out) override {
    counts.clear();
    for (const FloatSpan &s : spans)
      counts.push_back(s.count);
    out = 12.25;
    return 0;
  }
  int64_t muonScratch(int64_t rows, int64_t cols) const override { return rows * cols + 1; }
  int muonStep(float *, const float *, float *, int64_t, int64_t, const MuonHyper &h,
               float *) override {
    muon = h;
    return 0;
  }
  int afterTrainer() override { return 9; }
  void *kernelStream() override { return buffer; }
  int synchronize() override { return 0; }
  const char *lastError() const override { return "the recording's own error"; }

  /// A code that carries what a call received, so the caller can see it.
  int record(int64_t v) {
    last = v;
    return 0;
  }

  float buffer[4] = {};
  float *released = nullptr;
  int64_t last = -1;
  Group group = Group::Shard;
  std::vector<int64_t> counts;
  float scaled = 0;
  BlockGrid grid;
  AdamWHyper adamw;
  SGDHyper sgd;
  MuonHyper muon;
  std::vector<AdamWTensor> adamwList;
  std::vector<SGDTensor> sgdList;

private:
  bool *destroyed_;
};

TEST(BackendTable, EveryCallArrivesAsItLeft) {
  bool destroyed = false;
  auto *far = new Recording(&destroyed);
  const mfsdp_rt_backend_table table = backendTable(far);
  EXPECT_EQ(table.struct_size, sizeof(mfsdp_rt_backend_table));
  EXPECT_EQ(table.version, static_cast<uint32_t>(MFSDP_RT_BACKEND_TABLE_VERSION));
  {
    std::unique_ptr<Backend> near(backendFromTable(table));
    EXPECT_STREQ(near->name(), "recording");
    EXPECT_EQ(near->device().device_type, kDLCUDA);
    EXPECT_EQ(near->device().device_id, 3);
    EXPECT_EQ(near->rank(Group::Shard), 1);
    EXPECT_EQ(near->rank(Group::Replicate), 5);
    EXPECT_EQ(near->size(Group::Replicate), 6);

    float *out = nullptr;
    EXPECT_EQ(near->allocateAt(256, 8, out), 0);
    EXPECT_EQ(out, far->buffer + 1);
    EXPECT_EQ(far->last, 264);
    near->release(out);
    EXPECT_EQ(far->released, far->buffer + 1);

    EXPECT_EQ(near->copy2D(nullptr, 7, nullptr, 5, 3, 2), 0);
    EXPECT_EQ(far->counts, (std::vector<int64_t>{7, 5, 3, 2}));
    // bf16 compute copies: a gather started with a handle and one without,
    // the casts and the 2-byte strided copy.
    CommHandle bf16Handle = 0;
    EXPECT_EQ(near->allGatherBF16(Group::Replicate, nullptr, nullptr, {3, 0, 5}, &bf16Handle),
              0);
    EXPECT_EQ(bf16Handle, 42);
    EXPECT_EQ(far->counts, (std::vector<int64_t>{3, 0, 5}));
    EXPECT_EQ(near->allGatherBF16(Group::Shard, nullptr, nullptr, {2, 2}, nullptr), 0);
    EXPECT_EQ(far->group, Group::Shard);
    // The reduce dtype bf16's collectives cross with their counts and
    // handles.
    CommHandle reduceHandle = 0;
    EXPECT_EQ(near->reduceScatterBF16(Group::Replicate, nullptr, nullptr, {1, 0, 2},
                                      &reduceHandle),
              0);
    EXPECT_EQ(reduceHandle, 43);
    EXPECT_EQ(far->group, Group::Replicate);
    EXPECT_EQ(far->counts, (std::vector<int64_t>{1, 0, 2, -16}));
    EXPECT_EQ(near->allReduceBF16(Group::Shard, nullptr, 5, &reduceHandle), 0);
    EXPECT_EQ(reduceHandle, 44);
    EXPECT_EQ(far->group, Group::Shard);
    EXPECT_EQ(far->last, 21);
    EXPECT_EQ(near->allReduceBF16(Group::Replicate, nullptr, 6, nullptr), 0);
    EXPECT_EQ(far->group, Group::Replicate);
    EXPECT_EQ(far->last, 22);
    EXPECT_EQ(near->castToBF16(nullptr, nullptr, 11), 0);
    EXPECT_EQ(far->last, 11);
    EXPECT_EQ(near->castFromBF16(nullptr, nullptr, 11), 0);
    EXPECT_EQ(far->last, 12);
    EXPECT_EQ(near->copy2DBF16(nullptr, 9, nullptr, 4, 3, 2), 0);
    EXPECT_EQ(far->counts, (std::vector<int64_t>{9, 4, 3, 2, 16}));
    EXPECT_EQ(near->castToBF16Strided(nullptr, 8, nullptr, 5, 3, 2), 0);
    EXPECT_EQ(far->counts, (std::vector<int64_t>{8, 5, 3, 2, 17}));
    EXPECT_EQ(near->reduceScatterV(Group::Replicate, nullptr, nullptr, {4, 0, 9}), 0);
    EXPECT_EQ(far->group, Group::Replicate);
    EXPECT_EQ(far->counts, (std::vector<int64_t>{4, 0, 9}));
    EXPECT_EQ(near->broadcast(Group::Shard, nullptr, 6, 1), 0);
    EXPECT_EQ(far->group, Group::Shard);
    EXPECT_EQ(far->last, 601);
    EXPECT_EQ(near->broadcastMany(Group::Replicate, {{nullptr, 3, 1}, {nullptr, 8, 0}}), 0);
    EXPECT_EQ(far->counts, (std::vector<int64_t>{3, 1, 8, 0}));
    double values[2] = {0, 0};
    EXPECT_EQ(near->allReduceDoubles(Group::Shard, values, 2), 0);
    EXPECT_EQ(values[0], 2.5);

    CommHandle h = 0;
    EXPECT_EQ(near->startAllGatherV(Group::Shard, nullptr, nullptr, {1, 2}, h), 0);
    EXPECT_EQ(h, 42);
    EXPECT_EQ(near->startAllReduce(Group::Shard, nullptr, 1, h), 0);
    EXPECT_EQ(h, 45);
    EXPECT_EQ(near->wait(h), 0);
    EXPECT_EQ(far->last, 45);

    EXPECT_EQ(near->scale(nullptr, 1, 0.125f), 0);
    EXPECT_EQ(far->scaled, 0.125f);
    EXPECT_EQ(near->packBlocks(nullptr, nullptr, BlockGrid{20, 12, 4, 6, 3}, 2, 5), 0);
    EXPECT_EQ(far->last, 25);
    EXPECT_EQ(far->grid.rows, 20);
    EXPECT_EQ(far->grid.cols, 12);
    EXPECT_EQ(far->grid.blockRows, 4);
    EXPECT_EQ(far->grid.blockCols, 6);
    EXPECT_EQ(far->grid.ranks, 3);

    AdamWHyper adamw;
    adamw.lr = 0.5f;
    adamw.beta1 = 0.25f;
    adamw.beta2 = 0.75f;
    adamw.eps = 1e-6f;
    adamw.weightDecay = 0.125f;
    EXPECT_EQ(near->adamwStep(nullptr, nullptr, nullptr, nullptr, 1, adamw, 17), 0);
    EXPECT_EQ(far->last, 17);
    EXPECT_EQ(far->adamw.lr, 0.5f);
    EXPECT_EQ(far->adamw.beta1, 0.25f);
    EXPECT_EQ(far->adamw.beta2, 0.75f);
    EXPECT_EQ(far->adamw.eps, 1e-6f);
    EXPECT_EQ(far->adamw.weightDecay, 0.125f);
    SGDHyper sgd;
    sgd.lr = 0.25f;
    sgd.momentum = 0.5f;
    sgd.weightDecay = 0.0625f;
    sgd.nesterov = true;
    EXPECT_EQ(near->sgdStep(nullptr, nullptr, nullptr, 1, sgd, 3), 0);
    EXPECT_EQ(far->sgd.lr, 0.25f);
    EXPECT_EQ(far->sgd.momentum, 0.5f);
    EXPECT_EQ(far->sgd.weightDecay, 0.0625f);
    // The fused calls: every tensor's pointers, count, hyperparameters
    // and step cross, in order.
    float a[4], b[4];
    AdamWHyper other = adamw;
    other.weightDecay = 0.f;
    const std::vector<AdamWTensor> adamwList = {{a, b, a + 1, a + 2, 3, adamw, 17},
                                                {b, a, b + 1, b + 2, 9, other, 2}};
    EXPECT_EQ(near->adamwMulti(adamwList.data(), 2), 0);
    EXPECT_EQ(far->last, 2);
    ASSERT_EQ(far->adamwList.size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      const AdamWTensor &w = adamwList[k], &g = far->adamwList[k];
      EXPECT_EQ(g.param, w.param);
      EXPECT_EQ(g.grad, w.grad);
      EXPECT_EQ(g.m, w.m);
      EXPECT_EQ(g.v, w.v);
      EXPECT_EQ(g.count, w.count);
      EXPECT_EQ(g.step, w.step);
      EXPECT_EQ(g.h.lr, w.h.lr);
      EXPECT_EQ(g.h.beta1, w.h.beta1);
      EXPECT_EQ(g.h.beta2, w.h.beta2);
      EXPECT_EQ(g.h.eps, w.h.eps);
      EXPECT_EQ(g.h.weightDecay, w.h.weightDecay);
    }
    SGDHyper plain;
    const std::vector<SGDTensor> sgdList = {{a, b, nullptr, 4, plain, 1},
                                            {b, a, a, 2, sgd, 6},
                                            {nullptr, nullptr, nullptr, 0, sgd, 6}};
    EXPECT_EQ(near->sgdMulti(sgdList.data(), 3), 0);
    EXPECT_EQ(far->last, 3);
    ASSERT_EQ(far->sgdList.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      const SGDTensor &w = sgdList[k], &g = far->sgdList[k];
      EXPECT_EQ(g.param, w.param);
      EXPECT_EQ(g.grad, w.grad);
      EXPECT_EQ(g.buf, w.buf);
      EXPECT_EQ(g.count, w.count);
      EXPECT_EQ(g.step, w.step);
      EXPECT_EQ(g.h.lr, w.h.lr);
      EXPECT_EQ(g.h.momentum, w.h.momentum);
      EXPECT_EQ(g.h.weightDecay, w.h.weightDecay);
      EXPECT_EQ(g.h.nesterov, w.h.nesterov);
    }
    EXPECT_TRUE(far->sgd.nesterov);
    MuonHyper muon;
    muon.lr = 0.03f;
    muon.momentum = 0.5f;
    muon.weightDecay = 0.25f;
    muon.nesterov = false;
    muon.ns = {7, 1.5f, -2.5f, 3.5f, 1e-5f, NsNorm::Clamp, NsPrecision::BF16, NsForm::Gemm};
    muon.scale = MuonScale::SpectralUnclamped;
    EXPECT_EQ(near->muonStep(nullptr, nullptr, nullptr, 2, 3, muon, nullptr), 0);
    EXPECT_EQ(far->muon.lr, 0.03f);
    EXPECT_EQ(far->muon.momentum, 0.5f);
    EXPECT_EQ(far->muon.weightDecay, 0.25f);
    EXPECT_FALSE(far->muon.nesterov);
    EXPECT_EQ(far->muon.ns.steps, 7);
    EXPECT_EQ(far->muon.ns.a, 1.5f);
    EXPECT_EQ(far->muon.ns.b, -2.5f);
    EXPECT_EQ(far->muon.ns.c, 3.5f);
    EXPECT_EQ(far->muon.ns.eps, 1e-5f);
    EXPECT_EQ(far->muon.ns.norm, NsNorm::Clamp);
    EXPECT_EQ(far->muon.ns.precision, NsPrecision::BF16);
    EXPECT_EQ(far->muon.ns.form, NsForm::Gemm);
    EXPECT_EQ(far->muon.scale, MuonScale::SpectralUnclamped);
    EXPECT_EQ(near->muonScratch(4, 5), 21);

    double sum = 0;
    EXPECT_EQ(near->sumSquares({{nullptr, 3}, {nullptr, 11}}, sum), 0);
    EXPECT_EQ(sum, 12.25);
    EXPECT_EQ(far->counts, (std::vector<int64_t>{3, 11}));
    EXPECT_EQ(near->afterTrainer(), 9);
    EXPECT_EQ(near->kernelStream(), static_cast<void *>(far->buffer));
    EXPECT_STREQ(near->lastError(), "the recording's own error");
    EXPECT_FALSE(destroyed);
  }
  // Deleting the near side destroys the far backend through the table.
  EXPECT_TRUE(destroyed);
}

TEST(BackendTable, AnExceptionComesBackAsACodeWithItsMessage) {
  bool destroyed = false;
  std::unique_ptr<Backend> near(backendFromTable(backendTable(new Recording(&destroyed))));
  EXPECT_NE(near->copy(nullptr, nullptr, 1), 0);
  EXPECT_STREQ(near->lastError(), "an exception in the backend: the device fell off the bus");
  // The next call that succeeds clears it: the backend's own error again.
  EXPECT_EQ(near->zero(nullptr, 1), 0);
  EXPECT_STREQ(near->lastError(), "the recording's own error");
}

/// A control plane of 4 ranks under torchrun that records its calls.
class Control final : public ControlPlane {
public:
  Control() {
    env.rank = 2;
    env.world = 4;
    env.localRank = 1;
  }
  const char *name() const override { return "torchrun"; }
  int rank() const override { return 2; }
  int world() const override { return 4; }
  int localRank() const override { return 1; }
  bool minMax(const std::vector<int64_t> &mine, std::vector<int64_t> &lo,
              std::vector<int64_t> &hi, std::string &error) override {
    if (mine.empty()) {
      error = "rank 3 went away";
      return false;
    }
    lo = mine;
    hi.clear();
    for (int64_t v : mine)
      hi.push_back(v + 10);
    return true;
  }
  bool broadcast(std::vector<uint8_t> &blob, std::string &) override {
    received = blob.size();
    blob.assign({'u', 'i', 'd'});
    return true;
  }
  bool allGather(const std::vector<uint8_t> &, std::vector<std::vector<uint8_t>> &,
                 std::string &) override {
    return false;
  }
  const RankEnv *rankEnv() const override { return &env; }

  RankEnv env;
  size_t received = 0;
};

TEST(BackendTable, TheControlPlaneArrivesAsItLeft) {
  Control far;
  const mfsdp_rt_control_table table = controlTable(far);
  EXPECT_EQ(table.struct_size, sizeof(mfsdp_rt_control_table));
  EXPECT_EQ(table.torchrun, 1);
  std::unique_ptr<ControlPlane> near(controlFromTable(table));
  EXPECT_EQ(near->rank(), 2);
  EXPECT_EQ(near->world(), 4);
  EXPECT_EQ(near->localRank(), 1);
  ASSERT_NE(near->rankEnv(), nullptr);
  EXPECT_EQ(near->rankEnv()->localRank, 1);

  std::vector<int64_t> lo, hi;
  std::string error;
  ASSERT_TRUE(near->minMax({3, -4}, lo, hi, error)) << error;
  EXPECT_EQ(lo, (std::vector<int64_t>{3, -4}));
  EXPECT_EQ(hi, (std::vector<int64_t>{13, 6}));
  EXPECT_FALSE(near->minMax({}, lo, hi, error));
  EXPECT_EQ(error, "rank 3 went away");

  std::vector<uint8_t> blob(128, 7); // rank 0's NCCL id, say
  ASSERT_TRUE(near->broadcast(blob, error)) << error;
  EXPECT_EQ(far.received, 128u);
  EXPECT_EQ(blob, (std::vector<uint8_t>{'u', 'i', 'd'}));
}

} // namespace

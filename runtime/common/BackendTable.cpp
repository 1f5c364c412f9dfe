//===- BackendTable.cpp - Backend and control plane as C tables -----------===//
//
// The adapters of BackendTable.h: the C tables that cross dlopen between
// libmfsdp_rt and the CUDA backend's library, to and from the C++
// interfaces each side uses (Backend, ControlPlane). The table side of
// each adapter lets no exception out: one thrown by the C++ side becomes a
// nonzero code with its message.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/BackendTable.h"
#include "mfsdp/runtime/Backend.h"
#include "mfsdp/runtime/ControlPlane.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace mfsdp::rt {

void copyError(const std::string &message, char *error, size_t errorSize) {
  if (!error || errorSize == 0)
    return;
  const size_t n = std::min(message.size(), errorSize - 1);
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

namespace {

// The kernels' arguments, field for field (BackendTable.h).
mfsdp_rt_adamw_hyper toC(const AdamWHyper &h) {
  return {h.lr, h.beta1, h.beta2, h.eps, h.weightDecay};
}
AdamWHyper fromC(const mfsdp_rt_adamw_hyper &h) {
  AdamWHyper out;
  out.lr = h.lr;
  out.beta1 = h.beta1;
  out.beta2 = h.beta2;
  out.eps = h.eps;
  out.weightDecay = h.weight_decay;
  return out;
}
mfsdp_rt_sgd_hyper toC(const SGDHyper &h) {
  return {h.lr, h.momentum, h.weightDecay, h.nesterov ? 1 : 0};
}
SGDHyper fromC(const mfsdp_rt_sgd_hyper &h) {
  SGDHyper out;
  out.lr = h.lr;
  out.momentum = h.momentum;
  out.weightDecay = h.weight_decay;
  out.nesterov = h.nesterov != 0;
  return out;
}
std::vector<mfsdp_rt_adamw_tensor> toC(const AdamWTensor *t, int64_t n) {
  std::vector<mfsdp_rt_adamw_tensor> out(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t k = 0; k < n; ++k)
    out[k] = {t[k].param, t[k].grad, t[k].m, t[k].v, t[k].count, toC(t[k].h), t[k].step};
  return out;
}
std::vector<AdamWTensor> fromC(const mfsdp_rt_adamw_tensor *t, int64_t n) {
  std::vector<AdamWTensor> out(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t k = 0; k < n; ++k)
    out[k] = {t[k].param, t[k].grad, t[k].m, t[k].v, t[k].count, fromC(t[k].h), t[k].step};
  return out;
}
std::vector<mfsdp_rt_sgd_tensor> toC(const SGDTensor *t, int64_t n) {
  std::vector<mfsdp_rt_sgd_tensor> out(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t k = 0; k < n; ++k)
    out[k] = {t[k].param, t[k].grad, t[k].buf, t[k].count, toC(t[k].h), t[k].step};
  return out;
}
std::vector<SGDTensor> fromC(const mfsdp_rt_sgd_tensor *t, int64_t n) {
  std::vector<SGDTensor> out(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t k = 0; k < n; ++k)
    out[k] = {t[k].param, t[k].grad, t[k].buf, t[k].count, fromC(t[k].h), t[k].step};
  return out;
}
mfsdp_rt_muon_hyper toC(const MuonHyper &h) {
  return {h.lr,     h.momentum, h.weightDecay, h.nesterov ? 1 : 0,
          h.ns.steps, h.ns.a,   h.ns.b,        h.ns.c,
          h.ns.eps, static_cast<int32_t>(h.ns.norm), static_cast<int32_t>(h.scale),
          static_cast<int32_t>(h.ns.precision), static_cast<int32_t>(h.ns.form),
          h.ns.syrkStrip};
}
MuonHyper fromC(const mfsdp_rt_muon_hyper &h) {
  MuonHyper out;
  out.lr = h.lr;
  out.momentum = h.momentum;
  out.weightDecay = h.weight_decay;
  out.nesterov = h.nesterov != 0;
  out.ns.steps = h.ns_steps;
  out.ns.a = h.ns_a;
  out.ns.b = h.ns_b;
  out.ns.c = h.ns_c;
  out.ns.eps = h.ns_eps;
  out.ns.norm = static_cast<NsNorm>(h.ns_norm);
  out.ns.precision = static_cast<NsPrecision>(h.ns_precision);
  out.ns.form = static_cast<NsForm>(h.ns_form);
  out.ns.syrkStrip = h.ns_syrk_strip;
  out.scale = static_cast<MuonScale>(h.scale);
  return out;
}
mfsdp_rt_block_grid toC(const BlockGrid &g) {
  return {g.rows, g.cols, g.blockRows, g.blockCols, g.ranks};
}
BlockGrid fromC(const mfsdp_rt_block_grid &g) {
  return BlockGrid{g.rows, g.cols, g.block_rows, g.block_cols, g.ranks};
}
int32_t toC(Group g) {
  return g == Group::Shard ? MFSDP_RT_GROUP_SHARD : MFSDP_RT_GROUP_REPLICATE;
}
Group fromC(int32_t g) {
  return g == MFSDP_RT_GROUP_SHARD ? Group::Shard : Group::Replicate;
}

//===----------------------------------------------------------------------===//
// libmfsdp_rt's side.
//===----------------------------------------------------------------------===//

/// A Backend whose every call goes through a table.
class TableBackend final : public Backend {
public:
  explicit TableBackend(const mfsdp_rt_backend_table &t) : t_(t) {}
  ~TableBackend() override { t_.destroy(t_.self); }

  const char *name() const override { return t_.name(t_.self); }
  DLDevice device() const override { return t_.device(t_.self); }
  int rank(Group g) const override { return t_.rank(t_.self, toC(g)); }
  int size(Group g) const override { return t_.size(t_.self, toC(g)); }

  int reserve(int64_t bytes) override { return t_.reserve(t_.self, bytes); }
  int allocate(int64_t count, float *&out) override {
    return t_.allocate(t_.self, count, &out);
  }
  int allocateAt(int64_t offset, int64_t count, float *&out) override {
    return t_.allocate_at(t_.self, offset, count, &out);
  }
  void release(float *buf) override { t_.release(t_.self, buf); }
  int copyFromHost(float *dst, const float *src, int64_t count) override {
    return t_.copy_from_host(t_.self, dst, src, count);
  }
  int copyToHost(float *dst, const float *src, int64_t count) override {
    return t_.copy_to_host(t_.self, dst, src, count);
  }
  int copy(float *dst, const float *src, int64_t count) override {
    return t_.copy(t_.self, dst, src, count);
  }
  int copy2D(float *dst, int64_t dstPitch, const float *src, int64_t srcPitch,
             int64_t width, int64_t height) override {
    return t_.copy_2d(t_.self, dst, dstPitch, src, srcPitch, width, height);
  }
  int zero(float *buf, int64_t count) override { return t_.zero(t_.self, buf, count); }

  int allGather(Group g, const float *send, float *recv, int64_t count) override {
    return t_.all_gather(t_.self, toC(g), send, recv, count);
  }
  int reduceScatter(Group g, const float *send, float *recv, int64_t count) override {
    return t_.reduce_scatter(t_.self, toC(g), send, recv, count);
  }
  int allReduce(Group g, float *buf, int64_t count) override {
    return t_.all_reduce(t_.self, toC(g), buf, count);
  }
  int allGatherV(Group g, const float *send, float *recv,
                 const std::vector<int64_t> &counts) override {
    return t_.all_gather_v(t_.self, toC(g), send, recv, counts.data(),
                           static_cast<int64_t>(counts.size()));
  }
  int reduceScatterV(Group g, const float *send, float *recv,
                     const std::vector<int64_t> &counts) override {
    return t_.reduce_scatter_v(t_.self, toC(g), send, recv, counts.data(),
                               static_cast<int64_t>(counts.size()));
  }
  int broadcast(Group g, float *buf, int64_t count, int root) override {
    return t_.broadcast(t_.self, toC(g), buf, count, root);
  }
  int broadcastMany(Group g, const std::vector<BroadcastPart> &parts) override {
    std::vector<mfsdp_rt_broadcast_part> c;
    c.reserve(parts.size());
    for (const BroadcastPart &p : parts)
      c.push_back({p.buf, p.count, p.root});
    return t_.broadcast_many(t_.self, toC(g), c.data(), static_cast<int64_t>(c.size()));
  }
  int allReduceDoubles(Group g, double *values, int64_t count) override {
    return t_.all_reduce_doubles(t_.self, toC(g), values, count);
  }
  int startAllGather(Group g, const float *send, float *recv, int64_t count,
                     CommHandle &handle) override {
    return t_.start_all_gather(t_.self, toC(g), send, recv, count, &handle);
  }
  int startAllGatherV(Group g, const float *send, float *recv,
                      const std::vector<int64_t> &counts, CommHandle &handle) override {
    return t_.start_all_gather_v(t_.self, toC(g), send, recv, counts.data(),
                                 static_cast<int64_t>(counts.size()), &handle);
  }
  int wait(CommHandle handle) override { return t_.wait(t_.self, handle); }
  int startReduceScatter(Group g, const float *send, float *recv, int64_t count,
                         CommHandle &handle) override {
    return t_.start_reduce_scatter(t_.self, toC(g), send, recv, count, &handle);
  }
  int startReduceScatterV(Group g, const float *send, float *recv,
                          const std::vector<int64_t> &counts,
                          CommHandle &handle) override {
    return t_.start_reduce_scatter_v(t_.self, toC(g), send, recv, counts.data(),
                                     static_cast<int64_t>(counts.size()), &handle);
  }
  int startAllReduce(Group g, float *buf, int64_t count, CommHandle &handle) override {
    return t_.start_all_reduce(t_.self, toC(g), buf, count, &handle);
  }

  int allGatherBF16(Group g, const uint16_t *send, uint16_t *recv,
                    const std::vector<int64_t> &counts, CommHandle *handle) override {
    return t_.all_gather_bf16(t_.self, toC(g), send, recv, counts.data(),
                              static_cast<int64_t>(counts.size()), handle);
  }
  int reduceScatterBF16(Group g, const uint16_t *send, uint16_t *recv,
                        const std::vector<int64_t> &counts, CommHandle *handle) override {
    return t_.reduce_scatter_bf16(t_.self, toC(g), send, recv, counts.data(),
                                  static_cast<int64_t>(counts.size()), handle);
  }
  int allReduceBF16(Group g, uint16_t *buf, int64_t count, CommHandle *handle) override {
    return t_.all_reduce_bf16(t_.self, toC(g), buf, count, handle);
  }
  int castToBF16(const float *in, uint16_t *out, int64_t count) override {
    return t_.cast_to_bf16(t_.self, in, out, count);
  }
  int castFromBF16(const uint16_t *in, float *out, int64_t count) override {
    return t_.cast_from_bf16(t_.self, in, out, count);
  }
  int copy2DBF16(uint16_t *dst, int64_t dstPitch, const uint16_t *src, int64_t srcPitch,
                 int64_t width, int64_t height) override {
    return t_.copy_2d_bf16(t_.self, dst, dstPitch, src, srcPitch, width, height);
  }
  int castToBF16Strided(uint16_t *dst, int64_t dstPitch, const float *src, int64_t srcPitch,
                        int64_t width, int64_t height) override {
    return t_.cast_to_bf16_strided(t_.self, dst, dstPitch, src, srcPitch, width, height);
  }
  int roundToBF16(float *buf, int64_t count) override {
    return t_.round_to_bf16(t_.self, buf, count);
  }
  int scale(float *buf, int64_t count, float factor) override {
    return t_.scale(t_.self, buf, count, factor);
  }
  int packBlocks(const float *whole, float *packed, const BlockGrid &grid,
                 int64_t firstBlock, int64_t numBlocks) override {
    const mfsdp_rt_block_grid g = toC(grid);
    return t_.pack_blocks(t_.self, whole, packed, &g, firstBlock, numBlocks);
  }
  int unpackBlocks(const float *packed, float *whole, const BlockGrid &grid,
                   int64_t firstBlock, int64_t numBlocks) override {
    const mfsdp_rt_block_grid g = toC(grid);
    return t_.unpack_blocks(t_.self, packed, whole, &g, firstBlock, numBlocks);
  }
  int adamwStep(float *param, const float *grad, float *m, float *v, int64_t count,
                const AdamWHyper &h, int64_t step) override {
    const mfsdp_rt_adamw_hyper c = toC(h);
    return t_.adamw_step(t_.self, param, grad, m, v, count, &c, step);
  }
  int sgdStep(float *param, const float *grad, float *buf, int64_t count,
              const SGDHyper &h, int64_t step) override {
    const mfsdp_rt_sgd_hyper c = toC(h);
    return t_.sgd_step(t_.self, param, grad, buf, count, &c, step);
  }
  int adamwMulti(const AdamWTensor *tensors, int64_t n) override {
    const std::vector<mfsdp_rt_adamw_tensor> c = toC(tensors, n);
    return t_.adamw_multi(t_.self, c.data(), n);
  }
  int sgdMulti(const SGDTensor *tensors, int64_t n) override {
    const std::vector<mfsdp_rt_sgd_tensor> c = toC(tensors, n);
    return t_.sgd_multi(t_.self, c.data(), n);
  }
  int sumSquares(const std::vector<FloatSpan> &spans, double &out) override {
    std::vector<mfsdp_rt_float_span> c;
    c.reserve(spans.size());
    for (const FloatSpan &s : spans)
      c.push_back({s.buf, s.count});
    return t_.sum_squares(t_.self, c.data(), static_cast<int64_t>(c.size()), &out);
  }
  int64_t muonScratch(int64_t rows, int64_t cols) const override {
    return t_.muon_scratch(t_.self, rows, cols);
  }
  int muonStep(float *param, const float *grad, float *buf, int64_t rows, int64_t cols,
               const MuonHyper &h, float *scratch) override {
    const mfsdp_rt_muon_hyper c = toC(h);
    return t_.muon_step(t_.self, param, grad, buf, rows, cols, &c, scratch);
  }

  int afterTrainer() override { return t_.after_trainer(t_.self); }
  void *kernelStream() override { return t_.kernel_stream(t_.self); }
  int synchronize() override { return t_.synchronize(t_.self); }
  const char *lastError() const override { return t_.last_error(t_.self); }

private:
  mfsdp_rt_backend_table t_;
};

/// Runs `body` (a control plane's call): false with `error` set when it
/// fails or throws.
template <typename Body>
int controlCall(char *error, size_t errorSize, Body &&body) noexcept {
  try {
    std::string why;
    if (body(why))
      return 0;
    copyError(why, error, errorSize);
  } catch (const std::exception &e) {
    copyError(std::string("an exception in the control plane: ") + e.what(), error,
              errorSize);
  } catch (...) {
    copyError("an unknown exception in the control plane", error, errorSize);
  }
  return 1;
}

//===----------------------------------------------------------------------===//
// The CUDA library's side.
//===----------------------------------------------------------------------===//

/// A control plane whose collectives go through a table.
class TableControlPlane final : public ControlPlane {
public:
  explicit TableControlPlane(const mfsdp_rt_control_table &t) : t_(t) {
    env_.rank = t.rank;
    env_.world = t.world;
    env_.localRank = t.local_rank;
  }
  const char *name() const override { return t_.torchrun ? "torchrun" : "MPI"; }
  int rank() const override { return t_.rank; }
  int world() const override { return t_.world; }
  int localRank() const override { return t_.local_rank; }
  bool minMax(const std::vector<int64_t> &mine, std::vector<int64_t> &lo,
              std::vector<int64_t> &hi, std::string &error) override {
    lo.assign(mine.size(), 0);
    hi.assign(mine.size(), 0);
    char why[1024] = "";
    if (t_.min_max(t_.self, mine.data(), static_cast<int64_t>(mine.size()), lo.data(),
                   hi.data(), why, sizeof(why)) == 0)
      return true;
    error = why;
    return false;
  }
  bool broadcast(std::vector<uint8_t> &blob, std::string &error) override {
    const int64_t capacity = int64_t(1) << 20; // ControlPlane.h: at most 1 MiB
    int64_t size = static_cast<int64_t>(blob.size());
    if (size > capacity) {
      error = "a broadcast of " + std::to_string(size) + " bytes (at most 1 MiB)";
      return false;
    }
    blob.resize(static_cast<size_t>(capacity));
    char why[1024] = "";
    const int rc = t_.broadcast(t_.self, blob.data(), &size, capacity, why, sizeof(why));
    blob.resize(rc == 0 ? static_cast<size_t>(size) : 0);
    if (rc == 0)
      return true;
    error = why;
    return false;
  }
  bool allGather(const std::vector<uint8_t> &, std::vector<std::vector<uint8_t>> &,
                 std::string &error) override {
    error = "allGather does not cross the backend table (BackendTable.h)";
    return false;
  }
  /// Under torchrun: the ranks the table names (the addresses stay on
  /// libmfsdp_rt's side).
  const RankEnv *rankEnv() const override { return t_.torchrun ? &env_ : nullptr; }

private:
  mfsdp_rt_control_table t_;
  RankEnv env_;
};

/// The backend behind a table's `self`.
Backend &self(void *s) { return *static_cast<Backend *>(s); }

/// Runs a backend call behind a table entry: its code, or 1 when it
/// throws (the message is then the exception's, kept per thread since the
/// backend's own lastError cannot be set from here).
thread_local std::string thrown;
template <typename Body> int backendCall(Body &&body) noexcept {
  try {
    thrown.clear();
    return body();
  } catch (const std::exception &e) {
    try {
      thrown = std::string("an exception in the backend: ") + e.what();
    } catch (...) {
    }
  } catch (...) {
    try {
      thrown = "an unknown exception in the backend";
    } catch (...) {
    }
  }
  return 1;
}

} // namespace

Backend *backendFromTable(const mfsdp_rt_backend_table &table) {
  return new TableBackend(table);
}

mfsdp_rt_control_table controlTable(ControlPlane &control) {
  mfsdp_rt_control_table t{};
  t.struct_size = sizeof(t);
  t.version = MFSDP_RT_BACKEND_TABLE_VERSION;
  t.self = &control;
  t.rank = control.rank();
  t.world = control.world();
  t.local_rank = control.localRank();
  t.torchrun = control.rankEnv() ? 1 : 0;
  t.min_max = [](void *self, const int64_t *mine, int64_t count, int64_t *lo,
                 int64_t *hi, char *error, size_t errorSize) {
    return controlCall(error, errorSize, [&](std::string &why) {
      std::vector<int64_t> l, h;
      if (!static_cast<ControlPlane *>(self)->minMax(
              std::vector<int64_t>(mine, mine + count), l, h, why))
        return false;
      std::copy(l.begin(), l.end(), lo);
      std::copy(h.begin(), h.end(), hi);
      return true;
    });
  };
  t.broadcast = [](void *self, uint8_t *blob, int64_t *size, int64_t capacity,
                   char *error, size_t errorSize) {
    return controlCall(error, errorSize, [&](std::string &why) {
      std::vector<uint8_t> b(blob, blob + *size);
      if (!static_cast<ControlPlane *>(self)->broadcast(b, why))
        return false;
      if (static_cast<int64_t>(b.size()) > capacity) {
        why = "rank 0 broadcast " + std::to_string(b.size()) + " bytes, more than " +
              std::to_string(capacity);
        return false;
      }
      std::copy(b.begin(), b.end(), blob);
      *size = static_cast<int64_t>(b.size());
      return true;
    });
  };
  return t;
}

ControlPlane *controlFromTable(const mfsdp_rt_control_table &table) {
  return new TableControlPlane(table);
}

mfsdp_rt_backend_table backendTable(Backend *backend) {
  mfsdp_rt_backend_table t{};
  t.struct_size = sizeof(t);
  t.version = MFSDP_RT_BACKEND_TABLE_VERSION;
  t.self = backend;
  t.destroy = [](void *s) { delete static_cast<Backend *>(s); };
  t.name = [](void *s) { return self(s).name(); };
  t.last_error = [](void *s) {
    return thrown.empty() ? self(s).lastError() : thrown.c_str();
  };
  t.device = [](void *s) { return self(s).device(); };
  t.rank = [](void *s, int32_t g) { return self(s).rank(fromC(g)); };
  t.size = [](void *s, int32_t g) { return self(s).size(fromC(g)); };
  t.reserve = [](void *s, int64_t bytes) {
    return backendCall([&] { return self(s).reserve(bytes); });
  };
  t.allocate = [](void *s, int64_t count, float **out) {
    return backendCall([&] { return self(s).allocate(count, *out); });
  };
  t.allocate_at = [](void *s, int64_t offset, int64_t count, float **out) {
    return backendCall([&] { return self(s).allocateAt(offset, count, *out); });
  };
  t.release = [](void *s, float *buf) {
    backendCall([&] {
      self(s).release(buf);
      return 0;
    });
  };
  t.copy_from_host = [](void *s, float *dst, const float *src, int64_t count) {
    return backendCall([&] { return self(s).copyFromHost(dst, src, count); });
  };
  t.copy_to_host = [](void *s, float *dst, const float *src, int64_t count) {
    return backendCall([&] { return self(s).copyToHost(dst, src, count); });
  };
  t.copy = [](void *s, float *dst, const float *src, int64_t count) {
    return backendCall([&] { return self(s).copy(dst, src, count); });
  };
  t.copy_2d = [](void *s, float *dst, int64_t dstPitch, const float *src,
                 int64_t srcPitch, int64_t width, int64_t height) {
    return backendCall(
        [&] { return self(s).copy2D(dst, dstPitch, src, srcPitch, width, height); });
  };
  t.zero = [](void *s, float *buf, int64_t count) {
    return backendCall([&] { return self(s).zero(buf, count); });
  };
  t.all_gather = [](void *s, int32_t g, const float *send, float *recv, int64_t count) {
    return backendCall([&] { return self(s).allGather(fromC(g), send, recv, count); });
  };
  t.reduce_scatter = [](void *s, int32_t g, const float *send, float *recv,
                        int64_t count) {
    return backendCall(
        [&] { return self(s).reduceScatter(fromC(g), send, recv, count); });
  };
  t.all_reduce = [](void *s, int32_t g, float *buf, int64_t count) {
    return backendCall([&] { return self(s).allReduce(fromC(g), buf, count); });
  };
  t.all_gather_v = [](void *s, int32_t g, const float *send, float *recv,
                      const int64_t *counts, int64_t n) {
    return backendCall([&] {
      return self(s).allGatherV(fromC(g), send, recv,
                                std::vector<int64_t>(counts, counts + n));
    });
  };
  t.reduce_scatter_v = [](void *s, int32_t g, const float *send, float *recv,
                          const int64_t *counts, int64_t n) {
    return backendCall([&] {
      return self(s).reduceScatterV(fromC(g), send, recv,
                                    std::vector<int64_t>(counts, counts + n));
    });
  };
  t.broadcast = [](void *s, int32_t g, float *buf, int64_t count, int32_t root) {
    return backendCall([&] { return self(s).broadcast(fromC(g), buf, count, root); });
  };
  t.broadcast_many = [](void *s, int32_t g, const mfsdp_rt_broadcast_part *parts,
                        int64_t n) {
    return backendCall([&] {
      std::vector<BroadcastPart> p;
      for (int64_t i = 0; i < n; ++i)
        p.push_back({parts[i].buf, parts[i].count, parts[i].root});
      return self(s).broadcastMany(fromC(g), p);
    });
  };
  t.all_reduce_doubles = [](void *s, int32_t g, double *values, int64_t count) {
    return backendCall([&] { return self(s).allReduceDoubles(fromC(g), values, count); });
  };
  t.start_all_gather = [](void *s, int32_t g, const float *send, float *recv,
                          int64_t count, int64_t *handle) {
    return backendCall(
        [&] { return self(s).startAllGather(fromC(g), send, recv, count, *handle); });
  };
  t.start_all_gather_v = [](void *s, int32_t g, const float *send, float *recv,
                            const int64_t *counts, int64_t n, int64_t *handle) {
    return backendCall([&] {
      return self(s).startAllGatherV(fromC(g), send, recv,
                                     std::vector<int64_t>(counts, counts + n), *handle);
    });
  };
  t.wait = [](void *s, int64_t handle) {
    return backendCall([&] { return self(s).wait(handle); });
  };
  t.start_reduce_scatter = [](void *s, int32_t g, const float *send, float *recv,
                              int64_t count, int64_t *handle) {
    return backendCall(
        [&] { return self(s).startReduceScatter(fromC(g), send, recv, count, *handle); });
  };
  t.start_reduce_scatter_v = [](void *s, int32_t g, const float *send, float *recv,
                                const int64_t *counts, int64_t n, int64_t *handle) {
    return backendCall([&] {
      return self(s).startReduceScatterV(fromC(g), send, recv,
                                         std::vector<int64_t>(counts, counts + n),
                                         *handle);
    });
  };
  t.start_all_reduce = [](void *s, int32_t g, float *buf, int64_t count,
                          int64_t *handle) {
    return backendCall(
        [&] { return self(s).startAllReduce(fromC(g), buf, count, *handle); });
  };
  t.round_to_bf16 = [](void *s, float *buf, int64_t count) {
    return backendCall([&] { return self(s).roundToBF16(buf, count); });
  };
  t.scale = [](void *s, float *buf, int64_t count, float factor) {
    return backendCall([&] { return self(s).scale(buf, count, factor); });
  };
  t.pack_blocks = [](void *s, const float *whole, float *packed,
                     const mfsdp_rt_block_grid *grid, int64_t first, int64_t n) {
    return backendCall(
        [&] { return self(s).packBlocks(whole, packed, fromC(*grid), first, n); });
  };
  t.unpack_blocks = [](void *s, const float *packed, float *whole,
                       const mfsdp_rt_block_grid *grid, int64_t first, int64_t n) {
    return backendCall(
        [&] { return self(s).unpackBlocks(packed, whole, fromC(*grid), first, n); });
  };
  t.adamw_step = [](void *s, float *param, const float *grad, float *m, float *v,
                    int64_t count, const mfsdp_rt_adamw_hyper *h, int64_t step) {
    return backendCall(
        [&] { return self(s).adamwStep(param, grad, m, v, count, fromC(*h), step); });
  };
  t.sgd_step = [](void *s, float *param, const float *grad, float *buf, int64_t count,
                  const mfsdp_rt_sgd_hyper *h, int64_t step) {
    return backendCall(
        [&] { return self(s).sgdStep(param, grad, buf, count, fromC(*h), step); });
  };
  t.adamw_multi = [](void *s, const mfsdp_rt_adamw_tensor *tensors, int64_t n) {
    return backendCall([&] {
      const std::vector<AdamWTensor> c = fromC(tensors, n);
      return self(s).adamwMulti(c.data(), n);
    });
  };
  t.sgd_multi = [](void *s, const mfsdp_rt_sgd_tensor *tensors, int64_t n) {
    return backendCall([&] {
      const std::vector<SGDTensor> c = fromC(tensors, n);
      return self(s).sgdMulti(c.data(), n);
    });
  };
  t.sum_squares = [](void *s, const mfsdp_rt_float_span *spans, int64_t n,
                     double *out) {
    return backendCall([&] {
      std::vector<FloatSpan> c;
      for (int64_t i = 0; i < n; ++i)
        c.push_back({spans[i].buf, spans[i].count});
      return self(s).sumSquares(c, *out);
    });
  };
  t.muon_scratch = [](void *s, int64_t rows, int64_t cols) {
    return self(s).muonScratch(rows, cols);
  };
  t.muon_step = [](void *s, float *param, const float *grad, float *buf, int64_t rows,
                   int64_t cols, const mfsdp_rt_muon_hyper *h, float *scratch) {
    return backendCall([&] {
      return self(s).muonStep(param, grad, buf, rows, cols, fromC(*h), scratch);
    });
  };
  t.after_trainer = [](void *s) {
    return backendCall([&] { return self(s).afterTrainer(); });
  };
  t.kernel_stream = [](void *s) { return self(s).kernelStream(); };
  t.synchronize = [](void *s) {
    return backendCall([&] { return self(s).synchronize(); });
  };
  t.all_gather_bf16 = [](void *s, int32_t g, const uint16_t *send, uint16_t *recv,
                         const int64_t *counts, int64_t n, int64_t *handle) {
    return backendCall([&] {
      return self(s).allGatherBF16(fromC(g), send, recv,
                                   std::vector<int64_t>(counts, counts + n), handle);
    });
  };
  t.cast_to_bf16 = [](void *s, const float *in, uint16_t *out, int64_t count) {
    return backendCall([&] { return self(s).castToBF16(in, out, count); });
  };
  t.cast_from_bf16 = [](void *s, const uint16_t *in, float *out, int64_t count) {
    return backendCall([&] { return self(s).castFromBF16(in, out, count); });
  };
  t.copy_2d_bf16 = [](void *s, uint16_t *dst, int64_t dp, const uint16_t *src,
                      int64_t sp, int64_t w, int64_t h) {
    return backendCall([&] { return self(s).copy2DBF16(dst, dp, src, sp, w, h); });
  };
  t.cast_to_bf16_strided = [](void *s, uint16_t *dst, int64_t dp, const float *src,
                              int64_t sp, int64_t w, int64_t h) {
    return backendCall([&] { return self(s).castToBF16Strided(dst, dp, src, sp, w, h); });
  };
  t.reduce_scatter_bf16 = [](void *s, int32_t g, const uint16_t *send, uint16_t *recv,
                             const int64_t *counts, int64_t n, int64_t *handle) {
    return backendCall([&] {
      return self(s).reduceScatterBF16(fromC(g), send, recv,
                                       std::vector<int64_t>(counts, counts + n), handle);
    });
  };
  t.all_reduce_bf16 = [](void *s, int32_t g, uint16_t *buf, int64_t count,
                         int64_t *handle) {
    return backendCall([&] { return self(s).allReduceBF16(fromC(g), buf, count, handle); });
  };
  return t;
}

} // namespace mfsdp::rt

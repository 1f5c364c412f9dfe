//===- HostBackend.cpp - The engine's backend in host memory --------------===//
//
// Buffers in host memory (one aligned block per rank, sub-allocated), MPI
// collectives or, under torchrun, gloo's (HostComm), the host kernels
// (Kernels.h). Every call but a started collective is done when it
// returns. Under AddressSanitizer the parts of the block that are not
// handed out are poisoned, so an access past a buffer is still caught.
//
// A test hook: MFSDP_TEST_FAIL_COPY=RANK:to|from:N (read when the backend
// is made) fails the N-th copy to (from) the host on dp_shard rank RANK,
// as a device would, so that tests can check that one rank's failure in
// the middle of a collective operation reaches every rank.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/Arena.h"
#include "mfsdp/runtime/Backend.h"
#include "mfsdp/runtime/ControlPlane.h"
#include "mfsdp/runtime/HostComm.h"
#include "../common/Trace.h"

#include <sanitizer/asan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

namespace mfsdp::rt {

namespace {

class HostBackend final : public Backend {
public:
  HostBackend(std::unique_ptr<HostComm> shard, std::unique_ptr<HostComm> replicate)
      : shard_(std::move(shard)), replicate_(std::move(replicate)) {
    if (const char *spec = std::getenv("MFSDP_TEST_FAIL_COPY")) {
      int rank = -1, n = 0;
      char dir[8] = {0};
      char rest = 0;
      if (std::sscanf(spec, "%d:%4[a-z]:%d%c", &rank, dir, &n, &rest) != 3 || n < 1 ||
          (std::strcmp(dir, "to") != 0 && std::strcmp(dir, "from") != 0))
        std::fprintf(stderr, "mfsdp: MFSDP_TEST_FAIL_COPY='%s' ignored (expected "
                             "RANK:to|from:N, N >= 1)\n", spec);
      else if (rank == shard_->rank()) {
        failTo_ = std::strcmp(dir, "to") == 0 ? n : 0;
        failFrom_ = std::strcmp(dir, "from") == 0 ? n : 0;
      }
    }
  }
  ~HostBackend() override {
    pending_.clear(); // waits for any started collective writing the arena
    // A collective that timed out may still write the arena if its peers
    // wake up: the arena is left allocated rather than handed back.
    if (shard_->broken() || replicate_->broken())
      return;
    if (block_)
      ASAN_UNPOISON_MEMORY_REGION(block_, static_cast<size_t>(arena_.capacity()));
    std::free(block_);
  }

  const char *name() const override { return "host"; }
  DLDevice device() const override { return {kDLCPU, 0}; }
  int rank(Group g) const override { return comm(g).rank(); }
  int size(Group g) const override { return comm(g).size(); }

  int reserve(int64_t bytes) override {
    const int64_t capacity = Arena::roundUp(bytes);
    if (capacity > 0) {
      block_ = std::aligned_alloc(Arena::kAlignment, static_cast<size_t>(capacity));
      if (!block_)
        return fail("cannot allocate an arena of " + std::to_string(capacity) +
                    " bytes of host memory");
    }
    arena_.reset(block_, capacity);
    ASAN_POISON_MEMORY_REGION(block_, static_cast<size_t>(capacity));
    return 0;
  }

  int allocate(int64_t count, float *&out) override {
    out = nullptr;
    if (count <= 0)
      return 0;
    const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
    out = static_cast<float *>(arena_.allocate(bytes));
    if (!out)
      return fail("the arena (" + std::to_string(arena_.capacity()) +
                  " bytes, " + std::to_string(arena_.used()) +
                  " in use) has no free block of " + std::to_string(bytes) +
                  " bytes");
    // The whole block the arena keeps for it, alignment tail included: a
    // bucket's collectives read and write its members' tails.
    ASAN_UNPOISON_MEMORY_REGION(out, static_cast<size_t>(Arena::roundUp(bytes)));
    return 0;
  }

  int allocateAt(int64_t offset, int64_t count, float *&out) override {
    out = nullptr;
    if (count <= 0)
      return 0;
    const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
    out = static_cast<float *>(arena_.allocateAt(offset, bytes));
    if (!out)
      return fail("bytes [" + std::to_string(offset) + ", " +
                  std::to_string(offset + bytes) + ") of the arena (" +
                  std::to_string(arena_.capacity()) +
                  " bytes) are not free or not aligned");
    ASAN_UNPOISON_MEMORY_REGION(out, static_cast<size_t>(Arena::roundUp(bytes)));
    return 0;
  }

  void release(float *buf) override {
    if (!buf)
      return;
    const int64_t bytes = arena_.sizeOf(buf);
    if (arena_.release(buf))
      ASAN_POISON_MEMORY_REGION(buf, static_cast<size_t>(bytes));
  }

  int copyFromHost(float *dst, const float *src, int64_t count) override {
    if (failFrom_ > 0 && --failFrom_ == 0)
      return fail("a copy from the host failed (injected: MFSDP_TEST_FAIL_COPY)");
    return copy(dst, src, count);
  }
  int copyToHost(float *dst, const float *src, int64_t count) override {
    if (failTo_ > 0 && --failTo_ == 0)
      return fail("a copy to the host failed (injected: MFSDP_TEST_FAIL_COPY)");
    return copy(dst, src, count);
  }
  int copy(float *dst, const float *src, int64_t count) override {
    if (count > 0 && dst != src)
      std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(count));
    return 0;
  }
  int copy2D(float *dst, int64_t dstPitch, const float *src, int64_t srcPitch,
             int64_t width, int64_t height) override {
    for (int64_t i = 0; i < height && width > 0; ++i)
      std::memcpy(dst + i * dstPitch, src + i * srcPitch,
                  sizeof(float) * static_cast<size_t>(width));
    return 0;
  }
  int zero(float *buf, int64_t count) override {
    if (count > 0)
      std::memset(buf, 0, sizeof(float) * static_cast<size_t>(count));
    return 0;
  }

  int allGather(Group g, const float *send, float *recv, int64_t count) override {
    return check(comm(g).allGather(send, recv, count));
  }
  int reduceScatter(Group g, const float *send, float *recv, int64_t count) override {
    return check(comm(g).reduceScatter(send, recv, count));
  }
  int allReduce(Group g, float *buf, int64_t count) override {
    return check(comm(g).allReduce(buf, count));
  }
  int allGatherV(Group g, const float *send, float *recv,
                 const std::vector<int64_t> &counts) override {
    return check(comm(g).allGatherV(send, recv, counts));
  }
  int reduceScatterV(Group g, const float *send, float *recv,
                     const std::vector<int64_t> &counts) override {
    return check(comm(g).reduceScatterV(send, recv, counts));
  }
  int broadcast(Group g, float *buf, int64_t count, int root) override {
    return check(comm(g).broadcast(buf, count, root));
  }
  int broadcastMany(Group g, const std::vector<BroadcastPart> &parts) override {
    return check(comm(g).broadcastMany(parts));
  }
  int allReduceDoubles(Group g, double *values, int64_t count) override {
    return check(comm(g).allReduce(values, count));
  }

  int allGatherBF16(Group g, const uint16_t *send, uint16_t *recv,
                    const std::vector<int64_t> &counts, CommHandle *handle) override {
    if (!handle)
      return check(comm(g).allGather16(send, recv, counts, nullptr));
    HostRequestPtr r;
    if (int rc = check(comm(g).allGather16(send, recv, counts, &r)))
      return rc;
    return keep(std::move(r), *handle);
  }
  int reduceScatterBF16(Group g, const uint16_t *send, uint16_t *recv,
                        const std::vector<int64_t> &counts, CommHandle *handle) override {
    if (!handle)
      return check(comm(g).reduceScatterBF16(send, recv, counts, nullptr));
    HostRequestPtr r;
    if (int rc = check(comm(g).reduceScatterBF16(send, recv, counts, &r)))
      return rc;
    return keep(std::move(r), *handle);
  }
  int allReduceBF16(Group g, uint16_t *buf, int64_t count, CommHandle *handle) override {
    if (!handle)
      return check(comm(g).allReduceBF16(buf, count, nullptr));
    HostRequestPtr r;
    if (int rc = check(comm(g).allReduceBF16(buf, count, &r)))
      return rc;
    return keep(std::move(r), *handle);
  }
  int castToBF16(const float *in, uint16_t *out, int64_t count) override {
    host::castF32ToBF16(in, out, count);
    return 0;
  }
  int castFromBF16(const uint16_t *in, float *out, int64_t count) override {
    host::castBF16ToF32(in, out, count);
    return 0;
  }
  int copy2DBF16(uint16_t *dst, int64_t dstPitch, const uint16_t *src, int64_t srcPitch,
                 int64_t width, int64_t height) override {
    for (int64_t i = 0; i < height && width > 0; ++i)
      std::memcpy(dst + i * dstPitch, src + i * srcPitch,
                  sizeof(uint16_t) * static_cast<size_t>(width));
    return 0;
  }
  int castToBF16Strided(uint16_t *dst, int64_t dstPitch, const float *src, int64_t srcPitch,
                        int64_t width, int64_t height) override {
    host::castF32ToBF16Strided(dst, dstPitch, src, srcPitch, width, height);
    return 0;
  }

  int roundToBF16(float *buf, int64_t count) override {
    for (int64_t i = 0; i < count; ++i)
      buf[i] = host::fromBF16(host::toBF16(buf[i]));
    return 0;
  }
  int scale(float *buf, int64_t count, float factor) override {
    for (int64_t i = 0; i < count; ++i)
      buf[i] *= factor;
    return 0;
  }
  int packBlocks(const float *whole, float *packed, const BlockGrid &grid,
                 int64_t firstBlock, int64_t numBlocks) override {
    host::packBlocks(whole, packed, grid, firstBlock, numBlocks);
    return 0;
  }
  int unpackBlocks(const float *packed, float *whole, const BlockGrid &grid,
                   int64_t firstBlock, int64_t numBlocks) override {
    host::unpackBlocks(packed, whole, grid, firstBlock, numBlocks);
    return 0;
  }
  int adamwStep(float *param, const float *grad, float *m, float *v,
                int64_t count, const AdamWHyper &h, int64_t step) override {
    host::adamwStep(param, grad, m, v, count, h, step);
    return 0;
  }
  int sgdStep(float *param, const float *grad, float *buf, int64_t count,
              const SGDHyper &h, int64_t step) override {
    host::sgdStep(param, grad, buf, count, h, step);
    return 0;
  }
  int adamwMulti(const AdamWTensor *tensors, int64_t n) override {
    host::adamwMulti(tensors, n);
    return 0;
  }
  int sgdMulti(const SGDTensor *tensors, int64_t n) override {
    host::sgdMulti(tensors, n);
    return 0;
  }
  int sumSquares(const std::vector<FloatSpan> &spans, double &out) override {
    out = 0;
    for (const FloatSpan &s : spans)
      out += host::sumSquares(s.buf, s.count);
    return 0;
  }
  int64_t muonScratch(int64_t rows, int64_t cols) const override {
    return rows * cols + host::newtonSchulzWorkspace(rows, cols) /
                             static_cast<int64_t>(sizeof(float));
  }
  int muonStep(float *param, const float *grad, float *buf, int64_t rows,
               int64_t cols, const MuonHyper &h, float *scratch) override {
    if (!Trace::current()) {
      host::muonStep(param, grad, buf, rows, cols, h, scratch);
      return 0;
    }
    // Traced: host::muonStep's three parts, Newton-Schulz a span of its own.
    float *update = scratch;
    host::muonMomentum(grad, buf, update, rows * cols, h.momentum, h.nesterov);
    {
      Trace::Span ns = Trace::kernel(Trace::current(), "newton_schulz");
      host::newtonSchulz(update, update, rows, cols, h.ns, scratch + rows * cols);
    }
    host::muonApply(param, update, rows, cols, h);
    return 0;
  }

  int startAllGather(Group g, const float *send, float *recv, int64_t count,
                     CommHandle &handle) override {
    HostRequestPtr r;
    if (int rc = check(comm(g).startAllGather(send, recv, count, r)))
      return rc;
    return keep(std::move(r), handle);
  }
  int startAllGatherV(Group g, const float *send, float *recv,
                      const std::vector<int64_t> &counts,
                      CommHandle &handle) override {
    HostRequestPtr r;
    if (int rc = check(comm(g).startAllGatherV(send, recv, counts, r)))
      return rc;
    return keep(std::move(r), handle);
  }
  int startReduceScatter(Group g, const float *send, float *recv, int64_t count,
                         CommHandle &handle) override {
    HostRequestPtr r;
    if (int rc = check(comm(g).startReduceScatter(send, recv, count, r)))
      return rc;
    return keep(std::move(r), handle);
  }
  int startReduceScatterV(Group g, const float *send, float *recv,
                          const std::vector<int64_t> &counts,
                          CommHandle &handle) override {
    HostRequestPtr r;
    if (int rc = check(comm(g).startReduceScatterV(send, recv, counts, r)))
      return rc;
    return keep(std::move(r), handle);
  }
  int startAllReduce(Group g, float *buf, int64_t count, CommHandle &handle) override {
    HostRequestPtr r;
    if (int rc = check(comm(g).startAllReduce(buf, count, r)))
      return rc;
    return keep(std::move(r), handle);
  }
  /// A started request, under a new handle until its wait.
  int keep(HostRequestPtr r, CommHandle &handle) {
    handle = nextHandle_++;
    pending_.emplace(handle, std::move(r));
    return 0;
  }
  int wait(CommHandle handle) override {
    auto it = pending_.find(handle);
    if (it == pending_.end())
      return fail("wait: no started collective " + std::to_string(handle));
    const int rc = check(it->second->wait());
    pending_.erase(it);
    return rc;
  }

  // Started collectives are completed before anything else can observe the
  // buffers (the engine waits for each one; pending_ waits for the rest
  // when destroyed, before the communicators are freed).
  int synchronize() override { return 0; }
  const char *lastError() const override { return error_.c_str(); }

private:
  HostComm &comm(Group g) const {
    return g == Group::Shard ? *shard_ : *replicate_;
  }
  int check(int code) {
    if (code)
      error_ = HostComm::lastError();
    return code;
  }
  int fail(std::string message) {
    error_ = std::move(message);
    return 1;
  }

  std::unique_ptr<HostComm> shard_, replicate_;
  // MFSDP_TEST_FAIL_COPY: copies left before the failing one (0: none).
  int failTo_ = 0, failFrom_ = 0;
  // Declared after the communicators: destroyed (waited for) first.
  std::map<CommHandle, HostRequestPtr> pending_;
  CommHandle nextHandle_ = 1;
  void *block_ = nullptr;
  Arena arena_;
  std::string error_;
};

} // namespace

Backend *createHostBackend(const BackendOptions &options, std::string &error) {
  std::vector<std::unique_ptr<HostComm>> comms;
  if (options.control && options.control->rankEnv()) {
    if (!createGlooComms(options.mesh, {"dp_shard", "dp_replicate"}, *options.control,
                         options.timeoutMs, comms, error))
      return nullptr;
  } else {
    for (const char *dim : {"dp_shard", "dp_replicate"}) {
      comms.emplace_back(HostComm::createMpi(options.mesh, dim, error));
      if (!comms.back())
        return nullptr;
    }
  }
  for (auto &c : comms)
    c->setTimeout(options.collectiveTimeoutMs);
  return new HostBackend(std::move(comms[0]), std::move(comms[1]));
}

} // namespace mfsdp::rt

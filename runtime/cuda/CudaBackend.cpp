//===- CudaBackend.cpp - The engine's backend on a CUDA device ------------===//
//
// Buffers sub-allocated from one cudaMalloc'd arena per rank, NCCL
// collectives (NcclComm) on a communication stream, the CUDA kernels
// (CudaKernels.h, cuBLAS for Newton-Schulz) and copies on a compute stream.
// Each collective waits for the compute work issued before it (an event
// recorded on the compute stream), and the compute work issued after it
// waits for the collective (an event recorded on the communication
// stream), so the engine sees one order: a buffer released and handed out
// again is never touched by work issued before the release. Gather
// prefetch (startAllGather / startAllGatherV) is the exception: the
// collective still waits for the compute work before it, but the compute
// stream waits for it (an event of its own) only at wait(handle), so the
// engine's and the trainer's compute run meanwhile.
//
// libmfsdp_rt opens this library with dlopen and calls
// mfsdp_rt_cuda_backend_create, which hands the backend back as a C table
// (BackendTable.h), the only thing that crosses. Ranks come from MPI, the device
// being the rank's index on its node, or from the torchrun environment
// through mfsdp_create's control plane (ControlPlane.h), the device being
// LOCAL_RANK. Compiled and linked for sm_80 and sm_90;
// never run on machines without a GPU.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/Arena.h"
#include "mfsdp/runtime/Backend.h"
#include "mfsdp/runtime/BackendTable.h"
#include "mfsdp/runtime/ControlPlane.h"
#include "mfsdp/runtime/CudaKernels.h"
#include "mfsdp/runtime/NcclComm.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <memory>

namespace mfsdp::rt {

namespace {

class CudaBackend final : public Backend {
public:
  ~CudaBackend() override {
    for (auto &started : pending_)
      cudaEventDestroy(started.second);
    // After a timeout the aborted collectives have returned; the streams
    // are synchronised only when nothing can be stuck in them.
    if (compute_ && !broken_)
      cudaStreamSynchronize(compute_);
    if (comm_ && !broken_)
      cudaStreamSynchronize(comm_);
    if (block_)
      cudaFree(block_);
    if (sums_)
      cudaFree(sums_);
    cuda::releaseMultiTensorTable(multi_);
    if (blas_)
      cublasDestroy(blas_);
    if (computeDone_)
      cudaEventDestroy(computeDone_);
    if (commDone_)
      cudaEventDestroy(commDone_);
    if (trainerDone_)
      cudaEventDestroy(trainerDone_);
    if (compute_)
      cudaStreamDestroy(compute_);
    if (comm_)
      cudaStreamDestroy(comm_);
  }

  /// Communicators, streams, events and the cuBLAS handle; false with
  /// `error` when one cannot be created.
  bool init(const BackendOptions &options, std::string &error) {
    if (options.collectiveTimeoutMs > 0)
      collectiveTimeoutMs_ = options.collectiveTimeoutMs;
    multi_.timeoutMs = collectiveTimeoutMs_;
    trainer_ = static_cast<cudaStream_t>(options.trainerStream);
    // Under torchrun the communicators are bootstrapped through
    // mfsdp_create's control plane (device LOCAL_RANK); else from MPI.
    ControlPlane *torchrun =
        options.control && options.control->rankEnv() ? options.control : nullptr;
    auto create = [&](const char *dim) {
      return torchrun ? NcclComm::createFromControl(*torchrun, options.mesh, dim,
                                                    collectiveTimeoutMs_, error)
                      : NcclComm::createFromMpi(options.mesh, dim, collectiveTimeoutMs_,
                                                error);
    };
    shard_.reset(create("dp_shard"));
    if (!shard_)
      return false;
    replicate_.reset(create("dp_replicate"));
    if (!replicate_)
      return false;
    if (checkCuda(cudaGetDevice(&device_), "cudaGetDevice") ||
        checkCuda(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking),
             "cudaStreamCreate (compute)") ||
        checkCuda(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking),
             "cudaStreamCreate (communication)") ||
        checkCuda(cudaEventCreateWithFlags(&computeDone_, cudaEventDisableTiming),
             "cudaEventCreate") ||
        checkCuda(cudaEventCreateWithFlags(&commDone_, cudaEventDisableTiming),
             "cudaEventCreate") ||
        checkCuda(cudaEventCreateWithFlags(&trainerDone_, cudaEventDisableTiming),
             "cudaEventCreate") ||
        blasCheck(cublasCreate(&blas_), "cublasCreate") ||
        blasCheck(cublasSetStream(blas_, compute_), "cublasSetStream")) {
      error = error_;
      return false;
    }
    return true;
  }

  const char *name() const override { return "cuda"; }
  DLDevice device() const override { return {kDLCUDA, device_}; }
  int rank(Group g) const override { return comm(g).rank(); }
  int size(Group g) const override { return comm(g).size(); }

  int reserve(int64_t bytes) override {
    const int64_t capacity = Arena::roundUp(bytes);
    // MFSDP_CUDA_MANAGED_ARENA=1 (checks only): the arena in managed
    // memory, so that a trainer written for host views (the parity driver)
    // can read and write the views the hooks hand it.
    const char *managed = std::getenv("MFSDP_CUDA_MANAGED_ARENA");
    const bool inManaged = managed && std::strcmp(managed, "1") == 0;
    const size_t size = static_cast<size_t>(capacity);
    if (capacity > 0)
      if (int rc = checkCuda(inManaged ? cudaMallocManaged(&block_, size)
                                       : cudaMalloc(&block_, size),
                             ((inManaged ? "cudaMallocManaged of the " : "cudaMalloc of the ") +
                              std::to_string(capacity) + "-byte arena")
                                 .c_str()))
        return rc;
    arena_.reset(block_, capacity);
    return 0;
  }

  int allocate(int64_t count, float *&out) override {
    out = nullptr;
    if (count <= 0)
      return 0;
    const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
    out = static_cast<float *>(arena_.allocate(bytes));
    if (!out)
      return fail("the device arena (" + std::to_string(arena_.capacity()) +
                  " bytes, " + std::to_string(arena_.used()) +
                  " in use) has no free block of " + std::to_string(bytes) +
                  " bytes");
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
                  std::to_string(offset + bytes) + ") of the device arena (" +
                  std::to_string(arena_.capacity()) +
                  " bytes) are not free or not aligned");
    return 0;
  }

  void release(float *buf) override {
    if (buf)
      arena_.release(buf);
  }

  int copyFromHost(float *dst, const float *src, int64_t count) override {
    if (count <= 0)
      return 0;
    // The host memory is the caller's again when this returns.
    if (int rc = checkCuda(cudaMemcpyAsync(dst, src, bytes(count), cudaMemcpyHostToDevice,
                                      compute_),
                      "cudaMemcpyAsync (host to device)"))
      return rc;
    return synchronize();
  }
  int copyToHost(float *dst, const float *src, int64_t count) override {
    if (count <= 0)
      return 0;
    if (int rc = checkCuda(cudaMemcpyAsync(dst, src, bytes(count), cudaMemcpyDeviceToHost,
                                      compute_),
                      "cudaMemcpyAsync (device to host)"))
      return rc;
    return synchronize();
  }
  int copy(float *dst, const float *src, int64_t count) override {
    if (count <= 0 || dst == src)
      return 0;
    return checkCuda(cudaMemcpyAsync(dst, src, bytes(count), cudaMemcpyDeviceToDevice,
                                compute_),
                "cudaMemcpyAsync (device to device)");
  }
  void *kernelStream() override { return compute_; }
  int copy2D(float *dst, int64_t dstPitch, const float *src, int64_t srcPitch,
             int64_t width, int64_t height) override {
    if (width <= 0 || height <= 0)
      return 0;
    return checkCuda(cudaMemcpy2DAsync(dst, bytes(dstPitch), src, bytes(srcPitch),
                                       bytes(width), static_cast<size_t>(height),
                                       cudaMemcpyDeviceToDevice, compute_),
                     "cudaMemcpy2DAsync (device to device)");
  }
  int zero(float *buf, int64_t count) override {
    if (count <= 0)
      return 0;
    return checkCuda(cudaMemsetAsync(buf, 0, bytes(count), compute_), "cudaMemsetAsync");
  }

  int allGather(Group g, const float *send, float *recv, int64_t count) override {
    return collective([&] { return comm(g).allGather(send, recv, count, comm_); });
  }
  int reduceScatter(Group g, const float *send, float *recv, int64_t count) override {
    return collective([&] { return comm(g).reduceScatter(send, recv, count, comm_); });
  }
  int allReduce(Group g, float *buf, int64_t count) override {
    if (count <= 0)
      return 0; // NCCL needs no call for an empty buffer on every rank
    return collective([&] { return comm(g).allReduce(buf, count, comm_); });
  }
  int allGatherV(Group g, const float *send, float *recv,
                 const std::vector<int64_t> &counts) override {
    return collective([&] { return comm(g).allGatherV(send, recv, counts, comm_); });
  }
  int startAllGather(Group g, const float *send, float *recv, int64_t count,
                     CommHandle &handle) override {
    return started(handle,
                   [&] { return comm(g).allGather(send, recv, count, comm_); });
  }
  int startAllGatherV(Group g, const float *send, float *recv,
                      const std::vector<int64_t> &counts,
                      CommHandle &handle) override {
    return started(handle,
                   [&] { return comm(g).allGatherV(send, recv, counts, comm_); });
  }
  int startReduceScatter(Group g, const float *send, float *recv, int64_t count,
                         CommHandle &handle) override {
    return started(handle,
                   [&] { return comm(g).reduceScatter(send, recv, count, comm_); });
  }
  int startReduceScatterV(Group g, const float *send, float *recv,
                          const std::vector<int64_t> &counts,
                          CommHandle &handle) override {
    return started(
        handle, [&] { return comm(g).reduceScatterV(send, recv, counts, comm_); });
  }
  int startAllReduce(Group g, float *buf, int64_t count, CommHandle &handle) override {
    return started(handle, [&] { return comm(g).allReduce(buf, count, comm_); });
  }
  /// The compute work issued from now on waits for the started collective
  /// (an event recorded after it on the communication stream).
  int wait(CommHandle handle) override {
    auto it = pending_.find(handle);
    if (it == pending_.end())
      return fail("wait: no started collective " + std::to_string(handle));
    const int rc = checkCuda(cudaStreamWaitEvent(compute_, it->second, 0),
                             "cudaStreamWaitEvent (prefetch)");
    cudaEventDestroy(it->second); // released once the stream has passed it
    pending_.erase(it);
    return rc;
  }
  int reduceScatterV(Group g, const float *send, float *recv,
                     const std::vector<int64_t> &counts) override {
    return collective(
        [&] { return comm(g).reduceScatterV(send, recv, counts, comm_); });
  }
  int broadcast(Group g, float *buf, int64_t count, int root) override {
    if (count <= 0)
      return 0; // the same count on every rank: no call anywhere
    return collective([&] { return comm(g).broadcast(buf, count, root, comm_); });
  }
  int broadcastMany(Group g, const std::vector<BroadcastPart> &parts) override {
    bool any = false;
    for (const BroadcastPart &p : parts)
      any |= p.count > 0;
    if (!any)
      return 0; // the same counts on every rank: no call anywhere
    return collective([&] { return comm(g).broadcastMany(parts, comm_); });
  }

  int allReduceDoubles(Group g, double *values, int64_t count) override {
    if (count <= 0)
      return 0; // the same count on every rank: no call anywhere
    const size_t size = sizeof(double) * static_cast<size_t>(count);
    if (int rc = sums(count))
      return rc;
    if (int rc = checkCuda(cudaMemcpyAsync(sums_, values, size, cudaMemcpyHostToDevice,
                                           compute_),
                           "cudaMemcpyAsync (host to device)"))
      return rc;
    if (int rc = collective([&] { return comm(g).allReduce(sums_, count, comm_); }))
      return rc;
    if (int rc = checkCuda(cudaMemcpyAsync(values, sums_, size, cudaMemcpyDeviceToHost,
                                           compute_),
                           "cudaMemcpyAsync (device to host)"))
      return rc;
    return synchronize();
  }

  int allGatherBF16(Group g, const uint16_t *send, uint16_t *recv,
                    const std::vector<int64_t> &counts, CommHandle *handle) override {
    if (!handle)
      return collective([&] { return comm(g).allGatherBF16(send, recv, counts, comm_); });
    return started(*handle,
                   [&] { return comm(g).allGatherBF16(send, recv, counts, comm_); });
  }
  int reduceScatterBF16(Group g, const uint16_t *send, uint16_t *recv,
                        const std::vector<int64_t> &counts, CommHandle *handle) override {
    if (!handle)
      return collective(
          [&] { return comm(g).reduceScatterBF16(send, recv, counts, comm_); });
    return started(*handle,
                   [&] { return comm(g).reduceScatterBF16(send, recv, counts, comm_); });
  }
  int allReduceBF16(Group g, uint16_t *buf, int64_t count, CommHandle *handle) override {
    if (!handle)
      return collective([&] { return comm(g).allReduceBF16(buf, count, comm_); });
    return started(*handle, [&] { return comm(g).allReduceBF16(buf, count, comm_); });
  }
  int castToBF16(const float *in, uint16_t *out, int64_t count) override {
    return kernel(cuda::castF32ToBF16(in, out, count, compute_));
  }
  int castFromBF16(const uint16_t *in, float *out, int64_t count) override {
    return kernel(cuda::castBF16ToF32(in, out, count, compute_));
  }
  int copy2DBF16(uint16_t *dst, int64_t dstPitch, const uint16_t *src, int64_t srcPitch,
                 int64_t width, int64_t height) override {
    if (width <= 0 || height <= 0)
      return 0;
    const size_t e = sizeof(uint16_t);
    return checkCuda(cudaMemcpy2DAsync(dst, e * static_cast<size_t>(dstPitch), src,
                                       e * static_cast<size_t>(srcPitch),
                                       e * static_cast<size_t>(width),
                                       static_cast<size_t>(height),
                                       cudaMemcpyDeviceToDevice, compute_),
                     "cudaMemcpy2DAsync (bf16, device to device)");
  }
  int castToBF16Strided(uint16_t *dst, int64_t dstPitch, const float *src, int64_t srcPitch,
                        int64_t width, int64_t height) override {
    return kernel(
        cuda::castF32ToBF16Strided(dst, dstPitch, src, srcPitch, width, height, compute_));
  }
  int roundToBF16(float *buf, int64_t count) override {
    return kernel(cuda::roundToBF16(buf, count, compute_));
  }
  int scale(float *buf, int64_t count, float factor) override {
    return kernel(cuda::scale(buf, count, factor, compute_));
  }
  int packBlocks(const float *whole, float *packed, const BlockGrid &grid,
                 int64_t firstBlock, int64_t numBlocks) override {
    return kernel(cuda::packBlocks(whole, packed, grid, firstBlock, numBlocks, compute_));
  }
  int unpackBlocks(const float *packed, float *whole, const BlockGrid &grid,
                   int64_t firstBlock, int64_t numBlocks) override {
    return kernel(
        cuda::unpackBlocks(packed, whole, grid, firstBlock, numBlocks, compute_));
  }
  int adamwStep(float *param, const float *grad, float *m, float *v,
                int64_t count, const AdamWHyper &h, int64_t step) override {
    if (count <= 0)
      return 0;
    return kernel(cuda::adamwStep(param, grad, m, v, count, h, step, compute_));
  }
  int sgdStep(float *param, const float *grad, float *buf, int64_t count,
              const SGDHyper &h, int64_t step) override {
    if (count <= 0)
      return 0;
    return kernel(cuda::sgdStep(param, grad, buf, count, h, step, compute_));
  }
  int adamwMulti(const AdamWTensor *tensors, int64_t n) override {
    return kernel(cuda::adamwMulti(tensors, n, multi_, compute_));
  }
  int sgdMulti(const SGDTensor *tensors, int64_t n) override {
    return kernel(cuda::sgdMulti(tensors, n, multi_, compute_));
  }
  int sumSquares(const std::vector<FloatSpan> &spans, double &out) override {
    if (int rc = sums(1))
      return rc;
    if (int rc = checkCuda(cudaMemsetAsync(sums_, 0, sizeof(double), compute_),
                           "cudaMemsetAsync"))
      return rc;
    for (const FloatSpan &s : spans)
      if (int rc = kernel(cuda::sumSquares(s.buf, s.count, sums_, compute_)))
        return rc;
    if (int rc = checkCuda(cudaMemcpyAsync(&out, sums_, sizeof(double),
                                           cudaMemcpyDeviceToHost, compute_),
                           "cudaMemcpyAsync (device to host)"))
      return rc;
    return synchronize();
  }
  int64_t muonScratch(int64_t rows, int64_t cols) const override {
    const int64_t ws = cuda::newtonSchulzWorkspace(rows, cols);
    return updateFloats(rows, cols) + (ws + 3) / 4;
  }
  int muonStep(float *param, const float *grad, float *buf, int64_t rows,
               int64_t cols, const MuonHyper &h, float *scratch) override {
    // The update, then the Newton-Schulz workspace on an aligned boundary
    // (its matrices, fp32 or bf16, are GEMM operands).
    float *update = scratch, *ws = scratch + updateFloats(rows, cols);
    const int64_t n = rows * cols;
    if (int rc = kernel(cuda::muonMomentum(grad, buf, update, n, h.momentum,
                                           h.nesterov, compute_)))
      return rc;
    if (int rc = kernel(cuda::newtonSchulz(blas_, update, update, rows, cols,
                                           h.ns, ws, compute_)))
      return rc;
    return kernel(cuda::muonApply(param, update, rows, cols, h, compute_));
  }

  int afterTrainer() override {
    // Every runtime call starts here: the calling thread may have another
    // device current (a trainer thread, or a library that switched it).
    if (int rc = checkCuda(cudaSetDevice(device_), "cudaSetDevice"))
      return rc;
    // The trainer's stream may be the legacy default stream (null); ours
    // are non-blocking, so only an event orders them after it.
    if (int rc = checkCuda(cudaEventRecord(trainerDone_, trainer_),
                           "cudaEventRecord (trainer stream)"))
      return rc;
    if (int rc = checkCuda(cudaStreamWaitEvent(compute_, trainerDone_, 0),
                           "cudaStreamWaitEvent (compute)"))
      return rc;
    return checkCuda(cudaStreamWaitEvent(comm_, trainerDone_, 0),
                     "cudaStreamWaitEvent (communication)");
  }

  /// The watchdog: the compute stream (which waits for every collective
  /// the engine waited for) is polled, not synchronised, so that a
  /// collective whose peer stopped or died cannot hold the host past the
  /// collective timeout: on an NCCL asynchronous error, or at the deadline,
  /// both communicators are aborted (ncclCommAbort), the backend is broken
  /// and the call fails naming what happened.
  int synchronize() override {
    if (broken_)
      return fail("a collective timed out or failed earlier; nothing more can run on "
                  "this backend (destroy the runtime and end the job)");
    using Clock = std::chrono::steady_clock;
    const Clock::time_point deadline =
        Clock::now() + std::chrono::milliseconds(collectiveTimeoutMs_);
    std::chrono::microseconds nap(0);
    for (int tries = 0;; ++tries) {
      const cudaError_t q = cudaStreamQuery(compute_);
      if (q == cudaSuccess)
        return 0;
      if (q != cudaErrorNotReady)
        return checkCuda(q, "cudaStreamQuery");
      for (NcclComm *c : {shard_.get(), replicate_.get()})
        if (c && c->asyncError()) {
          const std::string why = NcclComm::lastError();
          abortComms();
          return fail(why);
        }
      if (tries > 2000) {
        if (Clock::now() >= deadline)
          break;
        nap = std::min(std::chrono::microseconds(1000), nap + std::chrono::microseconds(20));
        std::this_thread::sleep_for(nap);
      }
    }
    abortComms();
    return fail("the collectives on the device did not complete within " +
                std::to_string(collectiveTimeoutMs_) +
                " ms (the collective timeout; a rank stopped, died or calls something "
                "else): the NCCL communicators were aborted");
  }
  const char *lastError() const override { return error_.c_str(); }

private:
  static size_t bytes(int64_t count) {
    return static_cast<size_t>(count) * sizeof(float);
  }
  static int64_t updateFloats(int64_t rows, int64_t cols) {
    const int64_t perBlock = Arena::kAlignment / static_cast<int64_t>(sizeof(float));
    return (rows * cols + perBlock - 1) / perBlock * perBlock;
  }
  NcclComm &comm(Group g) const {
    return g == Group::Shard ? *shard_ : *replicate_;
  }
  /// At least `count` doubles of device memory, outside the arena, for
  /// sumSquares and allReduceDoubles.
  int sums(int64_t count) {
    if (count <= sumsCount_)
      return 0;
    if (sums_)
      cudaFree(sums_); // synchronises: no work still uses it
    sums_ = nullptr;
    sumsCount_ = 0;
    if (int rc = checkCuda(cudaMalloc(&sums_, sizeof(double) * static_cast<size_t>(count)),
                           "cudaMalloc (sums)"))
      return rc;
    sumsCount_ = count;
    return 0;
  }
  int fail(std::string message) {
    error_ = std::move(message);
    return 1;
  }
  int checkCuda(cudaError_t e, const char *what) {
    if (e == cudaSuccess)
      return 0;
    error_ = std::string(what) + " failed: " + cudaGetErrorString(e);
    return static_cast<int>(e);
  }
  int blasCheck(cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS)
      return 0;
    error_ = std::string(what) + " failed: cuBLAS status " + std::to_string(s);
    return static_cast<int>(s);
  }
  int kernel(int rc) {
    if (rc)
      error_ = cuda::lastError();
    return rc;
  }
  /// A collective on the communication stream, between the compute work
  /// issued before it and after it.
  template <typename Call> int collective(Call call) {
    if (int rc = checkCuda(cudaEventRecord(computeDone_, compute_), "cudaEventRecord"))
      return rc;
    if (int rc = checkCuda(cudaStreamWaitEvent(comm_, computeDone_, 0),
                           "cudaStreamWaitEvent"))
      return rc;
    if (int rc = call()) {
      // A failed or timed-out NCCL call leaves the ranks out of step: both
      // communicators are aborted, so no later call waits on a peer that
      // will never come.
      error_ = NcclComm::lastError();
      abortComms();
      return rc;
    }
    if (int rc = checkCuda(cudaEventRecord(commDone_, comm_), "cudaEventRecord"))
      return rc;
    return checkCuda(cudaStreamWaitEvent(compute_, commDone_, 0), "cudaStreamWaitEvent");
  }

  /// A collective on the communication stream after the compute work
  /// issued so far, which the compute stream does not wait for until
  /// wait(handle): its own event, recorded after it.
  template <typename Call> int started(CommHandle &handle, Call call) {
    if (int rc = checkCuda(cudaEventRecord(computeDone_, compute_), "cudaEventRecord"))
      return rc;
    if (int rc = checkCuda(cudaStreamWaitEvent(comm_, computeDone_, 0),
                           "cudaStreamWaitEvent"))
      return rc;
    if (int rc = call()) {
      // A failed or timed-out NCCL call leaves the ranks out of step: both
      // communicators are aborted, so no later call waits on a peer that
      // will never come.
      error_ = NcclComm::lastError();
      abortComms();
      return rc;
    }
    cudaEvent_t done = nullptr;
    if (int rc = checkCuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
                           "cudaEventCreate"))
      return rc;
    if (int rc = checkCuda(cudaEventRecord(done, comm_), "cudaEventRecord")) {
      cudaEventDestroy(done);
      return rc;
    }
    handle = nextHandle_++;
    pending_.emplace(handle, done);
    return 0;
  }

  void abortComms() {
    broken_ = true;
    for (NcclComm *c : {shard_.get(), replicate_.get()})
      if (c)
        c->abort();
  }

  std::unique_ptr<NcclComm> shard_, replicate_;
  int64_t collectiveTimeoutMs_ = 10LL * 60 * 1000;
  bool broken_ = false; // a collective timed out: the communicators are aborted
  std::map<CommHandle, cudaEvent_t> pending_; // started, not yet waited for
  CommHandle nextHandle_ = 1;
  int device_ = 0;
  cudaStream_t compute_ = nullptr, comm_ = nullptr;
  cudaStream_t trainer_ = nullptr; // the trainer's (null: legacy default)
  cudaEvent_t computeDone_ = nullptr, commDone_ = nullptr, trainerDone_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void *block_ = nullptr;
  double *sums_ = nullptr; // sums(): device doubles outside the arena
  int64_t sumsCount_ = 0;
  cuda::MultiTensorTable multi_; // the fused optimizer kernels' tables
  Arena arena_;
  std::string error_;
};

/// Whether every rank of the world says `ok`; false with `why` also when
/// the ranks cannot agree.
bool everyRank(ControlPlane &control, bool ok, std::string &why) {
  std::vector<int64_t> lo, hi;
  std::string error;
  if (!control.minMax({ok ? 1 : 0}, lo, hi, error)) {
    why = error + " while the ranks agreed on their devices";
    return false;
  }
  return lo[0] == 1;
}

/// This rank's device (its index on the node) exists; `why` when not.
bool haveDevice(const ControlPlane &control, std::string &why) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    why = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(e);
    return false;
  }
  const int rank = control.rank(), localRank = control.localRank();
  if (localRank >= count) {
    why = "rank " + std::to_string(rank) + " is rank " + std::to_string(localRank) +
          " on its node" + (control.rankEnv() ? " (LOCAL_RANK)" : "") + ", which has " +
          std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") +
          " (one device per rank)";
    return false;
  }
  return true;
}

} // namespace

} // namespace mfsdp::rt

using namespace mfsdp::rt;

namespace {

/// The factory's body: a backend, or null with `error`.
Backend *createCudaBackend(const mfsdp_rt_backend_options &c, std::string &error) {
  std::unique_ptr<ControlPlane> control(controlFromTable(*c.control));
  BackendOptions options;
  for (int32_t i = 0; i < c.num_mesh_dims; ++i)
    options.mesh.push_back({c.mesh_dims[i].name, c.mesh_dims[i].size});
  options.trainerStream = c.trainer_stream;
  options.control = control.get();
  options.timeoutMs = c.timeout_ms;
  options.collectiveTimeoutMs = c.collective_timeout_ms;
  std::string why;
  if (!everyRank(*control, haveDevice(*control, why), why)) {
    error = why.empty() ? "another rank has no CUDA device (see its error)" : why;
    return nullptr;
  }
  auto backend = std::make_unique<CudaBackend>();
  bool ok = backend->init(options, why);
  std::string agreeing;
  if (!everyRank(*control, ok, agreeing)) {
    error = !ok ? "cannot set up the device: " + why
                : !agreeing.empty() ? agreeing
                                    : "another rank could not set up its device (see "
                                      "its error)";
    return nullptr;
  }
  return backend.release();
}

/// What is wrong with a struct's layout ("" when nothing).
std::string layoutProblem(const char *type, uint32_t size, uint32_t version,
                          size_t want) {
  if (size == want && version == MFSDP_RT_BACKEND_TABLE_VERSION)
    return "";
  return std::string("libmfsdp_rt passed an ") + type + " of " + std::to_string(size) +
         " bytes, version " + std::to_string(version) + "; this libmfsdp_rt_cuda reads " +
         std::to_string(want) + " bytes, version " +
         std::to_string(MFSDP_RT_BACKEND_TABLE_VERSION) +
         " (the two libraries are of different mfsdp versions)";
}

} // namespace

/// The factory libmfsdp_rt looks up (MFSDP_RT_CUDA_BACKEND_SYMBOL).
/// Collective over the world of options->control, like mfsdp_create: every
/// rank fills its table or every rank returns nonzero with `error`. No
/// exception leaves it.
extern "C" __attribute__((visibility("default"))) int
mfsdp_rt_cuda_backend_create(const mfsdp_rt_backend_options *options,
                             mfsdp_rt_backend_table *table, char *error,
                             size_t errorSize) {
  try {
    std::string why;
    if (!options || !table || !options->control)
      why = "no options, control plane or table";
    else
      why = layoutProblem("mfsdp_rt_backend_options", options->struct_size,
                          options->version, sizeof(*options));
    if (why.empty())
      why = layoutProblem("mfsdp_rt_backend_table", table->struct_size, table->version,
                          sizeof(*table));
    if (why.empty())
      why = layoutProblem("mfsdp_rt_control_table", options->control->struct_size,
                          options->control->version, sizeof(*options->control));
    // A layout problem is the same on every rank (one pair of libraries),
    // so the ranks stop alike before any collective.
    if (!why.empty()) {
      copyError(why, error, errorSize);
      return 1;
    }
    Backend *backend = createCudaBackend(*options, why);
    if (!backend) {
      copyError(why, error, errorSize);
      return 1;
    }
    *table = backendTable(backend);
    return 0;
  } catch (const std::exception &e) {
    copyError(std::string("an exception while creating the CUDA backend: ") + e.what(),
              error, errorSize);
  } catch (...) {
    copyError("an unknown exception while creating the CUDA backend", error, errorSize);
  }
  return 1;
}

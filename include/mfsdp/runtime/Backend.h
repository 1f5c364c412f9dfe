//===- Backend.h - What the step engine needs of a device ---------*- C++ -*-===//
//
// The engine behind the C ABI (runtime/common/Step.h) keeps the plan's
// bookkeeping (hook order, which buffers are live, sizes and offsets) and
// asks a backend for everything that touches memory or other ranks: the
// operations below and nothing more. Two backends implement it:
//
//   host  (runtime/host/HostBackend.cpp, in libmfsdp_rt): buffers in host
//         memory, MPI or (under torchrun) gloo collectives (HostComm), the
//         host kernels (Kernels.h);
//   cuda  (runtime/cuda/CudaBackend.cpp, in libmfsdp_rt_cuda): cudaMalloc'd
//         buffers, NCCL collectives (NcclComm), the CUDA kernels
//         (CudaKernels.h), a compute and a communication stream ordered by
//         events. libmfsdp_rt does not link CUDA; it opens libmfsdp_rt_cuda
//         with dlopen (loadCudaBackend) when a trainer asks for it, and
//         the backend crosses as a C table (BackendTable.h).
//
// Buffers are fp32 arrays (bf16 compute copies: 16-bit arrays in the same
// float-counted allocations) in the backend's memory, sub-allocated from one
// arena per rank that the engine sizes once (reserve). Work is ordered as
// it is issued; a call may return before its work is done on the device,
// except copyToHost and copyFromHost, which return with the host memory
// read or written, and synchronize, after which everything issued is done.
// Every call that can fail returns 0 or a nonzero code, with lastError()
// saying what failed.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_RUNTIME_BACKEND_H
#define MFSDP_RUNTIME_BACKEND_H

#include "mfsdp/runtime/Bootstrap.h"
#include "mfsdp/runtime/Kernels.h"

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mfsdp::rt {

/// The data-parallel groups the engine communicates in.
enum class Group { Shard, Replicate };

class ControlPlane;

/// A started asynchronous collective (Backend::startAllGather); > 0.
using CommHandle = int64_t;

/// The first `count` floats of a buffer (Backend::sumSquares).
struct FloatSpan {
  const float *buf = nullptr;
  int64_t count = 0;
};

struct BackendOptions {
  /// The mesh, row-major, with dims named "dp_shard" and "dp_replicate";
  /// its product is the world size.
  std::vector<MeshDimSpec> mesh;
  /// CUDA: the trainer's stream (mfsdp_config::cuda_stream).
  void *trainerStream = nullptr;
  /// Where the ranks come from and how they agree (ControlPlane.h), alive
  /// while the backend is created; null is MPI. Under torchrun
  /// (control->rankEnv() set) the CUDA backend bootstraps NCCL through it
  /// and uses device LOCAL_RANK; the host backend connects its gloo
  /// contexts through it.
  ControlPlane *control = nullptr;
  /// Under torchrun: mfsdp_config::bootstrap_timeout_ms, which bounds
  /// connecting the gloo contexts.
  int timeoutMs = 0;
  /// mfsdp_config::collective_timeout_ms: how long any collective wait may
  /// take (0: kCollectiveTimeoutMsDefault, 10 minutes).
  int64_t collectiveTimeoutMs = 0;
};

class Backend {
public:
  virtual ~Backend();

  /// "host" or "cuda", for messages.
  virtual const char *name() const = 0;
  /// Where the buffers live, as DLPack names it (views carry it).
  virtual DLDevice device() const = 0;
  /// This rank's position in, and the size of, a group.
  virtual int rank(Group group) const = 0;
  virtual int size(Group group) const = 0;

  // Memory. -----------------------------------------------------------------

  /// Reserves the arena every allocation comes from; called once.
  virtual int reserve(int64_t bytes) = 0;
  /// `count` floats from the arena (uninitialised), or null when `count`
  /// is 0. Fails when the arena has no free block that large.
  virtual int allocate(int64_t count, float *&out) = 0;
  /// `count` floats at byte `offset` of the arena (a static memory plan's
  /// place). Fails when the offset is unaligned or part of the range is in
  /// use or outside the arena.
  virtual int allocateAt(int64_t offset, int64_t count, float *&out) = 0;
  /// Returns a buffer to the arena; null is ignored. Work already issued
  /// on it completes first (the backend orders it).
  virtual void release(float *buf) = 0;
  virtual int copyFromHost(float *dst, const float *hostSrc, int64_t count) = 0;
  virtual int copyToHost(float *hostDst, const float *src, int64_t count) = 0;
  virtual int copy(float *dst, const float *src, int64_t count) = 0;
  /// `height` rows of `width` floats: row i from src + i * srcPitch to
  /// dst + i * dstPitch (pitches in floats; a bucket's pack and unpack).
  virtual int copy2D(float *dst, int64_t dstPitch, const float *src, int64_t srcPitch,
                     int64_t width, int64_t height) = 0;
  virtual int zero(float *buf, int64_t count) = 0;

  // Collectives: the operations of HostComm / NcclComm on backend buffers,
  // in the group of this rank along a mesh dim. -------------------------------

  /// recv (size * count floats) = every rank's send, concatenated.
  virtual int allGather(Group group, const float *send, float *recv,
                        int64_t count) = 0;
  /// recv (count floats) = this rank's slice of the sum of every rank's
  /// send (size * count floats).
  virtual int reduceScatter(Group group, const float *send, float *recv,
                            int64_t count) = 0;
  /// buf (count floats) = the sum over the group, in place.
  virtual int allReduce(Group group, float *buf, int64_t count) = 0;
  /// recv = counts[r] floats from each rank r, concatenated (send may be
  /// null where this rank's count is 0).
  virtual int allGatherV(Group group, const float *send, float *recv,
                         const std::vector<int64_t> &counts) = 0;
  /// recv (counts[rank] floats) = this rank's segment of the sum of every
  /// rank's send (sum of counts floats); recv may be null where it is 0.
  virtual int reduceScatterV(Group group, const float *send, float *recv,
                             const std::vector<int64_t> &counts) = 0;
  /// buf (count floats, the same count on every rank) = root's buf, in
  /// place.
  virtual int broadcast(Group group, float *buf, int64_t count, int root) = 0;
  /// Several broadcasts on one group, each as broadcast(), issued together
  /// (host: started at once, then waited for together; CUDA: one NCCL
  /// group), so their latencies overlap. Every rank of the group passes
  /// the same counts and roots in the same order.
  virtual int broadcastMany(Group group, const std::vector<BroadcastPart> &parts) {
    for (const BroadcastPart &p : parts)
      if (int rc = broadcast(group, p.buf, p.count, p.root))
        return rc;
    return 0;
  }

  /// values (count doubles in host memory, the same count on every rank) =
  /// their sum over the group, in double, in place; done when it returns
  /// (gradient clipping's sum of squares).
  virtual int allReduceDoubles(Group group, double *values, int64_t count) = 0;

  /// Asynchronous all-gather and all-gather-v (gather prefetch): the same
  /// result as allGather / allGatherV, started now and completed by
  /// wait(handle), which every started collective must get exactly once
  /// before its buffers are read, released or handed to the trainer. Every
  /// rank of the group starts them, and any other collective, in the same
  /// order. Host: MPI_Iallgather(v) and MPI_Wait, or (torchrun) gloo's on
  /// the group's worker thread; CUDA: issued on the communication stream
  /// after the compute work issued so far, and wait makes the compute work
  /// issued after it wait for the collective.
  virtual int startAllGather(Group group, const float *send, float *recv,
                             int64_t count, CommHandle &handle) = 0;
  virtual int startAllGatherV(Group group, const float *send, float *recv,
                              const std::vector<int64_t> &counts,
                              CommHandle &handle) = 0;
  virtual int wait(CommHandle handle) = 0;
  /// Asynchronous reduce-scatter, reduce-scatter-v and in-place all-reduce
  /// (gradient reduction overlapped with the previous unit's backward): the
  /// same results as reduceScatter / reduceScatterV / allReduce, completed
  /// by wait(handle) like the gathers above; send (and buf) must not be
  /// written, and recv not read, before then.
  virtual int startReduceScatter(Group group, const float *send, float *recv,
                                 int64_t count, CommHandle &handle) = 0;
  virtual int startReduceScatterV(Group group, const float *send, float *recv,
                                  const std::vector<int64_t> &counts,
                                  CommHandle &handle) = 0;
  virtual int startAllReduce(Group group, float *buf, int64_t count,
                             CommHandle &handle) = 0;

  // bf16 compute copies (mfsdp_param_desc::compute_dtype MFSDP_COMPUTE_BF16):
  // 16-bit elements, the raw bits of bf16 values, in arena buffers of
  // ceil(count / 2) floats. -----------------------------------------------------

  /// recv = counts[r] bf16 elements from each rank r, concatenated (send
  /// may be null where this rank's count is 0). In place when send is this
  /// rank's place in recv (the engine casts its shard there first). With
  /// `handle` it is only started, and wait(*handle) completes it, as
  /// startAllGatherV. Host: MPI_UINT16_T or gloo on 16-bit payloads; CUDA:
  /// ncclBfloat16.
  virtual int allGatherBF16(Group group, const uint16_t *send, uint16_t *recv,
                            const std::vector<int64_t> &counts,
                            CommHandle *handle) = 0;
  /// The reduce dtype bf16 (mfsdp_plan::reduce_dtype MFSDP_REDUCE_BF16):
  /// reduceScatterV and the in-place allReduce on bf16 elements, summed in
  /// bf16 (host::addBF16, each partial sum rounded to nearest even), 2
  /// bytes an element on the wire; send and recv do not overlap. With
  /// `handle` only started, completed by wait(*handle). Host: MPI_UINT16_T
  /// with a user-defined MPI_Op, or gloo with that sum; CUDA: ncclBfloat16.
  virtual int reduceScatterBF16(Group group, const uint16_t *send, uint16_t *recv,
                                const std::vector<int64_t> &counts,
                                CommHandle *handle) = 0;
  virtual int allReduceBF16(Group group, uint16_t *buf, int64_t count,
                            CommHandle *handle) = 0;
  /// out = in rounded to bf16 (round to nearest even, as torch's
  /// .to(torch.bfloat16)).
  virtual int castToBF16(const float *in, uint16_t *out, int64_t count) = 0;
  /// out = in widened to fp32 (exact).
  virtual int castFromBF16(const uint16_t *in, float *out, int64_t count) = 0;
  /// copy2D on bf16 elements (pitches and width in elements).
  virtual int copy2DBF16(uint16_t *dst, int64_t dstPitch, const uint16_t *src,
                         int64_t srcPitch, int64_t width, int64_t height) = 0;
  /// copy2D from fp32 to bf16, each element rounded (host::
  /// castF32ToBF16Strided): a bucket's gradients packed for a bf16
  /// reduction straight into its bf16 staging buffer.
  virtual int castToBF16Strided(uint16_t *dst, int64_t dstPitch, const float *src,
                                int64_t srcPitch, int64_t width, int64_t height) = 0;

  // Kernels: the semantics of Kernels.h. ---------------------------------------

  /// Rounds every element to bf16 (round to nearest even), in place.
  virtual int roundToBF16(float *buf, int64_t count) = 0;
  /// buf *= factor.
  virtual int scale(float *buf, int64_t count, float factor) = 0;
  /// Block shards (BlockGrid): `packed` (numBlocks blocks) = the blocks of
  /// the whole tensor `whole` at packed positions [firstBlock, firstBlock +
  /// numBlocks); unpackBlocks puts them back in place.
  virtual int packBlocks(const float *whole, float *packed, const BlockGrid &grid,
                         int64_t firstBlock, int64_t numBlocks) = 0;
  virtual int unpackBlocks(const float *packed, float *whole, const BlockGrid &grid,
                           int64_t firstBlock, int64_t numBlocks) = 0;
  virtual int adamwStep(float *param, const float *grad, float *m, float *v,
                        int64_t count, const AdamWHyper &h, int64_t step) = 0;
  virtual int sgdStep(float *param, const float *grad, float *buf,
                      int64_t count, const SGDHyper &h, int64_t step) = 0;
  /// The fused optimizer kernels (Kernels.h: host::adamwMulti, sgdMulti):
  /// every tensor of the list, each with its own hyperparameters and step,
  /// in one call; the host backend steps them in one loop, the CUDA backend
  /// in one kernel launch over a table of chunks of the tensors (as
  /// torch's multi_tensor_apply). The list is read before the call returns.
  /// This default issues one adamwStep / sgdStep per tensor.
  virtual int adamwMulti(const AdamWTensor *tensors, int64_t n) {
    for (int64_t k = 0; k < n; ++k) {
      const AdamWTensor &t = tensors[k];
      if (t.count > 0)
        if (int rc = adamwStep(t.param, t.grad, t.m, t.v, t.count, t.h, t.step))
          return rc;
    }
    return 0;
  }
  virtual int sgdMulti(const SGDTensor *tensors, int64_t n) {
    for (int64_t k = 0; k < n; ++k) {
      const SGDTensor &t = tensors[k];
      if (t.count > 0)
        if (int rc = sgdStep(t.param, t.grad, t.buf, t.count, t.h, t.step))
          return rc;
    }
    return 0;
  }
  /// out (host memory, set when this returns) = the sum of the squares of
  /// every float of `spans`, accumulated in double (host::sumSquares).
  virtual int sumSquares(const std::vector<FloatSpan> &spans, double &out) = 0;
  /// Floats of scratch muonStep needs for a rows x cols matrix.
  virtual int64_t muonScratch(int64_t rows, int64_t cols) const = 0;
  /// Muon momentum, Newton-Schulz and the update of a whole matrix.
  virtual int muonStep(float *param, const float *grad, float *buf,
                       int64_t rows, int64_t cols, const MuonHyper &h,
                       float *scratch) = 0;

  /// Called at the start of every runtime call that issues work: makes the
  /// backend's device current for the calling thread and orders the work
  /// issued from now on after the work the trainer has issued so far on its
  /// own stream (which may still read or write the buffers it was handed).
  /// The host backend has nothing to do.
  virtual int afterTrainer() { return 0; }
  /// The stream the plan's generated kernels run on (mfsdp_bucket_kernels):
  /// the compute stream on CUDA, NULL on the host.
  virtual void *kernelStream() { return nullptr; }
  /// Waits until everything issued is done.
  virtual int synchronize() = 0;
  virtual const char *lastError() const = 0;
};

/// The host backend: collectives over MPI (which must be initialised), or
/// under torchrun (options.control->rankEnv() set) over gloo
/// (createGlooComms; collective over the control plane). Null with
/// `error` when the communicators cannot be created.
Backend *createHostBackend(const BackendOptions &options, std::string &error);

/// The CUDA backend from libmfsdp_rt_cuda.so, looked for next to
/// libmfsdp_rt.so, then on the library path. Collective over the world of
/// options.control (MPI when null): every rank gets a backend or every
/// rank gets null, with `error` starting
/// "the CUDA backend is not available: " and saying why (no CUDA driver,
/// the library missing, no device for this rank, ...).
Backend *loadCudaBackend(const BackendOptions &options, std::string &error);

/// libmfsdp_rt_cuda exports one C function (BackendTable.h:
/// MFSDP_RT_CUDA_BACKEND_SYMBOL), which fills a C table of functions over
/// its backend; backendFromTable makes it a Backend again.

} // namespace mfsdp::rt

#endif // MFSDP_RUNTIME_BACKEND_H

//===- NcclComm.h - Collectives of the CUDA backend (NCCL) ------*- C++ -*-===//
//
// The CUDA backend's collectives: the operations of HostComm, on fp32
// device buffers, enqueued on a CUDA stream. A communicator spans this
// rank's group along one mesh dim (row-major ranks, as HostComm). It is
// bootstrapped either under mpirun (the NCCL unique id goes through
// MPI_Bcast) or from the torchrun environment (Bootstrap.h, ControlPlane.h:
// the id goes over TCP from rank 0), and the group's communicator is split
// from the world's with ncclCommSplit.
//
// Every communicator is nonblocking (ncclConfig_t.blocking = 0): no NCCL
// call, its creation included, holds the host past the collective timeout
// (the call is polled with ncclCommGetAsyncError and the communicator
// aborted at the deadline).
//
// The owner variants: all-gather-v is one ncclBroadcast per rank with a
// non-empty segment, reduce-scatter-v one ncclReduce to each such rank,
// each set inside ncclGroupStart/End so NCCL runs them as one launch.
//
// Built only with the CUDA toolkit (libmfsdp_rt_cuda); compiled and linked
// in CI, never run on machines without a GPU.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_RUNTIME_NCCLCOMM_H
#define MFSDP_RUNTIME_NCCLCOMM_H

#include "mfsdp/runtime/Bootstrap.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mfsdp::rt {

class ControlPlane;

class NcclComm {
public:
  /// Under mpirun: MPI must be initialised; selects the device LOCAL_RANK
  /// of the node (from MPI's shared-memory split).
  static NcclComm *createFromMpi(const std::vector<MeshDimSpec> &mesh,
                                 const std::string &dim, int64_t timeoutMs,
                                 std::string &error);
  /// From the torchrun environment; selects device env.localRank. Every
  /// wait is bounded by `timeoutMs` (a torchrun ControlPlane of its own).
  static NcclComm *createFromEnv(const RankEnv &env,
                                 const std::vector<MeshDimSpec> &mesh,
                                 const std::string &dim, int timeoutMs,
                                 std::string &error);
  /// Through a control plane (ControlPlane.h; mfsdp_create's under
  /// torchrun): selects device control.localRank(), the ranks agree that
  /// every one has it and rank 0 an NCCL unique id (so all fail together
  /// before NCCL is initialised), then the id goes out by
  /// control.broadcast.
  static NcclComm *createFromControl(ControlPlane &control,
                                     const std::vector<MeshDimSpec> &mesh,
                                     const std::string &dim, int64_t timeoutMs,
                                     std::string &error);
  ~NcclComm();
  NcclComm(const NcclComm &) = delete;
  NcclComm &operator=(const NcclComm &) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  /// As HostComm's, on device pointers, enqueued on `stream` (a
  /// cudaStream_t; null for the default stream). 0 or an ncclResult_t.
  int allGather(const float *send, float *recv, int64_t count, void *stream);
  int reduceScatter(const float *send, float *recv, int64_t count, void *stream);
  int allReduce(float *buf, int64_t count, void *stream);
  int allReduce(double *buf, int64_t count, void *stream);
  int allGatherV(const float *send, float *recv, const std::vector<int64_t> &counts,
                 void *stream);
  int reduceScatterV(const float *send, float *recv,
                     const std::vector<int64_t> &counts, void *stream);
  /// HostComm::allGather16 on bf16 elements (ncclBfloat16): ncclAllGather
  /// when every count is the same (in place when send is this rank's
  /// place in recv), else one broadcast per rank in an NCCL group.
  int allGatherBF16(const uint16_t *send, uint16_t *recv,
                    const std::vector<int64_t> &counts, void *stream);
  /// The reduce dtype bf16 (ncclBfloat16, ncclSum): reduceScatterV and the
  /// in-place allReduce on bf16 elements; ncclReduceScatter when every
  /// count is the same.
  int reduceScatterBF16(const uint16_t *send, uint16_t *recv,
                        const std::vector<int64_t> &counts, void *stream);
  int allReduceBF16(uint16_t *buf, int64_t count, void *stream);
  int broadcast(float *buf, int64_t count, int root, void *stream);
  /// broadcast() of each (buf, count, root) with count > 0, in one NCCL
  /// group.
  int broadcastMany(const std::vector<BroadcastPart> &parts, void *stream);

  /// The watchdog: 0, or nonzero with lastError() set when NCCL reports an
  /// asynchronous error on the communicator (ncclCommGetAsyncError: a peer
  /// that failed, a network error).
  int asyncError();
  /// Aborts the communicator (ncclCommAbort): its kernels in flight return
  /// and nothing more can run on it; the destructor then frees nothing.
  void abort();

  static const char *lastError();

private:
  NcclComm() = default;
  /// The world's communicator from rank 0's unique id (an ncclUniqueId),
  /// then this rank's group along `dim` split from it; the world's is
  /// released. Both nonblocking and settled within `timeoutMs`.
  static NcclComm *fromWorld(int world, const void *uniqueId, int rank,
                             const std::vector<MeshDimSpec> &mesh,
                             const std::string &dim, int64_t timeoutMs,
                             std::string &error);
  /// `call` (an ncclResult_t) settled: when ncclInProgress, polled until
  /// it is not, within the timeout; at the deadline the communicator is
  /// aborted. 0 or the error, with lastError() set.
  int settle(int call, const char *what);
  /// The error of a call on a communicator that was aborted.
  static int aborted();
  int allReduceOf(void *buf, int64_t count, int type, void *stream);
  template <typename Enqueue> int grouped(const char *what, Enqueue enqueue);
  template <typename Call>
  int groupedPerRank(const std::vector<int64_t> &counts, const char *what, Call call);
  void *comm_ = nullptr; // ncclComm_t, nonblocking
  int64_t timeoutMs_ = 10LL * 60 * 1000;
  int rank_ = 0, size_ = 1;
};

} // namespace mfsdp::rt

#endif // MFSDP_RUNTIME_NCCLCOMM_H

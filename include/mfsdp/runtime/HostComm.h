//===- HostComm.h - Collectives of the host backend (MPI) ---------*- C++ -*-===//
//
// The host backend's collectives, over MPI: the same operations the CUDA
// backend runs with NCCL (all-gather, reduce-scatter, all-reduce, and the
// owner variants all-gather-v / reduce-scatter-v), on fp32 buffers in
// host memory. Communicators for the data-parallel dims are split from
// MPI_COMM_WORLD by the mesh (row-major rank order). Every call returns 0 or
// an MPI error code; lastError() says what failed.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_RUNTIME_HOSTCOMM_H
#define MFSDP_RUNTIME_HOSTCOMM_H

#include "mfsdp/runtime/Bootstrap.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mfsdp::rt {

/// A started collective (HostComm::startAllGather / startAllGatherV): the
/// MPI request and the arrays MPI reads until it completes. Destroying one
/// that was not waited for waits for it first.
struct HostRequest;
struct HostRequestDeleter {
  void operator()(HostRequest *r) const;
};
using HostRequestPtr = std::unique_ptr<HostRequest, HostRequestDeleter>;

class HostComm {
public:
  /// Splits MPI_COMM_WORLD into the group of this rank along `dim` of the
  /// mesh (all ranks that differ only in that coordinate). The mesh product
  /// must equal the world size.
  static HostComm *create(const std::vector<MeshDimSpec> &mesh,
                          const std::string &dim, std::string &error);
  ~HostComm();
  HostComm(const HostComm &) = delete;
  HostComm &operator=(const HostComm &) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  /// recv (size() * count floats) = concatenation of every rank's send.
  int allGather(const float *send, float *recv, int64_t count);
  /// recv (count floats) = this rank's slice of the sum of every rank's
  /// send (size() * count floats).
  int reduceScatter(const float *send, float *recv, int64_t count);
  /// buf (count floats) = sum over ranks, in place.
  int allReduce(float *buf, int64_t count);
  /// The same on doubles (gradient clipping's sum of squares).
  int allReduce(double *buf, int64_t count);
  /// recv = concatenation of counts[r] floats from each rank r; this rank
  /// sends counts[rank()] floats from send (which may be null when zero).
  int allGatherV(const float *send, float *recv,
                 const std::vector<int64_t> &counts);
  /// recv (counts[rank()] floats) = this rank's segment of the sum of every
  /// rank's send (sum of counts floats).
  int reduceScatterV(const float *send, float *recv,
                     const std::vector<int64_t> &counts);
  /// allGather / allGatherV started (MPI_Iallgather / MPI_Iallgatherv);
  /// wait() completes them. recv must not be touched before.
  int startAllGather(const float *send, float *recv, int64_t count,
                     HostRequestPtr &out);
  int startAllGatherV(const float *send, float *recv,
                      const std::vector<int64_t> &counts, HostRequestPtr &out);
  /// reduceScatter / reduceScatterV / allReduce started
  /// (MPI_Ireduce_scatter_block / MPI_Ireduce_scatter / MPI_Iallreduce);
  /// wait() completes them.
  int startReduceScatter(const float *send, float *recv, int64_t count,
                         HostRequestPtr &out);
  int startReduceScatterV(const float *send, float *recv,
                          const std::vector<int64_t> &counts, HostRequestPtr &out);
  int startAllReduce(float *buf, int64_t count, HostRequestPtr &out);
  /// Completes a started collective (MPI_Wait).
  static int wait(HostRequest &request);
  /// buf (count floats on every rank) = rank root's buf, in place.
  int broadcast(float *buf, int64_t count, int root);
  /// broadcast() of each (buf, count, root), all started (MPI_Ibcast)
  /// before any is waited for (MPI_Waitall); every started one is waited
  /// for, even after a failure.
  int broadcastMany(const std::vector<BroadcastPart> &parts);
  int barrier();

  static const char *lastError();

private:
  HostComm() = default;
  void *comm_ = nullptr; // MPI_Comm, kept opaque so callers need no mpi.h
  int rank_ = 0, size_ = 1;
};

} // namespace mfsdp::rt

#endif // MFSDP_RUNTIME_HOSTCOMM_H

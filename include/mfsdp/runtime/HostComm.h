//===- HostComm.h - Collectives of the host backend --------------*- C++ -*-===//
//
// The host backend's collectives: the same operations the CUDA backend runs
// with NCCL (all-gather, reduce-scatter, all-reduce, the owner variants
// all-gather-v / reduce-scatter-v, broadcasts), on fp32 buffers in host
// memory (and an all-reduce on doubles, for gradient clipping, and an
// all-gather of 16-bit elements, for bf16 compute copies), in the group of this rank along one dim of the mesh (the ranks
// that differ only in that coordinate, row-major: meshGroup), behind one
// interface the host backend calls. Two implementations, chosen by where
// the ranks come from:
//
//   MPI   (runtime/host/MpiComm.cpp) under mpirun: communicators split
//         from MPI_COMM_WORLD, nonblocking MPI collectives for the starts;
//   gloo  (runtime/host/GlooComm.cpp) under torchrun: one gloo context per
//         group over gloo's TCP transport, its pairs connected with the
//         addresses exchanged over the control plane (no gloo store); each
//         group's operations run in issue order on a worker thread of its
//         own, so a started one proceeds while the caller computes.
//
// Every call returns 0 or a nonzero code; lastError() (per thread) says what
// failed.
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

class ControlPlane;

/// A started collective (HostComm::startAllGather, ...): wait() completes
/// it. Destroying one that was not waited for waits for it first: its
/// buffers may be reused next.
class HostRequest {
public:
  virtual ~HostRequest();
  /// 0, or nonzero with HostComm::lastError() set. Called at most once.
  virtual int wait() = 0;
};
using HostRequestPtr = std::unique_ptr<HostRequest>;

class HostComm {
public:
  /// MPI: splits MPI_COMM_WORLD into the group of this rank along `dim` of
  /// the mesh. The mesh product must equal the world size.
  static HostComm *createMpi(const std::vector<MeshDimSpec> &mesh,
                             const std::string &dim, std::string &error);
  virtual ~HostComm();
  HostComm(const HostComm &) = delete;
  HostComm &operator=(const HostComm &) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  /// recv (size() * count floats) = concatenation of every rank's send.
  virtual int allGather(const float *send, float *recv, int64_t count) = 0;
  /// recv (count floats) = this rank's slice of the sum of every rank's
  /// send (size() * count floats).
  virtual int reduceScatter(const float *send, float *recv, int64_t count) = 0;
  /// buf (count floats) = sum over ranks, in place.
  virtual int allReduce(float *buf, int64_t count) = 0;
  /// The same on doubles (gradient clipping's sum of squares).
  virtual int allReduce(double *buf, int64_t count) = 0;
  /// recv = concatenation of counts[r] floats from each rank r; this rank
  /// sends counts[rank()] floats from send (which may be null when zero).
  virtual int allGatherV(const float *send, float *recv,
                         const std::vector<int64_t> &counts) = 0;
  /// recv (counts[rank()] floats) = this rank's segment of the sum of every
  /// rank's send (sum of counts floats).
  virtual int reduceScatterV(const float *send, float *recv,
                             const std::vector<int64_t> &counts) = 0;
  /// The operations above, started; the request's wait() completes them.
  /// Buffers must not be touched (recv read, send or buf written) before.
  virtual int startAllGather(const float *send, float *recv, int64_t count,
                             HostRequestPtr &out) = 0;
  virtual int startAllGatherV(const float *send, float *recv,
                              const std::vector<int64_t> &counts,
                              HostRequestPtr &out) = 0;
  virtual int startReduceScatter(const float *send, float *recv, int64_t count,
                                 HostRequestPtr &out) = 0;
  virtual int startReduceScatterV(const float *send, float *recv,
                                  const std::vector<int64_t> &counts,
                                  HostRequestPtr &out) = 0;
  virtual int startAllReduce(float *buf, int64_t count, HostRequestPtr &out) = 0;
  /// The all-gather-v above on 16-bit elements (bf16 compute copies, sent
  /// as they are stored: half the bytes of fp32): recv = counts[r] elements
  /// from each rank r, concatenated. In place when send is this rank's
  /// place in recv (as FSDP2 gathers). With `out` it is only started and
  /// (*out)->wait() completes it; without, it is complete when it returns.
  virtual int allGather16(const uint16_t *send, uint16_t *recv,
                          const std::vector<int64_t> &counts,
                          HostRequestPtr *out) = 0;
  /// The reduce-scatter-v and the in-place all-reduce above on bf16
  /// elements (the reduce dtype bf16: 2 bytes an element on the wire),
  /// summed in bf16 (host::addBF16: each partial sum rounded to nearest
  /// even). recv (counts[rank()] elements) = this rank's segment of the sum
  /// of every rank's send; send and recv do not overlap. MPI: MPI_UINT16_T
  /// with a commutative user-defined MPI_Op; gloo: its ring all-reduce with
  /// the same sum as reduce function, and the ring reduce-scatter on 16-bit
  /// segments. With `out` only started, as allGather16.
  virtual int reduceScatterBF16(const uint16_t *send, uint16_t *recv,
                                const std::vector<int64_t> &counts,
                                HostRequestPtr *out) = 0;
  virtual int allReduceBF16(uint16_t *buf, int64_t count, HostRequestPtr *out) = 0;
  /// buf (count floats on every rank) = rank root's buf, in place.
  virtual int broadcast(float *buf, int64_t count, int root) = 0;
  /// broadcast() of each (buf, count, root), issued together and complete
  /// when it returns. A root out of range fails before any is issued.
  virtual int broadcastMany(const std::vector<BroadcastPart> &parts) = 0;
  virtual int barrier() = 0;

  /// Bounds every wait of this group's collectives (the watchdog): a
  /// collective not complete `ms` milliseconds after it was waited for
  /// fails with a message that names it and the ranks that did not arrive,
  /// and the group is broken() from then on (every later call fails at
  /// once; a started collective that never completes is not waited for
  /// again). 0: the default, kCollectiveTimeoutMsDefault.
  virtual void setTimeout(int64_t ms) = 0;
  /// A collective of this group timed out: nothing more can run on it.
  virtual bool broken() const = 0;

  /// What the last failed call of this thread failed on.
  static const char *lastError();
  /// Sets lastError() to `message`; returns `code` (for the
  /// implementations and their requests).
  static int fail(int code, const std::string &message);

protected:
  HostComm(int rank, int size) : rank_(rank), size_(size) {}
  /// 0, or `code` with lastError() set, when `counts` has not one count per
  /// rank.
  int checkCounts(const char *what, const std::vector<int64_t> &counts,
                  int code) const;
  /// 0, or `code` with lastError() set, when a root is not a rank.
  int checkRoot(const char *what, int root, int code) const;

private:
  int rank_, size_;
};

/// How long a collective waits for its peers unless mfsdp_config says
/// otherwise: 10 minutes, PyTorch's default for its NCCL process groups.
/// Under gloo a rank that dies is seen at once (its connections close);
/// under MPI and for a stopped rank only the timeout ends the wait.
constexpr int64_t kCollectiveTimeoutMsDefault = 10LL * 60 * 1000;

/// Gloo: the groups of this rank along each of `dims` (in `out`, in that
/// order), each a gloo context over TCP, created collectively over a
/// torchrun control plane: every rank calls it with the same mesh and dims.
/// Each rank listens on the address it reaches rank 0 from
/// (ControlPlane::localAddress), or on the interface GLOO_SOCKET_IFNAME
/// names (as PyTorch does); every pair's address goes to every rank in one
/// ControlPlane::allGather, then each rank connects its pairs, within about
/// `timeoutMs`. False with `error` on every rank, naming the rank, when
/// one cannot create its device and pairs; false on a rank whose pairs do
/// not connect in time (its peers' fail too, or the caller's agreement
/// tells them). Without gloo in the build (hasGloo()), false saying so.
bool createGlooComms(const std::vector<MeshDimSpec> &mesh,
                     const std::vector<std::string> &dims, ControlPlane &control,
                     int timeoutMs, std::vector<std::unique_ptr<HostComm>> &out,
                     std::string &error);

/// Whether this libmfsdp_rt was built with gloo (libgloo-dev).
bool hasGloo();

} // namespace mfsdp::rt

#endif // MFSDP_RUNTIME_HOSTCOMM_H

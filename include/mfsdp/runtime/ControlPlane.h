//===- ControlPlane.h - How the ranks of mfsdp_create agree -----*- C++ -*-===//
//
// mfsdp_create learns the world and makes the ranks agree (on the plan,
// the backend, whether every rank succeeded) before any collective runs,
// so that either every rank goes on or every rank fails. This is the
// little it needs of the launcher's world, in two implementations
// (mfsdp_config::bootstrap):
//
//   MPI       MPI_COMM_WORLD (mpirun); MPI must be initialised.
//   torchrun  RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
//             (Bootstrap.h), the agreements over a TcpStar through rank 0,
//             every wait bounded: a missing or dead rank is an error on
//             every rank, never a hang. No MPI call is made.
//
// Under torchrun the backends also bootstrap their collectives through it:
// the CUDA backend's NCCL communicators (the unique id goes out with
// broadcast), the host backend's gloo contexts (every pair's address with
// allGather).
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_RUNTIME_CONTROLPLANE_H
#define MFSDP_RUNTIME_CONTROLPLANE_H

#include "mfsdp/runtime/Bootstrap.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mfsdp::rt {

class ControlPlane {
public:
  virtual ~ControlPlane();
  /// "MPI" or "torchrun", for messages.
  virtual const char *name() const = 0;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  /// This rank's index on its node (the CUDA device it uses).
  virtual int localRank() const = 0;
  /// Element-wise minimum and maximum of `mine` over every rank (each
  /// passes as many values). Collective. False with `error`.
  virtual bool minMax(const std::vector<int64_t> &mine, std::vector<int64_t> &lo,
                      std::vector<int64_t> &hi, std::string &error) = 0;
  /// Rank 0's `blob` (at most 1 MiB) into `blob` on every rank.
  /// Collective. False with `error`.
  virtual bool broadcast(std::vector<uint8_t> &blob, std::string &error) = 0;
  /// `all` = every rank's `mine` (at most 1 MiB each), indexed by rank, on
  /// every rank. Collective. False with `error`.
  virtual bool allGather(const std::vector<uint8_t> &mine,
                         std::vector<std::vector<uint8_t>> &all, std::string &error) = 0;
  /// The torchrun environment it was created from; null under MPI.
  virtual const RankEnv *rankEnv() const { return nullptr; }
  /// Under torchrun, this host's numeric address on the interface it
  /// reaches rank 0 over (rank 0: the one the others reached it on;
  /// 127.0.0.1 in a world of one): where other connections between the
  /// ranks (gloo's) can listen. Empty under MPI.
  virtual std::string localAddress() const { return ""; }
  /// Bounds each exchange (the watchdog, mfsdp_config::collective_timeout_ms):
  /// one not complete in `ms` milliseconds fails, and every later one fails
  /// at once. The torchrun plane bounds its waits by its own timeout.
  virtual void setTimeout(int64_t ms) { (void)ms; }
};

/// MPI_COMM_WORLD; null when MPI is not initialised.
ControlPlane *createMpiControlPlane();

/// The torchrun world of `env`: connects every rank (TcpStar::connect, so
/// every rank must call it), each wait at most `timeoutMs`. Null with
/// `error` (which rank, which address, what failed).
ControlPlane *createTorchrunControlPlane(const RankEnv &env, int timeoutMs,
                                         std::string &error);

} // namespace mfsdp::rt

#endif // MFSDP_RUNTIME_CONTROLPLANE_H

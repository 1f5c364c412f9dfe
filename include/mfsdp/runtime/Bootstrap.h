//===- Bootstrap.h - Ranks from the torchrun environment --------*- C++ -*-===//
//
// A trainer started by torchrun (or any launcher following its convention)
// has no MPI world: it learns its place from RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR and MASTER_PORT. This is what the runtime needs of that
// convention: reading and checking the variables, and broadcasting a small
// blob from rank 0 to every rank over TCP (the NCCL unique id a
// communicator is created from), and a star of TCP connections through
// rank 0 for the small agreements of mfsdp_create (ControlPlane.h). Under
// mpirun the same go through MPI instead.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_RUNTIME_BOOTSTRAP_H
#define MFSDP_RUNTIME_BOOTSTRAP_H

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mfsdp::rt {

struct RankEnv {
  int rank = 0, world = 1, localRank = 0;
  std::string masterAddr; ///< host name or IPv4/IPv6 address of rank 0
  int masterPort = 0;
};

struct MeshDimSpec {
  std::string name;
  int64_t size = 1;
};

/// One of several broadcasts issued together on a group (the collectives'
/// broadcastMany): `count` floats of `buf`, in place, from group rank
/// `root`.
struct BroadcastPart {
  float *buf;
  int64_t count;
  int root;
};

/// This rank's group along `dim` of a row-major mesh (the ranks that differ
/// only in that coordinate): `colour` names the group (the rank with that
/// coordinate zeroed), `coord` is the rank's position in it. Fails when
/// the mesh's product is not `world` or it has no such dim.
bool meshGroup(const std::vector<MeshDimSpec> &mesh, const std::string &dim,
               int rank, int world, int &colour, int &coord, std::string &error);

/// The most bytes one rank exchanges in one call (broadcastBlob, TcpStar,
/// ControlPlane).
constexpr uint64_t kMaxBlobBytes = uint64_t(1) << 20;

/// Looks a variable up; returns false when it is not set.
using EnvLookup = std::function<bool(const char *name, std::string &value)>;

/// The process environment (getenv).
EnvLookup processEnvironment();

/// Reads RANK, WORLD_SIZE, LOCAL_RANK (optional, default RANK), MASTER_ADDR
/// and MASTER_PORT; MFSDP_MASTER_PORT (optional) replaces MASTER_PORT as
/// the port mfsdp listens on, for a job whose torch.distributed store holds
/// MASTER_PORT. Returns false with `error` naming the variable, its value
/// and what was expected (an integer, 0 <= RANK < WORLD_SIZE, a port in
/// 1..65535, ...).
bool readRankEnv(const EnvLookup &env, RankEnv &out, std::string &error);

/// Rank 0 listens on MASTER_PORT and sends `blob` to every other rank;
/// the others connect to MASTER_ADDR:MASTER_PORT (retrying until
/// `timeoutMs`) and receive it into `blob`. Every rank must call it. Returns
/// false with `error` (which rank, which address, what failed) when a rank
/// does not arrive, the connection breaks or the sizes disagree, never
/// hanging past the timeout.
bool broadcastBlob(const RankEnv &env, std::vector<uint8_t> &blob,
                   int timeoutMs, std::string &error);

/// Every rank of a torchrun world connected to rank 0 over TCP, the
/// connections kept for a sequence of small exchanges (each blob at most
/// 1 MiB). Rank 0 listens on MASTER_PORT until the WORLD_SIZE - 1 other
/// ranks have connected and announced their RANK and WORLD_SIZE, then
/// closes the port (so a star created right after this one cannot meet a
/// stale listener); the others connect to MASTER_ADDR:MASTER_PORT,
/// retrying. Rank 0 waits at most `timeoutMs` for each step; the others
/// wait twice as long for its answers, so that rank 0, which knows which
/// rank is missing or broke, tells every other rank before they give up.
/// A failure is an error on every rank (the rank, the address, what was
/// expected), never a hang past the timeouts.
class TcpStar {
public:
  /// Every rank must call it. Null with `error` when a rank does not
  /// arrive in time, two ranks claim the same RANK, the ranks disagree on
  /// WORLD_SIZE, or something else answers on the port.
  static std::unique_ptr<TcpStar> connect(const RankEnv &env, int timeoutMs,
                                          std::string &error);
  ~TcpStar();
  TcpStar(const TcpStar &) = delete;
  TcpStar &operator=(const TcpStar &) = delete;

  /// `all` = every rank's `mine`, indexed by rank, on every rank (gathered
  /// by rank 0, which sends the result back). Every rank must call it, in
  /// the same order. After a failure every later call fails too.
  bool allGather(const std::vector<uint8_t> &mine,
                 std::vector<std::vector<uint8_t>> &all, std::string &error);

  const RankEnv &env() const { return env_; }
  int timeoutMs() const { return timeoutMs_; }
  /// This host's numeric address on its connection to rank 0 (rank 0: on
  /// its connection to rank 1; 127.0.0.1 in a world of one), an IPv4
  /// address written as such even when the socket is IPv6.
  std::string localAddress() const;

private:
  TcpStar(const RankEnv &env, int timeoutMs) : env_(env), timeoutMs_(timeoutMs) {}
  /// Rank 0: tells every connected rank `message`, then drops them all.
  void abort(const std::string &message);
  void closeAll();
  RankEnv env_;
  int timeoutMs_;
  std::vector<int> peers_; ///< rank 0: a socket per rank (-1 for itself)
  int root_ = -1;          ///< the other ranks: the socket to rank 0
  bool broken_ = false;
};

} // namespace mfsdp::rt

#endif // MFSDP_RUNTIME_BOOTSTRAP_H

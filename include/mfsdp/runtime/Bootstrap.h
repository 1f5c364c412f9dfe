//===- Bootstrap.h - Ranks from the torchrun environment --------*- C++ -*-===//
//
// A trainer started by torchrun (or any launcher following its convention)
// has no MPI world: it learns its place from RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR and MASTER_PORT. This is what the runtime needs of that
// convention: reading and checking the variables, and broadcasting a small
// blob from rank 0 to every rank over TCP (the NCCL unique id a
// communicator is created from). Under mpirun the same blob goes through
// MPI_Bcast instead.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_RUNTIME_BOOTSTRAP_H
#define MFSDP_RUNTIME_BOOTSTRAP_H

#include <cstdint>
#include <functional>
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

/// This rank's group along `dim` of a row-major mesh (the ranks that differ
/// only in that coordinate): `colour` names the group (the rank with that
/// coordinate zeroed), `coord` is the rank's position in it. Fails when
/// the mesh's product is not `world` or it has no such dim.
bool meshGroup(const std::vector<MeshDimSpec> &mesh, const std::string &dim,
               int rank, int world, int &colour, int &coord, std::string &error);

/// Looks a variable up; returns false when it is not set.
using EnvLookup = std::function<bool(const char *name, std::string &value)>;

/// The process environment (getenv).
EnvLookup processEnvironment();

/// Reads RANK, WORLD_SIZE, LOCAL_RANK (optional, default RANK), MASTER_ADDR
/// and MASTER_PORT. Returns false with `error` naming the variable, its
/// value and what was expected (an integer, 0 <= RANK < WORLD_SIZE, a port
/// in 1..65535, ...).
bool readRankEnv(const EnvLookup &env, RankEnv &out, std::string &error);

/// Rank 0 listens on MASTER_PORT and sends `blob` to every other rank;
/// the others connect to MASTER_ADDR:MASTER_PORT (retrying until
/// `timeoutMs`) and receive it into `blob`. Every rank must call it. Returns
/// false with `error` (which rank, which address, what failed) when a rank
/// does not arrive, the connection breaks or the sizes disagree, never
/// hanging past the timeout.
bool broadcastBlob(const RankEnv &env, std::vector<uint8_t> &blob,
                   int timeoutMs, std::string &error);

} // namespace mfsdp::rt

#endif // MFSDP_RUNTIME_BOOTSTRAP_H

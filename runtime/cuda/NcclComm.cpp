//===- NcclComm.cpp - Collectives of the CUDA backend (NCCL) --------------===//
#include "mfsdp/runtime/NcclComm.h"
#include "mfsdp/runtime/ControlPlane.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <memory>

namespace mfsdp::rt {

namespace {
thread_local char lastMessage[512] = "";

int checkNccl(ncclResult_t r, const char *what) {
  if (r == ncclSuccess || r == ncclInProgress)
    return 0;
  std::snprintf(lastMessage, sizeof(lastMessage), "%s failed: %s", what,
                ncclGetErrorString(r));
  return static_cast<int>(r);
}

bool checkCuda(cudaError_t e, const char *what, std::string &error) {
  if (e == cudaSuccess)
    return true;
  error = std::string(what) + " failed: " + cudaGetErrorString(e);
  return false;
}

ncclComm_t handle(void *c) { return static_cast<ncclComm_t>(c); }
cudaStream_t streamOf(void *s) { return static_cast<cudaStream_t>(s); }

/// count elements of `type` at buf = their sum over `comm`, in place.
int allReduceOf(void *comm, void *buf, int64_t count, ncclDataType_t type,
                void *stream) {
  return checkNccl(ncclAllReduce(buf, buf, static_cast<size_t>(count), type, ncclSum,
                                 handle(comm), streamOf(stream)),
                   "ncclAllReduce");
}

std::vector<size_t> offsetsOf(const std::vector<int64_t> &counts) {
  std::vector<size_t> off(counts.size() + 1, 0);
  for (size_t r = 0; r < counts.size(); ++r)
    off[r + 1] = off[r] + static_cast<size_t>(counts[r]);
  return off;
}
} // namespace

const char *NcclComm::lastError() { return lastMessage; }

NcclComm *NcclComm::fromWorld(void *worldComm, int rank, int world,
                              const std::vector<MeshDimSpec> &mesh,
                              const std::string &dim, std::string &error) {
  int colour = 0, coord = 0;
  if (!meshGroup(mesh, dim, rank, world, colour, coord, error)) {
    ncclCommDestroy(handle(worldComm));
    return nullptr;
  }
  ncclComm_t group = nullptr;
  int rc = checkNccl(ncclCommSplit(handle(worldComm), colour, coord, &group, nullptr),
                     "ncclCommSplit");
  ncclCommDestroy(handle(worldComm));
  if (rc) {
    error = lastMessage;
    return nullptr;
  }
  auto *c = new NcclComm();
  c->comm_ = group;
  ncclCommUserRank(group, &c->rank_);
  ncclCommCount(group, &c->size_);
  return c;
}

NcclComm *NcclComm::createFromMpi(const std::vector<MeshDimSpec> &mesh,
                                  const std::string &dim, std::string &error) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    error = "MPI is not initialized";
    return nullptr;
  }
  int world = 0, rank = 0, localRank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &localRank);
  MPI_Comm_free(&node);
  if (!checkCuda(cudaSetDevice(localRank), "cudaSetDevice(local rank)", error))
    return nullptr;
  // The id goes out with whether rank 0 got one, so no rank waits for an
  // id that never comes.
  struct {
    int ok;
    ncclUniqueId id;
  } root;
  std::memset(&root, 0, sizeof(root));
  if (rank == 0)
    root.ok = checkNccl(ncclGetUniqueId(&root.id), "ncclGetUniqueId") == 0;
  if (MPI_Bcast(&root, sizeof(root), MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) {
    error = "MPI_Bcast of the NCCL unique id failed";
    return nullptr;
  }
  if (!root.ok) {
    error = rank == 0 ? std::string(lastMessage)
                      : "rank 0 could not create an NCCL unique id (see its error)";
    return nullptr;
  }
  ncclUniqueId id = root.id;
  ncclComm_t worldComm = nullptr;
  if (checkNccl(ncclCommInitRank(&worldComm, world, id, rank), "ncclCommInitRank")) {
    error = lastMessage;
    return nullptr;
  }
  return fromWorld(worldComm, rank, world, mesh, dim, error);
}

NcclComm *NcclComm::createFromEnv(const RankEnv &env,
                                  const std::vector<MeshDimSpec> &mesh,
                                  const std::string &dim, int timeoutMs,
                                  std::string &error) {
  std::unique_ptr<ControlPlane> control(createTorchrunControlPlane(env, timeoutMs, error));
  return control ? createFromControl(*control, mesh, dim, error) : nullptr;
}

NcclComm *NcclComm::createFromControl(ControlPlane &control,
                                      const std::vector<MeshDimSpec> &mesh,
                                      const std::string &dim, std::string &error) {
  const int rank = control.rank(), world = control.world();
  const int device = control.localRank();
  const std::string me = "rank " + std::to_string(rank) + ": ";
  // This rank's device, and rank 0's unique id; then every rank agrees,
  // so none is left waiting in ncclCommInitRank for a rank that failed.
  std::string mine;
  if (!checkCuda(cudaSetDevice(device),
                 ("cudaSetDevice(" + std::to_string(device) + ", the local rank)").c_str(),
                 mine))
    mine = me + mine;
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (mine.empty() && rank == 0 && checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId"))
    mine = me + lastMessage;
  std::vector<int64_t> lo, hi;
  if (!control.minMax({mine.empty() ? 1 : 0}, lo, hi, error))
    return nullptr;
  if (!mine.empty() || lo[0] == 0) {
    error = mine.empty() ? me + "another rank has no device or NCCL unique id (see "
                                "its error)"
                         : mine;
    return nullptr;
  }
  std::vector<uint8_t> blob(reinterpret_cast<uint8_t *>(&id),
                            reinterpret_cast<uint8_t *>(&id) + sizeof(id));
  if (!control.broadcast(blob, error))
    return nullptr;
  if (blob.size() != sizeof(id)) {
    error = me + "received " + std::to_string(blob.size()) + " bytes from rank 0; "
            "expected an NCCL unique id of " + std::to_string(sizeof(id));
    return nullptr;
  }
  std::memcpy(&id, blob.data(), sizeof(id));
  ncclComm_t worldComm = nullptr;
  if (checkNccl(ncclCommInitRank(&worldComm, world, id, rank), "ncclCommInitRank")) {
    error = lastMessage;
    return nullptr;
  }
  return fromWorld(worldComm, rank, world, mesh, dim, error);
}

NcclComm::~NcclComm() {
  if (comm_)
    ncclCommDestroy(handle(comm_));
}

int NcclComm::asyncError() {
  if (!comm_)
    return 0;
  ncclResult_t async = ncclSuccess;
  if (int rc = checkNccl(ncclCommGetAsyncError(handle(comm_), &async),
                         "ncclCommGetAsyncError"))
    return rc;
  return async == ncclSuccess || async == ncclInProgress
             ? 0
             : checkNccl(async, "an NCCL collective (asynchronous error)");
}

void NcclComm::abort() {
  if (comm_)
    ncclCommAbort(handle(comm_));
  comm_ = nullptr;
}

int NcclComm::allGather(const float *send, float *recv, int64_t count, void *stream) {
  return checkNccl(ncclAllGather(send, recv, static_cast<size_t>(count), ncclFloat,
                                 handle(comm_), streamOf(stream)),
                   "ncclAllGather");
}

int NcclComm::reduceScatter(const float *send, float *recv, int64_t count,
                            void *stream) {
  return checkNccl(ncclReduceScatter(send, recv, static_cast<size_t>(count), ncclFloat,
                                     ncclSum, handle(comm_), streamOf(stream)),
                   "ncclReduceScatter");
}

int NcclComm::allReduce(float *buf, int64_t count, void *stream) {
  return allReduceOf(comm_, buf, count, ncclFloat, stream);
}

int NcclComm::allReduce(double *buf, int64_t count, void *stream) {
  return allReduceOf(comm_, buf, count, ncclFloat64, stream);
}

int NcclComm::broadcast(float *buf, int64_t count, int root, void *stream) {
  return checkNccl(ncclBroadcast(buf, buf, static_cast<size_t>(count), ncclFloat, root,
                                 handle(comm_), streamOf(stream)),
                   "ncclBroadcast");
}

int NcclComm::broadcastMany(const std::vector<BroadcastPart> &parts, void *stream) {
  if (int rc = checkNccl(ncclGroupStart(), "ncclGroupStart"))
    return rc;
  int rc = 0;
  for (const BroadcastPart &p : parts) {
    if (p.count <= 0)
      continue; // the same count on every rank: no call anywhere
    rc = checkNccl(ncclBroadcast(p.buf, p.buf, static_cast<size_t>(p.count), ncclFloat,
                                 p.root, handle(comm_), streamOf(stream)),
                   "ncclBroadcast");
    if (rc)
      break;
  }
  // The group is closed whatever happened inside it.
  const int ended = checkNccl(ncclGroupEnd(), "ncclGroupEnd");
  return rc ? rc : ended;
}

/// One NCCL call per rank with a non-empty segment, inside one group.
/// `call(r, offset)` enqueues rank r's segment at element `offset`.
template <typename Call>
static int groupedPerRank(const std::vector<int64_t> &counts, int size,
                          const char *what, Call call) {
  if (static_cast<int>(counts.size()) != size) {
    std::snprintf(lastMessage, sizeof(lastMessage), "%s: %zu counts for a group of %d ranks",
                  what, counts.size(), size);
    return static_cast<int>(ncclInvalidArgument);
  }
  std::vector<size_t> off = offsetsOf(counts);
  if (int rc = checkNccl(ncclGroupStart(), "ncclGroupStart"))
    return rc;
  int rc = 0;
  for (int r = 0; r < size && !rc; ++r)
    if (counts[r] != 0)
      rc = checkNccl(call(r, off[r]), what);
  int end = checkNccl(ncclGroupEnd(), "ncclGroupEnd");
  return rc ? rc : end;
}

int NcclComm::allGatherV(const float *send, float *recv,
                         const std::vector<int64_t> &counts, void *stream) {
  return groupedPerRank(counts, size_, "ncclBroadcast (all-gather-v)",
                        [&](int r, size_t off) {
                          return ncclBroadcast(r == rank_ ? send : recv + off, recv + off,
                                               static_cast<size_t>(counts[r]), ncclFloat,
                                               r, handle(comm_), streamOf(stream));
                        });
}

int NcclComm::allGatherBF16(const uint16_t *send, uint16_t *recv,
                            const std::vector<int64_t> &counts, void *stream) {
  bool even = static_cast<int>(counts.size()) == size_;
  for (int64_t c : counts)
    even &= c == counts.front();
  if (even && counts.front() > 0)
    return checkNccl(ncclAllGather(send, recv, static_cast<size_t>(counts.front()),
                                   ncclBfloat16, handle(comm_), streamOf(stream)),
                     "ncclAllGather (bf16)");
  if (even)
    return 0;
  return groupedPerRank(counts, size_, "ncclBroadcast (bf16 all-gather-v)",
                        [&](int r, size_t off) {
                          return ncclBroadcast(r == rank_ ? send : recv + off, recv + off,
                                               static_cast<size_t>(counts[r]), ncclBfloat16,
                                               r, handle(comm_), streamOf(stream));
                        });
}

int NcclComm::reduceScatterBF16(const uint16_t *send, uint16_t *recv,
                                const std::vector<int64_t> &counts, void *stream) {
  bool even = static_cast<int>(counts.size()) == size_;
  for (int64_t c : counts)
    even &= c == counts.front();
  if (even && counts.front() > 0)
    return checkNccl(ncclReduceScatter(send, recv, static_cast<size_t>(counts.front()),
                                       ncclBfloat16, ncclSum, handle(comm_),
                                       streamOf(stream)),
                     "ncclReduceScatter (bf16)");
  if (even)
    return 0;
  return groupedPerRank(counts, size_, "ncclReduce (bf16 reduce-scatter-v)",
                        [&](int r, size_t off) {
                          return ncclReduce(send + off, recv, static_cast<size_t>(counts[r]),
                                            ncclBfloat16, ncclSum, r, handle(comm_),
                                            streamOf(stream));
                        });
}

int NcclComm::allReduceBF16(uint16_t *buf, int64_t count, void *stream) {
  return allReduceOf(comm_, buf, count, ncclBfloat16, stream);
}

int NcclComm::reduceScatterV(const float *send, float *recv,
                             const std::vector<int64_t> &counts, void *stream) {
  // The reduced segment lands only on its owner r.
  return groupedPerRank(counts, size_, "ncclReduce (reduce-scatter-v)",
                        [&](int r, size_t off) {
                          return ncclReduce(send + off, recv, static_cast<size_t>(counts[r]),
                                            ncclFloat, ncclSum, r, handle(comm_),
                                            streamOf(stream));
                        });
}

} // namespace mfsdp::rt

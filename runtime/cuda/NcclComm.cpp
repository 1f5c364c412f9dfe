//===- NcclComm.cpp - Collectives of the CUDA backend (NCCL) --------------===//
#include "mfsdp/runtime/NcclComm.h"
#include "mfsdp/runtime/ControlPlane.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

namespace mfsdp::rt {

namespace {
thread_local char lastMessage[512] = "";

/// 0 for success and for ncclInProgress (a nonblocking call that is
/// still running: settle() waits for it), else the error, with the
/// message set.
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

/// Every communicator is nonblocking (`blocking = 0`): an NCCL call
/// returns at once, ncclInProgress while its work (connecting to the
/// peers, enqueuing) goes on, and the next call on the communicator may
/// come only once ncclCommGetAsyncError no longer says ncclInProgress. So
/// no NCCL call can hold the host past the collective timeout: `settle`
/// polls with that deadline and, when it passes, aborts the communicator
/// (ncclCommAbort) and fails naming the call.
constexpr int kTimedOut = static_cast<int>(ncclSystemError);

int settle(ncclComm_t comm, ncclResult_t first, int64_t timeoutMs, const char *what) {
  if (first != ncclInProgress)
    return checkNccl(first, what);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
  std::chrono::microseconds nap(0);
  for (int tries = 0;; ++tries) {
    ncclResult_t state = ncclInProgress;
    if (ncclResult_t r = ncclCommGetAsyncError(comm, &state); r != ncclSuccess)
      return checkNccl(r, "ncclCommGetAsyncError");
    if (state != ncclInProgress)
      return checkNccl(state, what);
    if (tries > 1000) {
      if (Clock::now() >= deadline)
        break;
      nap = std::min(std::chrono::microseconds(1000), nap + std::chrono::microseconds(20));
      std::this_thread::sleep_for(nap);
    }
  }
  std::snprintf(lastMessage, sizeof(lastMessage),
                "%s did not complete within %lld ms (the collective timeout; a rank "
                "stopped, died or calls something else): the NCCL communicator was "
                "aborted",
                what, static_cast<long long>(timeoutMs));
  return kTimedOut;
}

/// A nonblocking communicator's configuration.
ncclConfig_t nonblocking() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

/// Finalizes (flushes) and frees `comm`, bounded by the timeout; a
/// communicator that does not finalize in time is aborted instead.
void release(ncclComm_t comm, int64_t timeoutMs) {
  if (!comm)
    return;
  if (settle(comm, ncclCommFinalize(comm), timeoutMs, "ncclCommFinalize") == 0)
    ncclCommDestroy(comm);
  else
    ncclCommAbort(comm);
}

/// A new communicator `comm` (being created by `call`), settled: 0, or
/// the error with the communicator aborted and `comm` null.
int settleNew(ncclComm_t &comm, ncclResult_t call, int64_t timeoutMs, const char *what) {
  if (call != ncclSuccess && call != ncclInProgress) {
    checkNccl(call, what);
    if (comm)
      ncclCommAbort(comm);
    comm = nullptr;
    return static_cast<int>(call);
  }
  if (int rc = settle(comm, call, timeoutMs, what)) {
    ncclCommAbort(comm);
    comm = nullptr;
    return rc;
  }
  return 0;
}

std::vector<size_t> offsetsOf(const std::vector<int64_t> &counts) {
  std::vector<size_t> off(counts.size() + 1, 0);
  for (size_t r = 0; r < counts.size(); ++r)
    off[r + 1] = off[r] + static_cast<size_t>(counts[r]);
  return off;
}
} // namespace

const char *NcclComm::lastError() { return lastMessage; }

NcclComm *NcclComm::fromWorld(int world, const void *uniqueId, int rank,
                              const std::vector<MeshDimSpec> &mesh,
                              const std::string &dim, int64_t timeoutMs,
                              std::string &error) {
  int colour = 0, coord = 0;
  if (!meshGroup(mesh, dim, rank, world, colour, coord, error))
    return nullptr;
  ncclUniqueId id;
  std::memcpy(&id, uniqueId, sizeof(id));
  ncclConfig_t config = nonblocking();
  ncclComm_t worldComm = nullptr;
  if (settleNew(worldComm, ncclCommInitRankConfig(&worldComm, world, id, rank, &config),
                timeoutMs, "ncclCommInitRankConfig (every rank joining the world)")) {
    error = lastMessage;
    return nullptr;
  }
  ncclComm_t group = nullptr;
  config = nonblocking();
  const int rc = settleNew(group, ncclCommSplit(worldComm, colour, coord, &group, &config),
                           timeoutMs, ("ncclCommSplit (the " + dim + " group)").c_str());
  release(worldComm, timeoutMs);
  if (rc) {
    error = lastMessage;
    return nullptr;
  }
  auto *c = new NcclComm();
  c->comm_ = group;
  c->timeoutMs_ = timeoutMs;
  ncclCommUserRank(group, &c->rank_);
  ncclCommCount(group, &c->size_);
  return c;
}

int NcclComm::settle(int call, const char *what) {
  const int rc = ::mfsdp::rt::settle(handle(comm_), static_cast<ncclResult_t>(call),
                                     timeoutMs_, what);
  if (rc == kTimedOut)
    abort();
  return rc;
}

NcclComm *NcclComm::createFromMpi(const std::vector<MeshDimSpec> &mesh,
                                  const std::string &dim, int64_t timeoutMs,
                                  std::string &error) {
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
  return fromWorld(world, &root.id, rank, mesh, dim, timeoutMs, error);
}

NcclComm *NcclComm::createFromEnv(const RankEnv &env,
                                  const std::vector<MeshDimSpec> &mesh,
                                  const std::string &dim, int timeoutMs,
                                  std::string &error) {
  std::unique_ptr<ControlPlane> control(createTorchrunControlPlane(env, timeoutMs, error));
  return control ? createFromControl(*control, mesh, dim, timeoutMs, error) : nullptr;
}

NcclComm *NcclComm::createFromControl(ControlPlane &control,
                                      const std::vector<MeshDimSpec> &mesh,
                                      const std::string &dim, int64_t timeoutMs,
                                      std::string &error) {
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
  return fromWorld(world, &id, rank, mesh, dim, timeoutMs, error);
}

NcclComm::~NcclComm() { release(handle(comm_), timeoutMs_); }

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
  if (!comm_)
    return aborted();
  return settle(ncclAllGather(send, recv, static_cast<size_t>(count), ncclFloat,
                              handle(comm_), streamOf(stream)),
                "ncclAllGather");
}

int NcclComm::reduceScatter(const float *send, float *recv, int64_t count,
                            void *stream) {
  if (!comm_)
    return aborted();
  return settle(ncclReduceScatter(send, recv, static_cast<size_t>(count), ncclFloat,
                                  ncclSum, handle(comm_), streamOf(stream)),
                "ncclReduceScatter");
}

int NcclComm::allReduceOf(void *buf, int64_t count, int type, void *stream) {
  if (!comm_)
    return aborted();
  return settle(ncclAllReduce(buf, buf, static_cast<size_t>(count),
                              static_cast<ncclDataType_t>(type), ncclSum, handle(comm_),
                              streamOf(stream)),
                "ncclAllReduce");
}

int NcclComm::allReduce(float *buf, int64_t count, void *stream) {
  return allReduceOf(buf, count, ncclFloat, stream);
}

int NcclComm::allReduce(double *buf, int64_t count, void *stream) {
  return allReduceOf(buf, count, ncclFloat64, stream);
}

int NcclComm::broadcast(float *buf, int64_t count, int root, void *stream) {
  if (!comm_)
    return aborted();
  return settle(ncclBroadcast(buf, buf, static_cast<size_t>(count), ncclFloat, root,
                              handle(comm_), streamOf(stream)),
                "ncclBroadcast");
}

int NcclComm::aborted() {
  std::snprintf(lastMessage, sizeof(lastMessage),
                "the NCCL communicator was aborted after an earlier timeout or error");
  return static_cast<int>(ncclInvalidUsage);
}

/// The calls `enqueue()` makes inside one NCCL group (ncclGroupStart/End:
/// one launch), then the group's end settled. The group is closed
/// whatever happened inside it.
template <typename Enqueue>
int NcclComm::grouped(const char *what, Enqueue enqueue) {
  if (!comm_)
    return aborted();
  if (int rc = checkNccl(ncclGroupStart(), "ncclGroupStart"))
    return rc;
  const int rc = enqueue();
  const int end = settle(ncclGroupEnd(), what);
  return rc ? rc : end;
}

int NcclComm::broadcastMany(const std::vector<BroadcastPart> &parts, void *stream) {
  return grouped("ncclGroupEnd (broadcasts)", [&] {
    for (const BroadcastPart &p : parts) {
      if (p.count <= 0)
        continue; // the same count on every rank: no call anywhere
      if (int rc = checkNccl(ncclBroadcast(p.buf, p.buf, static_cast<size_t>(p.count),
                                           ncclFloat, p.root, handle(comm_),
                                           streamOf(stream)),
                             "ncclBroadcast"))
        return rc;
    }
    return 0;
  });
}

/// One NCCL call per rank with a non-empty segment, inside one group.
/// `call(r, offset)` enqueues rank r's segment at element `offset`.
template <typename Call>
int NcclComm::groupedPerRank(const std::vector<int64_t> &counts, const char *what,
                             Call call) {
  if (static_cast<int>(counts.size()) != size_) {
    std::snprintf(lastMessage, sizeof(lastMessage), "%s: %zu counts for a group of %d ranks",
                  what, counts.size(), size_);
    return static_cast<int>(ncclInvalidArgument);
  }
  std::vector<size_t> off = offsetsOf(counts);
  return grouped(what, [&] {
    for (int r = 0; r < size_; ++r)
      if (counts[r] != 0)
        if (int rc = checkNccl(call(r, off[r]), what))
          return rc;
    return 0;
  });
}

int NcclComm::allGatherV(const float *send, float *recv,
                         const std::vector<int64_t> &counts, void *stream) {
  return groupedPerRank(counts, "ncclBroadcast (all-gather-v)",
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
  if (!comm_)
    return aborted();
  if (even && counts.front() > 0)
    return settle(ncclAllGather(send, recv, static_cast<size_t>(counts.front()),
                                ncclBfloat16, handle(comm_), streamOf(stream)),
                  "ncclAllGather (bf16)");
  if (even)
    return 0;
  return groupedPerRank(counts, "ncclBroadcast (bf16 all-gather-v)",
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
  if (!comm_)
    return aborted();
  if (even && counts.front() > 0)
    return settle(ncclReduceScatter(send, recv, static_cast<size_t>(counts.front()),
                                    ncclBfloat16, ncclSum, handle(comm_), streamOf(stream)),
                  "ncclReduceScatter (bf16)");
  if (even)
    return 0;
  return groupedPerRank(counts, "ncclReduce (bf16 reduce-scatter-v)",
                        [&](int r, size_t off) {
                          return ncclReduce(send + off, recv, static_cast<size_t>(counts[r]),
                                            ncclBfloat16, ncclSum, r, handle(comm_),
                                            streamOf(stream));
                        });
}

int NcclComm::allReduceBF16(uint16_t *buf, int64_t count, void *stream) {
  return allReduceOf(buf, count, ncclBfloat16, stream);
}

int NcclComm::reduceScatterV(const float *send, float *recv,
                             const std::vector<int64_t> &counts, void *stream) {
  // The reduced segment lands only on its owner r.
  return groupedPerRank(counts, "ncclReduce (reduce-scatter-v)",
                        [&](int r, size_t off) {
                          return ncclReduce(send + off, recv, static_cast<size_t>(counts[r]),
                                            ncclFloat, ncclSum, r, handle(comm_),
                                            streamOf(stream));
                        });
}

} // namespace mfsdp::rt

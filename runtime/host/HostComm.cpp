//===- HostComm.cpp - Collectives of the host backend (MPI) ---------------===//
#include "mfsdp/runtime/HostComm.h"

#include <mpi.h>

#include <climits>
#include <cstdio>
#include <numeric>

namespace mfsdp::rt {

namespace {
thread_local char lastMessage[MPI_MAX_ERROR_STRING + 128] = "";

int check(int code, const char *what) {
  if (code == MPI_SUCCESS)
    return 0;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  std::snprintf(lastMessage, sizeof(lastMessage), "%s failed: %.*s", what, len,
                text);
  return code;
}

int tooLarge(const char *what) {
  std::snprintf(lastMessage, sizeof(lastMessage),
                "%s: more than 2^31-1 elements in one call", what);
  return MPI_ERR_COUNT;
}

MPI_Comm handle(void *c) { return reinterpret_cast<MPI_Comm>(c); }

/// count elements of `type` at buf = their sum over `comm`, in place.
int allReduceOf(void *comm, void *buf, int64_t count, MPI_Datatype type) {
  if (count > INT_MAX)
    return tooLarge("allReduce");
  return check(MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(count), type, MPI_SUM,
                             handle(comm)),
               "MPI_Allreduce");
}
} // namespace

const char *HostComm::lastError() { return lastMessage; }

HostComm *HostComm::create(const std::vector<MeshDimSpec> &mesh,
                           const std::string &dim, std::string &error) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    error = "MPI is not initialized";
    return nullptr;
  }
  int world = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int colour = 0, coord = 0;
  if (!meshGroup(mesh, dim, rank, world, colour, coord, error))
    return nullptr;
  MPI_Comm comm;
  if (check(MPI_Comm_split(MPI_COMM_WORLD, colour, coord, &comm),
            "MPI_Comm_split")) {
    error = lastMessage;
    return nullptr;
  }
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  auto *c = new HostComm();
  c->comm_ = reinterpret_cast<void *>(comm);
  MPI_Comm_rank(comm, &c->rank_);
  MPI_Comm_size(comm, &c->size_);
  return c;
}

HostComm::~HostComm() {
  MPI_Comm c = handle(comm_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && c != MPI_COMM_NULL)
    MPI_Comm_free(&c);
}

int HostComm::allGather(const float *send, float *recv, int64_t count) {
  if (count > INT_MAX)
    return tooLarge("allGather");
  return check(MPI_Allgather(send, static_cast<int>(count), MPI_FLOAT, recv,
                             static_cast<int>(count), MPI_FLOAT, handle(comm_)),
               "MPI_Allgather");
}

int HostComm::reduceScatter(const float *send, float *recv, int64_t count) {
  if (count > INT_MAX)
    return tooLarge("reduceScatter");
  return check(MPI_Reduce_scatter_block(send, recv, static_cast<int>(count),
                                        MPI_FLOAT, MPI_SUM, handle(comm_)),
               "MPI_Reduce_scatter_block");
}

int HostComm::allReduce(float *buf, int64_t count) {
  return allReduceOf(comm_, buf, count, MPI_FLOAT);
}

int HostComm::allReduce(double *buf, int64_t count) {
  return allReduceOf(comm_, buf, count, MPI_DOUBLE);
}

int HostComm::allGatherV(const float *send, float *recv,
                         const std::vector<int64_t> &counts) {
  if (static_cast<int>(counts.size()) != size_) {
    std::snprintf(lastMessage, sizeof(lastMessage),
                  "allGatherV: %zu counts for %d ranks", counts.size(), size_);
    return MPI_ERR_COUNT;
  }
  std::vector<int> c(size_), displs(size_);
  int64_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    if (counts[r] > INT_MAX || offset > INT_MAX)
      return tooLarge("allGatherV");
    c[r] = static_cast<int>(counts[r]);
    displs[r] = static_cast<int>(offset);
    offset += counts[r];
  }
  return check(MPI_Allgatherv(send, c[rank_], MPI_FLOAT, recv, c.data(),
                              displs.data(), MPI_FLOAT, handle(comm_)),
               "MPI_Allgatherv");
}

int HostComm::reduceScatterV(const float *send, float *recv,
                             const std::vector<int64_t> &counts) {
  if (static_cast<int>(counts.size()) != size_) {
    std::snprintf(lastMessage, sizeof(lastMessage),
                  "reduceScatterV: %zu counts for %d ranks", counts.size(), size_);
    return MPI_ERR_COUNT;
  }
  std::vector<int> c(size_);
  for (int r = 0; r < size_; ++r) {
    if (counts[r] > INT_MAX)
      return tooLarge("reduceScatterV");
    c[r] = static_cast<int>(counts[r]);
  }
  return check(MPI_Reduce_scatter(send, recv, c.data(), MPI_FLOAT, MPI_SUM,
                                  handle(comm_)),
               "MPI_Reduce_scatter");
}

int HostComm::broadcast(float *buf, int64_t count, int root) {
  if (count > INT_MAX)
    return tooLarge("broadcast");
  if (root < 0 || root >= size_) {
    std::snprintf(lastMessage, sizeof(lastMessage),
                  "broadcast: root %d out of range for %d ranks", root, size_);
    return MPI_ERR_ROOT;
  }
  return check(MPI_Bcast(buf, static_cast<int>(count), MPI_FLOAT, root, handle(comm_)),
               "MPI_Bcast");
}

int HostComm::broadcastMany(const std::vector<BroadcastPart> &parts) {
  std::vector<MPI_Request> requests;
  requests.reserve(parts.size());
  int rc = 0;
  for (const BroadcastPart &p : parts) {
    if (p.count > INT_MAX) {
      rc = tooLarge("broadcast");
      break;
    }
    if (p.root < 0 || p.root >= size_) {
      std::snprintf(lastMessage, sizeof(lastMessage),
                    "broadcast: root %d out of range for %d ranks", p.root, size_);
      rc = MPI_ERR_ROOT;
      break;
    }
    MPI_Request r = MPI_REQUEST_NULL;
    if ((rc = check(MPI_Ibcast(p.buf, static_cast<int>(p.count), MPI_FLOAT, p.root,
                               handle(comm_), &r),
                    "MPI_Ibcast")))
      break;
    requests.push_back(r);
  }
  // What was started completes before its buffers can be touched again.
  const int waited =
      requests.empty()
          ? 0
          : check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(),
                              MPI_STATUSES_IGNORE),
                  "MPI_Waitall (broadcasts)");
  return rc ? rc : waited;
}

int HostComm::barrier() { return check(MPI_Barrier(handle(comm_)), "MPI_Barrier"); }

} // namespace mfsdp::rt

namespace mfsdp::rt {

struct HostRequest {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<int> counts, displs; // read by MPI until the request completes
};

void HostRequestDeleter::operator()(HostRequest *r) const {
  // Never leave a collective unwaited: its buffers may be reused next.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && r->request != MPI_REQUEST_NULL)
    MPI_Wait(&r->request, MPI_STATUS_IGNORE);
  delete r;
}

int HostComm::startAllGather(const float *send, float *recv, int64_t count,
                             HostRequestPtr &out) {
  if (count > INT_MAX)
    return tooLarge("startAllGather");
  HostRequestPtr r(new HostRequest());
  if (int rc = check(MPI_Iallgather(send, static_cast<int>(count), MPI_FLOAT, recv,
                                    static_cast<int>(count), MPI_FLOAT,
                                    handle(comm_), &r->request),
                     "MPI_Iallgather"))
    return rc;
  out = std::move(r);
  return 0;
}

int HostComm::startAllGatherV(const float *send, float *recv,
                              const std::vector<int64_t> &counts,
                              HostRequestPtr &out) {
  if (static_cast<int>(counts.size()) != size_) {
    std::snprintf(lastMessage, sizeof(lastMessage),
                  "startAllGatherV: %zu counts for %d ranks", counts.size(), size_);
    return MPI_ERR_COUNT;
  }
  HostRequestPtr r(new HostRequest());
  r->counts.resize(size_);
  r->displs.resize(size_);
  int64_t offset = 0;
  for (int i = 0; i < size_; ++i) {
    if (counts[i] > INT_MAX || offset > INT_MAX)
      return tooLarge("startAllGatherV");
    r->counts[i] = static_cast<int>(counts[i]);
    r->displs[i] = static_cast<int>(offset);
    offset += counts[i];
  }
  if (int rc = check(MPI_Iallgatherv(send, r->counts[rank_], MPI_FLOAT, recv,
                                     r->counts.data(), r->displs.data(), MPI_FLOAT,
                                     handle(comm_), &r->request),
                     "MPI_Iallgatherv"))
    return rc;
  out = std::move(r);
  return 0;
}

int HostComm::startReduceScatter(const float *send, float *recv, int64_t count,
                                 HostRequestPtr &out) {
  if (count > INT_MAX)
    return tooLarge("startReduceScatter");
  HostRequestPtr r(new HostRequest());
  if (int rc = check(MPI_Ireduce_scatter_block(send, recv, static_cast<int>(count),
                                               MPI_FLOAT, MPI_SUM, handle(comm_),
                                               &r->request),
                     "MPI_Ireduce_scatter_block"))
    return rc;
  out = std::move(r);
  return 0;
}

int HostComm::startReduceScatterV(const float *send, float *recv,
                                  const std::vector<int64_t> &counts,
                                  HostRequestPtr &out) {
  if (static_cast<int>(counts.size()) != size_) {
    std::snprintf(lastMessage, sizeof(lastMessage),
                  "startReduceScatterV: %zu counts for %d ranks", counts.size(),
                  size_);
    return MPI_ERR_COUNT;
  }
  HostRequestPtr r(new HostRequest());
  r->counts.resize(size_);
  for (int i = 0; i < size_; ++i) {
    if (counts[i] > INT_MAX)
      return tooLarge("startReduceScatterV");
    r->counts[i] = static_cast<int>(counts[i]);
  }
  if (int rc = check(MPI_Ireduce_scatter(send, recv, r->counts.data(), MPI_FLOAT,
                                         MPI_SUM, handle(comm_), &r->request),
                     "MPI_Ireduce_scatter"))
    return rc;
  out = std::move(r);
  return 0;
}

int HostComm::startAllReduce(float *buf, int64_t count, HostRequestPtr &out) {
  if (count > INT_MAX)
    return tooLarge("startAllReduce");
  HostRequestPtr r(new HostRequest());
  if (int rc = check(MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(count),
                                    MPI_FLOAT, MPI_SUM, handle(comm_), &r->request),
                     "MPI_Iallreduce"))
    return rc;
  out = std::move(r);
  return 0;
}

int HostComm::wait(HostRequest &request) {
  return check(MPI_Wait(&request.request, MPI_STATUS_IGNORE), "MPI_Wait");
}

} // namespace mfsdp::rt

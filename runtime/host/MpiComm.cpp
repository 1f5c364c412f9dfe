//===- MpiComm.cpp - Collectives of the host backend over MPI -------------===//
#include "mfsdp/runtime/HostComm.h"
#include "mfsdp/runtime/Kernels.h"

#include <mpi.h>

#include <climits>

namespace mfsdp::rt {

namespace {

int check(int code, const char *what) {
  if (code == MPI_SUCCESS)
    return 0;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return HostComm::fail(code, std::string(what) + " failed: " +
                                        std::string(text, static_cast<size_t>(len)));
}

/// The reduce dtype bf16's sum as an MPI_Op's function (MPI_UINT16_T
/// elements holding bf16 bits): inout = in + inout, rounded to bf16.
void sumBF16Op(void *in, void *inout, int *len, MPI_Datatype *) {
  host::sumBF16(static_cast<const uint16_t *>(in), static_cast<uint16_t *>(inout), *len);
}

int tooLarge(const char *what) {
  return HostComm::fail(MPI_ERR_COUNT, std::string(what) +
                                                 ": more than 2^31-1 elements in one call");
}

/// A started MPI collective and the arrays MPI reads until it completes.
struct MpiRequest final : HostRequest {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<int> counts, displs;
  ~MpiRequest() override {
    // Never leave a collective unwaited: its buffers may be reused next.
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && request != MPI_REQUEST_NULL)
      MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
  int wait() override { return check(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait"); }
};

class MpiComm final : public HostComm {
public:
  MpiComm(MPI_Comm comm, int rank, int size) : HostComm(rank, size), comm_(comm) {
    // Commutative: MPI may combine the ranks' contributions in any order.
    if (MPI_Op_create(&sumBF16Op, 1, &sumBF16_) != MPI_SUCCESS)
      sumBF16_ = MPI_OP_NULL;
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && sumBF16_ != MPI_OP_NULL)
      MPI_Op_free(&sumBF16_);
    if (!finalized && comm_ != MPI_COMM_NULL)
      MPI_Comm_free(&comm_);
  }

  int allGather(const float *send, float *recv, int64_t count) override {
    if (count > INT_MAX)
      return tooLarge("allGather");
    return check(MPI_Allgather(send, static_cast<int>(count), MPI_FLOAT, recv,
                               static_cast<int>(count), MPI_FLOAT, comm_),
                 "MPI_Allgather");
  }

  int reduceScatter(const float *send, float *recv, int64_t count) override {
    if (count > INT_MAX)
      return tooLarge("reduceScatter");
    return check(MPI_Reduce_scatter_block(send, recv, static_cast<int>(count),
                                          MPI_FLOAT, MPI_SUM, comm_),
                 "MPI_Reduce_scatter_block");
  }

  int allReduce(float *buf, int64_t count) override {
    return allReduceOf(buf, count, MPI_FLOAT);
  }

  int allReduce(double *buf, int64_t count) override {
    return allReduceOf(buf, count, MPI_DOUBLE);
  }

  int allGatherV(const float *send, float *recv,
                 const std::vector<int64_t> &counts) override {
    std::vector<int> c, displs;
    if (int rc = toInts("allGatherV", counts, c, &displs))
      return rc;
    return check(MPI_Allgatherv(send, c[rank()], MPI_FLOAT, recv, c.data(), displs.data(),
                                MPI_FLOAT, comm_),
                 "MPI_Allgatherv");
  }

  int reduceScatterV(const float *send, float *recv,
                     const std::vector<int64_t> &counts) override {
    std::vector<int> c;
    if (int rc = toInts("reduceScatterV", counts, c, nullptr))
      return rc;
    return check(MPI_Reduce_scatter(send, recv, c.data(), MPI_FLOAT, MPI_SUM, comm_),
                 "MPI_Reduce_scatter");
  }

  int broadcast(float *buf, int64_t count, int root) override {
    if (count > INT_MAX)
      return tooLarge("broadcast");
    if (int rc = checkRoot("broadcast", root, MPI_ERR_ROOT))
      return rc;
    return check(MPI_Bcast(buf, static_cast<int>(count), MPI_FLOAT, root, comm_),
                 "MPI_Bcast");
  }

  int broadcastMany(const std::vector<BroadcastPart> &parts) override {
    for (const BroadcastPart &p : parts) {
      if (p.count > INT_MAX)
        return tooLarge("broadcast");
      if (int rc = checkRoot("broadcast", p.root, MPI_ERR_ROOT))
        return rc;
    }
    std::vector<MPI_Request> requests;
    requests.reserve(parts.size());
    int rc = 0;
    for (const BroadcastPart &p : parts) {
      MPI_Request r = MPI_REQUEST_NULL;
      if ((rc = check(MPI_Ibcast(p.buf, static_cast<int>(p.count), MPI_FLOAT, p.root,
                                 comm_, &r),
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

  int barrier() override { return check(MPI_Barrier(comm_), "MPI_Barrier"); }

  int startAllGather(const float *send, float *recv, int64_t count,
                     HostRequestPtr &out) override {
    if (count > INT_MAX)
      return tooLarge("startAllGather");
    auto r = std::make_unique<MpiRequest>();
    if (int rc = check(MPI_Iallgather(send, static_cast<int>(count), MPI_FLOAT, recv,
                                      static_cast<int>(count), MPI_FLOAT, comm_,
                                      &r->request),
                       "MPI_Iallgather"))
      return rc;
    out = std::move(r);
    return 0;
  }

  int startAllGatherV(const float *send, float *recv, const std::vector<int64_t> &counts,
                      HostRequestPtr &out) override {
    auto r = std::make_unique<MpiRequest>();
    if (int rc = toInts("startAllGatherV", counts, r->counts, &r->displs))
      return rc;
    if (int rc = check(MPI_Iallgatherv(send, r->counts[rank()], MPI_FLOAT, recv,
                                       r->counts.data(), r->displs.data(), MPI_FLOAT,
                                       comm_, &r->request),
                       "MPI_Iallgatherv"))
      return rc;
    out = std::move(r);
    return 0;
  }

  int startReduceScatter(const float *send, float *recv, int64_t count,
                         HostRequestPtr &out) override {
    if (count > INT_MAX)
      return tooLarge("startReduceScatter");
    auto r = std::make_unique<MpiRequest>();
    if (int rc = check(MPI_Ireduce_scatter_block(send, recv, static_cast<int>(count),
                                                 MPI_FLOAT, MPI_SUM, comm_, &r->request),
                       "MPI_Ireduce_scatter_block"))
      return rc;
    out = std::move(r);
    return 0;
  }

  int startReduceScatterV(const float *send, float *recv,
                          const std::vector<int64_t> &counts,
                          HostRequestPtr &out) override {
    auto r = std::make_unique<MpiRequest>();
    if (int rc = toInts("startReduceScatterV", counts, r->counts, nullptr))
      return rc;
    if (int rc = check(MPI_Ireduce_scatter(send, recv, r->counts.data(), MPI_FLOAT,
                                           MPI_SUM, comm_, &r->request),
                       "MPI_Ireduce_scatter"))
      return rc;
    out = std::move(r);
    return 0;
  }

  int startAllReduce(float *buf, int64_t count, HostRequestPtr &out) override {
    if (count > INT_MAX)
      return tooLarge("startAllReduce");
    auto r = std::make_unique<MpiRequest>();
    if (int rc = check(MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(count),
                                      MPI_FLOAT, MPI_SUM, comm_, &r->request),
                       "MPI_Iallreduce"))
      return rc;
    out = std::move(r);
    return 0;
  }

  int allGather16(const uint16_t *send, uint16_t *recv, const std::vector<int64_t> &counts,
                  HostRequestPtr *out) override {
    auto r = std::make_unique<MpiRequest>();
    if (int rc = toInts("allGather16", counts, r->counts, &r->displs))
      return rc;
    // MPI does not let send alias recv: in place is MPI_IN_PLACE.
    const void *from = send == recv + r->displs[rank()] ? MPI_IN_PLACE : send;
    if (!out)
      return check(MPI_Allgatherv(from, r->counts[rank()], MPI_UINT16_T, recv,
                                  r->counts.data(), r->displs.data(), MPI_UINT16_T, comm_),
                   "MPI_Allgatherv (16-bit)");
    if (int rc = check(MPI_Iallgatherv(from, r->counts[rank()], MPI_UINT16_T, recv,
                                       r->counts.data(), r->displs.data(), MPI_UINT16_T,
                                       comm_, &r->request),
                       "MPI_Iallgatherv (16-bit)"))
      return rc;
    *out = std::move(r);
    return 0;
  }

  int reduceScatterBF16(const uint16_t *send, uint16_t *recv,
                        const std::vector<int64_t> &counts, HostRequestPtr *out) override {
    if (sumBF16_ == MPI_OP_NULL)
      return HostComm::fail(MPI_ERR_OP, "reduceScatterBF16: MPI_Op_create failed");
    auto r = std::make_unique<MpiRequest>();
    if (int rc = toInts("reduceScatterBF16", counts, r->counts, nullptr))
      return rc;
    if (!out)
      return check(MPI_Reduce_scatter(send, recv, r->counts.data(), MPI_UINT16_T, sumBF16_,
                                      comm_),
                   "MPI_Reduce_scatter (bf16)");
    if (int rc = check(MPI_Ireduce_scatter(send, recv, r->counts.data(), MPI_UINT16_T,
                                           sumBF16_, comm_, &r->request),
                       "MPI_Ireduce_scatter (bf16)"))
      return rc;
    *out = std::move(r);
    return 0;
  }

  int allReduceBF16(uint16_t *buf, int64_t count, HostRequestPtr *out) override {
    if (sumBF16_ == MPI_OP_NULL)
      return HostComm::fail(MPI_ERR_OP, "allReduceBF16: MPI_Op_create failed");
    if (count > INT_MAX)
      return tooLarge("allReduceBF16");
    if (!out)
      return check(MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(count), MPI_UINT16_T,
                                 sumBF16_, comm_),
                   "MPI_Allreduce (bf16)");
    auto r = std::make_unique<MpiRequest>();
    if (int rc = check(MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(count),
                                      MPI_UINT16_T, sumBF16_, comm_, &r->request),
                       "MPI_Iallreduce (bf16)"))
      return rc;
    *out = std::move(r);
    return 0;
  }

private:
  /// count elements of `type` at buf = their sum over the group, in place.
  int allReduceOf(void *buf, int64_t count, MPI_Datatype type) {
    if (count > INT_MAX)
      return tooLarge("allReduce");
    return check(MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(count), type, MPI_SUM,
                               comm_),
                 "MPI_Allreduce");
  }

  /// MPI's int counts of `counts` (one per rank), and with `displs` their
  /// offsets; MPI_ERR_COUNT with lastError() set when they do not fit.
  int toInts(const char *what, const std::vector<int64_t> &counts, std::vector<int> &c,
             std::vector<int> *displs) const {
    if (int rc = checkCounts(what, counts, MPI_ERR_COUNT))
      return rc;
    c.resize(counts.size());
    if (displs)
      displs->resize(counts.size());
    int64_t offset = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      if (counts[r] > INT_MAX || (displs && offset > INT_MAX))
        return tooLarge(what);
      c[r] = static_cast<int>(counts[r]);
      if (displs)
        (*displs)[r] = static_cast<int>(offset);
      offset += counts[r];
    }
    return 0;
  }

  MPI_Comm comm_;
  MPI_Op sumBF16_ = MPI_OP_NULL; // the reduce dtype bf16's sum (sumBF16Op)
};

} // namespace

HostComm *HostComm::createMpi(const std::vector<MeshDimSpec> &mesh,
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
  if (check(MPI_Comm_split(MPI_COMM_WORLD, colour, coord, &comm), "MPI_Comm_split")) {
    error = lastError();
    return nullptr;
  }
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int groupRank = 0, groupSize = 1;
  MPI_Comm_rank(comm, &groupRank);
  MPI_Comm_size(comm, &groupSize);
  return new MpiComm(comm, groupRank, groupSize);
}

} // namespace mfsdp::rt

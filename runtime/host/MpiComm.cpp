//===- MpiComm.cpp - Collectives of the host backend over MPI -------------===//
#include "mfsdp/runtime/HostComm.h"
#include "mfsdp/runtime/Kernels.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <string>
#include <thread>

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

class MpiComm;

/// A started MPI collective and the arrays MPI reads until it completes.
struct MpiRequest final : HostRequest {
  explicit MpiRequest(MpiComm &comm, const char *what) : comm(comm), what(what) {}
  ~MpiRequest() override;
  int wait() override;

  MpiComm &comm;
  const char *what; // the MPI call, for the watchdog's message
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<int> counts, displs;
};

class MpiComm final : public HostComm {
public:
  MpiComm(MPI_Comm comm, std::string name, int rank, int size)
      : HostComm(rank, size), comm_(comm), name_(std::move(name)) {
    // Commutative: MPI may combine the ranks' contributions in any order.
    if (MPI_Op_create(&sumBF16Op, 1, &sumBF16_) != MPI_SUCCESS)
      sumBF16_ = MPI_OP_NULL;
    // The watchdog's side channel: after a timeout the ranks of the group
    // that are alive tell each other how far they got, on a communicator
    // of their own (no collective of this group can match its messages).
    if (MPI_Comm_dup(comm_, &diag_) == MPI_SUCCESS)
      MPI_Comm_set_errhandler(diag_, MPI_ERRORS_RETURN);
    else
      diag_ = MPI_COMM_NULL;
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && sumBF16_ != MPI_OP_NULL)
      MPI_Op_free(&sumBF16_);
    if (!finalized && diag_ != MPI_COMM_NULL)
      MPI_Comm_free(&diag_);
    if (!finalized && comm_ != MPI_COMM_NULL)
      MPI_Comm_free(&comm_);
  }

  void setTimeout(int64_t ms) override {
    timeoutMs_ = ms > 0 ? ms : kCollectiveTimeoutMsDefault;
  }
  bool broken() const override { return broken_; }

  /// Completes `request` (one collective `what` of this group), waiting at
  /// most the timeout: MPI_Test in a loop, spinning first (a collective
  /// usually completes within microseconds of the last rank arriving),
  /// then sleeping up to 1 ms between tests. On timeout the group is broken
  /// and the message names the collective, the group and what the other
  /// ranks said of themselves (diagnose).
  int await(MPI_Request &request, const char *what) {
    if (broken_)
      return brokenError(what);
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    const Clock::time_point deadline = start + std::chrono::milliseconds(timeoutMs_);
    std::chrono::microseconds nap(0);
    for (int tries = 0;; ++tries) {
      int done = 0;
      if (int rc = check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what))
        return rc;
      if (done)
        return 0;
      if (tries > 2000) {
        if (Clock::now() >= deadline)
          break;
        nap = std::min(std::chrono::microseconds(1000),
                       nap + std::chrono::microseconds(20));
        std::this_thread::sleep_for(nap);
      }
    }
    // The request cannot be cancelled (MPI forbids it for collectives) nor
    // waited for: it is left behind, and the group with it.
    broken_ = true;
    request = MPI_REQUEST_NULL;
    std::string message = std::string(what) + " in the " + name_ + " group (" +
                          std::to_string(size()) + " ranks) did not complete within " +
                          std::to_string(timeoutMs_) + " ms (the collective timeout): " +
                          diagnose();
    return HostComm::fail(MPI_ERR_PENDING, message);
  }

  int brokenError(const char *what) const {
    return HostComm::fail(MPI_ERR_PENDING,
                          std::string(what) + ": a collective of the " + name_ +
                              " group timed out earlier; nothing more can run on it "
                              "(destroy the runtime and end the job)");
  }

  int allGather(const float *send, float *recv, int64_t count) override {
    if (count > INT_MAX)
      return tooLarge("allGather");
    return run("MPI_Iallgather", [&](MPI_Request *q) {
      return MPI_Iallgather(send, static_cast<int>(count), MPI_FLOAT, recv,
                            static_cast<int>(count), MPI_FLOAT, comm_, q);
    });
  }

  int reduceScatter(const float *send, float *recv, int64_t count) override {
    if (count > INT_MAX)
      return tooLarge("reduceScatter");
    return run("MPI_Ireduce_scatter_block", [&](MPI_Request *q) {
      return MPI_Ireduce_scatter_block(send, recv, static_cast<int>(count), MPI_FLOAT,
                                       MPI_SUM, comm_, q);
    });
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
    return run("MPI_Iallgatherv", [&](MPI_Request *q) {
      return MPI_Iallgatherv(send, c[rank()], MPI_FLOAT, recv, c.data(), displs.data(),
                             MPI_FLOAT, comm_, q);
    });
  }

  int reduceScatterV(const float *send, float *recv,
                     const std::vector<int64_t> &counts) override {
    std::vector<int> c;
    if (int rc = toInts("reduceScatterV", counts, c, nullptr))
      return rc;
    return run("MPI_Ireduce_scatter", [&](MPI_Request *q) {
      return MPI_Ireduce_scatter(send, recv, c.data(), MPI_FLOAT, MPI_SUM, comm_, q);
    });
  }

  int broadcast(float *buf, int64_t count, int root) override {
    if (count > INT_MAX)
      return tooLarge("broadcast");
    if (int rc = checkRoot("broadcast", root, MPI_ERR_ROOT))
      return rc;
    return run("MPI_Ibcast", [&](MPI_Request *q) {
      return MPI_Ibcast(buf, static_cast<int>(count), MPI_FLOAT, root, comm_, q);
    });
  }

  int broadcastMany(const std::vector<BroadcastPart> &parts) override {
    for (const BroadcastPart &p : parts) {
      if (p.count > INT_MAX)
        return tooLarge("broadcast");
      if (int rc = checkRoot("broadcast", p.root, MPI_ERR_ROOT))
        return rc;
    }
    if (broken_)
      return brokenError("MPI_Ibcast");
    std::vector<MPI_Request> requests;
    requests.reserve(parts.size());
    int rc = 0;
    for (const BroadcastPart &p : parts) {
      MPI_Request r = MPI_REQUEST_NULL;
      if ((rc = check(MPI_Ibcast(p.buf, static_cast<int>(p.count), MPI_FLOAT, p.root,
                                 comm_, &r),
                      "MPI_Ibcast")))
        break;
      started();
      requests.push_back(r);
    }
    // What was started completes before its buffers can be touched again,
    // each within the timeout.
    int waited = 0;
    for (MPI_Request &r : requests)
      if (int w = await(r, "MPI_Ibcast"); w && !waited)
        waited = w;
    return rc ? rc : waited;
  }

  int barrier() override {
    return run("MPI_Ibarrier", [&](MPI_Request *q) { return MPI_Ibarrier(comm_, q); });
  }

  int startAllGather(const float *send, float *recv, int64_t count,
                     HostRequestPtr &out) override {
    if (count > INT_MAX)
      return tooLarge("startAllGather");
    if (broken_)
      return brokenError("MPI_Iallgather");
    auto r = std::make_unique<MpiRequest>(*this, "MPI_Iallgather");
    if (int rc = check(MPI_Iallgather(send, static_cast<int>(count), MPI_FLOAT, recv,
                                      static_cast<int>(count), MPI_FLOAT, comm_,
                                      &r->request),
                       "MPI_Iallgather"))
      return rc;
    started();
    out = std::move(r);
    return 0;
  }

  int startAllGatherV(const float *send, float *recv, const std::vector<int64_t> &counts,
                      HostRequestPtr &out) override {
    if (broken_)
      return brokenError("MPI_Iallgatherv");
    auto r = std::make_unique<MpiRequest>(*this, "MPI_Iallgatherv");
    if (int rc = toInts("startAllGatherV", counts, r->counts, &r->displs))
      return rc;
    if (int rc = check(MPI_Iallgatherv(send, r->counts[rank()], MPI_FLOAT, recv,
                                       r->counts.data(), r->displs.data(), MPI_FLOAT,
                                       comm_, &r->request),
                       "MPI_Iallgatherv"))
      return rc;
    started();
    out = std::move(r);
    return 0;
  }

  int startReduceScatter(const float *send, float *recv, int64_t count,
                         HostRequestPtr &out) override {
    if (count > INT_MAX)
      return tooLarge("startReduceScatter");
    if (broken_)
      return brokenError("MPI_Ireduce_scatter_block");
    auto r = std::make_unique<MpiRequest>(*this, "MPI_Ireduce_scatter_block");
    if (int rc = check(MPI_Ireduce_scatter_block(send, recv, static_cast<int>(count),
                                                 MPI_FLOAT, MPI_SUM, comm_, &r->request),
                       "MPI_Ireduce_scatter_block"))
      return rc;
    started();
    out = std::move(r);
    return 0;
  }

  int startReduceScatterV(const float *send, float *recv,
                          const std::vector<int64_t> &counts,
                          HostRequestPtr &out) override {
    if (broken_)
      return brokenError("MPI_Ireduce_scatter");
    auto r = std::make_unique<MpiRequest>(*this, "MPI_Ireduce_scatter");
    if (int rc = toInts("startReduceScatterV", counts, r->counts, nullptr))
      return rc;
    if (int rc = check(MPI_Ireduce_scatter(send, recv, r->counts.data(), MPI_FLOAT,
                                           MPI_SUM, comm_, &r->request),
                       "MPI_Ireduce_scatter"))
      return rc;
    started();
    out = std::move(r);
    return 0;
  }

  int startAllReduce(float *buf, int64_t count, HostRequestPtr &out) override {
    if (count > INT_MAX)
      return tooLarge("startAllReduce");
    if (broken_)
      return brokenError("MPI_Iallreduce");
    auto r = std::make_unique<MpiRequest>(*this, "MPI_Iallreduce");
    if (int rc = check(MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(count),
                                      MPI_FLOAT, MPI_SUM, comm_, &r->request),
                       "MPI_Iallreduce"))
      return rc;
    started();
    out = std::move(r);
    return 0;
  }

  int allGather16(const uint16_t *send, uint16_t *recv, const std::vector<int64_t> &counts,
                  HostRequestPtr *out) override {
    if (broken_)
      return brokenError("MPI_Iallgatherv (16-bit)");
    auto r = std::make_unique<MpiRequest>(*this, "MPI_Iallgatherv (16-bit)");
    if (int rc = toInts("allGather16", counts, r->counts, &r->displs))
      return rc;
    // MPI does not let send alias recv: in place is MPI_IN_PLACE.
    const void *from = send == recv + r->displs[rank()] ? MPI_IN_PLACE : send;
    if (!out)
      return run("MPI_Iallgatherv (16-bit)", [&](MPI_Request *q) {
        return MPI_Iallgatherv(from, r->counts[rank()], MPI_UINT16_T, recv,
                               r->counts.data(), r->displs.data(), MPI_UINT16_T, comm_, q);
      });
    if (int rc = check(MPI_Iallgatherv(from, r->counts[rank()], MPI_UINT16_T, recv,
                                       r->counts.data(), r->displs.data(), MPI_UINT16_T,
                                       comm_, &r->request),
                       "MPI_Iallgatherv (16-bit)"))
      return rc;
    started();
    *out = std::move(r);
    return 0;
  }

  int reduceScatterBF16(const uint16_t *send, uint16_t *recv,
                        const std::vector<int64_t> &counts, HostRequestPtr *out) override {
    if (sumBF16_ == MPI_OP_NULL)
      return HostComm::fail(MPI_ERR_OP, "reduceScatterBF16: MPI_Op_create failed");
    if (broken_)
      return brokenError("MPI_Ireduce_scatter (bf16)");
    auto r = std::make_unique<MpiRequest>(*this, "MPI_Ireduce_scatter (bf16)");
    if (int rc = toInts("reduceScatterBF16", counts, r->counts, nullptr))
      return rc;
    if (!out)
      return run("MPI_Ireduce_scatter (bf16)", [&](MPI_Request *q) {
        return MPI_Ireduce_scatter(send, recv, r->counts.data(), MPI_UINT16_T, sumBF16_,
                                   comm_, q);
      });
    if (int rc = check(MPI_Ireduce_scatter(send, recv, r->counts.data(), MPI_UINT16_T,
                                           sumBF16_, comm_, &r->request),
                       "MPI_Ireduce_scatter (bf16)"))
      return rc;
    started();
    *out = std::move(r);
    return 0;
  }

  int allReduceBF16(uint16_t *buf, int64_t count, HostRequestPtr *out) override {
    if (sumBF16_ == MPI_OP_NULL)
      return HostComm::fail(MPI_ERR_OP, "allReduceBF16: MPI_Op_create failed");
    if (count > INT_MAX)
      return tooLarge("allReduceBF16");
    if (!out)
      return run("MPI_Iallreduce (bf16)", [&](MPI_Request *q) {
        return MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(count), MPI_UINT16_T,
                              sumBF16_, comm_, q);
      });
    if (broken_)
      return brokenError("MPI_Iallreduce (bf16)");
    auto r = std::make_unique<MpiRequest>(*this, "MPI_Iallreduce (bf16)");
    if (int rc = check(MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(count),
                                      MPI_UINT16_T, sumBF16_, comm_, &r->request),
                       "MPI_Iallreduce (bf16)"))
      return rc;
    started();
    *out = std::move(r);
    return 0;
  }

private:
  /// One collective issued by `issue` (MPI's nonblocking call, writing its
  /// request) and completed within the timeout.
  template <typename Issue> int run(const char *what, Issue issue) {
    if (broken_)
      return brokenError(what);
    MPI_Request request = MPI_REQUEST_NULL;
    if (int rc = check(issue(&request), what))
      return rc;
    started();
    return await(request, what);
  }

  /// count elements of `type` at buf = their sum over the group, in place.
  int allReduceOf(void *buf, int64_t count, MPI_Datatype type) {
    if (count > INT_MAX)
      return tooLarge("allReduce");
    return run("MPI_Iallreduce", [&](MPI_Request *q) {
      return MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(count), type, MPI_SUM,
                            comm_, q);
    });
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

  /// After a timeout: each rank of the group that is alive and has timed
  /// out too sends the others how many collectives it has started on the
  /// group, on the side channel, and waits kDiagnoseMs for theirs. A rank
  /// that does not answer is stopped, dead or busy outside mfsdp; one whose
  /// count is lower is still at an earlier collective (it skipped or has
  /// not reached this one), higher: it went past it.
  std::string diagnose() {
    if (diag_ == MPI_COMM_NULL || size() <= 1)
      return "no other rank to ask";
    const int W = size(), me = rank();
    std::vector<unsigned long long> theirs(static_cast<size_t>(W), 0);
    const unsigned long long mine = started_;
    std::vector<MPI_Request> recvs(static_cast<size_t>(W), MPI_REQUEST_NULL);
    std::vector<MPI_Request> sends;
    for (int r = 0; r < W; ++r) {
      if (r == me)
        continue;
      MPI_Irecv(&theirs[r], 1, MPI_UNSIGNED_LONG_LONG, r, kDiagnoseTag, diag_, &recvs[r]);
      MPI_Request s = MPI_REQUEST_NULL;
      MPI_Isend(&mine, 1, MPI_UNSIGNED_LONG_LONG, r, kDiagnoseTag, diag_, &s);
      sends.push_back(s);
    }
    using Clock = std::chrono::steady_clock;
    const Clock::time_point until = Clock::now() + std::chrono::milliseconds(kDiagnoseMs);
    std::vector<bool> answered(static_cast<size_t>(W), false);
    answered[me] = true;
    int pending = W - 1;
    while (pending > 0 && Clock::now() < until) {
      for (int r = 0; r < W; ++r) {
        int done = 0;
        if (answered[r] || recvs[r] == MPI_REQUEST_NULL)
          continue;
        MPI_Test(&recvs[r], &done, MPI_STATUS_IGNORE);
        if (done) {
          answered[r] = true;
          --pending;
        }
      }
      if (pending > 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // What never arrived stays unanswered: its requests are dropped.
    for (int r = 0; r < W; ++r)
      if (!answered[r] && recvs[r] != MPI_REQUEST_NULL)
        MPI_Request_free(&recvs[r]);
    for (MPI_Request &q : sends) {
      int done = 0;
      MPI_Test(&q, &done, MPI_STATUS_IGNORE);
      if (!done && q != MPI_REQUEST_NULL)
        MPI_Request_free(&q);
    }
    // Group ranks as world ranks (what mpirun and the user see).
    std::vector<int> groupRanks(static_cast<size_t>(W)), worldRanks(static_cast<size_t>(W), -1);
    for (int r = 0; r < W; ++r)
      groupRanks[r] = r;
    MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    if (MPI_Comm_group(comm_, &group) == MPI_SUCCESS &&
        MPI_Comm_group(MPI_COMM_WORLD, &world) == MPI_SUCCESS)
      MPI_Group_translate_ranks(group, W, groupRanks.data(), world, worldRanks.data());
    if (group != MPI_GROUP_NULL)
      MPI_Group_free(&group);
    if (world != MPI_GROUP_NULL)
      MPI_Group_free(&world);
    std::string silent, behind, ahead;
    auto add = [&](std::string &list, int r) {
      list += (list.empty() ? "" : ", ") + std::to_string(worldRanks[r] >= 0 ? worldRanks[r] : r);
    };
    for (int r = 0; r < W; ++r) {
      if (r == me)
        continue;
      if (!answered[r])
        add(silent, r);
      else if (theirs[r] < mine)
        add(behind, r);
      else if (theirs[r] > mine)
        add(ahead, r);
    }
    std::string out;
    auto part = [&](const std::string &list, const std::string &what) {
      if (list.empty())
        return;
      out += (out.empty() ? "" : "; ") + std::string(list.find(',') == std::string::npos
                                                          ? "rank "
                                                          : "ranks ") +
             list + " " + what;
    };
    part(silent, "did not answer within " + std::to_string(kDiagnoseMs) +
                     " ms (stopped, dead, or not calling mfsdp)");
    part(behind, "had started fewer collectives of this group (they skipped "
                 "this one or never reached it)");
    part(ahead, "had started more collectives of this group (they went past "
                "this one)");
    if (out.empty())
      out = "every rank of the group answered at this collective (a rank "
            "outside the group holds it up?)";
    return "as seen from world rank " +
           std::to_string(worldRanks[me] >= 0 ? worldRanks[me] : me) + ": " + out;
  }

  friend struct MpiRequest;
  /// Counts a collective started on the group (the watchdog compares it).
  void started() { ++started_; }

  static constexpr int kDiagnoseTag = 7101;
  static constexpr int kDiagnoseMs = 2000;

  MPI_Comm comm_;
  MPI_Comm diag_ = MPI_COMM_NULL;
  std::string name_;             // the mesh dim of the group
  int64_t timeoutMs_ = kCollectiveTimeoutMsDefault;
  bool broken_ = false;
  unsigned long long started_ = 0;
  MPI_Op sumBF16_ = MPI_OP_NULL; // the reduce dtype bf16's sum (sumBF16Op)
};

MpiRequest::~MpiRequest() {
  // Never leave a collective unwaited: its buffers may be reused next. One
  // that timed out (the group is broken) is left to MPI.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && request != MPI_REQUEST_NULL && !comm.broken())
    comm.await(request, what);
}

int MpiRequest::wait() { return comm.await(request, what); }

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
  return new MpiComm(comm, dim, groupRank, groupSize);
}

} // namespace mfsdp::rt

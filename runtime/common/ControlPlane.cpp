//===- ControlPlane.cpp - MPI and torchrun worlds for mfsdp_create --------===//
#include "mfsdp/runtime/ControlPlane.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <memory>
#include <thread>

namespace mfsdp::rt {

ControlPlane::~ControlPlane() = default;

namespace {

class MpiControlPlane final : public ControlPlane {
public:
  MpiControlPlane() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    // The rank on this node, found here, by every rank at the same point:
    // MPI_Comm_split_type is collective, so asking for it later, on some
    // ranks only (those with a device to choose), would deadlock.
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_,
                            MPI_INFO_NULL, &node) == MPI_SUCCESS) {
      MPI_Comm_rank(node, &local_);
      MPI_Comm_free(&node);
    }
  }
  const char *name() const override { return "MPI"; }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  int localRank() const override { return local_; }
  bool minMax(const std::vector<int64_t> &mine, std::vector<int64_t> &lo,
              std::vector<int64_t> &hi, std::string &error) override {
    std::vector<long long> in(mine.begin(), mine.end()), a(mine.size()), b(mine.size());
    const int n = static_cast<int>(mine.size());
    MPI_Request q[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    if (!issued(MPI_Iallreduce(in.data(), a.data(), n, MPI_LONG_LONG, MPI_MIN,
                               MPI_COMM_WORLD, &q[0]),
                "MPI_Iallreduce", error) ||
        !issued(MPI_Iallreduce(in.data(), b.data(), n, MPI_LONG_LONG, MPI_MAX,
                               MPI_COMM_WORLD, &q[1]),
                "MPI_Iallreduce", error) ||
        !finish(q[0], "MPI_Iallreduce (agreeing on values)", error) ||
        !finish(q[1], "MPI_Iallreduce (agreeing on values)", error))
      return false;
    lo.assign(a.begin(), a.end());
    hi.assign(b.begin(), b.end());
    return true;
  }
  bool broadcast(std::vector<uint8_t> &blob, std::string &error) override {
    long long n = static_cast<long long>(blob.size());
    MPI_Request q = MPI_REQUEST_NULL;
    if (!issued(MPI_Ibcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD, &q), "MPI_Ibcast",
                error) ||
        !finish(q, "MPI_Ibcast (a blob's size)", error))
      return false;
    blob.resize(static_cast<size_t>(n));
    if (!issued(MPI_Ibcast(blob.data(), static_cast<int>(n), MPI_BYTE, 0, MPI_COMM_WORLD,
                           &q),
                "MPI_Ibcast", error) ||
        !finish(q, "MPI_Ibcast (a blob)", error))
      return false;
    return true;
  }
  bool allGather(const std::vector<uint8_t> &mine, std::vector<std::vector<uint8_t>> &all,
                 std::string &error) override {
    if (mine.size() > kMaxBlobBytes) {
      error = "a blob of " + std::to_string(mine.size()) +
              " bytes to exchange; expected at most 1 MiB";
      return false;
    }
    int n = static_cast<int>(mine.size());
    std::vector<int> sizes(world_), displs(world_);
    MPI_Request q = MPI_REQUEST_NULL;
    if (!issued(MPI_Iallgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD,
                               &q),
                "MPI_Iallgather", error) ||
        !finish(q, "MPI_Iallgather (blob sizes)", error))
      return false;
    int64_t total = 0;
    for (int r = 0; r < world_; ++r) {
      displs[r] = static_cast<int>(total);
      total += sizes[r];
    }
    if (total > INT_MAX) {
      error = "the blobs to exchange add up to more than 2 GiB";
      return false;
    }
    std::vector<uint8_t> bytes(static_cast<size_t>(total));
    if (!issued(MPI_Iallgatherv(mine.data(), n, MPI_BYTE, bytes.data(), sizes.data(),
                                displs.data(), MPI_BYTE, MPI_COMM_WORLD, &q),
                "MPI_Iallgatherv", error) ||
        !finish(q, "MPI_Iallgatherv (blobs)", error))
      return false;
    all.assign(world_, {});
    for (int r = 0; r < world_; ++r)
      all[r].assign(bytes.begin() + displs[r], bytes.begin() + displs[r] + sizes[r]);
    return true;
  }

  void setTimeout(int64_t ms) override { timeoutMs_ = ms > 0 ? ms : timeoutMs_; }

private:
  bool issued(int rc, const char *what, std::string &error) {
    if (broken_) {
      error = std::string(what) + ": an earlier exchange of the MPI control plane "
                                  "timed out; nothing more can run on it";
      return false;
    }
    if (rc != MPI_SUCCESS) {
      error = std::string(what) + " failed";
      return false;
    }
    return true;
  }
  /// Completes `q` within the timeout (MPI_Test against the deadline); on
  /// timeout the request is left behind and the plane is broken.
  bool finish(MPI_Request &q, const char *what, std::string &error) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeoutMs_);
    std::chrono::microseconds nap(0);
    for (int tries = 0;; ++tries) {
      int done = 0;
      if (MPI_Test(&q, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        error = std::string(what) + " failed";
        return false;
      }
      if (done)
        return true;
      if (tries > 2000) {
        if (Clock::now() >= deadline)
          break;
        nap = std::min(std::chrono::microseconds(1000), nap + std::chrono::microseconds(20));
        std::this_thread::sleep_for(nap);
      }
    }
    broken_ = true;
    q = MPI_REQUEST_NULL;
    error = std::string(what) + " among the " + std::to_string(world_) +
            " MPI ranks did not complete within " + std::to_string(timeoutMs_) +
            " ms (the collective timeout): a rank stopped, died, or calls "
            "something else";
    return false;
  }

  int rank_ = 0, world_ = 1, local_ = 0;
  int64_t timeoutMs_ = 10LL * 60 * 1000;
  bool broken_ = false;
};

class TorchrunControlPlane final : public ControlPlane {
public:
  explicit TorchrunControlPlane(std::unique_ptr<TcpStar> star) : star_(std::move(star)) {}
  const char *name() const override { return "torchrun"; }
  int rank() const override { return star_->env().rank; }
  int world() const override { return star_->env().world; }
  int localRank() const override { return star_->env().localRank; }
  const RankEnv *rankEnv() const override { return &star_->env(); }

  bool minMax(const std::vector<int64_t> &mine, std::vector<int64_t> &lo,
              std::vector<int64_t> &hi, std::string &error) override {
    std::vector<uint8_t> bytes(mine.size() * 8);
    for (size_t i = 0; i < mine.size(); ++i)
      for (int b = 0; b < 8; ++b)
        bytes[i * 8 + b] = static_cast<uint8_t>(static_cast<uint64_t>(mine[i]) >> (8 * b));
    std::vector<std::vector<uint8_t>> all;
    if (!star_->allGather(bytes, all, error))
      return false;
    lo = hi = mine;
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r].size() != bytes.size()) {
        error = "rank " + std::to_string(rank()) + ": rank " + std::to_string(r) +
                " passed " + std::to_string(all[r].size() / 8) + " values to agree on; "
                "expected " + std::to_string(mine.size()) +
                " (the ranks run different versions of libmfsdp_rt?)";
        return false;
      }
      for (size_t i = 0; i < mine.size(); ++i) {
        uint64_t v = 0;
        for (int b = 0; b < 8; ++b)
          v |= static_cast<uint64_t>(all[r][i * 8 + b]) << (8 * b);
        lo[i] = std::min(lo[i], static_cast<int64_t>(v));
        hi[i] = std::max(hi[i], static_cast<int64_t>(v));
      }
    }
    return true;
  }

  bool broadcast(std::vector<uint8_t> &blob, std::string &error) override {
    std::vector<std::vector<uint8_t>> all;
    if (!star_->allGather(rank() == 0 ? blob : std::vector<uint8_t>{}, all, error))
      return false;
    blob = std::move(all[0]);
    return true;
  }
  bool allGather(const std::vector<uint8_t> &mine, std::vector<std::vector<uint8_t>> &all,
                 std::string &error) override {
    return star_->allGather(mine, all, error);
  }
  std::string localAddress() const override { return star_->localAddress(); }

private:
  std::unique_ptr<TcpStar> star_;
};

} // namespace

ControlPlane *createMpiControlPlane() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized ? new MpiControlPlane() : nullptr;
}

ControlPlane *createTorchrunControlPlane(const RankEnv &env, int timeoutMs,
                                         std::string &error) {
  std::unique_ptr<TcpStar> star = TcpStar::connect(env, timeoutMs, error);
  return star ? new TorchrunControlPlane(std::move(star)) : nullptr;
}

} // namespace mfsdp::rt

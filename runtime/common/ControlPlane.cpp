//===- ControlPlane.cpp - MPI and torchrun worlds for mfsdp_create --------===//
#include "mfsdp/runtime/ControlPlane.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <memory>

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
    if (MPI_Allreduce(in.data(), a.data(), n, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD) !=
            MPI_SUCCESS ||
        MPI_Allreduce(in.data(), b.data(), n, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD) !=
            MPI_SUCCESS) {
      error = "MPI_Allreduce failed";
      return false;
    }
    lo.assign(a.begin(), a.end());
    hi.assign(b.begin(), b.end());
    return true;
  }
  bool broadcast(std::vector<uint8_t> &blob, std::string &error) override {
    long long n = static_cast<long long>(blob.size());
    if (MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD) != MPI_SUCCESS) {
      error = "MPI_Bcast failed";
      return false;
    }
    blob.resize(static_cast<size_t>(n));
    if (MPI_Bcast(blob.data(), static_cast<int>(n), MPI_BYTE, 0, MPI_COMM_WORLD) !=
        MPI_SUCCESS) {
      error = "MPI_Bcast failed";
      return false;
    }
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
    if (MPI_Allgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD) !=
        MPI_SUCCESS) {
      error = "MPI_Allgather failed";
      return false;
    }
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
    if (MPI_Allgatherv(mine.data(), n, MPI_BYTE, bytes.data(), sizes.data(),
                       displs.data(), MPI_BYTE, MPI_COMM_WORLD) != MPI_SUCCESS) {
      error = "MPI_Allgatherv failed";
      return false;
    }
    all.assign(world_, {});
    for (int r = 0; r < world_; ++r)
      all[r].assign(bytes.begin() + displs[r], bytes.begin() + displs[r] + sizes[r]);
    return true;
  }

private:
  int rank_ = 0, world_ = 1, local_ = 0;
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

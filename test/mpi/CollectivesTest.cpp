//===- CollectivesTest.cpp - Host collectives under mpirun ----------------===//
//
// Run as `mpirun -np N mfsdp-mpi-tests MESH` (MESH like dp_shard=4 or
// dp_replicate=2,dp_shard=2). Every rank fills its buffers from its global
// rank, so the expected results are computed in closed form here, not by
// another collective. Prints "N passed, N failed" on rank 0 and exits with 1
// on any failure.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/HostComm.h"

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace mfsdp::rt;

namespace {
int passed = 0, failed = 0, worldRank = 0;

void expect(bool ok, const std::string &what) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", worldRank, what.c_str());
  }
}

std::vector<MeshDimSpec> parseMesh(const std::string &spec) {
  std::vector<MeshDimSpec> mesh;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto eq = item.find('=');
    mesh.push_back({item.substr(0, eq), std::stoll(item.substr(eq + 1))});
  }
  return mesh;
}

/// Checks every collective on the group along `dim`.
void checkGroup(const std::vector<MeshDimSpec> &mesh, const std::string &dim) {
  std::string error;
  std::unique_ptr<HostComm> comm(HostComm::create(mesh, dim, error));
  expect(comm != nullptr, "create " + dim + ": " + error);
  if (!comm)
    return;
  const int r = comm->rank(), W = comm->size();
  const int64_t n = 5;
  // Each rank's values are distinguishable: 100 * groupRank + i.
  std::vector<float> mine(n), all(n * W);
  for (int64_t i = 0; i < n; ++i)
    mine[i] = static_cast<float>(100 * r + i);
  expect(comm->allGather(mine.data(), all.data(), n) == 0, "allGather");
  bool ok = true;
  for (int k = 0; k < W; ++k)
    for (int64_t i = 0; i < n; ++i)
      ok &= all[k * n + i] == static_cast<float>(100 * k + i);
  expect(ok, dim + " allGather values");

  // Reduce-scatter of full buffers where element j of rank k is k + j.
  std::vector<float> full(n * W), part(n);
  for (int64_t j = 0; j < n * W; ++j)
    full[j] = static_cast<float>(r + j);
  expect(comm->reduceScatter(full.data(), part.data(), n) == 0, "reduceScatter");
  ok = true;
  const float rankSum = static_cast<float>(W * (W - 1) / 2);
  for (int64_t i = 0; i < n; ++i)
    ok &= part[i] == rankSum + static_cast<float>(W) * (r * n + i);
  expect(ok, dim + " reduceScatter values");

  std::vector<float> buf(n);
  for (int64_t i = 0; i < n; ++i)
    buf[i] = static_cast<float>(r * i);
  expect(comm->allReduce(buf.data(), n) == 0, "allReduce");
  ok = true;
  for (int64_t i = 0; i < n; ++i)
    ok &= buf[i] == rankSum * static_cast<float>(i);
  expect(ok, dim + " allReduce values");

  // In double (gradient clipping's sums): values no float holds, 1 + r
  // 2^-40, sum exactly W + rankSum 2^-40.
  std::vector<double> sums = {1.0 + std::ldexp(double(r), -40), double(r)};
  expect(comm->allReduce(sums.data(), 2) == 0, "allReduce of doubles");
  expect(sums[0] == W + std::ldexp(double(rankSum), -40) && sums[1] == double(rankSum),
         dim + " allReduce of doubles values");

  // Owners: rank k contributes k + 1 values (rank W-1 contributes none when
  // W > 1, to cover an empty chunk).
  std::vector<int64_t> counts(W);
  int64_t total = 0;
  for (int k = 0; k < W; ++k) {
    counts[k] = (W > 1 && k == W - 1) ? 0 : k + 1;
    total += counts[k];
  }
  std::vector<float> chunk(counts[r] + 1), gathered(total + 1);
  for (int64_t i = 0; i < counts[r]; ++i)
    chunk[i] = static_cast<float>(1000 * r + i);
  expect(comm->allGatherV(chunk.data(), gathered.data(), counts) == 0, "allGatherV");
  ok = true;
  int64_t at = 0;
  for (int k = 0; k < W; ++k)
    for (int64_t i = 0; i < counts[k]; ++i)
      ok &= gathered[at++] == static_cast<float>(1000 * k + i);
  expect(ok, dim + " allGatherV values");

  std::vector<float> grads(total + 1), mineSum(counts[r] + 1);
  for (int64_t j = 0; j < total; ++j)
    grads[j] = static_cast<float>(r + 2 * j);
  expect(comm->reduceScatterV(grads.data(), mineSum.data(), counts) == 0,
         "reduceScatterV");
  int64_t start = 0;
  for (int k = 0; k < r; ++k)
    start += counts[k];
  ok = true;
  for (int64_t i = 0; i < counts[r]; ++i)
    ok &= mineSum[i] == rankSum + static_cast<float>(W * 2 * (start + i));
  expect(ok, dim + " reduceScatterV values");

  // Several broadcasts at once, each from another root (k mod W) and of
  // another size (k + 1 floats, one empty): every rank ends with each
  // root's values.
  const int parts = 4;
  std::vector<std::vector<float>> bufs(parts);
  std::vector<BroadcastPart> many;
  for (int k = 0; k < parts; ++k) {
    const int64_t count = k == 2 ? 0 : k + 1;
    bufs[k].assign(count + 1, -1.f);
    for (int64_t i = 0; i < count; ++i)
      bufs[k][i] = static_cast<float>(10 * r + 100 * k + i);
    many.push_back({bufs[k].data(), count, k % W});
  }
  expect(comm->broadcastMany(many) == 0, "broadcastMany");
  ok = true;
  for (int k = 0; k < parts; ++k) {
    const int64_t count = k == 2 ? 0 : k + 1;
    for (int64_t i = 0; i < count; ++i)
      ok &= bufs[k][i] == static_cast<float>(10 * (k % W) + 100 * k + i);
    ok &= bufs[k][count] == -1.f; // nothing past the count
  }
  expect(ok, dim + " broadcastMany values");
  // A root out of range is an error on every rank, not a hang.
  std::vector<BroadcastPart> badRoot = {{bufs[0].data(), 1, W}};
  expect(comm->broadcastMany(badRoot) != 0 &&
             std::string(HostComm::lastError()).find("out of range") != std::string::npos,
         dim + " broadcastMany rejects a root out of range");

  // A wrong number of counts is an error, not a crash.
  std::vector<int64_t> wrong(W + 1, 1);
  expect(comm->allGatherV(chunk.data(), gathered.data(), wrong) != 0 &&
             std::string(HostComm::lastError()).find("counts") != std::string::npos,
         dim + " allGatherV rejects a wrong count list");
}
} // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
  std::string spec = argc > 1 ? argv[1] : "dp_shard=1";
  std::vector<MeshDimSpec> mesh = parseMesh(spec);
  for (const MeshDimSpec &d : mesh)
    if (d.name.rfind("dp_", 0) == 0)
      checkGroup(mesh, d.name);
  // A mesh that does not match the world is refused with a message.
  std::string error;
  std::unique_ptr<HostComm> bad(HostComm::create({{"dp_shard", 1000}}, "dp_shard", error));
  expect(!bad && error.find("ranks but the world has") != std::string::npos,
         "mesh/world mismatch is refused");
  int counts[2] = {passed, failed}, totals[2] = {0, 0};
  MPI_Reduce(counts, totals, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (worldRank == 0)
    std::printf("mpi collectives (%s): %d passed, %d failed\n", spec.c_str(),
                totals[0], totals[1]);
  int anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return anyFailed ? 1 : 0;
}

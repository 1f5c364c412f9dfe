//===- CollectivesTest.cpp - Host collectives under mpirun ----------------===//
//
// Run as `mpirun -np N mfsdp-mpi-tests MESH` (MESH like dp_shard=4 or
// dp_replicate=2,dp_shard=2). The checks of each group's collectives are
// test/unit/CollectiveChecks.h's, shared with the gloo layer's test.
// Prints "N passed, N failed" on rank 0 and exits with 1 on any failure.
//
//===----------------------------------------------------------------------===//
#include "CollectiveChecks.h"

#include "mfsdp/runtime/ControlPlane.h"
#include "mfsdp/runtime/HostComm.h"

#include <mpi.h>

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
  std::unique_ptr<HostComm> comm(HostComm::createMpi(mesh, dim, error));
  expect(comm != nullptr, "create " + dim + ": " + error);
  if (!comm)
    return;
  mfsdp::test::CheckResults results;
  mfsdp::test::checkCollectives(*comm, dim, results);
  passed += results.passed;
  for (const std::string &what : results.failed)
    expect(false, what);
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
  // The control plane's exchange (gloo's addresses go through the torchrun
  // one): rank r's blob is r + 1 bytes of value r.
  std::unique_ptr<ControlPlane> control(createMpiControlPlane());
  std::vector<std::vector<uint8_t>> blobs;
  std::string planeError;
  bool same = control && control->allGather(std::vector<uint8_t>(worldRank + 1,
                                                                 uint8_t(worldRank)),
                                            blobs, planeError);
  for (size_t k = 0; same && k < blobs.size(); ++k)
    same = blobs[k] == std::vector<uint8_t>(k + 1, static_cast<uint8_t>(k));
  expect(same && static_cast<int>(blobs.size()) == control->world(),
         "the MPI control plane's allGather: " + planeError);
  // A mesh that does not match the world is refused with a message.
  std::string error;
  std::unique_ptr<HostComm> bad(HostComm::createMpi({{"dp_shard", 1000}}, "dp_shard", error));
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

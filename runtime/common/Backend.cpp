//===- Backend.cpp - Loading the CUDA backend at run time -----------------===//
//
// libmfsdp_rt links no CUDA library, so it builds, loads and runs on
// machines without the toolkit. The CUDA backend lives in libmfsdp_rt_cuda,
// opened here when a trainer asks for it. The driver (libcuda.so.1, which
// the CUDA runtime itself opens) is looked for first: without it no CUDA
// call could succeed, and none is made. What crosses dlopen is C only
// (BackendTable.h): the options and the control plane go as C structs,
// the backend comes back as a table of functions.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/Backend.h"
#include "mfsdp/runtime/BackendTable.h"
#include "mfsdp/runtime/ControlPlane.h"

#include <dlfcn.h>

#include <memory>

namespace mfsdp::rt {

Backend::~Backend() = default;

namespace {

const char *const kCudaLibrary = "libmfsdp_rt_cuda.so";

std::string dlMessage() {
  const char *m = dlerror();
  return m ? m : "unknown error";
}

/// The folder libmfsdp_rt.so was loaded from (empty if unknown).
std::string ownFolder() {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void *>(&loadCudaBackend), &info) || !info.dli_fname)
    return "";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

/// This rank's factory, or null with `why`.
mfsdp_rt_create_backend_fn findFactory(std::string &why) {
  if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    why = "no CUDA driver on this machine (" + dlMessage() + ")";
    return nullptr;
  }
  void *lib = nullptr;
  std::string folder = ownFolder(), next;
  if (!folder.empty()) {
    next = folder + "/" + kCudaLibrary;
    lib = dlopen(next.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (!lib)
    lib = dlopen(kCudaLibrary, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    why = std::string("cannot load ") + kCudaLibrary +
          (next.empty() ? "" : " (next to libmfsdp_rt: " + next + ", or on the "
                               "library path)") +
          ": " + dlMessage();
    return nullptr;
  }
  // The library stays loaded: the backend's code lives in it.
  auto create =
      reinterpret_cast<mfsdp_rt_create_backend_fn>(dlsym(lib, MFSDP_RT_CUDA_BACKEND_SYMBOL));
  if (!create)
    why = std::string(kCudaLibrary) + " has no " + MFSDP_RT_CUDA_BACKEND_SYMBOL +
          " (it was built without NCCL, or by another mfsdp version)";
  return create;
}

} // namespace

Backend *loadCudaBackend(const BackendOptions &options, std::string &error) {
  const std::string prefix = "the CUDA backend is not available: ";
  std::string why;
  mfsdp_rt_create_backend_fn create = findFactory(why);
  // Every rank goes on, or none does: a rank left alone would wait in the
  // factory's collectives forever.
  std::unique_ptr<ControlPlane> mpi;
  ControlPlane *control = options.control;
  if (!control) {
    mpi.reset(createMpiControlPlane());
    if (!mpi) {
      error = prefix + "MPI is not initialized (and no other bootstrap was given)";
      return nullptr;
    }
    control = mpi.get();
  }
  const int found = create ? 1 : 0, rank = control->rank();
  std::vector<int64_t> lo, hi;
  std::string agreeing;
  if (!control->minMax({found}, lo, hi, agreeing)) {
    error = prefix + agreeing + " while the ranks agreed on it";
    return nullptr;
  }
  const bool everywhere = lo[0] == 1;
  if (!everywhere) {
    error = prefix + "rank " + std::to_string(rank) + ": " +
            (found ? "another rank cannot load it (see that rank's error)" : why);
    return nullptr;
  }
  // The options in C: the mesh's names stay alive in options.mesh.
  std::vector<mfsdp_mesh_dim> mesh;
  for (const MeshDimSpec &d : options.mesh)
    mesh.push_back({d.name.c_str(), static_cast<int32_t>(d.size)});
  const mfsdp_rt_control_table controlC = controlTable(*control);
  mfsdp_rt_backend_options c{};
  c.struct_size = sizeof(c);
  c.version = MFSDP_RT_BACKEND_TABLE_VERSION;
  c.num_mesh_dims = static_cast<int32_t>(mesh.size());
  c.mesh_dims = mesh.data();
  c.trainer_stream = options.trainerStream;
  c.control = &controlC;
  c.timeout_ms = options.timeoutMs;
  c.collective_timeout_ms = options.collectiveTimeoutMs;
  mfsdp_rt_backend_table table{};
  table.struct_size = sizeof(table);
  table.version = MFSDP_RT_BACKEND_TABLE_VERSION;
  char message[1024] = "";
  if (create(&c, &table, message, sizeof(message)) != 0) {
    error = prefix + message;
    return nullptr;
  }
  // The callee checked the layouts; a table it filled is this layout.
  return backendFromTable(table);
}

} // namespace mfsdp::rt

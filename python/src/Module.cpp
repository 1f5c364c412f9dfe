//===- Module.cpp - mfsdp._C: the step runtime's C ABI for Python ---------===//
//
// A thin binding of include/mfsdp/runtime.h with nanobind: a step library
// opened with dlopen (its plan read field by field, never copied into
// Python structs), a runtime created on it, the hooks, the optimizer step
// and DLPack views of gathered parameters and gradients, handed to torch
// without a copy. Every failing call raises mfsdp.Error with the runtime's
// own message (mfsdp_last_error).
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime.h"

#include <mpi.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <dlfcn.h>

#include <cstring>
#include <memory>
#include <string>

namespace nb = nanobind;

namespace {

/// mfsdp.Error, created in the module init.
nb::object errorType;

[[noreturn]] void raise(const std::string &what) {
  PyErr_SetString(errorType.ptr(), what.c_str());
  throw nb::python_error();
}

const char *statusName(mfsdp_status s) {
  switch (s) {
  case MFSDP_OK: return "ok";
  case MFSDP_ERROR_INVALID: return "invalid";
  case MFSDP_ERROR_ORDER: return "order";
  case MFSDP_ERROR_PLAN: return "plan";
  case MFSDP_ERROR_COMM: return "comm";
  case MFSDP_ERROR_BACKEND: return "backend";
  case MFSDP_ERROR_IO: return "io";
  }
  return "unknown";
}

/// A step library: dlopen'd, its plan a pointer into the library.
struct Library {
  std::string path;
  void *handle = nullptr;
  const mfsdp_plan *plan = nullptr;

  explicit Library(const std::string &p) : path(p) {
    handle = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle)
      raise("cannot open the step library " + p + ": " + dlerror());
    auto planFn = reinterpret_cast<mfsdp_step_plan_fn>(dlsym(handle, MFSDP_STEP_PLAN_SYMBOL));
    if (!planFn) {
      dlclose(handle);
      handle = nullptr;
      raise(p + " is not a step library (it exports no " MFSDP_STEP_PLAN_SYMBOL
                "; build one with mfsdp-compile)");
    }
    plan = planFn();
    if (!plan)
      raise(p + ": " MFSDP_STEP_PLAN_SYMBOL " returned no plan");
  }
  Library(const Library &) = delete;
  Library &operator=(const Library &) = delete;
  // The library stays loaded for the process: runtimes created on it hold
  // pointers into its tables, and Python may release objects in any order.
  ~Library() = default;

  nb::list params() const {
    nb::list out;
    for (int32_t i = 0; i < plan->num_params; ++i) {
      const mfsdp_param_desc &d = plan->params[i];
      nb::dict e;
      e["index"] = i;
      e["name"] = std::string(d.name ? d.name : "");
      e["rows"] = d.rows;
      e["cols"] = d.cols;
      e["unit"] = d.unit;
      e["placement"] = d.placement;
      e["owner"] = d.owner;
      e["optimizer"] = d.optimizer;
      e["compute_dtype"] = d.compute_dtype;
      e["block_rows"] = d.block_rows;
      e["block_cols"] = d.block_cols;
      out.append(e);
    }
    return out;
  }

  nb::dict info() const {
    const mfsdp_plan &p = *plan;
    nb::dict d;
    d["hash"] = p.hash;
    d["zero"] = p.zero;
    d["dp_replicate"] = p.dp_replicate;
    d["dp_shard"] = p.dp_shard;
    d["world"] = p.world;
    d["num_units"] = p.num_units;
    d["num_params"] = p.num_params;
    d["reduce_dtype"] = p.reduce_dtype == MFSDP_REDUCE_BF16 ? "bf16" : "f32";
    nb::dict adamw;
    adamw["lr"] = p.adamw_lr;
    adamw["betas"] = nb::make_tuple(p.adamw_beta1, p.adamw_beta2);
    adamw["eps"] = p.adamw_eps;
    adamw["weight_decay"] = p.adamw_weight_decay;
    d["adamw"] = adamw;
    nb::dict sgd;
    sgd["lr"] = p.sgd_lr;
    sgd["momentum"] = p.sgd_momentum;
    sgd["weight_decay"] = p.sgd_weight_decay;
    sgd["nesterov"] = p.sgd_nesterov != 0;
    d["sgd"] = sgd;
    nb::dict muon;
    muon["lr"] = p.muon_lr;
    muon["momentum"] = p.muon_momentum;
    muon["weight_decay"] = p.muon_weight_decay;
    muon["nesterov"] = p.muon_nesterov != 0;
    muon["ns_steps"] = p.muon_ns_steps;
    muon["adjust_lr_fn"] = p.muon_scale ? "original" : "match_rms_adamw";
    muon["ns_precision"] =
        std::string(mfsdp::enumName(static_cast<mfsdp::NsPrecision>(p.muon_ns_precision)));
    d["muon"] = muon;
    d["ns_split"] = p.ns_split != 0;
    nb::list mesh;
    for (int32_t i = 0; i < p.num_mesh_dims; ++i)
      mesh.append(nb::make_tuple(std::string(p.mesh_dims[i].name), p.mesh_dims[i].size));
    d["mesh"] = mesh;
    d["num_buckets"] = p.num_buckets;
    d["memory_plan"] = p.memory != nullptr;
    d["keep_grads"] = p.memory ? p.memory->keep_grads != 0 : true;
    d["prefetch"] = p.memory ? p.memory->prefetch : 0;
    return d;
  }
};

using HostArray = nb::ndarray<float, nb::c_contig, nb::device::cpu>;

/// A runtime on one library. Views handed to torch keep this object alive.
struct Step {
  nb::object library; // keeps the Library (and its plan) alive
  mfsdp_step *step = nullptr;

  Step(nb::object lib, int32_t backend, int32_t bootstrap, int32_t timeoutMs,
       int64_t collectiveTimeoutMs)
      : library(std::move(lib)) {
    const Library &l = nb::cast<const Library &>(library);
    mfsdp_config config = MFSDP_CONFIG_INITIALIZER;
    config.backend = backend;
    config.bootstrap = bootstrap;
    config.bootstrap_timeout_ms = timeoutMs;
    config.collective_timeout_ms = collectiveTimeoutMs;
    mfsdp_status st;
    {
      nb::gil_scoped_release release;
      st = mfsdp_create_with_config(l.plan, &config, &step);
    }
    if (st != MFSDP_OK) {
      std::string why = mfsdp_last_error(step);
      mfsdp_destroy(step);
      step = nullptr;
      raise(std::string("creating the runtime on ") + l.path + " failed (" +
            statusName(st) + "): " + why);
    }
  }
  Step(const Step &) = delete;
  Step &operator=(const Step &) = delete;
  ~Step() { close(); }

  void close() {
    if (step) {
      nb::gil_scoped_release release;
      mfsdp_destroy(step);
      step = nullptr;
    }
  }

  mfsdp_step *live() const {
    if (!step)
      raise("the runtime was closed");
    return step;
  }

  void check(mfsdp_status st, const char *call) const {
    if (st != MFSDP_OK)
      raise(std::string(call) + " failed (" + statusName(st) + "): " +
            mfsdp_last_error(step));
  }

  /// A collective or compute call: the GIL is released while it runs.
  /// `why`: this rank's own reason for the call to fail (its argument),
  /// raised after the call, which every rank makes and fails together.
  template <typename F> void run(const char *call, F &&f, const std::string &why = {}) {
    mfsdp_step *s = live();
    mfsdp_status st;
    {
      nb::gil_scoped_release release;
      st = f(s);
    }
    if (!why.empty())
      raise(std::string(call) + ": " + why);
    check(st, call);
  }

  nb::object view(int32_t param, bool grad, nb::handle self) {
    mfsdp_step *s = live();
    DLTensor t;
    std::memset(&t, 0, sizeof(t));
    mfsdp_status st = grad ? mfsdp_grad_view(s, param, &t) : mfsdp_param_view(s, param, &t);
    check(st, grad ? "mfsdp_grad_view" : "mfsdp_param_view");
    const bool bf16 = t.dtype.code == kDLBfloat && t.dtype.bits == 16 && t.dtype.lanes == 1;
    if (!bf16 && (t.dtype.code != kDLFloat || t.dtype.bits != 32 || t.dtype.lanes != 1))
      raise("a view that is neither fp32 nor bf16");
    size_t shape[4];
    int64_t strides[4];
    if (t.ndim < 1 || t.ndim > 4)
      raise("a view of an unexpected rank");
    for (int32_t i = 0; i < t.ndim; ++i) {
      shape[i] = static_cast<size_t>(t.shape[i]);
      strides[i] = t.strides ? t.strides[i] : 0;
    }
    if (!t.strides) { // row-major
      int64_t s1 = 1;
      for (int32_t i = t.ndim - 1; i >= 0; --i) {
        strides[i] = s1;
        s1 *= t.shape[i];
      }
    }
    // A bf16 compute copy is a torch.bfloat16 tensor over the runtime's
    // 2-byte elements.
    void *data = static_cast<char *>(t.data) + t.byte_offset;
    const nb::dlpack::dtype dtype =
        bf16 ? nb::dlpack::dtype{static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1}
             : nb::dtype<float>();
    nb::ndarray<nb::pytorch> arr(data, static_cast<size_t>(t.ndim), shape, self, strides,
                                 dtype, t.device.device_type, t.device.device_id);
    return nb::cast(arr, nb::rv_policy::reference);
  }

  /// A whole tensor of parameter i, as load and store read and write it;
  /// null, with `why` saying what is wrong with it, when it does not fit.
  /// The call then goes to the runtime with the null tensor, so that every
  /// rank fails it together (a raise here alone would leave the other
  /// ranks waiting for this one in the runtime).
  const float *whole(int32_t i, const HostArray &a, std::string &why) const {
    const mfsdp_plan &plan = *nb::cast<const Library &>(library).plan;
    if (i < 0 || i >= plan.num_params)
      raise("parameter " + std::to_string(i) + " is out of range [0, " +
            std::to_string(plan.num_params) + ")");
    const mfsdp_param_desc &d = plan.params[i];
    if (static_cast<int64_t>(a.size()) != d.rows * d.cols) {
      why = std::string("parameter '") + d.name + "': expected " +
            std::to_string(d.rows * d.cols) + " floats (" + std::to_string(d.rows) + " x " +
            std::to_string(d.cols) + "), got " + std::to_string(a.size());
      return nullptr;
    }
    return a.data();
  }

  int64_t stepCount() {
    int64_t c = 0;
    check(mfsdp_step_count(live(), &c), "mfsdp_step_count");
    return c;
  }
};


/// mfsdp_hparams <-> a dict with the C field names.
nb::dict hparamsDict(const mfsdp_hparams &h) {
  nb::dict d;
  d["lr"] = h.lr;
  d["weight_decay"] = h.weight_decay;
  d["beta1"] = h.beta1;
  d["beta2"] = h.beta2;
  d["eps"] = h.eps;
  d["momentum"] = h.momentum;
  d["nesterov"] = h.nesterov != 0;
  d["ns_steps"] = h.ns_steps;
  d["ns_a"] = h.ns_a;
  d["ns_b"] = h.ns_b;
  d["ns_c"] = h.ns_c;
  d["ns_eps"] = h.ns_eps;
  d["ns_norm"] = h.ns_norm;
  d["adjust_lr"] = h.adjust_lr;
  d["ns_precision"] = h.ns_precision;
  return d;
}

/// Fields of `d` over `h`; an unknown key is an error naming it.
void updateHparams(mfsdp_hparams &h, const nb::dict &d) {
  for (auto [key, value] : d) {
    const std::string k = nb::cast<std::string>(key);
    if (k == "lr") h.lr = nb::cast<float>(value);
    else if (k == "weight_decay") h.weight_decay = nb::cast<float>(value);
    else if (k == "beta1") h.beta1 = nb::cast<float>(value);
    else if (k == "beta2") h.beta2 = nb::cast<float>(value);
    else if (k == "eps") h.eps = nb::cast<float>(value);
    else if (k == "momentum") h.momentum = nb::cast<float>(value);
    else if (k == "nesterov") h.nesterov = nb::cast<bool>(value) ? 1 : 0;
    else if (k == "ns_steps") h.ns_steps = nb::cast<int32_t>(value);
    else if (k == "ns_a") h.ns_a = nb::cast<float>(value);
    else if (k == "ns_b") h.ns_b = nb::cast<float>(value);
    else if (k == "ns_c") h.ns_c = nb::cast<float>(value);
    else if (k == "ns_eps") h.ns_eps = nb::cast<float>(value);
    else if (k == "ns_norm") h.ns_norm = nb::cast<int32_t>(value);
    else if (k == "adjust_lr") h.adjust_lr = nb::cast<int32_t>(value);
    else if (k == "ns_precision") h.ns_precision = nb::cast<int32_t>(value);
    else
      raise("hyperparameters: unknown field '" + k +
            "' (lr, weight_decay, beta1, beta2, eps, momentum, nesterov, ns_steps, ns_a, "
            "ns_b, ns_c, ns_eps, ns_norm, adjust_lr, ns_precision)");
  }
}

} // namespace

NB_MODULE(_C, m) {
  m.doc() = "mfsdp's step runtime (include/mfsdp/runtime.h) for Python";
  // Runtimes and libraries may still be referenced (by a model) when the
  // interpreter exits; they are released by the process exit, on purpose.
  nb::set_leak_warnings(false);
  errorType = nb::borrow(PyErr_NewExceptionWithDoc(
      "mfsdp.Error",
      "An error of the mfsdp runtime or package; the message says what and where.",
      PyExc_RuntimeError, nullptr));
  m.attr("Error") = errorType;

  m.attr("BACKEND_HOST") = int(MFSDP_BACKEND_HOST);
  m.attr("BACKEND_CUDA") = int(MFSDP_BACKEND_CUDA);
  m.attr("BOOTSTRAP_MPI") = int(MFSDP_BOOTSTRAP_MPI);
  m.attr("BOOTSTRAP_TORCHRUN") = int(MFSDP_BOOTSTRAP_TORCHRUN);
  m.attr("ROW_SHARD") = int(MFSDP_ROW_SHARD);
  m.attr("OWNER") = int(MFSDP_OWNER);
  m.attr("REPLICATE") = int(MFSDP_REPLICATE);
  m.attr("BLOCK_SHARD") = int(MFSDP_BLOCK_SHARD);
  m.attr("OPT_NONE") = int(MFSDP_OPT_NONE);
  m.attr("OPT_ADAMW") = int(MFSDP_OPT_ADAMW);
  m.attr("OPT_SGD") = int(MFSDP_OPT_SGD);
  m.attr("OPT_MUON") = int(MFSDP_OPT_MUON);
  m.attr("COMPUTE_F32") = int(MFSDP_COMPUTE_F32);
  m.attr("COMPUTE_BF16") = int(MFSDP_COMPUTE_BF16);
  m.attr("NS_NORM_ADD_EPS") = int(MFSDP_NS_NORM_ADD_EPS);
  m.attr("NS_NORM_CLAMP") = int(MFSDP_NS_NORM_CLAMP);
  m.attr("NS_PRECISION_FP32") = int(MFSDP_NS_PRECISION_FP32);
  m.attr("NS_PRECISION_BF16") = int(MFSDP_NS_PRECISION_BF16);
  m.attr("ADJUST_LR_MATCH_RMS_ADAMW") = int(MFSDP_ADJUST_LR_MATCH_RMS_ADAMW);
  m.attr("ADJUST_LR_ORIGINAL") = int(MFSDP_ADJUST_LR_ORIGINAL);
  m.attr("ADJUST_LR_SPECTRAL_UNCLAMPED") = int(MFSDP_ADJUST_LR_SPECTRAL_UNCLAMPED);
  m.attr("STATE_EXP_AVG") = int(MFSDP_STATE_EXP_AVG);
  m.attr("STATE_EXP_AVG_SQ") = int(MFSDP_STATE_EXP_AVG_SQ);

  // MPI for the host backend under mpirun: initialised once per process,
  // finalised at exit (after every runtime is destroyed).
  m.def("mpi_init", []() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        raise("MPI_Init_thread failed");
    }
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    return nb::make_tuple(rank, size);
  });
  m.def("mpi_finalize", []() {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized)
      MPI_Finalize();
  });
  m.def("mpi_abort", [](int code) { MPI_Abort(MPI_COMM_WORLD, code); });

  nb::class_<Library>(m, "Library", "A step library built by mfsdp-compile.")
      .def(nb::init<const std::string &>(), nb::arg("path"))
      .def_ro("path", &Library::path)
      .def("params", &Library::params, "The parameter table, one dict per row.")
      .def("info", &Library::info, "The plan's mesh, ZeRO level and hyperparameters.")
      .def_prop_ro("hash", [](const Library &l) { return l.plan->hash; })
      .def_prop_ro("num_units", [](const Library &l) { return l.plan->num_units; })
      .def_prop_ro("world", [](const Library &l) { return l.plan->world; });

  nb::class_<Step>(m, "Step", "A runtime created on a step library (collective).")
      .def(nb::init<nb::object, int32_t, int32_t, int32_t, int64_t>(), nb::arg("library"),
           nb::arg("backend") = int(MFSDP_BACKEND_HOST),
           nb::arg("bootstrap") = int(MFSDP_BOOTSTRAP_MPI), nb::arg("timeout_ms") = 0,
           nb::arg("collective_timeout_ms") = 0)
      .def("close", &Step::close)
      .def("pre_forward",
           [](Step &s, int32_t u) { s.run("mfsdp_pre_forward", [&](mfsdp_step *p) { return mfsdp_pre_forward(p, u); }); })
      .def("post_forward",
           [](Step &s, int32_t u) { s.run("mfsdp_post_forward", [&](mfsdp_step *p) { return mfsdp_post_forward(p, u); }); })
      .def("pre_backward",
           [](Step &s, int32_t u) { s.run("mfsdp_pre_backward", [&](mfsdp_step *p) { return mfsdp_pre_backward(p, u); }); })
      .def("post_backward",
           [](Step &s, int32_t u) { s.run("mfsdp_post_backward", [&](mfsdp_step *p) { return mfsdp_post_backward(p, u); }); })
      .def("end_forward",
           [](Step &s, int32_t u) { s.run("mfsdp_end_forward", [&](mfsdp_step *p) { return mfsdp_end_forward(p, u); }); })
      .def("end_backward",
           [](Step &s, int32_t u) { s.run("mfsdp_end_backward", [&](mfsdp_step *p) { return mfsdp_end_backward(p, u); }); })
      .def("optimizer_step",
           [](Step &s) { s.run("mfsdp_optimizer_step", [](mfsdp_step *p) { return mfsdp_optimizer_step(p); }); })
      .def("zero_grad",
           [](Step &s) { s.run("mfsdp_zero_grad", [](mfsdp_step *p) { return mfsdp_zero_grad(p); }); })
      .def("set_no_sync",
           [](Step &s, bool on) { s.check(mfsdp_set_no_sync(s.live(), on ? 1 : 0), "mfsdp_set_no_sync"); })
      .def("set_unused_grads",
           [](Step &s, bool skip) {
             const int32_t rule = skip ? MFSDP_UNUSED_SKIP : MFSDP_UNUSED_STEP;
             s.run("mfsdp_set_unused_grads",
                   [&](mfsdp_step *p) { return mfsdp_set_unused_grads(p, rule); });
           },
           nb::arg("skip"),
           "skip=True: the optimizer step skips the parameters no rank gave a gradient "
           "(mark_no_grad), as torch.optim skips a .grad that is None (collective).")
      .def("mark_no_grad",
           [](Step &s, int32_t i) { s.check(mfsdp_mark_no_grad(s.live(), i), "mfsdp_mark_no_grad"); },
           "This rank's backward gave parameter i no gradient (before its unit's post_backward).")
      .def("param_step_count",
           [](Step &s, int32_t i) {
             int64_t c = 0;
             s.check(mfsdp_param_step_count(s.live(), i, &c), "mfsdp_param_step_count");
             return c;
           },
           "The optimizer steps that updated parameter i.")
      .def("param_view",
           [](nb::handle self, int32_t i, nb::handle owner) {
             // The tensor keeps `owner` alive (default: this runtime); an owner
             // that keeps the runtime shows, by its lifetime, whether any
             // tensor over this view is still alive.
             return nb::cast<Step &>(self).view(i, false, owner.is_none() ? self : owner);
           },
           nb::arg("i"), nb::arg("owner") = nb::none(),
           "The gathered parameter (a torch tensor over the runtime's buffer), kept "
           "alive with `owner` (which must keep this runtime alive), or with the runtime.")
      .def("grad_view",
           [](nb::handle self, int32_t i) { return nb::cast<Step &>(self).view(i, true, self); },
           "The gradient buffer the trainer adds into.")
      .def("load_param",
           [](Step &s, int32_t i, HostArray a) {
             std::string why;
             const float *d = s.whole(i, a, why);
             s.run("mfsdp_load_param", [&](mfsdp_step *p) { return mfsdp_load_param(p, i, d); }, why);
           })
      .def("store_param",
           [](Step &s, int32_t i, HostArray a) {
             std::string why;
             float *d = const_cast<float *>(s.whole(i, a, why));
             s.run("mfsdp_store_param", [&](mfsdp_step *p) { return mfsdp_store_param(p, i, d); }, why);
           })
      .def("load_state",
           [](Step &s, int32_t i, int32_t which, HostArray a) {
             std::string why;
             const float *d = s.whole(i, a, why);
             s.run("mfsdp_load_state", [&](mfsdp_step *p) { return mfsdp_load_state(p, i, which, d); }, why);
           })
      .def("store_state",
           [](Step &s, int32_t i, int32_t which, HostArray a) {
             std::string why;
             float *d = const_cast<float *>(s.whole(i, a, why));
             s.run("mfsdp_store_state", [&](mfsdp_step *p) { return mfsdp_store_state(p, i, which, d); }, why);
           })
      .def("save",
           [](Step &s, const std::string &dir, const std::string &user) {
             s.run("mfsdp_save", [&](mfsdp_step *p) {
               return mfsdp_save(p, dir.c_str(), user.empty() ? nullptr : user.c_str());
             });
           },
           nb::arg("dir"), nb::arg("user") = "",
           "mfsdp_save: a sharded checkpoint in a new directory (collective).")
      .def("load",
           [](Step &s, const std::string &dir) {
             std::vector<char> user(1 << 20, '\0');
             s.run("mfsdp_load", [&](mfsdp_step *p) {
               return mfsdp_load(p, dir.c_str(), user.data(),
                                 static_cast<int64_t>(user.size()));
             });
             return std::string(user.data());
           },
           nb::arg("dir"),
           "mfsdp_load: a checkpoint of any mesh or policy (collective); returns "
           "the user string it was saved with.")
      .def("load_hf",
           [](Step &s, const std::string &dir) {
             s.run("mfsdp_load_hf",
                   [&](mfsdp_step *p) { return mfsdp_load_hf(p, dir.c_str()); });
           },
           nb::arg("dir"),
           "mfsdp_load_hf: Hugging Face safetensors weights, each rank reading "
           "its rows (collective).")
      .def("export_hf",
           [](Step &s, const std::string &dir, bool bf16, int64_t maxShardBytes) {
             s.run("mfsdp_export_hf", [&](mfsdp_step *p) {
               return mfsdp_export_hf(p, dir.c_str(),
                                      bf16 ? MFSDP_COMPUTE_BF16 : MFSDP_COMPUTE_F32,
                                      maxShardBytes);
             });
           },
           nb::arg("dir"), nb::arg("bf16") = false, nb::arg("max_shard_bytes") = 0,
           "mfsdp_export_hf: the model as Hugging Face safetensors weights, rank 0 "
           "writing (collective).")
      .def("get_hparams",
           [](Step &s, int32_t i) {
             mfsdp_hparams h;
             std::memset(&h, 0, sizeof(h));
             s.check(mfsdp_get_hparams(s.live(), i, &h), "mfsdp_get_hparams");
             return hparamsDict(h);
           },
           "A parameter's hyperparameters (the C struct's fields).")
      .def("set_hparams",
           [](Step &s, int32_t i, const nb::dict &d) {
             mfsdp_hparams h;
             std::memset(&h, 0, sizeof(h));
             s.check(mfsdp_get_hparams(s.live(), i, &h), "mfsdp_get_hparams");
             updateHparams(h, d);
             s.check(mfsdp_set_hparams(s.live(), i, &h), "mfsdp_set_hparams");
           },
           "Sets the given fields of a parameter's hyperparameters (from the next step on).")
      .def("clip_grad_norm",
           [](Step &s, double maxNorm, double extraSq) {
             double total = 0;
             s.run("mfsdp_clip_grad_norm",
                   [&](mfsdp_step *p) { return mfsdp_clip_grad_norm(p, maxNorm, extraSq, &total); });
             return total;
           },
           nb::arg("max_norm"), nb::arg("extra_sq") = 0.0,
           "The total 2-norm of the reduced gradients (collective); scales them when max_norm > 0.")
      .def_prop_ro("step_count", &Step::stepCount)
      .def("set_step_count",
           [](Step &s, int64_t c) { s.check(mfsdp_set_step_count(s.live(), c), "mfsdp_set_step_count"); })
      .def_prop_ro("last_error", [](Step &s) { return std::string(mfsdp_last_error(s.step)); });
}

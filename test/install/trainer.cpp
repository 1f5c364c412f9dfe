//===- trainer.cpp - One step through an installed mfsdp ------------------===//
//
//   mpirun -np N install-trainer libstep.so
//
// Opens a step library built by the installed mfsdp-compile, creates the
// runtime on its plan, loads every parameter as zeros, runs one forward and
// one backward with every gradient element 1, and one optimizer step; then
// checks each parameter as its optimizer must have moved it: AdamW and SGD
// (no momentum) by -lr exactly in fp32 terms (from zero, the first step's
// bias-corrected AdamW update is lr * 1 / (1 + eps)), Muon to finite values
// not all zero, no optimizer not at all. Prints where libmfsdp_rt was
// loaded from, so the test can check that it is the installed one.
//
//===----------------------------------------------------------------------===//
#include <mfsdp/runtime.h>

#include <dlfcn.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {
int rank = 0;

int fail(const std::string &what) {
  std::fprintf(stderr, "rank %d: install-trainer: %s\n", rank, what.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;
}

bool ok(mfsdp_step *step, mfsdp_status st, const char *call) {
  if (st == MFSDP_OK)
    return true;
  fail(std::string(call) + ": " + mfsdp_status_string(st) + ": " + mfsdp_last_error(step));
  return false;
}
} // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc != 2)
    return fail("usage: install-trainer <step library>");
  int32_t version = 0;
  if (mfsdp_get_version(&version) != MFSDP_OK || version != MFSDP_VERSION_CODE)
    return fail("the library's version " + std::to_string(version) +
                " is not the header's " + std::to_string(MFSDP_VERSION_CODE));
  Dl_info where;
  if (rank == 0 && dladdr(reinterpret_cast<void *>(&mfsdp_create), &where))
    std::printf("runtime: %s\n", where.dli_fname);

  void *lib = dlopen(argv[1], RTLD_NOW);
  if (!lib)
    return fail(std::string("cannot open the step library: ") + dlerror());
  auto planFn = reinterpret_cast<mfsdp_step_plan_fn>(dlsym(lib, MFSDP_STEP_PLAN_SYMBOL));
  if (!planFn)
    return fail("the step library has no " MFSDP_STEP_PLAN_SYMBOL);
  const mfsdp_plan &plan = *planFn();
  mfsdp_config config = MFSDP_CONFIG_INITIALIZER;
  mfsdp_step *step = nullptr;
  if (!ok(step, mfsdp_create_with_config(&plan, &config, &step), "mfsdp_create"))
    return 1;

  for (int32_t p = 0; p < plan.num_params; ++p) {
    const mfsdp_param_desc &d = plan.params[p];
    std::vector<float> zeros(static_cast<size_t>(d.rows * d.cols), 0.f);
    if (!ok(step, mfsdp_load_param(step, p, zeros.data()), "mfsdp_load_param"))
      return 1;
  }
  for (int32_t u = 0; u < plan.num_units; ++u)
    if (!ok(step, mfsdp_pre_forward(step, u), "mfsdp_pre_forward") ||
        !ok(step, mfsdp_post_forward(step, u), "mfsdp_post_forward"))
      return 1;
  for (int32_t u = plan.num_units - 1; u >= 0; --u) {
    if (!ok(step, mfsdp_pre_backward(step, u), "mfsdp_pre_backward"))
      return 1;
    for (int32_t p = 0; p < plan.num_params; ++p) {
      if (plan.params[p].unit != u)
        continue;
      DLTensor grad;
      if (!ok(step, mfsdp_grad_view(step, p, &grad), "mfsdp_grad_view"))
        return 1;
      float *g = static_cast<float *>(grad.data);
      for (int64_t i = 0; i < plan.params[p].rows * plan.params[p].cols; ++i)
        g[i] = 1.f;
    }
    if (!ok(step, mfsdp_post_backward(step, u), "mfsdp_post_backward"))
      return 1;
  }
  if (!ok(step, mfsdp_optimizer_step(step), "mfsdp_optimizer_step"))
    return 1;

  int checked = 0;
  for (int32_t p = 0; p < plan.num_params; ++p) {
    const mfsdp_param_desc &d = plan.params[p];
    std::vector<float> w(static_cast<size_t>(d.rows * d.cols));
    if (!ok(step, mfsdp_store_param(step, p, w.data()), "mfsdp_store_param"))
      return 1;
    const float lr = d.optimizer == MFSDP_OPT_ADAMW ? plan.adamw_lr / (1.f + plan.adamw_eps)
                     : d.optimizer == MFSDP_OPT_SGD ? plan.sgd_lr
                                                    : 0.f;
    bool moved = false;
    for (float x : w) {
      if (!std::isfinite(x))
        return fail(std::string("'") + d.name + "' is not finite after the step");
      moved |= x != 0.f;
      if (d.optimizer != MFSDP_OPT_MUON && std::fabs(x + lr) > 1e-6f * (lr + 1e-3f))
        return fail(std::string("'") + d.name + "' is " + std::to_string(x) +
                    " after the step; expected " + std::to_string(-lr));
    }
    if (d.optimizer == MFSDP_OPT_MUON && !moved)
      return fail(std::string("'") + d.name + "' did not move (Muon)");
    ++checked;
  }
  mfsdp_destroy(step);
  if (rank == 0)
    std::printf("install-trainer: one step, %d parameters as expected\n", checked);
  MPI_Finalize();
  return 0;
}

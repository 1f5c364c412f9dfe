//===- main.cpp - The example trainer: a generated step library under MPI -===//
//
//   mfsdp-compile examples/trainer/model.json --mesh=dp_shard=2 \
//       --policy=mixed_muon_adamw -o libstep.so
//   mpirun -np 2 mfsdp-example-trainer ./libstep.so [--steps N]
//       [--microbatches M] [--tokens T] [--load DIR] [--save DIR] [--export-hf DIR]
//       [--collective-timeout-s S]
//
// Opens the step library, reads its plan, checks that the plan is for this
// model (the stack of blocks in Model.h, with the sizes the plan's shapes
// give), loads the initial parameters (or, with --load, a checkpoint that
// any mesh or policy saved, with the step to go on from), trains on
// synthetic data (every data-parallel rank on its own batch), prints the
// mean loss of each step and, with --save, writes a sharded checkpoint
// (mfsdp_save) with the next step's index as its data position, and with
// --export-hf the model as Hugging Face safetensors weights
// (mfsdp_export_hf); `--load DIR --steps 0 --export-hf OUT` converts a
// checkpoint. With
// --collective-timeout-s a collective that does not complete within S
// seconds (a rank stopped, dead, or gone elsewhere) is an error on the
// ranks that wait, and the job ends (MPI_Abort) with status 1.
// --test-stall R,N makes rank R stop calling mfsdp before step N's optimizer
// step (it sleeps), and --print-pid prints each rank's process id: what the
// watchdog tests (test/watchdog) use.
//
//===----------------------------------------------------------------------===//
#include "Model.h"
#include "Trainer.h"

#include "mfsdp/runtime.h"

#include <dlfcn.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace mfsdp;

namespace {

int rank = 0;

[[noreturn]] void die(const std::string &msg) {
  std::fprintf(stderr, "mfsdp-example-trainer: rank %d: error: %s\n", rank,
               msg.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

int64_t parseCount(const char *flag, const char *value, int64_t least = 1) {
  char *end = nullptr;
  long long v = std::strtoll(value, &end, 10);
  if (!end || *end || v < least)
    die(std::string(flag) + " expects " +
        (least == 1 ? "a positive integer" : "an integer >= " + std::to_string(least)) +
        ", got '" + value + "'");
  return v;
}

std::string shapeText(const std::vector<int64_t> &s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i)
    out += (i ? "x" : "") + std::to_string(s[i]);
  return out + "]";
}

/// The model config the plan was built for, checked parameter by parameter.
example::ModelConfig configFromPlan(const mfsdp_plan &plan, int64_t tokens) {
  example::ModelConfig c;
  c.tokens = tokens;
  c.layers = plan.num_units;
  if (plan.num_params < 2)
    die("the step library's plan has " + std::to_string(plan.num_params) +
        " parameters; the example model has 4 per block");
  c.hidden = plan.params[0].rows;
  c.inter = plan.params[1].rows;
  std::vector<example::ParamInfo> want = example::modelParams(c);
  if (static_cast<size_t>(plan.num_params) != want.size())
    die("the step library's plan has " + std::to_string(plan.num_params) +
        " parameters; the example model with " + std::to_string(c.layers) +
        " blocks has " + std::to_string(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    const mfsdp_param_desc &d = plan.params[i];
    int64_t wantRows = want[i].shape[0];
    int64_t wantCols = want[i].shape.size() > 1 ? want[i].shape[1] : 1;
    if (want[i].name != d.name || d.rows != wantRows || d.cols != wantCols ||
        d.unit != want[i].layer)
      die("the step library was built for another model: its parameter " +
          std::to_string(i) + " is '" + d.name + "' [" + std::to_string(d.rows) +
          "x" + std::to_string(d.cols) + "] in unit " + std::to_string(d.unit) +
          "; this trainer expects '" + want[i].name + "' " +
          shapeText(want[i].shape) + " in unit " + std::to_string(want[i].layer));
  }
  return c;
}

} // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  const char *library = nullptr;
  example::TrainOptions opts;
  opts.steps = 5;
  int64_t tokens = 8;
  std::string loadDir, saveDir, exportDir;
  double timeoutSeconds = 0;
  long long stallRank = -1, stallStep = -1;
  bool printPid = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char * {
      if (i + 1 >= argc)
        die(a + " expects a value");
      return argv[++i];
    };
    if (a == "--steps")
      opts.steps = parseCount("--steps", value(), 0); // 0: load, save, export only
    else if (a == "--microbatches")
      opts.microbatches = parseCount("--microbatches", value());
    else if (a == "--tokens")
      tokens = parseCount("--tokens", value());
    else if (a == "--load")
      loadDir = value();
    else if (a == "--save")
      saveDir = value();
    else if (a == "--export-hf")
      exportDir = value();
    else if (a == "--collective-timeout-s") {
      const char *v = value();
      char *end = nullptr;
      timeoutSeconds = std::strtod(v, &end);
      if (!end || *end || !(timeoutSeconds > 0) || timeoutSeconds > 1e6)
        die(std::string("--collective-timeout-s expects seconds > 0, got '") + v + "'");
    } else if (a == "--test-stall") {
      const char *v = value();
      if (std::sscanf(v, "%lld,%lld", &stallRank, &stallStep) != 2 || stallRank < 0 ||
          stallStep < 0)
        die(std::string("--test-stall expects RANK,STEP, got '") + v + "'");
    } else if (a == "--print-pid")
      printPid = true;
    else if (!a.empty() && a[0] == '-')
      die("unknown option '" + a + "'");
    else if (!library)
      library = argv[i];
    else
      die("one step library expected, got '" + std::string(library) + "' and '" + a + "'");
  }
  if (!library)
    die("usage: mfsdp-example-trainer LIBSTEP.so [--steps N] [--microbatches M] "
        "[--tokens T] [--load DIR] [--save DIR] [--export-hf DIR] [--collective-timeout-s S]");

  void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    die(std::string("cannot open the step library: ") + dlerror());
  auto planFn = reinterpret_cast<mfsdp_step_plan_fn>(dlsym(handle, MFSDP_STEP_PLAN_SYMBOL));
  auto createFn =
      reinterpret_cast<mfsdp_step_create_fn>(dlsym(handle, MFSDP_STEP_CREATE_SYMBOL));
  if (!planFn || !createFn)
    die(std::string(library) + " is not a step library (no " MFSDP_STEP_PLAN_SYMBOL
                               " / " MFSDP_STEP_CREATE_SYMBOL ")");
  const mfsdp_plan &plan = *planFn();
  example::ModelConfig model = configFromPlan(plan, tokens);

  mfsdp_step *step = nullptr;
  if (timeoutSeconds > 0) {
    mfsdp_config config = MFSDP_CONFIG_INITIALIZER;
    config.collective_timeout_ms = static_cast<int64_t>(timeoutSeconds * 1000 + 0.5);
    if (mfsdp_create_with_config(&plan, &config, &step) != MFSDP_OK)
      die(std::string("mfsdp_create: ") + mfsdp_last_error(step));
  } else if (createFn(&step) != MFSDP_OK) {
    die(std::string("mfsdp_create: ") + mfsdp_last_error(step));
  }
  if (printPid) {
    std::printf("mfsdp-example-trainer: rank %d pid %ld\n", rank,
                static_cast<long>(getpid()));
    std::fflush(stdout);
  }
  std::vector<example::ParamInfo> infos = example::modelParams(model);
  if (loadDir.empty()) {
    for (size_t i = 0; i < infos.size(); ++i) {
      std::vector<float> init(example::numel(infos[i]));
      example::initParam(infos[i], init.data());
      if (mfsdp_load_param(step, static_cast<int32_t>(i), init.data()) != MFSDP_OK)
        die("load " + infos[i].name + ": " + mfsdp_last_error(step));
    }
  } else {
    // The checkpoint's parameters, optimizer state and step count; its
    // user dictionary says which batch comes next.
    char user[4096];
    if (mfsdp_load(step, loadDir.c_str(), user, sizeof(user)) != MFSDP_OK)
      die("--load " + loadDir + ": " + mfsdp_last_error(step));
    const char *at = std::strstr(user, "\"next_step\":");
    if (!at)
      die("--load " + loadDir + ": its user dictionary has no next_step: " + user);
    opts.firstStep = std::strtoll(at + std::strlen("\"next_step\":"), nullptr, 10);
  }
  if (rank == 0)
    std::printf("mfsdp-example-trainer: %lld blocks (hidden %lld, inter %lld), "
                "%d ranks (dp_replicate=%d, dp_shard=%d), ZeRO-%d, %lld tokens "
                "per rank per microbatch, %lld microbatches\n",
                static_cast<long long>(model.layers), static_cast<long long>(model.hidden),
                static_cast<long long>(model.inter), world, plan.dp_replicate,
                plan.dp_shard, plan.zero, static_cast<long long>(tokens),
                static_cast<long long>(opts.microbatches));

  opts.dataRank = rank;
  if (stallRank == rank)
    opts.beforeStep = [&](int64_t s, std::string &) {
      if (s == stallStep) {
        std::printf("mfsdp-example-trainer: rank %d stalls at step %lld\n", rank,
                    static_cast<long long>(s));
        std::fflush(stdout);
        sleep(3600); // the others wait for it in their next collective
      }
      return true;
    };
  std::vector<double> losses;
  std::string error;
  if (!example::train(step, model, opts, losses, error))
    die(error);
  for (size_t s = 0; s < losses.size(); ++s) {
    double sum = 0;
    MPI_Allreduce(&losses[s], &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
      std::printf("step %lld: loss %.6f\n",
                  static_cast<long long>(opts.firstStep) + static_cast<long long>(s) + 1,
                  sum / world);
  }
  if (!saveDir.empty()) {
    const std::string user =
        "{\"next_step\": " + std::to_string(opts.firstStep + opts.steps) + "}";
    if (mfsdp_save(step, saveDir.c_str(), user.c_str()) != MFSDP_OK)
      die("--save " + saveDir + ": " + mfsdp_last_error(step));
    if (rank == 0)
      std::printf("saved %s\n", saveDir.c_str());
  }
  if (!exportDir.empty()) {
    if (mfsdp_export_hf(step, exportDir.c_str(), MFSDP_COMPUTE_F32, 0) != MFSDP_OK)
      die("--export-hf " + exportDir + ": " + mfsdp_last_error(step));
    if (rank == 0)
      std::printf("exported %s\n", exportDir.c_str());
  }
  mfsdp_destroy(step);
  dlclose(handle);
  MPI_Finalize();
  return 0;
}

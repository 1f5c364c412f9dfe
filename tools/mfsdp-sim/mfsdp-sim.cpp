//===- mfsdp-sim.cpp - Predict a step's time on GPU hardware --------------===//
//
//   mfsdp-sim scheduled.mlir [--profile=a100] [--trace=step.json]
//   mfsdp-sim model.mlir --pipeline="policy=mixed_muon_adamw mesh=dp_shard=8" --compare
//
// Simulates every sched.step of the input (or, with --pipeline, runs the
// default pipeline on the input's plan.graph first) on a hardware profile
// and prints the forward / backward / optimizer breakdown, exposed
// communication, peak memory and the floors. --compare also builds the
// FSDP2-style (row shards everywhere, Muon gathering every matrix on every
// rank), FSDP2-DTensor (row shards, torch.optim.Muon's matmuls split by
// DTensor; FSDP2-DTensor-mm the same with Newton-Schulz in its
// use_addmm=False form) and MatrixFSDP-style (owners balanced per unit by
// element count) baselines from the same graph. Every time is a prediction.
//
//===----------------------------------------------------------------------===//
#include "dialects/plan/PlanDialect.h"
#include "dialects/plan/PlanOps.h"
#include "dialects/sched/SchedOps.h"
#include "mfsdp/cost/Simulator.h"
#include "mfsdp/emit/RuntimePlan.h"
#include "mfsdp/import/PlanImport.h"
#include "passes/Autotune.h"
#include "passes/Pipeline.h"
#include "passes/ScheduleStages.h"
#include "dialects/sched/StepBridge.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

using namespace mlir;
namespace cl = llvm::cl;

/// The options --help shows: this tool's own, not every LLVM library's.
static cl::OptionCategory toolOptions("mfsdp-sim options");

static cl::opt<std::string> input(cl::cat(toolOptions), cl::Positional, cl::desc("<input .mlir>"),
                                  cl::init("-"));
static cl::opt<std::string> profileName(cl::cat(toolOptions), "profile",
                                        cl::desc("a100, h100, h100-ib, a100-pcie or h100-pcie"),
                                        cl::init("a100"));
static cl::opt<std::string> profileSet(
    cl::cat(toolOptions), "profile-set",
    cl::desc("override rates of the profile: key=value[,key=value...] (the profile's "
             "numeric fields, e.g. gemmEfficiency=0.6, and attentionScale)"),
    cl::init(""));
static cl::opt<std::string> pipeline(cl::cat(toolOptions), 
    "pipeline", cl::desc("run --mfsdp-pipeline with these options first"),
    cl::init(""));
static cl::opt<bool> compare(cl::cat(toolOptions), "compare",
                             cl::desc("also simulate baselines that run the "
                                      "plan's optimizer (needs --pipeline): "
                                      "for a Muon plan MatrixFSDP-style, "
                                      "FSDP2-style (Muon on gathered rows) "
                                      "and FSDP2-DTensor (addmm and mm "
                                      "forms); for an AdamW or SGD plan "
                                      "FSDP2-style (the same optimizer on "
                                      "per-parameter row shards)"),
                             cl::init(false));
static cl::opt<std::string> tracePath(cl::cat(toolOptions), "trace",
                                      cl::desc("write a Chrome trace (JSON) of "
                                               "the first step here"),
                                      cl::init(""));
static cl::opt<bool> autotuneOptions(
    cl::cat(toolOptions), "autotune",
    cl::desc("search the HSDP split, bucket size and prefetch depth with the "
             "cost model around --pipeline's and print every candidate, the "
             "best and its predicted gain over --pipeline's (needs "
             "--pipeline)"),
    cl::init(false));
static cl::opt<mfsdp::NsPrecisionOption> nsPrecision(
    cl::cat(toolOptions), "ns-precision",
    cl::desc("the precision Muon's Newton-Schulz runs in, priced at its rate: "
             "graph (the default: what each step records, from its graph's "
             "#plan.muon; fp32 where nothing is), fp32 or bf16; passed to "
             "--pipeline, which writes it into the graph"),
    cl::init(mfsdp::NsPrecisionOption::Graph),
    mfsdp::clValues<mfsdp::NsPrecisionOption>());
static cl::opt<bool> brief(cl::cat(toolOptions), "brief", cl::desc("one summary line per step"),
                           cl::init(false));

namespace {

struct Variant {
  std::string label;
  std::string extraOptions; // appended to --pipeline
};

struct Outcome {
  std::string label;
  mfsdp::step::Step step;
  mfsdp::cost::SimResult result;
  mfsdp::cost::SimProfile profile; // Newton-Schulz at the step's precision
};

int fail(const std::string &message) {
  llvm::errs() << "mfsdp-sim: error: " << message << "\n";
  return 1;
}

LogicalResult simulateModule(ModuleOp module, const std::string &label,
                             const mfsdp::cost::SimProfile &profile,
                             std::vector<Outcome> &out) {
  for (mfsdp::sched::StepOp op : module.getOps<mfsdp::sched::StepOp>()) {
    Outcome o;
    o.label = label;
    if (failed(mfsdp::readStep(op, o.step)))
      return failure();
    // Newton-Schulz at the precision the step was scheduled with (the
    // option may name it for a step that records none).
    FailureOr<mfsdp::NsPrecision> precision =
        mfsdp::stepNsPrecision(op, "mfsdp-sim", nsPrecision);
    if (failed(precision))
      return failure();
    mfsdp::cost::SimProfile priced = profile;
    priced.nsBf16 = *precision == mfsdp::NsPrecision::BF16;
    o.result = mfsdp::cost::simulate(o.step, priced);
    o.profile = priced;
    if (!o.result.ok) {
      op.emitError("cannot be simulated: ") << o.result.error;
      return failure();
    }
    out.push_back(std::move(o));
  }
  return success();
}

std::string summary(const Outcome &o, const mfsdp::cost::SimProfile &p) {
  using mfsdp::step::Phase;
  const auto &r = o.result;
  double fb = r.forward.span() + r.backward.span();
  double fbCompute = r.forward.computeBusy + r.backward.computeBusy;
  double exposed = r.forward.exposedComm + r.backward.exposedComm;
  double optFloor = mfsdp::cost::optimizerFloorSeconds(o.step, p);
  double optSustained = mfsdp::cost::optimizerSustainedFloorSeconds(o.step, p);
  return fmt::format(
      "{:<18} total {:8.1f} ms | fwd {:7.1f} bwd {:7.1f} opt {:7.1f} ms | "
      "exposed comm fwd+bwd {:6.2f} ms ({:5.2f}% of compute) | opt / floor "
      "{:5.3f} at peak, {:5.3f} at sustained rates | peak memory {:6.2f} GiB "
      "(reserved {:6.2f})",
      o.label, r.stepSeconds * 1e3, r.forward.span() * 1e3,
      r.backward.span() * 1e3, r.optimizer.span() * 1e3, exposed * 1e3,
      fbCompute > 0 ? 100 * exposed / fbCompute : 0.0,
      optFloor > 0 ? r.optimizer.span() / optFloor : 0.0,
      optSustained > 0 ? r.optimizer.span() / optSustained : 0.0,
      r.peakBytes / (1024.0 * 1024 * 1024), r.peakReservedBytes / (1024.0 * 1024 * 1024));
  (void)fb;
}

/// What the step library built from `module` allocates (mfsdp-compile's
/// library of this plan, with the emitter's default options): its arena on
/// the dp_shard rank that needs the most, the runtime's buffers at the
/// offsets the library gives them; and with it the device memory the plan
/// needs, that arena beside the trainer's activations of `step` (their
/// peak). `step` is the module's sched.step as the simulator read it. Or
/// why no library can be built.
std::string libraryArena(ModuleOp module, const mfsdp::step::Step &step) {
  std::string why;
  ScopedDiagnosticHandler quiet(module.getContext(), [&](Diagnostic &d) {
    if (why.empty())
      why = d.str();
    return success();
  });
  auto library = std::make_unique<mfsdp::LibraryPlan>();
  if (failed(mfsdp::buildLibraryPlan(module, mfsdp::EmitStepOptions{}, *library, &step)))
    return "step library: none can be built (" + why + ")";
  const std::vector<int64_t> &arena = library->memory.arenaBytes;
  const int64_t largest = arena.empty() ? 0 : *std::max_element(arena.begin(), arena.end());
  const double gib = 1024.0 * 1024 * 1024;
  const double activations = mfsdp::cost::activationPeakBytes(step);
  return fmt::format("step library arena {} bytes ({:.2f} GiB) on the largest of {} dp_shard "
                     "ranks: the runtime's buffers as the compiled library places them; "
                     "with the trainer's activations beside it (peak {:.2f} GiB) the plan "
                     "needs {:.2f} GiB (predicted; the peak memory above is the step's own "
                     "memory plan, activations and buffers in one arena)",
                     largest, static_cast<double>(largest) / gib, arena.size(),
                     activations / gib, (static_cast<double>(largest) + activations) / gib);
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(toolOptions);
  cl::ParseCommandLineOptions(argc, argv,
                              "mfsdp step simulator (predicted GPU times)\n");
  const mfsdp::cost::SimProfile *named =
      mfsdp::planner::findHardwareProfile(profileName.getValue());
  if (!named)
    return fail(mfsdp::planner::unknownHardwareMessage(profileName));
  mfsdp::cost::SimProfile overridden = *named;
  if (!profileSet.empty()) {
    std::string bad;
    if (!mfsdp::planner::applyProfileOverrides(overridden, profileSet.getValue(), bad))
      return fail(bad);
    bad = mfsdp::cost::validateProfile(overridden);
    if (!bad.empty())
      return fail("--profile-set: " + bad);
  }
  const mfsdp::cost::SimProfile *profile = &overridden;
  // The pipeline prices Newton-Schulz as the simulator does.
  const std::string precisionText(mfsdp::enumName(nsPrecision.getValue()));
  if (size_t at = pipeline.getValue().find("ns-precision="); at != std::string::npos) {
    const std::string given = pipeline.getValue().substr(
        at, pipeline.getValue().find_first_of(" }", at) - at);
    return fail("give the Newton-Schulz precision to mfsdp-sim (--" + given +
                "), not inside --pipeline: the simulator prices it too");
  }
  if (!pipeline.empty() && nsPrecision != mfsdp::NsPrecisionOption::Graph)
    pipeline.setValue(pipeline.getValue() + " ns-precision=" + precisionText);
  if (compare && pipeline.empty())
    return fail("--compare needs --pipeline (the options to plan with)");
  if (autotuneOptions && pipeline.empty())
    return fail("--autotune needs --pipeline (the options to search around)");

  DialectRegistry registry;
  registry.insert<mfsdp::plan::PlanDialect, mfsdp::sched::SchedDialect>();
  MLIRContext ctx(registry);
  ctx.printOpOnDiagnostic(false); // the location says where
  ctx.loadAllAvailableDialects();
  std::string error;
  auto file = openInputFile(input, &error);
  if (!file)
    return fail(error);
  auto sm = std::make_shared<llvm::SourceMgr>();
  sm->AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  SourceMgrDiagnosticHandler handler(*sm, &ctx);
  OwningOpRef<ModuleOp> module = mfsdp::parseModule(sm, &ctx);
  if (!module)
    return 1;

  if (autotuneOptions) {
    mfsdp::AutotuneResult tuned =
        mfsdp::autotune(*module, pipeline.getValue(), *profile);
    llvm::outs() << "predicted on " << profile->name << ": "
                 << profile->description << "\n"
                 << mfsdp::renderAutotune(tuned);
    return tuned.error.empty() && tuned.best >= 0 ? 0 : 1;
  }
  std::vector<Variant> variants;
  if (pipeline.empty())
    variants.push_back({"step", ""});
  else
    variants.push_back({"mfsdp (owners)", ""});
  std::vector<Outcome> outcomes;
  std::string arenaLine;
  std::vector<std::string> notSimulated; // baselines left out, and why
  for (size_t i = 0; i < variants.size(); ++i) {
    const Variant v = variants[i];
    OwningOpRef<ModuleOp> work = module->clone();
    if (!pipeline.empty()) {
      auto opts = mfsdp::PipelineOptions::createFromString(
          pipeline.getValue() + v.extraOptions);
      if (!opts)
        return fail("bad --pipeline options: " + pipeline.getValue() +
                    v.extraOptions);
      PassManager pm(&ctx);
      mfsdp::buildDefaultPipeline(pm, *opts);
      if (failed(pm.run(*work)))
        return 1;
    }
    if (failed(simulateModule(*work, v.label, *profile, outcomes)))
      return 1;
    // The plan's own library (not the baselines', which the runtime does
    // not run).
    if (i == 0 && !outcomes.empty())
      arenaLine = libraryArena(*work, outcomes.front().step);
    if (i == 0 && compare) {
      // The baselines run the optimizer the user's plan runs: a plan with
      // Muon is compared with MatrixFSDP and with FSDP2 running Muon on
      // gathered rows and on DTensors; a plan without Muon (AdamW, SGD)
      // with FSDP2 running the same optimizer on its per-parameter row
      // shards.
      bool muonPlan = false;
      for (const Outcome &o : outcomes)
        for (const mfsdp::step::Op &op : o.step.ops)
          muonPlan |= op.kind == mfsdp::step::OpKind::Optimizer &&
                      op.optimizer == "muon";
      // The DTensor baselines model DTensor on a 1-D dp_shard mesh: on an
      // HSDP mesh (dp_replicate > 1) they are left out, and said so.
      int64_t replicas = 1;
      for (auto graph : work->getOps<mfsdp::plan::GraphOp>())
        if (mfsdp::plan::MeshOp mesh = graph.getMesh())
          replicas = std::max(replicas, mesh.getDimSize("dp_replicate").value_or(1));
      if (muonPlan) {
        variants.push_back({"MatrixFSDP-style",
                            " owner-strategy=matrixfsdp group-units=1 row-layout=flat"});
        variants.push_back({"FSDP2-style",
                            " policy=adamw baseline=fsdp2 row-layout=per_param"});
        if (replicas > 1) {
          notSimulated.push_back(fmt::format(
              "FSDP2-DTensor, FSDP2-DTensor-mm: not simulated; they model "
              "torch.optim.Muon on DTensors over a 1-D dp_shard mesh, and this mesh "
              "has dp_replicate={}",
              replicas));
        } else {
          variants.push_back(
              {"FSDP2-DTensor",
               " policy=adamw baseline=fsdp2-dtensor row-layout=per_param"});
          variants.push_back(
              {"FSDP2-DTensor-mm",
               " policy=adamw baseline=fsdp2-dtensor-mm row-layout=per_param"});
        }
      } else {
        for (Outcome &o : outcomes)
          o.label = "mfsdp";
        variants.push_back({"FSDP2-style", " baseline=fsdp2-rows row-layout=per_param"});
      }
    }
  }
  if (outcomes.empty())
    return fail("the input holds no sched.step (give --pipeline to build one)");

  llvm::outs() << "predicted on " << profile->name << ": " << profile->description
               << "\n";
  for (const Outcome &o : outcomes) {
    if (!brief && outcomes.size() == 1) {
      llvm::outs() << mfsdp::cost::renderText(o.step, o.result, o.profile);
      double floor = mfsdp::cost::optimizerFloorSeconds(o.step, o.profile);
      double sustained =
          mfsdp::cost::optimizerSustainedFloorSeconds(o.step, o.profile);
      llvm::outs() << fmt::format(
          "optimizer floor (max over ranks of Newton-Schulz FLOPs / its precision's rate "
          "+ optimizer bytes / memory bandwidth): {:.3f} ms at peak rates, "
          "{:.3f} ms at the profile's sustained rates; optimizer phase / "
          "floor {:.3f} and {:.3f}\n",
          floor * 1e3, sustained * 1e3,
          floor > 0 ? o.result.optimizer.span() / floor : 0.0,
          sustained > 0 ? o.result.optimizer.span() / sustained : 0.0);
    }
    llvm::outs() << summary(o, o.profile) << "\n";
    if (&o == &outcomes.front())
      llvm::outs() << arenaLine << "\n";
  }
  for (const std::string &line : notSimulated)
    llvm::outs() << line << "\n";
  if (!tracePath.empty()) {
    auto out = openOutputFile(tracePath, &error);
    if (!out)
      return fail(error);
    out->os() << mfsdp::cost::chromeTrace(outcomes.front().step,
                                          outcomes.front().result);
    out->keep();
  }
  return 0;
}

//===- mfsdp-compile.cpp - A model graph to a step library ----------------===//
//
//   mfsdp-compile model.json --mesh=dp_shard=2 --policy=mixed_muon_adamw
//                 [--zero=3] [--layouts="owner-strategy=..."]
//                 [--hf [--hf-transformers=5]]
//                 [--accumulate] [--prefetch] [--prefetch-depth=N] [--bucket-mb=25]
//                 [--optimizer-order=first-units|landing] [--reduce-dtype=f32|bf16]
//                 [--cuda [--emit-cu=kernels.cu] [--nvcc=nvcc]]
//                 -o libstep.so [--emit-c=step.c] [--emit-mlir=plan.mlir]
//
// Imports the graph (format 1, or a Hugging Face config.json with --hf),
// plans layouts (--mfsdp-assign-layouts), lowers the plan to the C source of
// the step library (--emit-step-c) and builds it with the host C compiler
// ($CC, else cc) against the runtime (mfsdp/runtime.h, libmfsdp_rt). See
// docs/runtime.md.
//
//===----------------------------------------------------------------------===//
#include "dialects/plan/PlanDialect.h"
#include "dialects/plan/PlanOps.h"
#include "dialects/sched/SchedDialect.h"
#include "mfsdp/emit/EmitStep.h"
#include "mfsdp/import/PlanImport.h"
#include "passes/Autotune.h"
#include "passes/Passes.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

using namespace llvm;

#ifndef MFSDP_RUNTIME_INCLUDE_DIR
#error "MFSDP_RUNTIME_INCLUDE_DIR must name the runtime's include directory"
#endif
#ifndef MFSDP_RUNTIME_LIB_DIR
#error "MFSDP_RUNTIME_LIB_DIR must name the directory of libmfsdp_rt"
#endif
#ifndef MFSDP_INSTALL_LIBDIR
#define MFSDP_INSTALL_LIBDIR "lib"
#endif

/// The options --help shows: this tool's own, not every LLVM library's.
static cl::OptionCategory toolOptions("mfsdp-compile options");

static cl::opt<std::string> input(cl::cat(toolOptions), cl::Positional, cl::Required,
                                  cl::desc("<model graph .json>"));
static cl::opt<bool> hf(cl::cat(toolOptions), "hf", cl::desc("The input is a Hugging Face config.json"));
static cl::opt<int> hfTransformers(cl::cat(toolOptions), 
    "hf-transformers",
    cl::desc("With --hf, the transformers major version whose parameters to "
             "write: 5 (MoE experts fused, written as their matrices) or 4"),
    cl::init(5));
static cl::opt<std::string> mesh(cl::cat(toolOptions), "mesh", cl::desc("Device mesh, e.g. dp_shard=2 "
                                                  "or dp_replicate=2,dp_shard=2"));
static cl::opt<mfsdp::PolicyOption>
    policy(cl::cat(toolOptions), "policy",
           cl::desc("adamw, sgd, muon or mixed_muon_adamw (default: the "
                    "graph's)"),
           cl::init(mfsdp::PolicyOption::Graph),
           mfsdp::clValues<mfsdp::PolicyOption>());
static cl::opt<int> zero(cl::cat(toolOptions), "zero", cl::desc("ZeRO level 1, 2 or 3"), cl::init(0));
static cl::opt<std::string>
    layouts(cl::cat(toolOptions), "layouts", cl::desc("More options of --mfsdp-assign-layouts"));
static cl::opt<std::string> output(cl::cat(toolOptions), "o", cl::Required,
                                   cl::desc("The step library to write (.so)"),
                                   cl::value_desc("file"));
static cl::opt<std::string> emitC(cl::cat(toolOptions), "emit-c", cl::desc("Also write the generated C source here"),
                                  cl::value_desc("file"));
static cl::opt<std::string> emitMlir(cl::cat(toolOptions), "emit-mlir",
                                     cl::desc("Also write the planned IR here"),
                                     cl::value_desc("file"));
static cl::opt<bool> accumulateGrads(cl::cat(toolOptions), 
    "accumulate",
    cl::desc("Plan memory for gradient accumulation: keep the gradients "
             "between microbatches (the runtime refuses no-sync otherwise)"));
static cl::opt<bool> prefetchGathers(cl::cat(toolOptions), 
    "prefetch",
    cl::desc("Gather prefetch (ZeRO-3): the runtime starts the next unit's "
             "all-gather in the current unit's pre-hook, so it runs while the "
             "trainer computes; the memory plan holds two units' gathered "
             "copies at once"));
static cl::opt<int> prefetchDepth(cl::cat(toolOptions), 
    "prefetch-depth",
    cl::desc("Gather prefetch depth (ZeRO-3): the schedule, and the library's "
             "program, start each unit's all-gather this many gather groups "
             "ahead; the memory plan holds that many more copies (default: 1 "
             "with --prefetch, else 0)"),
    cl::init(-1));
static cl::opt<int> bucketMB(cl::cat(toolOptions), 
    "bucket-mb",
    cl::desc("Bucket the collectives (mfsdp-build-step, then "
             "mfsdp-bucket-collectives): a unit's row-shard gathers and "
             "reductions, and its owned matrices', in buckets of at most this "
             "many MiB of flat buffer, one collective each (a larger tensor "
             "alone); 0: one collective per parameter"),
    cl::init(25));
static cl::opt<std::string> autotuneProfile(cl::cat(toolOptions),
    "autotune",
    cl::desc("Choose the HSDP split (--mesh), --bucket-mb and "
             "--prefetch-depth with the cost model on this hardware profile "
             "(a100, h100, h100-ib, a100-pcie, h100-pcie): every candidate and "
             "the predicted gain over the given options are printed, and the "
             "library is built with the best"),
    cl::init(""));
static cl::opt<mfsdp::ReduceDType> reduceDtype(cl::cat(toolOptions), 
    "reduce-dtype",
    cl::desc("The dtype the library reduces gradients in (FSDP2's "
             "MixedPrecisionPolicy.reduce_dtype): f32, or bf16 (2 bytes an "
             "element on the wire, the step's reductions counted so; masters "
             "and optimizer state stay fp32)"),
    cl::init(mfsdp::ReduceDType::F32), mfsdp::clValues<mfsdp::ReduceDType>());
static cl::opt<std::string> optimizerOrder(cl::cat(toolOptions), 
    "optimizer-order",
    cl::desc("The optimizer phase's group order (mfsdp-schedule-overlap's "
             "optimizer-order), which the library's program runs: first-units "
             "or landing"),
    cl::init("first-units"));
static cl::opt<mfsdp::NsPrecisionOption> nsPrecision(cl::cat(toolOptions),
    "ns-precision",
    cl::desc("the precision Muon's Newton-Schulz runs in: graph (the default: the "
             "graph's #plan.muon ns_precision, fp32 if it has none), fp32 or bf16. "
             "Written into the graph, planned and priced at its rate, and the "
             "library's default (mfsdp_plan.muon_ns_precision)"),
    cl::init(mfsdp::NsPrecisionOption::Graph), mfsdp::clValues<mfsdp::NsPrecisionOption>());
static cl::opt<bool> cudaKernels(cl::cat(toolOptions), 
    "cuda",
    cl::desc("Also generate the plan's CUDA kernels (each row-shard bucket's "
             "pack and unpack, specialised with its constants), build them "
             "with nvcc for sm_80 and sm_90 and link them into the library "
             "with libcudart, for the CUDA backend"));
static cl::opt<std::string> emitCu(cl::cat(toolOptions), "emit-cu",
                                   cl::desc("With --cuda, also write the CUDA source here"),
                                   cl::value_desc("file"));
#ifndef MFSDP_NVCC
#define MFSDP_NVCC "nvcc"
#endif
#ifndef MFSDP_CUDART_DIR
#define MFSDP_CUDART_DIR ""
#endif
static cl::opt<std::string> nvcc(cl::cat(toolOptions), "nvcc", cl::desc("The CUDA compiler for --cuda"),
                                 cl::init(MFSDP_NVCC));
static cl::opt<std::string> cudartDir(cl::cat(toolOptions), "cudart-lib",
                                      cl::desc("The directory holding libcudart, for --cuda"),
                                      cl::init(MFSDP_CUDART_DIR));
static cl::opt<std::string> cc(cl::cat(toolOptions), "cc", cl::desc("The C compiler (default: $CC, else cc)"));
static cl::opt<std::string> runtimeInclude(cl::cat(toolOptions), 
    "runtime-include",
    cl::desc("The runtime's include directory (default: the installed tree's, "
             "else the build tree's)"),
    cl::init(MFSDP_RUNTIME_INCLUDE_DIR));
static cl::opt<std::string> runtimeLib(cl::cat(toolOptions), 
    "runtime-lib",
    cl::desc("The directory holding libmfsdp_rt (default: the installed tree's, "
             "else the build tree's)"),
    cl::init(MFSDP_RUNTIME_LIB_DIR));

/// An installed mfsdp-compile (<prefix>/bin) builds against the runtime
/// installed beside it (<prefix>/include, <prefix>/<libdir>), wherever the
/// tree was moved; one in the build tree against the build tree's.
/// --runtime-include and --runtime-lib override either.
static void useInstalledRuntime(const char *argv0) {
  static int anchor;
  const std::string exe = sys::fs::getMainExecutable(argv0, &anchor);
  if (exe.empty())
    return;
  SmallString<256> prefix = sys::path::parent_path(sys::path::parent_path(exe));
  SmallString<256> include = prefix, lib = prefix, header, library;
  sys::path::append(include, "include");
  sys::path::append(lib, MFSDP_INSTALL_LIBDIR);
  header = include;
  sys::path::append(header, "mfsdp", "runtime.h");
  library = lib;
  sys::path::append(library, "libmfsdp_rt.so");
  if (!sys::fs::exists(header) || !sys::fs::exists(library))
    return;
  if (!runtimeInclude.getNumOccurrences())
    runtimeInclude = std::string(include);
  if (!runtimeLib.getNumOccurrences())
    runtimeLib = std::string(lib);
}

static int fail(const Twine &msg) {
  errs() << "mfsdp-compile: error: " << msg << "\n";
  return 1;
}

static bool writeFile(StringRef path, StringRef text) {
  std::string err;
  auto out = mlir::openOutputFile(path, &err);
  if (!out) {
    errs() << "mfsdp-compile: error: " << err << "\n";
    return false;
  }
  out->os() << text;
  out->keep();
  return true;
}

int main(int argc, char **argv) {
  InitLLVM y(argc, argv);
  mfsdp::registerMFSDPPasses();
  cl::HideUnrelatedOptions(toolOptions);
  cl::ParseCommandLineOptions(argc, argv,
                              "mfsdp-compile: a model graph to a step library\n");
  useInstalledRuntime(argv[0]);

  auto buffer = MemoryBuffer::getFileOrSTDIN(input);
  if (!buffer)
    return fail("cannot read '" + input + "': " + buffer.getError().message());

  mlir::MLIRContext ctx;
  ctx.loadDialect<mfsdp::plan::PlanDialect>();
  ctx.printOpOnDiagnostic(false); // the location says where
  SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(*buffer), SMLoc());
  mlir::SourceMgrDiagnosticHandler diagHandler(sourceMgr, &ctx);

  mfsdp::graph::HFImportOptions hfOptions;
  hfOptions.transformersVersion = hfTransformers;
  mlir::OwningOpRef<mlir::ModuleOp> module = mfsdp::importGraphText(
      sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID())->getBuffer(), input,
      hf ? &hfOptions : nullptr, &ctx);
  if (!module)
    return 1;

  const bool seqLen = llvm::any_of(module->getOps<mfsdp::plan::GraphOp>(),
                                   [](mfsdp::plan::GraphOp g) { return g.getSeqLen() > 0; });
  const std::string precision(mfsdp::enumName(nsPrecision.getValue()));
  if (size_t at = layouts.getValue().find("ns-precision="); at != std::string::npos) {
    const std::string given =
        layouts.getValue().substr(at, layouts.getValue().find(' ', at) - at);
    return fail("give the Newton-Schulz precision to mfsdp-compile (--" + given +
                "), not in --layouts: the schedule and --autotune price it too");
  }
  if (!autotuneProfile.empty()) {
    const mfsdp::planner::HardwareProfile *profile =
        mfsdp::planner::findHardwareProfile(autotuneProfile);
    if (!profile)
      return fail("--autotune: " + mfsdp::planner::unknownHardwareMessage(autotuneProfile));
    // The search runs the default pipeline around these options; the
    // library's own buckets always have a limit, so 0 (one collective per
    // parameter) is not among the sizes tried.
    std::string base;
    auto put = [&](const std::string &kv) { base += (base.empty() ? "" : " ") + kv; };
    if (!mesh.empty())
      put("mesh=" + mesh);
    if (policy != mfsdp::PolicyOption::Graph)
      put("policy=" + std::string(mfsdp::enumName(policy.getValue())));
    if (zero != 0)
      put("zero=" + std::to_string(zero));
    if (!layouts.empty())
      put(layouts);
    put("hardware=" + autotuneProfile);
    if (nsPrecision != mfsdp::NsPrecisionOption::Graph)
      put("ns-precision=" + precision);
    if (!seqLen)
      put("tokens=1");
    put("reduce-dtype=" + std::string(mfsdp::enumName(reduceDtype.getValue())));
    const int depth0 = prefetchDepth >= 0 ? prefetchDepth.getValue() : prefetchGathers ? 1 : 0;
    put("bucket-mb=" + std::to_string(std::max(bucketMB.getValue(), 1)));
    put("prefetch=" + std::to_string(std::max(depth0, 0)));
    mfsdp::AutotuneResult tuned =
        mfsdp::autotune(*module, base, *profile, 0, {25, 100, 400});
    outs() << "predicted on " << profile->name << ": " << profile->description << "\n"
           << mfsdp::renderAutotune(tuned);
    if (!tuned.error.empty() || tuned.best < 0)
      return fail("--autotune found no plan to build");
    const mfsdp::AutotuneCandidate &best = tuned.tried[tuned.best];
    mesh.setValue(best.mesh);
    bucketMB.setValue(static_cast<int>(best.bucketMB));
    prefetchDepth.setValue(static_cast<int>(best.prefetch));
  }

  std::string options;
  auto add = [&](StringRef key, StringRef value) {
    if (value.empty())
      return;
    if (!options.empty())
      options += " ";
    options += (key + "=" + value).str();
  };
  add("mesh", mesh);
  if (policy != mfsdp::PolicyOption::Graph)
    add("policy", mfsdp::enumName(policy.getValue()));
  if (zero != 0)
    add("zero", std::to_string(zero));
  if (!layouts.empty())
    options += (options.empty() ? "" : " ") + layouts;
  if (nsPrecision != mfsdp::NsPrecisionOption::Graph)
    add("ns-precision", precision);
  if (bucketMB < 0)
    return fail("--bucket-mb must be 0 or more, got " + Twine(bucketMB.getValue()));
  mlir::PassManager pm(&ctx);
  std::string pipeline = "plan.graph(mfsdp-assign-layouts{" + options + "})";
  // The step program, for its buckets (the unit costs do not change them:
  // one token when the graph states no sequence length), scheduled and
  // memory-planned as mfsdp-sim and mfsdp-verify-schedule see it; the
  // library carries its optimizer phase as the runtime's program.
  if (prefetchDepth < -1 || prefetchDepth > 64)
    return fail("--prefetch-depth must be between 0 and 64, got " +
                std::to_string(prefetchDepth.getValue()));
  const int depth = prefetchDepth >= 0 ? prefetchDepth.getValue() : prefetchGathers ? 1 : 0;
  if (optimizerOrder != "first-units" && optimizerOrder != "landing")
    return fail("--optimizer-order must be first-units or landing, got '" +
                optimizerOrder + "'");
  {
    ctx.loadDialect<mfsdp::sched::SchedDialect>();
    const bool seq = seqLen;
    // The step counts the reductions in the library's reduce dtype: a bf16
    // gradient reduced in fp32 is widened into a buffer of fp32's size
    // (runtime::halfGradient), as the runtime's memory plan holds it.
    std::string build;
    if (!seq)
      build = "tokens=1 ";
    build += "reduce-dtype=" + std::string(mfsdp::enumName(reduceDtype.getValue()));
    pipeline += ",mfsdp-build-step" + (build.empty() ? "" : "{" + build + "}") +
                ",sched.step(";
    if (bucketMB > 0)
      pipeline += "mfsdp-bucket-collectives{bucket-mb=" + std::to_string(bucketMB) + "},";
    // The library's memory plan is placed with the step's: with the
    // gradients kept (--accumulate) and the buckets (--bucket-mb=0: none)
    // the library is emitted with below.
    pipeline += "mfsdp-schedule-overlap{prefetch=" + std::to_string(depth) +
                " optimizer-order=" + optimizerOrder + "},mfsdp-plan-memory{accumulate=" +
                (accumulateGrads ? "true" : "false") +
                " buckets=" + (bucketMB > 0 ? "true" : "false") + "})";
  }
  if (failed(mlir::parsePassPipeline(pipeline, pm, errs())))
    return fail("bad layout options '" + options + "'");
  if (failed(pm.run(*module)))
    return 1;
  if (!emitMlir.empty()) {
    std::string ir;
    raw_string_ostream os(ir);
    module->print(os);
    if (!writeFile(emitMlir, ir))
      return 1;
  }

  std::string source, cudaSource;
  raw_string_ostream os(source), cudaOs(cudaSource);
  mfsdp::EmitStepOptions emitOptions;
  emitOptions.accumulate = accumulateGrads;
  emitOptions.reduceDtype = reduceDtype.getValue();
  // The memory plan's own flag (the runtime's protocol, for a library
  // without the hooks' program) is 0 or 1; the program's lifetimes are
  // replayed whatever the depth.
  emitOptions.prefetch = depth > 0 ? 1 : 0;
  emitOptions.bucketBytes = static_cast<double>(bucketMB.getValue()) * (1 << 20);
  emitOptions.buckets = bucketMB > 0;
  if (!emitCu.empty() && !cudaKernels)
    return fail("--emit-cu needs --cuda");
  if (failed(mfsdp::emitStepLibrarySource(*module, os, emitOptions,
                                          cudaKernels ? &cudaOs : nullptr)))
    return 1;
  if (!emitC.empty() && !writeFile(emitC, source))
    return 1;
  if (!emitCu.empty() && !writeFile(emitCu, cudaSource))
    return 1;

  // Build: the sources in temporary files, the CUDA one compiled by nvcc,
  // then everything compiled and linked by cc.
  SmallVector<SmallString<128>> temporaries;
  auto cleanup = [&]() {
    for (const SmallString<128> &t : temporaries)
      sys::fs::remove(t);
  };
  auto temporary = [&](StringRef suffix, StringRef text, std::string &path) {
    SmallString<128> p;
    int fd = -1;
    if (std::error_code ec = sys::fs::createTemporaryFile("mfsdp-step", suffix, fd, p)) {
      fail("cannot create a temporary file: " + ec.message());
      return false;
    }
    raw_fd_ostream out(fd, /*shouldClose=*/true);
    out << text;
    temporaries.push_back(p);
    path = std::string(p);
    return true;
  };
  auto run = [&](StringRef what, const std::string &program,
                 const SmallVector<std::string> &args) {
    SmallVector<StringRef> refs(args.begin(), args.end());
    std::string errMsg;
    int rc = sys::ExecuteAndWait(program, refs, std::nullopt, {}, 0, 0, &errMsg);
    if (rc == 0)
      return true;
    std::string cmd;
    for (const std::string &a : args)
      cmd += a + " ";
    std::string why = "status " + std::to_string(rc);
    if (!errMsg.empty())
      why += ", " + errMsg;
    fail(what + " failed (" + why + "): " + cmd);
    return false;
  };
  std::string compiler = cc;
  if (compiler.empty()) {
    const char *env = std::getenv("CC");
    compiler = env && *env ? env : "cc";
  }
  ErrorOr<std::string> ccPath = sys::findProgramByName(compiler);
  if (!ccPath)
    return fail("C compiler '" + compiler + "' not found (set --cc or $CC)");
  std::string libDir = runtimeLib;
  SmallVector<std::string> args = {*ccPath, "-std=c11", "-O2", "-fPIC", "-shared",
                                   "-Wall",  "-Werror",  "-I" + runtimeInclude};
  std::string srcPath;
  if (!temporary("c", source, srcPath))
    return 1;
  args.push_back(srcPath);
  if (cudaKernels) {
    ErrorOr<std::string> nvccPath = sys::findProgramByName(nvcc);
    if (!nvccPath) {
      cleanup();
      return fail("CUDA compiler '" + nvcc + "' not found (set --nvcc)");
    }
    if (cudartDir.empty()) {
      cleanup();
      return fail("no libcudart directory (set --cudart-lib)");
    }
    std::string cuPath, objPath;
    if (!temporary("cu", cudaSource, cuPath) || !temporary("o", "", objPath)) {
      cleanup();
      return 1;
    }
    if (!run("nvcc", *nvccPath,
             {*nvccPath, "-std=c++17", "-O2", "-Xcompiler", "-fPIC",
              "-gencode", "arch=compute_80,code=sm_80", "-gencode",
              "arch=compute_90,code=sm_90", "-c", cuPath, "-o", objPath})) {
      cleanup();
      return 1;
    }
    // nvcc's host code needs the C++ runtime.
    args.append(
        {objPath, "-L" + cudartDir, "-Wl,-rpath," + cudartDir, "-lcudart", "-lstdc++"});
  }
  args.append({"-o", output, "-L" + libDir, "-Wl,-rpath," + libDir, "-lmfsdp_rt",
               "-Wl,--no-undefined"});
  // nvcc's host code registers its fatbinary with atexit, which the C
  // library's static part resolves to __cxa_atexit; when libmfsdp_rt
  // brings libraries of its own first (a sanitizer's runtime), that
  // reference comes after libc.so was read, so name it once more, last.
  if (cudaKernels)
    args.push_back("-lc");
  const bool built = run("the C compiler", *ccPath, args);
  cleanup();
  return built ? 0 : 1;
}

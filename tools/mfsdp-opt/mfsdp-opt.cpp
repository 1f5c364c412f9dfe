//===- mfsdp-opt.cpp - The mfsdp optimizer driver -------------------------===//
#include "dialects/plan/PlanDialect.h"
#include "dialects/sched/SchedDialect.h"
#include "mfsdp/graph/TextLimits.h"
#include "mfsdp/import/PlanImport.h"
#include "passes/Passes.h"
#include "passes/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "mlir/Tools/ParseUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

/// Gives back the memory of the input's text once it is parsed: a file
/// read through a private mapping (llvm::MemoryBuffer maps large files)
/// holds its pages resident for the whole run, as much as the text (212 MiB
/// for the 100,000-unit graph), though nothing reads it after the parse but
/// a diagnostic quoting its line. The pages are dropped, not the mapping: a
/// later read faults them in again from the unchanged file.
static void releaseParsedText(const llvm::MemoryBuffer &text) {
  if (text.getBufferKind() != llvm::MemoryBuffer::MemoryBuffer_MMap)
    return;
  const long page = sysconf(_SC_PAGESIZE);
  if (page <= 0)
    return;
  const auto size = static_cast<uintptr_t>(page);
  const auto start = reinterpret_cast<uintptr_t>(text.getBufferStart());
  const auto end = reinterpret_cast<uintptr_t>(text.getBufferEnd());
  const uintptr_t first = (start + size - 1) / size * size, last = end / size * size;
  if (last > first)
    (void)madvise(reinterpret_cast<void *>(first), last - first, MADV_DONTNEED);
}

/// Sets --mlir-print-assume-verified, unless the command line set it or
/// asked for the IR between passes (--mlir-print-ir-*: printed before the
/// pass manager verifies, after a failed pass too, it may be invalid, and
/// the flag holds for those printers as well).
static void assumeVerifiedWhenPrinting() {
  auto &options = llvm::cl::getRegisteredOptions();
  for (const auto &[name, option] : options)
    if (name.starts_with("mlir-print-ir") && option->getNumOccurrences() > 0)
      return;
  auto it = options.find("mlir-print-assume-verified");
  if (it != options.end() && it->second->getNumOccurrences() == 0)
    (void)it->second->addOccurrence(0, it->first, "true");
}

/// tools/MimallocOptions.c, linked where the tool links mimalloc: mimalloc
/// may keep freed pages a while from here on.
extern "C" void mfsdpMimallocSettled(void) __attribute__((weak));

/// Writes out what `out` holds and keeps the file; false, with an error
/// naming the cause (a full disk), when it cannot be written. The stream's
/// error is cleared either way: left set, LLVM stops the process with a
/// fatal error when the stream is destroyed.
static bool keepOutput(llvm::ToolOutputFile &out) {
  out.os().flush();
  if (out.os().has_error()) {
    llvm::errs() << "error: cannot write the output: " << out.os().error().message()
                 << "\n";
    out.os().clear_error();
    return false;
  }
  out.keep();
  return true;
}

/// Whether the run is one that runDirectly does as MlirOptMain would: the
/// command line (`args`, as given) names only passes and pipelines, the
/// output, and options that the context, the printer and the timer read
/// themselves; the input has no `expected-*` comment (MlirOptMain checks
/// them even without --verify-diagnostics) and no resource section.
/// Anything else (split input, bytecode, reproducers, IR printing between
/// passes, remarks, action logging, a response file) goes through
/// MlirOptMain. The command line is read as given rather than through the
/// parsed options: LLVM is built without RTTI, and UBSan's vptr check
/// refuses calls on some of its option objects.
static bool runsDirectly(llvm::ArrayRef<char *> args, const llvm::MemoryBuffer &input) {
  static const llvm::StringSet<> kDirect = {
      "o",
      "verify-each",
      "pass-pipeline",
      "mlir-disable-threading",
      "mlir-timing",
      "mlir-timing-display",
      "mlir-output-format",
      "mlir-print-assume-verified",
      "mlir-print-debuginfo",
      "mlir-print-local-scope",
      "mlir-print-op-on-diagnostic",
      "mlir-print-stacktrace-on-diagnostic"};
  for (const char *given : args.drop_front()) {
    if (!given)
      break;
    const llvm::StringRef arg(given);
    if (arg.starts_with("@") || arg == "--")
      return false;
    if (!arg.starts_with("-") || arg == "-")
      continue; // the input, or the value of the option before
    const llvm::StringRef name = arg.ltrim('-').split('=').first;
    if (!kDirect.contains(name) && !mlir::PassInfo::lookup(name) &&
        !mlir::PassPipelineInfo::lookup(name))
      return false;
  }
  const char *text = input.getBufferStart();
  const size_t size = input.getBufferSize();
  for (const char *marker : {"expected-", "{-#"})
    if (memmem(text, size, marker, std::strlen(marker)))
      return false;
  return true;
}

/// What MlirOptMain does for one buffer (parse, run the pipeline, print,
/// each timed under --mlir-timing, diagnostics against the input), except
/// that on success the IR and its context are never destroyed: the result
/// is written and flushed, and the process ends without freeing them, as
/// a compiler's driver does (clang's -disable-free). Tearing down a large
/// step took about half a second, freeing memory the exit frees at once.
static int runDirectly(std::unique_ptr<llvm::MemoryBuffer> file,
                       llvm::ToolOutputFile &out, mlir::DialectRegistry &registry,
                       const mlir::MlirOptMainConfig &config) {
  auto sourceMgr = std::make_shared<llvm::SourceMgr>();
  sourceMgr->AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  // As MlirOptMain: a context of its own answers --mlir-disable-threading,
  // and lends its threads to the one the IR lives in.
  mlir::MLIRContext threads;
  auto context = std::make_unique<mlir::MLIRContext>(
      registry, mlir::MLIRContext::Threading::DISABLED);
  if (threads.isMultithreadingEnabled())
    context->setThreadPool(threads.getThreadPool());
  mlir::SourceMgrDiagnosticHandler diagnostics(*sourceMgr, context.get());
  mlir::FallbackAsmResourceMap resources;
  mlir::OwningOpRef<mlir::Operation *> op;
  {
    mlir::DefaultTimingManager tm;
    mlir::applyDefaultTimingManagerCLOptions(tm);
    mlir::TimingScope timing = tm.getRootScope();
    // The parse runs without threads (no locking of the uniquers).
    const bool threaded = context->isMultithreadingEnabled();
    context->disableMultithreading();
    mlir::ParserConfig parserConfig(context.get(), config.shouldVerifyOnParsing(),
                                    &resources);
    mlir::TimingScope parserTiming = timing.nest("Parser");
    op = mlir::parseSourceFileForTool(sourceMgr, parserConfig,
                                      !config.shouldUseExplicitModule());
    parserTiming.stop();
    context->enableMultithreading(threaded);
    if (!op)
      return 1;
    mlir::PassManager pm(op.get()->getName(), mlir::PassManager::Nesting::Implicit);
    pm.enableVerifier(config.shouldVerifyPasses());
    if (mlir::failed(mlir::applyPassManagerCLOptions(pm)))
      return 1;
    pm.enableTiming(timing);
    if (mlir::failed(config.setupPassPipeline(pm)) || mlir::failed(pm.run(*op)))
      return 1;
    mlir::TimingScope outputTiming = timing.nest("Output");
    // The pipeline's large arrays are freed; printing frees small ones
    // (tools/MimallocOptions.c).
    if (mfsdpMimallocSettled)
      mfsdpMimallocSettled();
    mlir::AsmState state(op.get(), mlir::OpPrintingFlags(), /*locationMap=*/nullptr,
                         &resources);
    op.get()->print(out.os(), state);
    out.os() << '\n';
  } // the timing report, if asked for
  if (!keepOutput(out))
    return 1;
  llvm::outs().flush();
  llvm::errs().flush();
  std::fflush(nullptr);
  // The IR, its context and the input stay as they are: the process ends.
  (void)op.release();
  (void)context.release();
  std::_Exit(0);
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  // Diagnostics without the op under them, the result printed in local
  // scope (mfsdp/import/PlanImport.h).
  std::vector<char *> args = mfsdp::withToolDefaults(argc, argv, /*localScope=*/true);
  argc = static_cast<int>(args.size()) - 1;
  argv = args.data();
  mfsdp::registerMFSDPPasses();
  mfsdp::registerDefaultPipeline();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();

  mlir::DialectRegistry registry;
  registry.insert<mfsdp::plan::PlanDialect, mfsdp::sched::SchedDialect,
                  mlir::func::FuncDialect>();
  auto [input, output] = mlir::registerAndParseCLIOptions(
      argc, argv, "mfsdp optimizer driver: sharded training plans\n", registry);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  // The printer verifies the whole op again before it prints, to fall back
  // to the generic form on invalid IR. When the parser verified the input
  // and the pass manager verified after each pass that changed it, what is
  // printed has been verified: the printer is told so (8% of the
  // instructions of a 10,000-unit pipeline run). Said on the command line,
  // either way, the user's choice stands.
  if (config.shouldVerifyOnParsing() && config.shouldVerifyPasses())
    assumeVerifiedWhenPrinting();
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(argc, argv, input, output, registry));

  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> file = mlir::openInputFile(input, &error);
  if (!file) {
    llvm::errs() << error << "\n";
    return 1;
  }
  // MLIR's parser, verifier and printer recurse once per nesting level: a
  // few thousand levels exhaust the stack, so deeper input is refused here.
  if (std::optional<mfsdp::graph::TextProblem> p = mfsdp::graph::checkMlirNesting(
          std::string_view(file->getBufferStart(), file->getBufferSize()))) {
    mfsdp::printErrorAt(file->getBufferIdentifier(), p->line, p->column,
                        p->message);
    return 1;
  }
  // The pass pipeline is set up once the input is parsed: its text goes
  // then (the pipeline itself as the command line asked).
  const llvm::MemoryBuffer *text = file.get();
  config.setPassPipelineSetupFn([setup = config, text](mlir::PassManager &pm) {
    releaseParsedText(*text);
    return setup.setupPassPipeline(pm);
  });
  std::unique_ptr<llvm::ToolOutputFile> out = mlir::openOutputFile(output, &error);
  if (!out) {
    llvm::errs() << error << "\n";
    return 1;
  }
  // Written in 1 MiB pieces rather than the file system's block (4 KiB):
  // a large step's text is hundreds of MB, a system call each block.
  out->os().SetBufferSize(1 << 20);
  if (runsDirectly(llvm::ArrayRef(argv, argc), *file))
    return runDirectly(std::move(file), *out, registry, config);
  if (mlir::failed(mlir::MlirOptMain(out->os(), std::move(file), registry, config))) {
    out->os().clear_error(); // a failed run's partial output is dropped
    return 1;
  }
  return keepOutput(*out) ? 0 : 1;
}

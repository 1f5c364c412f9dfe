//===- mfsdp-opt.cpp - The mfsdp optimizer driver -------------------------===//
#include "dialects/plan/PlanDialect.h"
#include "dialects/sched/SchedDialect.h"
#include "mfsdp/graph/TextLimits.h"
#include "mfsdp/import/PlanImport.h"
#include "passes/Passes.h"
#include "passes/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
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
  if (mlir::failed(mlir::MlirOptMain(out->os(), std::move(file), registry, config)))
    return 1;
  out->keep();
  return 0;
}

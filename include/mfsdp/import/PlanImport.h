//===- PlanImport.h - Model graphs to and from the plan dialect -*- C++ -*-===//
#ifndef MFSDP_IMPORT_PLANIMPORT_H
#define MFSDP_IMPORT_PLANIMPORT_H

#include "mfsdp/graph/Graph.h"
#include "mfsdp/graph/HFConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LLVM.h"

#include <memory>
#include <string>
#include <vector>

namespace llvm {
class SourceMgr;
}

namespace mfsdp::plan {
class GraphOp;
}

namespace mfsdp {

/// Builds a module holding one plan.graph for `g`. Ops get locations in
/// `file` at the line and column of their JSON value (`text` may be empty,
/// then the locations are unknown). The module is verified; on failure the
/// diagnostic has been emitted and null is returned.
mlir::OwningOpRef<mlir::ModuleOp>
importGraph(const graph::Graph &g, mlir::MLIRContext *ctx,
            llvm::StringRef file = "", llvm::StringRef text = "");

/// Parses `text`, read from `file`: graph format 1, or a Hugging Face
/// config.json when `hf` is given (with its import options), and imports
/// it. A malformed input is reported as an error at its line and column in
/// `file` (`/json/pointer: what was expected`); null is returned then.
mlir::OwningOpRef<mlir::ModuleOp>
importGraphText(llvm::StringRef text, llvm::StringRef file,
                const graph::HFImportOptions *hf, mlir::MLIRContext *ctx);

/// Parses the main buffer of `sourceMgr` as a module, first refusing, at
/// its line and column, input nested deeper than graph::kMaxMlirDepth (the
/// parser would exhaust its stack). Null, with the error emitted, on
/// failure.
mlir::OwningOpRef<mlir::ModuleOp>
parseModule(const std::shared_ptr<llvm::SourceMgr> &sourceMgr,
            mlir::MLIRContext *ctx);

/// Reports `message` as an error at `line`:`column` of `file`, whose text
/// is `text`; the source line is shown under it unless it is too long to
/// read (a graph written on one line would be echoed whole).
void emitErrorAt(mlir::MLIRContext *ctx, llvm::StringRef file,
                 llvm::StringRef text, int line, int column,
                 const std::string &message);

/// Prints "<file>:<line>:<column>: error: <message>" to stderr, with no
/// source line: for errors found before a context or source manager holds
/// the input.
void printErrorAt(llvm::StringRef file, int line, int column,
                  llvm::StringRef message);

/// The tools' command line with their defaults added where it does not
/// name the option:
/// - `--mlir-print-op-on-diagnostic=false`: MLIR prints the op under each
///   diagnostic on it by default, and for a plan.graph that is the whole
///   model (69 KB for Llama-3-8B) while the location already says where;
/// - with `localScope`, `--mlir-print-local-scope` (unless
///   `--mlir-print-debuginfo` is given, whose locations print as aliases):
///   the plan and sched dialects declare no aliases, so the printer's alias
///   pass over the whole module finds none; on large steps it cost a tenth
///   of the run and its state grows with the IR. The text is the same but
///   for the blank line the printer otherwise ends the module with.
/// The result holds the arguments (the last NULL) from `argv` and static
/// strings.
std::vector<char *> withToolDefaults(int argc, char **argv, bool localScope = false);

/// Reads the plan.graph back into the plain graph form. Emits an error on
/// the offending op and fails if the graph cannot be expressed in the format
/// (for example, placements chosen by planning other than external).
mlir::LogicalResult exportGraph(plan::GraphOp op, graph::Graph &out);

/// The single plan.graph of `module`, or null with an error emitted.
plan::GraphOp findSingleGraph(mlir::ModuleOp module);

/// Registers the translations --import-mfsdp-graph, --import-hf-config and
/// --export-mfsdp-graph for mfsdp-translate.
void registerGraphTranslations();

} // namespace mfsdp

#endif // MFSDP_IMPORT_PLANIMPORT_H

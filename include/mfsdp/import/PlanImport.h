//===- PlanImport.h - Model graphs to and from the plan dialect -*- C++ -*-===//
#ifndef MFSDP_IMPORT_PLANIMPORT_H
#define MFSDP_IMPORT_PLANIMPORT_H

#include "mfsdp/graph/Graph.h"
#include "mfsdp/graph/HFConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LLVM.h"

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

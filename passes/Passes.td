//===- Passes.td - mfsdp passes ------------------------------*- tablegen -*-===//
#ifndef MFSDP_PASSES_TD
#define MFSDP_PASSES_TD

include "mlir/Pass/PassBase.td"

def PrintSummary : Pass<"mfsdp-print-summary", "::mlir::ModuleOp"> {
  let summary = "Print a summary of each plan.graph";
  let description = [{
    For every `plan.graph`: the mesh, the number of parameters and elements
    by module kind, bytes per dtype, the units with their parameter counts
    and compute per token, tied parameters, and which parameters are
    external (owned by a tensor/expert-parallel dim). Leaves the IR as it is.

    ```
    mfsdp-opt model.mlir --mfsdp-print-summary -o /dev/null
    ```
  }];
  let options = [
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "Where to write the summary ('-' is stdout)">,
  ];
}

#endif // MFSDP_PASSES_TD

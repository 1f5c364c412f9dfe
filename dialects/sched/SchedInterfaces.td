//===- SchedInterfaces.td - Interfaces of the sched dialect -*- tablegen -*-===//
#ifndef MFSDP_SCHED_INTERFACES_TD
#define MFSDP_SCHED_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Sched_CollectiveOpInterface : OpInterface<"CollectiveOpInterface"> {
  let cppNamespace = "::mfsdp::sched";
  let description = [{
    A collective of the step: every rank of a group of `ranks` ranks over
    `mesh_axes` calls it on communicator `comm` with its `src` buffer and
    receives into its `dst` buffer. `bytes` is the size of the full buffer
    (the gathered one, or the one before reduction); a variable collective
    (`all_gather_v`, `reduce_scatter_v`) says in `chunks` what each rank
    contributes.

    The interface verifies what every collective must hold, in one place:
    at least one mesh axis, at least one rank, buffers that exist on every
    rank (no `only_rank`), the full buffer's side large enough for `bytes`
    (the destination of a gather, the source of a reduction, when they are
    distinct buffers), chunks exactly on the variable collectives, one per rank,
    adding up to `bytes`, and a token exactly when the collective is
    `async`. The axes and ranks against the mesh are checked with the step's
    symbol uses (`sched.step` names its mesh).
  }];
  let methods = [
    InterfaceMethod<"The buffer this rank contributes.", "::mlir::Value",
                    "getSrc">,
    InterfaceMethod<"The buffer this rank receives into.", "::mlir::Value",
                    "getDst">,
    InterfaceMethod<"The mesh axes the group spans, as strings.",
                    "::mlir::ArrayAttr", "getMeshAxes">,
    InterfaceMethod<"The number of ranks in the group.", "uint64_t",
                    "getRanks">,
    InterfaceMethod<"Bytes of the full buffer.", "uint64_t", "getBytes">,
    InterfaceMethod<"Bytes each rank contributes (variable collectives).",
                    "std::optional<::llvm::ArrayRef<int64_t>>", "getChunks">,
    InterfaceMethod<"The communicator.", "uint64_t", "getComm">,
    InterfaceMethod<"Whether the op only starts the collective.", "bool",
                    "getAsync">,
    InterfaceMethod<"The token of an async collective, else null.",
                    "::mlir::Value", "getToken">,
    InterfaceMethod<"Whether each rank contributes its own number of bytes.",
                    "bool", "isVariable">,
    InterfaceMethod<"Whether the destination holds the full buffer.",
                    "bool", "fullDestination">,
    InterfaceMethod<"Whether the source holds the full buffer.",
                    "bool", "fullSource">,
  ];
  let verify = [{
    return ::mfsdp::sched::detail::verifyCollective($_op);
  }];
}

#endif // MFSDP_SCHED_INTERFACES_TD

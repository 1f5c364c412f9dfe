//===- PlanBase.td - The plan dialect, its base op and enums -*- tablegen -*-===//
//
// The plan dialect describes a model for sharding decisions: the device mesh,
// the parameters with their global shapes, the units (groups of parameters
// gathered and freed together) in forward execution order, and later the
// placement and optimizer chosen for each parameter.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_PLAN_BASE_TD
#define MFSDP_PLAN_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Plan_Dialect : Dialect {
  let name = "plan";
  let cppNamespace = "::mfsdp::plan";
  let summary = "Model graphs, meshes and parameter placements for sharding plans";
  let description = [{
    The `plan` dialect is the first IR level of mfsdp. A `plan.graph` holds
    one model: a `plan.mesh` naming the data-parallel (`dp_shard`,
    `dp_replicate`) and tensor/expert-parallel dims, one `plan.param` per
    parameter with its global shape and module kind, and one `plan.unit` per
    group of parameters that is gathered and freed together, in forward
    execution order. Placements (`#plan.row_shard`, `#plan.block_shard`,
    `#plan.owner`, `#plan.replicate`, `#plan.external`) and optimizers
    (`#plan.adamw`, `#plan.sgd`, `#plan.muon`) are attributes on parameters.
    Everything here is global: shapes are those of the unsharded model.
  }];
  let useDefaultAttributePrinterParser = 0;
  let extraClassDeclaration = [{
    /// Parses a `#plan.` attribute; the same text twice gives the attribute
    /// the first parse made without parsing it again: a graph repeats a
    /// handful of kernels, placements and optimizers on every unit and
    /// parameter, and MLIR parses each dialect attribute through a nested
    /// parser. The first 4096 distinct texts are kept; a text naming an
    /// alias (`#a`, `!t`) is parsed each time.
    ::mlir::Attribute parseAttribute(::mlir::DialectAsmParser &parser,
                                     ::mlir::Type type) const override;
    void printAttribute(::mlir::Attribute attr,
                        ::mlir::DialectAsmPrinter &printer) const override;

    /// Writes `attr` as MLIR prints it, from text made once per attribute:
    /// a graph gives its hundreds of thousands of parameters a handful of
    /// placements and optimizers, and MLIR prints a dialect attribute
    /// through a nested printer and a copy of its text every time.
    void printCachedAttr(::llvm::raw_ostream &os, ::mlir::Attribute attr) const;

  private:
    mutable ::llvm::DenseMap<::mlir::Attribute, std::string> attrText;
    mutable std::mutex attrTextMutex;
    mutable ::llvm::StringMap<::mlir::Attribute> parsedAttrs;
    mutable std::mutex parsedAttrsMutex;

  public:
  }];
}

class Plan_Op<string mnemonic, list<Trait> traits = []>
    : Op<Plan_Dialect, mnemonic, traits>;

class Plan_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Plan_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

/// A double parameter that prints in the shortest form that reads back
/// exactly (the graph format round trip is lossless).
def Plan_F64Param : AttrOrTypeParameter<"::mfsdp::plan::F64", "a 64-bit float"> {
  let parser = "::mfsdp::plan::parseF64($_parser)";
  let printer = "::mfsdp::plan::printF64($_printer, $_self)";
}

// A unit's kernels (#plan.kernel), printed directly: a graph of many
// blocks prints nine kernels a unit, and MLIR's generic path (an alias
// lookup, the dialect's printer, a nested printer per kernel) cost more than
// the rest of the unit. The text is the same; parsing is the default.
// A kernel's shape, `[n, k, count]`: its integers read directly (MLIR's
// dense-array parser goes through its generic attribute path per shape);
// anything but `[` is left to that parser, for its message.
def Plan_ShapeParam : AttrOrTypeParameter<"::mlir::DenseI64ArrayAttr",
                                          "a dense i64 array"> {
  let parser = "::mfsdp::plan::parseShape($_parser)";
  let printer = "$_printer.printStrippedAttrOrType($_self)";
}

def Plan_KernelsParam : OptionalParameter<"::mlir::ArrayAttr",
                                          "the forward's kernels (#plan.kernel)"> {
  let printer = "::mfsdp::plan::printKernels($_printer, $_self)";
}

def Plan_ParamKind : I32EnumAttr<"ParamKind",
    "kind of the module that holds a parameter", [
      I32EnumAttrCase<"linear", 0>,
      I32EnumAttrCase<"embedding", 1>,
      I32EnumAttrCase<"output", 2>,
      I32EnumAttrCase<"norm", 3>,
      I32EnumAttrCase<"router", 4>,
      I32EnumAttrCase<"expert", 5>,
      I32EnumAttrCase<"other", 6>,
    ]> {
  let cppNamespace = "::mfsdp::plan";
}

def Plan_PolicyKind : I32EnumAttr<"PolicyKind", "optimizer policy", [
      I32EnumAttrCase<"adamw", 0>,
      I32EnumAttrCase<"sgd", 1>,
      I32EnumAttrCase<"muon", 2>,
      I32EnumAttrCase<"mixed_muon_adamw", 3>,
    ]> {
  let cppNamespace = "::mfsdp::plan";
}

def Plan_MuonScale : I32EnumAttr<"MuonScale", "Muon update scale", [
      I32EnumAttrCase<"match_rms_adamw", 0>,
      I32EnumAttrCase<"original", 1>,
    ]> {
  let cppNamespace = "::mfsdp::plan";
}

def Plan_NsPrecision : I32EnumAttr<"NsPrecision",
    "precision of Muon's Newton-Schulz products", [
      I32EnumAttrCase<"fp32", 0>,
      I32EnumAttrCase<"bf16", 1>,
    ]> {
  let cppNamespace = "::mfsdp::plan";
}

def Plan_RowLayout : I32EnumAttr<"RowLayout",
    "how the row shards of a unit are laid out in its gather buffer", [
      I32EnumAttrCase<"per_param", 0>,
      I32EnumAttrCase<"flat", 1>,
    ]> {
  let cppNamespace = "::mfsdp::plan";
}

#endif // MFSDP_PLAN_BASE_TD

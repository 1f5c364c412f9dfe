//===- QuietProperties.td - prop-dict printing without a dictionary -*- tablegen -*-===//
//
// The extraClassDeclaration of an op whose format starts with
// "prop-dict ``" (the empty literal keeps the text as without it) and ends
// with attr-dict: printing it builds no attribute dictionary
// (dialects/QuietProperties.h).
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_QUIET_PROPERTIES_TD
#define MFSDP_QUIET_PROPERTIES_TD

defvar QuietPropertiesDecl = [{
  static void printProperties(::mlir::MLIRContext *ctx, ::mlir::OpAsmPrinter &p,
                              const Properties &prop,
                              ::llvm::ArrayRef<::llvm::StringRef> elided) {
    if (!::mfsdp::printsAllProperties<ConcreteOpType>(elided))
      genericPrintProperties(p, getPropertiesAsAttr(ctx, prop), elided);
  }
}];

#endif // MFSDP_QUIET_PROPERTIES_TD

//===- QuietProperties.h - prop-dict printing without a dictionary -*- C++ -*-===//
//
// The plan and sched ops written in the hundreds of thousands print every
// inherent attribute through their assembly format. MLIR's `attr-dict` of
// an op with properties builds (and uniques, for the context's lifetime) a
// dictionary of all of them per op printed; these ops print `prop-dict`
// instead, which prints the properties a format leaves out, and their
// `attr-dict` then prints the discardable attributes alone.
// dialects/QuietProperties.td declares the ops' printProperties with it.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_DIALECTS_QUIETPROPERTIES_H
#define MFSDP_DIALECTS_QUIETPROPERTIES_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"

namespace mfsdp {

/// Whether `elided` names every property of OpT: its format prints them
/// all, and its `prop-dict` has nothing to print. The generated printer
/// elides the same names for every op of a kind (those its format uses,
/// present or not), so the answer is found once per kind.
template <typename OpT>
bool printsAllProperties(llvm::ArrayRef<llvm::StringRef> elided) {
  static const bool all = llvm::all_of(OpT::getAttributeNames(), [&](llvm::StringRef name) {
    return llvm::is_contained(elided, name);
  });
  return all;
}

} // namespace mfsdp

#endif // MFSDP_DIALECTS_QUIETPROPERTIES_H

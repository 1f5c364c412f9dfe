//===- InternalError.h - Stopping on a bug of lib/step ----------*- C++ -*-===//
//
// A check that fails only on a bug of this library, never on its input:
// the process stops with a message rather than go on from a state it lost
// track of (a wrong step or program would be a silent wrong answer).
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_LIB_STEP_INTERNALERROR_H
#define MFSDP_LIB_STEP_INTERNALERROR_H

#include <cstdio>
#include <cstdlib>

namespace mfsdp::step {

/// Prints "mfsdp: internal error in WHERE: WHAT" and aborts.
[[noreturn]] inline void internalError(const char *where, const char *what) {
  std::fprintf(stderr, "mfsdp: internal error in %s: %s\n", where, what);
  std::fflush(stderr);
  std::abort();
}

} // namespace mfsdp::step

#endif // MFSDP_LIB_STEP_INTERNALERROR_H

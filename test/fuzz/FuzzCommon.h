//===- FuzzCommon.h - What the fuzz targets share ---------------*- C++ -*-===//
//
// The fuzz targets (test/fuzz/*.cpp) are libFuzzer targets: built with
// clang's -fsanitize=fuzzer by `make fuzz` (MFSDP_FUZZ=ON), or, in every
// other build, linked with FuzzMain.cpp, which runs each file it is given
// once (the seeds, as a regression test). A target returns 0 for every
// input; a crash, a sanitizer report or a leak is the failure.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_TEST_FUZZ_FUZZCOMMON_H
#define MFSDP_TEST_FUZZ_FUZZCOMMON_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace mfsdp::fuzz {

/// A context with the plan, sched and func dialects loaded whose
/// diagnostics are dropped (an error is an expected answer, not output).
mlir::MLIRContext &context();

} // namespace mfsdp::fuzz

#endif // MFSDP_TEST_FUZZ_FUZZCOMMON_H

//===- Step.cpp - Names of the step program's op kinds -----------------------===//
#include "mfsdp/step/Step.h"

namespace mfsdp::step {

std::string_view opKindName(OpKind k) {
  switch (k) {
  case OpKind::Compute: return "compute";
  case OpKind::Collective: return "collective";
  case OpKind::Wait: return "wait";
  case OpKind::Optimizer: return "optimizer";
  case OpKind::Alloc: return "alloc";
  case OpKind::Free: return "free";
  }
  return "?";
}

std::vector<int64_t> microbatchOf(const Step &s) {
  std::vector<int64_t> out(s.ops.size(), 0);
  auto isCompute = [&](size_t i) {
    const Op &op = s.ops[i];
    return op.kind == OpKind::Compute && op.compute != "copy" &&
           op.phase != Phase::Optimizer;
  };
  int64_t m = 0;
  size_t lastBackward = s.ops.size(); // the last backward compute, if last
  for (size_t i = 0; i < s.ops.size(); ++i) {
    if (isCompute(i)) {
      if (s.ops[i].phase == Phase::Forward && lastBackward < i) {
        // The next microbatch: from the first forward op since.
        size_t from = i;
        for (size_t k = lastBackward + 1; k < i; ++k)
          if (s.ops[k].phase == Phase::Forward) {
            from = k;
            break;
          }
        ++m;
        for (size_t k = from; k < i; ++k)
          out[k] = m;
      }
      lastBackward = s.ops[i].phase == Phase::Backward ? i : s.ops.size();
    }
    out[i] = m;
  }
  return out;
}

} // namespace mfsdp::step

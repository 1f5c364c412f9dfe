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

} // namespace mfsdp::step

//===- Step.cpp - Names of the step program's enums -----------------------===//
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

std::string_view phaseName(Phase p) {
  switch (p) {
  case Phase::Forward: return "forward";
  case Phase::Backward: return "backward";
  case Phase::Optimizer: return "optimizer";
  }
  return "?";
}

std::string_view collKindName(CollKind k) {
  switch (k) {
  case CollKind::AllGather: return "all_gather";
  case CollKind::ReduceScatter: return "reduce_scatter";
  case CollKind::AllReduce: return "all_reduce";
  case CollKind::AllGatherV: return "all_gather_v";
  case CollKind::ReduceScatterV: return "reduce_scatter_v";
  }
  return "?";
}

} // namespace mfsdp::step

//===- CallCheck.cpp - The ranks' call sequences compared -----------------===//
//
// With MFSDP_CHECK_CALLS=1 (every rank the same; mfsdp_create refuses a
// mix), each collective entry point (the four hooks, zero_grad,
// optimizer_step, clip_grad_norm, load_param, store_param, store_state,
// mfsdp_save, mfsdp_load, mfsdp_destroy) folds its name and unit into a
// running hash, and the ranks compare hash and call count before doing
// anything else, as TORCH_DISTRIBUTED_DEBUG=DETAIL does for torch's
// collectives. Ranks that called different units, a lone optimizer step,
// different step counts or one that destroys its runtime early all meet
// in this comparison instead of in mismatched collectives: every rank
// stops with MFSDP_ERROR_ORDER naming each rank's call, and the runtime
// refuses every later call. The cost is two small all-reduces per call
// over the control plane (docs/benchmarks.md).
//
//===----------------------------------------------------------------------===//
#include "Step.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

using namespace mfsdp::rt;

namespace {

uint64_t fold(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

} // namespace

mfsdp_status mfsdp_step::checkCall(const char *call, int32_t unit) {
  currentCall = call;
  currentUnit = unit;
  if (!checkCalls || !created || !stoppedBy.empty() || !control)
    return MFSDP_OK;
  const std::string what =
      std::string(call) + (unit >= 0 ? "(" + std::to_string(unit) + ")" : "()");
  callHash = fold(callHash ? callHash : 1469598103934665603ull, what.data(), what.size());
  ++callCount;
  std::vector<int64_t> mine = {callCount};
  for (int part = 0; part < 4; ++part)
    mine.push_back(static_cast<int64_t>((callHash >> (16 * part)) & 0xffff));
  std::vector<int64_t> lo, hi;
  std::string error;
  if (!control->minMax(mine, lo, hi, error)) {
    stoppedBy = what + ": " + error + " while the ranks compared their call sequences";
    return fail(MFSDP_ERROR_COMM, stoppedBy);
  }
  if (lo == hi)
    return MFSDP_OK;
  // They differ: every rank says what it called, and each stops.
  const std::string described = what + " (call " + std::to_string(callCount) + ")";
  std::vector<std::vector<uint8_t>> all;
  std::map<std::string, std::vector<int>> byCall;
  if (control->allGather(std::vector<uint8_t>(described.begin(), described.end()), all,
                         error)) {
    for (size_t r = 0; r < all.size(); ++r)
      byCall[std::string(all[r].begin(), all[r].end())].push_back(static_cast<int>(r));
  }
  // Listed by each call's lowest rank.
  std::vector<std::pair<std::vector<int>, std::string>> groups;
  for (const auto &[c, ranks] : byCall)
    groups.push_back({ranks, c});
  std::sort(groups.begin(), groups.end());
  std::string list;
  for (const auto &[ranks, c] : groups) {
    std::string who;
    for (size_t i = 0; i < ranks.size() && i < 8; ++i)
      who += (i ? "," : "") + std::to_string(ranks[i]);
    if (ranks.size() > 8)
      who += ",... (" + std::to_string(ranks.size()) + " ranks)";
    list += (list.empty() ? "" : "; ") + std::string("rank ") + who + " called " + c;
  }
  stoppedBy = "the ranks' call sequences differ (MFSDP_CHECK_CALLS): " +
              (list.empty() ? "this rank called " + described : list) +
              "; every rank must make the same collective calls in the same order";
  return fail(MFSDP_ERROR_ORDER, stoppedBy);
}

//===- Step.cpp - Names of the step program's op kinds -----------------------===//
#include "mfsdp/step/Step.h"

#include <mutex>
#include <unordered_set>

namespace mfsdp::step {

namespace {
/// The words of every step of the process, each once (never freed: a
/// word is a kind, an optimizer or a unit's name, a few per unit).
struct WordPool {
  std::mutex mutex;
  std::unordered_set<std::string> words;
};
WordPool &wordPool() {
  static WordPool *pool = new WordPool; // outlives every static Word
  return *pool;
}
} // namespace

Word::Word(std::string_view text) {
  if (text.empty())
    return;
  WordPool &pool = wordPool();
  std::lock_guard<std::mutex> lock(pool.mutex);
  text_ = &*pool.words.emplace(text).first;
}

const std::string &Word::empty_() {
  static const std::string none;
  return none;
}

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

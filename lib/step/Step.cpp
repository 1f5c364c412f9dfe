//===- Step.cpp - Names of the step program's op kinds -----------------------===//
#include "mfsdp/step/Step.h"

#include <algorithm>
#include <cassert>
#include <deque>
#include <mutex>
#include <string_view>
#include <unordered_map>

namespace mfsdp::step {

namespace {
/// The words of every step of the process, each once (never freed: a
/// word is a kind, an optimizer or a unit's name, a few per unit). Looked
/// up by view, so that a word already kept costs no string.
struct WordPool {
  std::mutex mutex;
  std::deque<std::string> storage; // (a deque: its strings stay put)
  std::unordered_map<std::string_view, const std::string *> index;
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
  if (auto it = pool.index.find(text); it != pool.index.end()) {
    text_ = it->second;
    return;
  }
  const std::string &kept = pool.storage.emplace_back(text);
  pool.index.emplace(std::string_view(kept), &kept);
  text_ = &kept;
}

const std::string &Word::empty_() {
  static const std::string none;
  return none;
}

OpArray &OpArray::operator=(const OpArray &other) {
  if (this == &other)
    return *this;
  assert(other.released_ == 0 && "copying an op array part released");
  clear();
  reserve(other.size());
  for (const Op &op : other)
    push_back(op);
  return *this;
}

void OpArray::resize(size_t n) {
  if (n < size_) {
    for (size_t i = n; i < size_; ++i)
      (*this)[i] = Op();
  } else {
    while (capacity() < n)
      chunks_.push_back(std::make_unique<Op[]>(kChunkOps));
  }
  size_ = n;
}

void OpArray::clear() {
  chunks_.clear();
  size_ = released_ = 0;
}

OpArray::iterator OpArray::insert(const_iterator at, Op op) {
  const size_t i = at.index();
  push_back(Op());
  std::move_backward(begin() + static_cast<std::ptrdiff_t>(i), end() - 1, end());
  (*this)[i] = std::move(op);
  return begin() + static_cast<std::ptrdiff_t>(i);
}

OpArray::iterator OpArray::erase(const_iterator first, const_iterator last) {
  const size_t i = first.index(), n = last.index() - i;
  if (n == 0) // (moving each op onto itself would empty its strings)
    return begin() + static_cast<std::ptrdiff_t>(i);
  std::move(begin() + static_cast<std::ptrdiff_t>(i + n), end(),
            begin() + static_cast<std::ptrdiff_t>(i));
  resize(size_ - n);
  return begin() + static_cast<std::ptrdiff_t>(i);
}

void OpArray::releaseBefore(size_t i) {
  const size_t whole = std::min(i >> kChunkShift, chunks_.size());
  for (; released_ < whole; ++released_)
    chunks_[released_].reset();
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
  auto isCompute = [&](size_t i) { return isUnitCompute(s.ops[i]); };
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

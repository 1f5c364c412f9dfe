//===- Arena.cpp - Sub-allocation from one reserved block -----------------===//
#include "mfsdp/runtime/Arena.h"

#include <algorithm>
#include <iterator>

namespace mfsdp::rt {

void Arena::reset(void *base, int64_t capacity) {
  base_ = reinterpret_cast<uintptr_t>(base);
  capacity_ = capacity;
  used_ = 0;
  free_.clear();
  live_.clear();
  if (capacity > 0)
    free_[0] = capacity;
}

void *Arena::allocate(int64_t bytes) {
  if (bytes <= 0)
    return nullptr;
  const int64_t size = roundUp(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size)
      continue;
    const int64_t offset = it->first, rest = it->second - size;
    free_.erase(it);
    if (rest > 0)
      free_[offset + size] = rest;
    live_[offset] = size;
    used_ += size;
    return reinterpret_cast<void *>(base_ + static_cast<uintptr_t>(offset));
  }
  return nullptr;
}

void *Arena::allocateAt(int64_t offset, int64_t bytes) {
  if (bytes <= 0 || offset < 0 || offset % kAlignment != 0)
    return nullptr;
  const int64_t size = roundUp(bytes);
  // The free block that contains `offset`: the last one starting at or
  // before it.
  auto it = free_.upper_bound(offset);
  if (it == free_.begin())
    return nullptr;
  --it;
  const int64_t start = it->first, length = it->second;
  if (offset + size > start + length)
    return nullptr;
  free_.erase(it);
  if (offset > start)
    free_[start] = offset - start;
  if (start + length > offset + size)
    free_[offset + size] = start + length - (offset + size);
  live_[offset] = size;
  used_ += size;
  return reinterpret_cast<void *>(base_ + static_cast<uintptr_t>(offset));
}

bool Arena::release(void *p) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  if (at < base_)
    return false;
  const int64_t offset = static_cast<int64_t>(at - base_);
  auto live = live_.find(offset);
  if (live == live_.end())
    return false;
  int64_t start = offset, size = live->second;
  live_.erase(live);
  used_ -= size;
  // Merge with the free block after it and the one before it.
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == offset + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = size;
  return true;
}

int64_t Arena::sizeOf(const void *p) const {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  if (at < base_)
    return 0;
  auto live = live_.find(static_cast<int64_t>(at - base_));
  return live == live_.end() ? 0 : live->second;
}

int64_t Arena::largestFree() const {
  int64_t largest = 0;
  for (const auto &[offset, size] : free_)
    largest = std::max(largest, size);
  return largest;
}

} // namespace mfsdp::rt

//===- Arena.h - Sub-allocation from one reserved block ------------*- C++ -*-===//
//
// Each rank reserves one block of backend memory (host or device) and
// hands out aligned pieces of it: first fit over the free blocks, which
// are merged with their neighbours when a piece comes back. The arena only
// does arithmetic on addresses, never touches the memory, so one class
// serves host and device blocks.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_RUNTIME_ARENA_H
#define MFSDP_RUNTIME_ARENA_H

#include <cstdint>
#include <map>

namespace mfsdp::rt {

class Arena {
public:
  /// Every piece starts on this boundary (what cuBLAS and NCCL prefer).
  static constexpr int64_t kAlignment = 256;
  static int64_t roundUp(int64_t bytes) {
    return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  }

  /// Manages [base, base + capacity); `base` aligned to kAlignment.
  void reset(void *base, int64_t capacity);

  /// A piece of at least `bytes` (> 0) bytes, or null when no free block
  /// is that large.
  void *allocate(int64_t bytes);
  /// The piece at exactly [offset, offset + bytes rounded up), for a
  /// static memory plan; null when `offset` is not aligned or part of the
  /// range is live or outside the arena.
  void *allocateAt(int64_t offset, int64_t bytes);
  /// Returns a piece; false when `p` is not a live piece of this arena.
  bool release(void *p);
  /// Bytes of the live piece at `p` (rounded up), 0 when there is none.
  int64_t sizeOf(const void *p) const;

  int64_t capacity() const { return capacity_; }
  int64_t used() const { return used_; }
  int64_t largestFree() const;

private:
  uintptr_t base_ = 0;
  int64_t capacity_ = 0, used_ = 0;
  std::map<int64_t, int64_t> free_, live_; // offset -> bytes
};

} // namespace mfsdp::rt

#endif // MFSDP_RUNTIME_ARENA_H

//===- ArenaTest.cpp - Sub-allocation of the backends' arena --------------===//
//
// The arena only does arithmetic on addresses, so a fake base address
// stands for a device block.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/Arena.h"

#include <gtest/gtest.h>

#include <cstdint>

using namespace mfsdp::rt;

namespace {

constexpr int64_t A = Arena::kAlignment;

struct ArenaTest : ::testing::Test {
  Arena arena;
  uintptr_t base = 0x10000;
  void SetUp() override { arena.reset(reinterpret_cast<void *>(base), 8 * A); }
  int64_t offset(void *p) const {
    return static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) - base);
  }
};

// Pieces are aligned, rounded up and laid out first fit.
TEST_F(ArenaTest, AlignedFirstFit) {
  void *a = arena.allocate(1), *b = arena.allocate(A + 1), *c = arena.allocate(A);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(offset(a), 0);
  EXPECT_EQ(offset(b), A);
  EXPECT_EQ(offset(c), 3 * A);
  EXPECT_EQ(arena.used(), 4 * A);
  EXPECT_EQ(arena.sizeOf(b), 2 * A);
  EXPECT_EQ(arena.sizeOf(reinterpret_cast<char *>(b) + 1), 0);
  EXPECT_EQ(arena.allocate(0), nullptr);
}

// A released piece is reused; neighbours merge back into one block.
TEST_F(ArenaTest, ReleaseMergesNeighbours) {
  void *a = arena.allocate(2 * A), *b = arena.allocate(2 * A),
       *c = arena.allocate(2 * A);
  ASSERT_TRUE(a && b && c);
  EXPECT_TRUE(arena.release(a));
  EXPECT_TRUE(arena.release(c));
  EXPECT_EQ(arena.largestFree(), 2 * A + 2 * A); // c merged with the tail
  EXPECT_TRUE(arena.release(b));
  EXPECT_EQ(arena.largestFree(), 8 * A);
  EXPECT_EQ(arena.used(), 0);
  EXPECT_EQ(offset(arena.allocate(8 * A)), 0);
}

// Exhaustion is a null, not a crash; foreign pointers are refused.
TEST_F(ArenaTest, ExhaustedAndForeign) {
  void *a = arena.allocate(6 * A);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(arena.allocate(3 * A), nullptr);
  EXPECT_NE(arena.allocate(2 * A), nullptr);
  EXPECT_FALSE(arena.release(reinterpret_cast<void *>(base + 1)));
  EXPECT_FALSE(arena.release(reinterpret_cast<void *>(base - A)));
  EXPECT_TRUE(arena.release(a));
  EXPECT_FALSE(arena.release(a)); // twice
}

// A static plan's pieces at fixed offsets: placed anywhere free, refused
// where any part is live, unaligned or outside; released like any piece.
TEST_F(ArenaTest, AllocateAtFixedOffsets) {
  void *mid = arena.allocateAt(3 * A, 2 * A);
  ASSERT_NE(mid, nullptr);
  EXPECT_EQ(offset(mid), 3 * A);
  EXPECT_EQ(arena.used(), 2 * A);
  EXPECT_EQ(arena.allocateAt(4 * A, A), nullptr);     // inside mid
  EXPECT_EQ(arena.allocateAt(2 * A, 2 * A), nullptr); // overlaps its start
  EXPECT_EQ(arena.allocateAt(A + 1, A), nullptr);     // unaligned
  EXPECT_EQ(arena.allocateAt(7 * A, 2 * A), nullptr); // past the end
  EXPECT_EQ(arena.allocateAt(-A, A), nullptr);
  void *head = arena.allocateAt(0, 3 * A), *tail = arena.allocateAt(5 * A, 3 * A);
  EXPECT_EQ(offset(head), 0);
  EXPECT_EQ(offset(tail), 5 * A);
  EXPECT_EQ(arena.largestFree(), 0);
  EXPECT_EQ(arena.allocate(1), nullptr);
  EXPECT_TRUE(arena.release(mid));
  EXPECT_EQ(arena.largestFree(), 2 * A);
  EXPECT_EQ(offset(arena.allocateAt(3 * A, 1)), 3 * A); // rounded up to A
  EXPECT_EQ(offset(arena.allocate(A)), 4 * A);          // first fit after it
}

} // namespace

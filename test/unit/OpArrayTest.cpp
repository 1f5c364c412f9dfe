//===- OpArrayTest.cpp - A step's ops in chunks ---------------------------===//
#include "mfsdp/step/Step.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

using namespace mfsdp::step;

namespace {

constexpr size_t kChunk = OpArray::kChunkOps;

Op named(size_t i) {
  Op op;
  op.name = "op " + std::to_string(i);
  op.waitFor = static_cast<int64_t>(i);
  return op;
}

std::vector<std::string> namesOf(const OpArray &ops) {
  std::vector<std::string> out;
  for (const Op &op : ops)
    out.push_back(op.name);
  return out;
}

TEST(OpArray, GrowsWithoutMovingAnOp) {
  // A vector moves every op at each doubling (and holds two copies while
  // it does); the chunks never move: an op's address stays put.
  OpArray ops;
  ops.push_back(named(0));
  const Op *first = &ops[0];
  for (size_t i = 1; i < 3 * kChunk + 5; ++i)
    ops.push_back(named(i));
  EXPECT_EQ(&ops[0], first);
  ASSERT_EQ(ops.size(), 3 * kChunk + 5);
  EXPECT_EQ(ops.chunksHeld(), 4u);
  EXPECT_EQ(ops.capacity(), 4 * kChunk);
  for (size_t i : {size_t(0), kChunk - 1, kChunk, 2 * kChunk + 7, 3 * kChunk + 4})
    EXPECT_EQ(ops[i].name, "op " + std::to_string(i)) << i;
  EXPECT_EQ(ops.back().name, "op " + std::to_string(3 * kChunk + 4));
  // Iterators are random access across the chunks, for the algorithms.
  auto it = std::find_if(ops.begin(), ops.end(),
                         [](const Op &op) { return op.waitFor == int64_t(kChunk + 3); });
  ASSERT_NE(it, ops.end());
  EXPECT_EQ(it - ops.begin(), static_cast<std::ptrdiff_t>(kChunk + 3));
  EXPECT_EQ(std::distance(ops.begin(), ops.end()),
            static_cast<std::ptrdiff_t>(ops.size()));
  const OpArray &view = ops;
  OpArray::const_iterator c = ops.begin() + 5; // iterator to const_iterator
  EXPECT_EQ(c->name, "op 5");
  EXPECT_EQ(view.end() - c, static_cast<std::ptrdiff_t>(ops.size() - 5));
}

TEST(OpArray, EditsAsAVectorDoes) {
  // insert, erase, resize, pop_back and std::remove_if across chunk
  // boundaries give what std::vector gives for the same edits.
  std::mt19937 rng(7);
  OpArray ops;
  std::vector<std::string> model;
  size_t next = 0;
  for (size_t i = 0; i < 2 * kChunk + 100; ++i) {
    ops.push_back(named(next));
    model.push_back("op " + std::to_string(next++));
  }
  for (int round = 0; round < 200; ++round) {
    const size_t at = rng() % (model.size() + 1);
    switch (rng() % 4) {
    case 0:
      ops.insert(ops.begin() + static_cast<std::ptrdiff_t>(at), named(next));
      model.insert(model.begin() + static_cast<std::ptrdiff_t>(at), "op " + std::to_string(next++));
      break;
    case 1:
      if (at < model.size()) {
        const size_t n = std::min<size_t>(rng() % 50, model.size() - at);
        ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(at),
                  ops.begin() + static_cast<std::ptrdiff_t>(at + n));
        model.erase(model.begin() + static_cast<std::ptrdiff_t>(at),
                    model.begin() + static_cast<std::ptrdiff_t>(at + n));
      }
      break;
    case 2:
      ops.pop_back();
      model.pop_back();
      break;
    default: {
      const size_t n = model.size() + 30 - rng() % 60;
      ops.resize(n);
      model.resize(n);
      break;
    }
    }
  }
  {
    std::vector<std::string> got = namesOf(ops);
    ASSERT_EQ(got.size(), model.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], model[i]) << i;
  }
  ops.erase(std::remove_if(ops.begin(), ops.end(),
                           [](const Op &op) { return op.name.size() % 2 == 0; }),
            ops.end());
  model.erase(std::remove_if(model.begin(), model.end(),
                             [](const std::string &n) { return n.size() % 2 == 0; }),
              model.end());
  EXPECT_EQ(namesOf(ops), model);
  // Slots a shrink leaves are default ops again when the array grows.
  ops.resize(1);
  ops.resize(3);
  EXPECT_EQ(ops[2].name, "");
  EXPECT_EQ(ops[2].waitFor, -1);
}

TEST(OpArray, ReleasesWholeChunksOnly) {
  // A consumer going in order frees the chunks wholly behind it; the op it
  // stands on and those after it stay readable.
  OpArray ops;
  for (size_t i = 0; i < 3 * kChunk; ++i)
    ops.push_back(named(i));
  ops.releaseBefore(kChunk - 1);
  EXPECT_EQ(ops.chunksHeld(), 3u);
  ops.releaseBefore(kChunk + 2);
  EXPECT_EQ(ops.chunksHeld(), 2u);
  EXPECT_EQ(ops.size(), 3 * kChunk);
  EXPECT_EQ(ops[kChunk].name, "op " + std::to_string(kChunk));
  ops.releaseBefore(kChunk); // again, or before a place already freed
  ops.releaseBefore(0);
  EXPECT_EQ(ops.chunksHeld(), 2u);
  ops.releaseBefore(ops.size());
  EXPECT_EQ(ops.chunksHeld(), 0u);
  ops.clear();
  EXPECT_TRUE(ops.empty());
  ops.push_back(named(1));
  EXPECT_EQ(ops.front().name, "op 1");
}

TEST(OpArray, CopiesAndMoves) {
  OpArray ops = {named(0), named(1)};
  for (size_t i = 2; i < kChunk + 2; ++i)
    ops.push_back(named(i));
  OpArray copy = ops;
  EXPECT_EQ(namesOf(copy), namesOf(ops));
  copy[0].name = "changed";
  EXPECT_EQ(ops[0].name, "op 0");
  OpArray moved = std::move(copy);
  EXPECT_TRUE(copy.empty()); // NOLINT: the moved-from array is empty
  EXPECT_EQ(copy.chunksHeld(), 0u);
  EXPECT_EQ(moved.size(), kChunk + 2);
  EXPECT_EQ(moved[0].name, "changed");
  OpArray fromVector = std::vector<Op>{named(5), named(6)};
  EXPECT_EQ(namesOf(fromVector), (std::vector<std::string>{"op 5", "op 6"}));
}

} // namespace

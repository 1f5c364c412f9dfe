//===- BlockPackTest.cpp - Block-shard packing against a reference --------===//
//
// The packed order of a block shard (MFSDP_BLOCK_SHARD), written from its
// definition independently of BlockGrid's arithmetic: blocks numbered
// row-major, block k on rank k % ranks, each rank's blocks in increasing k,
// each block row-major, ranks one after the other. The host twins of
// packBlocks / unpackBlocks must produce exactly that, for the whole
// tensor and for one rank's range.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/Kernels.h"

#include <gtest/gtest.h>

#include <ostream>
#include <vector>

using namespace mfsdp::rt;

namespace {

struct Case {
  int64_t rows, cols, blockRows, blockCols, ranks;
};

/// Whole-tensor offsets in packed order, and where each rank's range
/// starts (in blocks), by the definition.
std::vector<int64_t> referenceOrder(const Case &c, std::vector<int64_t> &firstBlock,
                                    std::vector<int64_t> &numBlocks) {
  const int64_t gridRows = c.rows / c.blockRows, gridCols = c.cols / c.blockCols;
  std::vector<int64_t> order;
  int64_t position = 0;
  for (int64_t r = 0; r < c.ranks; ++r) {
    firstBlock.push_back(position);
    int64_t mine = 0;
    for (int64_t k = 0; k < gridRows * gridCols; ++k) {
      if (k % c.ranks != r)
        continue;
      ++mine;
      const int64_t br = k / gridCols, bc = k % gridCols;
      for (int64_t i = 0; i < c.blockRows; ++i)
        for (int64_t j = 0; j < c.blockCols; ++j)
          order.push_back((br * c.blockRows + i) * c.cols + bc * c.blockCols + j);
    }
    numBlocks.push_back(mine);
    position += mine;
  }
  return order;
}

void PrintTo(const Case &c, std::ostream *os) {
  *os << c.rows << "x" << c.cols << " in " << c.blockRows << "x" << c.blockCols
      << " blocks on " << c.ranks << " ranks";
}

class BlockPack : public ::testing::TestWithParam<Case> {};

TEST_P(BlockPack, MatchesTheDefinition) {
  const Case c = GetParam();
  const BlockGrid g{c.rows, c.cols, c.blockRows, c.blockCols, c.ranks};
  std::vector<int64_t> first, count;
  const std::vector<int64_t> order = referenceOrder(c, first, count);
  const int64_t n = c.rows * c.cols, elems = c.blockRows * c.blockCols;
  ASSERT_EQ(static_cast<int64_t>(order.size()), n);
  ASSERT_EQ(g.blocks(), n / elems);

  std::vector<float> whole(n);
  for (int64_t i = 0; i < n; ++i)
    whole[i] = static_cast<float>(i) + 0.5f;

  // Every block, in packed order.
  std::vector<float> packed(n, -1.f);
  host::packBlocks(whole.data(), packed.data(), g, 0, g.blocks());
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(packed[i], whole[order[i]]) << "packed element " << i;

  // Each rank's range on its own, and its count.
  for (int64_t r = 0; r < c.ranks; ++r) {
    EXPECT_EQ(g.firstBlockOf(r), first[r]) << "rank " << r;
    EXPECT_EQ(g.blocksOf(r), count[r]) << "rank " << r;
    std::vector<float> mine(count[r] * elems, -1.f);
    host::packBlocks(whole.data(), mine.data(), g, first[r], count[r]);
    for (int64_t i = 0; i < count[r] * elems; ++i)
      ASSERT_EQ(mine[i], whole[order[first[r] * elems + i]])
          << "rank " << r << " element " << i;
  }

  // Unpacking puts every element back, and touches only its blocks.
  std::vector<float> back(n, -1.f);
  host::unpackBlocks(packed.data(), back.data(), g, 0, g.blocks());
  EXPECT_EQ(back, whole);
  if (c.ranks > 1 && count[1] > 0) {
    std::vector<float> part(n, -1.f);
    host::unpackBlocks(packed.data() + first[1] * elems, part.data(), g, first[1],
                       count[1]);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = (i / c.cols / c.blockRows) * (c.cols / c.blockCols) +
                        (i % c.cols) / c.blockCols;
      EXPECT_EQ(part[i], k % c.ranks == 1 ? whole[i] : -1.f) << "element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BlockPack,
    ::testing::Values(
        Case{20, 12, 4, 6, 4},  // 10 blocks on 4 ranks: 3, 3, 2, 2
        Case{20, 12, 4, 4, 2},  // 15 blocks on 2 ranks: 8, 7
        Case{12, 20, 4, 4, 4},  // wide: 3 x 5 blocks
        Case{6, 6, 3, 3, 4},    // 4 blocks on 4 ranks: one each
        Case{6, 4, 3, 4, 4},    // 2 blocks on 4 ranks: ranks 2, 3 empty
        Case{8, 1, 2, 1, 3},    // a 1-D tensor in 4 row blocks
        Case{5, 7, 5, 7, 2},    // one block: the whole tensor on rank 0
        Case{8, 8, 1, 8, 3}),   // row blocks: 8 rows dealt round-robin
    [](const ::testing::TestParamInfo<Case> &info) {
      const Case &c = info.param;
      return std::to_string(c.rows) + "x" + std::to_string(c.cols) + "_by_" +
             std::to_string(c.blockRows) + "x" + std::to_string(c.blockCols) +
             "_on_" + std::to_string(c.ranks);
    });

} // namespace

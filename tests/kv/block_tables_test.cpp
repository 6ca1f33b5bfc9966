#include <gtest/gtest.h>

#include "core/error.h"
#include "kv/block_tables.h"

using namespace hf2q;
using namespace hf2q::kv;

namespace {

TablesOptions two_groups(int32_t window, int64_t blocks) {
    TablesOptions o;
    o.block_size = 4;
    o.n_seq_max = 3;
    o.n_ctx = 64;
    o.groups = {{0, blocks}, {window, blocks}};
    return o;
}

void append(BlockTables& t, int32_t seq, int32_t n, std::vector<BlockCopy>* copies = nullptr) {
    std::vector<BlockCopy> c;
    t.reserve({{seq, n}}, c);
    if (copies) *copies = c;
    t.commit(seq, t.seq_length(seq) + n);
}

}  // namespace

TEST(BlockTables, AppendAllocatesBlocksPerGroup) {
    BlockTables t(two_groups(0, 16));
    append(t, 0, 5);
    EXPECT_EQ(t.seq_length(0), 5);
    EXPECT_EQ(t.table(0, 0).size(), 2u);
    EXPECT_EQ(t.table(1, 0).size(), 2u);
    EXPECT_EQ(t.free_blocks(0), 14);
    append(t, 0, 3);  // fills block 1 exactly
    EXPECT_EQ(t.table(0, 0).size(), 2u);
    append(t, 0, 1);
    EXPECT_EQ(t.table(0, 0).size(), 3u);
}

TEST(BlockTables, SlidingGroupReleasesBlocksOutOfWindow) {
    BlockTables t(two_groups(/*window=*/6, 32));
    append(t, 0, 20);  // next query at 20 sees keys >= 15: blocks 0..2 (pos 0..11) free
    const auto& swa = t.table(1, 0);
    ASSERT_EQ(swa.size(), 5u);
    EXPECT_EQ(swa[0], -1);
    EXPECT_EQ(swa[1], -1);
    EXPECT_EQ(swa[2], -1);
    EXPECT_GE(swa[3], 0);  // holds 12..15, includes 15
    EXPECT_EQ(t.free_blocks(1), 32 - 2);
    // The full group keeps everything.
    for (int32_t b : t.table(0, 0)) EXPECT_GE(b, 0);
    EXPECT_EQ(t.free_blocks(0), 32 - 5);
}

// A pipelined greedy step that was not needed is truncated away: the sliding group
// keeps one position past the window so that always works, at every block boundary.
TEST(BlockTables, NewestPositionCanAlwaysBeTruncated) {
    BlockTables t(two_groups(/*window=*/6, 32));
    for (int32_t len = 1; len <= 40; ++len) {
        append(t, 0, 1);
        ASSERT_EQ(t.seq_length(0), len);
        ASSERT_NO_THROW(t.truncate(0, len - 1)) << "length " << len;
        append(t, 0, 1);
        // Never more than the window plus one position, plus partial blocks at the ends.
        EXPECT_LE(32 - t.free_blocks(1), (6 + 1 + 3) / 4 + 2) << "length " << len;
    }
}

TEST(BlockTables, ForkSharesAndCopiesOnWrite) {
    BlockTables t(two_groups(0, 16));
    append(t, 0, 6);  // blocks: [0..3] full, [4..5] partial
    t.fork(0, 1);
    EXPECT_EQ(t.seq_length(1), 6);
    EXPECT_EQ(t.table(0, 0), t.table(0, 1));
    EXPECT_EQ(t.ref_count(0, t.table(0, 0)[0]), 2);
    std::vector<BlockCopy> copies;
    append(t, 1, 1, &copies);  // writes into the shared partial block -> private copy
    ASSERT_EQ(copies.size(), 2u);  // one per group
    EXPECT_EQ(copies[0].src, t.table(0, 0)[1]);
    EXPECT_NE(t.table(0, 1)[1], t.table(0, 0)[1]);
    EXPECT_EQ(t.table(0, 1)[0], t.table(0, 0)[0]);  // full prefix block stays shared
    EXPECT_EQ(t.ref_count(0, t.table(0, 0)[1]), 1);
    t.remove(0);
    t.remove(1);
    EXPECT_EQ(t.free_blocks(0), 16);
    EXPECT_EQ(t.free_blocks(1), 16);
}

TEST(BlockTables, ReserveIsAllOrNothing) {
    BlockTables t(two_groups(0, 3));
    append(t, 0, 8);  // 2 blocks
    std::vector<BlockCopy> c;
    EXPECT_THROW(t.reserve({{1, 4}, {2, 4}}, c), Error);  // needs 2, only 1 free
    EXPECT_EQ(t.free_blocks(0), 1);
    EXPECT_TRUE(t.table(0, 1).empty());
    EXPECT_THROW(t.reserve({{0, 60}}, c), Error);  // beyond n_ctx
    EXPECT_THROW(t.reserve({{7, 1}}, c), Error);   // bad sequence id
}

TEST(BlockTables, TruncateFreesTailAndGuardsSlidingWindow) {
    BlockTables t(two_groups(/*window=*/6, 32));
    append(t, 0, 10);  // sliding block 0 (0..3) released: the next query sees >= 5
    EXPECT_THROW(t.truncate(0, 5), Error);  // position 5 would need key 0 again
    t.truncate(0, 9);
    EXPECT_EQ(t.seq_length(0), 9);
    EXPECT_EQ(t.table(0, 0).size(), 3u);
    append(t, 0, 26);  // len 35: sliding blocks below 30 released
    EXPECT_THROW(t.truncate(0, 20), Error);
    EXPECT_EQ(t.seq_length(0), 35);
    t.truncate(0, 33);  // needs keys >= 28: block 7 (28..31) still held
    EXPECT_EQ(t.seq_length(0), 33);
    t.truncate(0, 0);
    EXPECT_EQ(t.free_blocks(0), 32);
    EXPECT_EQ(t.free_blocks(1), 32);
}

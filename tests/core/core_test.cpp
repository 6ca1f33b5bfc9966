#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "core/checked.h"
#include "core/ggml_type.h"
#include "core/thread_pool.h"

using namespace hf2q;

TEST(Checked, DetectsOverflow) {
    EXPECT_FALSE(checked_mul(1ull << 40, 1ull << 40).has_value());
    EXPECT_EQ(*checked_mul(3, 5), 15u);
    EXPECT_FALSE(checked_add(~0ull, 1).has_value());
    EXPECT_FALSE(checked_align_up(~0ull - 3, 32).has_value());
    EXPECT_EQ(*checked_align_up(33, 32), 64u);
}

TEST(GgmlType, TraitsAndNames) {
    EXPECT_EQ(ggml_traits(GgmlType::Q4_K).type_size, 144u);
    EXPECT_EQ(ggml_traits(GgmlType::Q4_K).block_size, 256u);
    EXPECT_FALSE(ggml_type_traits(4).has_value());  // removed Q4_2
    EXPECT_FALSE(ggml_type_traits(42).has_value());
    EXPECT_EQ(*ggml_type_from_name("Q6_K"), GgmlType::Q6_K);
    EXPECT_EQ(*ggml_row_size(GgmlType::Q8_0, 64), 68u);
    EXPECT_FALSE(ggml_row_size(GgmlType::Q8_0, 33).has_value());
}

TEST(ThreadPool, CoversEveryIndexOnce) {
    for (int threads : {1, 3}) {
        ThreadPool pool(threads);
        for (int64_t n : {0, 1, 7, 1000}) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            pool.parallel_for(n, 1, [&](int64_t b, int64_t e, int tid) {
                EXPECT_LT(tid, pool.size());
                for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
            });
            for (auto& h : hits) EXPECT_EQ(h.load(), 1);
        }
    }
}

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "core/checked.h"
#include "core/ggml_type.h"
#include "core/interrupt_cleanup.h"
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

// A process stopped by SIGINT removes its registered temporary files (and only
// those) and still dies of SIGINT; a released registration is not removed.
TEST(InterruptCleanup, SigintRemovesRegisteredFilesOnly) {
    const std::string base = ::testing::TempDir() + "hf2q_interrupt_" + std::to_string(::getpid());
    const std::string doomed = base + ".tmp", kept = base + ".kept", released = base + ".released";
    for (const std::string& p : {doomed, kept, released}) {
        std::FILE* f = std::fopen(p.c_str(), "wb");
        ASSERT_NE(f, nullptr);
        std::fputs("partial", f);
        std::fclose(f);
    }
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        hf2q::install_interrupt_cleanup();
        if (hf2q::register_temp_file(doomed) < 0) ::_exit(3);
        const int slot = hf2q::register_temp_file(released);
        hf2q::release_temp_file(slot);
        ::raise(SIGINT);
        ::_exit(4);  // not reached: the default action of SIGINT ends the process
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << status;
    EXPECT_EQ(WTERMSIG(status), SIGINT);
    EXPECT_NE(::access(doomed.c_str(), F_OK), 0) << "registered temp file survived";
    EXPECT_EQ(::access(kept.c_str(), F_OK), 0);
    EXPECT_EQ(::access(released.c_str(), F_OK), 0);
    std::remove(kept.c_str());
    std::remove(released.c_str());
    EXPECT_EQ(hf2q::register_temp_file(std::string(5000, 'x')), -1);  // too long: not registered
}

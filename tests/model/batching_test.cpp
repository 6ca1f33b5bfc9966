// Batching invariance and KV-cache behaviour on the parity fixtures: however tokens
// are grouped into decode calls, each sequence gets its single-run logits.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "model/fixture.h"
#include "runtime/context_impl.h"

using namespace hf2q;
using namespace hf2q::test;

namespace {

class Batching : public ::testing::TestWithParam<std::string> {};

std::vector<float> row(const Context& ctx, int32_t i) {
    const float* p = ctx.logits(i);
    return std::vector<float>(p, p + ctx.n_vocab());
}

void expect_rows_equal(const std::vector<float>& got, const std::vector<float>& all, size_t r, int64_t V,
                       const std::string& what) {
    const float* ref = all.data() + r * static_cast<size_t>(V);
    EXPECT_LT(rel_l2(got.data(), ref, static_cast<size_t>(V)), 1e-6) << what << " position " << r;
}

// Every KV cache type, and how a failure names it.
constexpr KvCacheType kCacheTypes[] = {KvCacheType::f32, KvCacheType::f16, KvCacheType::e4m3, KvCacheType::int8};
std::string cache_label(KvCacheType kv) {
    return kv == KvCacheType::f16    ? " (f16 cache)"
           : kv == KvCacheType::e4m3 ? " (e4m3 cache)"
           : kv == KvCacheType::int8 ? " (int8 cache)"
                                     : "";
}

}  // namespace

// All prompts of different lengths in one batch, tokens interleaved across
// sequences: every sequence's logits equal its single run, with every KV cache type.
TEST_P(Batching, ManySequencesMatchSingleRuns) {
    const Fixture& fx = *fixture(GetParam());
    for (KvCacheType kv : kCacheTypes) {
        ContextOptions o = small_context(4);
        o.kv_type = kv;
        auto ctx = Context::create(*fx.model, o);
        const auto [batch, order] = interleave_prompts(fx);
        ctx->decode(batch);
        ASSERT_EQ(ctx->n_outputs(), static_cast<int32_t>(batch.size()));
        for (size_t i = 0; i < fx.prompts.size(); ++i) {
            auto alone = run_alone(*fx.model, fx.prompts[i].ids, 512, BackendKind::cpu, DevicePrecision::tensor_cores, kv);
            for (size_t o2 = 0; o2 < order.size(); ++o2)
                if (order[o2].first == i)
                    expect_rows_equal(row(*ctx, static_cast<int32_t>(o2)), alone, order[o2].second, ctx->n_vocab(),
                                      "prompt " + std::to_string(i) + cache_label(kv));
        }
    }
}

// Prefill of half the prompt then token-by-token decode equals one full prefill;
// so do micro-batches of 7 tokens and explicit chunks of 5.
TEST_P(Batching, DecodeAndChunkedPrefillEqualOneShot) {
    const Fixture& fx = *fixture(GetParam());
    const auto& ids = fx.prompts[3].ids;
    const int64_t V = fx.n_vocab;
    auto full = run_alone(*fx.model, ids);

    auto ctx = Context::create(*fx.model, small_context(1));
    std::vector<BatchToken> half;
    for (int32_t t = 0; t < 20; ++t) half.push_back({ids[static_cast<size_t>(t)], 0, t, t == 19});
    ctx->decode(half);
    expect_rows_equal(row(*ctx, 0), full, 19, V, "prefill");
    for (int32_t t = 20; t < static_cast<int32_t>(ids.size()); ++t) {
        ctx->decode({{ids[static_cast<size_t>(t)], 0, t, true}});
        expect_rows_equal(row(*ctx, 0), full, static_cast<size_t>(t), V, "decode");
    }

    auto ubatched = run_alone(*fx.model, ids, /*n_ubatch=*/7);
    EXPECT_LT(rel_l2(ubatched.data(), full.data(), full.size()), 1e-6);

    auto chunked = Context::create(*fx.model, small_context(1));
    for (size_t b = 0; b < ids.size(); b += 5) {
        std::vector<BatchToken> chunk;
        for (size_t t = b; t < std::min(ids.size(), b + 5); ++t)
            chunk.push_back({ids[t], 0, static_cast<int32_t>(t), true});
        chunked->decode(chunk);
        for (size_t t = b; t < std::min(ids.size(), b + 5); ++t)
            expect_rows_equal(row(*chunked, static_cast<int32_t>(t - b)), full, t, V, "chunk");
    }
}

// A fork shares its parent's blocks, then both continue differently and each gets
// the logits of running its whole token sequence alone, with every KV cache type (the
// fork point is inside a block, so the first step copies that block on write: with
// an int8 cache, its row scales too).
TEST_P(Batching, ForkSharesPrefixAndDiverges) {
    const Fixture& fx = *fixture(GetParam());
    const auto& a = fx.prompts[3].ids;  // 40 tokens
    const auto& other = fx.prompts[2].ids;
    const int64_t V = fx.n_vocab;
    for (KvCacheType kv : kCacheTypes) {
        const std::string what = cache_label(kv);
        ContextOptions o = small_context(2);
        o.kv_type = kv;
        auto ctx = Context::create(*fx.model, o);
        std::vector<BatchToken> prefix;
        for (int32_t t = 0; t < 30; ++t) prefix.push_back({a[static_cast<size_t>(t)], 0, t, false});
        ctx->decode(prefix);
        ctx->seq_fork(0, 1);
        EXPECT_EQ(ctx->seq_length(1), 30);
        const auto& tables = ctx->impl().tables();
        const auto& t0 = tables.table(0, 0);
        EXPECT_EQ(t0, tables.table(0, 1));
        EXPECT_EQ(tables.ref_count(0, t0[0]), 2);

        std::vector<BatchToken> batch;
        std::vector<int32_t> b_ids(a.begin(), a.begin() + 30);
        for (int32_t t = 30; t < 40; ++t) {
            batch.push_back({a[static_cast<size_t>(t)], 0, t, true});
            int32_t tok = other[static_cast<size_t>(t - 30)];
            batch.push_back({tok, 1, t, true});
            b_ids.push_back(tok);
        }
        ctx->decode(batch);
        auto ref_a = run_alone(*fx.model, a, 512, BackendKind::cpu, DevicePrecision::tensor_cores, kv);
        auto ref_b = run_alone(*fx.model, b_ids, 512, BackendKind::cpu, DevicePrecision::tensor_cores, kv);
        for (int32_t t = 30; t < 40; ++t) {
            expect_rows_equal(row(*ctx, 2 * (t - 30)), ref_a, static_cast<size_t>(t), V, "parent" + what);
            expect_rows_equal(row(*ctx, 2 * (t - 30) + 1), ref_b, static_cast<size_t>(t), V, "fork" + what);
        }
        EXPECT_EQ(tables.ref_count(0, t0[0]), 2);  // the untouched prefix stays shared
    }
}

// Sliding-window layers free blocks that left the window; full layers keep all.
// Truncation back into released positions is refused; within the window it works.
TEST_P(Batching, SlidingWindowReleasesBlocks) {
    const Fixture& fx = *fixture(GetParam());
    const auto& ids = fx.prompts[3].ids;  // 40 tokens, window 8, blocks of 4
    auto ctx = Context::create(*fx.model, small_context(1));
    std::vector<BatchToken> batch;
    for (size_t t = 0; t < ids.size(); ++t) batch.push_back({ids[t], 0, static_cast<int32_t>(t), true});
    ctx->decode(batch);
    std::vector<float> last = row(*ctx, 39);
    const auto& tables = ctx->impl().tables();
    const auto& swa = tables.table(1, 0);
    const auto& full = tables.table(0, 0);
    ASSERT_EQ(swa.size(), 10u);
    for (size_t b = 0; b < 8; ++b) EXPECT_EQ(swa[b], -1) << "block " << b;  // positions < 33 - ... released
    EXPECT_GE(swa[8], 0);
    for (int32_t b : full) EXPECT_GE(b, 0);

    EXPECT_THROW(ctx->seq_truncate(0, 35), Error);
    ctx->seq_truncate(0, 39);
    ctx->decode({{ids[39], 0, 39, true}});
    EXPECT_LT(rel_l2(row(*ctx, 0).data(), last.data(), last.size()), 1e-6);
}

// A bad batch is refused with a clear error and changes nothing.
TEST_P(Batching, BadBatchesAreRejected) {
    const Fixture& fx = *fixture(GetParam());
    auto ctx = Context::create(*fx.model, small_context(2));
    ctx->decode({{5, 0, 0, false}, {6, 0, 1, false}});
    EXPECT_THROW(ctx->decode({{7, 0, 3, true}}), Error);               // gap in positions
    EXPECT_THROW(ctx->decode({{7, 0, 2, true}, {8, 0, 2, true}}), Error);  // repeated position
    EXPECT_THROW(ctx->decode({{999999, 1, 0, true}}), Error);          // token out of range
    EXPECT_THROW(ctx->decode({{7, 5, 0, true}}), Error);               // sequence out of range
    std::vector<BatchToken> too_long;
    for (int32_t t = 2; t < 70; ++t) too_long.push_back({7, 0, t, false});
    EXPECT_THROW(ctx->decode(too_long), Error);                        // beyond n_ctx
    EXPECT_EQ(ctx->seq_length(0), 2);
    EXPECT_EQ(ctx->seq_length(1), 0);
    ctx->decode({});  // empty batch: nothing to do
    EXPECT_EQ(ctx->n_outputs(), 0);
}

// A KV cache sized in tokens is shared by all sequences: it holds what it says,
// refuses a batch that would overflow it (and keeps the cache as it was), and
// space freed by one sequence serves another. Sizes are checked.
TEST_P(Batching, KvCacheSizedInTokens) {
    const Fixture& fx = *fixture(GetParam());
    ContextOptions o = small_context(4);  // 4 sequences × 64 positions, blocks of 4
    o.kv_tokens = 50;
    auto ctx = Context::create(*fx.model, o);
    EXPECT_EQ(ctx->kv_capacity_tokens(), 52);  // whole blocks
    auto fill = [&](int32_t seq, int32_t from, int32_t n) {
        std::vector<BatchToken> b;
        for (int32_t t = from; t < from + n; ++t) b.push_back({7, seq, t, false});
        ctx->decode(b);
    };
    fill(0, 0, 40);
    EXPECT_THROW(fill(1, 0, 16), Error);  // 40 + 16 > 52
    EXPECT_EQ(ctx->seq_length(1), 0);
    fill(1, 0, 12);
    ctx->seq_remove(0);
    fill(2, 0, 40);  // reuses sequence 0's blocks
    EXPECT_EQ(ctx->seq_length(2), 40);

    ContextOptions bad = small_context(1);
    bad.kv_tokens = -1;
    EXPECT_THROW(Context::create(*fx.model, bad), Error);
    bad.kv_tokens = 10;
    bad.kv_memory_fraction = 0.5;
    EXPECT_THROW(Context::create(*fx.model, bad), Error);  // both
    bad.kv_tokens = 0;
    bad.kv_memory_fraction = 1.5;
    EXPECT_THROW(Context::create(*fx.model, bad), Error);
    bad.kv_memory_fraction = 0.5;
    EXPECT_THROW(Context::create(*fx.model, bad), Error);  // CPU: no device memory to take a fraction of
    EXPECT_EQ(Context::create(*fx.model, small_context(3))->kv_capacity_tokens(), 3 * 64);
}

INSTANTIATE_TEST_SUITE_P(Gemma4, Batching, ::testing::ValuesIn(variants()));

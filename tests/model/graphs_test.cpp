// Decode steps replayed as device graphs (gemma4::Forward::run) are keyed by batch
// shape and by the bucket of the batch's key bound (Forward::key_bucket), the bound
// attention sizes its key-range split by when a graph is recorded. Tests: the buckets
// themselves, and decode across bucket edges with graphs giving the logits of the same
// steps without graphs (CUDA, SKIPPED without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "model/fixture.h"
#include "models/gemma4/forward.h"
#include "runtime/backend_factory.h"

using namespace hf2q;
using namespace hf2q::test;

// Every bound lies within its bucket: a power of two of at least 256, less than twice
// the bound up to 16384, and one bucket (above every int32 position) past that, so a
// batch shape has at most 8 graphs whatever the context size.
TEST(KeyBucket, PowersOfTwoCoveringTheBound) {
    using gemma4::Forward;
    EXPECT_EQ(Forward::key_bucket(0), 0) << "unknown stays unknown";
    EXPECT_EQ(Forward::key_bucket(1), 256);
    EXPECT_EQ(Forward::key_bucket(256), 256);
    EXPECT_EQ(Forward::key_bucket(257), 512);
    EXPECT_EQ(Forward::key_bucket(16384), 16384);
    EXPECT_EQ(Forward::key_bucket(16385), int64_t{1} << 31);
    EXPECT_EQ(Forward::key_bucket(INT32_MAX), int64_t{1} << 31);
    std::set<int64_t> buckets;
    int64_t last = 0;
    for (int64_t n = 1; n <= 70000; ++n) {
        const int64_t b = Forward::key_bucket(n);
        ASSERT_GE(b, std::max<int64_t>(n, 256)) << n;
        ASSERT_EQ(b & (b - 1), 0) << n << " -> " << b;
        ASSERT_GE(b, last) << n;
        if (n > 256 && n <= 16384) {
            ASSERT_LT(b, 2 * n) << n;
        }
        last = b;
        buckets.insert(b);
    }
    EXPECT_EQ(buckets.size(), 8u);
}

namespace {

class GraphReplay : public ::testing::TestWithParam<std::string> {};

}  // namespace

// One sequence on two CUDA contexts (f32 precision), graphs on and off, fed the same
// tokens: a prompt up to 6 positions before a bucket edge (256, then 512), then single
// tokens across it. Each new bucket gets an eager step, a recording and replays; bucket
// 512 is recorded at 257 keys and replayed up to 512. The two contexts differ only in
// the key bound attention splits by (the bucket with graphs, the exact bound without),
// so every step's logits agree to the f32 parity tolerance.
TEST_P(GraphReplay, DecodeAcrossKeyBucketsMatchesNoGraphs) {
    if (!runtime::cuda_available()) GTEST_SKIP() << "no CUDA device";
    const Fixture& fx = *fixture(GetParam());
    ContextOptions o = small_context(1);
    o.n_ctx = 600;
    o.backend = BackendKind::cuda;
    o.device_precision = DevicePrecision::f32;
    std::unique_ptr<Context> ctx[2];  // [0]: no graphs, [1]: graphs
    for (int g = 0; g < 2; ++g) {
        o.graphs = g == 1;
        ctx[g] = Context::create(*fx.model, o);
    }
    const std::vector<int32_t>& ids = fx.prompts[0].ids;
    auto token = [&](int32_t pos) { return ids[static_cast<size_t>(pos) % ids.size()]; };
    const size_t V = static_cast<size_t>(fx.n_vocab);
    double worst = 0;
    int32_t pos = 0;
    for (int32_t edge : {256, 512}) {
        std::vector<BatchToken> prompt;
        for (; pos < edge - 6; ++pos) prompt.push_back({token(pos), 0, pos, pos == edge - 7});
        for (auto& c : ctx) c->decode(prompt);
        for (; pos < edge + 6; ++pos) {
            for (auto& c : ctx) c->decode({{token(pos), 0, pos, true}});
            ASSERT_EQ(ctx[1]->n_outputs(), 1);
            const double err = rel_l2(ctx[1]->logits(0), ctx[0]->logits(0), V);
            EXPECT_LT(err, 1e-4) << "position " << pos;
            worst = std::max(worst, err);
        }
    }
    std::printf("[ graphs ] %s: largest relative L2 error, graphs vs none, %.3g\n",
                GetParam().c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(Gemma4, GraphReplay, ::testing::ValuesIn(variants()));

namespace {

class ConcurrentBranches : public ::testing::TestWithParam<std::string> {};

// Two CUDA contexts for n_seq sequences that differ only in concurrent_branches:
// [0] serial, [1] concurrent.
void serial_and_concurrent(const Fixture& fx, int32_t n_seq, std::unique_ptr<Context> (&ctx)[2]) {
    ContextOptions o = small_context(n_seq);
    o.backend = BackendKind::cuda;
    for (int c = 0; c < 2; ++c) {
        o.concurrent_branches = c == 1;
        ctx[c] = Context::create(*fx.model, o);
    }
}

}  // namespace

// ContextOptions::concurrent_branches: on the CUDA backend a MoE layer's routed experts
// run on a second stream beside the dense MLP (graphs recorded with two branches; a
// prompt above 16 tokens also sends the router's tensor-core matmul from the side
// chain to the main stream, and runs a matmul_multi's products on streams of their
// own). Two contexts that differ only in that option, fed the same prompts and decode
// steps (one sequence, then three at once), must give the same logits bit for bit:
// the two chains touch disjoint buffers, so the schedule cannot change a value. Dense and PLE fixtures have no side chain and check the option is
// inert there.
TEST_P(ConcurrentBranches, SameLogitsAsSerialBranches) {
    if (!runtime::cuda_available()) GTEST_SKIP() << "no CUDA device";
    const Fixture& fx = *fixture(GetParam());
    std::unique_ptr<Context> ctx[2];  // [0]: serial, [1]: concurrent
    serial_and_concurrent(fx, 3, ctx);
    const size_t V = static_cast<size_t>(fx.n_vocab);
    auto same = [&](const char* what, int step) {
        ASSERT_EQ(ctx[0]->n_outputs(), ctx[1]->n_outputs());
        for (int32_t i = 0; i < ctx[0]->n_outputs(); ++i)
            ASSERT_EQ(0, std::memcmp(ctx[0]->logits(i), ctx[1]->logits(i), V * sizeof(float)))
                << what << " step " << step << " output " << i;
    };
    // Prompts: 20 tokens (the tensor-core path), then 5 (the GEMV path), as seqs 0, 1.
    std::vector<int32_t> len(3, 0);
    for (int32_t s = 0; s < 2; ++s) {
        const std::vector<int32_t>& ids = fx.prompts[static_cast<size_t>(s) % fx.prompts.size()].ids;
        const int32_t n = s == 0 ? 20 : 5;
        std::vector<BatchToken> prompt;
        for (int32_t p = 0; p < n; ++p) prompt.push_back({ids[static_cast<size_t>(p) % ids.size()], s, p, true});
        for (auto& c : ctx) c->decode(prompt);
        same("prompt", s);
        len[static_cast<size_t>(s)] = n;
    }
    // Single-token steps of sequence 0 (graphs record, then replay), then steps of
    // all three sequences at once (sequence 2 starts empty).
    for (int step = 0; step < 6; ++step) {
        const int32_t tok = fx.prompts[0].ids[static_cast<size_t>(step) % fx.prompts[0].ids.size()];
        if (step < 3) {
            for (auto& c : ctx) c->decode({{tok, 0, len[0], true}});
            ++len[0];
        } else {
            std::vector<BatchToken> b;
            for (int32_t s = 0; s < 3; ++s) b.push_back({tok, s, len[static_cast<size_t>(s)]++, true});
            for (auto& c : ctx) c->decode(b);
        }
        same("decode", step);
    }
}

// Decode steps of 20 sequences at once take the tensor-core products (17+ tokens),
// recorded and replayed as graphs: there the backend also runs a matmul_multi's
// products (q, k, v; the dense MLP's gate and up) on streams of their own, and the
// MoE layers skip the attention's tile plan (one token a sequence). Both contexts
// must give the same logits, bit for bit, in every step: the eager first step, the
// recording and the replays.
TEST_P(ConcurrentBranches, SameLogitsWithManySequencesInGraphs) {
    if (!runtime::cuda_available()) GTEST_SKIP() << "no CUDA device";
    const Fixture& fx = *fixture(GetParam());
    constexpr int32_t kSeqs = 20;
    std::unique_ptr<Context> ctx[2];  // [0]: serial, [1]: concurrent
    serial_and_concurrent(fx, kSeqs, ctx);
    const size_t V = static_cast<size_t>(fx.n_vocab);
    int32_t len = 0;
    for (int step = 0; step < 5; ++step) {
        std::vector<BatchToken> b;
        for (int32_t s = 0; s < kSeqs; ++s) {
            const std::vector<int32_t>& ids = fx.prompts[static_cast<size_t>(s) % fx.prompts.size()].ids;
            b.push_back({ids[static_cast<size_t>(len + s) % ids.size()], s, len, true});
        }
        for (auto& c : ctx) c->decode(b);
        ++len;
        ASSERT_EQ(ctx[0]->n_outputs(), kSeqs);
        ASSERT_EQ(ctx[1]->n_outputs(), kSeqs);
        for (int32_t i = 0; i < kSeqs; ++i)
            ASSERT_EQ(0, std::memcmp(ctx[0]->logits(i), ctx[1]->logits(i), V * sizeof(float)))
                << "step " << step << " output " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Gemma4, ConcurrentBranches, ::testing::ValuesIn(variants()));

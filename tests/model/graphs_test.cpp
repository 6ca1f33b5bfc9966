// Decode steps replayed as device graphs (gemma4::Forward::run) are keyed by batch
// shape and by the bucket of the batch's key bound (Forward::key_bucket), the bound
// attention sizes its key-range split by when a graph is recorded. Tests: the buckets
// themselves, and decode across bucket edges with graphs giving the logits of the same
// steps without graphs (CUDA, SKIPPED without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
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

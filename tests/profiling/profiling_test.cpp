// ContextOptions::profile_ops on the parity fixtures (CPU backend): the profile
// names the ops the forward pass runs with call counts that follow from the model
// and the micro-batching, and profiling leaves the logits bit for bit unchanged.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "model/fixture.h"
#include "runtime/backend_factory.h"
#include "runtime/context_impl.h"
#include "runtime/profiling_backend.h"

using namespace hf2q;
using namespace hf2q::test;

namespace {

class Profiling : public ::testing::TestWithParam<std::string> {};

std::map<std::string, OpProfile::Entry> by_name(const OpProfile& p) {
    std::map<std::string, OpProfile::Entry> m;
    for (const auto& e : p.entries) {
        EXPECT_FALSE(m.count(e.name)) << "duplicate entry " << e.name;
        m[e.name] = e;
    }
    return m;
}

int64_t calls_with_prefix(const OpProfile& p, const std::string& prefix) {
    int64_t n = 0;
    for (const auto& e : p.entries)
        if (e.name.rfind(prefix, 0) == 0) n += e.calls;
    return n;
}

std::vector<BatchToken> prompt_batch(const std::vector<int32_t>& ids) {
    std::vector<BatchToken> b;
    for (size_t i = 0; i < ids.size(); ++i) b.push_back({ids[i], 0, static_cast<int32_t>(i), true});
    return b;
}

}  // namespace

TEST_P(Profiling, OpKindsAndCallCounts) {
    const Fixture& fx = *fixture(GetParam());
    const auto& c = fx.model->impl().config();
    const auto& ids = fx.prompts[3].ids;
    ContextOptions o = small_context(1);
    o.n_ubatch = 16;  // 40 tokens: micro-batches of 16, 16 and 8
    o.profile_ops = true;
    auto ctx = Context::create(*fx.model, o);
    EXPECT_TRUE(ctx->op_profile().entries.empty()) << "context set-up is not profiled";

    ctx->decode(prompt_batch(ids));
    const int64_t n_ub = (static_cast<int64_t>(ids.size()) + 15) / 16;
    int64_t n_sliding = 0;
    for (int64_t il = 0; il < c.n_layer; ++il) n_sliding += c.is_sliding(il) ? 1 : 0;
    ASSERT_GT(n_sliding, 0);
    ASSERT_LT(n_sliding, c.n_layer);

    OpProfile p = ctx->op_profile();
    auto m = by_name(p);
    ASSERT_TRUE(m.count("attention (sliding)"));
    ASSERT_TRUE(m.count("attention (full)"));
    EXPECT_EQ(m["attention (sliding)"].calls, n_sliding * n_ub);
    EXPECT_EQ(m["attention (full)"].calls, (c.n_layer - n_sliding) * n_ub);
    for (const char* op : {"rms_norm", "residual_norms", "geglu", "attention_inputs"}) {
        EXPECT_TRUE(m.count(op)) << op;
        EXPECT_EQ(m[op].calls % n_ub, 0) << op;
    }
    // RoPE and the KV store are fused into attention_inputs, the residual adds and
    // the norms after them into residual_norms: no separate calls.
    EXPECT_EQ(m.count("rope"), 0u);
    EXPECT_EQ(m.count("kv_store"), 0u);
    EXPECT_EQ(m["attention_inputs"].calls, c.n_layer * n_ub);
    // Per micro-batch: the first layer's input norm, the LM head's norm (every token
    // wants logits) and on PLE models the per-layer inputs' norm.
    EXPECT_EQ(m["rms_norm"].calls, n_ub * (c.has_ple() ? 3 : 2));
    EXPECT_TRUE(m.count("get_rows f32"));  // token embeddings
    EXPECT_GT(calls_with_prefix(p, "matmul (batched) f32"), 0);
    if (c.is_moe()) {  // router product, routing and grouping: one op per layer (moe_route_group)
        EXPECT_EQ(m["moe_route_group"].calls, c.n_layer * n_ub);
        EXPECT_EQ(m.count("moe_route"), 0u);
        EXPECT_EQ(m.count("moe_group"), 0u);
    }
    double sum = 0;
    for (const auto& e : p.entries) {
        EXPECT_GT(e.calls, 0) << e.name;
        EXPECT_GE(e.seconds, 0.0) << e.name;
        sum += e.seconds;
    }
    EXPECT_GT(sum, 0.0);
    EXPECT_DOUBLE_EQ(p.total_seconds(), sum);
    for (size_t i = 1; i < p.entries.size(); ++i)
        EXPECT_GE(p.entries[i - 1].seconds, p.entries[i].seconds);

    // Counts accumulate across decodes until reset; one decode step is one
    // micro-batch whose matmuls are all small.
    const int32_t n = static_cast<int32_t>(ids.size());
    ctx->decode({{ids[0], 0, n, true}});
    EXPECT_EQ(by_name(ctx->op_profile())["attention (full)"].calls,
              (c.n_layer - n_sliding) * (n_ub + 1));
    ctx->reset_op_profile();
    EXPECT_TRUE(ctx->op_profile().entries.empty());
    ctx->decode({{ids[1], 0, n + 1, true}});
    OpProfile step = ctx->op_profile();
    auto ms = by_name(step);
    EXPECT_EQ(ms["attention (sliding)"].calls, n_sliding);
    EXPECT_EQ(ms["attention (full)"].calls, c.n_layer - n_sliding);
    EXPECT_EQ(calls_with_prefix(step, "matmul (batched)"), 0);
    EXPECT_GT(calls_with_prefix(step, "matmul (≤8 tokens)"), 0);
}

TEST_P(Profiling, LogitsBitIdentical) {
    const Fixture& fx = *fixture(GetParam());
    const auto& ids = fx.prompts[2].ids;
    std::vector<std::vector<float>> runs;
    for (bool profile : {false, true}) {
        ContextOptions o = small_context(2);
        o.n_ubatch = 5;
        o.profile_ops = profile;
        auto ctx = Context::create(*fx.model, o);
        std::vector<float> all;
        auto keep = [&] {
            for (int32_t i = 0; i < ctx->n_outputs(); ++i)
                all.insert(all.end(), ctx->logits(i), ctx->logits(i) + ctx->n_vocab());
        };
        ctx->decode(prompt_batch(ids));
        keep();
        const int32_t n = static_cast<int32_t>(ids.size());
        ctx->decode({{ids[0], 0, n, true}, {ids[1], 1, 0, true}});
        keep();
        EXPECT_EQ(ctx->op_profile().entries.empty(), !profile);
        runs.push_back(std::move(all));
    }
    ASSERT_EQ(runs[0].size(), runs[1].size());
    EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)), 0);
}

// The profiler forwards argmax_rows: one call per LM-head chunk of an argmax decode,
// none in a logits decode.
TEST_P(Profiling, ArgmaxDecodeRunsArgmaxRows) {
    const Fixture& fx = *fixture(GetParam());
    const auto& ids = fx.prompts[3].ids;
    ContextOptions o = small_context(1);
    o.profile_ops = true;
    auto ctx = Context::create(*fx.model, o);
    ctx->decode(prompt_batch(ids), DecodeOutputs::argmax);  // 40 outputs: one chunk
    EXPECT_EQ(by_name(ctx->op_profile())["argmax_rows"].calls, 1);
    ctx->reset_op_profile();
    const int32_t n = static_cast<int32_t>(ids.size());
    ctx->decode({{ids[0], 0, n, true}});
    EXPECT_EQ(by_name(ctx->op_profile()).count("argmax_rows"), 0u);
    ctx->decode({{ids[1], 0, n + 1, true}}, DecodeOutputs::argmax);
    EXPECT_EQ(by_name(ctx->op_profile())["argmax_rows"].calls, 1);
}

// The same for topk_rows (and the scratch it asks the inner backend for): one call per
// LM-head chunk of a top_k decode, with the candidates the unprofiled context returns.
TEST_P(Profiling, TopKDecodeRunsTopkRows) {
    const Fixture& fx = *fixture(GetParam());
    const auto& ids = fx.prompts[3].ids;
    std::vector<TopLogit> got[2];
    for (const bool profile : {false, true}) {
        ContextOptions o = small_context(1);
        o.profile_ops = profile;
        auto ctx = Context::create(*fx.model, o);
        ctx->decode(prompt_batch(ids), DecodeOutputs::top_k, 5);
        if (profile) {
            EXPECT_EQ(by_name(ctx->op_profile())["topk_rows"].calls, 1);
        }
        for (int32_t i = 0; i < ctx->n_outputs(); ++i)
            for (const TopLogit& t : ctx->top_k(i)) got[profile].push_back(t);
    }
    ASSERT_EQ(got[0].size(), got[1].size());
    for (size_t i = 0; i < got[0].size(); ++i) {
        EXPECT_EQ(got[0][i].id, got[1][i].id);
        EXPECT_EQ(got[0][i].logit, got[1][i].logit);
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Profiling, ::testing::ValuesIn(variants()));

// The profiler reports what its inner backend reports about the input forms its
// matmuls read (prepared rows, BF16 rows), so a profiled forward pass takes the paths
// an unprofiled one takes (BF16 rows written by their producers, joint q/k/v and
// gate/up products) and the profile times the same step.
TEST(ProfilingBackend, ReportsTheInnerBackendsInputForms) {
    if (!runtime::cuda_available()) GTEST_SKIP() << "no CUDA device";
    auto inner = runtime::make_backend(BackendKind::cuda, 1);
    const ops::Backend* raw = inner.get();
    runtime::ProfilingBackend p(std::move(inner));
    EXPECT_TRUE(raw->reads_bf16_rows(64));
    for (int64_t n : {1, 16, 17, 64, 128, 4096}) EXPECT_EQ(p.reads_bf16_rows(n), raw->reads_bf16_rows(n)) << n;
    EXPECT_EQ(p.prepared_tokens(), raw->prepared_tokens());
    EXPECT_EQ(p.prepared_expert_down_tokens(), raw->prepared_expert_down_tokens());
}

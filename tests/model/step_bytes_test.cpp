// hf2q::decode_step_bytes (hf2q bench's GB/s of generation tests) on the transformers
// fixtures, checked against what can be counted another way: the GGUF file's tensor
// table, ModelInfo's per-token work, and the cache's row sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "fixture.h"
#include "ops/attention.h"
#include "runtime/model_impl.h"

namespace hf2q::test {
namespace {

// The KV bytes one sequence's attention reads over all layers at `context` tokens of
// context, from the config: context + 1 positions, at most the window on sliding layers.
double kv_bytes(const gemma4::Config& c, int64_t context, ops::KvType t) {
    double b = 0.0;
    for (int64_t il = 0; il < c.n_layer; ++il) {
        int64_t keys = context + 1;
        if (c.is_sliding(il)) keys = std::min(keys, c.sliding_window);
        b += static_cast<double>(keys) * 2.0 * static_cast<double>(c.kv_heads(il)) *
             static_cast<double>(ops::kv_row_bytes(t, c.head_dim(il)));
    }
    return b;
}

// The embedding rows one token reads (token_embd, and the per-layer embeddings).
double embedding_row_bytes(const gguf::File& f) {
    double b = 0.0;
    for (const auto& t : f.tensors())
        if (t.name == "token_embd.weight" || t.name == "per_layer_token_embd.weight")
            b += static_cast<double>(t.row_bytes());
    return b;
}

class StepBytes : public ::testing::TestWithParam<std::string> {};

// Whether the forward pass reads tensor t as a whole matrix: every tensor of two or
// more dimensions but the per-layer embedding table (read by rows) and the k and v
// projections of layers that read another layer's cache (stored in the file, unused).
bool read_whole(const gguf::TensorInfo& t, const gemma4::Config& c) {
    if (t.n_dims < 2 || t.name == "per_layer_token_embd.weight") return false;
    for (int64_t il = 0; il < c.n_layer; ++il) {
        if (c.has_kv(il)) continue;
        const std::string p = "blk." + std::to_string(il) + ".";
        if (t.name == p + "attn_k.weight" || t.name == p + "attn_v.weight") return false;
    }
    return true;
}

// Far more sequences than experts: every expert is read, so a step reads every matrix
// once (the tied embedding as the LM head), plus the rows and KV of each sequence.
TEST_P(StepBytes, ManySequencesReadEveryMatrixOnce) {
    const Fixture* fx = fixture(GetParam());
    const runtime::ModelImpl& m = fx->model->impl();
    double matrices = 0.0;
    for (const auto& t : m.file().tensors())
        if (read_whole(t, m.config())) matrices += static_cast<double>(t.nbytes);
    const int64_t B = 1 << 20, ctx = 5;
    const double per_seq = embedding_row_bytes(m.file()) + kv_bytes(m.config(), ctx, ops::KvType::f32);
    const double got = decode_step_bytes(*fx->model, B, ctx, KvCacheType::f32);
    EXPECT_NEAR(got - static_cast<double>(B) * per_seq, matrices, 1e-9 * got) << GetParam();
}

// One sequence: the weights ModelInfo counts per token (the dense projections, k of
// the experts) and the LM head, plus one row of each embedding and the KV at the context.
TEST_P(StepBytes, OneSequenceReadsTheActiveWeights) {
    const Fixture* fx = fixture(GetParam());
    const ModelInfo& info = fx->model->info();
    const runtime::ModelImpl& m = fx->model->impl();
    for (int64_t ctx : {int64_t{0}, int64_t{7}, int64_t{63}}) {
        const double want = static_cast<double>(info.n_active_bytes + info.n_head_bytes) +
                            embedding_row_bytes(m.file()) + kv_bytes(m.config(), ctx, ops::KvType::f16);
        EXPECT_NEAR(decode_step_bytes(*fx->model, 1, ctx, KvCacheType::f16), want, 1e-9 * want)
            << GetParam() << " context " << ctx;
    }
}

// The cache type and the context change only the KV part: per sequence, twice the f16
// bytes for f32, and past the sliding window only the full layers' rows grow.
TEST_P(StepBytes, KvPartFollowsTheCacheTypeAndTheWindow) {
    const Fixture* fx = fixture(GetParam());
    const gemma4::Config& c = fx->model->impl().config();
    const int64_t B = 3, w = c.sliding_window;
    ASSERT_GT(w, 0);
    for (int64_t ctx : {int64_t{0}, w - 1, w + 40}) {
        const double f32 = decode_step_bytes(*fx->model, B, ctx, KvCacheType::f32);
        const double f16 = decode_step_bytes(*fx->model, B, ctx, KvCacheType::f16);
        const double i8 = decode_step_bytes(*fx->model, B, ctx, KvCacheType::int8);
        const double e4 = decode_step_bytes(*fx->model, B, ctx, KvCacheType::e4m3);
        EXPECT_NEAR(f32 - f16, B * kv_bytes(c, ctx, ops::KvType::f16), 1e-9 * f32);
        EXPECT_NEAR(f16 - e4, B * kv_bytes(c, ctx, ops::KvType::e4m3), 1e-9 * f16);
        EXPECT_GT(i8, e4);  // the row scales
    }
    double full_rows = 0.0;  // one more position on every full-attention layer
    for (int64_t il = 0; il < c.n_layer; ++il)
        if (!c.is_sliding(il))
            full_rows += 2.0 * static_cast<double>(c.kv_heads(il)) *
                         static_cast<double>(ops::kv_row_bytes(ops::KvType::f16, c.head_dim(il)));
    ASSERT_GT(full_rows, 0.0);
    const double a = decode_step_bytes(*fx->model, B, w + 10, KvCacheType::f16);
    const double b = decode_step_bytes(*fx->model, B, w + 11, KvCacheType::f16);
    EXPECT_NEAR(b - a, B * full_rows, 1e-9 * b);
}

// Expected experts: 1 − (1 − k/E)^B of them at B sequences, so more sequences read more,
// never more than all of them; a dense model's weights do not depend on B.
TEST_P(StepBytes, ExpertsGrowWithTheBatch) {
    const Fixture* fx = fixture(GetParam());
    const runtime::ModelImpl& m = fx->model->impl();
    const gemma4::Config& c = m.config();
    const double per_seq = embedding_row_bytes(m.file()) + kv_bytes(c, 0, ops::KvType::f16);
    auto weights = [&](int64_t B) {
        return decode_step_bytes(*fx->model, B, 0, KvCacheType::f16) - static_cast<double>(B) * per_seq;
    };
    const double w1 = weights(1), w2 = weights(2), w64 = weights(64);
    if (c.n_expert == 0) {
        EXPECT_NEAR(w2, w1, 1e-9 * w1);
        EXPECT_NEAR(w64, w1, 1e-9 * w1);
        return;
    }
    EXPECT_GT(w2, w1);
    EXPECT_GT(w64, w2);
    // w(B) = rest + all · (1 − q^B), q = 1 − k/E: from B = 1 and 2, all = (w2 − w1) / (q − q²).
    const double q = 1.0 - static_cast<double>(c.n_expert_used) / static_cast<double>(c.n_expert);
    const double all = (w2 - w1) / (q - q * q), rest = w1 - all * (1.0 - q);
    EXPECT_NEAR(w64, rest + all * (1.0 - std::pow(q, 64.0)), 1e-6 * w64);
    EXPECT_LT(w64, rest + all);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StepBytes, ::testing::ValuesIn(variants()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace hf2q::test

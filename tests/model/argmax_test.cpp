// DecodeOutputs::argmax on the parity fixtures: the ids a decode returns equal the
// argmax (runtime::argmax, the greedy sampler's) of the logits the same batch returns
// with DecodeOutputs::logits, for interleaved prompts of several sequences (micro-batches
// of 16) and then greedy decode steps of one token per sequence. On CUDA (SKIPPED without
// a GPU) the steps replay graphs, and both output kinds share every batch shape, so a
// graph recorded for one kind replayed for the other would return stale results.
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/fixture.h"
#include "runtime/backend_factory.h"
#include "runtime/sampling.h"

using namespace hf2q;
using namespace hf2q::test;

namespace {

class DecodeArgmax : public ::testing::TestWithParam<std::string> {};

constexpr int kSteps = 6;  // graphs: eager, record, then replays

// Every prompt's tokens in sequences first .. first + prompts - 1, interleaved, every
// token an output.
std::vector<BatchToken> prompt_batch(const Fixture& fx, int32_t first) { return interleave_prompts(fx, first).batch; }

std::vector<int32_t> logits_argmax(const Context& ctx) {
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < ctx.n_outputs(); ++i)
        ids.push_back(runtime::argmax(ctx.logits(i), ctx.n_vocab()));
    return ids;
}

// The next step of the paired sequences: sequence s (of P = last.size()) and P + s each
// take token last[s] at their next position.
void next_step(const Context& ctx, const std::vector<int32_t>& last, std::vector<BatchToken>& a,
               std::vector<BatchToken>& b) {
    const auto P = static_cast<int32_t>(last.size());
    a.clear();
    b.clear();
    for (int32_t s = 0; s < P; ++s) {
        a.push_back({last[static_cast<size_t>(s)], s, ctx.seq_length(s), true});
        b.push_back({last[static_cast<size_t>(s)], P + s, ctx.seq_length(P + s), true});
    }
}

// Sequences 0 .. P-1 run every batch with logits, sequences P .. 2P-1 the same batch
// with argmax (same tokens and positions, so the same arithmetic). Each step feeds every
// sequence pair the argmax of its last output. n_ubatch 16 splits the prompts into
// micro-batches (ids gathered over several); 512 keeps all 67 prompt outputs in one,
// whose LM head runs in two chunks (ids of rows 64.. land at their offset).
void expect_argmax_equals_logits_argmax(const Fixture& fx, ContextOptions o, int32_t n_ubatch) {
    const auto P = static_cast<int32_t>(fx.prompts.size());
    o.n_seq_max = 2 * P;
    o.n_ubatch = n_ubatch;
    auto ctx = Context::create(*fx.model, o);
    std::vector<BatchToken> a = prompt_batch(fx, 0), b = prompt_batch(fx, P);
    for (int step = 0; step <= kSteps; ++step) {
        ctx->decode(a, DecodeOutputs::logits);
        const std::vector<int32_t> want = logits_argmax(*ctx);
        EXPECT_THROW(ctx->argmax(0), Error) << "argmax after a logits decode";
        ctx->decode(b, DecodeOutputs::argmax);
        EXPECT_THROW(ctx->logits(0), Error) << "logits after an argmax decode";
        ASSERT_EQ(ctx->n_outputs(), static_cast<int32_t>(want.size()));
        EXPECT_THROW(ctx->argmax(ctx->n_outputs()), Error);
        EXPECT_THROW(ctx->argmax(-1), Error);
        std::vector<int32_t> last(static_cast<size_t>(P));  // id of each pair's last output
        for (int32_t i = 0; i < ctx->n_outputs(); ++i) {
            const int32_t got = ctx->argmax(i);
            EXPECT_EQ(got, want[static_cast<size_t>(i)]) << "step " << step << " output " << i;
            last[static_cast<size_t>(b[static_cast<size_t>(i)].seq - P)] = got;
        }
        next_step(*ctx, last, a, b);
    }
}

// kPreviousArgmax: context `fed` queues step k+1 with every sequence's token taken
// from step k's argmax on the backend, then reads step k's ids (decodes_back 1);
// context `host` reads each step's ids and gives them back as token ids. Same
// batches, so the same ids, step after step (graphs on CUDA: eager, recorded, replayed).
void expect_fed_steps_equal_host_steps(const Fixture& fx, ContextOptions o) {
    const auto P = static_cast<int32_t>(fx.prompts.size());
    o.n_seq_max = P;
    o.n_ubatch = 512;  // the prompts' last outputs in the decode's last micro-batch
    auto host = Context::create(*fx.model, o), fed = Context::create(*fx.model, o);
    const std::vector<BatchToken> prompts = prompt_batch(fx, 0);
    host->decode(prompts, DecodeOutputs::argmax);
    fed->decode(prompts, DecodeOutputs::argmax);
    // Each sequence's last output row of a decode.
    std::vector<int32_t> last_row(static_cast<size_t>(P), -1);
    for (size_t i = 0; i < prompts.size(); ++i) last_row[static_cast<size_t>(prompts[i].seq)] = static_cast<int32_t>(i);
    std::vector<int32_t> fed_prev(static_cast<size_t>(P));  // step k-1's ids, from `fed`
    for (int32_t s = 0; s < P; ++s) fed_prev[static_cast<size_t>(s)] = fed->argmax(last_row[static_cast<size_t>(s)]);
    for (int step = 0; step <= kSteps; ++step) {
        std::vector<BatchToken> hb, fb;
        for (int32_t s = 0; s < P; ++s) {
            hb.push_back({host->argmax(last_row[static_cast<size_t>(s)]), s, host->seq_length(s), true});
            fb.push_back({kPreviousArgmax, s, fed->seq_length(s), true});
        }
        host->decode(hb, DecodeOutputs::argmax);
        fed->decode(fb, DecodeOutputs::argmax);
        for (int32_t s = 0; s < P; ++s) {
            // The decode before the last is still readable, and fed what host was given.
            EXPECT_EQ(fed->argmax(last_row[static_cast<size_t>(s)], 1), fed_prev[static_cast<size_t>(s)]);
            EXPECT_EQ(hb[static_cast<size_t>(s)].token, fed_prev[static_cast<size_t>(s)]) << "step " << step;
            last_row[static_cast<size_t>(s)] = s;
        }
        for (int32_t s = 0; s < P; ++s) fed_prev[static_cast<size_t>(s)] = fed->argmax(s);
    }
    for (int32_t s = 0; s < P; ++s) EXPECT_EQ(host->argmax(s), fed->argmax(s)) << "last step, sequence " << s;
}

}  // namespace

TEST_P(DecodeArgmax, PreviousArgmaxFedOnTheBackendOnCpu) {
    expect_fed_steps_equal_host_steps(*fixture(GetParam()), small_context());
}

TEST_P(DecodeArgmax, PreviousArgmaxFedOnTheBackendOnCuda) {
    if (!runtime::cuda_available()) GTEST_SKIP() << "no CUDA device";
    ContextOptions o = small_context();
    o.backend = BackendKind::cuda;
    expect_fed_steps_equal_host_steps(*fixture(GetParam()), o);
}

// What kPreviousArgmax needs: an argmax decode before with an output of the sequence
// in its last micro-batch, and the token in this batch's first micro-batch; and
// decodes_back is 0 or 1. A refused batch writes nothing.
TEST_P(DecodeArgmax, PreviousArgmaxRules) {
    const Fixture& fx = *fixture(GetParam());
    ContextOptions o = small_context(2);
    o.n_ubatch = 2;
    auto ctx = Context::create(*fx.model, o);
    const std::vector<int32_t>& ids = fx.prompts[1].ids;
    ASSERT_GE(ids.size(), 3u);
    EXPECT_THROW(ctx->decode({{kPreviousArgmax, 0, 0, true}}, DecodeOutputs::argmax), Error) << "no decode before";
    EXPECT_THROW(ctx->argmax(0, 1), Error) << "no decode before the last";
    ctx->decode({{ids[0], 0, 0, true}, {ids[1], 0, 1, false}, {ids[2], 1, 0, true}}, DecodeOutputs::argmax);
    // Sequence 0's output was in the first micro-batch of two.
    EXPECT_THROW(ctx->decode({{kPreviousArgmax, 0, 2, true}}, DecodeOutputs::argmax), Error);
    EXPECT_EQ(ctx->seq_length(0), 2);
    // A fed token past the first micro-batch.
    EXPECT_THROW(ctx->decode({{ids[0], 0, 2, false}, {ids[1], 0, 3, false}, {kPreviousArgmax, 1, 1, true}},
                             DecodeOutputs::argmax),
                 Error);
    EXPECT_EQ(ctx->seq_length(1), 1);
    EXPECT_THROW(ctx->argmax(0, 2), Error);
    EXPECT_THROW(ctx->argmax(0, -1), Error);
    ctx->decode({{kPreviousArgmax, 1, 1, true}}, DecodeOutputs::argmax);
    EXPECT_EQ(ctx->seq_length(1), 2);
    EXPECT_NO_THROW(ctx->argmax(1, 1));
    ctx->decode({{ids[0], 0, 2, true}}, DecodeOutputs::logits);
    EXPECT_THROW(ctx->decode({{kPreviousArgmax, 0, 3, true}}, DecodeOutputs::argmax), Error)
        << "the decode before returned logits";
    EXPECT_THROW(ctx->decode({{-2, 0, 3, true}}, DecodeOutputs::argmax), Error) << "other negative ids";
    EXPECT_EQ(ctx->seq_length(0), 3);
}

TEST_P(DecodeArgmax, EqualsArgmaxOfLogitsOnCpu) {
    for (int32_t ub : {16, 512})
        expect_argmax_equals_logits_argmax(*fixture(GetParam()), small_context(), ub);
}

TEST_P(DecodeArgmax, EqualsArgmaxOfLogitsOnCuda) {
    if (!runtime::cuda_available()) GTEST_SKIP() << "no CUDA device";
    ContextOptions o = small_context();
    o.backend = BackendKind::cuda;
    for (int32_t ub : {16, 512}) expect_argmax_equals_logits_argmax(*fixture(GetParam()), o, ub);
}

// A decode without outputs in argmax mode, and an output kind outside the enum.
TEST_P(DecodeArgmax, NoOutputsAndBadKind) {
    const Fixture& fx = *fixture(GetParam());
    auto ctx = Context::create(*fx.model, small_context(1));
    ctx->decode({{fx.prompts[1].ids[0], 0, 0, false}}, DecodeOutputs::argmax);
    EXPECT_EQ(ctx->n_outputs(), 0);
    EXPECT_THROW(ctx->argmax(0), Error);
    EXPECT_THROW(ctx->decode({{fx.prompts[1].ids[1], 0, 1, true}}, static_cast<DecodeOutputs>(7)),
                 Error);
    EXPECT_EQ(ctx->seq_length(0), 1) << "a refused decode writes nothing";
}

// DecodeOutputs::top_k: each output's candidates equal the sampler's top-k stage
// (runtime::init_candidates_top_k) on the logits the same batch returns in logits
// mode, ids and values bit for bit, for micro-batches of 16 or one, the prompts and
// then steps of one token a sequence, k 1, then 7, then 256 in the same context
// (graphs on CUDA: eager, recorded, replayed; a top_k graph must not serve another k
// or kind, and the kinds alternate on the same batch shape).
void expect_top_k_equals_logits_top_k(const Fixture& fx, ContextOptions o, int32_t n_ubatch) {
    const auto P = static_cast<int32_t>(fx.prompts.size());
    o.n_seq_max = 2 * P;
    o.n_ubatch = n_ubatch;
    auto ctx = Context::create(*fx.model, o);
    std::vector<BatchToken> a = prompt_batch(fx, 0), b = prompt_batch(fx, P);
    for (const int32_t k : {1, 7, kMaxTopK}) {  // one context: k's graphs beside the others'
        for (int step = 0; step <= kSteps; ++step) {
            ctx->decode(a, DecodeOutputs::logits);
            std::vector<runtime::Candidates> want(static_cast<size_t>(ctx->n_outputs()));
            for (int32_t i = 0; i < ctx->n_outputs(); ++i)
                runtime::init_candidates_top_k(ctx->logits(i), ctx->n_vocab(), k, want[static_cast<size_t>(i)]);
            EXPECT_THROW(ctx->top_k(0), Error) << "top_k after a logits decode";
            ctx->decode(b, DecodeOutputs::top_k, k);
            EXPECT_THROW(ctx->logits(0), Error) << "logits after a top_k decode";
            EXPECT_THROW(ctx->argmax(0), Error) << "argmax after a top_k decode";
            ASSERT_EQ(ctx->n_outputs(), static_cast<int32_t>(want.size()));
            EXPECT_THROW(ctx->top_k(ctx->n_outputs()), Error);
            std::vector<int32_t> last(static_cast<size_t>(P));  // each pair's last top candidate
            for (int32_t i = 0; i < ctx->n_outputs(); ++i) {
                const std::span<const TopLogit> got = ctx->top_k(i);
                const auto& w = want[static_cast<size_t>(i)].data;
                const std::string where =
                    "step " + std::to_string(step) + " k " + std::to_string(k) + " output " + std::to_string(i);
                ASSERT_EQ(got.size(), w.size()) << where;
                for (size_t t = 0; t < w.size(); ++t) {
                    EXPECT_EQ(got[t].id, w[t].id) << where << " entry " << t;
                    EXPECT_EQ(got[t].logit, w[t].logit) << where << " entry " << t;
                }
                last[static_cast<size_t>(b[static_cast<size_t>(i)].seq - P)] = got[0].id;
            }
            next_step(*ctx, last, a, b);
        }
    }
}

TEST_P(DecodeArgmax, TopKEqualsTheSamplersTopKOnCpu) {
    for (int32_t ub : {16, 512}) expect_top_k_equals_logits_top_k(*fixture(GetParam()), small_context(), ub);
}

TEST_P(DecodeArgmax, TopKEqualsTheSamplersTopKOnCuda) {
    if (!runtime::cuda_available()) GTEST_SKIP() << "no CUDA device";
    ContextOptions o = small_context();
    o.backend = BackendKind::cuda;
    if (!Context::create(*fixture(GetParam())->model, o)->has_top_k())
        GTEST_SKIP() << "the engine takes no top-k candidates from CUDA in this build (-DHF2Q_CUDA_TOPK=1)";
    for (int32_t ub : {16, 512}) expect_top_k_equals_logits_top_k(*fixture(GetParam()), o, ub);
}

// top_k goes with DecodeOutputs::top_k only, within [1, kMaxTopK]; a refused decode
// writes nothing.
TEST_P(DecodeArgmax, TopKArgumentRules) {
    const Fixture& fx = *fixture(GetParam());
    auto ctx = Context::create(*fx.model, small_context(1));
    EXPECT_TRUE(ctx->has_top_k()) << "the CPU backend returns top-k candidates";
    const int32_t tok = fx.prompts[1].ids[0];
    EXPECT_THROW(ctx->decode({{tok, 0, 0, true}}, DecodeOutputs::top_k, 0), Error);
    EXPECT_THROW(ctx->decode({{tok, 0, 0, true}}, DecodeOutputs::top_k, kMaxTopK + 1), Error);
    EXPECT_THROW(ctx->decode({{tok, 0, 0, true}}, DecodeOutputs::logits, 3), Error);
    EXPECT_THROW(ctx->decode({{tok, 0, 0, true}}, DecodeOutputs::argmax, 1), Error);
    EXPECT_EQ(ctx->seq_length(0), 0);
    ctx->decode({{tok, 0, 0, true}}, DecodeOutputs::top_k, 3);
    EXPECT_EQ(ctx->top_k(0).size(), 3u);
    EXPECT_THROW(ctx->decode({{kPreviousArgmax, 0, 1, true}}, DecodeOutputs::argmax), Error)
        << "kPreviousArgmax after a top_k decode";
}

INSTANTIATE_TEST_SUITE_P(Gemma4, DecodeArgmax, ::testing::ValuesIn(variants()));

// DecodeOutputs::argmax on the parity fixtures: the ids a decode returns equal the
// argmax (runtime::argmax, the greedy sampler's) of the logits the same batch returns
// with DecodeOutputs::logits, for interleaved prompts of several sequences (micro-batches
// of 16) and then greedy decode steps of one token per sequence. On CUDA (SKIPPED without
// a GPU) the steps replay graphs, and both output kinds share every batch shape, so a
// graph recorded for one kind replayed for the other would return stale results.
#include <gtest/gtest.h>

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
        a.clear();
        b.clear();
        for (int32_t s = 0; s < P; ++s) {
            a.push_back({last[static_cast<size_t>(s)], s, ctx->seq_length(s), true});
            b.push_back({last[static_cast<size_t>(s)], P + s, ctx->seq_length(P + s), true});
        }
    }
}

}  // namespace

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

INSTANTIATE_TEST_SUITE_P(Gemma4, DecodeArgmax, ::testing::ValuesIn(variants()));

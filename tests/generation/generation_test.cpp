// Generation loop tests on the tiny MoE parity fixture (generation/fixture.h).
#include "runtime/generation.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "generation/fixture.h"
#include "hf2q/engine.h"
#include "tokenizer/tokenizer.h"

namespace hf2q::runtime {
namespace {

using namespace test;
using tokenizer::TokenType;

TEST(Generation, GreedyMatchesTransformersReference) {
    for (const Reference& r : fixture().prompts) {
        auto ctx = make_context();
        Generator gen(*ctx, nullptr);
        std::vector<int32_t> streamed;
        GenerationCallbacks cb;
        cb.on_token = [&](int32_t t) { streamed.push_back(t); };
        const GenerationResult res =
            gen.generate(r.ids, greedy(static_cast<int32_t>(r.greedy.size())), cb);
        const size_t n = confident_steps(r);
        ASSERT_GT(n, 0u);
        ASSERT_EQ(res.tokens.size(), r.greedy.size());
        EXPECT_EQ(streamed, res.tokens);
        EXPECT_EQ(std::vector<int32_t>(res.tokens.begin(),
                                       res.tokens.begin() + static_cast<std::ptrdiff_t>(n)),
                  std::vector<int32_t>(r.greedy.begin(),
                                       r.greedy.begin() + static_cast<std::ptrdiff_t>(n)));
        EXPECT_EQ(res.finish_reason, FinishReason::length);
        EXPECT_EQ(res.n_prompt, static_cast<int32_t>(r.ids.size()));
        EXPECT_EQ(res.n_prompt_cached, 0);
        // The last token is sampled but never decoded.
        EXPECT_EQ(res.n_decoded_generated, static_cast<int32_t>(r.greedy.size()) - 1);
        EXPECT_EQ(ctx->seq_length(0), static_cast<int32_t>(r.ids.size() + r.greedy.size() - 1));
    }
}

// Greedy generation takes the argmax computed on the device (DecodeOutputs::argmax) and
// gives the tokens and text the logits path gives: there a zero logit bias keeps the
// sampler on the host (is_greedy is false) without changing any logit. top_k 1 at a
// temperature above 0 is greedy too; an on_prefill callback gets the prompt's logits
// while the steps still use the device argmax. The last decode's outputs show the path.
TEST(Generation, DeviceArgmaxGivesTheHostSamplersTokens) {
    const tokenizer::Tokenizer tok = test_tokenizer();
    for (const Reference& r : fixture().prompts) {
        GenerationParams host = greedy(10), device = greedy(10), top1 = greedy(10);
        host.sampler.logit_bias[5] = 0.0f;
        top1.sampler.temperature = 0.8f;
        top1.sampler.top_k = 1;
        const GenerationResult want = [&] {
            auto ctx = make_context();
            Generator gen(*ctx, &tok);
            GenerationResult res = gen.generate(r.ids, host);
            EXPECT_NO_THROW(ctx->logits(0)) << "the host sampler needs logits";
            EXPECT_THROW(ctx->argmax(0), Error);
            return res;
        }();
        for (const bool with_prefill_callback : {false, true}) {
            for (const GenerationParams* p : {&device, &top1}) {
                auto ctx = make_context();
                Generator gen(*ctx, &tok);
                GenerationCallbacks cb;
                int prefill_calls = 0;
                if (with_prefill_callback)
                    cb.on_prefill = [&](const Context& c, int32_t) {
                        ++prefill_calls;
                        EXPECT_NO_THROW(c.logits(c.n_outputs() - 1)) << "on_prefill reads the prompt's logits";
                    };
                const GenerationResult got = gen.generate(r.ids, *p, cb);
                EXPECT_EQ(got.tokens, want.tokens) << "prompt of " << r.ids.size() << " tokens";
                EXPECT_EQ(got.text, want.text);
                EXPECT_EQ(got.finish_reason, want.finish_reason);
                EXPECT_EQ(prefill_calls, with_prefill_callback ? 1 : 0);
                if (got.n_decoded_generated > 0 || !with_prefill_callback) {
                    EXPECT_NO_THROW(ctx->argmax(0)) << "greedy steps decode argmax ids";
                    EXPECT_THROW(ctx->logits(0), Error);
                }
            }
        }
    }
}

// A top-k sampler without penalties or bias decodes with DecodeOutputs::top_k (only
// its k candidates come back) and draws the tokens and text the logits path draws,
// with the same seed: there a zero logit bias keeps the whole row on the host
// (device_top_k is 0) without changing any logit. Covers k 1 .. 256, top-p and min-p.
TEST(Generation, TopKSamplerDrawsFromTheDevicesCandidates) {
    const tokenizer::Tokenizer tok = test_tokenizer();
    struct Case {
        int32_t k;
        float t, top_p, min_p;
    };
    for (const Case& c : {Case{40, 1.0f, 0.95f, 0.0f}, Case{2, 0.8f, 1.0f, 0.0f}, Case{256, 1.3f, 0.9f, 0.05f}}) {
        for (const Reference& r : fixture().prompts) {
            GenerationParams top = greedy(10);
            top.sampler.temperature = c.t;
            top.sampler.top_k = c.k;
            top.sampler.top_p = c.top_p;
            top.sampler.min_p = c.min_p;
            top.sampler.seed = 5;
            GenerationParams host = top;
            host.sampler.logit_bias[5] = 0.0f;
            ASSERT_EQ(device_top_k(top.sampler), c.k);
            ASSERT_EQ(device_top_k(host.sampler), 0);
            auto run = [&](const GenerationParams& p, DecodeOutputs want) {
                auto ctx = make_context();
                Generator gen(*ctx, &tok);
                GenerationResult res = gen.generate(r.ids, p);
                if (want == DecodeOutputs::top_k) {
                    EXPECT_NO_THROW(ctx->top_k(0)) << "the steps return top-k candidates";
                    EXPECT_LE(ctx->top_k(0).size(), static_cast<size_t>(c.k));
                    EXPECT_THROW(ctx->logits(0), Error);
                } else {
                    EXPECT_THROW(ctx->top_k(0), Error);
                }
                return res;
            };
            const GenerationResult want = run(host, DecodeOutputs::logits);
            const GenerationResult got = run(top, DecodeOutputs::top_k);
            EXPECT_EQ(got.tokens, want.tokens) << "k " << c.k << ", prompt of " << r.ids.size() << " tokens";
            EXPECT_EQ(got.text, want.text);
        }
    }
}

// Pipelined greedy steps (each queued before the host reads the previous step's id,
// which it takes on the device) give what one step at a time gives: tokens, text,
// finish reason, and the cache afterwards, with the step that was queued past an
// EOG token or the n_predict-th token truncated away. The EOG token is each of the
// first greedy tokens in turn, so the truncated position falls on every offset of the
// 4-position blocks (sliding window 8); a next chat turn then reuses the cache alike.
TEST(Generation, PipelinedGreedyEqualsOneStepAtATime) {
    for (const Reference& r : fixture().prompts) {
        for (size_t k = 0; k < std::min<size_t>(confident_steps(r), 8); ++k) {
            const tokenizer::Tokenizer tok = test_tokenizer(r.greedy[k]);
            GenerationResult res[2];
            int32_t length[2] = {0, 0};
            std::vector<int32_t> cached[2], next_turn[2];
            for (const bool pipeline : {false, true}) {
                auto ctx = make_context();
                Generator gen(*ctx, &tok);
                GenerationParams p = greedy(k % 2 == 0 ? 12 : static_cast<int32_t>(k));
                p.pipeline = pipeline;
                res[pipeline] = gen.generate(r.ids, p);
                length[pipeline] = ctx->seq_length(0);
                cached[pipeline] = gen.cached();
                std::vector<int32_t> second = r.ids;
                second.insert(second.end(), res[pipeline].tokens.begin(), res[pipeline].tokens.end());
                second.push_back(7);
                p.n_predict = 3;
                next_turn[pipeline] = gen.generate(second, p).tokens;
            }
            const std::string where = "prompt of " + std::to_string(r.ids.size()) + ", EOG " + std::to_string(k);
            EXPECT_EQ(res[1].tokens, res[0].tokens) << where;
            EXPECT_EQ(res[1].text, res[0].text) << where;
            EXPECT_EQ(res[1].finish_reason, res[0].finish_reason) << where;
            EXPECT_EQ(res[1].n_decoded_generated, res[0].n_decoded_generated) << where;
            EXPECT_EQ(length[1], length[0]) << where << ": the queued step past the end is dropped";
            EXPECT_EQ(cached[1], cached[0]) << where;
            EXPECT_EQ(next_turn[1], next_turn[0]) << where;
        }
    }
}

// A KV cache of 12 positions: the step queued at position 12 is refused, the loop
// reads that token first, as one step at a time does, and both throw on the decode
// that does not fit, after the same tokens.
TEST(Generation, PipelinedGreedyWhenTheCacheFills) {
    std::vector<int32_t> seen[2];
    for (const bool pipeline : {false, true}) {
        ContextOptions o;
        o.n_ctx = 64;
        o.kv_block_size = 4;
        o.kv_tokens = 12;
        o.n_threads = 2;
        auto ctx = Context::create(*fixture().model, o);
        Generator gen(*ctx, nullptr);
        GenerationParams p = greedy(-1);
        p.pipeline = pipeline;
        GenerationCallbacks cb;
        cb.on_token = [&](int32_t t) { seen[pipeline].push_back(t); };
        EXPECT_THROW(gen.generate(fixture().prompts[0].ids, p, cb), Error);
        EXPECT_EQ(ctx->seq_length(0), 12);
    }
    EXPECT_EQ(seen[1], seen[0]);
    EXPECT_EQ(seen[0].size(), 12u);
}

// A callback that throws on the third token: the step queued behind it is dropped, so
// the cache ends where one step at a time leaves it.
TEST(Generation, PipelinedStepDroppedWhenACallbackThrows) {
    int32_t length[2] = {0, 0};
    for (const bool pipeline : {false, true}) {
        auto ctx = make_context();
        Generator gen(*ctx, nullptr);
        GenerationParams p = greedy(10);
        p.pipeline = pipeline;
        GenerationCallbacks cb;
        int calls = 0;
        cb.on_token = [&](int32_t) {
            if (++calls == 3) throw std::runtime_error("client went away");
        };
        EXPECT_THROW(gen.generate(fixture().prompts[2].ids, p, cb), std::runtime_error);
        length[pipeline] = ctx->seq_length(0);
    }
    EXPECT_EQ(length[1], length[0]);
    EXPECT_EQ(length[0], static_cast<int32_t>(fixture().prompts[2].ids.size()) + 2);
}

TEST(Generation, SeedReproducibility) {
    const std::vector<int32_t>& prompt = fixture().prompts[1].ids;
    auto run = [&](uint64_t seed) {
        auto ctx = make_context();
        Generator gen(*ctx, nullptr);
        GenerationParams p;
        p.n_predict = 16;
        p.sampler.temperature = 1.0f;
        p.sampler.seed = seed;
        return gen.generate(prompt, p).tokens;
    };
    const std::vector<int32_t> a = run(42);
    EXPECT_EQ(a.size(), 16u);
    EXPECT_EQ(a, run(42));
    EXPECT_NE(a, run(43));
    EXPECT_NE(a, std::vector<int32_t>(fixture().prompts[1].greedy.begin(),
                                      fixture().prompts[1].greedy.end()));
}

TEST(Generation, TextStreamsAndNPredict) {
    const tokenizer::Tokenizer tok = test_tokenizer();
    auto ctx = make_context();
    Generator gen(*ctx, &tok);
    GenerationParams p = greedy(8);
    p.parse_output = false;
    std::string streamed;
    GenerationCallbacks cb;
    cb.on_content = [&](std::string_view s) { streamed += s; };
    const GenerationResult res = gen.generate(fixture().prompts[0].ids, p, cb);
    EXPECT_EQ(res.finish_reason, FinishReason::length);
    ASSERT_EQ(res.tokens.size(), 8u);
    EXPECT_EQ(res.text, tok.decode(res.tokens));
    EXPECT_EQ(res.content, res.text);
    EXPECT_EQ(streamed, res.text);
    EXPECT_FALSE(res.text.empty());
}

TEST(Generation, StopStringCutsTextAndEnds) {
    const tokenizer::Tokenizer tok = test_tokenizer();
    const std::vector<int32_t>& prompt = fixture().prompts[1].ids;
    auto ctx = make_context();
    Generator gen(*ctx, &tok);
    GenerationParams p = greedy(10);
    p.parse_output = false;
    const GenerationResult full = gen.generate(prompt, p);
    ASSERT_EQ(full.tokens.size(), 10u);
    // Stop at the text of the fifth token (and the start of the sixth's).
    const std::string stop = std::string(tok.token_to_piece(full.tokens[4], false)) + " t";
    const size_t cut = full.text.find(stop);
    ASSERT_NE(cut, std::string::npos);
    p.stop = {stop};
    std::string streamed;
    GenerationCallbacks cb;
    cb.on_content = [&](std::string_view s) { streamed += s; };
    const GenerationResult res = gen.generate(prompt, p, cb);
    EXPECT_EQ(res.finish_reason, FinishReason::stop);
    EXPECT_EQ(res.text, full.text.substr(0, cut));
    EXPECT_EQ(streamed, res.text);
    EXPECT_LE(res.tokens.size(), 6u);
    EXPECT_EQ(res.tokens, std::vector<int32_t>(full.tokens.begin(),
                                               full.tokens.begin() +
                                                   static_cast<std::ptrdiff_t>(res.tokens.size())));
    // The cache held 16 positions and the window is 8: truncating to the prompt was
    // refused, so the prompt was prefilled again.
    EXPECT_EQ(res.n_prompt_cached, 0);
}

TEST(Generation, EndOfGenerationTokenAndIgnoreEos) {
    const Reference& r = fixture().prompts[1];
    const tokenizer::Tokenizer tok = test_tokenizer(r.greedy[0]);  // first greedy token is EOS
    ASSERT_TRUE(tok.is_eog(r.greedy[0]));
    auto ctx = make_context();
    Generator gen(*ctx, &tok);
    GenerationParams p = greedy(6);
    const GenerationResult eog = gen.generate(r.ids, p);
    EXPECT_EQ(eog.finish_reason, FinishReason::eog);
    EXPECT_EQ(eog.tokens, std::vector<int32_t>{r.greedy[0]});
    EXPECT_TRUE(eog.text.empty());
    p.ignore_eos = true;
    const GenerationResult ignored = gen.generate(r.ids, p);
    EXPECT_EQ(ignored.finish_reason, FinishReason::length);
    ASSERT_EQ(ignored.tokens.size(), 6u);
    for (int32_t t : ignored.tokens) EXPECT_FALSE(tok.is_eog(t));
}

// Prompt 1's greedy continuation is 224 320 79 236 452 20 20 224 (all margins > 0.2):
// naming those tokens makes the model "write" Gemma 4 markup.
std::vector<CustomToken> markup_tokens(const char* token20) {
    return {{224, "<|channel>", TokenType::CONTROL},
            {320, "thought\n", TokenType::NORMAL},
            {79, "Hmm", TokenType::NORMAL},
            {236, "<channel|>", TokenType::CONTROL},
            {452, "Hi", TokenType::NORMAL},
            {20, token20, token20[0] == '<' ? TokenType::CONTROL : TokenType::NORMAL}};
}

TEST(Generation, ParsesReasoningAndContent) {
    const Reference& r = fixture().prompts[1];
    ASSERT_EQ(std::vector<int32_t>(r.greedy.begin(), r.greedy.begin() + 7),
              (std::vector<int32_t>{224, 320, 79, 236, 452, 20, 20}));
    const tokenizer::Tokenizer tok = test_tokenizer(1, markup_tokens("!"));
    auto ctx = make_context();
    Generator gen(*ctx, &tok);
    std::string reasoning, content;
    GenerationCallbacks cb;
    cb.on_reasoning = [&](std::string_view s) { reasoning += s; };
    cb.on_content = [&](std::string_view s) { content += s; };
    const GenerationResult res = gen.generate(r.ids, greedy(7), cb);
    EXPECT_EQ(res.finish_reason, FinishReason::length);
    EXPECT_EQ(res.text, "<|channel>thought\nHmm<channel|>Hi!!");
    EXPECT_EQ(res.reasoning, "Hmm");
    EXPECT_EQ(res.content, "Hi!!");
    EXPECT_EQ(reasoning, res.reasoning);
    EXPECT_EQ(content, res.content);

    // Without parsing (and without control tokens) the raw text is the content.
    GenerationParams raw = greedy(7);
    raw.parse_output = false;
    const GenerationResult plain = gen.generate(r.ids, raw);
    EXPECT_EQ(plain.content, "thought\nHmmHi!!");
    EXPECT_TRUE(plain.reasoning.empty());

    // A stop string inside the reasoning ends it there.
    GenerationParams stop = greedy(7);
    stop.stop = {"mm<"};
    const GenerationResult stopped = gen.generate(r.ids, stop);
    EXPECT_EQ(stopped.finish_reason, FinishReason::stop);
    EXPECT_EQ(stopped.reasoning, "H");
    EXPECT_EQ(stopped.tokens.size(), 4u);
}

TEST(Generation, EndOfTurnTokenEndsReply) {
    const Reference& r = fixture().prompts[1];
    std::vector<CustomToken> custom = markup_tokens("<turn|>");
    custom.push_back({5, "<unused5>", TokenType::UNUSED});  // frees the text "<turn|>"
    const tokenizer::Tokenizer tok = test_tokenizer(1, custom);
    ASSERT_TRUE(tok.is_eog(20));
    auto ctx = make_context();
    Generator gen(*ctx, &tok);
    const GenerationResult res = gen.generate(r.ids, greedy(12));
    EXPECT_EQ(res.finish_reason, FinishReason::eog);
    EXPECT_EQ(res.tokens.size(), 6u);
    EXPECT_EQ(res.content, "Hi");
    EXPECT_EQ(res.reasoning, "Hmm");
}

TEST(Generation, ContextFullEndsWithLength) {
    const std::vector<int32_t>& prompt = fixture().prompts[0].ids;  // 1 token
    auto ctx = make_context(5);
    Generator gen(*ctx, nullptr);
    const GenerationResult res = gen.generate(prompt, greedy(-1));
    EXPECT_EQ(res.finish_reason, FinishReason::length);
    EXPECT_EQ(res.tokens.size(), 5u);  // positions 1..4 decoded, the fifth token sampled only
    EXPECT_EQ(ctx->seq_length(0), 5);
    std::vector<int32_t> too_long(6, 10);
    EXPECT_THROW(gen.generate(too_long, greedy(1)), Error);
}

TEST(Generation, ChatTurnDecodesOnlyNewTokens) {
    const std::vector<int32_t>& first = fixture().prompts[2].ids;
    auto ctx = make_context();
    Generator gen(*ctx, nullptr);
    const GenerationResult r1 = gen.generate(first, greedy(4));
    ASSERT_EQ(r1.tokens.size(), 4u);
    // Next turn: the conversation so far (prompt + reply) plus a new user message.
    std::vector<int32_t> second = first;
    second.insert(second.end(), r1.tokens.begin(), r1.tokens.end());
    for (int32_t t : {4, 300, 301, 5}) second.push_back(t);
    const int32_t cached = static_cast<int32_t>(gen.cached().size());
    EXPECT_EQ(cached, static_cast<int32_t>(first.size()) + 3);
    const GenerationResult r2 = gen.generate(second, greedy(5));
    EXPECT_EQ(r2.n_prompt_cached, cached);
    EXPECT_EQ(r2.n_prompt, static_cast<int32_t>(second.size()));

    auto fresh_ctx = make_context();
    Generator fresh(*fresh_ctx, nullptr);
    const GenerationResult ref = fresh.generate(second, greedy(5));
    EXPECT_EQ(ref.n_prompt_cached, 0);
    EXPECT_EQ(r2.tokens, ref.tokens);
}

TEST(Generation, DivergingPromptFallsBackToFullPrefill) {
    const std::vector<int32_t>& base = fixture().prompts[3].ids;  // 40 tokens
    auto ctx = make_context();
    Generator gen(*ctx, nullptr);
    gen.generate(base, greedy(2));
    // Differs at position 2: the sliding-window layers (window 8) released that far back.
    std::vector<int32_t> edited = base;
    edited[2] = (edited[2] + 1) % 512;
    const GenerationResult r = gen.generate(edited, greedy(4));
    EXPECT_EQ(r.n_prompt_cached, 0);
    // Differs in the last position only, the cache holding exactly the prompt: the
    // truncation stays inside the window and the common prefix is kept.
    gen.reset();
    gen.generate(edited, greedy(1));
    ASSERT_EQ(gen.cached(), edited);
    std::vector<int32_t> tail = edited;
    tail.back() = (tail.back() + 1) % 512;
    const GenerationResult t = gen.generate(tail, greedy(4));
    EXPECT_EQ(t.n_prompt_cached, static_cast<int32_t>(tail.size()) - 1);

    for (const auto& [prompt, got] : {std::pair{&edited, &r}, std::pair{&tail, &t}}) {
        auto fresh_ctx = make_context();
        Generator fresh(*fresh_ctx, nullptr);
        EXPECT_EQ(fresh.generate(*prompt, greedy(4)).tokens, got->tokens);
    }
}

TEST(Generation, RejectsBadInput) {
    auto ctx = make_context();
    Generator gen(*ctx, nullptr);
    EXPECT_THROW(gen.generate({}, greedy(1)), Error);
    EXPECT_THROW(gen.generate({512}, greedy(1)), Error);
    GenerationParams p = greedy(1);
    p.stop = {"x"};
    EXPECT_THROW(gen.generate({2}, p), Error);  // stop strings without a tokenizer
    p = greedy(1);
    p.sampler.temperature = -1.0f;
    EXPECT_THROW(gen.generate({2}, p), Error);
    GenerationCallbacks text_cb;
    text_cb.on_content = [](std::string_view) {};
    EXPECT_THROW(gen.generate({2}, greedy(1), text_cb), Error);  // text without a tokenizer
    EXPECT_THROW(Generator(*ctx, nullptr, 1), Error);
    EXPECT_NO_THROW(gen.generate({2}, greedy(1)));  // still usable after the refusals
}

}  // namespace
}  // namespace hf2q::runtime

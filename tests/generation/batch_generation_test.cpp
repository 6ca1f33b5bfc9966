// Continuous batching (runtime::BatchGenerator) on the tiny MoE fixture: every request
// gets what it gets alone (runtime::Generator), whatever runs beside it, however the
// prompts are chunked and however many run at once.
#include "runtime/batch_generation.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "generation/fixture.h"
#include "hf2q/engine.h"
#include "runtime/backend_factory.h"

namespace hf2q::runtime {
namespace {

using namespace test;

std::unique_ptr<Context> batch_context(int32_t n_seq, int64_t kv_tokens = 0, int32_t n_ctx = 64,
                                       BackendKind backend = BackendKind::cpu) {
    ContextOptions o;
    o.backend = backend;
    o.n_seq_max = n_seq;
    o.n_ctx = n_ctx;
    o.kv_block_size = 4;
    o.kv_tokens = kv_tokens;
    o.n_threads = 2;
    return Context::create(*fixture().model, o);
}

GenerationResult alone(const BatchRequest& r, const tokenizer::Tokenizer* tok, int32_t n_ctx = 64) {
    auto ctx = make_context(n_ctx);
    Generator gen(*ctx, tok);
    GenerationParams p = r.params;
    p.pipeline = false;
    return gen.generate(r.prompt, p);
}

// The fixture's four prompts (1, 7, 19 and 40 tokens), then each again with three
// more tokens: eight requests, more than the sequences of most runs below.
std::vector<BatchRequest> requests(const GenerationParams& params) {
    std::vector<BatchRequest> out;
    for (int tail = 0; tail < 2; ++tail) {
        for (const Reference& r : fixture().prompts) {
            BatchRequest q{r.ids, params};
            if (tail) q.prompt.insert(q.prompt.end(), {7, 8, 9});
            out.push_back(q);
        }
    }
    return out;
}

void expect_same(const GenerationResult& got, const GenerationResult& want, const std::string& where) {
    EXPECT_EQ(got.tokens, want.tokens) << where;
    EXPECT_EQ(got.text, want.text) << where;
    EXPECT_EQ(got.content, want.content) << where;
    EXPECT_EQ(got.finish_reason, want.finish_reason) << where;
    EXPECT_EQ(got.n_prompt, want.n_prompt) << where;
    EXPECT_EQ(got.n_decoded_generated, want.n_decoded_generated) << where;
}

// Greedy requests: the same tokens and text as alone, with 1, 3 and 8 sequences and
// steps of 3 tokens (every prompt prefilled in chunks beside generating sequences),
// 16 or the micro-batch (whole prompts at once). Each step's outputs are argmax ids.
TEST(BatchGeneration, GreedyRequestsGetWhatTheyGetAlone) {
    const tokenizer::Tokenizer tok = test_tokenizer();
    const std::vector<BatchRequest> reqs = requests(greedy(12));
    std::vector<GenerationResult> want;
    for (const BatchRequest& r : reqs) want.push_back(alone(r, &tok));
    for (const int32_t n_parallel : {1, 3, 8}) {
        for (const int32_t step_tokens : {3, 16, 0}) {
            auto ctx = batch_context(n_parallel);
            BatchGenerator gen(*ctx, &tok);
            std::map<size_t, std::vector<int32_t>> streamed;
            std::vector<size_t> done_order;
            BatchCallbacks cb;
            cb.on_token = [&](size_t i, int32_t t) { streamed[i].push_back(t); };
            cb.on_done = [&](size_t i, const GenerationResult& r) {
                done_order.push_back(i);
                EXPECT_EQ(r.tokens, streamed[i]);
            };
            const std::vector<GenerationResult> got = gen.run(reqs, {n_parallel, step_tokens}, cb);
            const std::string where =
                std::to_string(n_parallel) + " at once, steps of " + std::to_string(step_tokens);
            ASSERT_EQ(got.size(), reqs.size()) << where;
            for (size_t i = 0; i < reqs.size(); ++i)
                expect_same(got[i], want[i], where + ", request " + std::to_string(i));
            EXPECT_EQ(done_order.size(), reqs.size()) << where;
            EXPECT_EQ(gen.stats().max_running, n_parallel) << where;
            EXPECT_EQ(gen.stats().generated_tokens, 12 * static_cast<int64_t>(reqs.size())) << where;
            int64_t prompt_tokens = 0;
            for (const BatchRequest& r : reqs) prompt_tokens += static_cast<int64_t>(r.prompt.size());
            EXPECT_EQ(gen.stats().prompt_tokens, prompt_tokens) << where;
            if (n_parallel == 1) {  // one request at a time: its prompt in steps of step_tokens, then 11 steps
                int64_t steps = 0;
                const int64_t chunk = step_tokens > 0 ? step_tokens : ctx->options().n_ubatch;
                for (const BatchRequest& r : reqs)
                    steps += (static_cast<int64_t>(r.prompt.size()) + chunk - 1) / chunk + 11;
                EXPECT_EQ(gen.stats().steps, steps) << where;
            }
            for (int32_t s = 0; s < n_parallel; ++s) EXPECT_EQ(ctx->seq_length(s), 0) << where;
            EXPECT_NO_THROW(ctx->argmax(0)) << where << ": greedy steps return the device argmax";
        }
    }
}

// Sampled requests, each with its own seed, beside greedy ones: top-k samplers (the
// steps return each output's 40 candidates, DecodeOutputs::top_k) and one with a
// repeat penalty (its steps return logits); every request still gets its tokens
// alone, at 1 and 8 sequences.
TEST(BatchGeneration, SampledRequestsDoNotDependOnTheirNeighbours) {
    std::vector<BatchRequest> reqs = requests(greedy(10));
    for (size_t i = 0; i < reqs.size(); i += 2) {
        reqs[i].params.sampler.temperature = 1.0f;
        reqs[i].params.sampler.top_k = 40;
        reqs[i].params.sampler.seed = 100 + i;
    }
    reqs[4].params.sampler.repeat_penalty = 1.3f;
    ASSERT_EQ(device_top_k(reqs[0].params.sampler), 40);
    ASSERT_EQ(device_top_k(reqs[4].params.sampler), 0);
    for (const int32_t n_parallel : {1, 8}) {
        auto ctx = batch_context(n_parallel);
        BatchGenerator gen(*ctx, nullptr);
        const std::vector<GenerationResult> got = gen.run(reqs, {n_parallel, 5});
        for (size_t i = 0; i < reqs.size(); ++i)
            expect_same(got[i], alone(reqs[i], nullptr),
                        std::to_string(n_parallel) + " at once, request " + std::to_string(i));
    }
    auto ctx = batch_context(2);
    BatchGenerator gen(*ctx, nullptr);
    const auto a = gen.run(reqs, {});
    reqs[0].params.sampler.seed = 7;
    const auto b = gen.run(reqs, {});
    EXPECT_NE(a[0].tokens, b[0].tokens) << "the seed is the request's";
    for (size_t i = 1; i < reqs.size(); ++i) EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
}

// Every way a request ends, side by side: n_predict 0, 1 and 5, an EOG token (the
// first greedy token of prompt 1), a stop string, ignore_eos, and a context that fills;
// with greedy steps pipelined (a step queued behind a token that ends its request is
// dropped from the cache) and one at a time.
TEST(BatchGeneration, EachRequestEndsAsItWouldAlone) {
    const Reference& r1 = fixture().prompts[1];
    const tokenizer::Tokenizer tok = test_tokenizer(r1.greedy[0]);
    const tokenizer::Tokenizer plain = test_tokenizer();
    const std::string stop_text = plain.decode({r1.greedy[2]});
    std::vector<BatchRequest> reqs;
    for (const int32_t n : {0, 1, 5}) reqs.push_back({fixture().prompts[2].ids, greedy(n)});
    reqs.push_back({r1.ids, greedy(6)});  // EOG first
    BatchRequest ignoring{r1.ids, greedy(6)};
    ignoring.params.ignore_eos = true;
    reqs.push_back(ignoring);
    BatchRequest stopping{fixture().prompts[3].ids, greedy(12)};
    stopping.params.stop = {stop_text};
    reqs.push_back(stopping);
    BatchRequest filling{fixture().prompts[0].ids, greedy(-1)};  // until the context is full
    filling.params.ignore_eos = true;
    reqs.push_back(filling);
    const int32_t n_ctx = 48;
    for (const bool pipeline : {true, false})
    for (const int32_t n_parallel : {1, 4, 7}) {
        auto ctx = batch_context(n_parallel, 0, n_ctx);
        BatchGenerator gen(*ctx, &tok);
        std::map<size_t, std::string> content;
        BatchCallbacks cb;
        cb.on_content = [&](size_t i, std::string_view s) { content[i] += s; };
        BatchOptions o{n_parallel, 4};
        o.pipeline = pipeline;
        const std::vector<GenerationResult> got = gen.run(reqs, o, cb);
        for (int32_t s = 0; s < n_parallel; ++s) EXPECT_EQ(ctx->seq_length(s), 0);
        EXPECT_EQ(gen.stats().pipelined_steps > 0, pipeline);
        for (size_t i = 0; i < reqs.size(); ++i) {
            const std::string where = std::to_string(n_parallel) + " at once, pipelined " + std::to_string(pipeline) +
                                      ", request " + std::to_string(i);
            expect_same(got[i], alone(reqs[i], &tok, n_ctx), where);
            EXPECT_EQ(content[i], got[i].content) << where;
        }
        EXPECT_TRUE(got[0].tokens.empty());
        EXPECT_EQ(got[3].finish_reason, FinishReason::eog);
        EXPECT_EQ(got[4].finish_reason, FinishReason::length);
        EXPECT_EQ(got[6].finish_reason, FinishReason::length);
        EXPECT_EQ(got[6].tokens.size(), static_cast<size_t>(n_ctx));
    }
}

// A KV cache of 48 tokens and requests that may need 20 each (their prompt and 12
// tokens, in blocks of 4): at most two run at once, the others wait for room, and
// every request still gets its tokens alone. A request that could never fit is
// refused before anything runs.
TEST(BatchGeneration, RequestsWaitForRoomInTheKvCache) {
    std::vector<BatchRequest> reqs;
    for (int i = 0; i < 5; ++i) reqs.push_back({fixture().prompts[1].ids, greedy(12)});
    reqs[1].prompt.push_back(11);
    reqs[3].prompt.push_back(12);
    auto ctx = batch_context(4, 48);
    BatchGenerator gen(*ctx, nullptr);
    const std::vector<GenerationResult> got = gen.run(reqs, {});
    EXPECT_EQ(gen.stats().max_running, 2);
    for (size_t i = 0; i < reqs.size(); ++i)
        expect_same(got[i], alone(reqs[i], nullptr), "request " + std::to_string(i));

    reqs.push_back({fixture().prompts[3].ids, greedy(12)});  // 52 tokens
    try {
        gen.run(reqs, {});
        ADD_FAILURE() << "a request larger than the cache ran";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("request 5 may need 52 tokens of KV cache"), std::string::npos)
            << e.what();
    }
}

// share_prefix: eight requests that share the fixture's 40-token prompt and differ
// after it prefill those 40 tokens once, in the context's last sequence, and start as
// its forks (copy on write inside the last, partial block: blocks of 4 at 40 tokens
// are whole, so one request also ends its prefix mid-block with a 38-token shared
// part below); each still gets its tokens alone. A KV cache of 80 tokens holds the
// prefix and two requests of 16 tokens of their own each, where without sharing no
// two requests fit at once (56 each).
TEST(BatchGeneration, SharedPrefixIsPrefilledOnce) {
    const std::vector<int32_t>& base = fixture().prompts[3].ids;  // 40 tokens
    std::vector<BatchRequest> reqs;
    for (int32_t i = 0; i < 8; ++i) {
        BatchRequest r{base, greedy(12)};
        for (int32_t j = 0; j <= i % 3; ++j) r.prompt.push_back(20 + i + 13 * j);
        if (i == 5) r.params.n_predict = 9;
        if (i == 6) {
            r.params.sampler.temperature = 1.0f;
            r.params.sampler.top_k = 30;
            r.params.sampler.seed = 9;
        }
        reqs.push_back(r);
    }
    int64_t suffixes = 0;
    for (const BatchRequest& r : reqs) suffixes += static_cast<int64_t>(r.prompt.size() - base.size());
    for (const int64_t kv : {int64_t{0}, int64_t{80}}) {
        for (const int32_t step_tokens : {5, 0}) {
            auto ctx = batch_context(4, kv);
            BatchGenerator gen(*ctx, nullptr);
            BatchOptions o;
            o.max_batch_tokens = step_tokens;
            o.share_prefix = true;
            const std::vector<GenerationResult> got = gen.run(reqs, o);
            const std::string where = "kv " + std::to_string(kv) + ", steps of " + std::to_string(step_tokens);
            for (size_t i = 0; i < reqs.size(); ++i)
                expect_same(got[i], alone(reqs[i], nullptr), where + ", request " + std::to_string(i));
            EXPECT_EQ(gen.stats().shared_prefix, 40) << where;
            EXPECT_EQ(gen.stats().prompt_tokens, 40 + suffixes) << where << ": the prefix once";
            EXPECT_EQ(gen.stats().max_running, kv == 80 ? 2 : 3) << where;
            for (int32_t s = 0; s < 4; ++s) EXPECT_EQ(ctx->seq_length(s), 0) << where;
        }
    }
    // A prefix that ends inside a block: request 0 is the base's first 39 tokens.
    reqs[0].prompt.resize(39);
    auto ctx = batch_context(3);
    BatchGenerator gen(*ctx, nullptr);
    BatchOptions o;
    o.share_prefix = true;
    const std::vector<GenerationResult> got = gen.run(reqs, o);
    EXPECT_EQ(gen.stats().shared_prefix, 38) << "each request keeps a token of its own";
    for (size_t i = 0; i < reqs.size(); ++i)
        expect_same(got[i], alone(reqs[i], nullptr), "request " + std::to_string(i));
    // Nothing to share: one request, or prompts that differ from the first token.
    EXPECT_EQ((gen.run({reqs[1]}, o), gen.stats().shared_prefix), 0);
    EXPECT_EQ((gen.run({reqs[1], {{7, 8, 9, 10, 11, 12}, greedy(2)}}, o), gen.stats().shared_prefix), 0);
    o.n_parallel = 3;
    EXPECT_THROW(gen.run(reqs, o), Error) << "no sequence left for the prefix";
}

// Bad requests and options are refused before anything runs, naming the request;
// a callback that throws ends the run with every sequence empty, and the generator
// runs again afterwards.
TEST(BatchGeneration, RejectsBadInputAndCleansUp) {
    auto ctx = batch_context(3);
    BatchGenerator gen(*ctx, nullptr);
    const BatchRequest ok{fixture().prompts[1].ids, greedy(4)};
    auto refused = [&](std::vector<BatchRequest> reqs, BatchOptions o, const std::string& text) {
        try {
            gen.run(reqs, o);
            ADD_FAILURE() << "not refused: " << text;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
        }
        for (int32_t s = 0; s < 3; ++s) EXPECT_EQ(ctx->seq_length(s), 0) << text;
    };
    refused({ok, {{}, greedy(4)}}, {}, "request 1: the prompt has no tokens");
    refused({ok, ok, {std::vector<int32_t>(65, 5), greedy(1)}}, {}, "request 2: the prompt has 65 tokens");
    refused({{{3, 512}, greedy(1)}}, {}, "request 0: prompt token 512 outside the vocabulary");
    BatchRequest stops = ok;
    stops.params.stop = {"x"};
    refused({stops}, {}, "request 0: stop strings need a tokenizer");
    BatchRequest logits = ok;
    logits.params.all_prompt_logits = true;
    refused({logits}, {}, "all_prompt_logits is not supported");
    BatchRequest bad_temp = ok;
    bad_temp.params.sampler.temperature = -1.0f;
    refused({ok, bad_temp}, {}, "temperature");
    refused({ok}, {4, 0}, "4 requests at once, but the context has 3 sequences");
    refused({ok}, {0, -1}, "max_batch_tokens -1");

    BatchCallbacks cb;
    int calls = 0;
    cb.on_token = [&](size_t, int32_t) {
        if (++calls == 5) throw std::runtime_error("client went away");
    };
    EXPECT_THROW(gen.run({ok, ok, ok, ok}, {}, cb), std::runtime_error);
    for (int32_t s = 0; s < 3; ++s) EXPECT_EQ(ctx->seq_length(s), 0);
    const auto again = gen.run({ok, ok}, {});
    EXPECT_EQ(again[1].tokens, alone(ok, nullptr).tokens);
    EXPECT_TRUE(gen.run({}, {}).empty());
}

// On the GPU: the fixture's prompts twice over, 8 at once in steps of 5 tokens (mixed
// prefill and decode batches of up to 13 tokens), greedy: every request's confident
// steps equal transformers' greedy tokens, as the one-sequence generator's do
// (Generation.GreedyMatchesTransformersReference). (Past them a near-tie may go either
// way: batches of other sizes take other products on the GPU.)
TEST(BatchGeneration, OnCudaRequestsMatchTransformersGreedy) {
    if (!runtime::cuda_available()) GTEST_SKIP() << "no CUDA device";
    std::vector<BatchRequest> reqs;
    for (int copy = 0; copy < 2; ++copy)
        for (const Reference& r : fixture().prompts) reqs.push_back({r.ids, greedy(12)});
    auto ctx = batch_context(8, 0, 64, BackendKind::cuda);
    BatchGenerator gen(*ctx, nullptr);
    const std::vector<GenerationResult> got = gen.run(reqs, {8, 5});
    EXPECT_EQ(gen.stats().max_running, 8);
    for (size_t i = 0; i < reqs.size(); ++i) {
        const Reference& r = fixture().prompts[i % fixture().prompts.size()];
        const size_t n = confident_steps(r);
        ASSERT_EQ(got[i].tokens.size(), 12u) << "request " << i;
        EXPECT_EQ(std::vector<int32_t>(got[i].tokens.begin(), got[i].tokens.begin() + static_cast<std::ptrdiff_t>(n)),
                  std::vector<int32_t>(r.greedy.begin(), r.greedy.begin() + static_cast<std::ptrdiff_t>(n)))
            << "request " << i;
    }
    for (int32_t s = 0; s < 8; ++s) EXPECT_EQ(ctx->seq_length(s), 0);
}

}  // namespace
}  // namespace hf2q::runtime

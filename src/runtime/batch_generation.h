// Many prompts, generated together: continuous batching over one Context.
//
//   BatchGenerator gen(ctx, &tokenizer);        // tokenizer may be null: ids only
//   std::vector<GenerationResult> r = gen.run(requests, options, callbacks);
//
// Up to BatchOptions::n_parallel requests run at once, each in a sequence of its own
// (ids 0 .. n_parallel-1). Every step is ONE Context::decode() that holds the next
// token of every running sequence and, within BatchOptions::max_batch_tokens, chunks
// of the prompts waiting to be prefilled (their last chunk asks for the first
// generated token): prefill, decode and mixed batches are the same call, so a long
// prompt never stalls the sequences already generating for more than one chunk. A
// request that finishes frees its sequence at once, and the next request (in order)
// starts in it, while the others continue.
//
// A request is admitted only when the KV cache can hold everything it may need
// (prompt + n_predict, or the whole context for n_predict < 0, in whole blocks)
// beside what the running requests may need: no step can then find the cache full,
// and nothing is ever evicted or recomputed. With the default cache (every sequence
// full) that never holds a request back; a smaller --kv-size trades parallelism for
// memory.
//
// Each request's tokens are those it gets alone (runtime::Generator) up to the
// rounding of batching (docs/sampling.md): its own sampler, seeded with
// params.sampler.seed (so a request's sampled text does not depend on which others
// run beside it), its own stop strings, EOG and n_predict. A step whose outputs all
// belong to greedy requests returns the device's argmax (DecodeOutputs::argmax); one
// whose requests are greedy or top-k samplers without penalties or bias
// (runtime::device_top_k) returns each output's top-k candidates, k the most any of
// them reads (DecodeOutputs::top_k); otherwise it returns logits and every request
// samples on the host. Greedy steps are pipelined (BatchOptions::pipeline).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "hf2q/engine.h"
#include "runtime/generation.h"

namespace hf2q::runtime {

struct BatchRequest {
    std::vector<int32_t> prompt;  // non-empty; BOS is the caller's
    GenerationParams params;      // all_prompt_logits is not supported here
};

struct BatchOptions {
    int32_t n_parallel = 0;        // requests at once; 0: the context's n_seq_max (the most allowed)
    int32_t max_batch_tokens = 0;  // tokens in one decode call (generating + prompt chunks); 0: n_ubatch
    // Prefill the prompt prefix every request shares (the longest common one, each
    // request keeping at least one token of its own) once, in sequence n_parallel, and
    // start every request as a fork of it (Context::seq_fork: its blocks shared, copy
    // on write), so a shared system prompt or few-shot preamble is computed and stored
    // once. Needs n_parallel < the context's n_seq_max (0: n_seq_max - 1); nothing is
    // shared where the common prefix is shorter than a KV block or there is one request.
    bool share_prefix = false;
    // Greedy steps pipelined: a step whose outputs are all argmax ids (one micro-batch)
    // is followed by the next one, which takes those ids on the device
    // (kPreviousArgmax), before the host reads them, as Generator's steps are; a
    // request that ends on such a token has its queued position dropped. false: each
    // step's tokens are read before the next step is queued.
    bool pipeline = true;
};

struct BatchCallbacks {
    std::function<void(size_t request, int32_t token)> on_token;  // every generated token
    // A request's content as it streams (parsed, or the raw text: params.parse_output).
    std::function<void(size_t request, std::string_view text)> on_content;
    // A request finished; its result is final (run() returns it too).
    std::function<void(size_t request, const GenerationResult& result)> on_done;
};

// What a run did, for throughput reports.
struct BatchStats {
    int64_t steps = 0;             // decode calls
    int64_t pipelined_steps = 0;   // of those, queued before the previous step's ids were read
    int64_t prompt_tokens = 0;     // prompt tokens decoded (a shared prefix once)
    int32_t shared_prefix = 0;     // tokens of the prefix the requests shared (share_prefix)
    int64_t generated_tokens = 0;  // tokens generated (all requests)
    int32_t max_running = 0;       // the most requests that ran at once
    double seconds = 0;            // the whole run
};

class BatchGenerator {
  public:
    // `tok` may be null: then nothing is detokenized, no token is EOG and stop strings
    // are refused. Both must outlive the BatchGenerator.
    BatchGenerator(Context& ctx, const tokenizer::Tokenizer* tok);

    // Runs every request to its end; results in request order. Throws hf2q::Error,
    // before anything runs, naming the first request that cannot run (see
    // Generator::generate, and a request whose KV need exceeds the cache); the
    // sequences it uses are empty afterwards, whether it returns or throws.
    std::vector<GenerationResult> run(const std::vector<BatchRequest>& requests, const BatchOptions& options,
                                      const BatchCallbacks& callbacks = {});

    const BatchStats& stats() const { return stats_; }

  private:
    class Run;
    Context& ctx_;
    const tokenizer::Tokenizer* tok_;
    BatchStats stats_;
};

}  // namespace hf2q::runtime

#include "runtime/batch_generation.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "core/error.h"
#include "runtime/sequence_output.h"

namespace hf2q::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

constexpr size_t kNone = static_cast<size_t>(-1);

// One sequence of the context and the request it runs.
struct Slot {
    size_t request = kNone;  // kNone: free
    std::unique_ptr<SequenceOutput> out;
    size_t prefilled = 0;    // prompt tokens decoded; the request generates once all are
    int32_t pos = 0;         // positions the sequence holds
    int32_t pending = 0;     // the generated token the next step decodes (generating only)
    int64_t reserved = 0;    // KV cache tokens set aside for it
    Clock::time_point admitted, first_token;
};

// The KV cache tokens a request may come to hold in blocks of its own: its prompt and
// n_predict tokens, or the whole context when n_predict < 0, less the whole blocks of
// a shared prefix it forks (the prefix's last, partial block is copied on write).
int64_t kv_need(const BatchRequest& r, const ContextOptions& o, int32_t shared) {
    const int64_t n_ctx = o.n_ctx;
    const int64_t want = r.params.n_predict < 0 ? n_ctx
                                                : std::min<int64_t>(n_ctx, static_cast<int64_t>(r.prompt.size()) +
                                                                               r.params.n_predict);
    const int64_t block = std::max<int32_t>(1, o.kv_block_size);
    return ((want + block - 1) / block - shared / block) * block;
}

// The prompt prefix every request shares, each keeping one token of its own (the one
// whose output is its first token); 0 where that is shorter than a KV block.
int32_t common_prompt_prefix(const std::vector<BatchRequest>& requests, int32_t block) {
    if (requests.size() < 2) return 0;
    size_t n = requests[0].prompt.size() - 1;
    for (const BatchRequest& r : requests) n = std::min(n, common_prefix(requests[0].prompt, r.prompt));
    for (const BatchRequest& r : requests) n = std::min(n, r.prompt.size() - 1);
    return n >= static_cast<size_t>(std::max(block, 1)) ? static_cast<int32_t>(n) : 0;
}

// What one step returns: argmax ids where every output's sampler is greedy, top-k
// candidates (the most any of them reads) where each is greedy or reads only those,
// else logits.
struct StepOutputs {
    DecodeOutputs mode = DecodeOutputs::argmax;
    int32_t k = 1;
    void add(const SequenceOutput& o) {
        const DecodeOutputs m = o.step_outputs();
        if (m == DecodeOutputs::logits || mode == DecodeOutputs::logits) {
            mode = DecodeOutputs::logits;
            return;
        }
        if (m == DecodeOutputs::top_k) {
            mode = DecodeOutputs::top_k;
            k = std::max(k, o.step_top_k());
        }
    }
};

// Empties the sequences the run used, however it ends.
struct ClearSequences {
    Context& ctx;
    int32_t n;
    ~ClearSequences() {
        for (int32_t s = 0; s < n; ++s) {
            try {
                ctx.seq_remove(s);
            } catch (...) {  // removing a sequence does not fail; a destructor must not throw
            }
        }
    }
};

}  // namespace

BatchGenerator::BatchGenerator(Context& ctx, const tokenizer::Tokenizer* tok) : ctx_(ctx), tok_(tok) {
    if (tok && tok->n_tokens() != ctx.n_vocab())
        fail("batch generator: tokenizer has ", tok->n_tokens(), " tokens but the model's vocabulary has ",
             ctx.n_vocab());
}

std::vector<GenerationResult> BatchGenerator::run(const std::vector<BatchRequest>& requests,
                                                  const BatchOptions& options, const BatchCallbacks& cb) {
    const ContextOptions& co = ctx_.options();
    if (options.share_prefix && co.n_seq_max < 2)
        fail("batch generator: share_prefix needs a sequence for the prefix beside the requests' (n_seq_max >= 2)");
    const int32_t seqs = options.share_prefix ? co.n_seq_max - 1 : co.n_seq_max;  // for the requests
    const int32_t n_parallel = options.n_parallel > 0 ? options.n_parallel : seqs;
    if (options.n_parallel < 0 || n_parallel > seqs)
        fail("batch generator: ", options.n_parallel, " requests at once, but the context has ", co.n_seq_max,
             " sequences", options.share_prefix ? " (share_prefix keeps one for the prefix)" : "");
    if (options.max_batch_tokens < 0) fail("batch generator: max_batch_tokens ", options.max_batch_tokens, " < 0");
    const int64_t max_tokens = options.max_batch_tokens > 0 ? options.max_batch_tokens : co.n_ubatch;
    for (size_t i = 0; i < requests.size(); ++i) {
        const std::string what = "request " + std::to_string(i);
        check_request(ctx_, tok_, requests[i].prompt, requests[i].params, static_cast<bool>(cb.on_content), what);
        if (requests[i].params.all_prompt_logits) fail(what, ": all_prompt_logits is not supported in batches");
    }
    const int32_t block = std::max<int32_t>(1, co.kv_block_size);
    const int32_t shared = options.share_prefix ? common_prompt_prefix(requests, block) : 0;
    const int32_t prefix_seq = n_parallel;  // holds the shared prefix
    const int64_t prefix_need = (shared + block - 1) / block * block;
    const int64_t capacity = ctx_.kv_capacity_tokens();
    std::vector<int64_t> need(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
        need[i] = kv_need(requests[i], co, shared);
        if (need[i] + prefix_need > capacity)
            fail("request ", i, " may need ", need[i] + prefix_need, " tokens of KV cache, but the cache holds ",
                 capacity, " (raise the KV cache size, or lower n_predict or the context size)");
    }

    stats_ = {};
    stats_.shared_prefix = shared;
    const auto t_run = Clock::now();
    const int32_t n_seqs = n_parallel + (shared > 0 ? 1 : 0);
    ClearSequences clear{ctx_, n_seqs};
    for (int32_t s = 0; s < n_seqs; ++s) ctx_.seq_remove(s);
    std::vector<GenerationResult> results(requests.size());
    std::vector<Slot> slots(static_cast<size_t>(n_parallel));
    std::deque<int32_t> prefilling;  // slots with prompt tokens left, in admission order
    size_t next = 0, done = 0;
    int32_t prefix_done = 0;  // shared prefix tokens decoded
    int64_t reserved = prefix_need;
    std::vector<BatchToken> batch;
    std::vector<int32_t> owner;  // the slot of each output

    auto admit = [&](int32_t s) {
        Slot& slot = slots[static_cast<size_t>(s)];
        const size_t i = next++;
        const BatchRequest& r = requests[i];
        GenerationCallbacks gc;
        if (cb.on_token) gc.on_token = [&cb, i](int32_t t) { cb.on_token(i, t); };
        if (cb.on_content) gc.on_content = [&cb, i](std::string_view t) { cb.on_content(i, t); };
        slot.out = std::make_unique<SequenceOutput>(tok_, r.params, std::move(gc), r.prompt, ctx_.has_top_k());
        slot.request = i;
        slot.prefilled = static_cast<size_t>(shared);
        slot.pos = shared;
        if (shared > 0) ctx_.seq_fork(prefix_seq, s);
        slot.reserved = need[i];
        slot.admitted = Clock::now();
        reserved += need[i];
        prefilling.push_back(s);
    };
    auto finish = [&](Slot& slot, int32_t s, FinishReason reason) {
        slot.out->finish(reason);
        GenerationResult& r = results[slot.request];
        r = std::move(slot.out->result());
        const auto now = Clock::now();
        const bool generated = !r.tokens.empty();
        r.prompt_seconds = seconds_between(slot.admitted, generated ? slot.first_token : now);
        r.gen_seconds = generated ? seconds_between(slot.first_token, now) : 0.0;
        stats_.generated_tokens += static_cast<int64_t>(r.tokens.size());
        ctx_.seq_remove(s);
        reserved -= slot.reserved;
        const size_t i = slot.request;
        slot.request = kNone;
        slot.out.reset();
        ++done;
        if (cb.on_done) cb.on_done(i, results[i]);
    };

    while (done < requests.size()) {
        // Admission in request order: a free sequence and room in the cache for
        // everything the request may need.
        // A shared prefix is prefilled first; requests start as forks of it.
        for (int32_t s = 0; s < n_parallel && next < requests.size() && prefix_done == shared; ++s)
            if (slots[static_cast<size_t>(s)].request == kNone && reserved + need[next] <= capacity) admit(s);
        int32_t running = 0;
        for (const Slot& slot : slots) running += slot.request != kNone;
        stats_.max_running = std::max(stats_.max_running, running);

        // The step: every generating sequence's next token, then prompt chunks.
        batch.clear();
        owner.clear();
        StepOutputs kind;
        for (int32_t s = 0; s < n_parallel; ++s) {
            Slot& slot = slots[static_cast<size_t>(s)];
            if (slot.request == kNone || slot.prefilled < requests[slot.request].prompt.size()) continue;
            batch.push_back({slot.pending, s, slot.pos, true});
            owner.push_back(s);
            kind.add(*slot.out);
        }
        if (prefix_done < shared) {  // nothing runs yet: the shared prefix, a chunk a step
            const int64_t n = std::min<int64_t>(shared - prefix_done, max_tokens);
            for (int32_t p = prefix_done; p < prefix_done + n; ++p)
                batch.push_back({requests[0].prompt[static_cast<size_t>(p)], prefix_seq, p, false});
        }
        int64_t budget = std::max<int64_t>(1, max_tokens - static_cast<int64_t>(batch.size()));
        for (int32_t s : prefilling) {
            if (budget == 0) break;
            Slot& slot = slots[static_cast<size_t>(s)];
            const BatchRequest& r = requests[slot.request];
            const size_t n = std::min<size_t>(r.prompt.size() - slot.prefilled, static_cast<size_t>(budget));
            for (size_t k = 0; k < n; ++k) {
                const size_t p = slot.prefilled + k;
                const bool last = p + 1 == r.prompt.size() && r.params.n_predict != 0;
                batch.push_back({r.prompt[p], s, static_cast<int32_t>(p), last});
                if (last) {
                    owner.push_back(s);
                    kind.add(*slot.out);
                }
            }
            budget -= static_cast<int64_t>(n);
        }
        if (batch.empty()) fail("batch generator: no request can run (internal error)");
        const DecodeOutputs outputs = kind.mode;
        ctx_.decode(batch, outputs, outputs == DecodeOutputs::top_k ? kind.k : 0);
        ++stats_.steps;

        // Positions: each token of the batch now holds its place in its sequence.
        for (const BatchToken& t : batch) {
            if (t.seq == prefix_seq && shared > 0) {
                ++prefix_done;
                ++stats_.prompt_tokens;
                continue;
            }
            Slot& slot = slots[static_cast<size_t>(t.seq)];
            slot.pos = t.pos + 1;
            if (slot.prefilled < requests[slot.request].prompt.size()) {
                ++slot.prefilled;
                ++stats_.prompt_tokens;
            } else {
                ++slot.out->result().n_decoded_generated;
            }
        }
        while (!prefilling.empty()) {  // finished prompts leave the queue's front in order
            const Slot& slot = slots[static_cast<size_t>(prefilling.front())];
            if (slot.prefilled < requests[slot.request].prompt.size()) break;
            prefilling.pop_front();
        }
        // The outputs: one token for each sequence that asked.
        for (size_t i = 0; i < owner.size(); ++i) {
            const int32_t s = owner[i];
            Slot& slot = slots[static_cast<size_t>(s)];
            const int32_t token = slot.out->pick(ctx_, static_cast<int32_t>(i), outputs);
            if (slot.out->result().tokens.empty()) slot.first_token = Clock::now();
            const std::optional<FinishReason> reason = slot.out->push(token, slot.pos >= co.n_ctx);
            if (reason) {
                finish(slot, s, *reason);
            } else {
                slot.pending = token;
            }
        }
        // Prompts done with n_predict 0 generate nothing.
        for (int32_t s = 0; s < n_parallel; ++s) {
            Slot& slot = slots[static_cast<size_t>(s)];
            if (slot.request != kNone && requests[slot.request].params.n_predict == 0 &&
                slot.prefilled == requests[slot.request].prompt.size())
                finish(slot, s, FinishReason::length);
        }
    }
    stats_.seconds = seconds_between(t_run, Clock::now());
    return results;
}

}  // namespace hf2q::runtime

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
    bool has_pending = false;  // `pending` is the generated token the next step decodes
    int32_t pending = 0;
    bool fed = false;        // the unread step's token went into the step after it on the device
    Clock::time_point admitted, first_token;
};

// An output of a step: the slot, the request it ran then, its sequence's length after
// the step.
struct Out {
    int32_t slot;
    size_t request;
    int32_t pos_after = 0;
};

// A decoded step whose outputs may not have been read yet. `feedable`: its outputs
// are argmax ids of one micro-batch, so the next step can take them on the device
// (kPreviousArgmax) before the host reads them.
struct Step {
    DecodeOutputs mode = DecodeOutputs::argmax;
    int32_t k = 0;
    std::vector<Out> outs;
    bool feedable = false;
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
    check_tokenizer(ctx, tok, "batch generator");
}

// One run of BatchGenerator::run over validated requests.
class BatchGenerator::Run {
  public:
    struct Plan {
        int32_t n_parallel;
        int64_t max_tokens;
        int32_t shared;          // prefix tokens prefilled once (0: none)
        std::vector<int64_t> need;  // KV tokens each request reserves
        int64_t prefix_need;
        int64_t capacity;
        bool pipeline;
    };

    Run(Context& ctx, const tokenizer::Tokenizer* tok, const std::vector<BatchRequest>& requests,
        const BatchCallbacks& cb, Plan plan, BatchStats& stats)
        : ctx_(ctx),
          tok_(tok),
          requests_(requests),
          cb_(cb),
          plan_(std::move(plan)),
          stats_(stats),
          n_ctx_(ctx.options().n_ctx),
          results_(requests.size()),
          slots_(static_cast<size_t>(plan_.n_parallel)),
          reserved_(plan_.prefix_need) {}

    // Steps until every request has finished. With pipelining, a step whose outputs are
    // argmax ids is followed by the next one (fed those ids on the device) before the
    // host reads them: the device does not wait while the host turns 64 tokens around.
    std::vector<GenerationResult> go() {
        std::optional<Step> unread;
        while (done_ < requests_.size()) {
            if (unread && !unread->feedable) {  // its tokens go into the next step from the host
                read(*unread, 0);
                unread.reset();
                continue;
            }
            admit_waiting();
            Step step = build(unread ? &*unread : nullptr);
            if (batch_.empty()) {  // nothing left to run but reading the unread step
                HF2Q_ASSERT(unread.has_value());
                read(*unread, 0);
                unread.reset();
                continue;
            }
            decode(step);
            if (unread) {
                ++stats_.pipelined_steps;
                read(*unread, 1);
            }
            unread = std::move(step);
            finish_prompt_only();
        }
        return std::move(results_);
    }

  private:
    // Admission in request order: a free sequence and room in the cache for everything
    // the request may need. A shared prefix is prefilled first; requests fork it.
    void admit_waiting() {
        for (int32_t s = 0; s < plan_.n_parallel && next_ < requests_.size() && prefix_done_ == plan_.shared; ++s)
            if (slot(s).request == kNone && reserved_ + plan_.need[next_] <= plan_.capacity) admit(s);
        int32_t running = 0;
        for (const Slot& sl : slots_) running += sl.request != kNone;
        stats_.max_running = std::max(stats_.max_running, running);
    }

    void admit(int32_t s) {
        Slot& sl = slot(s);
        const size_t i = next_++;
        const BatchRequest& r = requests_[i];
        GenerationCallbacks gc;
        if (cb_.on_token) gc.on_token = [this, i](int32_t t) { cb_.on_token(i, t); };
        if (cb_.on_content) gc.on_content = [this, i](std::string_view t) { cb_.on_content(i, t); };
        sl.out = std::make_unique<SequenceOutput>(tok_, r.params, std::move(gc), r.prompt, ctx_.has_top_k());
        sl.request = i;
        sl.prefilled = static_cast<size_t>(plan_.shared);
        sl.pos = plan_.shared;
        sl.has_pending = sl.fed = false;
        if (plan_.shared > 0) ctx_.seq_fork(prefix_seq(), s);
        sl.admitted = Clock::now();
        reserved_ += plan_.need[i];
        prefilling_.push_back(s);
    }

    // The next step's tokens into batch_: the outputs of `fed_from` (an unread
    // feedable step) that go on, taken on the device; the tokens read from earlier
    // steps; the shared prefix while it lasts; then prompt chunks, oldest first.
    Step build(const Step* fed_from) {
        batch_.clear();
        Step step;
        StepOutputs kind;
        auto output = [&](int32_t s, BatchToken t) {
            batch_.push_back(t);
            step.outs.push_back({s, slot(s).request});
            kind.add(*slot(s).out);
        };
        if (fed_from) {
            for (const Out& o : fed_from->outs) {
                Slot& sl = slot(o.slot);
                if (sl.request != o.request || !goes_on(sl)) continue;
                sl.fed = true;
                output(o.slot, {kPreviousArgmax, o.slot, sl.pos, true});
            }
        }
        for (int32_t s = 0; s < plan_.n_parallel; ++s) {
            Slot& sl = slot(s);
            if (sl.request == kNone || !sl.has_pending) continue;
            sl.has_pending = false;
            output(s, {sl.pending, s, sl.pos, true});
        }
        if (prefix_done_ < plan_.shared) {  // nothing runs yet: the shared prefix, a chunk a step
            const int64_t n = std::min<int64_t>(plan_.shared - prefix_done_, plan_.max_tokens);
            for (int32_t p = prefix_done_; p < prefix_done_ + n; ++p)
                batch_.push_back({requests_[0].prompt[static_cast<size_t>(p)], prefix_seq(), p, false});
        }
        int64_t budget = std::max<int64_t>(1, plan_.max_tokens - static_cast<int64_t>(batch_.size()));
        for (int32_t s : prefilling_) {
            if (budget == 0) break;
            Slot& sl = slot(s);
            const BatchRequest& r = requests_[sl.request];
            const size_t n = std::min<size_t>(r.prompt.size() - sl.prefilled, static_cast<size_t>(budget));
            for (size_t k = 0; k < n; ++k) {
                const size_t p = sl.prefilled + k;
                const BatchToken t{r.prompt[p], s, static_cast<int32_t>(p), p + 1 == r.prompt.size() &&
                                                                                r.params.n_predict != 0};
                if (t.logits) {
                    output(s, t);
                } else {
                    batch_.push_back(t);
                }
            }
            budget -= static_cast<int64_t>(n);
        }
        step.mode = kind.mode;
        step.k = kind.mode == DecodeOutputs::top_k ? kind.k : 0;
        return step;
    }

    // Whether a generating sequence's next token may be queued before its current one
    // is read: that one cannot end it by length (n_predict or a full context).
    bool goes_on(const Slot& sl) const {
        const int32_t n_predict = requests_[sl.request].params.n_predict;
        const auto produced = static_cast<int64_t>(sl.out->result().tokens.size());
        return sl.pos < n_ctx_ && (n_predict < 0 || produced + 1 < n_predict);
    }

    // Runs batch_ as `step`; every token now holds its place in its sequence.
    void decode(Step& step) {
        ctx_.decode(batch_, step.mode, step.k);
        ++stats_.steps;
        step.feedable = plan_.pipeline && step.mode == DecodeOutputs::argmax &&
                        static_cast<int64_t>(batch_.size()) <= ctx_.options().n_ubatch;
        for (const BatchToken& t : batch_) {
            if (t.seq == prefix_seq() && plan_.shared > 0) {
                ++prefix_done_;
                ++stats_.prompt_tokens;
                continue;
            }
            Slot& sl = slot(t.seq);
            sl.pos = t.pos + 1;
            if (sl.prefilled < requests_[sl.request].prompt.size()) {
                ++sl.prefilled;
                ++stats_.prompt_tokens;
            }
        }
        for (Out& o : step.outs) o.pos_after = slot(o.slot).pos;
        while (!prefilling_.empty()) {  // finished prompts leave the queue's front in order
            const Slot& sl = slot(prefilling_.front());
            if (sl.prefilled < requests_[sl.request].prompt.size()) break;
            prefilling_.pop_front();
        }
    }

    // The tokens of `step`'s outputs (decodes_back: 0 the last decode, 1 the one before),
    // for the requests still running; a token already fed to the next step is not
    // queued again.
    void read(const Step& step, int32_t decodes_back) {
        for (size_t i = 0; i < step.outs.size(); ++i) {
            const Out& o = step.outs[i];
            Slot& sl = slot(o.slot);
            if (sl.request != o.request) continue;  // finished while the step was queued
            const auto at = static_cast<int32_t>(i);
            const int32_t token = step.mode == DecodeOutputs::argmax ? ctx_.argmax(at, decodes_back)
                                                                     : sl.out->pick(ctx_, at, step.mode);
            if (sl.out->result().tokens.empty()) sl.first_token = Clock::now();
            const std::optional<FinishReason> reason = sl.out->push(token, o.pos_after >= n_ctx_);
            const bool fed = sl.fed;
            sl.fed = false;
            if (reason) {
                finish(o.slot, *reason);  // drops a fed token's position too
                continue;
            }
            ++sl.out->result().n_decoded_generated;  // fed, or decoded by the next step
            if (!fed) {
                sl.pending = token;
                sl.has_pending = true;
            }
        }
    }

    // Prompts done with n_predict 0 generate nothing.
    void finish_prompt_only() {
        for (int32_t s = 0; s < plan_.n_parallel; ++s) {
            const Slot& sl = slot(s);
            if (sl.request != kNone && requests_[sl.request].params.n_predict == 0 &&
                sl.prefilled == requests_[sl.request].prompt.size())
                finish(s, FinishReason::length);
        }
    }

    void finish(int32_t s, FinishReason reason) {
        Slot& sl = slot(s);
        sl.out->finish(reason);
        GenerationResult& r = results_[sl.request];
        r = std::move(sl.out->result());
        const auto now = Clock::now();
        const bool generated = !r.tokens.empty();
        r.prompt_seconds = seconds_between(sl.admitted, generated ? sl.first_token : now);
        r.gen_seconds = generated ? seconds_between(sl.first_token, now) : 0.0;
        stats_.generated_tokens += static_cast<int64_t>(r.tokens.size());
        ctx_.seq_remove(s);
        reserved_ -= plan_.need[sl.request];
        const size_t i = sl.request;
        sl.request = kNone;
        sl.out.reset();
        sl.has_pending = sl.fed = false;
        ++done_;
        if (cb_.on_done) cb_.on_done(i, results_[i]);
    }

    Slot& slot(int32_t s) { return slots_[static_cast<size_t>(s)]; }
    int32_t prefix_seq() const { return plan_.n_parallel; }

    Context& ctx_;
    const tokenizer::Tokenizer* tok_;
    const std::vector<BatchRequest>& requests_;
    const BatchCallbacks& cb_;
    Plan plan_;
    BatchStats& stats_;
    int32_t n_ctx_;
    std::vector<GenerationResult> results_;
    std::vector<Slot> slots_;
    std::deque<int32_t> prefilling_;  // slots with prompt tokens left, in admission order
    std::vector<BatchToken> batch_;
    size_t next_ = 0, done_ = 0;
    int32_t prefix_done_ = 0;  // shared prefix tokens decoded
    int64_t reserved_;
};

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
    for (size_t i = 0; i < requests.size(); ++i) {
        const std::string what = "request " + std::to_string(i);
        check_request(ctx_, tok_, requests[i].prompt, requests[i].params, static_cast<bool>(cb.on_content), what);
        if (requests[i].params.all_prompt_logits) fail(what, ": all_prompt_logits is not supported in batches");
    }
    const int32_t block = std::max<int32_t>(1, co.kv_block_size);
    Run::Plan plan;
    plan.n_parallel = n_parallel;
    plan.max_tokens = options.max_batch_tokens > 0 ? options.max_batch_tokens : co.n_ubatch;
    plan.shared = options.share_prefix ? common_prompt_prefix(requests, block) : 0;
    plan.prefix_need = (plan.shared + block - 1) / block * block;
    plan.capacity = ctx_.kv_capacity_tokens();
    plan.pipeline = options.pipeline;
    plan.need.resize(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
        plan.need[i] = kv_need(requests[i], co, plan.shared);
        if (plan.need[i] + plan.prefix_need > plan.capacity)
            fail("request ", i, " may need ", plan.need[i] + plan.prefix_need,
                 " tokens of KV cache, but the cache holds ", plan.capacity,
                 " (raise the KV cache size, or lower n_predict or the context size)");
    }

    stats_ = {};
    stats_.shared_prefix = plan.shared;
    const auto t_run = Clock::now();
    const int32_t n_seqs = n_parallel + (plan.shared > 0 ? 1 : 0);
    ClearSequences clear{ctx_, n_seqs};
    for (int32_t s = 0; s < n_seqs; ++s) ctx_.seq_remove(s);
    std::vector<GenerationResult> results = Run(ctx_, tok_, requests, cb, std::move(plan), stats_).go();
    stats_.seconds = seconds_between(t_run, Clock::now());
    return results;
}

}  // namespace hf2q::runtime

#include "runtime/generation.h"

#include <chrono>
#include <optional>

#include "core/error.h"
#include "runtime/sequence_output.h"

namespace hf2q::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Truncates the sequence back to `pos` on leaving the scope while armed: a pipelined
// step queued at `pos` that is not wanted. The newest position always truncates
// (kv::BlockTables).
struct DropQueuedStep {
    Context& ctx;
    int32_t seq, pos;
    bool armed;
    ~DropQueuedStep() {
        if (!armed) return;
        try {
            ctx.seq_truncate(seq, pos);
        } catch (...) {  // cannot happen (see above); a destructor must not throw
        }
    }
};

}  // namespace

double GenerationResult::prompt_tokens_per_second() const {
    const int32_t n = n_prompt - n_prompt_cached;
    return prompt_seconds > 0 ? n / prompt_seconds : 0.0;
}

double GenerationResult::gen_tokens_per_second() const {
    return gen_seconds > 0 ? static_cast<double>(tokens.size()) / gen_seconds : 0.0;
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
}

Generator::Generator(Context& ctx, const tokenizer::Tokenizer* tok, int32_t seq)
    : ctx_(ctx), tok_(tok), seq_(seq) {
    if (seq < 0 || seq >= ctx.options().n_seq_max)
        fail("generator: sequence ", seq, " out of range (context has ", ctx.options().n_seq_max,
             ")");
    check_tokenizer(ctx, tok, "generator");
    // The sequence may hold tokens we know nothing about: start clean.
    if (ctx_.seq_length(seq_) > 0) ctx_.seq_remove(seq_);
}

void Generator::reset() {
    ctx_.seq_remove(seq_);
    cached_.clear();
}

// Keeps the longest cached prefix of `prompt` (at least one prompt token is always
// decoded, for its logits); returns how many positions were kept.
int32_t Generator::reuse_prefix(const std::vector<int32_t>& prompt) {
    if (ctx_.seq_length(seq_) != static_cast<int32_t>(cached_.size())) {
        // Someone else changed the sequence: what it holds is unknown.
        ctx_.seq_remove(seq_);
        cached_.clear();
    }
    size_t keep = common_prefix(cached_, prompt);
    if (keep == prompt.size()) --keep;
    if (keep < cached_.size()) {
        try {
            ctx_.seq_truncate(seq_, static_cast<int32_t>(keep));
        } catch (const Error&) {
            // Sliding-window layers released positions the suffix needs.
            ctx_.seq_remove(seq_);
            keep = 0;
        }
        cached_.resize(keep);
    }
    return static_cast<int32_t>(keep);
}

int32_t Generator::prefill(const std::vector<int32_t>& prompt, const GenerationParams& params,
                           const GenerationCallbacks& cb, GenerationResult& result, DecodeOutputs outputs,
                           int32_t top_k) {
    const int32_t first = reuse_prefix(prompt);
    std::vector<BatchToken> batch;
    batch.reserve(prompt.size() - static_cast<size_t>(first));
    for (size_t i = static_cast<size_t>(first); i < prompt.size(); ++i)
        batch.push_back({prompt[i], seq_, static_cast<int32_t>(i),
                         params.all_prompt_logits || i + 1 == prompt.size()});
    const auto t0 = Clock::now();
    ctx_.decode(batch, outputs, outputs == DecodeOutputs::top_k ? top_k : 0);
    result.prompt_seconds = seconds_since(t0);
    cached_.insert(cached_.end(), prompt.begin() + first, prompt.end());
    result.n_prompt_cached = first;
    if (cb.on_prefill) cb.on_prefill(ctx_, first);
    return static_cast<int32_t>(prompt.size());
}

GenerationResult Generator::generate(const std::vector<int32_t>& prompt,
                                     const GenerationParams& params,
                                     const GenerationCallbacks& cb) {
    check_request(ctx_, tok_, prompt, params, cb.on_content || cb.on_reasoning || cb.on_tool_call, "generate");
    SequenceOutput out(tok_, params, cb, prompt, ctx_.has_top_k());
    GenerationResult& result = out.result();
    const int32_t n_ctx = ctx_.options().n_ctx;

    // A greedy sampler is the argmax of the logits: it runs on the device and only the
    // ids come back; a top-k sampler gets its candidates from the device. The prefill
    // returns logits where a callback may read them.
    const DecodeOutputs step_outputs = out.step_outputs();
    DecodeOutputs outputs =
        cb.on_prefill || params.all_prompt_logits ? DecodeOutputs::logits : step_outputs;

    const int32_t step_k = out.step_top_k();  // with DecodeOutputs::top_k
    int32_t pos = prefill(prompt, params, cb, result, outputs, step_k);
    const auto t0 = Clock::now();

    std::optional<FinishReason> reason;
    if (params.n_predict == 0) reason = FinishReason::length;
    while (!reason) {
        // Greedy: queue the next step, which embeds this step's id on the device
        // (kPreviousArgmax), before reading that id, so the device does not idle while
        // the host turns a token around. A queued step that turns out not to be wanted
        // (the token ends generation, or reading or handling it throws) is dropped
        // from the cache. Where it cannot be queued (the KV cache is full), the token
        // is read first, as one step at a time does.
        const int64_t produced = static_cast<int64_t>(result.tokens.size());
        bool ahead = params.pipeline && outputs == DecodeOutputs::argmax && pos < n_ctx &&
                     (params.n_predict < 0 || produced + 1 < params.n_predict);
        const int32_t last_output = ctx_.n_outputs() - 1;
        if (ahead) {
            try {
                ctx_.decode({{kPreviousArgmax, seq_, pos, true}}, step_outputs);
            } catch (const Error&) {
                // A refused batch (the KV cache is full) writes nothing and leaves the
                // last decode readable; anything else is the caller's to see.
                if (ctx_.seq_length(seq_) != pos || ctx_.n_outputs() != last_output + 1) throw;
                ahead = false;
            }
        }
        DropQueuedStep drop{ctx_, seq_, pos, ahead};
        const int32_t token = ahead ? ctx_.argmax(last_output, 1) : out.pick(ctx_, last_output, outputs);
        reason = out.push(token, pos >= n_ctx);
        if (reason) break;  // drop truncates a queued step
        drop.armed = false;
        if (!ahead) ctx_.decode({{token, seq_, pos, true}}, step_outputs, step_k);
        outputs = step_outputs;
        cached_.push_back(token);
        ++pos;
        ++result.n_decoded_generated;
    }
    out.finish(*reason);
    result.gen_seconds = seconds_since(t0);
    return std::move(result);
}

}  // namespace hf2q::runtime

#include "runtime/generation.h"

#include <chrono>
#include <limits>
#include <optional>

#include "core/error.h"

namespace hf2q::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Detokenizer -> StopMatcher -> (Gemma4OutputParser) -> callbacks, filling the result.
class TextStream {
  public:
    TextStream(const tokenizer::Tokenizer& tok, const GenerationParams& params,
               const GenerationCallbacks& cb, GenerationResult& result)
        : detok_(tok, params.show_special || params.parse_output),
          stop_(params.stop),
          parse_(params.parse_output),
          parser_(params.parser),
          cb_(cb),
          result_(result) {}

    void push(int32_t token) { emit(stop_.feed(detok_.push(token))); }

    // End of generation: whatever is held back is released (unless a stop string cut it).
    void finish() {
        if (!stop_.stopped()) {
            std::string rest = stop_.feed(detok_.flush());
            if (!stop_.stopped()) rest += stop_.flush();
            emit(rest);
        }
        if (parse_) dispatch(parser_.finish());
    }

    bool stopped() const { return stop_.stopped(); }
    bool end_marker_seen() const { return parse_ && parser_.result().end_marker_seen; }

  private:
    void emit(const std::string& text) {
        if (text.empty()) return;
        result_.text += text;
        if (!parse_) {
            result_.content += text;
            if (cb_.on_content) cb_.on_content(text);
            return;
        }
        dispatch(parser_.feed(text));
    }

    void dispatch(const std::vector<OutputEvent>& events) {
        for (const OutputEvent& ev : events) {
            switch (ev.kind) {
                case OutputEventKind::content:
                    result_.content += ev.text;
                    if (cb_.on_content) cb_.on_content(ev.text);
                    break;
                case OutputEventKind::reasoning:
                    result_.reasoning += ev.text;
                    if (cb_.on_reasoning) cb_.on_reasoning(ev.text);
                    break;
                case OutputEventKind::tool_call:
                    result_.tool_calls.push_back(ev.call);
                    if (cb_.on_tool_call) cb_.on_tool_call(ev.call);
                    break;
            }
        }
    }

    tokenizer::Detokenizer detok_;
    StopMatcher stop_;
    bool parse_;
    Gemma4OutputParser parser_;
    const GenerationCallbacks& cb_;
    GenerationResult& result_;
};

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

// The token after the last decode's final output: its argmax, computed on the device
// (greedy sampling), or the sampler's pick from its logits.
int32_t next_token(const Context& ctx, Sampler& sampler, DecodeOutputs outputs) {
    const int32_t i = ctx.n_outputs() - 1;
    switch (outputs) {
        case DecodeOutputs::argmax:
            return ctx.argmax(i);
        case DecodeOutputs::logits:
            return sampler.sample(ctx.logits(i), ctx.n_vocab());
    }
    fail("generate: unknown decode output kind");
}

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
    if (tok && tok->n_tokens() != ctx.n_vocab())
        fail("generator: tokenizer has ", tok->n_tokens(),
             " tokens but the model's vocabulary has ", ctx.n_vocab());
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
                           const GenerationCallbacks& cb, GenerationResult& result, DecodeOutputs outputs) {
    const int32_t first = reuse_prefix(prompt);
    std::vector<BatchToken> batch;
    batch.reserve(prompt.size() - static_cast<size_t>(first));
    for (size_t i = static_cast<size_t>(first); i < prompt.size(); ++i)
        batch.push_back({prompt[i], seq_, static_cast<int32_t>(i),
                         params.all_prompt_logits || i + 1 == prompt.size()});
    const auto t0 = Clock::now();
    ctx_.decode(batch, outputs);
    result.prompt_seconds = seconds_since(t0);
    cached_.insert(cached_.end(), prompt.begin() + first, prompt.end());
    result.n_prompt_cached = first;
    if (cb.on_prefill) cb.on_prefill(ctx_, first);
    return static_cast<int32_t>(prompt.size());
}

GenerationResult Generator::generate(const std::vector<int32_t>& prompt,
                                     const GenerationParams& params,
                                     const GenerationCallbacks& cb) {
    if (prompt.empty()) fail("generate: the prompt has no tokens");
    const int32_t n_ctx = ctx_.options().n_ctx;
    if (prompt.size() > static_cast<size_t>(n_ctx))
        fail("generate: the prompt has ", prompt.size(), " tokens but the context holds only ",
             n_ctx, " (raise the context size)");
    if (!tok_ && !params.stop.empty()) fail("generate: stop strings need a tokenizer");
    if (!tok_ && (cb.on_content || cb.on_reasoning || cb.on_tool_call))
        fail("generate: text callbacks need a tokenizer");
    const int64_t n_vocab = ctx_.n_vocab();
    for (int32_t t : prompt)
        if (t < 0 || t >= n_vocab)
            fail("generate: prompt token ", t, " outside the vocabulary [0, ", n_vocab, ")");

    SamplerParams sp = params.sampler;
    if (params.ignore_eos && tok_)
        for (int32_t id : tok_->eog_ids())
            sp.logit_bias[id] = -std::numeric_limits<float>::infinity();
    Sampler sampler(sp);  // validates
    for (int32_t t : prompt) sampler.accept(t);

    // A greedy sampler is the argmax of the logits: it runs on the device and only the
    // ids come back. The prefill returns logits where a callback may read them.
    const DecodeOutputs step_outputs = is_greedy(sp) ? DecodeOutputs::argmax : DecodeOutputs::logits;
    DecodeOutputs outputs =
        cb.on_prefill || params.all_prompt_logits ? DecodeOutputs::logits : step_outputs;

    GenerationResult result;
    result.n_prompt = static_cast<int32_t>(prompt.size());
    int32_t pos = prefill(prompt, params, cb, result, outputs);
    const auto t0 = Clock::now();
    std::optional<TextStream> text;
    if (tok_) text.emplace(*tok_, params, cb, result);

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
        const int32_t token = ahead ? ctx_.argmax(last_output, 1) : next_token(ctx_, sampler, outputs);
        sampler.accept(token);
        result.tokens.push_back(token);
        if (cb.on_token) cb.on_token(token);
        const bool eog = tok_ && !params.ignore_eos && tok_->is_eog(token);
        if (text && !eog) text->push(token);
        const bool ended = text && !params.ignore_eos && text->end_marker_seen();
        reason =
            finish_reason_after_token(eog || ended, text && text->stopped(),
                                      static_cast<int64_t>(result.tokens.size()), params.n_predict);
        if (!reason && pos >= n_ctx) reason = FinishReason::length;  // context full
        if (reason) break;  // drop truncates a queued step
        drop.armed = false;
        if (!ahead) ctx_.decode({{token, seq_, pos, true}}, step_outputs);
        outputs = step_outputs;
        cached_.push_back(token);
        ++pos;
        ++result.n_decoded_generated;
    }
    if (text) text->finish();
    result.finish_reason = *reason;
    result.gen_seconds = seconds_since(t0);
    return result;
}

}  // namespace hf2q::runtime

#include "runtime/sequence_output.h"

#include <algorithm>
#include <limits>
#include <span>

#include "core/error.h"

namespace hf2q::runtime {
namespace {

// The request's sampler parameters, with the EOG tokens banned under ignore_eos.
SamplerParams sampler_params(const GenerationParams& params, const tokenizer::Tokenizer* tok) {
    SamplerParams sp = params.sampler;
    if (params.ignore_eos && tok)
        for (int32_t id : tok->eog_ids()) sp.logit_bias[id] = -std::numeric_limits<float>::infinity();
    return sp;
}

}  // namespace

TextStream::TextStream(const tokenizer::Tokenizer& tok, const GenerationParams& params, const GenerationCallbacks& cb,
                       GenerationResult& result)
    : detok_(tok, params.show_special || params.parse_output),
      stop_(params.stop),
      parse_(params.parse_output),
      parser_(params.parser),
      cb_(cb),
      result_(result) {}

void TextStream::finish() {
    if (!stop_.stopped()) {
        std::string rest = stop_.feed(detok_.flush());
        if (!stop_.stopped()) rest += stop_.flush();
        emit(rest);
    }
    if (parse_) dispatch(parser_.finish());
}

void TextStream::emit(const std::string& text) {
    if (text.empty()) return;
    result_.text += text;
    if (!parse_) {
        result_.content += text;
        if (cb_.on_content) cb_.on_content(text);
        return;
    }
    dispatch(parser_.feed(text));
}

void TextStream::dispatch(const std::vector<OutputEvent>& events) {
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

void check_tokenizer(const Context& ctx, const tokenizer::Tokenizer* tok, const char* what) {
    if (tok && tok->n_tokens() != ctx.n_vocab())
        fail(what, ": tokenizer has ", tok->n_tokens(), " tokens but the model's vocabulary has ", ctx.n_vocab());
}

void check_request(const Context& ctx, const tokenizer::Tokenizer* tok, const std::vector<int32_t>& prompt,
                   const GenerationParams& params, bool text_callbacks, const std::string& what) {
    if (prompt.empty()) fail(what, ": the prompt has no tokens");
    const int32_t n_ctx = ctx.options().n_ctx;
    if (prompt.size() > static_cast<size_t>(n_ctx))
        fail(what, ": the prompt has ", prompt.size(), " tokens but the context holds only ", n_ctx,
             " (raise the context size)");
    if (!tok && !params.stop.empty()) fail(what, ": stop strings need a tokenizer");
    if (!tok && text_callbacks) fail(what, ": text callbacks need a tokenizer");
    const int64_t n_vocab = ctx.n_vocab();
    for (int32_t t : prompt)
        if (t < 0 || t >= n_vocab) fail(what, ": prompt token ", t, " outside the vocabulary [0, ", n_vocab, ")");
    try {
        validate(params.sampler);
    } catch (const Error& e) {
        fail(what, ": ", e.what());
    }
}

SequenceOutput::SequenceOutput(const tokenizer::Tokenizer* tok, const GenerationParams& params,
                               GenerationCallbacks cb, const std::vector<int32_t>& prompt, bool backend_top_k)
    : tok_(tok),
      params_(params),
      cb_(std::move(cb)),
      sampler_(sampler_params(params, tok)),  // validates
      step_outputs_(is_greedy(sampler_.params())                        ? DecodeOutputs::argmax
                    : backend_top_k && device_top_k(sampler_.params()) ? DecodeOutputs::top_k
                                                                       : DecodeOutputs::logits),
      step_top_k_(step_outputs_ == DecodeOutputs::top_k ? device_top_k(sampler_.params()) : 0) {
    for (int32_t t : prompt) sampler_.accept(t);
    result_.n_prompt = static_cast<int32_t>(prompt.size());
    if (tok_) text_.emplace(*tok_, params_, cb_, result_);
}

int32_t SequenceOutput::pick(const Context& ctx, int32_t i, DecodeOutputs outputs) {
    switch (outputs) {
        case DecodeOutputs::argmax:
            return ctx.argmax(i);
        case DecodeOutputs::logits:
            return sampler_.sample(ctx.logits(i), ctx.n_vocab());
        case DecodeOutputs::top_k: {
            const std::span<const TopLogit> top = ctx.top_k(i);
            if (step_outputs_ == DecodeOutputs::argmax) return top.front().id;  // the lowest id of the largest
            HF2Q_ASSERT(step_outputs_ == DecodeOutputs::top_k);
            return sampler_.sample_top(top.first(std::min(top.size(), static_cast<size_t>(step_top_k_))));
        }
    }
    fail("generate: unknown decode output kind");
}

std::optional<FinishReason> SequenceOutput::push(int32_t token, bool context_full) {
    sampler_.accept(token);
    result_.tokens.push_back(token);
    if (cb_.on_token) cb_.on_token(token);
    const bool eog = tok_ && !params_.ignore_eos && tok_->is_eog(token);
    if (text_ && !eog) text_->push(token);
    const bool ended = text_ && !params_.ignore_eos && text_->end_marker_seen();
    std::optional<FinishReason> reason =
        finish_reason_after_token(eog || ended, text_ && text_->stopped(),
                                  static_cast<int64_t>(result_.tokens.size()), params_.n_predict);
    if (!reason && context_full) reason = FinishReason::length;
    return reason;
}

void SequenceOutput::finish(FinishReason reason) {
    if (text_) text_->finish();
    result_.finish_reason = reason;
}

}  // namespace hf2q::runtime

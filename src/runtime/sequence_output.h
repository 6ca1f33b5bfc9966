// What one generating sequence does with each token it produces, shared by the
// one-sequence Generator and the many-sequence BatchGenerator (internal to runtime):
//
//   sample (or the device's argmax) -> accept into the penalty history -> EOG check
//   -> detokenize -> StopMatcher -> Gemma4OutputParser -> callbacks -> finish rule
//
// so a sequence decoded beside 63 others streams, stops and finishes exactly as it
// does alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hf2q/engine.h"
#include "runtime/generation.h"

namespace hf2q::runtime {

// Detokenizer -> StopMatcher -> (Gemma4OutputParser) -> callbacks, filling a result.
class TextStream {
  public:
    TextStream(const tokenizer::Tokenizer& tok, const GenerationParams& params, const GenerationCallbacks& cb,
               GenerationResult& result);

    void push(int32_t token) { emit(stop_.feed(detok_.push(token))); }
    // End of generation: whatever is held back is released (unless a stop string cut it).
    void finish();

    bool stopped() const { return stop_.stopped(); }
    bool end_marker_seen() const { return parse_ && parser_.result().end_marker_seen; }

  private:
    void emit(const std::string& text);
    void dispatch(const std::vector<OutputEvent>& events);

    tokenizer::Detokenizer detok_;
    StopMatcher stop_;
    bool parse_;
    Gemma4OutputParser parser_;
    const GenerationCallbacks& cb_;
    GenerationResult& result_;
};

// Throws hf2q::Error (prefixed with `what`) unless `tok` (may be null) has ctx's
// vocabulary size.
void check_tokenizer(const Context& ctx, const tokenizer::Tokenizer* tok, const char* what);

// Throws hf2q::Error (prefixed with `what`) when a request cannot run on ctx: an
// empty prompt, one longer than the context, ids outside the vocabulary, stop
// strings or text callbacks without a tokenizer, bad sampler parameters.
void check_request(const Context& ctx, const tokenizer::Tokenizer* tok, const std::vector<int32_t>& prompt,
                   const GenerationParams& params, bool text_callbacks, const std::string& what);

// One sequence's sampler, text chain and result. Owns copies of its parameters and
// callbacks, so it can outlive the caller's (the BatchGenerator keeps one per slot).
class SequenceOutput {
  public:
    // The sampler starts with the prompt in its history; `tok` may be null (ids only).
    // `backend_top_k`: the context returns top-k candidates (Context::has_top_k).
    SequenceOutput(const tokenizer::Tokenizer* tok, const GenerationParams& params, GenerationCallbacks cb,
                   const std::vector<int32_t>& prompt, bool backend_top_k);
    SequenceOutput(const SequenceOutput&) = delete;
    SequenceOutput& operator=(const SequenceOutput&) = delete;

    // What a decode step returns for this sequence: the device's argmax where the
    // sampler is greedy (runtime::is_greedy), its top-k candidates where those are all
    // it reads (runtime::device_top_k: step_top_k() of them), else the logits.
    DecodeOutputs step_outputs() const { return step_outputs_; }
    int32_t step_top_k() const { return step_top_k_; }
    // The next token from a decode's output i of this sequence. `outputs` is what that
    // decode returned: step_outputs(), or logits (any sampler), or top_k with at least
    // step_top_k() candidates (a greedy sampler takes the first).
    int32_t pick(const Context& ctx, int32_t i, DecodeOutputs outputs);

    // Records a generated token; returns how generation ends if it does: at an EOG
    // token or end-of-turn markup, a stop string, n_predict tokens, or when
    // `context_full` (the token would not fit the sequence).
    std::optional<FinishReason> push(int32_t token, bool context_full);
    // Releases held-back text and sets the finish reason; call once.
    void finish(FinishReason reason);

    GenerationResult& result() { return result_; }
    const GenerationParams& params() const { return params_; }
    const GenerationCallbacks& callbacks() const { return cb_; }

  private:
    const tokenizer::Tokenizer* tok_;
    GenerationParams params_;
    GenerationCallbacks cb_;
    GenerationResult result_;
    Sampler sampler_;
    DecodeOutputs step_outputs_;
    int32_t step_top_k_ = 0;
    std::optional<TextStream> text_;
};

}  // namespace hf2q::runtime

// Reusable generation loop: one sequence of a Context, sampled token by token.
//
//   Generator gen(ctx, &tokenizer);           // tokenizer may be null: token ids only
//   GenerationResult r = gen.generate(prompt_ids, params, callbacks);
//
// Prefill is ONE Context::decode() of every prompt token not already cached (logits
// only for the last one); then one decode per generated token. The Generator remembers
// which tokens the sequence holds in the KV cache, so a later generate() whose prompt
// starts with them (a chat's next turn) decodes only the new tokens: the sequence is
// truncated to the longest common prefix, or cleared and prefilled again when the
// cache cannot truncate there (sliding-window blocks already released).
//
// A greedy sampler (runtime::is_greedy) decodes with DecodeOutputs::argmax: the argmax
// is computed on the device and only the token id comes back (the prefill too, unless
// on_prefill or all_prompt_logits ask for its logits). A top-k sampler without
// penalties or bias (runtime::device_top_k) decodes with DecodeOutputs::top_k: only
// the k candidates come back, and the host draws from them the token it would draw
// from the logits. Greedy steps are pipelined
// (GenerationParams::pipeline): each is queued, fed the previous step's id on the
// device, before the host reads that id.
//
// Per token (docs/sampling.md): sample -> accept -> EOG check -> detokenize (control
// tokens as their text) -> StopMatcher -> Gemma4OutputParser -> callbacks. Streamed
// text never ends inside a UTF-8 character or a possible stop string.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "hf2q/engine.h"
#include "runtime/output_parser.h"
#include "runtime/sampling.h"
#include "runtime/stop.h"
#include "tokenizer/tokenizer.h"

namespace hf2q::runtime {

struct GenerationParams {
    int32_t n_predict = -1;         // tokens to generate; < 0: until EOG, stop or context full
    SamplerParams sampler;          // temperature 0 = greedy
    std::vector<std::string> stop;  // stop strings, matched on the raw text
    bool ignore_eos = false;        // bans the EOG tokens (logit bias -inf) and never stops on them
    // true: Gemma 4 markup is parsed into reasoning / content / tool calls and the
    // model's end-of-turn markup ends generation. false: the raw text is all content.
    bool parse_output = true;
    Gemma4ParserOptions
        parser;  // e.g. start_in_reasoning when the prompt opened the thought channel
    // Detokenize CONTROL tokens as their text. Needed (and forced) with parse_output.
    bool show_special = false;
    // Return logits for every prompt token that is decoded (on_prefill sees them).
    bool all_prompt_logits = false;
    // Greedy decoding queues step k+1 (its token taken from step k's argmax on the
    // device, hf2q::kPreviousArgmax) before reading step k's token; a step that was not
    // needed (step k ended generation) is truncated away. false: one step at a time.
    bool pipeline = true;
};

struct GenerationCallbacks {
    std::function<void(int32_t token)> on_token;              // every generated token
    std::function<void(std::string_view text)> on_content;    // content delta
    std::function<void(std::string_view text)> on_reasoning;  // reasoning delta
    std::function<void(const ToolCall& call)> on_tool_call;   // a complete tool call
    // After the prefill decode: `first` is the position of the first decoded prompt
    // token, the context's outputs are the decoded prompt rows (all or just the last).
    std::function<void(const Context& ctx, int32_t first)> on_prefill;
};

struct GenerationResult {
    std::vector<int32_t> tokens;  // generated ids, the final EOG token included
    std::string text;             // raw generated text up to a stop string (markup included)
    std::string content;          // parsed (raw text when parse_output is false)
    std::string reasoning;
    std::vector<ToolCall> tool_calls;
    FinishReason finish_reason = FinishReason::length;
    int32_t n_prompt = 0;             // prompt tokens
    int32_t n_prompt_cached = 0;      // of those, reused from the KV cache (not decoded)
    double prompt_seconds = 0;        // prefill decode
    double gen_seconds = 0;           // sampling + decodes of the generated tokens
    int32_t n_decoded_generated = 0;  // generated tokens fed back through decode

    double prompt_tokens_per_second() const;  // decoded prompt tokens / prompt_seconds
    double gen_tokens_per_second() const;     // tokens.size() / gen_seconds
};

class Generator {
  public:
    // `tok` may be null: then nothing is detokenized, no token is EOG and stop strings
    // are refused. Both must outlive the Generator. Uses sequence `seq` of `ctx` only.
    Generator(Context& ctx, const tokenizer::Tokenizer* tok, int32_t seq = 0);

    // Generates a continuation of `prompt` (non-empty; BOS is the caller's). Throws
    // hf2q::Error on bad parameters or when the prompt does not fit the context.
    GenerationResult generate(const std::vector<int32_t>& prompt, const GenerationParams& params,
                              const GenerationCallbacks& callbacks = {});

    // Tokens whose K/V the sequence holds, in order.
    const std::vector<int32_t>& cached() const { return cached_; }
    // Drops the sequence from the cache.
    void reset();

  private:
    int32_t prefill(const std::vector<int32_t>& prompt, const GenerationParams& params,
                    const GenerationCallbacks& callbacks, GenerationResult& result,
                    DecodeOutputs outputs, int32_t top_k);
    int32_t reuse_prefix(const std::vector<int32_t>& prompt);

    Context& ctx_;
    const tokenizer::Tokenizer* tok_;
    int32_t seq_;
    std::vector<int32_t> cached_;
};

// Length of the longest common prefix of two token lists.
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

}  // namespace hf2q::runtime

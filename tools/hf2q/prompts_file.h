// The requests file of `hf2q generate --prompts FILE`: one request a line.
//
//   plain text                        the line is the prompt text, as it stands
//   "text with \n escapes"            a JSON string: the prompt text
//   {"prompt": "text", "n_predict": 64}
//   {"token_ids": [2, 818, 5279]}     the prompt as token ids, used as given
//   {"messages": [{"role": "user", "content": "Hi"}], "enable_thinking": false}
//                                     a conversation, rendered with the model's chat
//                                     template (optionally with "tools": [...])
//
// A line is JSON when its first non-blank character is '"' or '{'; blank lines are
// skipped. An object holds exactly one of "prompt", "token_ids" and "messages", and
// optionally "n_predict" (that request's tokens to generate, instead of -n) and that
// request's sampling settings instead of the command line's: "temperature", "top_k",
// "top_p", "min_p", "seed" (the request's own, not --seed + its index) and "stop" (a
// string or an array of them); with "messages" also "enable_thinking" (a boolean) and
// "tools" (an array); any other key is an error. Errors name the line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hf2q::cli {

struct PromptLine {
    size_t line = 0;                  // 1-based
    std::optional<std::string> text;  // text to tokenize, or
    std::vector<int32_t> token_ids;   // the prompt as ids, or
    std::optional<nlohmann::ordered_json> messages;  // a conversation (an array of objects)
    std::optional<nlohmann::ordered_json> tools;     // with messages: the tools declared
    bool enable_thinking = false;                    // with messages
    std::optional<int32_t> n_predict;
    // The request's own sampling settings (unset: the command line's).
    std::optional<float> temperature, top_p, min_p;
    std::optional<int32_t> top_k;
    std::optional<uint64_t> seed;
    std::optional<std::vector<std::string>> stop;
};

// Throws hf2q::Error ("prompts file line N: ...") on a malformed line, and when the
// file holds no request.
std::vector<PromptLine> parse_prompts(std::string_view content);

}  // namespace hf2q::cli

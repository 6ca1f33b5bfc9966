// A conversation rendered with the model's chat template, as `hf2q chat` and
// `hf2q generate --prompts` (lines with "messages") both need it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "tokenizer/jinja/template.h"
#include "tokenizer/tokenizer.h"

namespace hf2q::cli {

// What a Gemma 4 template appends to open the model's reasoning (enable_thinking): a
// reply that starts inside it is parsed from the reasoning channel on.
inline constexpr std::string_view kOpenThought = "<|channel>thought\n";

// The template's text for `messages` with the generation prompt added, the given
// thinking switch, `tools` where not null, and the tokenizer's BOS / EOS texts.
inline std::string render_chat(const jinja::Template& tmpl, const tokenizer::Tokenizer& tok,
                               const nlohmann::ordered_json& messages, bool enable_thinking,
                               const nlohmann::ordered_json* tools = nullptr) {
    nlohmann::ordered_json c;
    c["messages"] = messages;
    if (tools) c["tools"] = *tools;
    c["add_generation_prompt"] = true;
    c["enable_thinking"] = enable_thinking;
    c["bos_token"] = tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : "";
    c["eos_token"] = tok.eos_id() >= 0 ? tok.token_text(tok.eos_id()) : "";
    return tmpl.render(c);
}

}  // namespace hf2q::cli

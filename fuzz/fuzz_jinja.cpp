// Fuzzes the Jinja engine: arbitrary bytes are parsed as a template and rendered with a
// small fixed chat context under tight limits. Any hf2q::Error is an expected outcome;
// crashes, sanitizer reports, leaks and timeouts are bugs.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "tokenizer/jinja/template.h"

namespace {

const nlohmann::ordered_json& fuzz_context() {
    static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
        "bos_token": "<bos>", "eos_token": "<eos>", "add_generation_prompt": true,
        "enable_thinking": false,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi \u00fc\u4f60"}, {"type": "image"}]},
            {"role": "assistant", "content": "", "reasoning_content": "think",
             "tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "add", "arguments": {"a": 1, "b": 2.5}}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "3.5"}
        ],
        "tools": [{"type": "function", "function": {"name": "add", "description": "Add",
                   "parameters": {"type": "object", "required": ["a"],
                                  "properties": {"a": {"type": "number"}, "b": {"type": "number", "nullable": true}}}}}]
    })");
    return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 64 * 1024) return 0;
    hf2q::jinja::RenderLimits limits;
    limits.max_iterations = 20000;
    limits.max_output_bytes = 1 << 20;
    limits.max_call_depth = 32;
    limits.max_seconds = 0.5;
    try {
        auto t = hf2q::jinja::Template::parse(
            std::string(reinterpret_cast<const char*>(data), size), "fuzz");
        (void)t.render(fuzz_context(), limits);
    } catch (const hf2q::Error&) {
    }
    return 0;
}

// Fuzz target: feeds arbitrary bytes to the Gemma 4 output parser as a model's output
// and checks what must hold for any input (src/runtime/output_parser.h):
//   - neither feed() nor finish() throws or crashes;
//   - the events add up to result(): the reasoning and content text, the tool calls;
//   - every tool call's arguments are a JSON object;
//   - the result does not depend on how the text is cut into pieces: the input's own
//     cuts, the whole text at once and byte by byte give the same result.
// Input: byte 0 holds the options (bit 0: start_in_reasoning) and the piece length of
// the first run (bits 1-4, plus one); the rest is the text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/output_parser.h"

namespace {

using namespace hf2q::runtime;

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "fuzz_output_parser: invariant failed: %s\n", what);
    std::abort();
}

// Parses text cut into pieces of `step` bytes (0: whole), checking the events against
// the result.
ParsedOutput run(std::string_view text, size_t step, Gemma4ParserOptions opt) {
    Gemma4OutputParser p(opt);
    std::string reasoning, content;
    std::vector<ToolCall> calls;
    auto take = [&](const std::vector<OutputEvent>& events) {
        for (const OutputEvent& e : events) {
            if (e.kind == OutputEventKind::reasoning) reasoning += e.text;
            if (e.kind == OutputEventKind::content) content += e.text;
            if (e.kind == OutputEventKind::tool_call) calls.push_back(e.call);
        }
    };
    try {
        if (step == 0) {
            take(p.feed(text));
        } else {
            for (size_t i = 0; i < text.size(); i += step) take(p.feed(text.substr(i, step)));
        }
        take(p.finish());
    } catch (...) {
        fail("the parser threw");
    }
    const ParsedOutput& r = p.result();
    if (reasoning != r.reasoning || content != r.content || calls != r.tool_calls) fail("events differ from result");
    for (const ToolCall& c : r.tool_calls)
        if (!c.arguments.is_object()) fail("arguments not an object");
    return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    Gemma4ParserOptions opt;
    opt.start_in_reasoning = (data[0] & 1) != 0;
    const size_t step = static_cast<size_t>((data[0] >> 1) & 15) + 1;
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    const ParsedOutput whole = run(text, 0, opt);
    if (!(run(text, step, opt) == whole)) fail("cut into pieces: another result");
    if (step != 1 && !(run(text, 1, opt) == whole)) fail("byte by byte: another result");
    return 0;
}

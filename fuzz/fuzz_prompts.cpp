// Fuzz target: the requests file of `hf2q generate --prompts` (tools/hf2q/prompts_file.h)
// on arbitrary bytes. Anything wrong must end in hf2q::Error; a parsed file gives
// requests on increasing lines, each with text or token ids (not both), ids >= 0 and
// n_predict >= -1, and exactly one of text, ids and messages.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "prompts_file.h"  // tools/hf2q

namespace {

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "fuzz_prompts: invariant failed: %s\n", what);
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 1 << 16) return 0;
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    std::vector<hf2q::cli::PromptLine> lines;
    try {
        lines = hf2q::cli::parse_prompts(input);
    } catch (const hf2q::Error&) {
        return 0;
    } catch (...) {
        fail("an exception other than hf2q::Error");
    }
    if (lines.empty()) fail("no request and no error");
    size_t prev = 0;
    for (const hf2q::cli::PromptLine& l : lines) {
        if (l.line <= prev) fail("lines out of order");
        prev = l.line;
        if (l.text.has_value() + !l.token_ids.empty() + l.messages.has_value() != 1)
            fail("not exactly one of text, ids and messages");
        if (l.messages && (!l.messages->is_array() || l.messages->empty())) fail("messages not a non-empty array");
        if (!l.messages && (l.tools || l.enable_thinking)) fail("tools or thinking without messages");
        for (int32_t id : l.token_ids)
            if (id < 0) fail("a negative token id");
        if (l.n_predict && *l.n_predict < -1) fail("n_predict below -1");
    }
    return 0;
}

// Fuzz target: tokenizes arbitrary bytes with a small built-in gemma4 vocabulary (all 256
// byte tokens, a few merges, CONTROL / USER_DEFINED / end-of-generation tokens) and
// checks the invariants that must hold for any input:
//   - every id is in range;
//   - streaming detokenization equals whole-sequence decoding;
//   - for valid UTF-8 input without U+2581, decode(encode(x), special = true) == x.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace {

using namespace hf2q::tokenizer;

VocabData fuzz_vocab() {
    VocabData v;
    v.model = "gemma4";
    auto add = [&](const std::string& t, TokenType type) {
        v.tokens.push_back(t);
        v.token_types.push_back(static_cast<int32_t>(type));
    };
    add("<pad>", TokenType::CONTROL);
    add("<eos>", TokenType::CONTROL);
    add("<bos>", TokenType::CONTROL);
    add("<|turn>", TokenType::CONTROL);
    add("<turn|>", TokenType::CONTROL);
    add("<|tool_response>", TokenType::USER_DEFINED);
    add("<|\"|>", TokenType::USER_DEFINED);
    for (int b = 0; b < 256; ++b) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        add(buf, TokenType::BYTE);
    }
    for (const char* t : {"a", "b", "ab", "\xE2\x96\x81",
                          "\xE2\x96\x81"
                          "a",
                          "\n", "\n\n", "<", "|", ">", "<|", "\xC3\xA4", "\xEF\xBF\xBD"}) {
        add(t, TokenType::NORMAL);
    }
    v.merges = {"a b", "\xE2\x96\x81 a", "< |", "\n \n"};
    v.bos_id = 2;
    v.eos_id = 1;
    v.add_bos = true;
    return v;
}

// Strict UTF-8 (no overlong forms, surrogates or code points above U+10FFFF): only
// such input is guaranteed to survive encode/decode unchanged.
bool valid_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        const uint8_t c = static_cast<uint8_t>(s[i]);
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        uint32_t cp = n == 1 ? c : c & (0x7F >> n);
        for (size_t k = 1; k < n; ++k) {
            const uint8_t d = static_cast<uint8_t>(s[i + k]);
            if ((d & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (d & 0x3F);
        }
        static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += n;
    }
    return true;
}

void check(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "fuzz_tokenizer: invariant failed: %s\n", what);
        std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const Tokenizer tok(fuzz_vocab());
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    for (bool parse_special : {false, true}) {
        const auto ids = tok.encode(text, false, parse_special);
        for (TokenId id : ids) check(id >= 0 && id < tok.n_tokens(), "id in range");
        for (bool special : {false, true}) {
            Detokenizer d(tok, special);
            std::string streamed;
            for (TokenId id : ids) streamed += d.push(id);
            streamed += d.flush();
            check(streamed == tok.decode(ids, special), "streaming == decode");
        }
        // U+2581 in the input decodes as a space, so it cannot round-trip.
        if (valid_utf8(text) && text.find("\xE2\x96\x81") == std::string_view::npos)
            check(tok.decode(ids, true) == text, "round trip");
    }
    return 0;
}

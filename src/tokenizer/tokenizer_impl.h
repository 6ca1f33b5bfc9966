// Internal state of Tokenizer, shared by tokenizer.cpp (construction, decoding) and
// encode.cpp (encoding). Not part of the public interface.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tables.h"
#include "tokenizer/tokenizer.h"

namespace hf2q::tokenizer {

// Token attribute bits (llama.cpp's llama_token_attr). A token can carry several, e.g.
// an end-of-generation token typed USER_DEFINED also gets CONTROL.
enum : uint32_t {
    kAttrUnknown = 1u << 0,
    kAttrUnused = 1u << 1,
    kAttrNormal = 1u << 2,
    kAttrControl = 1u << 3,
    kAttrUserDefined = 1u << 4,
    kAttrByte = 1u << 5,
};

struct Tokenizer::Impl {
    VocabData vocab;
    std::vector<uint32_t> attr;       // id -> kAttr* bits
    std::vector<std::string> pieces;  // id -> decoded bytes (special tokens included)
    std::vector<uint8_t> eog;         // id -> 1 if end-of-generation
    // CONTROL/USER_DEFINED/UNKNOWN ids, longest text first (ties: lower id first).
    std::vector<TokenId> special_tokens;

    // Symbols are the strings BPE works on: ids [0, n_tokens) are the tokens; ids above
    // are merge parts/results that are not tokens (kept so merging follows the merge
    // list exactly as llama.cpp's text-keyed table does).
    std::deque<std::string> extra_symbols;
    SymbolTable symbols;  // views into vocab.tokens and extra_symbols
    MergeTable merges;
    int32_t ascii_symbol[128];  // single ASCII byte -> symbol id or -1
    TokenId byte_token[256];    // byte -> <0xHH> token or kNoToken

    int32_t n_tokens() const { return static_cast<int32_t>(vocab.tokens.size()); }
    int32_t find_symbol(std::string_view s) const { return symbols.find(s); }
    int32_t intern_symbol(std::string_view s);
};

// Encoding entry point (encode.cpp).
void encode_impl(const Tokenizer::Impl& im, std::string_view text, bool parse_special,
                 std::vector<TokenId>& out);

}  // namespace hf2q::tokenizer

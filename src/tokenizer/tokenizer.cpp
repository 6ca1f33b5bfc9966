// Tokenizer construction (vocabulary validation, attribute and end-of-generation rules,
// lookup tables), token pieces and whole-sequence decoding. Encoding is in encode.cpp.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "tokenizer/tokenizer_impl.h"

namespace hf2q::tokenizer {
namespace {

constexpr std::string_view kSpaceEscape = "\xE2\x96\x81";  // U+2581

uint32_t attr_from_type(int32_t type) {
    switch (static_cast<TokenType>(type)) {
        case TokenType::UNDEFINED:
            return 0;
        case TokenType::NORMAL:
            return kAttrNormal;
        case TokenType::UNKNOWN:
            return kAttrUnknown;
        case TokenType::CONTROL:
            return kAttrControl;
        case TokenType::USER_DEFINED:
            return kAttrUserDefined;
        case TokenType::UNUSED:
            return kAttrUnused;
        case TokenType::BYTE:
            return kAttrByte;
    }
    return 0;  // values outside the enum: UNDEFINED, as llama.cpp does
}

std::string unescape_spaces(const std::string& s) {
    std::string r;
    r.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        if (s.compare(i, kSpaceEscape.size(), kSpaceEscape) == 0) {
            r += ' ';
            i += kSpaceEscape.size();
        } else {
            r += s[i++];
        }
    }
    return r;
}

// The piece of one token with special tokens shown (llama.cpp token_to_piece, BPE
// vocabulary with escaped whitespace).
std::string make_piece(const std::string& text, uint32_t attr) {
    if (attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return text;
    if (attr & kAttrNormal) return unescape_spaces(text);
    if (attr & kAttrByte) {
        // "<0xHH>": the byte is the hex number at characters 3-4 (strtol semantics).
        std::string hex = text.size() > 3 ? text.substr(3, 2) : std::string();
        return std::string(1, static_cast<char>(std::strtol(hex.c_str(), nullptr, 16)));
    }
    return {};  // UNUSED / UNDEFINED tokens print nothing
}

void check_special_id(TokenId id, int32_t n, const char* what) {
    if (id != kNoToken && (id < 0 || id >= n)) {
        fail("tokenizer: ", what, " = ", id, " is out of range (vocabulary has ", n, " tokens)");
    }
}

void build_tokens(Tokenizer::Impl& im) {
    VocabData& v = im.vocab;
    const int32_t n = im.n_tokens();
    if (!v.token_types.empty() && v.token_types.size() < v.tokens.size()) {
        fail("tokenizer: tokenizer.ggml.token_type has ", v.token_types.size(),
             " entries, fewer than the ", n, " tokens");
    }
    im.attr.assign(n, kAttrNormal);
    im.symbols.reserve(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) {
        std::string& t = v.tokens[i];
        if (t.empty()) t = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp
        if (!v.token_types.empty()) im.attr[i] = attr_from_type(v.token_types[i]);
        const int32_t prev = im.symbols.find(t);
        if (prev >= 0) {
            fail("tokenizer: duplicate token '", t, "' in tokenizer.ggml.tokens (ids ", prev,
                 " and ", i, ")");
        }
        im.symbols.add(t);  // id == i
    }
}

// End-of-generation set and the attribute fix-ups llama.cpp applies with it.
void build_eog(Tokenizer::Impl& im) {
    static constexpr std::string_view kEogTexts[] = {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<|flush|>",
        "<|calls|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "</s>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "[EOS]",
        "<|end_of_text|>",
        "<end_of_utterance>",
        "<eos>",
        "<turn|>",
        "<|tool_response>",
        "<\xEF\xBD\x9C"
        "end\xE2\x96\x81"
        "of\xE2\x96\x81"
        "sentence\xEF\xBD\x9C>",
        "[e~[",
    };
    im.eog.assign(im.n_tokens(), 0);
    for (std::string_view t : kEogTexts) {
        TokenId id = im.find_symbol(t);
        if (id < 0 || id >= im.n_tokens()) continue;
        im.eog[id] = 1;
        im.attr[id] |= kAttrControl;  // "control-looking token" override
    }
    for (TokenId id : {im.vocab.eos_id, im.vocab.eot_id}) {
        if (id != kNoToken) im.eog[id] = 1;
    }
    // Gemma 4: "</s>" is an ordinary word there, not an end marker.
    TokenId tool_resp = im.find_symbol("<|tool_response>");
    TokenId end_s = im.find_symbol("</s>");
    if (tool_resp >= 0 && tool_resp < im.n_tokens() && im.eog[tool_resp] && end_s >= 0 &&
        end_s < im.n_tokens() && im.eog[end_s]) {
        im.eog[end_s] = 0;
        im.attr[end_s] = kAttrNormal;
    }
}

void build_special_list(Tokenizer::Impl& im) {
    for (TokenId id = 0; id < im.n_tokens(); ++id) {
        if (im.attr[id] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
            im.special_tokens.push_back(id);
        }
    }
    std::stable_sort(im.special_tokens.begin(), im.special_tokens.end(), [&](TokenId a, TokenId b) {
        return im.vocab.tokens[a].size() > im.vocab.tokens[b].size();
    });
}

void build_merges(Tokenizer::Impl& im) {
    const auto& merges = im.vocab.merges;
    if (merges.empty()) {
        fail("tokenizer: tokenizer.ggml.merges is missing or empty (required for model '",
             im.vocab.model, "')");
    }
    im.merges.reserve(merges.size());
    std::string joined;
    for (size_t i = 0; i < merges.size(); ++i) {
        const std::string& m = merges[i];
        // Split at the first space at position >= 1 (a merge part may itself be " ").
        size_t pos = m.find(' ', 1);
        if (pos == std::string::npos) {
            fail("tokenizer: tokenizer.ggml.merges[", i, "] = '", m,
                 "' is not of the form 'left right'");
        }
        if (i > static_cast<size_t>(INT32_MAX)) fail("tokenizer: too many merges");
        std::string_view left(m.data(), pos), right(m.data() + pos + 1, m.size() - pos - 1);
        int32_t l = im.intern_symbol(left);
        int32_t r = im.intern_symbol(right);
        joined.assign(left);
        joined.append(right);
        int32_t res = im.intern_symbol(joined);
        im.merges.insert(MergeTable::key(l, r), Merge{static_cast<int32_t>(i), res});
    }
}

void build_pieces(Tokenizer::Impl& im) {
    im.pieces.resize(im.n_tokens());
    for (TokenId id = 0; id < im.n_tokens(); ++id) {
        im.pieces[id] = make_piece(im.vocab.tokens[id], im.attr[id]);
    }
    for (int c = 0; c < 128; ++c) im.ascii_symbol[c] = im.find_symbol(std::string(1, char(c)));
    static const char* hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
        const char buf[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        int32_t id = im.find_symbol(std::string_view(buf, 6));
        im.byte_token[b] = (id >= 0 && id < im.n_tokens()) ? id : kNoToken;
    }
}

}  // namespace

int32_t Tokenizer::Impl::intern_symbol(std::string_view s) {
    int32_t id = find_symbol(s);
    if (id >= 0) return id;
    if (extra_symbols.size() >= static_cast<size_t>(INT32_MAX - n_tokens())) {
        fail("tokenizer: too many merge symbols");
    }
    extra_symbols.emplace_back(s);
    return symbols.add(extra_symbols.back());  // ids continue after the tokens
}

Tokenizer::Tokenizer(VocabData vocab) {
    if (vocab.model != "gemma4") {
        fail("unsupported tokenizer model '", vocab.model, "' (supported: gemma4)");
    }
    if (vocab.tokens.empty()) fail("tokenizer: tokenizer.ggml.tokens is empty");
    if (vocab.tokens.size() > static_cast<size_t>(INT32_MAX / 2)) {
        fail("tokenizer: tokenizer.ggml.tokens has too many entries (", vocab.tokens.size(), ")");
    }
    auto im = std::make_shared<Impl>();
    im->vocab = std::move(vocab);
    const int32_t n = im->n_tokens();
    const VocabData& v = im->vocab;
    check_special_id(v.bos_id, n, "tokenizer.ggml.bos_token_id");
    check_special_id(v.eos_id, n, "tokenizer.ggml.eos_token_id");
    check_special_id(v.unk_id, n, "tokenizer.ggml.unknown_token_id");
    check_special_id(v.pad_id, n, "tokenizer.ggml.padding_token_id");
    check_special_id(v.eot_id, n, "tokenizer.ggml.eot_token_id");
    im->vocab.add_bos = true;  // llama.cpp forces BOS for gemma4
    if (v.bos_id == kNoToken) {
        fail(
            "tokenizer: tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id "
            "is not set");
    }
    if (v.add_eos && v.eos_id == kNoToken) {
        fail(
            "tokenizer: tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id "
            "is not set");
    }
    build_tokens(*im);
    build_eog(*im);
    build_special_list(*im);
    build_merges(*im);
    build_pieces(*im);
    impl_ = std::move(im);
}

Tokenizer::~Tokenizer() = default;

void Tokenizer::check_id(TokenId id) const {
    if (id < 0 || id >= impl_->n_tokens()) {
        fail("token id ", id, " is out of range (vocabulary has ", impl_->n_tokens(), " tokens)");
    }
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
    const Impl& im = *impl_;
    std::vector<TokenId> out;
    out.reserve(text.size() / 3 + 4);
    const bool bos = add_special && im.vocab.add_bos;
    if (bos) out.push_back(im.vocab.bos_id);
    encode_impl(im, text, parse_special, out);
    // The text itself may start with BOS ("<bos>" parsed as special): keep exactly one.
    if (bos && out.size() >= 2 && out[1] == im.vocab.bos_id) out.erase(out.begin() + 1);
    if (add_special && im.vocab.add_eos) out.push_back(im.vocab.eos_id);
    return out;
}

std::string_view Tokenizer::token_to_piece(TokenId id, bool special) const {
    check_id(id);
    if (!special && (impl_->attr[id] & (kAttrUnknown | kAttrControl))) return {};
    return impl_->pieces[id];
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids, bool special) const {
    std::string s;
    for (TokenId id : ids) s += token_to_piece(id, special);
    return s;
}

int32_t Tokenizer::n_tokens() const {
    return impl_->n_tokens();
}

const std::string& Tokenizer::token_text(TokenId id) const {
    check_id(id);
    return impl_->vocab.tokens[id];
}

TokenType Tokenizer::token_type(TokenId id) const {
    check_id(id);
    const auto& types = impl_->vocab.token_types;
    return types.empty() ? TokenType::NORMAL : static_cast<TokenType>(types[id]);
}

bool Tokenizer::is_control(TokenId id) const {
    check_id(id);
    return (impl_->attr[id] & kAttrControl) != 0;
}

bool Tokenizer::is_eog(TokenId id) const {
    return id >= 0 && id < impl_->n_tokens() && impl_->eog[id] != 0;
}

std::vector<TokenId> Tokenizer::eog_ids() const {
    std::vector<TokenId> r;
    for (TokenId id = 0; id < impl_->n_tokens(); ++id) {
        if (impl_->eog[id]) r.push_back(id);
    }
    return r;
}

std::optional<TokenId> Tokenizer::find_token(std::string_view text) const {
    int32_t id = impl_->find_symbol(text);
    if (id < 0 || id >= impl_->n_tokens()) return std::nullopt;
    return id;
}

TokenId Tokenizer::bos_id() const {
    return impl_->vocab.bos_id;
}
TokenId Tokenizer::eos_id() const {
    return impl_->vocab.eos_id;
}
TokenId Tokenizer::unk_id() const {
    return impl_->vocab.unk_id;
}
TokenId Tokenizer::pad_id() const {
    return impl_->vocab.pad_id;
}
TokenId Tokenizer::eot_id() const {
    return impl_->vocab.eot_id;
}
bool Tokenizer::add_bos() const {
    return impl_->vocab.add_bos;
}
bool Tokenizer::add_eos() const {
    return impl_->vocab.add_eos;
}
const std::string& Tokenizer::model() const {
    return impl_->vocab.model;
}
const std::string& Tokenizer::chat_template() const {
    return impl_->vocab.chat_template;
}

}  // namespace hf2q::tokenizer

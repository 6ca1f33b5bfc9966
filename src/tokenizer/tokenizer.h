// Gemma 4 tokenizer (GGUF tokenizer.ggml.model = "gemma4"), bit-compatible with
// llama.cpp's BPE tokenizer for the GEMMA4 pre-tokenizer. See docs/tokenizer.md.
//
// encode():  special-token partition -> spaces to U+2581 -> split into runs of
//            newline / non-newline code points -> BPE by merge rank -> <0xHH> fallback.
// decode():  per-token pieces (NORMAL: U+2581 -> space, BYTE: its byte, CONTROL and
//            UNKNOWN only on request, USER_DEFINED always), concatenated.
//
// A Tokenizer is immutable after construction and cheap to copy (shared state), so it
// can be used from several threads at once.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace hf2q::tokenizer {

class Tokenizer {
  public:
    // Validates `vocab` and builds the lookup tables. Throws hf2q::Error on an
    // unsupported model ("unsupported tokenizer model X"), missing merges, duplicate
    // tokens, malformed merges or special ids out of range.
    explicit Tokenizer(VocabData vocab);
    ~Tokenizer();
    Tokenizer(const Tokenizer&) = default;
    Tokenizer& operator=(const Tokenizer&) = default;
    Tokenizer(Tokenizer&&) noexcept = default;
    Tokenizer& operator=(Tokenizer&&) noexcept = default;

    // Tokenizes `text` (any bytes; invalid UTF-8 becomes U+FFFD per bad byte, as in
    // llama.cpp). With add_special, BOS is prepended when the vocabulary's add_bos is set
    // (always for gemma4) unless the text itself already starts with BOS (so the result
    // never starts with two BOS), and EOS is appended when add_eos is set. With
    // parse_special, CONTROL/UNKNOWN token text (e.g. "<|turn>") becomes that token;
    // USER_DEFINED token text is always matched.
    std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const;

    // The bytes of one token: CONTROL/UNKNOWN tokens give "" unless `special`.
    std::string_view token_to_piece(TokenId id, bool special) const;
    // Concatenated pieces of `ids` (no space clean-up). Bytes may be invalid UTF-8 if the
    // ids end inside a byte-fallback sequence.
    std::string decode(const std::vector<TokenId>& ids, bool special = false) const;

    int32_t n_tokens() const;
    const std::string& token_text(TokenId id) const;  // raw vocabulary text
    TokenType token_type(TokenId id) const;           // as stored in the vocabulary
    bool is_control(TokenId id) const;     // CONTROL attribute (includes forced EOG tokens)
    bool is_eog(TokenId id) const;         // end-of-generation (see docs/tokenizer.md)
    std::vector<TokenId> eog_ids() const;  // sorted
    std::optional<TokenId> find_token(std::string_view text) const;

    TokenId bos_id() const;  // kNoToken if none
    TokenId eos_id() const;
    TokenId unk_id() const;
    TokenId pad_id() const;
    TokenId eot_id() const;
    bool add_bos() const;
    bool add_eos() const;
    const std::string& model() const;
    const std::string& chat_template() const;

    struct Impl;

  private:
    void check_id(TokenId id) const;
    std::shared_ptr<const Impl> impl_;
};

// Streaming detokenizer: feed ids one at a time, get back only complete UTF-8
// characters. Bytes of a multi-byte character split over several byte-fallback tokens
// are held until the character is complete. Bytes that can never form a valid character
// (stray continuation bytes, 0xF8..0xFF, a lead byte followed by a non-continuation)
// are passed through unchanged, so the concatenation of all push() results and flush()
// equals Tokenizer::decode(ids, show_special).
class Detokenizer {
  public:
    Detokenizer(const Tokenizer& tok, bool show_special);

    // Returns the text that became complete with this token (possibly empty).
    std::string push(TokenId id);
    // Returns whatever is still buffered (an incomplete character) and clears it.
    std::string flush();
    // Bytes currently held back.
    size_t pending() const { return pending_.size(); }

  private:
    Tokenizer tok_;  // shares the tokenizer's state, so it may outlive the argument
    bool show_special_;
    std::string pending_;
};

// Length of the longest prefix of `s` that does not end inside an incomplete (but so far
// valid) UTF-8 sequence. Exposed for tests.
size_t utf8_complete_prefix(std::string_view s);

}  // namespace hf2q::tokenizer

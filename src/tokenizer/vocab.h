// Vocabulary data of a tokenizer, as stored in GGUF `tokenizer.*` metadata.
//
// VocabData is a plain struct so tokenizers can be built from hand-made vocabularies
// (tests, fuzzing) as well as from a GGUF file (load_vocab). It is not validated here:
// the Tokenizer constructor checks it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hf2q::gguf {
class File;
}

namespace hf2q::tokenizer {

using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

// `tokenizer.ggml.token_type` values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
    UNDEFINED = 0,
    NORMAL = 1,
    UNKNOWN = 2,
    CONTROL = 3,
    USER_DEFINED = 4,
    UNUSED = 5,
    BYTE = 6,
};

struct VocabData {
    std::string model;                 // tokenizer.ggml.model, e.g. "gemma4"
    std::vector<std::string> tokens;   // id -> raw UTF-8 text (U+2581 for spaces)
    std::vector<int32_t> token_types;  // id -> TokenType value; empty = all NORMAL
    std::vector<float> scores;         // id -> score; may be empty (unused by BPE)
    std::vector<std::string> merges;   // "left right", rank = index
    TokenId bos_id = kNoToken;
    TokenId eos_id = kNoToken;
    TokenId unk_id = kNoToken;
    TokenId pad_id = kNoToken;
    TokenId eot_id = kNoToken;  // optional end-of-turn id
    bool add_bos = false;       // tokenizer.ggml.add_bos_token
    bool add_eos = false;       // tokenizer.ggml.add_eos_token
    std::string chat_template;  // tokenizer.chat_template ("" if absent)
};

// Reads the tokenizer.* keys of `file` into a VocabData. Throws hf2q::Error naming the
// key when a required key is missing or has the wrong type, or when arrays disagree in
// length. Only the shape of the data is checked here; the Tokenizer checks the rest.
VocabData load_vocab(const gguf::File& file);

}  // namespace hf2q::tokenizer

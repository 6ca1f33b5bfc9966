// HF tokenizer (tokenizer.json, tokenizer_config.json, chat_template.jinja, config.json)
// -> GGUF tokenizer.* metadata, as llama.cpp's Gemma 4 converter writes it
// (spec gguf-gemma4.md §2.3; decisions in docs/tokenizer-convert.md).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hf2q::gguf {
class Writer;
}

namespace hf2q::convert {

// llama.cpp token types (tokenizer.ggml.token_type values).
enum class TokenType : int32_t {
    NORMAL = 1,
    UNKNOWN = 2,
    CONTROL = 3,
    USER_DEFINED = 4,
    UNUSED = 5,
    BYTE = 6,
};

// Everything the GGUF tokenizer.* keys are made of, validated.
struct HfTokenizer {
    std::vector<std::string> tokens;     // id order, unique, non-empty, valid UTF-8
    std::vector<TokenType> token_types;  // one per token
    std::vector<std::string> merges;     // rank order, each "left right"
    // Special token ids in the order llama.cpp writes them: "bos", "eos", "unk", "sep",
    // "pad", "cls", "mask" found in tokenizer_config.json, then ones only config.json has.
    std::vector<std::pair<std::string, uint32_t>> special_ids;
    // add_<kind>_token flags ("bos", "eos", "sep") in llama.cpp's order: those implied by
    // tokenizer.json's TemplateProcessing post-processor first, then tokenizer_config.json's
    // add_*_token (which override the value in place). add_bos_token is written as true.
    std::vector<std::pair<std::string, bool>> add_special;
    std::optional<std::string> chat_template;
};

// Reads and validates <hf_dir>/tokenizer.json (required), tokenizer_config.json,
// chat_template.jinja and config.json (optional). Throws hf2q::Error naming the file and
// field on any defect. `log` (may be empty) receives notes about skipped entries.
HfTokenizer read_hf_tokenizer(const std::string& hf_dir,
                              const std::function<void(const std::string&)>& log);

// Sets the tokenizer.* keys in llama.cpp's order: model, tokens, scores, token_type,
// merges, special ids, add_*_token, chat_template, add_space_prefix, add_bos_token.
// Takes `t` by value so the 262k tokens and 500k merges can be moved in.
void write_tokenizer_metadata(gguf::Writer& w, HfTokenizer t);

// Adds the tokenizer.* keys (spec gguf-gemma4.md §2.3) read from the HF directory's
// tokenizer.json / tokenizer_config.json. Called by the converter after the model keys
// and general.quantization_version. Returns true if any key was added. A model without
// tokenizer.json converts without tokenizer metadata.
bool add_tokenizer_metadata(gguf::Writer& w, const std::string& hf_dir,
                            const std::function<void(const std::string&)>& log);

}  // namespace hf2q::convert

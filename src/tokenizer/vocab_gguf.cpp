// Reads the tokenizer.* metadata of a GGUF file into VocabData (keys: see
// docs/tokenizer.md and spec gguf-gemma4.md §2.3).
#include <limits>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/vocab.h"

namespace hf2q::tokenizer {
namespace {

TokenId read_id(const gguf::File& f, std::string_view key) {
    const gguf::Value* v = f.find(key);
    if (!v) return kNoToken;
    uint32_t id = v->as_u32(key);
    if (id > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
        fail(key, " = ", id, " is not a valid token id");
    }
    return static_cast<TokenId>(id);
}

}  // namespace

VocabData load_vocab(const gguf::File& f) {
    VocabData v;
    v.model = f.get_string("tokenizer.ggml.model");
    v.tokens = f.at("tokenizer.ggml.tokens").as_string_array("tokenizer.ggml.tokens");
    const size_t n = v.tokens.size();

    if (const gguf::Value* t = f.find("tokenizer.ggml.token_type")) {
        std::vector<int64_t> types = t->as_int_array("tokenizer.ggml.token_type");
        if (types.size() < n) {
            fail("tokenizer.ggml.token_type has ", types.size(), " entries, expected ", n);
        }
        v.token_types.reserve(n);
        for (size_t i = 0; i < n; ++i) {
            if (types[i] < std::numeric_limits<int32_t>::min() ||
                types[i] > std::numeric_limits<int32_t>::max()) {
                fail("tokenizer.ggml.token_type[", i, "] = ", types[i], " is out of range");
            }
            v.token_types.push_back(static_cast<int32_t>(types[i]));
        }
    }
    if (const gguf::Value* s = f.find("tokenizer.ggml.scores")) {
        v.scores = s->as_f32_array("tokenizer.ggml.scores");
        if (v.scores.size() < n) {
            fail("tokenizer.ggml.scores has ", v.scores.size(), " entries, expected ", n);
        }
    }
    if (const gguf::Value* m = f.find("tokenizer.ggml.merges")) {
        v.merges = m->as_string_array("tokenizer.ggml.merges");
    }
    v.bos_id = read_id(f, "tokenizer.ggml.bos_token_id");
    v.eos_id = read_id(f, "tokenizer.ggml.eos_token_id");
    v.unk_id = read_id(f, "tokenizer.ggml.unknown_token_id");
    v.pad_id = read_id(f, "tokenizer.ggml.padding_token_id");
    v.eot_id = read_id(f, "tokenizer.ggml.eot_token_id");
    v.add_bos = f.get_bool_or("tokenizer.ggml.add_bos_token", false);
    v.add_eos = f.get_bool_or("tokenizer.ggml.add_eos_token", false);
    v.chat_template = f.get_string_or("tokenizer.chat_template", "");
    return v;
}

}  // namespace hf2q::tokenizer

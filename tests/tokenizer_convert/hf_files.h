// Helpers for tokenizer-conversion tests: temp directories, JSON string quoting and a
// tiny HF tokenizer directory builder.
#pragma once

#include "support/temp_dir.h"
#include <filesystem>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace hf2q::test {

// A fresh, empty temp directory removed by the destructor.

// `s` as a JSON string literal (quotes included; control characters escaped, other
// bytes verbatim).
std::string json_quote(std::string_view s);
void write_text(const std::filesystem::path& p, std::string_view text);

// A small tokenizer.json: vocab entries (text, id) in the given order, merges as given
// (already JSON: e.g. "\"a b\"" or "[\"a\",\"b\"]"), added tokens (id, text, special).
struct TinyTokenizer {
    std::vector<std::pair<std::string, long long>> vocab;
    std::vector<std::string> merges_json;
    std::vector<std::tuple<long long, std::string, bool>> added;
    std::string model_type = "BPE";
    bool byte_fallback = true;

    std::string to_json() const;
};

}  // namespace hf2q::test

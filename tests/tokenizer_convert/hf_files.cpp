#include "tokenizer_convert/hf_files.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <tuple>

namespace hf2q::test {

namespace fs = std::filesystem;

std::string json_quote(std::string_view s) {
    std::string r;
    r.reserve(s.size() + 2);
    r += '"';
    for (char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            r += '\\';
            r += c;
        } else if (u < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", u);
            r += buf;
        } else {
            r += c;
        }
    }
    r += '"';
    return r;
}

void write_text(const fs::path& p, std::string_view text) {
    std::ofstream out(p, std::ios::binary);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!out) throw std::runtime_error("cannot write " + p.string());
}

std::string TinyTokenizer::to_json() const {
    std::string s = "{\"version\":\"1.0\",\"added_tokens\":[";
    for (size_t i = 0; i < added.size(); ++i) {
        const auto& [id, text, special] = added[i];
        s += (i ? "," : "") + std::string("{\"id\":") + std::to_string(id) +
             ",\"content\":" + json_quote(text) +
             ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,"
             "\"special\":" +
             (special ? "true" : "false") + "}";
    }
    s += "],\"model\":{\"type\":" + json_quote(model_type) +
         ",\"byte_fallback\":" + (byte_fallback ? "true" : "false") + ",\"vocab\":{";
    for (size_t i = 0; i < vocab.size(); ++i)
        s += (i ? "," : "") + json_quote(vocab[i].first) + ":" + std::to_string(vocab[i].second);
    s += "},\"merges\":[";
    for (size_t i = 0; i < merges_json.size(); ++i) s += (i ? "," : "") + merges_json[i];
    s += "]}}";
    return s;
}

}  // namespace hf2q::test

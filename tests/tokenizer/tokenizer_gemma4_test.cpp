// Gemma 4 tokenizer against llama.cpp's reference vectors (testdata/tokenizer/): the
// vocabulary is loaded once per test binary.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/escapes.h"
#include "tokenizer/tokenizer.h"

namespace hf2q::tokenizer {
namespace {

using Ids = std::vector<TokenId>;

const std::string kDir = std::string(HF2Q_TESTDATA_DIR) + "/tokenizer/";

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot open " + path);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

const Tokenizer& gemma4() {
    static const Tokenizer tok = [] {
        auto file = gguf::File::open(kDir + "ggml-vocab-gemma-4.gguf");
        return Tokenizer(load_vocab(*file));
    }();
    return tok;
}

Ids parse_ids(const std::string& line) {
    Ids ids;
    std::istringstream ss(line);
    TokenId id;
    while (ss >> id) ids.push_back(id);
    return ids;
}

struct Case {
    std::string text;
    bool parse_special;
    Ids ids;
};

// llama.cpp's test-tokenizer-0 format: inputs separated by "\n__ggml_vocab_test__\n" (the
// newline before the marker belongs to the separator), one output line per input.
std::vector<Case> vocab_test_cases() {
    const std::string inp = read_file(kDir + "ggml-vocab-gemma-4.gguf.inp");
    const std::string out = read_file(kDir + "ggml-vocab-gemma-4.gguf.out");
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    size_t pos = 0;
    while (pos < inp.size()) {
        size_t next = inp.find(sep, pos);
        if (next == std::string::npos) next = inp.size();
        texts.push_back(inp.substr(pos, next - pos));
        pos = next + sep.size();
    }
    std::vector<std::string> lines;
    std::istringstream ls(out);
    for (std::string l; std::getline(ls, l);) lines.push_back(l);
    if (texts.size() != lines.size()) {
        throw std::runtime_error("vocab test: " + std::to_string(texts.size()) + " inputs but " +
                                 std::to_string(lines.size()) + " output lines");
    }
    std::vector<Case> cases;
    for (size_t i = 0; i < texts.size(); ++i)
        cases.push_back({texts[i], false, parse_ids(lines[i])});
    return cases;
}

std::vector<Case> jsonl_cases() {
    std::vector<Case> cases;
    std::istringstream ss(read_file(kDir + "gemma4-tokenizer-cases.jsonl"));
    for (std::string line; std::getline(ss, line);) {
        if (line.empty()) continue;
        auto j = nlohmann::json::parse(line);
        // The ids were made by llama-tokenize, which processes backslash escapes first.
        cases.push_back({process_escapes(j.at("text").get<std::string>()),
                         j.at("parse_special").get<bool>(), j.at("ids").get<Ids>()});
    }
    return cases;
}

TEST(TokenizerGemma4, LlamaCppVocabVectors) {
    auto cases = vocab_test_cases();
    ASSERT_EQ(cases.size(), 46u);
    int failures = 0;
    for (const Case& c : cases) {
        Ids got = gemma4().encode(c.text, false, false);
        if (got != c.ids) ++failures;
        EXPECT_EQ(got, c.ids) << "text: '" << c.text << "'";
    }
    EXPECT_EQ(failures, 0);
}

TEST(TokenizerGemma4, JsonlCasesBothModes) {
    auto cases = jsonl_cases();
    ASSERT_EQ(cases.size(), 366u);
    int n_special = 0, failures = 0;
    for (const Case& c : cases) {
        n_special += c.parse_special;
        Ids got = gemma4().encode(c.text, false, c.parse_special);
        if (got != c.ids) ++failures;
        EXPECT_EQ(got, c.ids) << "parse_special=" << c.parse_special << " text: '" << c.text << "'";
    }
    EXPECT_EQ(n_special, 183);
    EXPECT_EQ(failures, 0);
}

TEST(TokenizerGemma4, SpecExamples) {
    const Tokenizer& t = gemma4();
    EXPECT_EQ(t.encode("Hello", false, false), (Ids{9259}));
    EXPECT_EQ(t.encode("Hello", true, false), (Ids{2, 9259}));
    EXPECT_EQ(t.encode("\n\n\n", false, false), (Ids{109}));
    EXPECT_EQ(t.encode(" this is \xF0\x9F\xA6\x99.cpp", false, false),
              (Ids{672, 563, 236743, 478, 397, 404, 391, 236761, 12362}));
    EXPECT_EQ(t.bos_id(), 2);
    EXPECT_EQ(t.eos_id(), 1);
    EXPECT_TRUE(t.add_bos());
    EXPECT_EQ(t.model(), "gemma4");
    EXPECT_FALSE(t.chat_template().empty());
}

TEST(TokenizerGemma4, BosExactlyOnce) {
    const Tokenizer& t = gemma4();
    Ids a = t.encode("<bos><|turn>user\nhi", true, true);
    Ids b = t.encode("<|turn>user\nhi", true, true);
    EXPECT_EQ(a, b);
    ASSERT_GE(a.size(), 2u);
    EXPECT_EQ(a[0], 2);
    EXPECT_NE(a[1], 2);
    EXPECT_EQ(t.encode("<|turn>user\nhi", false, true)[0], 105);
}

TEST(TokenizerGemma4, EndOfGenerationSet) {
    const Tokenizer& t = gemma4();
    EXPECT_EQ(t.eog_ids(), (Ids{1, 50, 106}));  // <eos>, <|tool_response>, <turn|>
    EXPECT_FALSE(t.is_eog(212));                // </s> is plain text in Gemma 4
    EXPECT_EQ(t.token_text(212), "</s>");
    EXPECT_EQ(t.token_type(50), TokenType::USER_DEFINED);
}

TEST(TokenizerGemma4, SpecialTokensShownPerFlag) {
    const Tokenizer& t = gemma4();
    Ids ids = t.encode("<|turn>model\n<|channel>thought<channel|>Hi<turn|>", false, true);
    EXPECT_EQ(t.decode(ids, true), "<|turn>model\n<|channel>thought<channel|>Hi<turn|>");
    // CONTROL tokens hidden, USER_DEFINED ones (<|channel>, <channel|>) always shown.
    EXPECT_EQ(t.decode(ids, false), "model\n<|channel>thought<channel|>Hi");
}

TEST(TokenizerGemma4, RoundTrip) {
    int checked = 0;
    for (const Case& c : jsonl_cases()) {
        // Decoding with special tokens shown restores the text exactly; the only inputs
        // that would not round-trip are ones with invalid UTF-8 (none in this set).
        EXPECT_EQ(gemma4().decode(gemma4().encode(c.text, false, c.parse_special), true), c.text);
        ++checked;
    }
    for (const Case& c : vocab_test_cases()) {
        EXPECT_EQ(gemma4().decode(gemma4().encode(c.text, false, false), true), c.text);
        ++checked;
    }
    EXPECT_EQ(checked, 366 + 46);
}

TEST(TokenizerGemma4, StreamingNeverSplitsCharacters) {
    const Tokenizer& t = gemma4();
    // Emoji and CJK without tokens of their own fall back to byte tokens.
    const std::string text = "a \xF0\x9F\xA6\x99 b \xF0\x9F\xA6\x99\xF0\x9F\xA6\x99 \xE4\xB8\xAD!";
    Ids ids = t.encode(text, false, false);
    Detokenizer d(t, false);
    std::string streamed;
    int held = 0;
    for (TokenId id : ids) {
        std::string piece = d.push(id);
        held += d.pending() > 0;
        // Every chunk is complete UTF-8 on its own.
        EXPECT_EQ(utf8_complete_prefix(piece), piece.size());
        for (size_t i = 0; i < piece.size();) {
            uint8_t c = static_cast<uint8_t>(piece[i]);
            size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
            ASSERT_LE(i + len, piece.size());
            for (size_t k = 1; k < len; ++k) {
                EXPECT_EQ(static_cast<uint8_t>(piece[i + k]) & 0xC0, 0x80);
            }
            i += len;
        }
        streamed += piece;
    }
    streamed += d.flush();
    EXPECT_EQ(streamed, text);
    EXPECT_GT(held, 0);  // byte tokens were actually buffered
}

TEST(TokenizerGemma4, StreamingEqualsDecodeOnCases) {
    const Tokenizer& t = gemma4();
    for (const Case& c : jsonl_cases()) {
        for (bool special : {false, true}) {
            Detokenizer d(t, special);
            std::string s;
            for (TokenId id : c.ids) s += d.push(id);
            s += d.flush();
            EXPECT_EQ(s, t.decode(c.ids, special));
        }
    }
}

TEST(TokenizerGemma4, InvalidUtf8) {
    const Tokenizer& t = gemma4();
    // Each bad byte becomes U+FFFD, which is a token in this vocabulary.
    const TokenId fffd = t.find_token("\xEF\xBF\xBD").value();
    Ids ids = t.encode("\xFF\xFE", false, false);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(t.decode(ids), "\xEF\xBF\xBD\xEF\xBF\xBD");
    EXPECT_EQ(t.encode("\xC3", false, false), (Ids{fffd}));
}

TEST(TokenizerGemma4, Speed100KB) {
    std::string text;
    for (const Case& c : jsonl_cases()) {
        if (!c.parse_special) text += c.text;
        if (text.size() >= 100 * 1024) break;
    }
    while (text.size() < 100 * 1024) text += text;
    text.resize(100 * 1024);
    const auto t0 = std::chrono::steady_clock::now();
    Ids ids = gemma4().encode(text, false, true);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ timing ] encode 100 KiB -> %zu tokens in %.1f ms\n", ids.size(), ms);
    EXPECT_GT(ids.size(), 10000u);
}

// Writes a tiny GGUF with the given tokenizer keys and returns its path.
std::string write_vocab_gguf(const std::string& name, bool with_tokens, bool with_merges) {
    const std::string path = std::string(HF2Q_BINARY_DIR) + "/" + name;
    gguf::Writer w;
    w.set("general.architecture", gguf::Value::string("gemma4"));
    w.set("tokenizer.ggml.model", gguf::Value::string("gemma4"));
    if (with_tokens) {
        w.set("tokenizer.ggml.tokens", gguf::Value::string_array({"<bos>", "a", "b", "ab"}));
        w.set("tokenizer.ggml.token_type", gguf::Value::i32_array({3, 1, 1, 1}));
    }
    if (with_merges) w.set("tokenizer.ggml.merges", gguf::Value::string_array({"a b"}));
    w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(0));
    w.begin(path);
    w.finish();
    return path;
}

TEST(TokenizerGguf, LoadAndErrorsNameTheKey) {
    {
        auto f = gguf::File::open(write_vocab_gguf("tok_ok.gguf", true, true));
        Tokenizer t(load_vocab(*f));
        EXPECT_EQ(t.encode("ab", true, false), (Ids{0, 3}));
    }
    {
        auto f = gguf::File::open(write_vocab_gguf("tok_nomerges.gguf", true, false));
        VocabData v = load_vocab(*f);
        try {
            Tokenizer t(std::move(v));
            FAIL() << "vocabulary without merges accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.merges"), std::string::npos);
        }
    }
    {
        auto f = gguf::File::open(write_vocab_gguf("tok_notokens.gguf", false, true));
        try {
            load_vocab(*f);
            FAIL() << "vocabulary without tokens accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.tokens"), std::string::npos);
        }
    }
}

}  // namespace
}  // namespace hf2q::tokenizer

// Tokenizer unit tests on a small hand-built vocabulary: each rule of the gemma4
// encoding/decoding (docs/tokenizer.md) in isolation.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/escapes.h"
#include "tokenizer/tokenizer.h"

namespace hf2q::tokenizer {
namespace {

using Ids = std::vector<TokenId>;

struct MiniVocab {
    VocabData v;
    TokenId add(const std::string& text, TokenType type = TokenType::NORMAL) {
        v.tokens.push_back(text);
        v.token_types.push_back(static_cast<int32_t>(type));
        return static_cast<TokenId>(v.tokens.size() - 1);
    }
};

// Vocabulary: 0..5 specials, then 256 byte tokens (<0xHH> = 6 + HH), then text tokens.
VocabData mini_vocab() {
    MiniVocab m;
    m.v.model = "gemma4";
    m.add("<pad>", TokenType::CONTROL);    // 0
    m.add("<eos>", TokenType::CONTROL);    // 1
    m.add("<bos>", TokenType::CONTROL);    // 2
    m.add("<unk>", TokenType::UNKNOWN);    // 3
    m.add("<|turn>", TokenType::CONTROL);  // 4
    m.add("<turn|>", TokenType::CONTROL);  // 5
    for (int b = 0; b < 256; ++b) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        m.add(buf, TokenType::BYTE);  // 6 .. 261
    }
    for (const char* t : {"a",
                          "b",
                          "c",
                          "ab",
                          "abc",
                          "\xE2\x96\x81",
                          "\xE2\x96\x81"
                          "a",
                          "\n",
                          "\n\n",
                          "h",
                          "e",
                          "l",
                          "o",
                          "he",
                          "ll",
                          "llo",
                          "hello",
                          "x",
                          "xx",
                          "</s>",
                          "\xC3\xA4"}) {
        m.add(t);  // 262 ..
    }
    m.add("<|\"|>", TokenType::USER_DEFINED);
    m.add("<|tool_response>", TokenType::USER_DEFINED);
    m.add("<unused0>", TokenType::UNUSED);
    m.v.merges = {"a b", "ab c", "\xE2\x96\x81 a", "l l", "ll o", "h e", "he llo", "x x"};
    m.v.bos_id = 2;
    m.v.eos_id = 1;
    m.v.unk_id = 3;
    m.v.pad_id = 0;
    m.v.add_bos = true;
    return m.v;
}

const Tokenizer& mini() {
    static const Tokenizer tok(mini_vocab());
    return tok;
}

TokenId id_of(const std::string& s) {
    auto id = mini().find_token(s);
    EXPECT_TRUE(id.has_value()) << s;
    return id.value_or(-1);
}

TokenId byte_id(int b) {
    return 6 + b;
}

TEST(TokenizerSmall, MergesByRank) {
    const Tokenizer& t = mini();
    EXPECT_EQ(t.encode("abc", false, false), (Ids{id_of("abc")}));
    EXPECT_EQ(t.encode("hello", false, false), (Ids{id_of("hello")}));
    EXPECT_EQ(t.encode("ab", false, false), (Ids{id_of("ab")}));
    EXPECT_EQ(t.encode("ba", false, false), (Ids{id_of("b"), id_of("a")}));
}

TEST(TokenizerSmall, LeftmostMergeOnTies) {
    // "xxx": both pairs have the same rank; the left one merges first.
    EXPECT_EQ(mini().encode("xxx", false, false), (Ids{id_of("xx"), id_of("x")}));
    EXPECT_EQ(mini().encode("xxxx", false, false), (Ids{id_of("xx"), id_of("xx")}));
}

TEST(TokenizerSmall, SpacesEscaped) {
    EXPECT_EQ(mini().encode(" a", false, false), (Ids{id_of("\xE2\x96\x81"
                                                            "a")}));
    EXPECT_EQ(mini().encode("a b", false, false),
              (Ids{id_of("a"), id_of("\xE2\x96\x81"), id_of("b")}));
}

TEST(TokenizerSmall, ByteFallback) {
    // U+00E9 has no token: its two UTF-8 bytes become byte tokens.
    EXPECT_EQ(mini().encode("\xC3\xA9", false, false), (Ids{byte_id(0xC3), byte_id(0xA9)}));
    EXPECT_EQ(mini().encode("\xC3\xA4", false, false), (Ids{id_of("\xC3\xA4")}));
}

TEST(TokenizerSmall, InvalidUtf8BecomesReplacementChar) {
    // A lone 0xFF and a truncated 2-byte sequence each become U+FFFD (EF BF BD), which
    // has no token here and falls back to its bytes.
    const Ids fffd = {byte_id(0xEF), byte_id(0xBF), byte_id(0xBD)};
    EXPECT_EQ(mini().encode("\xFF", false, false), fffd);
    Ids two = fffd;
    two.push_back(id_of("a"));
    EXPECT_EQ(mini().encode("\xC3"
                            "a",
                            false, false),
              two);
}

TEST(TokenizerSmall, NewlineRuns) {
    EXPECT_EQ(mini().encode("\n\n", false, false), (Ids{id_of("\n\n")}));
    // "\n\n\n" is not a token: falls back to per-character symbols (no newline merges).
    EXPECT_EQ(mini().encode("\n\n\n", false, false), (Ids{id_of("\n"), id_of("\n"), id_of("\n")}));
    // Newlines split words: "a\nb" never merges across the newline.
    EXPECT_EQ(mini().encode("a\nbc", false, false),
              (Ids{id_of("a"), id_of("\n"), id_of("b"), id_of("c")}));
}

TEST(TokenizerSmall, SpecialTokensPerFlag) {
    const Tokenizer& t = mini();
    EXPECT_EQ(t.encode("<|turn>a", false, true), (Ids{4, id_of("a")}));
    Ids plain = t.encode("<|turn>a", false, false);
    EXPECT_NE(plain.front(), 4);
    EXPECT_EQ(t.decode(plain), "<|turn>a");
    // USER_DEFINED tokens are matched even without parse_special.
    EXPECT_EQ(t.encode("a<|\"|>b", false, false), (Ids{id_of("a"), id_of("<|\"|>"), id_of("b")}));
    // ...but an end-of-generation token gets the CONTROL attribute, as in llama.cpp.
    TokenId tr = id_of("<|tool_response>");
    EXPECT_EQ(t.encode("<|tool_response>", false, true), (Ids{tr}));
    EXPECT_NE(t.encode("<|tool_response>", false, false), (Ids{tr}));
}

TEST(TokenizerSmall, BosRule) {
    const Tokenizer& t = mini();
    EXPECT_EQ(t.encode("a", true, false), (Ids{2, id_of("a")}));
    EXPECT_EQ(t.encode("", true, false), (Ids{2}));
    EXPECT_EQ(t.encode("", false, false), (Ids{}));
    // Text that starts with "<bos>" still gives exactly one BOS.
    EXPECT_EQ(t.encode("<bos>a", true, true), (Ids{2, id_of("a")}));
    EXPECT_EQ(t.encode("<bos>a", false, true), (Ids{2, id_of("a")}));
}

TEST(TokenizerSmall, EndOfGeneration) {
    const Tokenizer& t = mini();
    EXPECT_TRUE(t.is_eog(1));  // <eos>
    EXPECT_TRUE(t.is_eog(id_of("<|tool_response>")));
    EXPECT_FALSE(t.is_eog(id_of("</s>")));  // removed because <|tool_response> exists
    EXPECT_FALSE(t.is_eog(2));
    EXPECT_FALSE(t.is_eog(-1));
    EXPECT_EQ(t.eog_ids(), (Ids{1, 5, id_of("<|tool_response>")}));  // <eos> <turn|> ...
    EXPECT_TRUE(t.is_control(id_of("<|tool_response>")));
    EXPECT_FALSE(t.is_control(id_of("</s>")));
}

TEST(TokenizerSmall, Pieces) {
    const Tokenizer& t = mini();
    EXPECT_EQ(t.token_to_piece(id_of("\xE2\x96\x81"
                                     "a"),
                               false),
              " a");
    EXPECT_EQ(t.token_to_piece(byte_id(0x41), false), "A");
    EXPECT_EQ(t.token_to_piece(4, false), "");
    EXPECT_EQ(t.token_to_piece(4, true), "<|turn>");
    EXPECT_EQ(t.token_to_piece(3, false), "");  // UNKNOWN is special too
    EXPECT_EQ(t.token_to_piece(id_of("<|\"|>"), false), "<|\"|>");
    EXPECT_EQ(t.token_to_piece(id_of("<unused0>"), true), "");
    EXPECT_THROW(t.token_to_piece(t.n_tokens(), false), Error);
    EXPECT_THROW(t.token_to_piece(-1, true), Error);
}

TEST(TokenizerSmall, DetokenizerHoldsPartialCharacters) {
    const Tokenizer& t = mini();
    Detokenizer d(t, false);
    EXPECT_EQ(d.push(byte_id(0xC3)), "");
    EXPECT_EQ(d.pending(), 1u);
    EXPECT_EQ(d.push(byte_id(0xA9)), "\xC3\xA9");
    // A lead byte followed by ASCII can never complete: both pass through.
    EXPECT_EQ(d.push(byte_id(0xE2)), "");
    EXPECT_EQ(d.push(id_of("a")),
              "\xE2"
              "a");
    EXPECT_EQ(d.push(byte_id(0xF0)), "");
    EXPECT_EQ(d.flush(), "\xF0");
    EXPECT_EQ(d.pending(), 0u);
}

TEST(TokenizerSmall, DetokenizerKeepsTokenizerAlive) {
    Detokenizer d(Tokenizer(mini_vocab()), true);  // the temporary dies here
    EXPECT_EQ(d.push(4), "<|turn>");
    EXPECT_EQ(d.push(byte_id(0x41)), "A");
}

TEST(TokenizerSmall, Utf8CompletePrefix) {
    EXPECT_EQ(utf8_complete_prefix(""), 0u);
    EXPECT_EQ(utf8_complete_prefix("ab"), 2u);
    EXPECT_EQ(utf8_complete_prefix("a\xF0\x9F\xA6"), 1u);
    EXPECT_EQ(utf8_complete_prefix("a\xF0\x9F\xA6\x99"), 5u);
    EXPECT_EQ(utf8_complete_prefix("\x99\x99"), 2u);  // stray continuation bytes
    EXPECT_EQ(utf8_complete_prefix("\xFF"), 1u);
}

TEST(TokenizerSmall, RejectsBadVocabularies) {
    VocabData v = mini_vocab();
    v.merges.clear();
    try {
        Tokenizer t(v);
        FAIL() << "missing merges accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.merges"), std::string::npos);
    }
    v = mini_vocab();
    v.model = "llama";
    try {
        Tokenizer t(v);
        FAIL() << "llama model accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("unsupported tokenizer model 'llama'"),
                  std::string::npos);
    }
    v = mini_vocab();
    v.tokens[10] = "a";
    EXPECT_THROW(Tokenizer{v}, Error);  // duplicate token
    v = mini_vocab();
    v.bos_id = 100000;
    EXPECT_THROW(Tokenizer{v}, Error);
    v = mini_vocab();
    v.bos_id = kNoToken;
    EXPECT_THROW(Tokenizer{v}, Error);  // gemma4 always adds BOS
    v = mini_vocab();
    v.merges.push_back("nospace");
    EXPECT_THROW(Tokenizer{v}, Error);
    v = mini_vocab();
    v.token_types.resize(5);
    EXPECT_THROW(Tokenizer{v}, Error);
}

TEST(TokenizerSmall, ProcessEscapes) {
    EXPECT_EQ(process_escapes("a\\nb\\r\\t\\\\\\'\\\""), "a\nb\r\t\\'\"");
    EXPECT_EQ(process_escapes("\\x41\\x4"), "A\\x4");
    EXPECT_EQ(process_escapes("\\d\\0\\"), "\\d\\0\\");
    EXPECT_EQ(process_escapes("\\xZZ!"), "\\xZZ!");
}

TEST(TokenizerSmall, MergeResultsOutsideVocabularyStillMerge) {
    // "p q" makes "pq" which is not a token, then "pq r" makes the token "pqr".
    MiniVocab m;
    m.v.model = "gemma4";
    m.add("<bos>", TokenType::CONTROL);
    for (const char* s : {"p", "q", "r", "pqr"}) m.add(s);
    m.v.merges = {"p q", "pq r"};
    m.v.bos_id = 0;
    Tokenizer t(m.v);
    EXPECT_EQ(t.encode("pqr", false, false), (Ids{4}));
    // "pq" alone is not a token and there are no byte tokens: its bytes are dropped.
    EXPECT_EQ(t.encode("pq", false, false), (Ids{}));
}

}  // namespace
}  // namespace hf2q::tokenizer

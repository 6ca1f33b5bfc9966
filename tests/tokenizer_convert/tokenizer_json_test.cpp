// Small HF tokenizer directories: both merge forms, token-type rules, special ids,
// chat-template sources, and one test per rejected defect.
#include <gtest/gtest.h>

#include "convert/tokenizer_metadata.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer_convert/hf_files.h"

using namespace hf2q;
using namespace hf2q::test;
using convert::TokenType;
namespace fs = std::filesystem;

namespace {

// <pad> <eos> <bos> <unk>, a byte token, two letters and their merge, "▁", a visible
// chat token and a model-specific special (<|turn>).
TinyTokenizer base_tokenizer() {
    TinyTokenizer t;
    t.vocab = {{"<pad>", 0},        {"<eos>", 1},      {"<bos>", 2},   {"<unk>", 3},
               {"<0x41>", 4},       {"a", 5},          {"b", 6},       {"ab", 7},
               {"\xE2\x96\x81", 8}, {"<|channel>", 9}, {"<|turn>", 10}};
    t.merges_json = {"\"a b\""};
    t.added = {{0, "<pad>", true}, {1, "<eos>", true},      {2, "<bos>", true},
               {3, "<unk>", true}, {9, "<|channel>", true}, {10, "<|turn>", true}};
    return t;
}

const char* kConfig =
    R"({"bos_token":"<bos>","eos_token":{"content":"<eos>","special":true},"unk_token":"<unk>",)"
    R"("pad_token":"<pad>","sot_token":"<|turn>","soc_token":"<|channel>"})";

struct Dir {
    TempDir tmp{"unit"};
    explicit Dir(const TinyTokenizer& t, const char* config = kConfig) {
        write_text(tmp.path() / "tokenizer.json", t.to_json());
        if (config) write_text(tmp.path() / "tokenizer_config.json", config);
    }
    Dir& with(const char* name, const std::string& text) {
        write_text(tmp.path() / name, text);
        return *this;
    }
    convert::HfTokenizer read() const {
        return convert::read_hf_tokenizer(tmp.path().string(), {});
    }
    std::string file(const char* name) const { return (tmp.path() / name).string(); }
};

// Expects read_hf_tokenizer to throw with every fragment in the message.
void expect_error(const Dir& d, std::initializer_list<std::string> fragments) {
    try {
        d.read();
        ADD_FAILURE() << "no error; expected one containing " << *fragments.begin();
    } catch (const Error& e) {
        for (const auto& f : fragments)
            EXPECT_NE(std::string(e.what()).find(f), std::string::npos)
                << "message: " << e.what() << "\nmissing: " << f;
    }
}

TEST(TokenizerJson, StringMerges) {
    Dir d(base_tokenizer());
    auto t = d.read();
    ASSERT_EQ(t.tokens.size(), 11u);
    EXPECT_EQ(t.tokens[7], "ab");
    EXPECT_EQ(t.merges, std::vector<std::string>{"a b"});
}

TEST(TokenizerJson, PairMergesEncodeSpacesAsU0120) {
    auto tt = base_tokenizer();
    tt.vocab.push_back({"x", 11});
    tt.vocab.push_back({" y", 12});
    tt.vocab.push_back({"x y", 13});
    tt.merges_json = {R"(["a","b"])", R"(["x"," y"])"};
    Dir d(tt);
    auto t = d.read();
    EXPECT_EQ(t.merges, (std::vector<std::string>{"a b", "x \xC4\xA0y"}));
}

TEST(TokenizerJson, TokenTypes) {
    auto tt = base_tokenizer();
    tt.added.push_back({11, "<extra_special>", true});
    tt.added.push_back({12, "<extra_plain>", false});
    tt.added.push_back({13, "<extra_named>", false});
    tt.added.push_back({14, "<tool_call|>", true});
    Dir d(tt, R"({"bos_token":"<bos>","sot_token":"<|turn>","soc_token":"<|channel>",)"
              R"("eos_token":"<eos>","extra_special_tokens":["<extra_named>","<tool_call|>"]})");
    auto t = d.read();
    const std::vector<TokenType> want = {
        TokenType::NORMAL,       TokenType::CONTROL, TokenType::CONTROL,
        TokenType::NORMAL,       TokenType::BYTE,    TokenType::NORMAL,
        TokenType::NORMAL,       TokenType::NORMAL,  TokenType::NORMAL,
        TokenType::USER_DEFINED, TokenType::CONTROL, TokenType::CONTROL,
        TokenType::USER_DEFINED, TokenType::CONTROL, TokenType::USER_DEFINED};
    // <pad> and <unk> are special in added_tokens but not named by this config: NORMAL,
    // as HF's all_special_ids decides for base-vocabulary tokens.
    EXPECT_EQ(t.token_types, want);
    EXPECT_EQ(t.tokens[14], "<tool_call|>");
}

TEST(TokenizerJson, SpecialIdsOrderAndConfigJsonFallback) {
    Dir d(base_tokenizer(),
          R"({"pad_token":"<pad>","eos_token":"<eos>","bos_token":"<bos>","add_eos_token":true,)"
          R"("add_bos_token":false,"chat_template":"{{ x }}"})");
    d.with("config.json",
           R"({"eos_token_id":[1,106],"text_config":{"unk_token_id":3,"mask_token_id":99}})");
    auto t = d.read();
    const std::vector<std::pair<std::string, uint32_t>> want = {
        {"bos", 2}, {"eos", 1}, {"pad", 0}, {"unk", 3}};
    EXPECT_EQ(t.special_ids, want);  // mask 99 is out of range: skipped
    const std::vector<std::pair<std::string, bool>> add = {{"bos", false}, {"eos", true}};
    EXPECT_EQ(t.add_special, add);

    gguf::Writer w;
    convert::write_tokenizer_metadata(w, t);
    std::vector<std::string> keys;
    for (const auto& kv : w.metadata()) keys.push_back(kv.key);
    const std::vector<std::string> want_keys = {"tokenizer.ggml.model",
                                                "tokenizer.ggml.tokens",
                                                "tokenizer.ggml.scores",
                                                "tokenizer.ggml.token_type",
                                                "tokenizer.ggml.merges",
                                                "tokenizer.ggml.bos_token_id",
                                                "tokenizer.ggml.eos_token_id",
                                                "tokenizer.ggml.padding_token_id",
                                                "tokenizer.ggml.unknown_token_id",
                                                "tokenizer.ggml.add_bos_token",
                                                "tokenizer.ggml.add_eos_token",
                                                "tokenizer.chat_template",
                                                "tokenizer.ggml.add_space_prefix"};
    EXPECT_EQ(keys, want_keys);
    // add_bos_token keeps its first position but is forced true.
    EXPECT_TRUE(w.metadata()[9].value == gguf::Value::boolean(true));
    EXPECT_TRUE(w.metadata()[10].value == gguf::Value::boolean(true));
}

TEST(TokenizerJson, ChatTemplateSources) {
    {
        Dir d(base_tokenizer());
        d.with("chat_template.jinja", "{{ jinja }}");
        EXPECT_EQ(d.read().chat_template, std::optional<std::string>("{{ jinja }}"));
    }
    {
        Dir d(base_tokenizer(), R"({"chat_template":"{{ config }}"})");
        d.with("chat_template.jinja", "{{ jinja }}");
        EXPECT_EQ(d.read().chat_template, std::optional<std::string>("{{ config }}"));
    }
    {
        Dir d(base_tokenizer(), nullptr);
        EXPECT_FALSE(d.read().chat_template.has_value());
        EXPECT_TRUE(d.read().special_ids.empty());
    }
    {
        Dir d(base_tokenizer());
        d.with("chat_template.jinja", "bad \xC3(");
        expect_error(d, {"chat_template.jinja", "UTF-8"});
    }
}

TEST(TokenizerJson, NoTokenizerJsonAddsNothing) {
    TempDir tmp("none");
    gguf::Writer w;
    std::string logged;
    EXPECT_FALSE(convert::add_tokenizer_metadata(w, tmp.path().string(),
                                                 [&](const std::string& s) { logged += s; }));
    EXPECT_TRUE(w.metadata().empty());
    EXPECT_NE(logged.find("no tokenizer.json"), std::string::npos);
}

TEST(TokenizerJsonErrors, NotJson) {
    Dir d(base_tokenizer());
    d.with("tokenizer.json", "{\"model\": ");
    expect_error(d, {"tokenizer.json", "not valid JSON"});
}

TEST(TokenizerJsonErrors, InvalidUtf8InJson) {
    auto tt = base_tokenizer();
    tt.vocab.push_back({"bad\xFF", 11});
    Dir d(tt);
    expect_error(d, {"tokenizer.json", "not valid JSON"});
}

TEST(TokenizerJsonErrors, ModelShape) {
    {
        Dir d(base_tokenizer());
        d.with("tokenizer.json", "{\"added_tokens\":[]}");
        expect_error(d, {"tokenizer.json", "model must be an object"});
    }
    {
        auto tt = base_tokenizer();
        tt.model_type = "Unigram";
        expect_error(Dir(tt), {"model.type", "BPE", "Unigram"});
    }
    {
        auto tt = base_tokenizer();
        tt.byte_fallback = false;
        expect_error(Dir(tt), {"model.byte_fallback"});
    }
}

TEST(TokenizerJsonErrors, VocabIds) {
    {
        auto tt = base_tokenizer();
        tt.vocab[5].second = 20;  // gap
        expect_error(Dir(tt), {"model.vocab[\"a\"]", "dense"});
    }
    {
        auto tt = base_tokenizer();
        tt.vocab[6].second = 5;  // "b" reuses the id of "a"
        expect_error(Dir(tt), {"model.vocab", "id is used by"});
    }
    {
        auto tt = base_tokenizer();
        tt.vocab[5].second = -1;
        expect_error(Dir(tt), {"model.vocab[\"a\"]", "token id"});
    }
    {
        auto tt = base_tokenizer();
        tt.vocab.push_back({"", 11});
        expect_error(Dir(tt), {"model.vocab[\"\"]", "empty"});
    }
    {
        auto tt = base_tokenizer();
        tt.vocab.clear();
        tt.added.clear();
        expect_error(Dir(tt), {"model.vocab is empty"});
    }
}

TEST(TokenizerJsonErrors, AddedTokens) {
    {
        auto tt = base_tokenizer();
        tt.added.push_back({5, "not-a", false});
        expect_error(Dir(tt), {"added_tokens[6]", "does not match", "\"a\""});
    }
    {
        auto tt = base_tokenizer();
        tt.added.push_back({12, "<gap>", true});  // 11 missing
        expect_error(Dir(tt), {"<gap>", "dense 11..11"});
    }
    {
        auto tt = base_tokenizer();
        tt.added.push_back({11, "<x>", true});
        tt.added.push_back({11, "<y>", true});
        expect_error(Dir(tt), {"id 11 is listed twice"});
    }
    {
        auto tt = base_tokenizer();
        tt.added.push_back({11, "ab", false});  // same text as base id 7
        expect_error(Dir(tt), {"\"ab\" appears twice", "7", "11"});
    }
    {
        Dir d(base_tokenizer());
        d.with(
            "tokenizer.json",
            R"({"added_tokens":[{"id":0,"content":5}],"model":{"type":"BPE","byte_fallback":true,"vocab":{"a":0},"merges":["a a"]}})");
        expect_error(d, {"added_tokens[0]", "content must be a string"});
    }
}

TEST(TokenizerJsonErrors, Merges) {
    const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
        {{}, {"model.merges must be a non-empty array"}},
        {{"\"ab\""}, {"model.merges[0]", "one space"}},
        {{"\"a b \""}, {"model.merges[0]", "one space"}},
        {{"\"a b\"", R"(["a","b"])"}, {"model.merges[1]", "like model.merges[0]"}},
        {{R"(["a","b"])", "\"a b\""}, {"model.merges[1]", "pair"}},
        {{R"(["a","b","c"])"}, {"model.merges[0]", "pair"}},
        {{R"(["a",""])"}, {"model.merges[0]", "empty part"}},
        {{"\"a zz\""}, {"model.merges[0]", "\"zz\" is not a token"}},
        {{"\"b a\""}, {"model.merges[0]", "\"ba\" is not a token"}},
    };
    for (const auto& [merges, frags] : cases) {
        auto tt = base_tokenizer();
        tt.merges_json = merges;
        std::vector<std::string> all = {"tokenizer.json"};
        all.insert(all.end(), frags.begin(), frags.end());
        SCOPED_TRACE(frags[0]);
        Dir d(tt);
        try {
            d.read();
            ADD_FAILURE() << "no error";
        } catch (const Error& e) {
            for (const auto& f : all)
                EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
        }
    }
}

TEST(TokenizerJsonErrors, TokenizerConfig) {
    expect_error(Dir(base_tokenizer(), R"({"bos_token":5})"),
                 {"tokenizer_config.json", "bos_token must be a token string"});
    expect_error(Dir(base_tokenizer(), R"({"chat_template":[{"name":"default","template":"x"}]})"),
                 {"tokenizer_config.json", "chat_template must be a string"});
    expect_error(Dir(base_tokenizer(), R"({"add_eos_token":"yes"})"),
                 {"tokenizer_config.json", "add_eos_token must be true or false"});
    expect_error(Dir(base_tokenizer(), R"({"extra_special_tokens":"<|turn>"})"),
                 {"tokenizer_config.json", "extra_special_tokens must be a list"});
    expect_error(Dir(base_tokenizer(), R"({"extra_special_tokens":[7]})"),
                 {"tokenizer_config.json", "extra_special_tokens[0]"});
    expect_error(Dir(base_tokenizer(), R"([1,2])"), {"tokenizer_config.json", "JSON object"});
}

TEST(TokenizerJsonErrors, ConfigJson) {
    Dir d(base_tokenizer(), nullptr);
    d.with("config.json", R"({"bos_token_id":-2})");
    expect_error(d, {"config.json", "bos_token_id", "negative"});
}

}  // namespace

namespace {

// A Gemma-3-style post-processor ("<bos> $A") implies add_bos_token; one ending in the
// EOS text implies add_eos_token; tokenizer_config.json's flags override in place.
TEST(TokenizerJson, TemplateProcessingPostProcessor) {
    auto with_pp = [](const std::string& pp) {
        std::string j = base_tokenizer().to_json();
        j.insert(1, "\"post_processor\":" + pp + ",");
        return j;
    };
    const std::string bos_a =
        R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<bos>","type_id":0}},)"
        R"({"Sequence":{"id":"A","type_id":0}}]})";
    {
        Dir d(base_tokenizer());
        d.with("tokenizer.json", with_pp(bos_a));
        const std::vector<std::pair<std::string, bool>> want = {{"bos", true}};
        EXPECT_EQ(d.read().add_special, want);
    }
    {
        Dir d(base_tokenizer(),
              R"({"bos_token":"<bos>","eos_token":"<eos>","add_bos_token":false})");
        const std::string seq =
            R"({"type":"Sequence","processors":[{"type":"ByteLevel"},{"type":"TemplateProcessing",)"
            R"("single":[{"SpecialToken":{"id":"<bos>","type_id":0}},{"Sequence":{"id":"A","type_id":0}},)"
            R"({"SpecialToken":{"id":"<eos>","type_id":0}}]}]})";
        d.with("tokenizer.json", with_pp(seq));
        const std::vector<std::pair<std::string, bool>> want = {{"bos", false}, {"eos", true}};
        EXPECT_EQ(d.read().add_special, want);
    }
}

}  // namespace

// Round trip: reference GGUF vocabulary -> HF tokenizer files -> converter -> GGUF, whose
// tokenizer.* keys must equal the reference's exactly (values, types and order).
//
// How the HF files are derived from the reference token_type array:
//   BYTE (6)          base-vocab token spelled <0xHH>; nothing else needed.
//   CONTROL (3)       listed in added_tokens (special: true) and named in
//                     tokenizer_config.json: as bos/eos/unk/pad/mask_token when a
//                     tokenizer.ggml.*_token_id key names it, else in extra_special_tokens
//                     (HF all_special_ids).
//   USER_DEFINED (4)  must be one of the seven visible chat tokens; written exactly like a
//                     CONTROL token (the real Gemma 4 files name them as special too), so
//                     only the converter's visible-token override can produce type 4.
//   NORMAL (1)        plain model.vocab entry.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>

#include "convert/tokenizer_metadata.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer_convert/hf_files.h"

using namespace hf2q;
using namespace hf2q::test;
namespace fs = std::filesystem;

namespace {

const std::string kRefPath = std::string(HF2Q_TESTDATA_DIR) + "/tokenizer/ggml-vocab-gemma-4.gguf";

const std::set<std::string> kVisible = {"<|channel>",   "<channel|>",       "<|tool_call>",
                                        "<tool_call|>", "<|tool_response>", "<tool_response|>",
                                        "<|\"|>"};

const std::map<std::string, std::string> kIdKeyToConfig = {
    {"tokenizer.ggml.bos_token_id", "bos_token"},
    {"tokenizer.ggml.eos_token_id", "eos_token"},
    {"tokenizer.ggml.unknown_token_id", "unk_token"},
    {"tokenizer.ggml.padding_token_id", "pad_token"},
    {"tokenizer.ggml.mask_token_id", "mask_token"},
    {"tokenizer.ggml.seperator_token_id", "sep_token"},
    {"tokenizer.ggml.cls_token_id", "cls_token"}};

const gguf::File& reference() {
    static std::unique_ptr<gguf::File> f = gguf::File::open(kRefPath);
    return *f;
}

std::string tokenizer_json(const gguf::File& ref, bool pair_merges) {
    const auto& tokens = ref.at("tokenizer.ggml.tokens").as_string_array("tokens");
    const auto types = ref.at("tokenizer.ggml.token_type").as_int_array("token_type");
    const auto& merges = ref.at("tokenizer.ggml.merges").as_string_array("merges");
    std::string s;
    s.reserve(32u << 20);
    s += "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[";
    bool first = true;
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (types[i] != 3 && types[i] != 4) continue;
        s += first ? "" : ",";
        first = false;
        s += "{\"id\":" + std::to_string(i) + ",\"content\":" + json_quote(tokens[i]) +
             ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,"
             "\"special\":true}";
    }
    s += "],\"normalizer\":null,\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":\"<unk>"
         "\","
         "\"fuse_unk\":true,\"byte_fallback\":true,\"ignore_merges\":false,\"vocab\":{";
    for (size_t i = 0; i < tokens.size(); ++i) {
        s += i ? "," : "";
        s += json_quote(tokens[i]);
        s += ':';
        s += std::to_string(i);
    }
    s += "},\"merges\":[";
    for (size_t i = 0; i < merges.size(); ++i) {
        s += i ? "," : "";
        if (pair_merges) {
            const size_t sp = merges[i].find(' ');
            s += '[' + json_quote(merges[i].substr(0, sp)) + ',' +
                 json_quote(merges[i].substr(sp + 1)) + ']';
        } else {
            s += json_quote(merges[i]);
        }
    }
    s += "]}}";
    return s;
}

std::string tokenizer_config_json(const gguf::File& ref) {
    const auto& tokens = ref.at("tokenizer.ggml.tokens").as_string_array("tokens");
    const auto types = ref.at("tokenizer.ggml.token_type").as_int_array("token_type");
    std::string s = "{\"tokenizer_class\":\"GemmaTokenizer\",\"padding_side\":\"left\"";
    std::set<size_t> named;
    for (const auto& [key, cfg] : kIdKeyToConfig) {
        if (!ref.has(key)) continue;
        const uint32_t id = ref.get_u32(key);
        s += "," + json_quote(cfg) + ":" + json_quote(tokens.at(id));
        named.insert(id);
    }
    s += ",\"extra_special_tokens\":[";
    bool first = true;
    for (size_t i = 0; i < tokens.size(); ++i) {
        if ((types[i] != 3 && types[i] != 4) || named.count(i)) continue;
        s += (first ? "" : ",") + json_quote(tokens[i]);
        first = false;
    }
    return s + "]}";
}

// The reference's token types must be ones the derivation above can express.
void check_reference_types(const gguf::File& ref) {
    const auto& tokens = ref.at("tokenizer.ggml.tokens").as_string_array("tokens");
    const auto types = ref.at("tokenizer.ggml.token_type").as_int_array("token_type");
    ASSERT_EQ(tokens.size(), types.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
        const bool byte_like = tokens[i].size() == 6 && tokens[i].rfind("<0x", 0) == 0;
        if (types[i] == 4) {
            ASSERT_TRUE(kVisible.count(tokens[i])) << tokens[i];
        }
        if (types[i] == 6) {
            ASSERT_TRUE(byte_like) << tokens[i];
        }
        ASSERT_TRUE(types[i] == 1 || types[i] == 3 || types[i] == 4 || types[i] == 6) << i;
    }
}

// One merges form at full size (the pair form current HF files use); the string form is
// covered by the small tests in tokenizer_json_test.cpp.
struct Fixture {
    TempDir dir{"roundtrip"};
    std::unique_ptr<gguf::File> out;
    double convert_s = 0;
};

// Writes the HF files, converts, writes and re-reads the GGUF. Built once per binary
// (262144 tokens, 514906 merges).
const Fixture& fixture() {
    static std::unique_ptr<Fixture> f;
    if (f) return *f;
    const bool pair_merges = true;
    f = std::make_unique<Fixture>();
    const gguf::File& ref = reference();
    write_text(f->dir.path() / "tokenizer.json", tokenizer_json(ref, pair_merges));
    write_text(f->dir.path() / "tokenizer_config.json", tokenizer_config_json(ref));
    if (ref.has("tokenizer.chat_template"))
        write_text(f->dir.path() / "chat_template.jinja",
                   ref.get_string("tokenizer.chat_template"));
    auto t0 = std::chrono::steady_clock::now();
    gguf::Writer w;
    convert::add_tokenizer_metadata(w, f->dir.path().string(), {});
    f->convert_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string out = (f->dir.path() / "out.gguf").string();
    w.begin(out);
    w.finish();
    f->out = gguf::File::open(out);
    return *f;
}

std::vector<std::string> tokenizer_keys(const gguf::File& f) {
    std::vector<std::string> keys;
    for (const auto& kv : f.metadata())
        if (kv.key.rfind("tokenizer.", 0) == 0) keys.push_back(kv.key);
    return keys;
}

TEST(RoundTrip, ReferenceTypesAreExpressible) {
    check_reference_types(reference());
}

// The checks below share one fixture and run as one test: CTest starts a process per
// test, and the fixture is the expensive part.
void same_keys_in_same_order(const Fixture& fx) {
    std::cout << "convert (parse + validate + set keys): " << fx.convert_s << " s\n";
    const auto ref_keys = tokenizer_keys(reference());
    EXPECT_EQ(tokenizer_keys(*fx.out), ref_keys);
    EXPECT_EQ(ref_keys.size(), 13u) << "reference changed: review this test";
}

void every_value_equals_reference(const Fixture& fx) {
    for (const auto& key : tokenizer_keys(reference())) {
        const gguf::Value* got = fx.out->find(key);
        ASSERT_NE(got, nullptr) << key;
        const gguf::Value& want = reference().at(key);
        EXPECT_EQ(got->type(), want.type()) << key;
        if (want.is_array()) {
            EXPECT_EQ(got->elem_type(), want.elem_type()) << key;
        }
        EXPECT_TRUE(*got == want) << key << ": got " << got->to_display_string() << ", want "
                                  << want.to_display_string();
    }
}

// Spot checks that do not go through Value::operator==.
void spot_checks(const Fixture& fx) {
    const auto types = fx.out->at("tokenizer.ggml.token_type").as_int_array("t");
    const auto& tokens = fx.out->at("tokenizer.ggml.tokens").as_string_array("t");
    ASSERT_EQ(tokens.size(), 262144u);
    EXPECT_EQ(tokens[2], "<bos>");
    EXPECT_EQ(types[2], 3);
    EXPECT_EQ(types[100], 4);  // <|channel>
    EXPECT_EQ(tokens[100], "<|channel>");
    EXPECT_EQ(types[6], 1);  // <unused0>
    EXPECT_EQ(fx.out->at("tokenizer.ggml.merges").array_size(), 514906u);
    EXPECT_EQ(fx.out->get_u32("tokenizer.ggml.eos_token_id"), 1u);
    EXPECT_TRUE(fx.out->get_bool("tokenizer.ggml.add_bos_token"));
    EXPECT_FALSE(fx.out->has("tokenizer.ggml.pre"));
    for (float s : fx.out->at("tokenizer.ggml.scores").as_f32_array("s")) ASSERT_EQ(s, -1000.0f);
}

TEST(RoundTrip, ReproducesReferenceTokenizerKeys) {
    const Fixture& fx = fixture();
    {
        SCOPED_TRACE("key order");
        same_keys_in_same_order(fx);
    }
    {
        SCOPED_TRACE("values");
        every_value_equals_reference(fx);
    }
    {
        SCOPED_TRACE("spot checks");
        spot_checks(fx);
    }
}

}  // namespace

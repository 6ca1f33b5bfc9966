// `hf2q info` (tools/hf2q/cmd_info.cpp), run through the command registry on a small file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf_test_util.h"
#include "command.h"

namespace hf2q::cli {
std::vector<Command>& command_registry() {
    static std::vector<Command> r;
    return r;
}
}  // namespace hf2q::cli

using namespace hf2q;
using namespace hf2q::gguf;
using ::testing::HasSubstr;

namespace {

const cli::Command& info_command() {
    for (const auto& c : cli::command_registry())
        if (c.name == "info") return c;
    throw std::runtime_error("info command not registered");
}

std::string run_info(const std::vector<std::string>& args) {
    ::testing::internal::CaptureStdout();
    int rc = -1;
    try {
        rc = info_command().fn(args);
    } catch (...) {
        ::testing::internal::GetCapturedStdout();
        throw;
    }
    EXPECT_EQ(rc, 0);
    return ::testing::internal::GetCapturedStdout();
}

std::string write_sample(const gguf::testing::TempDir& dir) {
    Writer w;
    w.set("general.architecture", Value::string("gemma4"));
    w.set("general.file_type", Value::u32(15));
    std::vector<std::string> tokens;
    for (int i = 0; i < 100; ++i) tokens.push_back("tok" + std::to_string(i));
    w.set("tokenizer.ggml.tokens", Value::string_array(tokens));
    w.add_tensor("blk.0.ffn_up.weight", GgmlType::Q4_K, {256, 4});  // 1024 params, 576 bytes
    w.add_tensor("output_norm.weight", GgmlType::F32, {1, 2, 1, 3});  // 6 params, 24 bytes
    const std::string path = dir.file("sample.gguf");
    w.begin(path);
    std::vector<uint8_t> zeros(576);
    w.write_tensor_data(zeros.data(), 576);
    w.write_tensor_data(zeros.data(), 24);
    w.finish();
    return path;
}

}  // namespace

TEST(GgufInfoCommand, Text) {
    gguf::testing::TempDir dir;
    const std::string path = write_sample(dir);
    const std::string out = run_info({path});
    EXPECT_THAT(out, HasSubstr("version:     3"));
    EXPECT_THAT(out, HasSubstr("alignment:   32"));
    EXPECT_THAT(out, HasSubstr("15 (MOSTLY_Q4_K_M)"));
    EXPECT_THAT(out, HasSubstr("ARRAY[STRING]"));
    EXPECT_THAT(out, HasSubstr("\"tok7\", ... (92 more)]"));
    EXPECT_THAT(out, HasSubstr("[1, 2, 1, 3]"));
    EXPECT_THAT(out, HasSubstr("q4_K"));
    EXPECT_THAT(out, HasSubstr("parameters:      1.0 K (1030)"));
    EXPECT_THAT(out, HasSubstr("tensor bytes:    600"));
    EXPECT_THAT(run_info({path, "--no-tensors"}), ::testing::Not(HasSubstr("output_norm.weight")));
}

TEST(GgufInfoCommand, Json) {
    gguf::testing::TempDir dir;
    const std::string path = write_sample(dir);
    const auto j = nlohmann::json::parse(run_info({path, "--json", "--max-elems", "3"}));
    EXPECT_EQ(j["version"], 3);
    EXPECT_EQ(j["metadata"][1]["file_type_name"], "MOSTLY_Q4_K_M");
    EXPECT_EQ(j["metadata"][2]["count"], 100);
    EXPECT_EQ(j["metadata"][2]["values"].size(), 3u);
    EXPECT_EQ(j["metadata"][2]["truncated"], true);
    ASSERT_EQ(j["tensors"].size(), 2u);
    EXPECT_EQ(j["tensors"][1]["shape"], nlohmann::json({1, 2, 1, 3}));
    EXPECT_EQ(j["tensors"][1]["offset"], 576);
    EXPECT_EQ(j["totals"]["parameters"], 1030);
    EXPECT_EQ(j["totals"]["bytes"], 600);
    EXPECT_DOUBLE_EQ(j["totals"]["bits_per_weight"].get<double>(), 8.0 * 600 / 1030);
    const auto all = nlohmann::json::parse(run_info({path, "--json", "--max-elems", "0", "--no-tensors"}));
    EXPECT_EQ(all["metadata"][2]["values"].size(), 100u);
    EXPECT_FALSE(all.contains("tensors"));
}

TEST(GgufInfoCommand, BadFile) {
    gguf::testing::TempDir dir;
    { std::ofstream(dir.file("bad.gguf")) << "GGUF\x03"; }
    EXPECT_THAT([&] { run_info({dir.file("bad.gguf")}); },
                ::testing::ThrowsMessage<Error>(HasSubstr("truncated")));
    EXPECT_THROW(run_info({}), Error);  // missing FILE
}

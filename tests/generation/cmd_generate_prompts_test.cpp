// `hf2q generate --prompts` end to end: runs the built CLI on the fixture model
// (skipped when the CLI has not been built) and checks every request's JSON line
// against `hf2q generate --token-ids` run alone with the same seed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "generation/fixture.h"
#include "support/run_cli.h"

namespace hf2q::runtime {
namespace {

namespace fs = std::filesystem;
using namespace test;

using Result = hf2q::test::CliResult;

// Runs `hf2q generate <args>` with stderr discarded; returns exit code and stdout.
Result run(const std::string& args) { return hf2q::test::run_cli("generate", args); }

std::string ids_text(const std::vector<int32_t>& ids, const char* sep) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? sep : "") + std::to_string(ids[i]);
    return s;
}

class CmdGeneratePrompts : public ::testing::Test {
  protected:
    void SetUp() override {
        const std::string& cli = hf2q::test::hf2q_cli_path();
        if (!fs::exists(cli)) GTEST_SKIP() << cli << " not built";
    }
};

// Four requests (one with its own n_predict, one with its own seed and temperature),
// two at once, sampled: each line equals the request run alone with seed + its index
// (or its own settings), in request order.
TEST_F(CmdGeneratePrompts, EachRequestEqualsItsRunAlone) {
    fixture();  // converts the model
    const std::string model = (fs::path(HF2Q_BINARY_DIR) / "test-models" / "generation-moe-f32.gguf").string();
    const fs::path file = fs::path(HF2Q_BINARY_DIR) / "test-models" / "prompts-cli-test.txt";
    {
        std::ofstream f(file);
        for (size_t i = 0; i < fixture().prompts.size(); ++i) {
            f << "{\"token_ids\": [" << ids_text(fixture().prompts[i].ids, ", ") << "]"
              << (i == 2 ? ", \"n_predict\": 3" : "") << (i == 3 ? ", \"seed\": 77, \"temperature\": 0.5" : "")
              << "}\n";
            if (i == 0) f << "\n";  // a blank line is skipped
        }
    }
    const std::string common = "-m '" + model + "' -n 6 --temp 0.9 --seed 40 -t 2 --json ";
    const Result batch = run(common + "--prompts '" + file.string() + "' -np 2 --batch-tokens 5");
    ASSERT_EQ(batch.code, 0);
    std::istringstream lines(batch.out);
    std::string line;
    size_t i = 0;
    for (; std::getline(lines, line); ++i) {
        ASSERT_LT(i, fixture().prompts.size()) << line;
        const nlohmann::json got = nlohmann::json::parse(line);
        EXPECT_EQ(got["index"], i);
        EXPECT_EQ(got["line"], i == 0 ? 1 : i + 2);
        const std::string sampling = i == 3 ? "--temp 0.5 --seed 77" : "--temp 0.9 --seed " + std::to_string(40 + i);
        const std::string alone_args = "-m '" + model + "' -n " + (i == 2 ? "3" : "6") + " -t 2 --json " + sampling +
                                       " --token-ids " + ids_text(fixture().prompts[i].ids, ",");
        const Result alone = run(alone_args);
        ASSERT_EQ(alone.code, 0);
        const nlohmann::json want = nlohmann::json::parse(alone.out);
        EXPECT_EQ(got["prompt_tokens"], want["prompt_tokens"]) << "request " << i;
        EXPECT_EQ(got["generated_tokens"], want["generated_tokens"]) << "request " << i;
        EXPECT_EQ(got["finish_reason"], "length");
    }
    EXPECT_EQ(i, fixture().prompts.size());
}

// A conversation line on a model with the real vocabulary and chat template
// (`hf2q synth --preset tiny --vocab-from`): its prompt is what `hf2q template` renders
// for the same messages, tokenized as `hf2q tokenize -f` does, and its JSON line
// carries the parsed reply (content, reasoning, tool calls) as hf2q chat shows it.
TEST_F(CmdGeneratePrompts, ConversationsUseTheChatTemplate) {
    const fs::path dir = fs::path(HF2Q_BINARY_DIR) / "test-models";
    fs::create_directories(dir);
    const std::string model = (dir / "prompts-chat-tiny.gguf").string();
    const std::string vocab = std::string(HF2Q_TESTDATA_DIR) + "/tokenizer/ggml-vocab-gemma-4.gguf";
    if (!fs::exists(vocab)) GTEST_SKIP() << vocab << " not found (the shared test data)";
    ASSERT_EQ(hf2q::test::run_cli("synth", "--preset tiny --quant q8_0 --seed 1 --force --vocab-from '" + vocab +
                                               "' -o '" + model + "'")
                  .code,
              0);
    const std::string messages =
        R"([{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Why is the sky blue?"}])";
    const fs::path file = dir / "prompts-chat.txt";
    std::ofstream(file) << R"({"messages": )" << messages << R"(, "n_predict": 3})" << "\n";
    const Result r = run("-m '" + model + "' -t 2 --json --prompts '" + file.string() + "'");
    ASSERT_EQ(r.code, 0);
    const nlohmann::json got = nlohmann::json::parse(r.out);
    EXPECT_EQ(got["generated_tokens"].size(), 3u);
    EXPECT_TRUE(got.contains("content") && got.contains("reasoning") && got["tool_calls"].is_array());

    const fs::path ctx = dir / "prompts-chat-context.json";
    std::ofstream(ctx) << R"({"messages": )" << messages
                       << R"(, "add_generation_prompt": true, "enable_thinking": false, "bos_token": "<bos>", )"
                       << R"("eos_token": "<eos>"})";
    const Result rendered = hf2q::test::run_cli("template", "-m '" + model + "' --context '" + ctx.string() + "'");
    ASSERT_EQ(rendered.code, 0);
    const fs::path text = dir / "prompts-chat-rendered.txt";
    std::ofstream(text, std::ios::binary) << rendered.out;
    const Result ids = hf2q::test::run_cli("tokenize", "-m '" + model + "' --no-escape -f '" + text.string() + "'");
    ASSERT_EQ(ids.code, 0);
    EXPECT_EQ(got["prompt_tokens"], nlohmann::json::parse(ids.out));
}

TEST_F(CmdGeneratePrompts, RefusesBadCombinations) {
    fixture();
    const fs::path model = fs::path(HF2Q_BINARY_DIR) / "test-models" / "generation-moe-f32.gguf";
    const std::string m = "-m '" + model.string() + "' ";
    const fs::path file = fs::path(HF2Q_BINARY_DIR) / "test-models" / "prompts-cli-bad.txt";
    std::ofstream(file) << "text needs a tokenizer\n";
    for (const std::string& args :
         {m + "--prompts '" + file.string() + "'", m + "--prompts /nonexistent.txt", m + "--token-ids 2 -np 2",
          m + "--prompts '" + file.string() + "' --token-ids 2", m + "--prompts '" + file.string() + "' -np -1",
          m + "--prompts '" + file.string() + "' --dump-logits /tmp/x"}) {
        const Result r = run(args);
        EXPECT_EQ(r.code, 1) << args;
        EXPECT_EQ(r.out, "") << args;
    }
}

}  // namespace
}  // namespace hf2q::runtime

// `hf2q tokenize` end to end: runs the built CLI (skipped when it has not been built).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "support/run_cli.h"

namespace {

const std::string kVocab = std::string(HF2Q_TESTDATA_DIR) + "/tokenizer/ggml-vocab-gemma-4.gguf";

using Result = hf2q::test::CliResult;

// Runs `hf2q tokenize <args>` with stderr discarded; returns exit code and stdout.
Result run(const std::string& args) { return hf2q::test::run_cli("tokenize", args); }

class CmdTokenize : public ::testing::Test {
  protected:
    void SetUp() override {
        const std::string& cli = hf2q::test::hf2q_cli_path();
        if (!std::filesystem::exists(cli)) GTEST_SKIP() << cli << " not built";
    }
};

TEST_F(CmdTokenize, PrintsOneJsonArray) {
    const std::string m = "-m '" + kVocab + "' ";
    EXPECT_EQ(run(m + "-p 'Hello world'").out, "[9259, 1902]\n");
    EXPECT_EQ(run(m + "-p 'Hello world' --add-bos").out, "[2, 9259, 1902]\n");
    EXPECT_EQ(run(m + "-p '<|turn>user'").out, "[105, 2364]\n");
    EXPECT_EQ(run(m + "-p '<|turn>user' --no-parse-special").out,
              "[236820, 236909, 887, 236813, 2364]\n");
    EXPECT_EQ(run(m + "-p ''").out, "[]\n");
    // Backslash escapes are processed as llama-tokenize does, unless --no-escape.
    EXPECT_EQ(run(m + "-p 'a\\nb'").out, "[236746, 107, 236763]\n");
    EXPECT_EQ(run(m + "-p 'a\\nb' --no-escape").out, "[236746, 236785, 7814]\n");
}

TEST_F(CmdTokenize, ErrorsExitWithOneAndPrintNothing) {
    Result r = run("-m '" + kVocab + "'");  // neither -p nor -f
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.out, "");
    r = run("-m /nonexistent.gguf -p x");
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.out, "");
}

}  // namespace

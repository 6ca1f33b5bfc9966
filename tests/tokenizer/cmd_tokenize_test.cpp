// `hf2q tokenize` end to end: runs the built CLI (skipped when it has not been built).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace {

const std::string kHf2q = std::string(HF2Q_BINARY_DIR) + "/bin/hf2q";
const std::string kVocab = std::string(HF2Q_TESTDATA_DIR) + "/tokenizer/ggml-vocab-gemma-4.gguf";

struct Result {
    int code;
    std::string out;
};

// Runs `hf2q tokenize <args>` with stderr discarded; returns exit code and stdout.
Result run(const std::string& args) {
    const std::string cmd = "'" + kHf2q + "' tokenize " + args + " 2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return {-1, ""};
    std::string out;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    const int status = pclose(p);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

class CmdTokenize : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!std::filesystem::exists(kHf2q)) GTEST_SKIP() << kHf2q << " not built";
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

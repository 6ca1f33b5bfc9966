// The requests file of `hf2q generate --prompts` (tools/hf2q/prompts_file.h).
#include "prompts_file.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace hf2q::cli {
namespace {

TEST(PromptsFile, EveryLineForm) {
    const std::vector<PromptLine> p = parse_prompts(
        "Hello there\n"
        "\n"
        "  \t \r\n"
        "\"two\\nlines \\u00e9\"\r\n"
        "{\"prompt\": \"Why?\", \"n_predict\": 4}\n"
        "  {\"token_ids\": [2, 818, 5279], \"n_predict\": -1}\n"
        "[1, 2] stays text\n"
        "last line without a newline");
    ASSERT_EQ(p.size(), 6u);
    EXPECT_EQ(p[0].line, 1u);
    EXPECT_EQ(*p[0].text, "Hello there");
    EXPECT_FALSE(p[0].n_predict);
    EXPECT_EQ(p[1].line, 4u);
    EXPECT_EQ(*p[1].text, "two\nlines \xC3\xA9");
    EXPECT_EQ(*p[2].text, "Why?");
    EXPECT_EQ(*p[2].n_predict, 4);
    EXPECT_FALSE(p[3].text);
    EXPECT_EQ(p[3].token_ids, (std::vector<int32_t>{2, 818, 5279}));
    EXPECT_EQ(*p[3].n_predict, -1);
    EXPECT_EQ(*p[4].text, "[1, 2] stays text");
    EXPECT_EQ(p[5].line, 8u);
    EXPECT_EQ(*p[5].text, "last line without a newline");
    EXPECT_EQ(*parse_prompts("\"\"")[0].text, "") << "an empty JSON string is a prompt (the BOS alone)";
}

TEST(PromptsFile, PerRequestSampling) {
    const std::vector<PromptLine> p = parse_prompts(
        "{\"prompt\": \"a\", \"temperature\": 0.5, \"top_k\": 40, \"top_p\": 0.9, \"min_p\": 0.05, \"seed\": "
        "18446744073709551615, \"stop\": [\"\\n\", \"END\"]}\n"
        "{\"prompt\": \"b\", \"stop\": \"x\", \"temperature\": 0}\n"
        "{\"prompt\": \"c\"}\n");
    ASSERT_EQ(p.size(), 3u);
    EXPECT_EQ(*p[0].temperature, 0.5f);
    EXPECT_EQ(*p[0].top_k, 40);
    EXPECT_EQ(*p[0].top_p, 0.9f);
    EXPECT_EQ(*p[0].min_p, 0.05f);
    EXPECT_EQ(*p[0].seed, 18446744073709551615ull);
    EXPECT_EQ(*p[0].stop, (std::vector<std::string>{"\n", "END"}));
    EXPECT_EQ(*p[1].stop, std::vector<std::string>{"x"});
    EXPECT_EQ(*p[1].temperature, 0.0f);
    EXPECT_FALSE(p[2].temperature || p[2].top_k || p[2].top_p || p[2].min_p || p[2].seed || p[2].stop);
}

TEST(PromptsFile, Conversations) {
    const std::vector<PromptLine> p = parse_prompts(
        "{\"messages\": [{\"role\": \"system\", \"content\": \"Be terse.\"}, {\"role\": \"user\", \"content\": "
        "\"Hi\"}], \"enable_thinking\": true, \"n_predict\": 8}\n"
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}], \"tools\": [{\"type\": \"function\"}]}\n");
    ASSERT_EQ(p.size(), 2u);
    ASSERT_TRUE(p[0].messages);
    EXPECT_EQ(p[0].messages->size(), 2u);
    EXPECT_EQ((*p[0].messages)[1]["content"], "Hi");
    EXPECT_EQ(p[0].messages->front().begin().key(), "role") << "keys keep their order";
    EXPECT_TRUE(p[0].enable_thinking);
    EXPECT_EQ(*p[0].n_predict, 8);
    EXPECT_FALSE(p[0].tools);
    EXPECT_FALSE(p[0].text);
    EXPECT_FALSE(p[1].enable_thinking);
    ASSERT_TRUE(p[1].tools);
    EXPECT_EQ(p[1].tools->size(), 1u);
}

TEST(PromptsFile, BadLinesNameTheLineAndTheFault) {
    const std::pair<std::string, std::string> cases[] = {
        {"", "holds no request"},
        {"\n \n\t\n", "holds no request"},
        {"ok\n{\"prompt\": 1}", "line 2: \"prompt\" must be a string, not number"},
        {"{\"x\": 1}", "line 1: unknown key \"x\""},
        {"{}", "line 1: give exactly one of \"prompt\", \"token_ids\" and \"messages\""},
        {"{\"messages\": []}", "\"messages\" must be a non-empty array"},
        {"{\"messages\": \"hi\"}", "\"messages\" must be a non-empty array"},
        {"{\"messages\": [\"hi\"]}", "a message must be an object, not \"hi\""},
        {"{\"messages\": [{}], \"prompt\": \"a\"}", "give exactly one of"},
        {"{\"messages\": [{}], \"enable_thinking\": 1}", "\"enable_thinking\" must be true or false, not 1"},
        {"{\"messages\": [{}], \"tools\": {}}", "\"tools\" must be an array"},
        {"{\"prompt\": \"a\", \"enable_thinking\": false}", "go with \"messages\""},
        {"{\"prompt\": \"a\", \"tools\": []}", "go with \"messages\""},
        {"{\"prompt\": \"a\", \"temperature\": \"hot\"}", "\"temperature\" must be a number, not \"hot\""},
        {"{\"prompt\": \"a\", \"top_p\": 1e300}", "\"top_p\" 1e+300 is not a finite float"},
        {"{\"prompt\": \"a\", \"top_k\": -1}", "\"top_k\" -1 is out of range [0, 2^31)"},
        {"{\"prompt\": \"a\", \"seed\": -1}", "\"seed\" must be an integer in [0, 2^64), not -1"},
        {"{\"prompt\": \"a\", \"seed\": 1.5}", "\"seed\" must be an integer"},
        {"{\"prompt\": \"a\", \"stop\": 3}", "\"stop\" must be a string or an array of them, not 3"},
        {"{\"prompt\": \"a\", \"stop\": [\"x\", 3]}", "a stop string must be a string, not 3"},
        {"{\"prompt\": \"a\", \"token_ids\": [1]}", "give exactly one of"},
        {"{\"token_ids\": []}", "\"token_ids\" is empty"},
        {"{\"token_ids\": 5}", "\"token_ids\" must be an array, not number"},
        {"{\"token_ids\": [1.5]}", "a token id must be an integer, not 1.5"},
        {"{\"token_ids\": [-1]}", "a token id -1 is out of range [0, 2^31)"},
        {"{\"token_ids\": [2147483648]}", "a token id 2147483648 is out of range"},
        {"{\"token_ids\": [18446744073709551615]}", "a token id 18446744073709551615 is out of range"},
        {"{\"token_ids\": [\"7\"]}", "a token id must be an integer, not \"7\""},
        {"{\"prompt\": \"a\", \"n_predict\": -2}", "\"n_predict\" -2 is out of range [-1, 2^31)"},
        {"{\"prompt\": \"a\", \"n_predict\": true}", "\"n_predict\" must be an integer, not true"},
        {"\"unterminated", "line 1: not valid JSON"},
        {"{\"prompt\": \"a\"} trailing", "not valid JSON"},
        {"\"\\xff\"", "not valid JSON"},
    };
    for (const auto& [text, want] : cases) {
        try {
            parse_prompts(text);
            ADD_FAILURE() << "accepted: " << text;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << text << " -> " << e.what();
        }
    }
    EXPECT_EQ(*parse_prompts("\"a\" \t")[0].text, "a");
}

}  // namespace
}  // namespace hf2q::cli

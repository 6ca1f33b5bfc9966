// The official Gemma 4 chat templates rendered over the conversations in
// testdata/templates/gemma4-renders.jsonl; expected strings come from transformers'
// apply_chat_template and must match byte for byte.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/jinja/template.h"

namespace {

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    EXPECT_TRUE(f.good()) << "cannot open " << path;
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

const std::string kDir = std::string(HF2Q_TESTDATA_DIR) + "/templates/";

struct RenderCase {
    std::string template_file, name;
    nlohmann::ordered_json context;
    std::string expected;
};

std::vector<RenderCase> load_cases() {
    std::vector<RenderCase> cases;
    std::ifstream f(kDir + "gemma4-renders.jsonl");
    std::string line;
    while (std::getline(f, line)) {
        if (line.empty()) continue;
        auto j = nlohmann::ordered_json::parse(line);
        RenderCase c{j["template"], j["case"], j["context"], j["output"]};
        c.context["bos_token"] = "<bos>";
        c.context["eos_token"] = "<eos>";
        cases.push_back(std::move(c));
    }
    return cases;
}

TEST(JinjaGemma4, AllReferenceRendersMatch) {
    auto cases = load_cases();
    ASSERT_EQ(cases.size(), 28u);
    int checked = 0;
    for (const auto& c : cases) {
        SCOPED_TRACE(c.template_file + " / " + c.name);
        auto t = hf2q::jinja::Template::parse(read_file(kDir + c.template_file), c.template_file);
        EXPECT_EQ(t.render(c.context), c.expected);
        ++checked;
    }
    EXPECT_EQ(checked, 28);
}

TEST(JinjaGemma4, BothTemplatesCovered) {
    auto cases = load_cases();
    int plain = 0, interleaved = 0;
    for (const auto& c : cases) {
        plain += c.template_file == "google-gemma-4-31B-it.jinja";
        interleaved += c.template_file == "google-gemma-4-31B-it-interleaved.jinja";
    }
    EXPECT_EQ(plain, 14);
    EXPECT_EQ(interleaved, 14);
}

// A changed message must change the output: guards against a renderer that ignores
// the context.
TEST(JinjaGemma4, OutputFollowsContext) {
    auto t = hf2q::jinja::Template::parse(read_file(kDir + "google-gemma-4-31B-it.jinja"));
    nlohmann::ordered_json ctx = {{"bos_token", "<bos>"},
                                  {"messages", {{{"role", "user"}, {"content", "ping"}}}},
                                  {"add_generation_prompt", true}};
    EXPECT_EQ(t.render(ctx),
              "<bos><|turn>user\nping<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
    ctx["messages"][0]["content"] = "pong";
    EXPECT_NE(t.render(ctx).find("pong"), std::string::npos);
}

}  // namespace

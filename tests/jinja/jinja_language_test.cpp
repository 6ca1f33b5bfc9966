// Language constructs, whitespace control and error reporting.
//
// reference_cases.json holds small templates with the output Python jinja2 3.1.6
// produced for them under transformers' settings (see gen_reference_cases.py); the
// hand-written tests below pin the rules that matter most for chat templates.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "tokenizer/jinja/template.h"

namespace {

using hf2q::jinja::Template;
using Json = nlohmann::ordered_json;

std::string render(const std::string& tpl, const Json& ctx = Json::object()) {
    return Template::parse(tpl).render(ctx);
}

// Message of the hf2q::Error thrown by parsing or rendering `tpl` ("" if none).
std::string error_of(const std::string& tpl, const Json& ctx = Json::object()) {
    try {
        render(tpl, ctx);
    } catch (const hf2q::Error& e) {
        return e.what();
    }
    return "";
}

TEST(JinjaReference, MatchesPythonJinja2) {
    std::ifstream f(std::string(HF2Q_SOURCE_DIR) + "/tests/jinja/reference_cases.json");
    ASSERT_TRUE(f.good());
    Json cases = Json::parse(f);
    ASSERT_GE(cases.size(), 60u);
    for (const auto& c : cases) {
        SCOPED_TRACE(c["name"].get<std::string>() + ": " + c["template"].get<std::string>());
        std::string out;
        try {
            out = render(c["template"], c["context"]);
        } catch (const hf2q::Error& e) {
            ADD_FAILURE() << "threw: " << e.what();
            continue;
        }
        EXPECT_EQ(out, c["expected"].get<std::string>());
    }
}

TEST(JinjaWhitespace, TrimBlocksRemovesOneNewlineAfterBlockTags) {
    EXPECT_EQ(render("{% if true %}\nA\n{% endif %}\nB"), "A\nB");
    EXPECT_EQ(render("{% if true %}\n\nA{% endif %}"), "\nA");
    // Not after variable tags.
    EXPECT_EQ(render("{{ 'x' }}\ny"), "x\ny");
    // "+%}" keeps the newline.
    EXPECT_EQ(render("{% if true +%}\nA{% endif %}"), "\nA");
}

TEST(JinjaWhitespace, LstripBlocksOnlyBeforeBlockTagsAtLineStart) {
    EXPECT_EQ(render("  {% if true %}A{% endif %}"), "A");
    EXPECT_EQ(render("x\n \t {% if true %}A{% endif %}"), "x\nA");
    EXPECT_EQ(render("x  {% if true %}A{% endif %}"), "x  A");  // not at line start
    EXPECT_EQ(render("  {{ 'v' }}"), "  v");                    // never before {{
    EXPECT_EQ(render("  {%+ if true %}A{% endif %}"), "  A");   // "{%+" disables it
    EXPECT_EQ(render("\n   {# c #}\nB"), "\nB");                // comments too
}

TEST(JinjaWhitespace, MinusStripsAllWhitespace) {
    EXPECT_EQ(render("a \n\t {{- 'b' -}} \n\n c"), "abc");
    EXPECT_EQ(render("a\n\n{%- if true -%}\n\n b {%- endif %}"), "ab");
    EXPECT_EQ(render("a  {#- note -#}  b"), "ab");
}

TEST(JinjaWhitespace, TrailingNewlineAndLineEndings) {
    EXPECT_EQ(render("x\n"), "x");
    EXPECT_EQ(render("x\n\n"), "x\n");
    EXPECT_EQ(render("a\r\nb\rc"), "a\nb\nc");
}

TEST(JinjaStatements, LoopControlsAndElse) {
    EXPECT_EQ(render("{% for i in range(6) %}{% if i is odd %}{% continue %}{% endif %}{% if i > 3 "
                     "%}{% break %}{% endif %}{{ i }}{% endfor %}"),
              "02");
    EXPECT_EQ(render("{% for i in [] %}x{% else %}none{% endfor %}"), "none");
    EXPECT_EQ(render("{% for i in [1, 2, 3] if i > 5 %}x{% else %}filtered{% endfor %}"),
              "filtered");
}

TEST(JinjaStatements, NamespaceSurvivesLoopScopeButSetDoesNot) {
    EXPECT_EQ(render("{% set n = namespace(c=0) %}{% set x = 0 %}{% for i in range(4) %}{% set n.c "
                     "= n.c + i %}"
                     "{% set x = x + i %}{% endfor %}{{ n.c }},{{ x }}"),
              "6,0");
    EXPECT_NE(error_of("{% set d = {} %}{% set d.x = 1 %}").find("non-namespace"),
              std::string::npos);
}

TEST(JinjaStatements, MacroArguments) {
    const std::string m = "{% macro f(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}";
    EXPECT_EQ(render(m + "{{ f(1) }} {{ f(1, 3) }} {{ f(b=5, a=4) }} {{ f() }}"), "1-2 1-3 4-5 -2");
    EXPECT_NE(error_of(m + "{{ f(1, 2, 3) }}").find("takes not more than 2"), std::string::npos);
    EXPECT_NE(error_of(m + "{{ f(c=1) }}").find("no keyword argument 'c'"), std::string::npos);
}

TEST(JinjaStatements, UndefinedSemantics) {
    EXPECT_EQ(render("[{{ missing }}]{{ missing is defined }}{% for x in missing %}x{% endfor %}"
                     "{{ missing | length }}{{ d.nope }}{{ d['nope'] is undefined }}",
                     Json{{"d", Json::object()}}),
              "[]False0True");
    EXPECT_NE(error_of("{{ missing.attr }}").find("'missing' is undefined"), std::string::npos);
    EXPECT_NE(error_of("{{ missing + 1 }}").find("'missing' is undefined"), std::string::npos);
    EXPECT_NE(error_of("{{ d.a.b }}", Json{{"d", Json::object()}}).find("has no attribute 'a'"),
              std::string::npos);
    EXPECT_NE(error_of("{{ missing() }}").find("'missing' is undefined"), std::string::npos);
}

TEST(JinjaStatements, InsertionOrderFollowsInput) {
    Json ctx = Json::parse(R"({"d": {"z": 1, "a": 2, "m": 3}})");
    EXPECT_EQ(render("{% for k in d %}{{ k }}{% endfor %} {{ d | tojson }}", ctx),
              R"(zam {"z": 1, "a": 2, "m": 3})");
    EXPECT_EQ(render("{% for k, v in d | dictsort %}{{ k }}{% endfor %}", ctx), "amz");
}

TEST(JinjaErrors, SyntaxErrorsNameLineAndColumn) {
    std::string e = error_of("a\n{% if x %}\nb\n{% endif %}\n{% endif %}");
    EXPECT_EQ(e.rfind("template:5:", 0), 0u) << e;
    EXPECT_NE(e.find("unexpected 'endif'"), std::string::npos) << e;

    e = error_of("line1\n{% for x in y %}\nno end");
    EXPECT_NE(e.find("missing '{% endfor %}'"), std::string::npos) << e;

    e = error_of("{{ 1 +* 2 }}");
    EXPECT_EQ(e.rfind("template:1:", 0), 0u) << e;

    EXPECT_NE(error_of("\n\n{{ x | nosuchfilter }}").find("template:3:"), std::string::npos);
    EXPECT_NE(error_of("{{ x | nosuchfilter }}").find("no filter named 'nosuchfilter'"),
              std::string::npos);
    EXPECT_NE(error_of("{% if x is nosuchtest %}{% endif %}").find("no test named"),
              std::string::npos);
    EXPECT_NE(error_of("{{ 'abc }}").find("unterminated string"), std::string::npos);
    EXPECT_NE(error_of("{% include 'x' %}").find("unknown tag 'include'"), std::string::npos);
    EXPECT_NE(error_of("{% break %}").find("outside of a loop"), std::string::npos);
    EXPECT_NE(error_of("{{ x ").find("unterminated"), std::string::npos);
}

TEST(JinjaErrors, RuntimeErrorsNameTheLine) {
    std::string e = error_of("ok\nok\n  {{ 1 + 'a' }}");
    EXPECT_EQ(e.rfind("template:3:", 0), 0u) << e;
    EXPECT_NE(e.find("unsupported operand type(s) for +: 'int' and 'str'"), std::string::npos) << e;

    e = error_of("\n{{ raise_exception('Conversation roles must alternate') }}");
    EXPECT_EQ(e.rfind("template:2:", 0), 0u) << e;
    EXPECT_NE(e.find("Conversation roles must alternate"), std::string::npos) << e;

    EXPECT_NE(error_of("{{ 1 / 0 }}").find("division by zero"), std::string::npos);
    EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("overflow"), std::string::npos);
    EXPECT_NE(error_of("{% set a, b = [1] %}").find("not enough values to unpack"),
              std::string::npos);
}

TEST(JinjaErrors, TemplateNameInMessages) {
    try {
        Template::parse("{% endfor %}", "chat_template");
        FAIL() << "no error";
    } catch (const hf2q::Error& e) {
        EXPECT_EQ(std::string(e.what()).rfind("chat_template:1:", 0), 0u) << e.what();
    }
}

TEST(JinjaContext, PlainJsonAndNonObjectContext) {
    auto t = Template::parse("{{ a }}{{ b | tojson }}");
    nlohmann::json ctx = {{"a", 1}, {"b", {{"y", 2}, {"x", 1}}}};
    EXPECT_EQ(t.render(ctx), R"(1{"x": 1, "y": 2})");  // nlohmann::json sorts keys
    EXPECT_THROW(t.render(Json::array()), hf2q::Error);
}

}  // namespace

// Filters, tests, methods and value printing whose exact bytes matter for prompts:
// tojson (Python json.dumps), float repr, Unicode-aware strip/length.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "tokenizer/jinja/template.h"
#include "tokenizer/jinja/value.h"

namespace {

using Json = nlohmann::ordered_json;

std::string render(const std::string& tpl, const Json& ctx = Json::object()) {
    return hf2q::jinja::Template::parse(tpl).render(ctx);
}

TEST(JinjaToJson, PythonSeparatorsAndNonAscii) {
    Json ctx = Json::parse(
        R"({"v": {"name": "Zürich 你好 🦙", "n": [1, 2.5, null, true], "e": {}, "l": []}})");
    EXPECT_EQ(render("{{ v | tojson }}", ctx),
              R"({"name": "Zürich 你好 🦙", "n": [1, 2.5, null, true], "e": {}, "l": []})");
}

TEST(JinjaToJson, IndentUsesCommaWithoutSpace) {
    Json ctx = Json::parse(R"({"v": {"a": [1, {"b": "x"}], "c": []}})");
    EXPECT_EQ(render("{{ v | tojson(indent=2) }}", ctx),
              "{\n  \"a\": [\n    1,\n    {\n      \"b\": \"x\"\n    }\n  ],\n  \"c\": []\n}");
}

TEST(JinjaToJson, EscapesLikeJsonDumps) {
    Json ctx = {{"s", std::string("q\" b\\ n\n t\t c\x01 d\x7f <&>'")}};
    EXPECT_EQ(render("{{ s | tojson }}", ctx), "\"q\\\" b\\\\ n\\n t\\t c\\u0001 d\x7f <&>'\"");
    EXPECT_EQ(render("{{ 'é😀' | tojson(ensure_ascii=true) }}"), "\"\\u00e9\\ud83d\\ude00\"");
    EXPECT_EQ(render("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}"), R"({"a": 2, "b": 1})");
}

TEST(JinjaToJson, FloatsAndUnserialisable) {
    EXPECT_EQ(render("{{ [1.0, 0.1, 1e-7, 1e16, 123.456, -0.0] | tojson }}"),
              "[1.0, 0.1, 1e-07, 1e+16, 123.456, -0.0]");
    EXPECT_THROW(render("{{ missing | tojson }}"), hf2q::Error);
    EXPECT_THROW(render("{{ namespace(a=1) | tojson }}"), hf2q::Error);
}

TEST(JinjaValues, PythonFloatRepr) {
    using hf2q::jinja::py_float_repr;
    EXPECT_EQ(py_float_repr(1.0), "1.0");
    EXPECT_EQ(py_float_repr(0.1 + 0.2), "0.30000000000000004");
    EXPECT_EQ(py_float_repr(1e16), "1e+16");
    EXPECT_EQ(py_float_repr(1234567890123456.0), "1234567890123456.0");
    EXPECT_EQ(py_float_repr(0.0001), "0.0001");
    EXPECT_EQ(py_float_repr(0.00001), "1e-05");
    EXPECT_EQ(py_float_repr(-2.5e-300), "-2.5e-300");
    EXPECT_EQ(py_float_repr(1.0 / 0.0), "inf");
}

TEST(JinjaValues, PrintingFollowsPythonStr) {
    EXPECT_EQ(
        render("{{ none }} {{ true }} {{ [none, false, 'it\\'s', \"a\\\"b\"] }} {{ {'k': (1,)} }}"),
        "None True [None, False, \"it's\", 'a\"b'] {'k': (1,)}");
}

TEST(JinjaFilters, TrimAndLengthAreUnicodeAware) {
    Json ctx = {{"s", "\u3000\u00a0 h\u00e9llo \u2003\n"}};
    EXPECT_EQ(render("[{{ s | trim }}] {{ s | trim | length }}", ctx), "[h\u00e9llo] 5");
    EXPECT_EQ(render("{{ 'ÄÖü' | lower }} {{ 'éa' | upper }} {{ 'привет' | upper }}"),
              "äöü ÉA ПРИВЕТ");
}

TEST(JinjaFilters, DefaultOnlyReplacesUndefinedUnlessBoolean) {
    EXPECT_EQ(render("{{ none | default('x') }}|{{ false | default('x') }}|{{ false | default('x', "
                     "true) }}|{{ nope | d('y') }}"),
              "None|False|x|y");
}

TEST(JinjaFilters, DictsortIsCaseInsensitiveByDefault) {
    Json ctx = Json::parse(R"({"d": {"b": 1, "A": 2, "a": 3, "C": 4}})");
    EXPECT_EQ(render("{% for k, v in d | dictsort %}{{ k }}{% endfor %}", ctx), "AabC");
    EXPECT_EQ(render("{% for k, v in d | dictsort(true) %}{{ k }}{% endfor %}", ctx), "ACab");
}

TEST(JinjaFilters, MapSelectJoin) {
    Json ctx = Json::parse(
        R"({"tools": [{"n": "a", "on": true}, {"n": "b", "on": false}, {"n": "c", "on": true}]})");
    EXPECT_EQ(render("{{ tools | selectattr('on') | map(attribute='n') | join(', ') }}", ctx),
              "a, c");
    EXPECT_EQ(render("{{ tools | rejectattr('on') | map(attribute='n') | list }}", ctx), "['b']");
    EXPECT_EQ(render("{{ ['x', 'Y'] | map('upper') | join }}"), "XY");
    EXPECT_EQ(render("{{ [1, 2, 3, 4, 5] | select('divisibleby', 2) | list }}"), "[2, 4]");
}

TEST(JinjaTests, TypeTests) {
    Json ctx =
        Json::parse(R"({"s": "x", "m": {}, "l": [], "i": 1, "f": 1.5, "b": true, "z": null})");
    EXPECT_EQ(
        render(
            "{{ s is string }}{{ m is mapping }}{{ l is sequence }}{{ m is sequence }}{{ i is "
            "integer }}"
            "{{ f is float }}{{ b is boolean }}{{ b is integer }}{{ z is none }}{{ i is number }}",
            ctx),
        "TrueTrueTrueTrueTrueTrueTrueFalseTrueTrue");
    EXPECT_EQ(render("{{ 4 is even }}{{ 4 is odd }}{{ 10 is divisibleby 5 }}{{ 'a' is in 'cat' "
                     "}}{{ 1 is ne 1 }}"),
              "TrueFalseTrueTrueFalse");
}

TEST(JinjaMethods, StringAndDictMethods) {
    EXPECT_EQ(render("{{ 'a<|x|>b<|x|>c'.split('<|x|>') }}"), "['a', 'b', 'c']");
    EXPECT_EQ(render("{{ 'text<channel|>'.split('<channel|>')[0] }}|{{ ' x '.strip() }}|{{ "
                     "'abc'.startswith('a') }}"),
              "text|x|True");
    EXPECT_EQ(render("{{ {'a': 1}.get('b', 'none') }}{{ {'a': 1}.get('a') }}"), "none1");
    // The sandbox offers no mutating methods.
    EXPECT_THROW(render("{% set l = [] %}{{ l.append(1) }}"), hf2q::Error);
    EXPECT_THROW(render("{{ {}.update({'a': 1}) }}"), hf2q::Error);
    EXPECT_THROW(render("{{ ''.__class__ }}{{ ''.__class__() }}"), hf2q::Error);
}

TEST(JinjaGlobals, StrftimeNowAndRange) {
    std::string year = render("{{ strftime_now('%Y') }}");
    ASSERT_EQ(year.size(), 4u);
    EXPECT_GE(std::stoi(year), 2024);
    EXPECT_EQ(render("{{ range(3, 0, -1) | list }}{{ range(0) | list }}"), "[3, 2, 1][]");
}

}  // namespace

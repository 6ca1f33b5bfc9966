// Sandbox limits: runaway templates fail fast with a clear hf2q::Error instead of
// exhausting time, memory or the stack.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "tokenizer/jinja/template.h"

namespace {

using hf2q::jinja::RenderLimits;
using hf2q::jinja::Template;
using Json = nlohmann::ordered_json;

// Generous wall time so that a loaded CI machine does not turn other limits into
// timeouts; WallTime tests the time limit itself.
RenderLimits relaxed() {
    RenderLimits lim;
    lim.max_seconds = 60;
    return lim;
}

// Renders and returns the error message, checking that it came reasonably quickly.
std::string limit_error(const std::string& tpl, const RenderLimits& limits = relaxed()) {
    auto start = std::chrono::steady_clock::now();
    std::string msg;
    try {
        Template::parse(tpl).render(Json::object(), limits);
    } catch (const hf2q::Error& e) {
        msg = e.what();
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(s, 30.0) << tpl;
    return msg;
}

TEST(JinjaLimits, HugeRangeFailsBeforeAllocating) {
    std::string e = limit_error("{% for i in range(10**9) %}x{% endfor %}");
    EXPECT_NE(e.find("render limit exceeded"), std::string::npos) << e;
    EXPECT_NE(e.find("1000000000 items"), std::string::npos) << e;
}

TEST(JinjaLimits, TotalIterationsAreCounted) {
    RenderLimits lim = relaxed();
    lim.max_iterations = 1000;
    std::string e = limit_error(
        "{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", lim);
    EXPECT_NE(e.find("more than 1000 loop iterations"), std::string::npos) << e;
    // Just under the limit renders.
    EXPECT_EQ(Template::parse(
                  "{% for i in range(10) %}{% for j in range(10) %}{% endfor %}{% endfor %}ok")
                  .render(Json::object(), lim),
              "ok");
}

TEST(JinjaLimits, InfiniteMacroRecursion) {
    std::string e = limit_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    EXPECT_NE(e.find("render limit exceeded"), std::string::npos) << e;
    EXPECT_NE(e.find("nested deeper than 100"), std::string::npos) << e;
    EXPECT_EQ(e.rfind("template:1:", 0), 0u) << e;
}

TEST(JinjaLimits, OutputBlowUp) {
    std::string e = limit_error("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}");
    EXPECT_NE(e.find("output larger than 16777216 bytes"), std::string::npos) << e;

    RenderLimits lim = relaxed();
    lim.max_output_bytes = 100;
    e = limit_error("{{ 'x' * 101 }}", lim);
    EXPECT_NE(e.find("string of 101 bytes"), std::string::npos) << e;
    EXPECT_EQ(Template::parse("{{ 'x' * 100 }}").render(Json::object(), lim),
              std::string(100, 'x'));
}

TEST(JinjaLimits, DoublingStringsAndSharedLists) {
    std::string e = limit_error(
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% "
        "endfor %}");
    EXPECT_NE(e.find("render limit exceeded"), std::string::npos) << e;
    // [a, a] shares a: cheap to build, exponential to print; the weight check stops it.
    e = limit_error(
        "{% set ns = namespace(a=[1]) %}{% for i in range(64) %}{% set ns.a = [ns.a, ns.a] %}{% "
        "endfor %}{{ ns.a }}");
    EXPECT_NE(e.find("render limit exceeded"), std::string::npos) << e;
    e = limit_error("{{ 'ab' * 9223372036854775807 }}");
    EXPECT_NE(e.find("render limit exceeded"), std::string::npos) << e;
}

TEST(JinjaLimits, WallTime) {
    RenderLimits lim;
    lim.max_iterations = 1'000'000'000;
    lim.max_seconds = 0.05;
    std::string e = limit_error(
        "{% for i in range(3000) %}{% for j in range(3000) %}{% endfor %}{% endfor %}", lim);
    EXPECT_NE(e.find("took longer than 0.05 s"), std::string::npos) << e;
}

TEST(JinjaLimits, DeepNestingIsASyntaxError) {
    std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
    EXPECT_NE(limit_error(deep).find("nesting too deep"), std::string::npos);
    std::string chain = "{{ 1";
    for (int i = 0; i < 5000; ++i) chain += " + 1";
    EXPECT_NE(limit_error(chain + " }}").find("nesting too deep"), std::string::npos);
    std::string ifs;
    for (int i = 0; i < 2000; ++i) ifs += "{% if true %}";
    EXPECT_NE(limit_error(ifs).find("nesting too deep"), std::string::npos);
}

TEST(JinjaLimits, NamespaceCyclesAreFreedAndPrintable) {
    // ASan's leak check fails this binary if the cycle is not broken after rendering.
    EXPECT_EQ(Template::parse("{% set ns = namespace() %}{% set ns.self = ns %}{% set ns.l = [ns] "
                              "%}{{ ns.self.self is defined }}")
                  .render(Json::object()),
              "True");
}

TEST(JinjaLimits, DeepMacroRecursionWithinLimitsRenders) {
    // 90 nested calls of a macro with some block nesting: must not hit the stack.
    std::string t =
        "{% macro f(n) %}{% if n > 0 %}{% for i in [1] %}{% if true %}{{ f(n - 1) }}{% endif %}{% "
        "endfor %}{% else %}done{% endif %}{% endmacro %}{{ f(90) }}";
    EXPECT_EQ(Template::parse(t).render(Json::object()), "done");
}

}  // namespace

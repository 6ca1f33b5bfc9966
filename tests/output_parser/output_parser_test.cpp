// Tests for runtime/output_parser: Gemma 4 reasoning, content and tool calls, against
// the chat templates' own serialisation (gemma4-renders.jsonl) and under every chunking.
#include "runtime/output_parser.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace hf2q::runtime {
namespace {

using nlohmann::json;

const std::string Q = "<|\"|>";

// Mirror of the template macro format_argument(value, escape_keys) (keys sorted as
// dictsort does; Python prints None as "None" and floats with repr).
std::string render_value(const json& v, bool escape_keys) {
    if (v.is_string()) return Q + v.get<std::string>() + Q;
    if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
    if (v.is_null()) return "None";
    if (v.is_number()) return v.dump();
    std::string out;
    if (v.is_object()) {
        out = "{";
        bool first = true;
        for (const auto& [k, x] : v.items()) {  // nlohmann::json keeps keys sorted
            if (!first) out += ",";
            first = false;
            out += (escape_keys ? Q + k + Q : k) + ":" + render_value(x, escape_keys);
        }
        return out + "}";
    }
    out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + render_value(v[i], escape_keys);
    return out + "]";
}

// The template's tool-call serialisation: <|tool_call>call:NAME{k:v,...}<tool_call|>.
std::string render_call(const std::string& name, const json& args) {
    std::string out = "<|tool_call>call:" + name + "{";
    bool first = true;
    for (const auto& [k, x] : args.items()) {
        if (!first) out += ",";
        first = false;
        out += k + ":" + render_value(x, false);
    }
    return out + "}<tool_call|>";
}

struct Run {
    ParsedOutput result;
    std::string reasoning_events, content_events;
    std::vector<ToolCall> call_events;
};

Run run_pieces(const std::vector<std::string>& pieces, Gemma4ParserOptions opt = {}) {
    Gemma4OutputParser p(opt);
    Run r;
    auto take = [&](const std::vector<OutputEvent>& events) {
        for (const auto& e : events) {
            switch (e.kind) {
                case OutputEventKind::reasoning:
                    r.reasoning_events += e.text;
                    break;
                case OutputEventKind::content:
                    r.content_events += e.text;
                    break;
                case OutputEventKind::tool_call:
                    r.call_events.push_back(e.call);
                    break;
            }
        }
    };
    for (const auto& piece : pieces) take(p.feed(piece));
    take(p.finish());
    r.result = p.result();
    EXPECT_EQ(r.reasoning_events, r.result.reasoning);
    EXPECT_EQ(r.content_events, r.result.content);
    EXPECT_EQ(r.call_events, r.result.tool_calls);
    return r;
}

ParsedOutput parse_all(const std::string& text, Gemma4ParserOptions opt = {}) {
    return run_pieces({text}, opt).result;
}

// Same final result for every 2-way split, byte-by-byte feeding and random 4-way splits.
void check_chunking(const std::string& text, Gemma4ParserOptions opt = {}) {
    const ParsedOutput want = parse_all(text, opt);
    for (size_t i = 0; i <= text.size(); ++i) {
        ASSERT_EQ(run_pieces({text.substr(0, i), text.substr(i)}, opt).result, want)
            << "split at " << i << " of: " << text;
    }
    std::vector<std::string> bytes;
    for (char c : text) bytes.emplace_back(1, c);
    ASSERT_EQ(run_pieces(bytes, opt).result, want) << "bytewise: " << text;
    std::mt19937 rng(17);
    for (int t = 0; t < 50 && !text.empty(); ++t) {
        std::vector<size_t> cuts = {0, text.size()};
        for (int k = 0; k < 3; ++k) cuts.push_back(rng() % (text.size() + 1));
        std::sort(cuts.begin(), cuts.end());
        std::vector<std::string> pieces;
        for (size_t k = 0; k + 1 < cuts.size(); ++k)
            pieces.push_back(text.substr(cuts[k], cuts[k + 1] - cuts[k]));
        ASSERT_EQ(run_pieces(pieces, opt).result, want) << "random split of: " << text;
    }
}

TEST(Gemma4Parser, ReasoningThenContent) {
    const auto r = parse_all("<|channel>thought\nLet me add.\n2+2=4.\n<channel|>The answer is 4.");
    EXPECT_EQ(r.reasoning, "Let me add.\n2+2=4.");
    EXPECT_EQ(r.content, "The answer is 4.");
    EXPECT_TRUE(r.tool_calls.empty());
    EXPECT_FALSE(r.end_marker_seen);
}

TEST(Gemma4Parser, PlainContentAndEmptyChannel) {
    EXPECT_EQ(parse_all("Hello, world!").content, "Hello, world!");
    const auto r = parse_all("<|channel>thought\n<channel|>Hi");
    EXPECT_EQ(r.reasoning, "");
    EXPECT_EQ(r.content, "Hi");
    // Stray markup that is not a marker stays content.
    EXPECT_EQ(parse_all("a <|\"|> b <channel|> c").content, "a <|\"|> b <channel|> c");
}

TEST(Gemma4Parser, StartInReasoning) {
    const auto r = parse_all("thinking...<channel|>done", {.start_in_reasoning = true});
    EXPECT_EQ(r.reasoning, "thinking...");
    EXPECT_EQ(r.content, "done");
}

TEST(Gemma4Parser, EndMarkerDropsTheRest) {
    auto r = parse_all("Bye.<turn|>\n<|turn>user\nignored");
    EXPECT_EQ(r.content, "Bye.");
    EXPECT_TRUE(r.end_marker_seen);
    r = parse_all("<|tool_call>call:f{a:1}<tool_call|><|tool_response>junk");
    ASSERT_EQ(r.tool_calls.size(), 1u);
    EXPECT_EQ(r.content, "");
    EXPECT_TRUE(r.end_marker_seen);
}

TEST(Gemma4Parser, ToolCallObjectStringNestedNumbersUnicode) {
    const std::string text = "<|tool_call>call:get_weather{city:" + Q + "Paris" + Q + ",unit:" + Q +
                             "celsius" + Q + "}<tool_call|>";
    auto r = parse_all(text);
    ASSERT_EQ(r.tool_calls.size(), 1u);
    EXPECT_EQ(r.tool_calls[0].name, "get_weather");
    EXPECT_EQ(r.tool_calls[0].arguments, json({{"city", "Paris"}, {"unit", "celsius"}}));
    EXPECT_EQ(r.content, "");

    const std::string nested =
        "<|tool_call>call:plan{a:-12,b:2.5e-3,c:true,d:None,e:[1,[2,{x:" + Q +
        "日本語 🦙 \"q\" {}," + Q + "}]],f:{g:{h:[]}},i:{}}<tool_call|>";
    r = parse_all(nested);
    ASSERT_EQ(r.tool_calls.size(), 1u);
    const json want = json::parse(R"({"a":-12,"b":0.0025,"c":true,"d":null,
        "e":[1,[2,{"x":"日本語 🦙 \"q\" {},"}]],"f":{"g":{"h":[]}},"i":{}})");
    EXPECT_EQ(r.tool_calls[0].arguments, want);
    EXPECT_TRUE(r.tool_calls[0].arguments["a"].is_number_integer());
    EXPECT_NO_THROW((void)r.tool_calls[0].arguments.dump());
}

TEST(Gemma4Parser, QuotedKeysAndWhitespace) {
    const auto r = parse_all("<|tool_call>call:f{ " + Q + "odd key" + Q +
                             " : [ 1 , 2 ] , b :false }<tool_call|>");
    ASSERT_EQ(r.tool_calls.size(), 1u);
    EXPECT_EQ(r.tool_calls[0].arguments, json({{"odd key", {1, 2}}, {"b", false}}));
}

TEST(Gemma4Parser, MultipleCallsWithReasoningAndContent) {
    const std::string text = "<|channel>thought\nNeed two tools.\n<channel|>Checking." +
                             render_call("add", {{"a", 2}, {"b", 3}}) +
                             render_call("get_weather", {{"city", "Oslo"}}) + "<|tool_response>";
    const auto r = parse_all(text);
    EXPECT_EQ(r.reasoning, "Need two tools.");
    EXPECT_EQ(r.content, "Checking.");
    ASSERT_EQ(r.tool_calls.size(), 2u);
    EXPECT_EQ(r.tool_calls[0], (ToolCall{"add", {{"a", 2}, {"b", 3}}}));
    EXPECT_EQ(r.tool_calls[1], (ToolCall{"get_weather", {{"city", "Oslo"}}}));
    check_chunking(text);
}

TEST(Gemma4Parser, RoundTripThroughTemplateSerialisation) {
    const std::vector<json> cases = {
        json::object(),
        {{"city", "Paris"}, {"days", 3}, {"tags", {"a", "b"}}},
        {{"x", 1.5}, {"y", -0.25}, {"z", 1e-5}, {"big", 12345678901234LL}, {"neg", -7}},
        {{"flag", true}, {"off", false}, {"nothing", nullptr}},
        {{"nested", {{"deep", {{"deeper", {1, 2, {{"k", "v"}}}}}}}}, {"empty_list", json::array()}},
        {{"text", "multi\nline, with {braces} [brackets] : colons and \"quotes\""}},
        {{"unicode", "Übersetze: 你好，世界 🦙 — «ok»"}, {"emoji_key_value", "🦙"}},
        {{"list_of_objects", {{{"a", 1}}, {{"b", {nullptr, true}}}}}},
    };
    for (const json& args : cases) {
        const std::string text = render_call("fn_name", args);
        const auto r = parse_all(text);
        ASSERT_EQ(r.tool_calls.size(), 1u) << text;
        EXPECT_EQ(r.tool_calls[0].arguments, args) << text;
        EXPECT_EQ(parse_gemma4_value(render_value(args, true)), args) << "escaped keys";
    }
}

TEST(Gemma4Parser, ToolCallsRenderedByTheChatTemplates) {
    std::ifstream in(std::string(HF2Q_TESTDATA_DIR) + "/templates/gemma4-renders.jsonl");
    ASSERT_TRUE(in) << "missing gemma4-renders.jsonl";
    std::string line;
    int checked = 0;
    while (std::getline(in, line)) {
        const json rec = json::parse(line);
        std::vector<ToolCall> want;
        for (const auto& m : rec["context"]["messages"]) {
            if (!m.contains("tool_calls")) continue;
            for (const auto& tc : m["tool_calls"]) {
                const json& a = tc["function"]["arguments"];
                want.push_back({tc["function"]["name"].get<std::string>(),
                                a.is_string() ? json::parse(a.get<std::string>()) : a});
            }
        }
        if (want.empty()) continue;
        // Feed the model-turn part of the rendering that holds the calls.
        const std::string out = rec["output"];
        const size_t begin = out.find("<|tool_call>");
        const size_t end = out.rfind("<tool_call|>");
        ASSERT_NE(begin, std::string::npos) << rec["case"];
        const std::string calls = out.substr(begin, end + 12 - begin);
        const auto r = parse_all(calls);
        EXPECT_EQ(r.tool_calls, want) << rec["template"] << " " << rec["case"];
        EXPECT_EQ(r.content, "");
        check_chunking(calls);
        ++checked;
    }
    EXPECT_EQ(checked, 4);  // two cases with tool calls, rendered by each template
}

TEST(Gemma4Parser, MalformedCallsFallBackToText) {
    const std::vector<std::string> bad = {
        "<|tool_call>call:f{a:1<tool_call|>",                            // missing '}'
        "<|tool_call>call:f{a:Paris}<tool_call|>",                       // bare word value
        "<|tool_call>call:f{a:" + Q + "open}<tool_call|>",               // unterminated string
        "<|tool_call>f{a:1}<tool_call|>",                                // no "call:"
        "<|tool_call>call:{a:1}<tool_call|>",                            // no name
        "<|tool_call>call:f{a:1}}<tool_call|>",                          // trailing junk
        "<|tool_call>call:f{a:1,}<tool_call|>",                          // trailing comma
        "<|tool_call>call:f[1,2]<tool_call|>",                           // not an object
        "<|tool_call>call:f{a:NaN}<tool_call|>",                         // not a JSON number
        "<|tool_call>call:f{a:" + Q + "\xC3\x28" + Q + "}<tool_call|>",  // invalid UTF-8
        "<|tool_call>call:f{a:" + std::string(200, '[') + std::string(200, ']') + "}<tool_call|>",
    };
    for (const auto& text : bad) {
        const std::string full = "pre " + text + " post";
        ParsedOutput r;
        ASSERT_NO_THROW(r = parse_all(full)) << text;
        EXPECT_TRUE(r.tool_calls.empty()) << text;
        EXPECT_EQ(r.content, full) << text;
    }
    // An unterminated call at the end of the stream is text too.
    const auto r = parse_all("x<|tool_call>call:f{a:1}");
    EXPECT_TRUE(r.tool_calls.empty());
    EXPECT_EQ(r.content, "x<|tool_call>call:f{a:1}");
    // A good call after a bad one is still parsed.
    const auto r2 = parse_all("<|tool_call>call:f{a:}<tool_call|>" + render_call("g", {{"b", 1}}));
    ASSERT_EQ(r2.tool_calls.size(), 1u);
    EXPECT_EQ(r2.tool_calls[0].name, "g");
    EXPECT_EQ(r2.content, "<|tool_call>call:f{a:}<tool_call|>");
}

TEST(Gemma4Parser, StringArgumentsRenderedVerbatim) {
    // The templates print string arguments inside the braces: call:add{{"a": 2, "b": 3}}.
    auto call = parse_gemma4_tool_call("call:add{{\"a\": 2, \"b\": 3}}");
    ASSERT_TRUE(call);
    EXPECT_EQ(call->arguments, json({{"a", 2}, {"b", 3}}));
    call = parse_gemma4_tool_call("call:add{\"a\": 2}");
    ASSERT_TRUE(call);
    EXPECT_EQ(call->arguments, json({{"a", 2}}));
}

TEST(Gemma4Parser, StreamsAsSoonAsUnambiguous) {
    Gemma4OutputParser p;
    auto ev = p.feed("Hello <|to");
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].kind, OutputEventKind::content);
    EXPECT_EQ(ev[0].text, "Hello ");
    EXPECT_TRUE(p.feed("ol_call>call:f{a:1}").empty());
    ev = p.feed("<tool_call|>ok <");
    ASSERT_EQ(ev.size(), 2u);
    EXPECT_EQ(ev[0].kind, OutputEventKind::tool_call);
    EXPECT_EQ(ev[1].text, "ok ");
    ev = p.feed("3 <|channel>thought\nhm\n");
    ASSERT_EQ(ev.size(), 2u);
    EXPECT_EQ(ev[0].text, "<3 ");
    EXPECT_EQ(ev[1].kind, OutputEventKind::reasoning);
    EXPECT_EQ(ev[1].text, "hm");  // the trailing '\n' may belong to "\n<channel|>"
    ev = p.feed("\xE4\xB8");      // half of a CJK character is held back
    EXPECT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].text, "\n");
    ev = p.feed("\x96");
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].text, "\xE4\xB8\x96");
    p.finish();
    EXPECT_THROW(p.feed("x"), Error);
}

TEST(Gemma4Parser, ChunkingInvariance) {
    const std::vector<std::string> texts = {
        "<|channel>thought\nA\n\nB\n<channel|>\nC <|tool_call>call:f{s:" + Q + "x<y" + Q +
            ",n:[1,-2.5]}<tool_call|> D<turn|>tail",
        "a<|chan<|channel>thought\nx<channe<channel|>y<tool_call|><|tool_call>bad<tool_call|>z",
        "\xF0\x9F\xA6\x99<|tool_call>call:f{k:" + Q + "\xC3\xA9" + Q + "}<tool_call|>\xC3\xA9<",
        "<|channel>thought<channel|>no newline header",
        "x<|tool_call>call:f{a:1}",
        "<|channel>thought\nunfinished reasoning\n",
    };
    for (const auto& t : texts) check_chunking(t);
}

TEST(Gemma4Parser, RandomMarkupNeverThrowsAndIsChunkInvariant) {
    const std::vector<std::string> atoms = {"<|channel>",
                                            "<channel|>",
                                            "<|tool_call>",
                                            "<tool_call|>",
                                            Q,
                                            "call:",
                                            "f",
                                            "{",
                                            "}",
                                            "[",
                                            "]",
                                            ":",
                                            ",",
                                            "1",
                                            "a",
                                            "thought\n",
                                            "\n",
                                            "<",
                                            "|",
                                            "\xC3",
                                            "\xA9",
                                            " "};
    std::mt19937 rng(123);
    for (int t = 0; t < 200; ++t) {
        std::string text;
        const int n = 1 + static_cast<int>(rng() % 25);
        for (int k = 0; k < n; ++k) text += atoms[rng() % atoms.size()];
        ParsedOutput whole;
        ASSERT_NO_THROW(whole = parse_all(text)) << text;
        std::vector<std::string> bytes;
        for (char c : text) bytes.emplace_back(1, c);
        ASSERT_EQ(run_pieces(bytes).result, whole) << text;
    }
}

}  // namespace
}  // namespace hf2q::runtime

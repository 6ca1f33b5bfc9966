// Incremental parser for Gemma 4 model output: reasoning, content and tool calls.
//
// Input is the stream of detokenized pieces with Gemma 4's control tokens as their
// literal text. Recognised markup (as the chat templates render it):
//   <|channel>NAME\n ... <channel|>     reasoning (NAME is "thought"); one '\n' right
//                                        before <channel|> belongs to the markup
//   <|tool_call>call:NAME{ARGS}<tool_call|>
//                                        a tool call; ARGS in Gemma 4 value syntax:
//                                        key:value pairs with bare (or <|"|>-quoted) keys,
//                                        strings as <|"|>text<|"|> (no escapes), numbers,
//                                        true/false/null, nested {...} and [...]
//   <turn|> or <|tool_response>         end of the model's message; later text is dropped
// Anything else is content. A tool call that does not parse is returned as content,
// markers included; no input makes the parser throw.
//
// Streaming: text is emitted as soon as it cannot be the start of a marker (and does not
// end inside a UTF-8 sequence). A tool call is emitted whole when <tool_call|> arrives,
// since until then it may still turn out malformed.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hf2q::runtime {

struct ToolCall {
    std::string name;
    nlohmann::json arguments;  // always a JSON object

    bool operator==(const ToolCall&) const = default;
};

enum class OutputEventKind { reasoning, content, tool_call };

// One step of the stream. `text` holds the reasoning/content delta, `call` the tool call.
struct OutputEvent {
    OutputEventKind kind;
    std::string text;
    ToolCall call;
};

// Everything parsed so far.
struct ParsedOutput {
    std::string reasoning;
    std::string content;
    std::vector<ToolCall> tool_calls;
    bool end_marker_seen = false;  // <turn|> or <|tool_response> arrived

    bool operator==(const ParsedOutput&) const = default;
};

struct Gemma4ParserOptions {
    // The prompt already opened the thought channel ("<|channel>thought\n"), so the
    // output starts inside reasoning.
    bool start_in_reasoning = false;
};

class Gemma4OutputParser {
  public:
    explicit Gemma4OutputParser(Gemma4ParserOptions options = {});

    // Appends a piece; returns the events it completes. Consecutive text of one kind is
    // merged into one event.
    std::vector<OutputEvent> feed(std::string_view piece);

    // End of stream: flushes held text (an unfinished tool call becomes content, an
    // unfinished channel reasoning). feed() after finish() throws hf2q::Error.
    std::vector<OutputEvent> finish();

    const ParsedOutput& result() const { return result_; }

  private:
    enum class State { content, channel_header, reasoning, tool_call, ended, finished };

    bool step(std::vector<OutputEvent>& events);
    bool step_content(std::vector<OutputEvent>& events);
    bool step_channel_header();
    bool step_reasoning(std::vector<OutputEvent>& events);
    bool step_tool_call(std::vector<OutputEvent>& events);
    void emit_text(OutputEventKind kind, std::string_view text, std::vector<OutputEvent>& events);

    State state_;
    std::string buf_;  // received, not yet consumed
    ParsedOutput result_;
};

// Parses exactly one Gemma 4 value (surrounding whitespace allowed); nullopt if malformed.
// Python reprs True/False/None (as a template may print them) are accepted too.
std::optional<nlohmann::json> parse_gemma4_value(std::string_view text);

// Parses the text between <|tool_call> and <tool_call|>: "call:NAME{ARGS}". ARGS in Gemma 4
// syntax, or, as the templates render string arguments, "{" JSON-object "}" or a JSON object.
// nullopt if malformed.
std::optional<ToolCall> parse_gemma4_tool_call(std::string_view body);

}  // namespace hf2q::runtime

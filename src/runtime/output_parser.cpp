#include "runtime/output_parser.h"

#include <array>
#include <utility>

#include "core/error.h"
#include "runtime/stop.h"

namespace hf2q::runtime {

namespace {

using nlohmann::json;

constexpr std::string_view kChannelOpen = "<|channel>";
constexpr std::string_view kChannelClose = "<channel|>";
constexpr std::string_view kNewlineChannelClose = "\n<channel|>";
constexpr std::string_view kCallOpen = "<|tool_call>";
constexpr std::string_view kCallClose = "<tool_call|>";
constexpr std::string_view kQuote = "<|\"|>";
constexpr std::string_view kTurnEnd = "<turn|>";
constexpr std::string_view kToolResponse = "<|tool_response>";

constexpr std::array<std::string_view, 4> kContentMarkers = {kChannelOpen, kCallOpen, kTurnEnd,
                                                             kToolResponse};
constexpr std::array<std::string_view, 3> kReasoningMarkers = {kChannelClose, kTurnEnd,
                                                               kToolResponse};
constexpr std::array<std::string_view, 4> kReasoningHold = {kChannelClose, kNewlineChannelClose,
                                                            kTurnEnd, kToolResponse};
constexpr int kMaxDepth = 64;

struct Found {
    size_t pos = std::string_view::npos;
    size_t index = 0;
};

template <size_t N>
Found find_first(std::string_view s, const std::array<std::string_view, N>& markers) {
    Found f;
    for (size_t i = 0; i < N; ++i) {
        const size_t p = s.find(markers[i]);
        if (p < f.pos) f = {p, i};
    }
    return f;
}

bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
    return s;
}

// Strict UTF-8 check (no overlongs, surrogates or code points above U+10FFFF), so every
// string placed in a ToolCall can be serialised by nlohmann::json::dump().
bool valid_utf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        size_t n = 0;
        uint32_t cp = 0;
        if (c < 0x80) {
            ++i;
            continue;
        } else if (c >= 0xC2 && c < 0xE0) {
            n = 1, cp = c & 0x1F;
        } else if (c >= 0xE0 && c < 0xF0) {
            n = 2, cp = c & 0x0F;
        } else if (c >= 0xF0 && c < 0xF5) {
            n = 3, cp = c & 0x07;
        } else {
            return false;
        }
        if (i + n >= s.size()) return false;  // truncated sequence
        for (size_t k = 1; k <= n; ++k) {
            const auto cc = static_cast<unsigned char>(s[i + k]);
            if ((cc & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (cc & 0x3F);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF)) {
            return false;
        }
        i += n + 1;
    }
    return true;
}

// Recursive-descent parser for one Gemma 4 value. Every method returns false on
// malformed input and leaves `out` unspecified.
class ValueParser {
  public:
    explicit ValueParser(std::string_view s) : s_(s) {}

    bool parse_value(json& out, int depth) {
        skip_ws();
        if (depth > kMaxDepth || i_ >= s_.size()) return false;
        if (at(kQuote)) {
            std::string str;
            if (!parse_string(str)) return false;
            out = std::move(str);
            return true;
        }
        if (s_[i_] == '{') return parse_object(out, depth);
        if (s_[i_] == '[') return parse_array(out, depth);
        return parse_literal(out);
    }

    bool at_end() {
        skip_ws();
        return i_ == s_.size();
    }

  private:
    bool at(std::string_view tok) const { return s_.substr(i_).starts_with(tok); }

    void skip_ws() {
        while (i_ < s_.size() && is_ws(s_[i_])) ++i_;
    }

    bool parse_string(std::string& out) {
        i_ += kQuote.size();
        const size_t end = s_.find(kQuote, i_);
        if (end == std::string_view::npos) return false;
        const std::string_view body = s_.substr(i_, end - i_);
        if (!valid_utf8(body)) return false;
        out.assign(body);
        i_ = end + kQuote.size();
        return true;
    }

    // Bare keys are what the templates print for argument keys (escape_keys=False).
    bool parse_key(std::string& out) {
        skip_ws();
        if (at(kQuote)) return parse_string(out);
        const size_t start = i_;
        constexpr std::string_view stop = ":,{}[]\"'<";
        while (i_ < s_.size() && !is_ws(s_[i_]) && stop.find(s_[i_]) == std::string_view::npos)
            ++i_;
        out.assign(s_.substr(start, i_ - start));
        return !out.empty() && valid_utf8(out);
    }

    bool parse_object(json& out, int depth) {
        ++i_;  // '{'
        out = json::object();
        skip_ws();
        if (i_ < s_.size() && s_[i_] == '}') return ++i_, true;
        while (true) {
            std::string key;
            if (!parse_key(key)) return false;
            skip_ws();
            if (i_ >= s_.size() || s_[i_] != ':') return false;
            ++i_;
            json value;
            if (!parse_value(value, depth + 1)) return false;
            out[key] = std::move(value);
            skip_ws();
            if (i_ >= s_.size()) return false;
            if (s_[i_] == '}') return ++i_, true;
            if (s_[i_] != ',') return false;
            ++i_;
        }
    }

    bool parse_array(json& out, int depth) {
        ++i_;  // '['
        out = json::array();
        skip_ws();
        if (i_ < s_.size() && s_[i_] == ']') return ++i_, true;
        while (true) {
            json value;
            if (!parse_value(value, depth + 1)) return false;
            out.push_back(std::move(value));
            skip_ws();
            if (i_ >= s_.size()) return false;
            if (s_[i_] == ']') return ++i_, true;
            if (s_[i_] != ',') return false;
            ++i_;
        }
    }

    // true/false/null (and Python's True/False/None), or a JSON number.
    bool parse_literal(json& out) {
        const size_t start = i_;
        constexpr std::string_view stop = ",{}[]:<";
        while (i_ < s_.size() && !is_ws(s_[i_]) && stop.find(s_[i_]) == std::string_view::npos)
            ++i_;
        const std::string_view tok = s_.substr(start, i_ - start);
        if (tok == "true" || tok == "True") return out = true, true;
        if (tok == "false" || tok == "False") return out = false, true;
        if (tok == "null" || tok == "None") return out = nullptr, true;
        if (tok.empty() || !(tok[0] == '-' || (tok[0] >= '0' && tok[0] <= '9'))) return false;
        out = json::parse(tok, nullptr, /*allow_exceptions=*/false);
        return out.is_number();
    }

    std::string_view s_;
    size_t i_ = 0;
};

bool valid_tool_name(std::string_view name) {
    if (name.empty() || !valid_utf8(name)) return false;
    for (char c : name) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7F || c == ' ' || c == '<' || c == '>' || c == '"') return false;
    }
    return true;
}

std::optional<json> json_object(std::string_view text) {
    json v = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!v.is_object()) return std::nullopt;
    return v;
}

std::optional<ToolCall> parse_tool_call_impl(std::string_view body) {
    body = trim(body);
    constexpr std::string_view kCall = "call:";
    if (!body.starts_with(kCall)) return std::nullopt;
    body.remove_prefix(kCall.size());
    const size_t brace = body.find('{');
    if (brace == std::string_view::npos) return std::nullopt;
    ToolCall call;
    const std::string_view name = trim(body.substr(0, brace));
    if (!valid_tool_name(name)) return std::nullopt;
    call.name.assign(name);
    const std::string_view args = body.substr(brace);
    ValueParser p(args);
    json v;
    if (p.parse_value(v, 0) && v.is_object() && p.at_end()) {
        call.arguments = std::move(v);
        return call;
    }
    // String arguments are printed verbatim inside the braces: "{" + '{"a": 2}' + "}".
    if (auto obj = json_object(args)) {
        call.arguments = std::move(*obj);
        return call;
    }
    if (args.size() >= 2 && args.back() == '}') {
        if (auto obj = json_object(args.substr(1, args.size() - 2))) {
            call.arguments = std::move(*obj);
            return call;
        }
    }
    return std::nullopt;
}

}  // namespace

std::optional<nlohmann::json> parse_gemma4_value(std::string_view text) {
    try {
        ValueParser p(text);
        json v;
        if (p.parse_value(v, 0) && p.at_end()) return v;
    } catch (const json::exception&) {
    }
    return std::nullopt;
}

std::optional<ToolCall> parse_gemma4_tool_call(std::string_view body) {
    try {
        return parse_tool_call_impl(body);
    } catch (const json::exception&) {
        return std::nullopt;
    }
}

Gemma4OutputParser::Gemma4OutputParser(Gemma4ParserOptions options)
    : state_(options.start_in_reasoning ? State::reasoning : State::content) {}

std::vector<OutputEvent> Gemma4OutputParser::feed(std::string_view piece) {
    if (state_ == State::finished) fail("Gemma4OutputParser: feed() after finish()");
    std::vector<OutputEvent> events;
    if (state_ == State::ended) return events;
    buf_.append(piece);
    while (step(events)) {
    }
    return events;
}

std::vector<OutputEvent> Gemma4OutputParser::finish() {
    std::vector<OutputEvent> events;
    switch (state_) {
        case State::content:
            emit_text(OutputEventKind::content, buf_, events);
            break;
        case State::channel_header:
        case State::reasoning:
            emit_text(OutputEventKind::reasoning, buf_, events);
            break;
        case State::tool_call:
            emit_text(OutputEventKind::content, std::string(kCallOpen) + buf_, events);
            break;
        case State::ended:
        case State::finished:
            break;
    }
    buf_.clear();
    state_ = State::finished;
    return events;
}

bool Gemma4OutputParser::step(std::vector<OutputEvent>& events) {
    switch (state_) {
        case State::content:
            return step_content(events);
        case State::channel_header:
            return step_channel_header();
        case State::reasoning:
            return step_reasoning(events);
        case State::tool_call:
            return step_tool_call(events);
        case State::ended:
            buf_.clear();
            return false;
        case State::finished:
            return false;
    }
    return false;
}

bool Gemma4OutputParser::step_content(std::vector<OutputEvent>& events) {
    const Found f = find_first(buf_, kContentMarkers);
    if (f.pos == std::string::npos) {
        const size_t keep =
            std::max(partial_match_suffix(buf_, kContentMarkers), utf8_incomplete_suffix(buf_));
        emit_text(OutputEventKind::content, std::string_view(buf_).substr(0, buf_.size() - keep),
                  events);
        buf_.erase(0, buf_.size() - keep);
        return false;
    }
    emit_text(OutputEventKind::content, std::string_view(buf_).substr(0, f.pos), events);
    const std::string_view marker = kContentMarkers[f.index];
    buf_.erase(0, f.pos + marker.size());
    if (marker == kChannelOpen) {
        state_ = State::channel_header;
    } else if (marker == kCallOpen) {
        state_ = State::tool_call;
    } else {
        result_.end_marker_seen = true;
        state_ = State::ended;
    }
    return true;
}

bool Gemma4OutputParser::step_channel_header() {
    const size_t nl = buf_.find('\n');
    const size_t close = buf_.find(kChannelClose);
    if (close < nl) {  // "<|channel>NAME<channel|>": an empty channel
        buf_.erase(0, close + kChannelClose.size());
        state_ = State::content;
        return true;
    }
    if (nl == std::string::npos) return false;
    buf_.erase(0, nl + 1);
    state_ = State::reasoning;
    return true;
}

bool Gemma4OutputParser::step_reasoning(std::vector<OutputEvent>& events) {
    const Found f = find_first(buf_, kReasoningMarkers);
    if (f.pos == std::string::npos) {
        const size_t keep =
            std::max(partial_match_suffix(buf_, kReasoningHold), utf8_incomplete_suffix(buf_));
        emit_text(OutputEventKind::reasoning, std::string_view(buf_).substr(0, buf_.size() - keep),
                  events);
        buf_.erase(0, buf_.size() - keep);
        return false;
    }
    const std::string_view marker = kReasoningMarkers[f.index];
    std::string_view text = std::string_view(buf_).substr(0, f.pos);
    if (marker == kChannelClose && text.ends_with('\n')) text.remove_suffix(1);
    emit_text(OutputEventKind::reasoning, text, events);
    buf_.erase(0, f.pos + marker.size());
    if (marker == kChannelClose) {
        state_ = State::content;
    } else {
        result_.end_marker_seen = true;
        state_ = State::ended;
    }
    return true;
}

bool Gemma4OutputParser::step_tool_call(std::vector<OutputEvent>& events) {
    const size_t close = buf_.find(kCallClose);
    if (close == std::string::npos) return false;
    const std::string_view body = std::string_view(buf_).substr(0, close);
    if (std::optional<ToolCall> call = parse_gemma4_tool_call(body)) {
        result_.tool_calls.push_back(*call);
        events.push_back({OutputEventKind::tool_call, {}, std::move(*call)});
    } else {
        emit_text(OutputEventKind::content, std::string(kCallOpen).append(body).append(kCallClose),
                  events);
    }
    buf_.erase(0, close + kCallClose.size());
    state_ = State::content;
    return true;
}

void Gemma4OutputParser::emit_text(OutputEventKind kind, std::string_view text,
                                   std::vector<OutputEvent>& events) {
    if (text.empty()) return;
    (kind == OutputEventKind::reasoning ? result_.reasoning : result_.content).append(text);
    if (!events.empty() && events.back().kind == kind) {
        events.back().text.append(text);
    } else {
        events.push_back({kind, std::string(text), {}});
    }
}

}  // namespace hf2q::runtime

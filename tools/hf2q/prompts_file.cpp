#include "prompts_file.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hf2q::cli {
namespace {

using json = nlohmann::ordered_json;  // keeps the keys of messages and tools in order

// An integer in [lo, 2^31); `what` names it in errors.
int32_t int32_field(const json& v, const char* what, int64_t lo, size_t line) {
    if (!v.is_number_integer())
        fail("prompts file line ", line, ": ", what, " must be an integer, not ", v.dump());
    // Integers past int64's range parse as unsigned (or, past uint64's, as floats).
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
        fail("prompts file line ", line, ": ", what, " ", v.get<uint64_t>(), " is out of range [", lo, ", 2^31)");
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > std::numeric_limits<int32_t>::max())
        fail("prompts file line ", line, ": ", what, " ", x, " is out of range [", lo, ", 2^31)");
    return static_cast<int32_t>(x);
}

// A finite number that fits a float.
float float_field(const json& v, const char* key, size_t line) {
    if (!v.is_number()) fail("prompts file line ", line, ": \"", key, "\" must be a number, not ", v.dump());
    const double x = v.get<double>();
    if (!std::isfinite(x) || std::fabs(x) > std::numeric_limits<float>::max())
        fail("prompts file line ", line, ": \"", key, "\" ", x, " is not a finite float");
    return static_cast<float>(x);
}

// A request's own sampling setting; false where `key` is none of them. Ranges are
// checked with the request (runtime::validate), as the command line's are.
bool sampling_field(const std::string& key, const json& v, PromptLine& p, size_t line) {
    if (key == "temperature" || key == "top_p" || key == "min_p") {
        const float x = float_field(v, key.c_str(), line);
        (key == "temperature" ? p.temperature : key == "top_p" ? p.top_p : p.min_p) = x;
    } else if (key == "top_k") {
        p.top_k = int32_field(v, "\"top_k\"", 0, line);
    } else if (key == "seed") {
        if (!v.is_number_unsigned())
            fail("prompts file line ", line, ": \"seed\" must be an integer in [0, 2^64), not ", v.dump());
        p.seed = v.get<uint64_t>();
    } else if (key == "stop") {
        std::vector<std::string> stop;
        if (v.is_string()) stop.push_back(v.get<std::string>());
        for (const json& s : v.is_array() ? v : json::array()) {
            if (!s.is_string()) fail("prompts file line ", line, ": a stop string must be a string, not ", s.dump());
            stop.push_back(s.get<std::string>());
        }
        if (!v.is_string() && !v.is_array())
            fail("prompts file line ", line, ": \"stop\" must be a string or an array of them, not ", v.dump());
        p.stop = std::move(stop);
    } else {
        return false;
    }
    return true;
}

PromptLine from_object(const json& j, size_t line) {
    PromptLine p;
    p.line = line;
    for (const auto& [key, v] : j.items()) {
        if (key == "prompt") {
            if (!v.is_string()) fail("prompts file line ", line, ": \"prompt\" must be a string, not ", v.type_name());
            p.text = v.get<std::string>();
        } else if (key == "token_ids") {
            if (!v.is_array())
                fail("prompts file line ", line, ": \"token_ids\" must be an array, not ", v.type_name());
            for (const json& id : v) p.token_ids.push_back(int32_field(id, "a token id", 0, line));
            if (p.token_ids.empty()) fail("prompts file line ", line, ": \"token_ids\" is empty");
        } else if (key == "messages") {
            if (!v.is_array() || v.empty())
                fail("prompts file line ", line, ": \"messages\" must be a non-empty array, not ", v.dump());
            for (const json& m : v)
                if (!m.is_object()) fail("prompts file line ", line, ": a message must be an object, not ", m.dump());
            p.messages = v;
        } else if (key == "tools") {
            if (!v.is_array()) fail("prompts file line ", line, ": \"tools\" must be an array, not ", v.type_name());
            p.tools = v;
        } else if (key == "enable_thinking") {
            if (!v.is_boolean())
                fail("prompts file line ", line, ": \"enable_thinking\" must be true or false, not ", v.dump());
            p.enable_thinking = v.get<bool>();
        } else if (key == "n_predict") {
            p.n_predict = int32_field(v, "\"n_predict\"", -1, line);
        } else if (!sampling_field(key, v, p, line)) {
            fail("prompts file line ", line, ": unknown key \"", key,
                 "\" (a request holds \"prompt\", \"token_ids\" or \"messages\", and optionally \"n_predict\", "
                 "\"temperature\", \"top_k\", \"top_p\", \"min_p\", \"seed\", \"stop\"; with messages "
                 "\"enable_thinking\" and \"tools\")");
        }
    }
    const int forms = p.text.has_value() + !p.token_ids.empty() + p.messages.has_value();
    if (forms != 1)
        fail("prompts file line ", line, ": give exactly one of \"prompt\", \"token_ids\" and \"messages\"");
    if (!p.messages && (p.tools || j.contains("enable_thinking")))
        fail("prompts file line ", line, ": \"tools\" and \"enable_thinking\" go with \"messages\"");
    return p;
}

PromptLine parse_line(std::string_view s, size_t line) {
    const size_t first = s.find_first_not_of(" \t");
    if (s[first] != '"' && s[first] != '{') {
        PromptLine p;
        p.line = line;
        p.text = std::string(s);
        return p;
    }
    json j;
    try {
        j = json::parse(s);
    } catch (const json::exception& e) {
        fail("prompts file line ", line, ": not valid JSON (", e.what(),
             "); a line that starts with '\"' or '{' is read as JSON");
    }
    if (j.is_string()) {
        PromptLine p;
        p.line = line;
        p.text = j.get<std::string>();
        return p;
    }
    if (j.is_object()) return from_object(j, line);
    fail("prompts file line ", line, ": a JSON line must be a string or an object, not ", j.type_name());
}

}  // namespace

std::vector<PromptLine> parse_prompts(std::string_view content) {
    std::vector<PromptLine> out;
    size_t line = 0;
    while (!content.empty()) {
        ++line;
        const size_t nl = content.find('\n');
        std::string_view s = content.substr(0, nl);
        content.remove_prefix(nl == std::string_view::npos ? content.size() : nl + 1);
        if (!s.empty() && s.back() == '\r') s.remove_suffix(1);
        if (s.find_first_not_of(" \t") == std::string_view::npos) continue;
        out.push_back(parse_line(s, line));
    }
    if (out.empty()) fail("the prompts file holds no request (one a line; blank lines are skipped)");
    return out;
}

}  // namespace hf2q::cli

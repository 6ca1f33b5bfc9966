// JSON <-> template values. to_json reproduces Python's json.dumps byte for byte:
// separators ", " / ": " (or "," / ": " with indent), floats in repr form, NaN and
// Infinity spelled as Python does, and only '"', '\\' and control characters escaped
// unless ensure_ascii asks for \uXXXX escapes of everything outside ASCII.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "tokenizer/jinja/interp.h"
#include "tokenizer/jinja/text.h"

namespace hf2q::jinja {
namespace {

template <class Json>
Value convert(const Json& j) {
    switch (j.type()) {
        case nlohmann::json::value_t::null:
            return Value::none();
        case nlohmann::json::value_t::boolean:
            return Value::boolean(j.template get<bool>());
        case nlohmann::json::value_t::number_integer:
            return Value::integer(j.template get<int64_t>());
        case nlohmann::json::value_t::number_unsigned: {
            auto u = j.template get<uint64_t>();
            if (u <= static_cast<uint64_t>(INT64_MAX))
                return Value::integer(static_cast<int64_t>(u));
            return Value::number(static_cast<double>(u));
        }
        case nlohmann::json::value_t::number_float:
            return Value::number(j.template get<double>());
        case nlohmann::json::value_t::string:
            return Value::string(j.template get<std::string>());
        case nlohmann::json::value_t::array: {
            std::vector<Value> items;
            items.reserve(j.size());
            for (const auto& e : j) items.push_back(convert(e));
            return Value::list(std::move(items));
        }
        case nlohmann::json::value_t::object: {
            Value d = Value::dict();
            for (auto it = j.begin(); it != j.end(); ++it)
                d.dict_ref().set(it.key(), convert(it.value()));
            return d;
        }
        default:
            fail("unsupported JSON value in template context (binary data)");
    }
}

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
    static const char* hex = "0123456789abcdef";
    auto u_escape = [&](uint32_t cp) {
        out += "\\u";
        for (int sh = 12; sh >= 0; sh -= 4) out += hex[(cp >> sh) & 15];
    };
    out += '"';
    for (size_t i = 0; i < s.size();) {
        auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x80) {
            switch (c) {
                case '"':
                    out += "\\\"";
                    break;
                case '\\':
                    out += "\\\\";
                    break;
                case '\n':
                    out += "\\n";
                    break;
                case '\r':
                    out += "\\r";
                    break;
                case '\t':
                    out += "\\t";
                    break;
                case '\b':
                    out += "\\b";
                    break;
                case '\f':
                    out += "\\f";
                    break;
                default:
                    if (c < 0x20 || (ensure_ascii && c == 0x7F))
                        u_escape(c);
                    else
                        out += static_cast<char>(c);
            }
            ++i;
            continue;
        }
        size_t len;
        uint32_t cp = utf8_decode(s, i, len);
        if (!ensure_ascii || cp == 0xFFFFFFFFu) {
            out.append(s, i, len);
        } else if (cp >= 0x10000) {
            u_escape(0xD800 + ((cp - 0x10000) >> 10));
            u_escape(0xDC00 + ((cp - 0x10000) & 0x3FF));
        } else {
            u_escape(cp);
        }
        i += len;
    }
    out += '"';
}

std::string json_float(double d) {
    if (std::isnan(d)) return "NaN";
    if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
    return py_float_repr(d);
}

struct JsonWriter {
    int indent;
    bool ensure_ascii;
    bool sort_keys;
    size_t max_bytes;
    std::string out;
    int depth = 0;

    void newline() {
        if (indent < 0) return;
        out += '\n';
        out.append(static_cast<size_t>(indent) * static_cast<size_t>(depth), ' ');
    }

    std::string key_text(const Value& k) {
        switch (k.kind()) {
            case Kind::String:
                return k.str();
            case Kind::Bool:
                return k.as_bool() ? "true" : "false";
            case Kind::None:
                return "null";
            case Kind::Int:
                return std::to_string(k.as_int());
            case Kind::Float:
                return json_float(k.as_float());
            default:
                eval_fail("keys must be str, int, float, bool or None, not " + type_name(k));
        }
    }

    void write(const Value& v) {
        if (depth > 512) eval_fail("tojson: value nested too deeply");
        if (out.size() > max_bytes)
            eval_fail(
                str_cat("render limit exceeded: tojson text is larger than ", max_bytes, " bytes"));
        switch (v.kind()) {
            case Kind::None:
                out += "null";
                return;
            case Kind::Bool:
                out += v.as_bool() ? "true" : "false";
                return;
            case Kind::Int:
                out += std::to_string(v.as_int());
                return;
            case Kind::Float:
                out += json_float(v.as_float());
                return;
            case Kind::String:
                append_json_string(out, v.str(), ensure_ascii);
                return;
            case Kind::List:
                write_list(v.list_ref().items);
                return;
            case Kind::Dict:
                if (v.dict_ref().type == Dict::Type::Plain) return write_dict(v.dict_ref());
                break;
            default:
                break;
        }
        eval_fail("Object of type " + type_name(v) + " is not JSON serializable");
    }

    void write_list(const std::vector<Value>& items) {
        if (items.empty()) {
            out += "[]";
            return;
        }
        out += '[';
        ++depth;
        for (size_t i = 0; i < items.size(); ++i) {
            if (i) out += indent < 0 ? ", " : ",";
            newline();
            write(items[i]);
        }
        --depth;
        newline();
        out += ']';
    }

    void write_dict(const Dict& d) {
        if (d.items.empty()) {
            out += "{}";
            return;
        }
        std::vector<std::pair<std::string, const Value*>> entries;
        for (const auto& [k, v] : d.items) entries.emplace_back(key_text(k), &v);
        if (sort_keys)
            std::stable_sort(entries.begin(), entries.end(),
                             [](const auto& a, const auto& b) { return a.first < b.first; });
        out += '{';
        ++depth;
        for (size_t i = 0; i < entries.size(); ++i) {
            if (i) out += indent < 0 ? ", " : ",";
            newline();
            append_json_string(out, entries[i].first, ensure_ascii);
            out += ": ";
            write(*entries[i].second);
        }
        --depth;
        newline();
        out += '}';
    }
};

}  // namespace

Value from_json(const nlohmann::ordered_json& j) {
    return convert(j);
}
Value from_json(const nlohmann::json& j) {
    return convert(j);
}

std::string to_json(const Value& v, int indent, bool ensure_ascii, bool sort_keys,
                    size_t max_bytes) {
    JsonWriter w{indent, ensure_ascii, sort_keys, max_bytes, {}};
    w.write(v);
    return std::move(w.out);
}

}  // namespace hf2q::jinja

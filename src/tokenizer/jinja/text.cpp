#include "tokenizer/jinja/text.h"

namespace hf2q::jinja {

static constexpr uint32_t kInvalid = 0xFFFFFFFFu;

uint32_t utf8_decode(std::string_view s, size_t pos, size_t& len) {
    auto b0 = static_cast<unsigned char>(s[pos]);
    len = 1;
    if (b0 < 0x80) return b0;
    size_t n = b0 >= 0xF0 && b0 < 0xF5 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC2 && b0 < 0xE0 ? 2 : 0;
    if (n == 0 || pos + n > s.size()) return kInvalid;
    uint32_t cp = b0 & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
        auto b = static_cast<unsigned char>(s[pos + k]);
        if ((b & 0xC0) != 0x80) return kInvalid;
        cp = (cp << 6) | (b & 0x3F);
    }
    // Reject overlong forms, surrogates and values past U+10FFFF.
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return kInvalid;
    len = n;
    return cp;
}


std::vector<size_t> utf8_offsets(std::string_view s) {
    std::vector<size_t> off;
    off.reserve(s.size() + 1);
    for (size_t i = 0; i < s.size();) {
        off.push_back(i);
        size_t len;
        utf8_decode(s, i, len);
        i += len;
    }
    off.push_back(s.size());
    return off;
}

size_t utf8_length(std::string_view s) {
    size_t n = 0;
    for (size_t i = 0; i < s.size(); ++n) {
        size_t len;
        utf8_decode(s, i, len);
        i += len;
    }
    return n;
}

bool py_isspace(uint32_t cp) {
    if ((cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20)) return true;
    switch (cp) {
        case 0x85:
        case 0xA0:
        case 0x1680:
        case 0x2028:
        case 0x2029:
        case 0x202F:
        case 0x205F:
        case 0x3000:
            return true;
        default:
            return cp >= 0x2000 && cp <= 0x200A;
    }
}

// Code points of s as (cp, byte offset, byte length).
struct Cp {
    uint32_t cp;
    size_t pos, len;
};
static std::vector<Cp> code_points(std::string_view s) {
    std::vector<Cp> v;
    for (size_t i = 0; i < s.size();) {
        size_t len;
        uint32_t cp = utf8_decode(s, i, len);
        v.push_back({cp, i, len});
        i += len;
    }
    return v;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right) {
    std::vector<uint32_t> set;
    if (chars)
        for (const Cp& c : code_points(*chars)) set.push_back(c.cp);
    auto strip_it = [&](uint32_t cp) {
        if (!chars) return py_isspace(cp);
        for (uint32_t c : set)
            if (c == cp && cp != kInvalid) return true;
        return false;
    };
    auto cps = code_points(s);
    size_t b = 0, e = cps.size();
    if (left)
        while (b < e && strip_it(cps[b].cp)) ++b;
    if (right)
        while (e > b && strip_it(cps[e - 1].cp)) --e;
    if (b == e) return {};
    size_t start = cps[b].pos, end = cps[e - 1].pos + cps[e - 1].len;
    return std::string(s.substr(start, end - start));
}

static uint32_t to_upper_cp(uint32_t c) {
    if (c >= 'a' && c <= 'z') return c - 32;
    if (c < 0x80) return c;
    if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
    if (c == 0xFF) return 0x178;
    if (c == 0xB5) return 0x39C;
    if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
    if (c == 0x3C2) return 0x3A3;
    if (c >= 0x430 && c <= 0x44F) return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    return c;
}

static uint32_t to_lower_cp(uint32_t c) {
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c < 0x80) return c;
    if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
    if (c == 0x178) return 0xFF;
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
    if (c >= 0x410 && c <= 0x42F) return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    return c;
}

template <class F>
static std::string map_cps(std::string_view s, F f) {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    for (const Cp& c : code_points(s)) {
        uint32_t m = c.cp == kInvalid ? c.cp : f(c.cp, i++);
        if (m == c.cp)
            out.append(s.substr(c.pos, c.len));
        else
            utf8_append(out, m);
    }
    return out;
}

std::string py_upper(std::string_view s) {
    return map_cps(s, [](uint32_t c, size_t) { return to_upper_cp(c); });
}

std::string py_lower(std::string_view s) {
    return map_cps(s, [](uint32_t c, size_t) { return to_lower_cp(c); });
}

std::string py_capitalize(std::string_view s) {
    return map_cps(s,
                   [](uint32_t c, size_t i) { return i == 0 ? to_upper_cp(c) : to_lower_cp(c); });
}

// jinja2's title filter: split at runs of whitespace and "-({[<", upper-case the first
// code point of each piece and lower-case the rest.
std::string py_title(std::string_view s) {
    bool start = true;
    return map_cps(s, [&](uint32_t c, size_t) {
        uint32_t r = start ? to_upper_cp(c) : to_lower_cp(c);
        start = py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        return r;
    });
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
    std::vector<std::string> out;
    if (sep) {
        size_t pos = 0;
        while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
            size_t f = s.find(*sep, pos);
            if (f == std::string_view::npos) break;
            out.emplace_back(s.substr(pos, f - pos));
            pos = f + sep->size();
        }
        out.emplace_back(s.substr(pos));
        return out;
    }
    auto cps = code_points(s);
    size_t i = 0;
    while (i < cps.size()) {
        while (i < cps.size() && py_isspace(cps[i].cp)) ++i;
        if (i == cps.size()) break;
        if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
            std::string rest(s.substr(cps[i].pos));
            out.push_back(py_strip(rest, std::nullopt, false, true));
            return out;
        }
        size_t j = i;
        while (j < cps.size() && !py_isspace(cps[j].cp)) ++j;
        size_t end = j < cps.size() ? cps[j].pos : s.size();
        out.emplace_back(s.substr(cps[i].pos, end - cps[i].pos));
        i = j;
    }
    return out;
}

std::string py_replace(std::string_view s, std::string_view from, std::string_view to,
                       int64_t count) {
    std::string out;
    int64_t done = 0;
    if (from.empty()) {
        // Python inserts `to` before every code point and at the end.
        auto cps = code_points(s);
        for (const Cp& c : cps) {
            if (count < 0 || done < count) {
                out.append(to);
                ++done;
            }
            out.append(s.substr(c.pos, c.len));
        }
        if (count < 0 || done < count) out.append(to);
        return out;
    }
    size_t pos = 0;
    while (count < 0 || done < count) {
        size_t f = s.find(from, pos);
        if (f == std::string_view::npos) break;
        out.append(s.substr(pos, f - pos));
        out.append(to);
        pos = f + from.size();
        ++done;
    }
    out.append(s.substr(pos));
    return out;
}

std::string html_escape(std::string_view s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&#34;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

}  // namespace hf2q::jinja

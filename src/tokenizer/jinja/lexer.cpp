#include "tokenizer/jinja/lexer.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/jinja/text.h"

namespace hf2q::jinja {
namespace {

bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
    return is_name_start(c) || is_digit(c);
}

std::string rstrip_ws(const std::string& s) {
    size_t e = s.size();
    while (e > 0 && is_ws(s[e - 1])) --e;
    return s.substr(0, e);
}

class Lexer {
  public:
    Lexer(std::string src, const std::string& name) : src_(std::move(src)), name_(name) {
        line_starts_.push_back(0);
        for (size_t i = 0; i < src_.size(); ++i)
            if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }

    std::vector<Token> run() {
        while (pos_ < src_.size()) lex_data();
        push(Tok::End, "", src_.size());
        return std::move(out_);
    }

  private:
    [[noreturn]] void error(size_t at, const std::string& msg) const {
        auto [line, col] = line_col(at);
        fail(name_, ":", line, ":", col, ": ", msg);
    }
    std::pair<int, int> line_col(size_t at) const {
        auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), at);
        size_t li = static_cast<size_t>(it - line_starts_.begin()) - 1;
        size_t col = at - line_starts_[li];  // bytes: keeps long one-line sources linear
        return {static_cast<int>(li + 1), static_cast<int>(col + 1)};
    }
    void push(Tok t, std::string text, size_t at) {
        auto [line, col] = line_col(at);
        out_.push_back(Token{t, std::move(text), line, col});
    }
    bool at(size_t p, const char* s) const {
        return src_.compare(p, std::char_traits<char>::length(s), s) == 0;
    }

    // Text up to the next tag opener, whitespace-controlled, then the tag itself.
    void lex_data() {
        size_t start = pos_, open = pos_;
        while (true) {
            open = src_.find('{', open);
            if (open == std::string::npos || open + 1 >= src_.size()) {
                open = std::string::npos;
                break;
            }
            char c = src_[open + 1];
            if (c == '{' || c == '%' || c == '#') break;
            ++open;
        }
        if (open == std::string::npos) {
            emit_data(src_.substr(start), start);
            pos_ = src_.size();
            return;
        }
        char kind = src_[open + 1];
        char sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
        if (sign != '-' && sign != '+') sign = '\0';
        std::string text = src_.substr(start, open - start);
        if (sign == '-') {
            text = rstrip_ws(text);
        } else if (sign != '+' && kind != '{') {
            size_t l_pos = text.rfind('\n');
            l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
            if (l_pos > 0 || line_starting_) {
                bool blank = std::all_of(text.begin() + static_cast<long>(l_pos), text.end(),
                                         [](char c) { return c == ' ' || c == '\t'; });
                if (blank) text.resize(l_pos);
            }
        }
        emit_data(std::move(text), start);
        line_starting_ = false;
        pos_ = open + 2 + (sign ? 1 : 0);
        if (kind == '#')
            lex_comment(open);
        else if (kind == '%' && try_raw(open))
            return;
        else
            lex_tag(kind == '{', open);
    }

    void emit_data(std::string text, size_t at) {
        if (!text.empty()) push(Tok::Data, std::move(text), at);
    }

    // After a closing "%}" / "#}": "-" eats all whitespace, plain eats one newline.
    void after_close(char sign, bool trim_newline) {
        if (sign == '-') {
            while (pos_ < src_.size() && is_ws(src_[pos_])) ++pos_;
        } else if (sign != '+' && trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
            ++pos_;
        }
        line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
    }

    void lex_comment(size_t open) {
        size_t close = src_.find("#}", pos_);
        if (close == std::string::npos) error(open, "unterminated comment");
        char sign = close > pos_ && (src_[close - 1] == '-' || src_[close - 1] == '+')
                        ? src_[close - 1]
                        : '\0';
        pos_ = close + 2;
        after_close(sign, true);
    }

    // "{% raw %}" ... "{% endraw %}": contents are literal text.
    bool try_raw(size_t open) {
        size_t p = pos_;
        while (p < src_.size() && is_ws(src_[p])) ++p;
        if (!at(p, "raw")) return false;
        p += 3;
        while (p < src_.size() && is_ws(src_[p])) ++p;
        char sign = '\0';
        if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
        if (!at(p, "%}")) return false;
        pos_ = p + 2;
        after_close(sign, false);
        size_t body = pos_;
        for (size_t q = body;; ++q) {
            q = src_.find("{%", q);
            if (q == std::string::npos) error(open, "missing '{% endraw %}' for raw block");
            size_t r = q + 2;
            char lsign = r < src_.size() && (src_[r] == '-' || src_[r] == '+') ? src_[r++] : '\0';
            while (r < src_.size() && is_ws(src_[r])) ++r;
            if (!at(r, "endraw")) continue;
            r += 6;
            while (r < src_.size() && is_ws(src_[r])) ++r;
            char rsign = '\0';
            if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) rsign = src_[r++];
            if (!at(r, "%}")) continue;
            std::string text = src_.substr(body, q - body);
            if (lsign == '-') text = rstrip_ws(text);
            emit_data(std::move(text), body);
            pos_ = r + 2;
            after_close(rsign, true);
            return true;
        }
    }

    void lex_tag(bool var, size_t open) {
        push(var ? Tok::VarBegin : Tok::BlockBegin, "", open);
        int depth = 0;
        while (true) {
            while (pos_ < src_.size() && is_ws(src_[pos_])) ++pos_;
            if (pos_ >= src_.size()) error(open, var ? "unterminated '{{'" : "unterminated '{%'");
            if (depth == 0 && try_close(var)) return;
            lex_token(depth);
        }
    }

    bool try_close(bool var) {
        const char* close = var ? "}}" : "%}";
        char sign = '\0';
        size_t p = pos_;
        if (src_[p] == '-' || (!var && src_[p] == '+')) {
            sign = src_[p];
            ++p;
        }
        if (!at(p, close)) return false;
        push(var ? Tok::VarEnd : Tok::BlockEnd, "", pos_);
        pos_ = p + 2;
        after_close(sign, !var);
        return true;
    }

    void lex_token(int& depth) {
        size_t s = pos_;
        char c = src_[pos_];
        if (is_digit(c)) return lex_number();
        if (is_name_start(c)) {
            while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
            return push(Tok::Name, src_.substr(s, pos_ - s), s);
        }
        if (c == '\'' || c == '"') return lex_string();
        static const char* two[] = {"//", "**", "==", "!=", ">=", "<="};
        for (const char* op : two) {
            if (at(pos_, op)) {
                pos_ += 2;
                return push(Tok::Op, op, s);
            }
        }
        if (std::string_view("+-/*%~[](){}=.:|,;<>").find(c) == std::string_view::npos)
            error(pos_, str_cat("unexpected char '", c, "'"));
        if (c == '(' || c == '[' || c == '{') ++depth;
        if (c == ')' || c == ']' || c == '}') {
            if (depth == 0) error(pos_, str_cat("unexpected '", c, "'"));
            --depth;
        }
        ++pos_;
        push(Tok::Op, std::string(1, c), s);
    }

    void lex_number() {
        size_t s = pos_;
        auto digits = [&] {
            while (pos_ < src_.size() &&
                   (is_digit(src_[pos_]) ||
                    (src_[pos_] == '_' && pos_ + 1 < src_.size() && is_digit(src_[pos_ + 1]))))
                ++pos_;
        };
        digits();
        bool is_float = false;
        if (pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
            ++pos_;
            digits();
            is_float = true;
        }
        if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
            size_t p = pos_ + 1;
            if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
            if (p < src_.size() && is_digit(src_[p])) {
                pos_ = p;
                digits();
                is_float = true;
            }
        }
        std::string text;
        for (size_t i = s; i < pos_; ++i)
            if (src_[i] != '_') text += src_[i];
        push(is_float ? Tok::Float : Tok::Int, text, s);
    }

    void lex_string() {
        size_t s = pos_;
        char q = src_[pos_++];
        std::string out;
        while (true) {
            if (pos_ >= src_.size()) error(s, "unterminated string");
            char c = src_[pos_++];
            if (c == q) break;
            if (c != '\\') {
                out += c;
                continue;
            }
            if (pos_ >= src_.size()) error(s, "unterminated string");
            lex_escape(out);
        }
        push(Tok::String, std::move(out), s);
    }

    // Python "unicode-escape" decoding of one escape; unknown escapes stay literal.
    void lex_escape(std::string& out) {
        char e = src_[pos_++];
        auto hex = [&](int n) -> uint32_t {
            uint32_t v = 0;
            for (int k = 0; k < n; ++k) {
                char h = pos_ < src_.size() ? src_[pos_] : '\0';
                int d = is_digit(h)              ? h - '0'
                        : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                 : -1;
                if (d < 0) error(pos_, "truncated \\x/\\u escape in string");
                v = v * 16 + static_cast<uint32_t>(d);
                ++pos_;
            }
            return v;
        };
        switch (e) {
            case 'n':
                out += '\n';
                break;
            case 't':
                out += '\t';
                break;
            case 'r':
                out += '\r';
                break;
            case '\\':
                out += '\\';
                break;
            case '\'':
                out += '\'';
                break;
            case '"':
                out += '"';
                break;
            case 'a':
                out += '\a';
                break;
            case 'b':
                out += '\b';
                break;
            case 'f':
                out += '\f';
                break;
            case 'v':
                out += '\v';
                break;
            case '\n':
                break;
            case 'x':
                utf8_append(out, hex(2));
                break;
            case 'u':
                utf8_append(out, checked_cp(hex(4)));
                break;
            case 'U':
                utf8_append(out, checked_cp(hex(8)));
                break;
            default:
                if (e >= '0' && e <= '7') {
                    uint32_t v = static_cast<uint32_t>(e - '0');
                    for (int k = 0;
                         k < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++k)
                        v = v * 8 + static_cast<uint32_t>(src_[pos_++] - '0');
                    utf8_append(out, v);
                } else {
                    out += '\\';
                    out += e;
                }
        }
    }

    uint32_t checked_cp(uint32_t cp) const {
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            error(pos_, "invalid code point in string escape");
        return cp;
    }

    std::string src_;
    const std::string& name_;
    std::vector<size_t> line_starts_;
    std::vector<Token> out_;
    size_t pos_ = 0;
    bool line_starting_ = true;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source, const std::string& name) {
    std::string src;
    src.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
        if (source[i] == '\r') {
            src += '\n';
            if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
        } else {
            src += source[i];
        }
    }
    if (!src.empty() && src.back() == '\n') src.pop_back();
    return Lexer(std::move(src), name).run();
}

}  // namespace hf2q::jinja

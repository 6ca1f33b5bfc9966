// Template source -> token stream, following jinja2's lexer with trim_blocks=True,
// lstrip_blocks=True and keep_trailing_newline=False:
//  - newlines are normalised to "\n" and one trailing newline is dropped;
//  - "{%-" / "{{-" / "{#-" strip all whitespace before the tag, "-%}" / "-}}" / "-#}"
//    all whitespace after it;
//  - trim_blocks drops the first newline after "%}" and "#}" (not after "+%}");
//  - lstrip_blocks drops spaces and tabs between a line start and "{%" / "{#" (not
//    after "{%+" and never before "{{");
//  - comments vanish, "{% raw %}...{% endraw %}" becomes plain text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hf2q::jinja {

enum class Tok : uint8_t {
    Data,        // text outside tags
    VarBegin,    // {{
    VarEnd,      // }}
    BlockBegin,  // {%
    BlockEnd,    // %}
    Name,
    String,
    Int,
    Float,
    Op,   // operators and punctuation, text in `text`
    End,  // end of input
};

struct Token {
    Tok type;
    std::string text;  // data, name, decoded string literal, number literal, operator
    int line = 1;
    int col = 1;
};

// Throws hf2q::Error "name:line:col: message" on unterminated tags, strings or bad
// characters.
std::vector<Token> tokenize(const std::string& source, const std::string& name);

}  // namespace hf2q::jinja

// Token stream -> syntax tree, with jinja2's grammar and operator precedence:
//   cond-expr < or < and < not < compare/in < + - < ~ < * / // % < ** < unary - +
//   < postfix (. [] ()) and filters/tests (| is), which bind tighter than any operator.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace hf2q::jinja {

// Nesting limit for expressions and blocks: keeps the recursive parser (and the
// evaluator that walks its tree) far from the stack's end on hostile input.
inline constexpr int kMaxParseDepth = 256;

// Throws hf2q::Error "name:line:col: message" on syntax errors.
std::vector<NodePtr> parse_template(const std::vector<Token>& tokens, const std::string& name);

}  // namespace hf2q::jinja

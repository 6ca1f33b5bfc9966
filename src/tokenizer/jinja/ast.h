// Syntax tree of a parsed template. One node struct for every construct keeps the
// parser and evaluator short; the comment on each NodeType says which fields it uses.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace hf2q::jinja {

enum class NodeType {
    // Expressions.
    Const,     // value
    Name,      // s = variable name
    GetAttr,   // args[0] = object, s = attribute            (a.b: attribute first, then item)
    GetItem,   // args[0] = object, args[1] = key            (a[b]: item first, then attribute)
    Slice,     // args[0] = object, args[1..3] = start/stop/step (each may be null)
    Call,      // args[0] = callee, args[1..] = positional, kwargs
    Filter,    // s = filter name, args[0] = subject (null inside a filter block), args[1..], kwargs
    Test,      // s = test name, args[0] = subject, args[1..], kwargs; negate for "is not"
    Unary,     // s = "-" | "+" | "not", args[0]
    And,       // args[0], args[1]
    Or,        // args[0], args[1]
    BinOp,     // s = "+" "-" "*" "/" "//" "%" "**" "~", args[0], args[1]
    Compare,   // args = operands, names = operators ("==", "!=", "<", "<=", ">", ">=", "in",
               // "notin")
    CondExpr,  // args[0] = condition, args[1] = then value, args[2] = else value (may be null)
    ListLit,   // args = items
    TupleLit,  // args = items
    DictLit,   // args = key0, value0, key1, value1, ...
    // Statements.
    Text,       // s = literal output
    Print,      // args[0]
    If,         // args[0] = condition, body, orelse
    For,        // args[0] = target (Name or TupleLit), args[1] = iterable, args[2] = filter (may be
                // null), body, orelse
    Set,        // args[0] = target (Name, TupleLit or GetAttr on a Name), args[1] = value
    SetBlock,   // args[0] = target, args[1] = filter chain with null subject (may be null), body
    Macro,      // s = name, names = parameters, args = defaults (null where none), body
    CallBlock,  // args[0] = Call expression, names = caller parameters, args[1..] = their defaults,
                // body
    FilterBlock,  // args[0] = filter chain with null subject, body
    Break,
    Continue,
    Generation,  // body (transformers' {% generation %} marker: renders its body)
};

struct Node;
using NodePtr = std::unique_ptr<Node>;

struct Node {
    NodeType type;
    int line = 0;
    int col = 0;
    std::string s;
    Value value;
    std::vector<NodePtr> args;
    std::vector<std::pair<std::string, NodePtr>> kwargs;
    std::vector<std::string> names;
    std::vector<NodePtr> body;
    std::vector<NodePtr> orelse;
    bool negate = false;
};

}  // namespace hf2q::jinja

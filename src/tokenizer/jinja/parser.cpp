#include "tokenizer/jinja/parser.h"

#include <charconv>
#include <cstdlib>
#include <initializer_list>

#include "core/error.h"

namespace hf2q::jinja {
namespace {

class Parser {
  public:
    Parser(const std::vector<Token>& toks, const std::string& name) : t_(toks), name_(name) {}

    std::vector<NodePtr> run() {
        auto body = parse_body({});
        if (cur().type != Tok::End) error_at(cur(), "unexpected '" + peek(1).text + "'");
        return body;
    }

  private:
    // Guards recursion into nested blocks and sub-expressions.
    struct DepthGuard {
        Parser& p;
        explicit DepthGuard(Parser& parser) : p(parser) {
            if (++p.depth_ > kMaxParseDepth) p.error_at(p.cur(), "template nesting too deep");
        }
        ~DepthGuard() { --p.depth_; }
    };
    // Left-associative chains ("a + b + c", "x.a.b", "x | f | g") grow the tree without
    // recursing; each link counts as one level of nesting until the chain is done.
    struct ChainGuard {
        Parser& p;
        int links = 0;
        explicit ChainGuard(Parser& parser) : p(parser) {}
        void link() {
            ++links;
            if (++p.depth_ > kMaxParseDepth) p.error_at(p.cur(), "template nesting too deep");
        }
        ~ChainGuard() { p.depth_ -= links; }
    };

    const Token& cur() const { return t_[pos_]; }
    const Token& peek(size_t k) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
    void advance() {
        if (pos_ + 1 < t_.size()) ++pos_;
    }
    [[noreturn]] void error_at(const Token& tok, const std::string& msg) const {
        fail(name_, ":", tok.line, ":", tok.col, ": ", msg);
    }
    static std::string describe(const Token& tok) {
        switch (tok.type) {
            case Tok::End:
                return "end of template";
            case Tok::BlockEnd:
                return "'%}'";
            case Tok::VarEnd:
                return "'}}'";
            case Tok::Data:
                return "text";
            case Tok::String:
                return "string";
            default:
                return "'" + tok.text + "'";
        }
    }
    bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
    bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
    bool skip_op(const char* op) {
        if (!is_op(op)) return false;
        advance();
        return true;
    }
    bool skip_name(const char* n) {
        if (!is_name(n)) return false;
        advance();
        return true;
    }
    void expect_op(const char* op) {
        if (!skip_op(op))
            error_at(cur(), std::string("expected '") + op + "', got " + describe(cur()));
    }
    std::string expect_name() {
        if (cur().type != Tok::Name) error_at(cur(), "expected a name, got " + describe(cur()));
        std::string n = cur().text;
        advance();
        return n;
    }
    void expect_block_end() {
        if (cur().type != Tok::BlockEnd) error_at(cur(), "expected '%}', got " + describe(cur()));
        advance();
    }
    NodePtr node(NodeType type, const Token& at) const {
        auto n = std::make_unique<Node>();
        n->type = type;
        n->line = at.line;
        n->col = at.col;
        return n;
    }

    // ---- statements ------------------------------------------------------------

    // Parses until "{% <one of ends> ..." (left at the end tag's name) or end of input.
    std::vector<NodePtr> parse_body(std::initializer_list<const char*> ends) {
        DepthGuard g(*this);
        std::vector<NodePtr> out;
        while (cur().type != Tok::End) {
            const Token& tok = cur();
            if (tok.type == Tok::Data) {
                auto n = node(NodeType::Text, tok);
                n->s = tok.text;
                out.push_back(std::move(n));
                advance();
            } else if (tok.type == Tok::VarBegin) {
                advance();
                auto n = node(NodeType::Print, tok);
                n->args.push_back(parse_tuple(true));
                if (cur().type != Tok::VarEnd)
                    error_at(cur(), "expected '}}', got " + describe(cur()));
                advance();
                out.push_back(std::move(n));
            } else if (tok.type == Tok::BlockBegin) {
                const Token& kw = peek(1);
                for (const char* e : ends)
                    if (kw.type == Tok::Name && kw.text == e) {
                        advance();
                        return out;
                    }
                advance();
                out.push_back(parse_statement());
            } else {
                error_at(tok, "unexpected " + describe(tok));
            }
        }
        if (ends.size() > 0)  // the last end tag listed is the one that closes the block
            error_at(cur(), std::string("unexpected end of template, missing '{% ") +
                                *(ends.end() - 1) + " %}'");
        return out;
    }

    NodePtr parse_statement() {
        const Token& kw = cur();
        if (kw.type != Tok::Name) error_at(kw, "expected a tag name, got " + describe(kw));
        const std::string& k = kw.text;
        if (k == "if") return parse_if();
        if (k == "for") return parse_for();
        if (k == "set") return parse_set();
        if (k == "macro") return parse_macro();
        if (k == "call") return parse_call_block();
        if (k == "filter") return parse_filter_block();
        if (k == "generation") {
            auto n = node(NodeType::Generation, kw);
            advance();
            expect_block_end();
            n->body = parse_body({"endgeneration"});
            end_tag();
            return n;
        }
        if (k == "break" || k == "continue") {
            if (loop_depth_ == 0) error_at(kw, "'" + k + "' outside of a loop");
            auto n = node(k == "break" ? NodeType::Break : NodeType::Continue, kw);
            advance();
            expect_block_end();
            return n;
        }
        if (k.rfind("end", 0) == 0 || k == "elif" || k == "else")
            error_at(kw, "unexpected '" + k + "'");
        error_at(kw, "unknown tag '" + k + "'");
    }

    void end_tag() {  // at the end tag's name
        advance();
        expect_block_end();
    }

    NodePtr parse_if() {
        auto n = node(NodeType::If, cur());
        advance();
        n->args.push_back(parse_tuple(true));
        expect_block_end();
        n->body = parse_body({"elif", "else", "endif"});
        if (is_name("elif")) {
            n->orelse.push_back(parse_if());  // consumes through the shared endif
            return n;
        }
        if (is_name("else")) {
            advance();
            expect_block_end();
            n->orelse = parse_body({"endif"});
        }
        end_tag();
        return n;
    }

    NodePtr parse_for() {
        auto n = node(NodeType::For, cur());
        advance();
        n->args.push_back(parse_assign_target(false));
        if (!skip_name("in")) error_at(cur(), "expected 'in', got " + describe(cur()));
        n->args.push_back(parse_tuple(false));
        n->args.push_back(skip_name("if") ? parse_expression(true) : nullptr);
        if (is_name("recursive")) error_at(cur(), "recursive loops are not supported");
        expect_block_end();
        ++loop_depth_;
        n->body = parse_body({"else", "endfor"});
        --loop_depth_;
        if (is_name("else")) {
            advance();
            expect_block_end();
            n->orelse = parse_body({"endfor"});
        }
        end_tag();
        return n;
    }

    NodePtr parse_set() {
        const Token& at = cur();
        advance();
        NodePtr target = parse_assign_target(true);
        if (skip_op("=")) {
            auto n = node(NodeType::Set, at);
            n->args.push_back(std::move(target));
            n->args.push_back(parse_tuple(true));
            expect_block_end();
            return n;
        }
        auto n = node(NodeType::SetBlock, at);
        n->args.push_back(std::move(target));
        n->args.push_back(is_op("|") ? parse_filter_chain(nullptr) : nullptr);
        expect_block_end();
        n->body = parse_body({"endset"});
        end_tag();
        return n;
    }

    // Parameter list "(a, b=1)" for macros and call blocks.
    void parse_params(Node& n) {
        expect_op("(");
        while (!is_op(")")) {
            if (!n.names.empty()) expect_op(",");
            if (is_op(")")) break;
            n.names.push_back(expect_name());
            n.args.push_back(skip_op("=") ? parse_expression(true) : nullptr);
        }
        expect_op(")");
    }

    NodePtr parse_macro() {
        auto n = node(NodeType::Macro, cur());
        advance();
        n->s = expect_name();
        parse_params(*n);
        expect_block_end();
        int saved = loop_depth_;
        loop_depth_ = 0;
        n->body = parse_body({"endmacro"});
        loop_depth_ = saved;
        end_tag();
        return n;
    }

    NodePtr parse_call_block() {
        auto n = node(NodeType::CallBlock, cur());
        advance();
        n->args.push_back(nullptr);
        if (is_op("(")) parse_params(*n);
        NodePtr call = parse_expression(true);
        if (call->type != NodeType::Call) error_at(cur(), "expected a macro call in 'call' block");
        n->args[0] = std::move(call);
        expect_block_end();
        n->body = parse_body({"endcall"});
        end_tag();
        return n;
    }

    NodePtr parse_filter_block() {
        auto n = node(NodeType::FilterBlock, cur());
        advance();
        n->args.push_back(parse_filter_chain(nullptr, /*first_bar=*/false));
        expect_block_end();
        n->body = parse_body({"endfilter"});
        end_tag();
        return n;
    }

    // "a", "a, b", "(a, b)" or, for set, "ns.attr".
    NodePtr parse_assign_target(bool allow_attr) {
        const Token& at = cur();
        if (skip_op("(")) {
            auto t = parse_name_tuple(at);
            expect_op(")");
            return t;
        }
        std::string first = expect_name();
        if (allow_attr && skip_op(".")) {
            auto n = node(NodeType::GetAttr, at);
            auto base = node(NodeType::Name, at);
            base->s = first;
            n->args.push_back(std::move(base));
            n->s = expect_name();
            return n;
        }
        auto nm = node(NodeType::Name, at);
        nm->s = first;
        if (!is_op(",")) return nm;
        auto t = node(NodeType::TupleLit, at);
        t->args.push_back(std::move(nm));
        while (skip_op(",")) {
            if (cur().type != Tok::Name) break;
            auto e = node(NodeType::Name, cur());
            e->s = expect_name();
            t->args.push_back(std::move(e));
        }
        return t;
    }

    NodePtr parse_name_tuple(const Token& at) {
        auto t = node(NodeType::TupleLit, at);
        while (!is_op(")")) {
            if (!t->args.empty()) expect_op(",");
            if (is_op(")")) break;
            auto e = node(NodeType::Name, cur());
            e->s = expect_name();
            t->args.push_back(std::move(e));
        }
        return t;
    }

    // ---- expressions -----------------------------------------------------------

    // Expression or bare tuple "a, b".
    NodePtr parse_tuple(bool with_condexpr) {
        const Token& at = cur();
        NodePtr first = parse_expression(with_condexpr);
        if (!is_op(",")) return first;
        auto t = node(NodeType::TupleLit, at);
        t->args.push_back(std::move(first));
        while (skip_op(",")) {
            if (cur().type == Tok::BlockEnd || cur().type == Tok::VarEnd || is_name("if")) break;
            t->args.push_back(parse_expression(with_condexpr));
        }
        return t;
    }

    NodePtr parse_expression(bool with_condexpr) {
        DepthGuard g(*this);
        NodePtr e = parse_or();
        ChainGuard chain(*this);
        while (with_condexpr && is_name("if")) {
            chain.link();
            auto c = node(NodeType::CondExpr, cur());
            advance();
            c->args.push_back(parse_or());
            c->args.push_back(std::move(e));
            c->args.push_back(skip_name("else") ? parse_expression(true) : nullptr);
            e = std::move(c);
        }
        return e;
    }

    NodePtr binary(NodeType type, NodePtr a, NodePtr b, const Token& at, std::string op = {}) {
        auto n = node(type, at);
        n->s = std::move(op);
        n->args.push_back(std::move(a));
        n->args.push_back(std::move(b));
        return n;
    }

    // operand (word operand)*, left-associative: "or" over "and" over "not".
    NodePtr parse_chain(const char* word, NodeType type, NodePtr (Parser::*operand)()) {
        NodePtr e = (this->*operand)();
        ChainGuard chain(*this);
        while (is_name(word)) {
            chain.link();
            const Token& at = cur();
            advance();
            e = binary(type, std::move(e), (this->*operand)(), at);
        }
        return e;
    }
    NodePtr parse_or() { return parse_chain("or", NodeType::Or, &Parser::parse_and); }
    NodePtr parse_and() { return parse_chain("and", NodeType::And, &Parser::parse_not); }

    NodePtr parse_not() {
        if (is_name("not")) {
            DepthGuard g(*this);
            auto n = node(NodeType::Unary, cur());
            n->s = "not";
            advance();
            n->args.push_back(parse_not());
            return n;
        }
        return parse_compare();
    }

    NodePtr parse_compare() {
        const Token& at = cur();
        NodePtr e = parse_math1();
        NodePtr cmp;
        ChainGuard chain(*this);
        while (true) {
            chain.link();
            std::string op;
            if (cur().type == Tok::Op &&
                (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                 cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
                op = cur().text;
                advance();
            } else if (is_name("in")) {
                op = "in";
                advance();
            } else if (is_name("not") && peek(1).type == Tok::Name && peek(1).text == "in") {
                op = "notin";
                advance();
                advance();
            } else {
                break;
            }
            if (!cmp) {
                cmp = node(NodeType::Compare, at);
                cmp->args.push_back(std::move(e));
            }
            cmp->names.push_back(op);
            cmp->args.push_back(parse_math1());
        }
        return cmp ? std::move(cmp) : std::move(e);
    }

    NodePtr parse_math1() {
        NodePtr e = parse_concat();
        ChainGuard chain(*this);
        while (is_op("+") || is_op("-")) {
            chain.link();
            const Token& at = cur();
            std::string op = at.text;
            advance();
            e = binary(NodeType::BinOp, std::move(e), parse_concat(), at, op);
        }
        return e;
    }

    NodePtr parse_concat() {
        NodePtr e = parse_math2();
        ChainGuard chain(*this);
        while (is_op("~")) {
            chain.link();
            const Token& at = cur();
            advance();
            e = binary(NodeType::BinOp, std::move(e), parse_math2(), at, "~");
        }
        return e;
    }

    NodePtr parse_math2() {
        NodePtr e = parse_pow();
        ChainGuard chain(*this);
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            chain.link();
            const Token& at = cur();
            std::string op = at.text;
            advance();
            e = binary(NodeType::BinOp, std::move(e), parse_pow(), at, op);
        }
        return e;
    }

    NodePtr parse_pow() {
        NodePtr e = parse_unary(true);
        ChainGuard chain(*this);
        while (is_op("**")) {
            chain.link();
            const Token& at = cur();
            advance();
            e = binary(NodeType::BinOp, std::move(e), parse_unary(true), at, "**");
        }
        return e;
    }

    NodePtr parse_unary(bool with_filter) {
        DepthGuard g(*this);
        NodePtr e;
        if (is_op("-") || is_op("+")) {
            e = node(NodeType::Unary, cur());
            e->s = cur().text;
            advance();
            e->args.push_back(parse_unary(false));
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        if (with_filter) e = parse_filter_expr(std::move(e));
        return e;
    }

    NodePtr parse_primary();
    NodePtr parse_postfix(NodePtr e);
    NodePtr parse_subscript(NodePtr e);
    NodePtr parse_filter_expr(NodePtr e);
    NodePtr parse_filter_chain(NodePtr subject, bool first_bar = true);
    NodePtr parse_test(NodePtr subject);
    void parse_call_args(Node& n);
    NodePtr parse_number();

    const std::vector<Token>& t_;
    const std::string& name_;
    size_t pos_ = 0;
    int depth_ = 0;
    int loop_depth_ = 0;
};

NodePtr Parser::parse_number() {
    const Token& tok = cur();
    auto n = node(NodeType::Const, tok);
    if (tok.type == Tok::Int) {
        int64_t v = 0;
        auto r = std::from_chars(tok.text.data(), tok.text.data() + tok.text.size(), v);
        if (r.ec != std::errc()) error_at(tok, "integer literal out of range: " + tok.text);
        n->value = Value::integer(v);
    } else {
        n->value = Value::number(std::strtod(tok.text.c_str(), nullptr));
    }
    advance();
    return n;
}

NodePtr Parser::parse_primary() {
    const Token& tok = cur();
    if (tok.type == Tok::Name) {
        const std::string& v = tok.text;
        auto n = node(NodeType::Const, tok);
        if (v == "true" || v == "True") {
            n->value = Value::boolean(true);
        } else if (v == "false" || v == "False") {
            n->value = Value::boolean(false);
        } else if (v == "none" || v == "None") {
            n->value = Value::none();
        } else {
            n->type = NodeType::Name;
            n->s = v;
        }
        advance();
        return n;
    }
    if (tok.type == Tok::String) {
        auto n = node(NodeType::Const, tok);
        std::string s;
        while (cur().type == Tok::String) {
            s += cur().text;
            advance();
        }
        n->value = Value::string(std::move(s));
        return n;
    }
    if (tok.type == Tok::Int || tok.type == Tok::Float) return parse_number();
    if (is_op("(")) {
        advance();
        if (skip_op(")")) return node(NodeType::TupleLit, tok);
        NodePtr e = parse_expression(true);
        if (is_op(",")) {
            auto t = node(NodeType::TupleLit, tok);
            t->args.push_back(std::move(e));
            while (skip_op(",")) {
                if (is_op(")")) break;
                t->args.push_back(parse_expression(true));
            }
            e = std::move(t);
        }
        expect_op(")");
        return e;
    }
    if (is_op("[") || is_op("{")) {
        bool is_list = is_op("[");
        auto n = node(is_list ? NodeType::ListLit : NodeType::DictLit, tok);
        advance();
        const char* close = is_list ? "]" : "}";
        while (!is_op(close)) {
            if (!n->args.empty()) expect_op(",");
            if (is_op(close)) break;
            n->args.push_back(parse_expression(true));
            if (!is_list) {
                expect_op(":");
                n->args.push_back(parse_expression(true));
            }
        }
        expect_op(close);
        return n;
    }
    error_at(tok, "unexpected " + describe(tok));
}

NodePtr Parser::parse_postfix(NodePtr e) {
    ChainGuard chain(*this);
    while (true) {
        chain.link();
        if (is_op(".") || is_op("[")) {
            e = parse_subscript(std::move(e));
        } else if (is_op("(")) {
            auto c = node(NodeType::Call, cur());
            c->args.push_back(std::move(e));
            parse_call_args(*c);
            e = std::move(c);
        } else {
            return e;
        }
    }
}

NodePtr Parser::parse_subscript(NodePtr e) {
    DepthGuard g(*this);
    const Token& at = cur();
    if (skip_op(".")) {
        if (cur().type == Tok::Int) {
            auto n = node(NodeType::GetItem, at);
            n->args.push_back(std::move(e));
            n->args.push_back(parse_number());
            return n;
        }
        auto n = node(NodeType::GetAttr, at);
        n->args.push_back(std::move(e));
        n->s = expect_name();
        return n;
    }
    expect_op("[");
    NodePtr parts[3];
    int n_colons = 0;
    while (!is_op("]")) {
        if (skip_op(":")) {
            if (++n_colons > 2) error_at(cur(), "too many ':' in slice");
            continue;
        }
        if (parts[n_colons]) error_at(cur(), "expected ']', got " + describe(cur()));
        parts[n_colons] = parse_expression(true);
    }
    expect_op("]");
    auto n = node(n_colons ? NodeType::Slice : NodeType::GetItem, at);
    n->args.push_back(std::move(e));
    if (n_colons == 0) {
        if (!parts[0]) error_at(at, "empty subscript");
        n->args.push_back(std::move(parts[0]));
    } else {
        for (auto& p : parts) n->args.push_back(std::move(p));
    }
    return n;
}

void Parser::parse_call_args(Node& n) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
        if (!first) expect_op(",");
        first = false;
        if (is_op(")")) break;
        if (cur().type == Tok::Name && peek(1).type == Tok::Op && peek(1).text == "=") {
            std::string key = cur().text;
            advance();
            advance();
            n.kwargs.emplace_back(key, parse_expression(true));
        } else {
            if (!n.kwargs.empty()) error_at(cur(), "positional argument follows keyword argument");
            n.args.push_back(parse_expression(true));
        }
    }
    expect_op(")");
}

NodePtr Parser::parse_filter_expr(NodePtr e) {
    ChainGuard chain(*this);
    while (true) {
        chain.link();
        if (is_op("|")) {
            e = parse_filter_chain(std::move(e));
        } else if (is_name("is")) {
            e = parse_test(std::move(e));
        } else if (is_op("(")) {
            auto c = node(NodeType::Call, cur());
            c->args.push_back(std::move(e));
            parse_call_args(*c);
            e = std::move(c);
        } else {
            return e;
        }
    }
}

// "| f(args) | g ..." applied to `subject` (null for filter blocks and set blocks).
NodePtr Parser::parse_filter_chain(NodePtr subject, bool first_bar) {
    bool need_bar = first_bar;
    ChainGuard chain(*this);
    do {
        chain.link();
        if (need_bar) expect_op("|");
        need_bar = true;
        auto f = node(NodeType::Filter, cur());
        f->s = expect_name();
        while (skip_op(".")) f->s += "." + expect_name();
        f->args.push_back(std::move(subject));
        if (is_op("(")) parse_call_args(*f);
        subject = std::move(f);
    } while (is_op("|"));
    return subject;
}

NodePtr Parser::parse_test(NodePtr subject) {
    DepthGuard g(*this);
    auto t = node(NodeType::Test, cur());
    advance();  // "is"
    t->negate = skip_name("not");
    t->s = expect_name();
    while (skip_op(".")) t->s += "." + expect_name();
    t->args.push_back(std::move(subject));
    const Token& c = cur();
    if (is_op("(")) {
        parse_call_args(*t);
    } else if ((c.type == Tok::Name || c.type == Tok::String || c.type == Tok::Int ||
                c.type == Tok::Float || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
        if (is_name("is")) error_at(c, "you cannot chain multiple tests with 'is'");
        t->args.push_back(parse_postfix(parse_primary()));
    }
    return t;
}

}  // namespace

std::vector<NodePtr> parse_template(const std::vector<Token>& tokens, const std::string& name) {
    return Parser(tokens, name).run();
}

}  // namespace hf2q::jinja

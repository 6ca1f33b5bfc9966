#include "tokenizer/jinja/interp.h"

#include "core/error.h"
#include "tokenizer/jinja/text.h"

namespace hf2q::jinja {

const Value* Frame::find(const std::string& name) const {
    for (const Frame* f = this; f; f = f->parent.get())
        for (const auto& [k, v] : f->vars)
            if (k == name) return &v;
    return nullptr;
}

void Frame::set(const std::string& name, Value v) {
    for (auto& [k, old] : vars)
        if (k == name) {
            old = std::move(v);
            return;
        }
    vars.emplace_back(name, std::move(v));
}

Interpreter::Interpreter(const std::string& name, const RenderLimits& limits)
    : name_(name), limits_(limits) {
    auto budget = std::chrono::duration<double>(limits.max_seconds);
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(budget);
}

Interpreter::~Interpreter() {
    // Namespaces are the only mutable containers, so the only way to build reference
    // cycles (ns.self = ns); emptying them all frees any such cycle.
    for (auto& ns : namespaces_) {
        ns->items.clear();
        ns->index.clear();
    }
}

void Interpreter::track_namespace(std::shared_ptr<Dict> ns) {
    namespaces_.push_back(std::move(ns));
}

std::string Interpreter::render(const std::vector<NodePtr>& body, FramePtr root) {
    std::string out;
    exec_body(body, root, out);
    return out;
}

void Interpreter::tick() {
    ++ticks_;
    if (ticks_ > limits_.max_iterations)
        eval_fail(str_cat("render limit exceeded: more than ", limits_.max_iterations,
                          " loop iterations and calls"));
    if ((ticks_ & 15) == 0 && std::chrono::steady_clock::now() > deadline_)
        eval_fail(str_cat("render limit exceeded: took longer than ", limits_.max_seconds, " s"));
}

void Interpreter::check_string_size(uint64_t n) const {
    if (n > limits_.max_output_bytes)
        eval_fail(str_cat("render limit exceeded: string of ", n, " bytes is larger than ",
                          limits_.max_output_bytes, " bytes"));
}

void Interpreter::check_list_size(uint64_t n) const {
    if (n > limits_.max_iterations)
        eval_fail(str_cat("render limit exceeded: list of ", n, " items is longer than ",
                          limits_.max_iterations, " items"));
}

void Interpreter::append(std::string& out, const std::string& s) const {
    if (out.size() + s.size() > limits_.max_output_bytes)
        eval_fail(str_cat("render limit exceeded: output larger than ", limits_.max_output_bytes,
                          " bytes"));
    out += s;
}

std::vector<Value> Interpreter::iterate(const Value& v) const {
    switch (v.kind()) {
        case Kind::Undefined:
            return {};
        case Kind::List:
            return v.list_ref().items;
        case Kind::Dict: {
            if (v.dict_ref().type != Dict::Type::Plain)
                eval_fail("'" + type_name(v) + "' object is not iterable");
            std::vector<Value> keys;
            for (const auto& kv : v.dict_ref().items) keys.push_back(kv.first);
            return keys;
        }
        case Kind::String: {
            std::vector<Value> chars;
            const std::string& s = v.str();
            auto off = utf8_offsets(s);
            for (size_t i = 0; i + 1 < off.size(); ++i)
                chars.push_back(Value::string(s.substr(off[i], off[i + 1] - off[i])));
            return chars;
        }
        default:
            eval_fail("'" + type_name(v) + "' object is not iterable");
    }
}

Interpreter::NestingGuard::NestingGuard(Interpreter& in, const Node& n) : in_(in) {
    if (++in_.nesting_ > kMaxNesting) {
        --in_.nesting_;
        fail(in_.name_, ":", n.line, ":", n.col,
             ": render limit exceeded: evaluation nested deeper than ", kMaxNesting, " levels");
    }
}

// ---- statements ----------------------------------------------------------------

Interpreter::Flow Interpreter::exec_body(const std::vector<NodePtr>& body, const FramePtr& f,
                                         std::string& out) {
    for (const auto& n : body) {
        Flow fl = exec(*n, f, out);
        if (fl != Flow::Normal) return fl;
    }
    return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Node& n, const FramePtr& f, std::string& out) {
    NestingGuard g(*this, n);
    try {
        return exec_inner(n, f, out);
    } catch (const EvalError& e) {
        fail(name_, ":", n.line, ":", n.col, ": ", e.message);
    }
}

Interpreter::Flow Interpreter::exec_inner(const Node& n, const FramePtr& f, std::string& out) {
    switch (n.type) {
        case NodeType::Text:
            append(out, n.s);
            return Flow::Normal;
        case NodeType::Print:
            append(out, to_str(eval(*n.args[0], f), limits_.max_output_bytes));
            return Flow::Normal;
        case NodeType::If:
            return exec_body(eval(*n.args[0], f).truthy() ? n.body : n.orelse, f, out);
        case NodeType::For:
            return exec_for(n, f, out);
        case NodeType::Set:
            exec_set(n, f);
            return Flow::Normal;
        case NodeType::SetBlock: {
            std::string s;
            exec_body(n.body, f, s);
            Value v = Value::string(std::move(s));
            if (n.args[1]) v = eval_filter(*n.args[1], f, &v);
            assign(*n.args[0], std::move(v), f);
            return Flow::Normal;
        }
        case NodeType::Macro:
            f->set(n.s, make_macro(n, f));
            return Flow::Normal;
        case NodeType::CallBlock: {
            const Node& call = *n.args[0];
            Value callee = eval(*call.args[0], f);
            if (!callee.is_callable()) eval_fail("call block target is not callable");
            CallArgs args = eval_args(call, 1, f);
            args.kw.emplace_back("caller", make_macro(n, f));
            append(out, to_str(callee.callable_ref().fn(*this, args)));
            return Flow::Normal;
        }
        case NodeType::FilterBlock: {
            std::string s;
            exec_body(n.body, f, s);
            Value v = Value::string(std::move(s));
            append(out, to_str(eval_filter(*n.args[0], f, &v)));
            return Flow::Normal;
        }
        case NodeType::Generation:
            return exec_body(n.body, f, out);
        case NodeType::Break:
            return Flow::Break;
        case NodeType::Continue:
            return Flow::Continue;
        default:
            append(out, to_str(eval(n, f)));
            return Flow::Normal;
    }
}

// The loop object's fields live at fixed positions so each iteration updates them in
// place instead of rebuilding a dict.
enum LoopField {
    kIndex,
    kIndex0,
    kRevindex,
    kRevindex0,
    kFirst,
    kLast,
    kLength,
    kPrevitem,
    kNextitem,
    kDepth,
    kDepth0,
    kCycle
};

Interpreter::Flow Interpreter::exec_for(const Node& n, const FramePtr& f, std::string& out) {
    std::vector<Value> items = iterate(eval(*n.args[1], f));
    if (n.args[2]) {  // "for x in xs if cond": filter first, so loop.length counts survivors
        std::vector<Value> kept;
        for (Value& item : items) {
            tick();
            auto tf = std::make_shared<Frame>();
            tf->parent = f;
            assign(*n.args[0], item, tf);
            if (eval(*n.args[2], tf).truthy()) kept.push_back(std::move(item));
        }
        items = std::move(kept);
    }
    if (items.empty()) return exec_body(n.orelse, f, out);
    auto loop = std::make_shared<Dict>();
    loop->type = Dict::Type::Loop;
    const int64_t len = static_cast<int64_t>(items.size());
    for (const char* k : {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                          "previtem", "nextitem", "depth", "depth0", "cycle"})
        loop->set(k, Value());
    loop->items[kLength].second = Value::integer(len);
    loop->items[kDepth].second = Value::integer(1);
    loop->items[kDepth0].second = Value::integer(0);
    Value loop_value = Value::from_dict(loop);
    Dict* lp = loop.get();
    auto position = std::make_shared<int64_t>(0);  // shared: loop.cycle may outlive this call
    loop->items[kCycle].second = Value::callable("cycle", [position](Interpreter&, CallArgs& a) {
        if (a.pos.empty()) eval_fail("no items for cycling given");
        return a.pos[static_cast<size_t>(*position) % a.pos.size()];
    });
    for (int64_t i = 0; i < len; ++i) {
        *position = i;
        tick();
        auto& it = lp->items;
        it[kIndex].second = Value::integer(i + 1);
        it[kIndex0].second = Value::integer(i);
        it[kRevindex].second = Value::integer(len - i);
        it[kRevindex0].second = Value::integer(len - i - 1);
        it[kFirst].second = Value::boolean(i == 0);
        it[kLast].second = Value::boolean(i == len - 1);
        it[kPrevitem].second = i > 0 ? items[static_cast<size_t>(i - 1)]
                                     : Value::undefined("there is no previous item");
        it[kNextitem].second = i + 1 < len ? items[static_cast<size_t>(i + 1)]
                                           : Value::undefined("there is no next item");
        auto frame = std::make_shared<Frame>();
        frame->parent = f;
        frame->vars.emplace_back("loop", loop_value);
        assign(*n.args[0], items[static_cast<size_t>(i)], frame);
        if (exec_body(n.body, frame, out) == Flow::Break) break;
    }
    return Flow::Normal;
}

void Interpreter::exec_set(const Node& n, const FramePtr& f) {
    const Node& target = *n.args[0];
    Value v = eval(*n.args[1], f);
    if (target.type == NodeType::GetAttr) {
        Value obj = lookup(target.args[0]->s, f);
        if (!obj.is_dict() || obj.dict_ref().type != Dict::Type::Namespace)
            eval_fail("cannot assign attribute on non-namespace object");
        obj.dict_ref().set(target.s, std::move(v));
        return;
    }
    assign(target, std::move(v), f);
}

void Interpreter::assign(const Node& target, Value v, const FramePtr& f) {
    if (target.type == NodeType::Name) {
        f->set(target.s, std::move(v));
        return;
    }
    if (target.type == NodeType::GetAttr) eval_fail("cannot assign to an attribute here");
    std::vector<Value> parts = v.is_list() ? v.list_ref().items : iterate(v);
    if (parts.size() != target.args.size())
        eval_fail(str_cat(parts.size() < target.args.size() ? "not enough" : "too many",
                          " values to unpack (expected ", target.args.size(), ", got ",
                          parts.size(), ")"));
    for (size_t k = 0; k < parts.size(); ++k) assign(*target.args[k], parts[k], f);
}

Value Interpreter::make_macro(const Node& n, const FramePtr& f) {
    // The closure is weak: a macro usually lives in the frame it captures, and a strong
    // reference would make a cycle that is never freed.
    const Node* def = &n;
    std::weak_ptr<Frame> closure = f;
    return Value::callable(
        n.type == NodeType::CallBlock ? "caller" : n.s,
        [this, def, closure](Interpreter&, CallArgs& a) {
            FramePtr scope = closure.lock();
            if (!scope) eval_fail("macro called after the scope that defined it has ended");
            return call_macro(*def, scope, a);
        });
}

// Macros and caller(): parameters in `n.names`, defaults in n.args (offset 1 for call
// blocks, whose args[0] is the call expression).
Value Interpreter::call_macro(const Node& n, const FramePtr& closure, CallArgs& a) {
    tick();
    if (call_depth_ >= limits_.max_call_depth)
        eval_fail(str_cat("render limit exceeded: macro calls nested deeper than ",
                          limits_.max_call_depth));
    const size_t off = n.type == NodeType::CallBlock ? 1 : 0;
    const std::string label = n.type == NodeType::CallBlock ? "caller" : "macro '" + n.s + "'";
    if (a.pos.size() > n.names.size())
        eval_fail(str_cat(label, " takes not more than ", n.names.size(), " argument(s)"));
    auto frame = std::make_shared<Frame>();
    frame->parent = closure;
    std::vector<bool> given(n.names.size(), false);
    for (size_t k = 0; k < a.pos.size(); ++k) {
        frame->set(n.names[k], a.pos[k]);
        given[k] = true;
    }
    for (auto& [key, val] : a.kw) {
        size_t k = 0;
        while (k < n.names.size() && n.names[k] != key) ++k;
        if (k == n.names.size()) {
            if (key != "caller") eval_fail(label + " takes no keyword argument '" + key + "'");
            frame->set(key, val);
            continue;
        }
        if (given[k]) eval_fail(label + " got multiple values for argument '" + key + "'");
        frame->set(key, val);
        given[k] = true;
    }
    for (size_t k = 0; k < n.names.size(); ++k) {
        if (given[k]) continue;
        const NodePtr& d = n.args[k + off];
        frame->set(n.names[k],
                   d ? eval(*d, frame)
                     : Value::undefined("parameter '" + n.names[k] + "' was not provided"));
    }
    ++call_depth_;
    std::string out;
    try {
        exec_body(n.body, frame, out);
    } catch (...) {
        --call_depth_;
        throw;
    }
    --call_depth_;
    return Value::string(std::move(out));
}

// ---- expressions ---------------------------------------------------------------

Value Interpreter::eval(const Node& n, const FramePtr& f) {
    NestingGuard g(*this, n);
    try {
        Value r = eval_inner(n, f);
        if (r.weight() > limits_.max_iterations)
            eval_fail(str_cat("render limit exceeded: value holds more than ",
                              limits_.max_iterations, " items"));
        return r;
    } catch (const EvalError& e) {
        fail(name_, ":", n.line, ":", n.col, ": ", e.message);
    }
}

Value Interpreter::lookup(const std::string& name, const FramePtr& f) const {
    if (const Value* v = f->find(name)) return *v;
    Value g = global_value(name);
    if (!g.is_undefined()) return g;
    return Value::undefined("'" + name + "' is undefined");
}

Value Interpreter::eval_inner(const Node& n, const FramePtr& f) {
    switch (n.type) {
        case NodeType::Const:
            return n.value;
        case NodeType::Name:
            return lookup(n.s, f);
        case NodeType::GetAttr:
            return get_attr(eval(*n.args[0], f), n.s);
        case NodeType::GetItem:
            return get_item(eval(*n.args[0], f), eval(*n.args[1], f));
        case NodeType::Slice: {
            Value parts[3];
            for (int k = 0; k < 3; ++k)
                if (n.args[static_cast<size_t>(k) + 1])
                    parts[k] = eval(*n.args[static_cast<size_t>(k) + 1], f);
            return slice(eval(*n.args[0], f), parts[0], parts[1], parts[2]);
        }
        case NodeType::Call:
            return eval_call(n, f);
        case NodeType::Filter:
            return eval_filter(n, f, nullptr);
        case NodeType::Test: {
            Value subject = eval(*n.args[0], f);
            CallArgs args = eval_args(n, 1, f);
            tick();
            return Value::boolean(apply_test(*this, n.s, subject, args) != n.negate);
        }
        case NodeType::Unary: {
            Value a = eval(*n.args[0], f);
            if (n.s == "not") return Value::boolean(!a.truthy());
            if (n.s == "-") return unary_minus(a);
            if (!a.is_number()) eval_fail("bad operand type for unary +: '" + type_name(a) + "'");
            return a.is_bool() ? Value::integer(a.as_int()) : a;
        }
        case NodeType::And: {
            Value a = eval(*n.args[0], f);
            return a.truthy() ? eval(*n.args[1], f) : a;
        }
        case NodeType::Or: {
            Value a = eval(*n.args[0], f);
            return a.truthy() ? a : eval(*n.args[1], f);
        }
        case NodeType::BinOp:
            return binary_op(n.s, eval(*n.args[0], f), eval(*n.args[1], f), *this);
        case NodeType::Compare:
            return eval_compare(n, f);
        case NodeType::CondExpr:
            if (eval(*n.args[0], f).truthy()) return eval(*n.args[1], f);
            return n.args[2] ? eval(*n.args[2], f)
                             : Value::undefined(
                                   "the inline if-expression evaluated to false and no else "
                                   "section was defined");
        case NodeType::ListLit:
        case NodeType::TupleLit: {
            std::vector<Value> items;
            for (const auto& a : n.args) items.push_back(eval(*a, f));
            return Value::list(std::move(items), n.type == NodeType::TupleLit);
        }
        case NodeType::DictLit: {
            Value d = Value::dict();
            for (size_t k = 0; k + 1 < n.args.size(); k += 2)
                d.dict_ref().set(eval(*n.args[k], f), eval(*n.args[k + 1], f));
            return d;
        }
        default:
            eval_fail("statement used as an expression");
    }
}

CallArgs Interpreter::eval_args(const Node& n, size_t first, const FramePtr& f) {
    CallArgs a;
    for (size_t k = first; k < n.args.size(); ++k) a.pos.push_back(eval(*n.args[k], f));
    for (const auto& [key, e] : n.kwargs) a.kw.emplace_back(key, eval(*e, f));
    return a;
}

Value Interpreter::eval_call(const Node& n, const FramePtr& f) {
    Value callee = eval(*n.args[0], f);
    if (!callee.is_callable()) {
        if (callee.is_undefined() && !callee.undefined_hint().empty())
            eval_fail(callee.undefined_hint());
        eval_fail("'" + type_name(callee) + "' object is not callable");
    }
    CallArgs args = eval_args(n, 1, f);
    return callee.callable_ref().fn(*this, args);
}

Value Interpreter::eval_filter(const Node& n, const FramePtr& f, const Value* subject) {
    Value in = n.args[0]
                   ? (n.args[0]->type == NodeType::Filter ? eval_filter(*n.args[0], f, subject)
                                                          : eval(*n.args[0], f))
                   : *subject;
    CallArgs args = eval_args(n, 1, f);
    tick();
    try {
        return apply_filter(*this, n.s, in, args);
    } catch (const EvalError& e) {
        fail(name_, ":", n.line, ":", n.col, ": ", e.message);
    }
}

Value Interpreter::eval_compare(const Node& n, const FramePtr& f) {
    Value left = eval(*n.args[0], f);
    for (size_t k = 0; k < n.names.size(); ++k) {
        Value right = eval(*n.args[k + 1], f);
        const std::string& op = n.names[k];
        bool r;
        if (op == "==")
            r = equals(left, right);
        else if (op == "!=")
            r = !equals(left, right);
        else if (op == "in")
            r = contains(right, left);
        else if (op == "notin")
            r = !contains(right, left);
        else {
            int c = compare(left, right);
            r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
        }
        if (!r) return Value::boolean(false);
        left = std::move(right);
    }
    return Value::boolean(true);
}

}  // namespace hf2q::jinja

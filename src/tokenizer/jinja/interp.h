// Tree-walking evaluator of parsed templates, and the built-in filters, tests,
// methods and globals it calls.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/template.h"
#include "tokenizer/jinja/value.h"

namespace hf2q::jinja {

// One variable scope. Loops, macro calls and call blocks open a child frame; `set`
// writes into the innermost one, as jinja2's scoping rules do.
struct Frame {
    std::vector<std::pair<std::string, Value>> vars;
    std::shared_ptr<Frame> parent;

    const Value* find(const std::string& name) const;
    void set(const std::string& name, Value v);
};
using FramePtr = std::shared_ptr<Frame>;

class Interpreter {
  public:
    Interpreter(const std::string& name, const RenderLimits& limits);
    ~Interpreter();
    Interpreter(const Interpreter&) = delete;
    Interpreter& operator=(const Interpreter&) = delete;
    void track_namespace(std::shared_ptr<Dict> ns);

    std::string render(const std::vector<NodePtr>& body, FramePtr root);

    Value eval(const Node& n, const FramePtr& f);
    // Counts one unit of work (loop iteration, call, filter) against the limits.
    void tick();
    void check_string_size(uint64_t n) const;
    void check_list_size(uint64_t n) const;
    // Elements of a list / dict keys / string code points / nothing for undefined.
    std::vector<Value> iterate(const Value& v) const;
    const RenderLimits& limits() const { return limits_; }

  private:
    enum class Flow { Normal, Break, Continue };

    Flow exec_body(const std::vector<NodePtr>& body, const FramePtr& f, std::string& out);
    Flow exec(const Node& n, const FramePtr& f, std::string& out);
    Flow exec_inner(const Node& n, const FramePtr& f, std::string& out);
    Flow exec_for(const Node& n, const FramePtr& f, std::string& out);
    void exec_set(const Node& n, const FramePtr& f);
    void assign(const Node& target, Value v, const FramePtr& f);
    Value make_macro(const Node& n, const FramePtr& f);
    Value call_macro(const Node& n, const FramePtr& closure, CallArgs& args);
    void append(std::string& out, const std::string& s) const;

    Value eval_inner(const Node& n, const FramePtr& f);
    Value eval_call(const Node& n, const FramePtr& f);
    CallArgs eval_args(const Node& n, size_t first, const FramePtr& f);
    Value eval_filter(const Node& n, const FramePtr& f, const Value* subject);
    Value eval_compare(const Node& n, const FramePtr& f);
    Value lookup(const std::string& name, const FramePtr& f) const;

    // Bounds the C++ stack used by nested statements, expressions and macro calls.
    static constexpr int kMaxNesting = 2000;
    struct NestingGuard {
        NestingGuard(Interpreter& in, const Node& n);
        ~NestingGuard() { --in_.nesting_; }
        Interpreter& in_;
    };

    const std::string& name_;
    RenderLimits limits_;
    int nesting_ = 0;
    std::vector<std::shared_ptr<Dict>> namespaces_;
    uint64_t ticks_ = 0;
    int call_depth_ = 0;
    std::chrono::steady_clock::time_point deadline_;
};

// Arithmetic and Python operators (operators.cpp).
Value binary_op(const std::string& op, const Value& a, const Value& b, const Interpreter& in);
Value unary_minus(const Value& a);
bool contains(const Value& container, const Value& item);
Value get_attr(const Value& obj, const std::string& attr);
Value get_item(const Value& obj, const Value& key);
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Built-ins (builtins.cpp, filters.cpp). Names are checked when a template is parsed.
bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value apply_filter(Interpreter& in, const std::string& name, const Value& subject, CallArgs& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& subject, CallArgs& args);
Value bound_method(const Value& obj, const std::string& name);  // undefined if none
Value global_value(const std::string& name);                    // undefined if none

// JSON conversion (json.cpp).
Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);
// Python json.dumps(v, ensure_ascii, indent, sort_keys); indent < 0: compact ", " / ": ".
std::string to_json(const Value& v, int indent, bool ensure_ascii, bool sort_keys,
                    size_t max_bytes = kDefaultMaxText);

}  // namespace hf2q::jinja

// Read-only methods of str / dict / list, the globals a template may call, and tests.
#include <cmath>
#include <ctime>
#include <optional>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/jinja/interp.h"
#include "tokenizer/jinja/text.h"

namespace hf2q::jinja {
namespace {

using Method = Value (*)(Interpreter&, const Value& self, CallArgs& a);

std::optional<std::string> opt_str(const Value& v, const char* what) {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_string())
        eval_fail(std::string(what) + " must be a string or None, not " + type_name(v));
    return v.str();
}

int64_t opt_int(const Value& v, int64_t def, const char* what) {
    if (v.is_undefined() || v.is_none()) return def;
    if (!v.is_int() && !v.is_bool())
        eval_fail(std::string(what) + " must be an integer, not " + type_name(v));
    return v.as_int();
}

Value str_list(std::vector<std::string> parts) {
    std::vector<Value> out;
    for (auto& p : parts) out.push_back(Value::string(std::move(p)));
    return Value::list(std::move(out));
}

Value strip_method(const Value& self, CallArgs& a, const char* name, bool l, bool r) {
    auto args = a.bind(name, {"chars"});
    return Value::string(py_strip(self.str(), opt_str(args[0], "chars"), l, r));
}

bool affix_matches(const Value& self, const Value& affix, bool prefix) {
    auto one = [&](const Value& v) {
        if (!v.is_string()) eval_fail("startswith/endswith argument must be str or a tuple of str");
        const std::string& s = self.str();
        const std::string& p = v.str();
        if (p.size() > s.size()) return false;
        return prefix ? s.compare(0, p.size(), p) == 0
                      : s.compare(s.size() - p.size(), p.size(), p) == 0;
    };
    if (affix.is_list()) {
        for (const Value& v : affix.list_ref().items)
            if (one(v)) return true;
        return false;
    }
    return one(affix);
}

const std::unordered_map<std::string, Method>& string_methods() {
    static const std::unordered_map<std::string, Method> m = {
        {"strip", [](Interpreter&, const Value& s,
                     CallArgs& a) { return strip_method(s, a, "strip", true, true); }},
        {"lstrip", [](Interpreter&, const Value& s,
                      CallArgs& a) { return strip_method(s, a, "lstrip", true, false); }},
        {"rstrip", [](Interpreter&, const Value& s,
                      CallArgs& a) { return strip_method(s, a, "rstrip", false, true); }},
        {"upper",
         [](Interpreter&, const Value& s, CallArgs& a) {
             a.bind("upper", {});
             return Value::string(py_upper(s.str()));
         }},
        {"lower",
         [](Interpreter&, const Value& s, CallArgs& a) {
             a.bind("lower", {});
             return Value::string(py_lower(s.str()));
         }},
        {"title",
         [](Interpreter&, const Value& s, CallArgs& a) {
             a.bind("title", {});
             return Value::string(py_title(s.str()));
         }},
        {"capitalize",
         [](Interpreter&, const Value& s, CallArgs& a) {
             a.bind("capitalize", {});
             return Value::string(py_capitalize(s.str()));
         }},
        {"startswith",
         [](Interpreter&, const Value& s, CallArgs& a) {
             auto args = a.bind("startswith", {"prefix"});
             return Value::boolean(affix_matches(s, args[0], true));
         }},
        {"endswith",
         [](Interpreter&, const Value& s, CallArgs& a) {
             auto args = a.bind("endswith", {"suffix"});
             return Value::boolean(affix_matches(s, args[0], false));
         }},
        {"split",
         [](Interpreter& in, const Value& s, CallArgs& a) {
             auto args = a.bind("split", {"sep", "maxsplit"});
             auto sep = opt_str(args[0], "sep");
             if (sep && sep->empty()) eval_fail("empty separator");
             auto parts = py_split(s.str(), sep, opt_int(args[1], -1, "maxsplit"));
             in.check_list_size(parts.size());
             return str_list(std::move(parts));
         }},
        {"replace",
         [](Interpreter& in, const Value& s, CallArgs& a) {
             auto args = a.bind("replace", {"old", "new", "count"});
             auto from = opt_str(args[0], "old"), to = opt_str(args[1], "new");
             if (!from || !to) eval_fail("replace() needs two string arguments");
             std::string r = py_replace(s.str(), *from, *to, opt_int(args[2], -1, "count"));
             in.check_string_size(r.size());
             return Value::string(std::move(r));
         }},
        {"find",
         [](Interpreter&, const Value& s, CallArgs& a) {
             auto args = a.bind("find", {"sub"});
             auto sub = opt_str(args[0], "sub");
             if (!sub) eval_fail("find() needs a string argument");
             size_t p = s.str().find(*sub);
             return Value::integer(
                 p == std::string::npos
                     ? -1
                     : static_cast<int64_t>(utf8_length(std::string_view(s.str()).substr(0, p))));
         }},
        {"count",
         [](Interpreter&, const Value& s, CallArgs& a) {
             auto args = a.bind("count", {"sub"});
             auto sub = opt_str(args[0], "sub");
             if (!sub) eval_fail("count() needs a string argument");
             if (sub->empty())
                 return Value::integer(static_cast<int64_t>(utf8_length(s.str())) + 1);
             int64_t n = 0;
             for (size_t p = s.str().find(*sub); p != std::string::npos;
                  p = s.str().find(*sub, p + sub->size()))
                 ++n;
             return Value::integer(n);
         }},
        {"join",
         [](Interpreter& in, const Value& s, CallArgs& a) {
             auto args = a.bind("join", {"iterable"});
             std::string out;
             bool first = true;
             for (const Value& v : in.iterate(args[0])) {
                 if (!v.is_string()) eval_fail("join() expects strings, found " + type_name(v));
                 if (!first) out += s.str();
                 first = false;
                 out += v.str();
                 in.check_string_size(out.size());
             }
             return Value::string(std::move(out));
         }},
        {"isdigit",
         [](Interpreter&, const Value& s, CallArgs&) {
             const std::string& t = s.str();
             bool ok = !t.empty();
             for (char c : t) ok = ok && c >= '0' && c <= '9';
             return Value::boolean(ok);
         }},
    };
    return m;
}

const std::unordered_map<std::string, Method>& dict_methods() {
    static const std::unordered_map<std::string, Method> m = {
        {"items",
         [](Interpreter&, const Value& d, CallArgs& a) {
             a.bind("items", {});
             std::vector<Value> out;
             for (const auto& [k, v] : d.dict_ref().items) out.push_back(Value::list({k, v}, true));
             return Value::list(std::move(out));
         }},
        {"keys",
         [](Interpreter&, const Value& d, CallArgs& a) {
             a.bind("keys", {});
             std::vector<Value> out;
             for (const auto& kv : d.dict_ref().items) out.push_back(kv.first);
             return Value::list(std::move(out));
         }},
        {"values",
         [](Interpreter&, const Value& d, CallArgs& a) {
             a.bind("values", {});
             std::vector<Value> out;
             for (const auto& kv : d.dict_ref().items) out.push_back(kv.second);
             return Value::list(std::move(out));
         }},
        {"get",
         [](Interpreter&, const Value& d, CallArgs& a) {
             auto args = a.bind("get", {"key", "default"});
             const Value* v = d.dict_ref().find(args[0]);
             if (v) return *v;
             return args[1].is_undefined() ? Value::none() : args[1];
         }},
    };
    return m;
}

const std::unordered_map<std::string, Method>& list_methods() {
    static const std::unordered_map<std::string, Method> m = {
        {"index",
         [](Interpreter&, const Value& l, CallArgs& a) {
             auto args = a.bind("index", {"value"});
             const auto& items = l.list_ref().items;
             for (size_t i = 0; i < items.size(); ++i)
                 if (equals(items[i], args[0])) return Value::integer(static_cast<int64_t>(i));
             eval_fail(repr(args[0]) + " is not in list");
         }},
        {"count",
         [](Interpreter&, const Value& l, CallArgs& a) {
             auto args = a.bind("count", {"value"});
             int64_t n = 0;
             for (const Value& v : l.list_ref().items) n += equals(v, args[0]) ? 1 : 0;
             return Value::integer(n);
         }},
    };
    return m;
}

Value global_range(Interpreter& in, CallArgs& a) {
    if (!a.kw.empty()) eval_fail("range() takes no keyword arguments");
    if (a.pos.empty() || a.pos.size() > 3) eval_fail("range() expects 1 to 3 integer arguments");
    int64_t v[3] = {0, 0, 1};
    for (size_t k = 0; k < a.pos.size(); ++k) {
        if (!a.pos[k].is_int() && !a.pos[k].is_bool())
            eval_fail("range() arguments must be integers, not " + type_name(a.pos[k]));
        v[a.pos.size() == 1 ? 1 : k] = a.pos[k].as_int();
    }
    if (v[2] == 0) eval_fail("range() arg 3 must not be zero");
    // Count in uint64: the span of extreme bounds does not fit int64.
    const bool up = v[2] > 0;
    uint64_t span = 0;
    if (up ? v[1] > v[0] : v[0] > v[1])
        span = up ? static_cast<uint64_t>(v[1]) - static_cast<uint64_t>(v[0])
                  : static_cast<uint64_t>(v[0]) - static_cast<uint64_t>(v[1]);
    uint64_t step = up ? static_cast<uint64_t>(v[2]) : static_cast<uint64_t>(-(v[2] + 1)) + 1;
    uint64_t n = span == 0 ? 0 : (span - 1) / step + 1;
    in.check_list_size(n);
    std::vector<Value> out;
    out.reserve(n);
    int64_t x = v[0];
    for (uint64_t k = 0; k < n; ++k) {
        out.push_back(Value::integer(x));
        if (k + 1 < n) x += v[2];  // stays within [start, stop): no overflow
    }
    return Value::list(std::move(out));
}

Value make_dict(Interpreter& in, CallArgs& a, Dict::Type type) {
    auto d = std::make_shared<Dict>();
    d->type = type;
    if (type == Dict::Type::Namespace) in.track_namespace(d);
    if (a.pos.size() > 1) eval_fail("expected at most 1 positional argument");
    if (!a.pos.empty()) {
        if (!a.pos[0].is_dict()) eval_fail("positional argument must be a mapping");
        for (const auto& [k, v] : a.pos[0].dict_ref().items) d->set(k, v);
    }
    for (const auto& [k, v] : a.kw) d->set(k, v);
    return Value::from_dict(std::move(d));
}

Value global_strftime_now(Interpreter& in, CallArgs& a) {
    auto args = a.bind("strftime_now", {"format"});
    if (!args[0].is_string()) eval_fail("strftime_now() needs a format string");
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    const std::string& fmt = args[0].str();
    if (fmt.empty()) return Value::string("");
    for (size_t cap = 256;; cap *= 4) {
        in.check_string_size(cap);
        std::string buf(cap, '\0');
        size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
        if (n > 0 || cap > fmt.size() * 64) {
            buf.resize(n);
            return Value::string(std::move(buf));
        }
    }
}

}  // namespace

Value bound_method(const Value& obj, const std::string& name) {
    const std::unordered_map<std::string, Method>* table = nullptr;
    if (obj.is_string())
        table = &string_methods();
    else if (obj.is_dict())
        table = &dict_methods();
    else if (obj.is_list())
        table = &list_methods();
    if (!table) return Value();
    auto it = table->find(name);
    if (it == table->end()) return Value();
    Method m = it->second;
    return Value::callable(name, [m, obj](Interpreter& in, CallArgs& a) { return m(in, obj, a); });
}

Value global_value(const std::string& name) {
    if (name == "range") return Value::callable(name, global_range);
    if (name == "namespace")
        return Value::callable(name, [](Interpreter& in, CallArgs& a) {
            return make_dict(in, a, Dict::Type::Namespace);
        });
    if (name == "dict")
        return Value::callable(
            name, [](Interpreter& in, CallArgs& a) { return make_dict(in, a, Dict::Type::Plain); });
    if (name == "raise_exception")
        return Value::callable(name, [](Interpreter&, CallArgs& a) -> Value {
            auto args = a.bind("raise_exception", {"message"});
            eval_fail("raise_exception: " + to_str(args[0]));
        });
    if (name == "strftime_now") return Value::callable(name, global_strftime_now);
    return Value();
}

// ---- tests ---------------------------------------------------------------------

namespace {

using Test = bool (*)(Interpreter&, const Value& v, const std::vector<Value>& args);

const Value& arg0(const std::vector<Value>& args, const char* test) {
    if (args.empty()) eval_fail(std::string("test '") + test + "' needs an argument");
    return args[0];
}

int64_t int_of(const Value& v, const char* test) {
    if (v.is_float()) {
        double f = v.as_float();
        if (f != static_cast<double>(static_cast<int64_t>(f)))
            return 1;  // odd-like, never divisible
        return static_cast<int64_t>(f);
    }
    if (!v.is_int() && !v.is_bool())
        eval_fail(std::string("test '") + test + "' needs a number, not " + type_name(v));
    return v.as_int();
}

const std::unordered_map<std::string, Test>& tests() {
    static const std::unordered_map<std::string, Test> t = {
        {"defined", [](Interpreter&, const Value& v, const std::vector<Value>&) { return !v.is_undefined(); }},
        {"undefined", [](Interpreter&, const Value& v, const std::vector<Value>&) { return v.is_undefined(); }},
        {"none", [](Interpreter&, const Value& v, const std::vector<Value>&) { return v.is_none(); }},
        {"string", [](Interpreter&, const Value& v, const std::vector<Value>&) { return v.is_string(); }},
        {"mapping", [](Interpreter&, const Value& v, const std::vector<Value>&) { return v.is_dict() && v.dict_ref().type == Dict::Type::Plain; }},
        // jinja2: anything with len() and __getitem__; its Undefined has both.
        {"sequence", [](Interpreter&, const Value& v, const std::vector<Value>&) {
             return v.is_string() || v.is_list() || (v.is_dict() && v.dict_ref().type == Dict::Type::Plain) || v.is_undefined();
         }},
        {"iterable", [](Interpreter&, const Value& v, const std::vector<Value>&) {
             return v.is_string() || v.is_list() || (v.is_dict() && v.dict_ref().type == Dict::Type::Plain) || v.is_undefined();
         }},
        {"number", [](Interpreter&, const Value& v, const std::vector<Value>&) { return v.is_number(); }},
        {"integer", [](Interpreter&, const Value& v, const std::vector<Value>&) { return v.is_int(); }},
        {"float", [](Interpreter&, const Value& v, const std::vector<Value>&) { return v.is_float(); }},
        {"boolean", [](Interpreter&, const Value& v, const std::vector<Value>&) { return v.is_bool(); }},
        {"true", [](Interpreter&, const Value& v, const std::vector<Value>&) { return v.is_bool() && v.as_bool(); }},
        {"false", [](Interpreter&, const Value& v, const std::vector<Value>&) { return v.is_bool() && !v.as_bool(); }},
        {"callable", [](Interpreter&, const Value& v, const std::vector<Value>&) { return v.is_callable(); }},
        {"eq", [](Interpreter&, const Value& v, const std::vector<Value>& a) { return equals(v, arg0(a, "eq")); }},
        {"ne", [](Interpreter&, const Value& v, const std::vector<Value>& a) { return !equals(v, arg0(a, "ne")); }},
        {"lt", [](Interpreter&, const Value& v, const std::vector<Value>& a) { return compare(v, arg0(a, "lt")) < 0; }},
        {"le", [](Interpreter&, const Value& v, const std::vector<Value>& a) { return compare(v, arg0(a, "le")) <= 0; }},
        {"gt", [](Interpreter&, const Value& v, const std::vector<Value>& a) { return compare(v, arg0(a, "gt")) > 0; }},
        {"ge", [](Interpreter&, const Value& v, const std::vector<Value>& a) { return compare(v, arg0(a, "ge")) >= 0; }},
        {"in", [](Interpreter&, const Value& v, const std::vector<Value>& a) { return contains(arg0(a, "in"), v); }},
        {"sameas", [](Interpreter&, const Value& v, const std::vector<Value>& a) {
             const Value& o = arg0(a, "sameas");
             if (v.kind() != o.kind()) return false;
             if (v.is_none() || v.is_undefined()) return true;
             if (v.is_bool()) return v.as_bool() == o.as_bool();
             return v.same_object(o) || ((v.is_int() || v.is_float()) && equals(v, o));
         }},
        {"even", [](Interpreter&, const Value& v, const std::vector<Value>&) { return !v.is_float() ? int_of(v, "even") % 2 == 0 : std::fmod(v.as_float(), 2.0) == 0; }},
        {"odd", [](Interpreter&, const Value& v, const std::vector<Value>&) { return !v.is_float() ? int_of(v, "odd") % 2 != 0 : std::fmod(v.as_float(), 2.0) != 0; }},
        {"divisibleby", [](Interpreter&, const Value& v, const std::vector<Value>& a) {
             const Value& d = arg0(a, "divisibleby");
             if (!v.is_number() || !d.is_number()) eval_fail("test 'divisibleby' needs numbers");
             if (v.is_float() || d.is_float()) {
                 if (d.as_float() == 0) eval_fail("float modulo by zero");
                 return std::fmod(v.as_float(), d.as_float()) == 0;
             }
             if (d.as_int() == 0) eval_fail("integer division or modulo by zero");
             if (d.as_int() == -1) return true;
             return v.as_int() % d.as_int() == 0;
         }},
        {"lower", [](Interpreter&, const Value& v, const std::vector<Value>&) { std::string s = to_str(v); return py_lower(s) == s && py_upper(s) != s; }},
        {"upper", [](Interpreter&, const Value& v, const std::vector<Value>&) { std::string s = to_str(v); return py_upper(s) == s && py_lower(s) != s; }},
        {"filter", [](Interpreter&, const Value& v, const std::vector<Value>&) { return v.is_string() && has_filter(v.str()); }},
        {"test", [](Interpreter&, const Value& v, const std::vector<Value>&) { return v.is_string() && has_test(v.str()); }},
    };
    return t;
}

const std::unordered_map<std::string, std::string>& test_aliases() {
    static const std::unordered_map<std::string, std::string> a = {
        {"equalto", "eq"}, {"==", "eq"}, {"!=", "ne"},       {"<", "lt"},           {"<=", "le"},
        {">", "gt"},       {">=", "ge"}, {"lessthan", "lt"}, {"greaterthan", "gt"},
    };
    return a;
}

}  // namespace

bool has_test(const std::string& name) {
    return tests().count(name) > 0 || test_aliases().count(name) > 0;
}

bool apply_test(Interpreter& in, const std::string& name, const Value& subject, CallArgs& args) {
    auto alias = test_aliases().find(name);
    const std::string& key = alias == test_aliases().end() ? name : alias->second;
    auto it = tests().find(key);
    if (it == tests().end()) eval_fail("no test named '" + name + "'");
    if (!args.kw.empty()) eval_fail("test '" + name + "' takes no keyword arguments");
    return it->second(in, subject, args.pos);
}

}  // namespace hf2q::jinja

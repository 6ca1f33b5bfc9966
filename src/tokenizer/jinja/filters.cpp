// Built-in filters, with jinja2's argument names, defaults and Python semantics.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/jinja/interp.h"
#include "tokenizer/jinja/text.h"

namespace hf2q::jinja {
namespace {

using Filter = Value (*)(Interpreter&, const Value& v, CallArgs& a);

bool flag(const Value& v, bool def) {
    return v.is_undefined() ? def : v.truthy();
}

int64_t length_of(const Value& v) {
    switch (v.kind()) {
        case Kind::String:
            return static_cast<int64_t>(utf8_length(v.str()));
        case Kind::List:
            return static_cast<int64_t>(v.list_ref().items.size());
        case Kind::Dict:
            return static_cast<int64_t>(v.dict_ref().items.size());
        case Kind::Undefined:
            return 0;
        default:
            eval_fail("object of type '" + type_name(v) + "' has no len()");
    }
}

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Value get_path(const Value& v, const Value& attr) {
    if (!attr.is_string()) return get_item(v, attr);
    Value cur = v;
    const std::string& path = attr.str();
    size_t start = 0;
    while (true) {
        size_t dot = path.find('.', start);
        std::string part =
            path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        bool numeric = !part.empty() && std::all_of(part.begin(), part.end(),
                                                    [](char c) { return c >= '0' && c <= '9'; });
        cur = numeric && part.size() < 18 ? get_item(cur, Value::integer(std::stoll(part)))
                                          : get_item(cur, Value::string(part));
        if (dot == std::string::npos) return cur;
        start = dot + 1;
    }
}

// Sort key for case-insensitive comparisons.
Value fold(const Value& v, bool case_sensitive) {
    return !case_sensitive && v.is_string() ? Value::string(py_lower(v.str())) : v;
}

void stable_sort(std::vector<Value>& items, const std::vector<Value>& keys, bool reverse) {
    std::vector<size_t> order(items.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return reverse ? compare(keys[b], keys[a]) < 0 : compare(keys[a], keys[b]) < 0;
    });
    std::vector<Value> out;
    for (size_t i : order) out.push_back(items[i]);
    items = std::move(out);
}

Value f_default(Interpreter&, const Value& v, CallArgs& a) {
    auto args = a.bind("default", {"default_value", "boolean"});
    bool use_default = v.is_undefined() || (flag(args[1], false) && !v.truthy());
    if (!use_default) return v;
    bool given = !a.pos.empty() || std::any_of(a.kw.begin(), a.kw.end(), [](const auto& kv) {
        return kv.first == "default_value";
    });
    return given ? args[0] : Value::string("");
}

Value f_tojson(Interpreter& in, const Value& v, CallArgs& a) {
    auto args = a.bind("tojson", {"indent", "ensure_ascii", "separators", "sort_keys"});
    int indent = -1;
    if (!args[0].is_undefined() && !args[0].is_none()) {
        if (!args[0].is_int()) eval_fail("tojson indent must be an integer");
        indent = static_cast<int>(std::clamp<int64_t>(args[0].as_int(), 0, 64));
    }
    if (!args[2].is_undefined() && !args[2].is_none())
        eval_fail("tojson separators are not supported");
    std::string s = to_json(v, indent, flag(args[1], false), flag(args[3], false),
                            in.limits().max_output_bytes);
    in.check_string_size(s.size());
    return Value::string(std::move(s));
}

Value f_items(Interpreter&, const Value& v, CallArgs& a) {
    a.bind("items", {});
    if (v.is_undefined()) return Value::list({});
    if (!v.is_dict()) eval_fail("can only get item pairs from a mapping");
    std::vector<Value> out;
    for (const auto& [k, val] : v.dict_ref().items) out.push_back(Value::list({k, val}, true));
    return Value::list(std::move(out));
}

Value f_dictsort(Interpreter&, const Value& v, CallArgs& a) {
    auto args = a.bind("dictsort", {"case_sensitive", "by", "reverse"});
    if (!v.is_dict()) eval_fail("dictsort expects a mapping, got " + type_name(v));
    bool by_value = false;
    if (!args[1].is_undefined()) {
        std::string by = to_str(args[1]);
        if (by != "key" && by != "value") eval_fail("you can only sort by either 'key' or 'value'");
        by_value = by == "value";
    }
    std::vector<Value> items, keys;
    for (const auto& [k, val] : v.dict_ref().items) {
        items.push_back(Value::list({k, val}, true));
        keys.push_back(fold(by_value ? val : k, flag(args[0], false)));
    }
    stable_sort(items, keys, flag(args[2], false));
    return Value::list(std::move(items));
}

Value f_map(Interpreter& in, const Value& v, CallArgs& a) {
    std::vector<Value> out;
    std::optional<Value> attribute, def;
    for (const auto& [k, val] : a.kw) {
        if (k == "attribute")
            attribute = val;
        else if (k == "default")
            def = val;
    }
    if (attribute) {
        for (const Value& item : in.iterate(v)) {
            Value r = get_path(item, *attribute);
            out.push_back(r.is_undefined() && def ? *def : r);
        }
        return Value::list(std::move(out));
    }
    if (a.pos.empty() || !a.pos[0].is_string())
        eval_fail("map() needs a filter name or attribute=");
    std::string name = a.pos[0].str();
    if (!has_filter(name)) eval_fail("no filter named '" + name + "'");
    CallArgs rest;
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    rest.kw = a.kw;
    for (const Value& item : in.iterate(v)) {
        in.tick();
        CallArgs copy = rest;
        out.push_back(apply_filter(in, name, item, copy));
    }
    return Value::list(std::move(out));
}

// select / reject / selectattr / rejectattr.
Value select_impl(Interpreter& in, const Value& v, CallArgs& a, bool by_attr, bool keep) {
    size_t first = by_attr ? 1 : 0;
    if (by_attr && a.pos.empty()) eval_fail("selectattr/rejectattr need an attribute name");
    std::optional<std::string> test;
    if (a.pos.size() > first) {
        if (!a.pos[first].is_string()) eval_fail("test name must be a string");
        test = a.pos[first].str();
        if (!has_test(*test)) eval_fail("no test named '" + *test + "'");
    }
    CallArgs targs;
    if (a.pos.size() > first + 1)
        targs.pos.assign(a.pos.begin() + static_cast<long>(first) + 1, a.pos.end());
    std::vector<Value> out;
    for (const Value& item : in.iterate(v)) {
        in.tick();
        Value subject = by_attr ? get_path(item, a.pos[0]) : item;
        bool ok = test ? apply_test(in, *test, subject, targs) : subject.truthy();
        if (ok == keep) out.push_back(item);
    }
    return Value::list(std::move(out));
}

Value f_join(Interpreter& in, const Value& v, CallArgs& a) {
    auto args = a.bind("join", {"d", "attribute"});
    std::string sep = args[0].is_undefined() ? "" : to_str(args[0]);
    std::string out;
    bool first = true;
    for (const Value& item : in.iterate(v)) {
        if (!first) out += sep;
        first = false;
        out += to_str(args[1].is_undefined() ? item : get_path(item, args[1]));
        in.check_string_size(out.size());
    }
    return Value::string(std::move(out));
}

Value f_first_last(Interpreter& in, const Value& v, bool first) {
    std::vector<Value> items = in.iterate(v);
    if (items.empty())
        return Value::undefined(first ? "No first item, sequence was empty."
                                      : "No last item, sequence was empty.");
    return first ? items.front() : items.back();
}

Value f_int(Interpreter&, const Value& v, CallArgs& a) {
    auto args = a.bind("int", {"default", "base"});
    Value def = args[0].is_undefined() ? Value::integer(0) : args[0];
    if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
    if (v.is_float()) {
        double f = v.as_float();
        if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return def;
        return Value::integer(static_cast<int64_t>(f));
    }
    if (!v.is_string()) return def;
    std::string s = py_strip(v.str(), std::nullopt, true, true);
    if (s.empty()) return def;
    char* end = nullptr;
    errno = 0;
    long long i = std::strtoll(s.c_str(), &end, 10);
    if (end == s.c_str() + s.size() && errno == 0) return Value::integer(i);
    double f = std::strtod(s.c_str(), &end);
    if (end == s.c_str() + s.size() && std::isfinite(f) && std::fabs(f) < 9.2e18)
        return Value::integer(static_cast<int64_t>(f));
    return def;
}

Value f_float(Interpreter&, const Value& v, CallArgs& a) {
    auto args = a.bind("float", {"default"});
    Value def = args[0].is_undefined() ? Value::number(0.0) : args[0];
    if (v.is_number()) return Value::number(v.as_float());
    if (!v.is_string()) return def;
    std::string s = py_strip(v.str(), std::nullopt, true, true);
    char* end = nullptr;
    double f = std::strtod(s.c_str(), &end);
    return !s.empty() && end == s.c_str() + s.size() ? Value::number(f) : def;
}

Value f_round(Interpreter&, const Value& v, CallArgs& a) {
    auto args = a.bind("round", {"precision", "method"});
    if (!v.is_number()) eval_fail("round expects a number, got " + type_name(v));
    int64_t prec = args[0].is_undefined() ? 0 : args[0].as_int();
    std::string method = args[1].is_undefined() ? "common" : to_str(args[1]);
    double x = v.as_float();
    if (method == "common") {
        if (v.is_int() || v.is_bool())
            return Value::integer(v.as_int());  // Python round(int) is an int
        if (prec == 0 || !std::isfinite(x)) return Value::number(std::nearbyint(x));
        // Python's round(x, n) rounds the exact binary value half-to-even, like printf.
        char buf[512];
        std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::clamp<int64_t>(prec, 0, 300)),
                      x);
        return Value::number(std::strtod(buf, nullptr));
    }
    if (method != "ceil" && method != "floor") eval_fail("method must be common, ceil or floor");
    double scale = std::pow(10.0, static_cast<double>(prec));
    double r = method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale);
    return Value::number(r / scale);
}

Value f_unique(Interpreter& in, const Value& v, CallArgs& a) {
    auto args = a.bind("unique", {"case_sensitive", "attribute"});
    std::vector<Value> out, seen;
    for (const Value& item : in.iterate(v)) {
        in.tick();
        Value key =
            fold(args[1].is_undefined() ? item : get_path(item, args[1]), flag(args[0], false));
        bool dup =
            std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); });
        if (dup) continue;
        seen.push_back(key);
        out.push_back(item);
    }
    return Value::list(std::move(out));
}

Value f_sort(Interpreter& in, const Value& v, CallArgs& a) {
    auto args = a.bind("sort", {"reverse", "case_sensitive", "attribute"});
    std::vector<Value> items = in.iterate(v), keys;
    for (const Value& item : items)
        keys.push_back(
            fold(args[2].is_undefined() ? item : get_path(item, args[2]), flag(args[1], false)));
    stable_sort(items, keys, flag(args[0], false));
    return Value::list(std::move(items));
}

Value f_reverse(Interpreter& in, const Value& v, CallArgs& a) {
    a.bind("reverse", {});
    if (v.is_string()) {
        auto off = utf8_offsets(v.str());
        std::string out;
        for (size_t i = off.size() - 1; i > 0; --i)
            out.append(v.str(), off[i - 1], off[i] - off[i - 1]);
        return Value::string(std::move(out));
    }
    std::vector<Value> items = in.iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
}

Value f_minmax(Interpreter& in, const Value& v, CallArgs& a, bool want_max) {
    auto args = a.bind(want_max ? "max" : "min", {"case_sensitive", "attribute"});
    std::vector<Value> items = in.iterate(v);
    if (items.empty())
        return Value::undefined(std::string("No aggregated item, sequence was empty."));
    size_t best = 0;
    auto key = [&](const Value& x) {
        return fold(args[1].is_undefined() ? x : get_path(x, args[1]), flag(args[0], false));
    };
    for (size_t i = 1; i < items.size(); ++i) {
        int c = compare(key(items[i]), key(items[best]));
        if (want_max ? c > 0 : c < 0) best = i;
    }
    return items[best];
}

Value f_sum(Interpreter& in, const Value& v, CallArgs& a) {
    auto args = a.bind("sum", {"attribute", "start"});
    Value total = args[1].is_undefined() ? Value::integer(0) : args[1];
    for (const Value& item : in.iterate(v))
        total = binary_op("+", total, args[0].is_undefined() ? item : get_path(item, args[0]), in);
    return total;
}

Value string_filter(const Value& v, CallArgs& a, const char* name,
                    std::string (*fn)(std::string_view)) {
    a.bind(name, {});
    return Value::string(fn(to_str(v)));
}

const std::unordered_map<std::string, Filter>& filters() {
    static const std::unordered_map<std::string, Filter> f = {
        {"trim",
         [](Interpreter&, const Value& v, CallArgs& a) {
             auto args = a.bind("trim", {"chars"});
             std::optional<std::string> chars;
             if (!args[0].is_undefined() && !args[0].is_none()) chars = to_str(args[0]);
             return Value::string(py_strip(to_str(v), chars, true, true));
         }},
        {"upper", [](Interpreter&, const Value& v,
                     CallArgs& a) { return string_filter(v, a, "upper", py_upper); }},
        {"lower", [](Interpreter&, const Value& v,
                     CallArgs& a) { return string_filter(v, a, "lower", py_lower); }},
        {"title", [](Interpreter&, const Value& v,
                     CallArgs& a) { return string_filter(v, a, "title", py_title); }},
        {"capitalize",
         [](Interpreter&, const Value& v, CallArgs& a) {
             return string_filter(v, a, "capitalize", py_capitalize);
         }},
        {"length",
         [](Interpreter&, const Value& v, CallArgs& a) {
             a.bind("length", {});
             return Value::integer(length_of(v));
         }},
        {"default", f_default},
        {"tojson", f_tojson},
        {"items", f_items},
        {"dictsort", f_dictsort},
        {"map", f_map},
        {"select", [](Interpreter& in, const Value& v,
                      CallArgs& a) { return select_impl(in, v, a, false, true); }},
        {"reject", [](Interpreter& in, const Value& v,
                      CallArgs& a) { return select_impl(in, v, a, false, false); }},
        {"selectattr", [](Interpreter& in, const Value& v,
                          CallArgs& a) { return select_impl(in, v, a, true, true); }},
        {"rejectattr", [](Interpreter& in, const Value& v,
                          CallArgs& a) { return select_impl(in, v, a, true, false); }},
        {"join", f_join},
        {"first",
         [](Interpreter& in, const Value& v, CallArgs& a) {
             a.bind("first", {});
             return f_first_last(in, v, true);
         }},
        {"last",
         [](Interpreter& in, const Value& v, CallArgs& a) {
             a.bind("last", {});
             return f_first_last(in, v, false);
         }},
        {"list",
         [](Interpreter& in, const Value& v, CallArgs& a) {
             a.bind("list", {});
             return Value::list(in.iterate(v));
         }},
        {"string",
         [](Interpreter&, const Value& v, CallArgs& a) {
             a.bind("string", {});
             return Value::string(to_str(v));
         }},
        {"int", f_int},
        {"float", f_float},
        {"abs",
         [](Interpreter&, const Value& v, CallArgs& a) {
             a.bind("abs", {});
             if (v.is_float()) return Value::number(std::fabs(v.as_float()));
             if (!v.is_int() && !v.is_bool())
                 eval_fail("bad operand type for abs(): '" + type_name(v) + "'");
             return v.as_int() < 0 ? unary_minus(v) : Value::integer(v.as_int());
         }},
        {"round", f_round},
        {"replace",
         [](Interpreter& in, const Value& v, CallArgs& a) {
             auto args = a.bind("replace", {"old", "new", "count"});
             int64_t count = args[2].is_undefined() || args[2].is_none() ? -1 : args[2].as_int();
             std::string r = py_replace(to_str(v), to_str(args[0]), to_str(args[1]), count);
             in.check_string_size(r.size());
             return Value::string(std::move(r));
         }},
        {"unique", f_unique},
        {"sort", f_sort},
        {"reverse", f_reverse},
        {"safe",
         [](Interpreter&, const Value& v, CallArgs& a) {
             a.bind("safe", {});
             return Value::string(to_str(v));
         }},
        {"escape",
         [](Interpreter&, const Value& v, CallArgs& a) {
             a.bind("escape", {});
             return Value::string(html_escape(to_str(v)));
         }},
        {"min",
         [](Interpreter& in, const Value& v, CallArgs& a) { return f_minmax(in, v, a, false); }},
        {"max",
         [](Interpreter& in, const Value& v, CallArgs& a) { return f_minmax(in, v, a, true); }},
        {"sum", f_sum},
    };
    return f;
}

const std::unordered_map<std::string, std::string>& filter_aliases() {
    static const std::unordered_map<std::string, std::string> a = {
        {"d", "default"}, {"count", "length"}, {"e", "escape"}};
    return a;
}

}  // namespace

bool has_filter(const std::string& name) {
    return filters().count(name) > 0 || filter_aliases().count(name) > 0;
}

Value apply_filter(Interpreter& in, const std::string& name, const Value& subject, CallArgs& args) {
    auto alias = filter_aliases().find(name);
    const std::string& key = alias == filter_aliases().end() ? name : alias->second;
    auto it = filters().find(key);
    if (it == filters().end()) eval_fail("no filter named '" + name + "'");
    return it->second(in, subject, args);
}

}  // namespace hf2q::jinja

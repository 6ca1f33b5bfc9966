// Python operators, attribute/item lookup and slicing on template values.
#include <cmath>

#include "core/error.h"
#include "tokenizer/jinja/interp.h"
#include "tokenizer/jinja/text.h"

namespace hf2q::jinja {
namespace {

[[noreturn]] void fail_undefined(const Value& v) {
    eval_fail(v.undefined_hint().empty() ? "undefined value used" : v.undefined_hint());
}

[[noreturn]] void bad_operands(const std::string& op, const Value& a, const Value& b) {
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    eval_fail("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" +
              type_name(b) + "'");
}

// Python ints are unbounded; ours are int64 and overflow is an error.
template <class Op>
int64_t checked(int64_t a, int64_t b, Op op) {
    int64_t r;
    if (op(a, b, &r)) eval_fail("integer overflow (values are limited to 64 bits)");
    return r;
}
bool add_ovf(int64_t a, int64_t b, int64_t* r) {
    return __builtin_add_overflow(a, b, r);
}
bool sub_ovf(int64_t a, int64_t b, int64_t* r) {
    return __builtin_sub_overflow(a, b, r);
}
bool mul_ovf(int64_t a, int64_t b, int64_t* r) {
    return __builtin_mul_overflow(a, b, r);
}

double float_mod(double a, double b) {
    double r = std::fmod(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}

Value int_pow(int64_t base, int64_t exp) {
    if (exp < 0)
        return Value::number(std::pow(static_cast<double>(base), static_cast<double>(exp)));
    int64_t r = 1;
    while (exp > 0) {
        if (exp & 1) r = checked(r, base, mul_ovf);
        exp >>= 1;
        if (exp > 0) base = checked(base, base, mul_ovf);
    }
    return Value::integer(r);
}

Value repeat(const Value& seq, int64_t n, const Interpreter& in) {
    if (n < 0) n = 0;
    if (seq.is_string()) {
        const std::string& s = seq.str();
        if (!s.empty())
            in.check_string_size(static_cast<uint64_t>(n) > UINT64_MAX / s.size()
                                     ? UINT64_MAX
                                     : s.size() * static_cast<uint64_t>(n));
        std::string out;
        for (int64_t k = 0; k < n && !s.empty(); ++k) out += s;
        return Value::string(std::move(out));
    }
    const auto& items = seq.list_ref().items;
    if (!items.empty())
        in.check_list_size(static_cast<uint64_t>(n) > UINT64_MAX / items.size()
                               ? UINT64_MAX
                               : items.size() * static_cast<uint64_t>(n));
    std::vector<Value> out;
    for (int64_t k = 0; k < n && !items.empty(); ++k)
        out.insert(out.end(), items.begin(), items.end());
    return Value::list(std::move(out), seq.list_ref().tuple);
}

Value arith(const std::string& op, const Value& a, const Value& b) {
    if (!a.is_float() && !b.is_float()) {
        int64_t x = a.as_int(), y = b.as_int();
        if (op == "+") return Value::integer(checked(x, y, add_ovf));
        if (op == "-") return Value::integer(checked(x, y, sub_ovf));
        if (op == "*") return Value::integer(checked(x, y, mul_ovf));
        if (op == "**") return int_pow(x, y);
        if (y == 0)
            eval_fail(op == "/" ? "division by zero" : "integer division or modulo by zero");
        if (op == "/") return Value::number(static_cast<double>(x) / static_cast<double>(y));
        if (x == INT64_MIN && y == -1)
            eval_fail("integer overflow (values are limited to 64 bits)");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
            --q;
            m += y;
        }
        return Value::integer(op == "//" ? q : m);
    }
    double x = a.as_float(), y = b.as_float();
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (op == "**") return Value::number(std::pow(x, y));
    if (y == 0) eval_fail("float division by zero");
    if (op == "/") return Value::number(x / y);
    if (op == "//") return Value::number(std::floor(x / y));
    return Value::number(float_mod(x, y));
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b, const Interpreter& in) {
    if (op == "~") {
        std::string s = to_str(a);
        std::string t = to_str(b);
        in.check_string_size(s.size() + t.size());
        return Value::string(s + t);
    }
    if (a.is_number() && b.is_number()) return arith(op, a, b);
    if (op == "+") {
        if (a.is_string() && b.is_string()) {
            in.check_string_size(a.str().size() + b.str().size());
            return Value::string(a.str() + b.str());
        }
        if (a.is_list() && b.is_list() && a.list_ref().tuple == b.list_ref().tuple) {
            in.check_list_size(a.list_ref().items.size() + b.list_ref().items.size());
            std::vector<Value> items = a.list_ref().items;
            items.insert(items.end(), b.list_ref().items.begin(), b.list_ref().items.end());
            return Value::list(std::move(items), a.list_ref().tuple);
        }
    }
    if (op == "*") {
        if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool()))
            return repeat(a, b.as_int(), in);
        if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool()))
            return repeat(b, a.as_int(), in);
    }
    if (op == "%" && a.is_string()) eval_fail("printf-style string formatting is not supported");
    bad_operands(op, a, b);
}

Value unary_minus(const Value& a) {
    if (a.is_float()) return Value::number(-a.as_float());
    if (a.is_int() || a.is_bool()) {
        if (a.as_int() == INT64_MIN) eval_fail("integer overflow (values are limited to 64 bits)");
        return Value::integer(-a.as_int());
    }
    if (a.is_undefined()) fail_undefined(a);
    eval_fail("bad operand type for unary -: '" + type_name(a) + "'");
}

bool contains(const Value& c, const Value& item) {
    switch (c.kind()) {
        case Kind::String:
            if (!item.is_string())
                eval_fail("'in <string>' requires string as left operand, not " + type_name(item));
            return c.str().find(item.str()) != std::string::npos;
        case Kind::List:
            for (const Value& v : c.list_ref().items)
                if (equals(v, item)) return true;
            return false;
        case Kind::Dict:
            return c.dict_ref().find(item) != nullptr;
        case Kind::Undefined:
            return false;
        default:
            eval_fail("argument of type '" + type_name(c) + "' is not iterable");
    }
}

static std::string object_desc(const Value& v) {
    return v.is_none() ? "'None'" : "'" + type_name(v) + " object'";
}

Value get_attr(const Value& obj, const std::string& attr) {
    if (obj.is_undefined()) fail_undefined(obj);
    if (obj.is_dict()) {
        const Dict& d = obj.dict_ref();
        if (d.type == Dict::Type::Plain) {
            Value m = bound_method(obj, attr);
            if (!m.is_undefined()) return m;
        }
        if (const Value* v = d.find(attr)) return *v;
    } else {
        Value m = bound_method(obj, attr);
        if (!m.is_undefined()) return m;
    }
    return Value::undefined(object_desc(obj) + " has no attribute '" + attr + "'");
}

Value get_item(const Value& obj, const Value& key) {
    if (obj.is_undefined()) fail_undefined(obj);
    if (obj.is_dict()) {
        if (key.is_string() || key.is_number() || key.is_none()) {
            if (const Value* v = obj.dict_ref().find(key)) return *v;
        }
    } else if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
        int64_t i = key.as_int();
        if (obj.is_list()) {
            const auto& items = obj.list_ref().items;
            int64_t n = static_cast<int64_t>(items.size());
            if (i < 0) i += n;
            if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
        } else {
            auto off = utf8_offsets(obj.str());
            int64_t n = static_cast<int64_t>(off.size()) - 1;
            if (i < 0) i += n;
            if (i >= 0 && i < n) {
                auto k = static_cast<size_t>(i);
                return Value::string(obj.str().substr(off[k], off[k + 1] - off[k]));
            }
        }
        return Value::undefined(object_desc(obj) + " has no element " + to_str(key));
    }
    if (key.is_string()) return get_attr(obj, key.str());
    return Value::undefined(object_desc(obj) + " has no element " + repr(key));
}

static int64_t slice_bound(const Value& v, const char* what) {
    if (v.is_int() || v.is_bool()) return v.as_int();
    eval_fail(std::string("slice ") + what + " must be an integer or None, not " + type_name(v));
}

Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
    if (obj.is_undefined()) fail_undefined(obj);
    if (!obj.is_list() && !obj.is_string())
        eval_fail("'" + type_name(obj) + "' object is not subscriptable");
    auto absent = [](const Value& v) { return v.is_undefined() || v.is_none(); };
    int64_t step = absent(step_v) ? 1 : slice_bound(step_v, "step");
    if (step == 0) eval_fail("slice step cannot be zero");
    std::vector<size_t> off;
    int64_t len;
    if (obj.is_string()) {
        off = utf8_offsets(obj.str());
        len = static_cast<int64_t>(off.size()) - 1;
    } else {
        len = static_cast<int64_t>(obj.list_ref().items.size());
    }
    const int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? len : len - 1;
    auto bound = [&](const Value& v, const char* what, int64_t def) {
        if (absent(v)) return def;
        int64_t b = slice_bound(v, what);
        if (b < 0) b = b < -len ? lower : b + len;
        return b < lower ? lower : b > upper ? upper : b;
    };
    int64_t start = bound(start_v, "start", step > 0 ? lower : upper);
    int64_t stop = bound(stop_v, "stop", step > 0 ? upper : lower);
    std::vector<int64_t> idx;
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        idx.push_back(i);
        if (__builtin_add_overflow(i, step, &i)) break;
    }
    if (obj.is_string()) {
        std::string out;
        for (int64_t i : idx) {
            auto k = static_cast<size_t>(i);
            out.append(obj.str(), off[k], off[k + 1] - off[k]);
        }
        return Value::string(std::move(out));
    }
    std::vector<Value> out;
    for (int64_t i : idx) out.push_back(obj.list_ref().items[static_cast<size_t>(i)]);
    return Value::list(std::move(out), obj.list_ref().tuple);
}

}  // namespace hf2q::jinja

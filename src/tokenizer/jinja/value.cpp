#include "tokenizer/jinja/value.h"

#include <charconv>
#include <cmath>

#include "core/error.h"
#include "tokenizer/jinja/text.h"

namespace hf2q::jinja {

void eval_fail(std::string message) {
    throw EvalError{std::move(message)};
}

Value Value::undefined(std::string hint) {
    Value v;
    if (!hint.empty()) v.p_ = std::make_shared<std::string>(std::move(hint));
    return v;
}
Value Value::none() {
    Value v;
    v.kind_ = Kind::None;
    return v;
}
Value Value::boolean(bool b) {
    Value v;
    v.kind_ = Kind::Bool;
    v.b_ = b;
    return v;
}
Value Value::integer(int64_t i) {
    Value v;
    v.kind_ = Kind::Int;
    v.i_ = i;
    return v;
}
Value Value::number(double f) {
    Value v;
    v.kind_ = Kind::Float;
    v.f_ = f;
    return v;
}
Value Value::string(std::string s) {
    Value v;
    v.kind_ = Kind::String;
    v.p_ = std::make_shared<std::string>(std::move(s));
    return v;
}
Value Value::list(std::vector<Value> items, bool tuple) {
    Value v;
    v.kind_ = Kind::List;
    auto l = std::make_shared<List>();
    l->items = std::move(items);
    l->tuple = tuple;
    uint64_t w = l->items.size();
    for (const Value& x : l->items) w += x.weight();
    l->weight = w;
    v.p_ = std::move(l);
    return v;
}
Value Value::dict() {
    return from_dict(std::make_shared<Dict>());
}
Value Value::from_dict(std::shared_ptr<Dict> d) {
    Value v;
    v.kind_ = Kind::Dict;
    v.p_ = std::move(d);
    return v;
}
Value Value::callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn) {
    Value v;
    v.kind_ = Kind::Callable;
    v.p_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
    return v;
}

double Value::as_float() const {
    switch (kind_) {
        case Kind::Float:
            return f_;
        case Kind::Int:
            return static_cast<double>(i_);
        case Kind::Bool:
            return b_ ? 1.0 : 0.0;
        default:
            return 0.0;
    }
}

const std::string& Value::undefined_hint() const {
    static const std::string empty;
    return kind_ == Kind::Undefined && p_ ? str() : empty;
}

uint64_t Value::weight() const {
    if (kind_ == Kind::List) return list_ref().weight;
    if (kind_ == Kind::Dict && dict_ref().type == Dict::Type::Plain) return dict_ref().weight;
    return 1;
}

bool Value::truthy() const {
    switch (kind_) {
        case Kind::Undefined:
        case Kind::None:
            return false;
        case Kind::Bool:
            return b_;
        case Kind::Int:
            return i_ != 0;
        case Kind::Float:
            return f_ != 0.0;
        case Kind::String:
            return !str().empty();
        case Kind::List:
            return !list_ref().items.empty();
        case Kind::Dict:
            return !dict_ref().items.empty();
        case Kind::Callable:
            return true;
    }
    return false;
}

const Value* Dict::find(const Value& key) const {
    auto it = index.find(hash_key(key));
    return it == index.end() ? nullptr : &items[it->second].second;
}

const Value* Dict::find(std::string_view key) const {
    std::string k = "s";
    k.append(key);
    auto it = index.find(k);
    return it == index.end() ? nullptr : &items[it->second].second;
}

void Dict::set(const Value& key, Value v) {
    weight += 1 + v.weight();  // overestimates on replacement, which is harmless
    auto [it, inserted] = index.emplace(hash_key(key), items.size());
    if (inserted)
        items.emplace_back(key, std::move(v));
    else
        items[it->second].second = std::move(v);
}

std::vector<Value> CallArgs::bind(std::string_view fn,
                                  const std::vector<std::string_view>& names) const {
    if (pos.size() > names.size())
        eval_fail(
            str_cat(fn, "() takes at most ", names.size(), " arguments (", pos.size(), " given)"));
    std::vector<Value> out(names.size());
    for (size_t i = 0; i < pos.size(); ++i) out[i] = pos[i];
    for (const auto& [k, v] : kw) {
        size_t i = 0;
        while (i < names.size() && names[i] != k) ++i;
        if (i == names.size())
            eval_fail(str_cat(fn, "() got an unexpected keyword argument '", k, "'"));
        out[i] = v;
    }
    return out;
}

std::string py_float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string sci(buf, res.ptr);  // "-d.ddde+XX"
    bool neg = sci[0] == '-';
    if (neg) sci.erase(0, 1);
    size_t e = sci.find('e');
    int exp = std::stoi(sci.substr(e + 1));
    std::string digits;
    for (size_t i = 0; i < e; ++i)
        if (sci[i] != '.') digits += sci[i];
    std::string out = neg ? "-" : "";
    int nd = static_cast<int>(digits.size());
    if (exp >= -5 + 1 && exp < 16) {
        if (exp >= 0) {
            if (nd <= exp + 1) {
                out += digits + std::string(exp + 1 - nd, '0') + ".0";
            } else {
                out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
            }
        } else {
            out += "0." + std::string(-exp - 1, '0') + digits;
        }
        return out;
    }
    out += digits.substr(0, 1);
    if (nd > 1) out += "." + digits.substr(1);
    out += exp < 0 ? "e-" : "e+";
    int a = exp < 0 ? -exp : exp;
    if (a < 10) out += '0';
    out += std::to_string(a);
    return out;
}

static std::string repr_string(const std::string& s) {
    char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
    std::string out(1, q);
    for (char ch : s) {
        auto c = static_cast<unsigned char>(ch);
        if (ch == q || ch == '\\') {
            out += '\\';
            out += ch;
        } else if (ch == '\n') {
            out += "\\n";
        } else if (ch == '\r') {
            out += "\\r";
        } else if (ch == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7F) {
            static const char* hex = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        } else {
            out += ch;
        }
    }
    out += q;
    return out;
}

std::string repr(const Value& v, size_t max_bytes) {
    auto check = [&](const std::string& out) {
        if (out.size() > max_bytes)
            eval_fail(str_cat("render limit exceeded: text of a value is larger than ", max_bytes,
                              " bytes"));
    };
    switch (v.kind()) {
        case Kind::String:
            return repr_string(v.str());
        case Kind::Undefined:
            return "Undefined";
        default:
            break;
    }
    if (v.is_list()) {
        const List& l = v.list_ref();
        std::string out = l.tuple ? "(" : "[";
        for (size_t i = 0; i < l.items.size(); ++i) {
            if (i) out += ", ";
            out += repr(l.items[i], max_bytes);
            check(out);
        }
        if (l.tuple && l.items.size() == 1) out += ",";
        out += l.tuple ? ")" : "]";
        return out;
    }
    if (v.is_dict()) {
        const Dict& d = v.dict_ref();
        if (d.type == Dict::Type::Namespace) return "<Namespace>";
        if (d.type == Dict::Type::Loop) return "<LoopContext>";
        std::string out = "{";
        for (size_t i = 0; i < d.items.size(); ++i) {
            if (i) out += ", ";
            out += repr(d.items[i].first, max_bytes) + ": " + repr(d.items[i].second, max_bytes);
            check(out);
        }
        out += "}";
        return out;
    }
    return to_str(v, max_bytes);
}

std::string to_str(const Value& v, size_t max_bytes) {
    switch (v.kind()) {
        case Kind::Undefined:
            return {};
        case Kind::None:
            return "None";
        case Kind::Bool:
            return v.as_bool() ? "True" : "False";
        case Kind::Int:
            return std::to_string(v.as_int());
        case Kind::Float:
            return py_float_repr(v.as_float());
        case Kind::String:
            return v.str();
        case Kind::List:
        case Kind::Dict:
            return repr(v, max_bytes);
        case Kind::Callable:
            return "<function " + v.callable_ref().name + ">";
    }
    return {};
}

std::string type_name(const Value& v) {
    switch (v.kind()) {
        case Kind::Undefined:
            return "Undefined";
        case Kind::None:
            return "NoneType";
        case Kind::Bool:
            return "bool";
        case Kind::Int:
            return "int";
        case Kind::Float:
            return "float";
        case Kind::String:
            return "str";
        case Kind::List:
            return v.list_ref().tuple ? "tuple" : "list";
        case Kind::Dict:
            return v.dict_ref().type == Dict::Type::Namespace ? "Namespace" : "dict";
        case Kind::Callable:
            return "function";
    }
    return "object";
}

bool equals(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
        return a.as_int() == b.as_int();
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case Kind::Undefined:
        case Kind::None:
            return true;
        case Kind::String:
            return a.str() == b.str();
        case Kind::List: {
            const auto& x = a.list_ref().items;
            const auto& y = b.list_ref().items;
            if (x.size() != y.size() || a.list_ref().tuple != b.list_ref().tuple) return false;
            for (size_t i = 0; i < x.size(); ++i)
                if (!equals(x[i], y[i])) return false;
            return true;
        }
        case Kind::Dict: {
            const Dict& x = a.dict_ref();
            const Dict& y = b.dict_ref();
            if (x.type != Dict::Type::Plain || y.type != Dict::Type::Plain) return a.same_object(b);
            if (x.items.size() != y.items.size()) return false;
            for (const auto& [k, val] : x.items) {
                const Value* o = y.find(k);
                if (!o || !equals(val, *o)) return false;
            }
            return true;
        }
        case Kind::Callable:
            return a.same_object(b);
        default:
            return false;
    }
}

int compare(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) {
            double x = a.as_float(), y = b.as_float();
            return x < y ? -1 : x > y ? 1 : 0;
        }
        int64_t x = a.as_int(), y = b.as_int();
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.is_string() && b.is_string()) {
        int c = a.str().compare(b.str());
        return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    if (a.is_list() && b.is_list() && a.list_ref().tuple == b.list_ref().tuple) {
        const auto& x = a.list_ref().items;
        const auto& y = b.list_ref().items;
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (equals(x[i], y[i])) continue;
            return compare(x[i], y[i]);
        }
        return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
    }
    eval_fail("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) +
              "'");
}

std::string hash_key(const Value& v) {
    switch (v.kind()) {
        case Kind::String:
            return "s" + v.str();
        case Kind::Bool:
        case Kind::Int:
            return "i" + std::to_string(v.as_int());
        case Kind::Float: {
            double f = v.as_float();
            if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 9.2e18)
                return "i" + std::to_string(static_cast<int64_t>(f));
            return "f" + py_float_repr(f);
        }
        case Kind::None:
            return "n";
        case Kind::List:
            if (v.list_ref().tuple) {
                std::string k = "t(";
                for (const Value& x : v.list_ref().items) k += hash_key(x) + ",";
                return k + ")";
            }
            break;
        default:
            break;
    }
    eval_fail("unhashable type: '" + type_name(v) + "'");
}

}  // namespace hf2q::jinja

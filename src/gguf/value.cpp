// gguf::Value: construction, exact-type accessors and display rendering.
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "gguf/gguf.h"

namespace hf2q::gguf {
namespace {

bool is_unsigned(ValueType t) {
    return t == ValueType::UINT8 || t == ValueType::UINT16 || t == ValueType::UINT32 ||
           t == ValueType::UINT64;
}
bool is_signed(ValueType t) {
    return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 ||
           t == ValueType::INT64;
}

std::string type_label(const Value& v) {
    if (!v.is_array()) return std::string(value_type_name(v.type()));
    return str_cat("ARRAY[", value_type_name(v.elem_type()), "]");
}

[[noreturn]] void wrong_type(std::string_view what, const Value& v, std::string_view expected) {
    fail(what, " has type ", type_label(v), ", expected ", expected);
}

// Checks that scalar `s` holds the alternative of `t` and a value in its range.
bool scalar_fits(ValueType t, const Value::Scalar& s) {
    switch (t) {
        case ValueType::UINT8:
            return std::holds_alternative<uint64_t>(s) && std::get<uint64_t>(s) <= UINT8_MAX;
        case ValueType::UINT16:
            return std::holds_alternative<uint64_t>(s) && std::get<uint64_t>(s) <= UINT16_MAX;
        case ValueType::UINT32:
            return std::holds_alternative<uint64_t>(s) && std::get<uint64_t>(s) <= UINT32_MAX;
        case ValueType::UINT64: return std::holds_alternative<uint64_t>(s);
        case ValueType::INT8:
            return std::holds_alternative<int64_t>(s) && std::get<int64_t>(s) >= INT8_MIN &&
                   std::get<int64_t>(s) <= INT8_MAX;
        case ValueType::INT16:
            return std::holds_alternative<int64_t>(s) && std::get<int64_t>(s) >= INT16_MIN &&
                   std::get<int64_t>(s) <= INT16_MAX;
        case ValueType::INT32:
            return std::holds_alternative<int64_t>(s) && std::get<int64_t>(s) >= INT32_MIN &&
                   std::get<int64_t>(s) <= INT32_MAX;
        case ValueType::INT64: return std::holds_alternative<int64_t>(s);
        case ValueType::FLOAT32: {
            if (!std::holds_alternative<double>(s)) return false;
            double d = std::get<double>(s);
            return std::isnan(d) || static_cast<double>(static_cast<float>(d)) == d;
        }
        case ValueType::FLOAT64: return std::holds_alternative<double>(s);
        case ValueType::BOOL: return std::holds_alternative<bool>(s);
        case ValueType::STRING: return std::holds_alternative<std::string>(s);
        case ValueType::ARRAY: return false;
    }
    return false;
}

bool scalar_equal(const Value::Scalar& a, const Value::Scalar& b) {
    if (a.index() != b.index()) return false;
    if (std::holds_alternative<double>(a))
        return std::bit_cast<uint64_t>(std::get<double>(a)) ==
               std::bit_cast<uint64_t>(std::get<double>(b));
    return a == b;
}

void append_escaped(std::string& out, std::string_view s) {
    out += '"';
    for (char ch : s) {
        auto c = static_cast<unsigned char>(ch);
        switch (ch) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20 || c == 0x7F) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\x%02X", c);
                    out += buf;
                } else {
                    out += ch;
                }
        }
    }
    out += '"';
}

void append_scalar(std::string& out, ValueType t, const Value::Scalar& s) {
    char buf[64];
    if (auto* u = std::get_if<uint64_t>(&s)) {
        out += std::to_string(*u);
    } else if (auto* i = std::get_if<int64_t>(&s)) {
        out += std::to_string(*i);
    } else if (auto* d = std::get_if<double>(&s)) {
        // Shortest text that reads back to the same float/double.
        auto r = t == ValueType::FLOAT32
                     ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(*d))
                     : std::to_chars(buf, buf + sizeof buf, *d);
        out.append(buf, r.ptr);
    } else if (auto* b = std::get_if<bool>(&s)) {
        out += *b ? "true" : "false";
    } else {
        append_escaped(out, std::get<std::string>(s));
    }
}

}  // namespace

std::string_view value_type_name(ValueType t) {
    switch (t) {
        case ValueType::UINT8: return "UINT8";
        case ValueType::INT8: return "INT8";
        case ValueType::UINT16: return "UINT16";
        case ValueType::INT16: return "INT16";
        case ValueType::UINT32: return "UINT32";
        case ValueType::INT32: return "INT32";
        case ValueType::FLOAT32: return "FLOAT32";
        case ValueType::BOOL: return "BOOL";
        case ValueType::STRING: return "STRING";
        case ValueType::ARRAY: return "ARRAY";
        case ValueType::UINT64: return "UINT64";
        case ValueType::INT64: return "INT64";
        case ValueType::FLOAT64: return "FLOAT64";
    }
    return "UNKNOWN";
}

#define HF2Q_SCALAR_CTOR(fn, T, VT, STORE) \
    Value Value::fn(T v) {                 \
        Value r;                           \
        r.type_ = ValueType::VT;           \
        r.scalar_ = STORE(v);              \
        return r;                          \
    }
HF2Q_SCALAR_CTOR(u8, uint8_t, UINT8, uint64_t)
HF2Q_SCALAR_CTOR(i8, int8_t, INT8, int64_t)
HF2Q_SCALAR_CTOR(u16, uint16_t, UINT16, uint64_t)
HF2Q_SCALAR_CTOR(i16, int16_t, INT16, int64_t)
HF2Q_SCALAR_CTOR(u32, uint32_t, UINT32, uint64_t)
HF2Q_SCALAR_CTOR(i32, int32_t, INT32, int64_t)
HF2Q_SCALAR_CTOR(u64, uint64_t, UINT64, uint64_t)
HF2Q_SCALAR_CTOR(i64, int64_t, INT64, int64_t)
HF2Q_SCALAR_CTOR(f32, float, FLOAT32, double)
HF2Q_SCALAR_CTOR(f64, double, FLOAT64, double)
HF2Q_SCALAR_CTOR(boolean, bool, BOOL, bool)
#undef HF2Q_SCALAR_CTOR

Value Value::string(std::string v) {
    Value r;
    r.type_ = ValueType::STRING;
    r.scalar_ = std::move(v);
    return r;
}

Value Value::array(ValueType elem_type, std::vector<Scalar> elems) {
    if (elem_type == ValueType::ARRAY) fail("GGUF arrays of arrays are not supported");
    if (value_type_name(elem_type) == "UNKNOWN")
        fail("unknown GGUF value type ", static_cast<uint32_t>(elem_type));
    if (elem_type == ValueType::STRING) {
        std::vector<std::string> s;
        s.reserve(elems.size());
        for (size_t i = 0; i < elems.size(); ++i) {
            if (!scalar_fits(elem_type, elems[i])) fail("array element ", i, " is not a string");
            s.push_back(std::move(std::get<std::string>(elems[i])));
        }
        return string_array(std::move(s));
    }
    for (size_t i = 0; i < elems.size(); ++i)
        if (!scalar_fits(elem_type, elems[i]))
            fail("array element ", i, " does not hold a ", value_type_name(elem_type), " value");
    Value r;
    r.type_ = ValueType::ARRAY;
    r.elem_type_ = elem_type;
    r.elems_ = std::move(elems);
    return r;
}

Value Value::string_array(std::vector<std::string> v) {
    Value r;
    r.type_ = ValueType::ARRAY;
    r.elem_type_ = ValueType::STRING;
    r.strings_ = std::move(v);
    return r;
}

template <class T, class Store>
static Value make_array(ValueType et, const std::vector<T>& v) {
    std::vector<Value::Scalar> e;
    e.reserve(v.size());
    for (T x : v) e.emplace_back(static_cast<Store>(x));
    return Value::array(et, std::move(e));
}

Value Value::i32_array(const std::vector<int32_t>& v) {
    return make_array<int32_t, int64_t>(ValueType::INT32, v);
}
Value Value::u32_array(const std::vector<uint32_t>& v) {
    return make_array<uint32_t, uint64_t>(ValueType::UINT32, v);
}
Value Value::f32_array(const std::vector<float>& v) {
    return make_array<float, double>(ValueType::FLOAT32, v);
}
Value Value::bool_array(const std::vector<bool>& v) {
    std::vector<Scalar> e;
    e.reserve(v.size());
    for (bool x : v) e.emplace_back(x);
    return array(ValueType::BOOL, std::move(e));
}

uint32_t Value::as_u32(std::string_view what) const {
    if (type_ != ValueType::UINT32) wrong_type(what, *this, "UINT32");
    return static_cast<uint32_t>(std::get<uint64_t>(scalar_));
}
int32_t Value::as_i32(std::string_view what) const {
    if (type_ != ValueType::INT32) wrong_type(what, *this, "INT32");
    return static_cast<int32_t>(std::get<int64_t>(scalar_));
}
uint64_t Value::as_u64(std::string_view what) const {
    if (type_ != ValueType::UINT64) wrong_type(what, *this, "UINT64");
    return std::get<uint64_t>(scalar_);
}
float Value::as_f32(std::string_view what) const {
    if (type_ != ValueType::FLOAT32) wrong_type(what, *this, "FLOAT32");
    return static_cast<float>(std::get<double>(scalar_));
}
bool Value::as_bool(std::string_view what) const {
    if (type_ != ValueType::BOOL) wrong_type(what, *this, "BOOL");
    return std::get<bool>(scalar_);
}
const std::string& Value::as_string(std::string_view what) const {
    if (type_ != ValueType::STRING) wrong_type(what, *this, "STRING");
    return std::get<std::string>(scalar_);
}

std::vector<int64_t> Value::as_int_array(std::string_view what) const {
    if (!is_array() || !(is_unsigned(elem_type_) || is_signed(elem_type_) ||
                         elem_type_ == ValueType::BOOL))
        wrong_type(what, *this, "an array of integers");
    std::vector<int64_t> r;
    r.reserve(elems_.size());
    for (size_t i = 0; i < elems_.size(); ++i) {
        const Scalar& s = elems_[i];
        if (auto* u = std::get_if<uint64_t>(&s)) {
            if (*u > static_cast<uint64_t>(INT64_MAX))
                fail(what, ": element ", i, " (", *u, ") does not fit in int64");
            r.push_back(static_cast<int64_t>(*u));
        } else if (auto* b = std::get_if<bool>(&s)) {
            r.push_back(*b ? 1 : 0);
        } else {
            r.push_back(std::get<int64_t>(s));
        }
    }
    return r;
}

std::vector<float> Value::as_f32_array(std::string_view what) const {
    if (!is_array() || elem_type_ != ValueType::FLOAT32) wrong_type(what, *this, "ARRAY[FLOAT32]");
    std::vector<float> r;
    r.reserve(elems_.size());
    for (const Scalar& s : elems_) r.push_back(static_cast<float>(std::get<double>(s)));
    return r;
}

std::vector<bool> Value::as_bool_array(std::string_view what) const {
    if (!is_array() || elem_type_ != ValueType::BOOL) wrong_type(what, *this, "ARRAY[BOOL]");
    std::vector<bool> r;
    r.reserve(elems_.size());
    for (const Scalar& s : elems_) r.push_back(std::get<bool>(s));
    return r;
}

const std::vector<std::string>& Value::as_string_array(std::string_view what) const {
    if (!is_array() || elem_type_ != ValueType::STRING) wrong_type(what, *this, "ARRAY[STRING]");
    return strings_;
}

bool Value::operator==(const Value& o) const {
    if (type_ != o.type_) return false;
    if (!is_array()) return scalar_equal(scalar_, o.scalar_);
    if (elem_type_ != o.elem_type_ || strings_ != o.strings_ || elems_.size() != o.elems_.size())
        return false;
    for (size_t i = 0; i < elems_.size(); ++i)
        if (!scalar_equal(elems_[i], o.elems_[i])) return false;
    return true;
}

std::string Value::to_display_string(size_t max_elems) const {
    std::string out;
    if (!is_array()) {
        append_scalar(out, type_, scalar_);
        return out;
    }
    const size_t n = array_size();
    const size_t shown = n < max_elems ? n : max_elems;
    out += '[';
    for (size_t i = 0; i < shown; ++i) {
        if (i) out += ", ";
        if (elem_type_ == ValueType::STRING)
            append_escaped(out, strings_[i]);
        else
            append_scalar(out, elem_type_, elems_[i]);
    }
    if (shown < n) out += str_cat(shown ? ", " : "", "... (", n - shown, " more)");
    out += ']';
    return out;
}

}  // namespace hf2q::gguf

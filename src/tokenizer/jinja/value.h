// Runtime values of the Jinja engine, with Python semantics.
//
// A Value is 32 bytes: a kind tag, one scalar slot (bool / int64 / double) and one
// shared pointer to the heap part (string, list, dict, callable, or the hint text of
// an undefined value). Lists and dicts are shared by reference like Python objects,
// which is what makes `namespace()` attribute assignment visible across scopes.
// Dicts keep insertion order, as Python dicts do.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hf2q::jinja {

// A failure inside the evaluator that still lacks a template position; the evaluator
// catches it at the innermost node and rethrows hf2q::Error with "name:line:col: ".
struct EvalError {
    std::string message;
};
[[noreturn]] void eval_fail(std::string message);

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Callable };

struct List;
struct Dict;
struct Callable;
class Interpreter;

class Value {
  public:
    Value() = default;
    static Value undefined(std::string hint = {});
    static Value none();
    static Value boolean(bool b);
    static Value integer(int64_t i);
    static Value number(double f);
    static Value string(std::string s);
    static Value list(std::vector<Value> items, bool tuple = false);
    static Value dict();
    static Value from_dict(std::shared_ptr<Dict> d);
    static Value callable(std::string name,
                          std::function<Value(Interpreter&, struct CallArgs&)> fn);

    Kind kind() const { return kind_; }
    bool is_undefined() const { return kind_ == Kind::Undefined; }
    bool is_none() const { return kind_ == Kind::None; }
    bool is_string() const { return kind_ == Kind::String; }
    bool is_list() const { return kind_ == Kind::List; }
    bool is_dict() const { return kind_ == Kind::Dict; }
    bool is_int() const { return kind_ == Kind::Int; }
    bool is_float() const { return kind_ == Kind::Float; }
    bool is_bool() const { return kind_ == Kind::Bool; }
    bool is_number() const {
        return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool;
    }
    bool is_callable() const { return kind_ == Kind::Callable; }

    bool as_bool() const { return b_; }
    int64_t as_int() const { return kind_ == Kind::Bool ? (b_ ? 1 : 0) : i_; }
    double as_float() const;  // any number
    const std::string& str() const { return *static_cast<const std::string*>(p_.get()); }
    List& list_ref() const { return *static_cast<List*>(p_.get()); }
    Dict& dict_ref() const { return *static_cast<Dict*>(p_.get()); }
    Callable& callable_ref() const { return *static_cast<Callable*>(p_.get()); }
    const std::string& undefined_hint() const;
    bool same_object(const Value& o) const { return p_ && p_ == o.p_; }

    bool truthy() const;
    // Elements reachable from this value (1 for scalars). Plain lists and dicts never
    // change after construction, so the weight bounds the cost of printing, comparing
    // or serialising a value even when sub-lists are shared many times over.
    // Namespace and loop objects are opaque (weight 1): nothing traverses into them,
    // which also keeps reference cycles through namespace attributes harmless.
    uint64_t weight() const;

  private:
    Kind kind_ = Kind::Undefined;
    union {
        int64_t i_ = 0;
        double f_;
        bool b_;
    };
    std::shared_ptr<void> p_;
};

struct List {
    std::vector<Value> items;
    bool tuple = false;
    uint64_t weight = 0;  // items here plus nested inside, saturating; see Value::weight
};

// Plain dicts, namespace() objects and loop objects share one representation; `kind`
// decides how attribute access and assignment behave.
struct Dict {
    enum class Type { Plain, Namespace, Loop };
    Type type = Type::Plain;
    std::vector<std::pair<Value, Value>> items;
    std::unordered_map<std::string, size_t> index;  // hash_key(key) -> position
    uint64_t weight = 0;

    const Value* find(const Value& key) const;
    const Value* find(std::string_view key) const;
    void set(const Value& key, Value v);
    void set(std::string_view key, Value v) { set(Value::string(std::string(key)), std::move(v)); }
};

struct CallArgs {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;

    // Binds positional + keyword arguments to `names`; absent ones are undefined.
    // Throws on unknown keywords or too many positionals, naming `fn`.
    std::vector<Value> bind(std::string_view fn, const std::vector<std::string_view>& names) const;
};

struct Callable {
    std::string name;
    std::function<Value(Interpreter&, CallArgs&)> fn;
};

// Python str() and repr(); throw EvalError once the text exceeds max_bytes.
inline constexpr size_t kDefaultMaxText = 16u << 20;
std::string to_str(const Value& v, size_t max_bytes = kDefaultMaxText);
std::string repr(const Value& v, size_t max_bytes = kDefaultMaxText);
// Python equality, ordering, hashing key.
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);  // <0, 0, >0; throws on unorderable types
std::string hash_key(const Value& v);         // throws on unhashable values
std::string type_name(const Value& v);        // Python type name: 'str', 'dict', ...

// Python float repr: shortest round-trip digits, "1.0", "1e-05", "inf", "nan".
std::string py_float_repr(double d);

}  // namespace hf2q::jinja

// GGUF reader and writer (versions 2 and 3), llama.cpp-compatible.
//
// Reader: the whole file is memory-mapped; metadata is parsed into owned values,
// tensor data is used in place. Nothing in the file is trusted: every count, length,
// offset, shape and type is checked with overflow-safe arithmetic against the file
// size and sane limits; a bad file throws hf2q::Error naming the field and the byte
// offset where it was found.
//
// Writer: streams a file tensor by tensor (the model is never held in memory) into
// a temporary file that is renamed over the destination only by finish(). Layout and
// key types follow llama.cpp's writer (see docs/gguf.md).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "core/ggml_type.h"

namespace hf2q {
class MappedFile;
}

namespace hf2q::gguf {

enum class ValueType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};
std::string_view value_type_name(ValueType t);

// One metadata value. Scalars keep their exact GGUF type; arrays keep their element
// type (arrays of arrays are rejected, as llama.cpp does).
class Value {
public:
    using Scalar = std::variant<uint64_t, int64_t, double, bool, std::string>;

    Value() = default;
    static Value u8(uint8_t v);
    static Value i8(int8_t v);
    static Value u16(uint16_t v);
    static Value i16(int16_t v);
    static Value u32(uint32_t v);
    static Value i32(int32_t v);
    static Value u64(uint64_t v);
    static Value i64(int64_t v);
    static Value f32(float v);
    static Value f64(double v);
    static Value boolean(bool v);
    static Value string(std::string v);
    static Value array(ValueType elem_type, std::vector<Scalar> elems);  // elem_type != ARRAY
    static Value string_array(std::vector<std::string> v);
    static Value i32_array(const std::vector<int32_t>& v);
    static Value u32_array(const std::vector<uint32_t>& v);
    static Value f32_array(const std::vector<float>& v);
    static Value bool_array(const std::vector<bool>& v);

    ValueType type() const { return type_; }
    ValueType elem_type() const { return elem_type_; }  // arrays only
    bool is_array() const { return type_ == ValueType::ARRAY; }
    // Element count of an array (0 for scalars).
    size_t array_size() const {
        return elem_type_ == ValueType::STRING && is_array() ? strings_.size() : elems_.size();
    }

    // Exact-type accessors: throw hf2q::Error "<what> has type X, expected Y" if the
    // stored type differs. `what` names the value in the message (usually the key).
    uint32_t as_u32(std::string_view what) const;
    int32_t as_i32(std::string_view what) const;
    uint64_t as_u64(std::string_view what) const;
    float as_f32(std::string_view what) const;
    bool as_bool(std::string_view what) const;
    const std::string& as_string(std::string_view what) const;
    // Arrays. Integer arrays accept any integer or BOOL element type whose values fit.
    std::vector<int64_t> as_int_array(std::string_view what) const;
    std::vector<float> as_f32_array(std::string_view what) const;  // FLOAT32 elements only
    std::vector<bool> as_bool_array(std::string_view what) const;  // BOOL elements only
    const std::vector<std::string>& as_string_array(std::string_view what) const;

    // Human-readable rendering for `hf2q info` (long arrays abbreviated).
    std::string to_display_string(size_t max_elems = 8) const;

    // Raw access for writers and printers. Scalars: the exact GGUF type decides the
    // alternative (UINT* -> uint64_t, INT* -> int64_t, FLOAT32/FLOAT64 -> double, BOOL,
    // STRING). Arrays of non-strings: elems(); arrays of STRING keep their elements in
    // strings() only (elems() is then empty) so a 262144-token vocabulary is one vector.
    const Scalar& scalar() const { return scalar_; }
    const std::vector<Scalar>& elems() const { return elems_; }
    const std::vector<std::string>& strings() const { return strings_; }

    // Same type and same contents (floats compared bit for bit).
    bool operator==(const Value& o) const;

private:
    ValueType type_ = ValueType::UINT8;
    ValueType elem_type_ = ValueType::UINT8;
    Scalar scalar_;
    std::vector<Scalar> elems_;
    std::vector<std::string> strings_;  // string arrays, kept contiguous for fast access
};

struct KeyValue {
    std::string key;
    Value value;
};

struct TensorInfo {
    std::string name;
    uint32_t n_dims = 0;
    int64_t ne[4] = {1, 1, 1, 1};  // ggml order: ne[0] is contiguous
    GgmlType type = GgmlType::F32;
    uint64_t offset = 0;           // relative to the start of the data blob
    uint64_t nbytes = 0;
    const uint8_t* data = nullptr;  // points into the mapping (reader only)

    // The reader guarantees each ne >= 1 and the product fits in int64.
    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    uint64_t row_bytes() const;  // bytes of one ne[0] row
};

// Limits applied on top of the file-size checks.
struct ReadLimits {
    uint64_t max_string_bytes = 1ull << 30;   // llama.cpp's GGUF_MAX_STRING_LENGTH
    uint64_t max_array_elems = 1ull << 30;    // llama.cpp's GGUF_MAX_ARRAY_ELEMENTS
    uint64_t max_kv_count = 1ull << 20;
    uint64_t max_tensor_count = 1ull << 20;
};

class File {
public:
    // Maps and parses `path`. Throws hf2q::Error on any defect.
    static std::unique_ptr<File> open(const std::string& path, const ReadLimits& limits = {});
    // Parses a buffer the caller keeps alive (tests, fuzzing). `name` is used in errors.
    static std::unique_ptr<File> parse(const uint8_t* data, size_t size, std::string name = "<buffer>",
                                       const ReadLimits& limits = {});
    ~File();

    uint32_t version() const { return version_; }
    uint32_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }  // absolute offset of the data blob
    uint64_t file_size() const { return size_; }
    const std::string& name() const { return name_; }

    const std::vector<KeyValue>& metadata() const { return kv_; }
    const Value* find(std::string_view key) const;
    bool has(std::string_view key) const { return find(key) != nullptr; }
    // Typed getters; errors name the key. The _or variants return `def` when absent
    // but still throw on a wrong type.
    const Value& at(std::string_view key) const;  // throws "missing key"
    uint32_t get_u32(std::string_view key) const { return at(key).as_u32(describe_key(key)); }
    float get_f32(std::string_view key) const { return at(key).as_f32(describe_key(key)); }
    bool get_bool(std::string_view key) const { return at(key).as_bool(describe_key(key)); }
    const std::string& get_string(std::string_view key) const {
        return at(key).as_string(describe_key(key));
    }
    uint32_t get_u32_or(std::string_view key, uint32_t def) const;
    float get_f32_or(std::string_view key, float def) const;
    bool get_bool_or(std::string_view key, bool def) const;
    std::string get_string_or(std::string_view key, std::string def) const;
    // llama.cpp per-layer rule: a scalar u32 is broadcast to n layers; an array must
    // hold exactly n integer (INT32/UINT32/BOOL...) elements.
    std::vector<int64_t> get_per_layer(std::string_view key, size_t n) const;

    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const TensorInfo* find_tensor(std::string_view name) const;

    // "key 'K' in 'file'": how errors about a key name it.
    std::string describe_key(std::string_view key) const;

private:
    File() = default;
    void parse_all(const ReadLimits& limits);

    std::unique_ptr<MappedFile> map_;
    const uint8_t* base_ = nullptr;
    size_t size_ = 0;
    std::string name_;
    uint32_t version_ = 0;
    uint32_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::vector<KeyValue> kv_;
    std::vector<TensorInfo> tensors_;
    std::unordered_map<std::string, size_t> tensor_index_;  // name -> index in tensors_
};

// Streaming writer. Usage:
//   Writer w;  w.set("general.architecture", Value::string("gemma4")); ...
//   w.add_tensor("token_embd.weight", GgmlType::F16, {H, V});  ... (order = file order)
//   w.begin(path);                          // header, metadata, tensor infos
//   for each tensor in order: w.write_tensor_data(bytes, n) (may be called in pieces)
//   w.finish();                             // pads, flushes, renames temp -> path
// If the writer is destroyed before finish() (error, exception), the temporary file is
// removed and `path` is untouched.
class Writer {
public:
    Writer();
    ~Writer();
    Writer(const Writer&) = delete;
    Writer& operator=(const Writer&) = delete;

    // Sets a key; re-setting an existing key replaces its value in place (keeps its
    // position, like gguf-py). remove() deletes it. general.alignment must be u32.
    void set(std::string key, Value v);
    void remove(std::string_view key);
    const std::vector<KeyValue>& metadata() const { return kv_; }

    // Declares the next tensor. ne in ggml order (ne[0] contiguous), 1..4 dims.
    // Throws if the name is a duplicate, >= 64 bytes, or ne[0] is not a multiple of
    // the type's block size.
    void add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne);
    size_t tensor_count() const { return tensors_.size(); }

    // Creates `<path>.tmp-<pid>` and writes header, metadata, tensor infos and the
    // padding up to the data blob. No set()/add_tensor() after this.
    void begin(const std::string& path);
    // Appends bytes of the current tensor (the first not yet complete). One call must
    // not run past the current tensor's declared size; the zero padding after a tensor
    // is written as soon as its last byte arrives.
    void write_tensor_data(const void* data, size_t n);
    // Throws if a tensor is incomplete; flushes, fsyncs and renames the temp to `path`.
    void finish();

private:
    struct PendingTensor {
        std::string name;
        GgmlType type;
        std::vector<int64_t> ne;
        uint64_t nbytes;
    };
    void write_raw(const void* p, size_t n);
    template <class T>
    void put(T v) {  // one little-endian scalar
        write_raw(&v, sizeof v);
    }
    void write_value(const Value& v);
    void write_padding();
    void close_and_remove() noexcept;

    std::vector<KeyValue> kv_;
    std::vector<PendingTensor> tensors_;
    std::unordered_set<std::string> names_;
    std::string path_, tmp_path_;
    int cleanup_slot_ = -1;  // registration of tmp_path_ for removal on interrupt
    std::FILE* fp_ = nullptr;
    uint32_t alignment_ = 32;
    size_t cur_tensor_ = 0;
    uint64_t cur_written_ = 0;
    uint64_t file_pos_ = 0;
    bool finished_ = false;
};

}  // namespace hf2q::gguf

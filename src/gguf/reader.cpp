// gguf::File: validating GGUF v2/v3 parser over a memory map or a caller's buffer.
//
// Every field is bounds-checked before it is read and every count is checked against
// the bytes left in the file before anything is allocated, so a hostile file fails
// fast with a message naming the field and its absolute byte offset.
#include <algorithm>
#include <bit>
#include <cstring>
#include <unordered_set>

#include "core/checked.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "gguf/gguf.h"
#include "gguf/utf8.h"

namespace hf2q::gguf {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF parsing assumes a little-endian host");

constexpr uint64_t kMaxNameBytes = 63;  // GGML_MAX_NAME (64) includes the NUL
constexpr uint32_t kMaxDims = 4;
constexpr uint32_t kLastValueType = 12;
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // key length, type, 1-byte payload
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, ne, type, offset

bool is_removed_ggml_type(uint32_t id) {
    return id == 4 || id == 5 || (id >= 31 && id <= 33) || (id >= 36 && id <= 38);
}

// Smallest encoding of one element of type t (a string is at least its length field).
uint64_t min_payload_bytes(ValueType t) {
    switch (t) {
        case ValueType::UINT8:
        case ValueType::INT8:
        case ValueType::BOOL: return 1;
        case ValueType::UINT16:
        case ValueType::INT16: return 2;
        case ValueType::UINT32:
        case ValueType::INT32:
        case ValueType::FLOAT32: return 4;
        case ValueType::STRING:
        case ValueType::UINT64:
        case ValueType::INT64:
        case ValueType::FLOAT64: return 8;
        case ValueType::ARRAY: return 12;
    }
    return 1;
}

// Cursor over the file bytes. `Ctx` arguments are callables returning the message
// prefix naming the record being read; they run only when a check fails.
class Parser {
public:
    Parser(const uint8_t* p, uint64_t size, const std::string& name, const ReadLimits& lim)
        : p_(p), size_(size), name_(name), lim_(lim) {}

    template <class... A>
    [[noreturn]] void bad(A&&... a) const {
        fail("bad GGUF file '", name_, "': ", std::forward<A>(a)...);
    }

    uint64_t pos() const { return pos_; }
    uint64_t left() const { return size_ - pos_; }
    const ReadLimits& limits() const { return lim_; }

    template <class T, class Ctx>
    T get(const Ctx& ctx, std::string_view field) {
        if (sizeof(T) > left())
            bad(ctx(), field, " at byte ", pos_, " needs ", sizeof(T), " bytes but only ", left(),
                " remain (truncated file)");
        T v;
        std::memcpy(&v, p_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    // A GGUF string: u64 length + bytes, validated as UTF-8. The view points into the file.
    template <class Ctx>
    std::string_view get_str(const Ctx& ctx, std::string_view field) {
        const uint64_t at = pos_;
        const uint64_t len = get<uint64_t>(ctx, field);
        if (len > lim_.max_string_bytes)
            bad(ctx(), field, " at byte ", at, " has length ", len, ", above the limit of ",
                lim_.max_string_bytes);
        if (len > left())
            bad(ctx(), field, " at byte ", at, " has length ", len, " but only ", left(),
                " bytes remain (truncated file)");
        std::string_view s(reinterpret_cast<const char*>(p_ + pos_), len);
        if (!valid_utf8(s)) bad(ctx(), field, " at byte ", at, " is not valid UTF-8");
        pos_ += len;
        return s;
    }

private:
    const uint8_t* p_;
    uint64_t size_;
    uint64_t pos_ = 0;
    const std::string& name_;
    const ReadLimits& lim_;
};

template <class Ctx>
Value::Scalar read_scalar(Parser& ps, ValueType t, const Ctx& ctx) {
    switch (t) {
        case ValueType::UINT8: return uint64_t{ps.get<uint8_t>(ctx, "UINT8 value")};
        case ValueType::INT8: return int64_t{ps.get<int8_t>(ctx, "INT8 value")};
        case ValueType::UINT16: return uint64_t{ps.get<uint16_t>(ctx, "UINT16 value")};
        case ValueType::INT16: return int64_t{ps.get<int16_t>(ctx, "INT16 value")};
        case ValueType::UINT32: return uint64_t{ps.get<uint32_t>(ctx, "UINT32 value")};
        case ValueType::INT32: return int64_t{ps.get<int32_t>(ctx, "INT32 value")};
        case ValueType::FLOAT32: return double{ps.get<float>(ctx, "FLOAT32 value")};
        case ValueType::BOOL: return ps.get<uint8_t>(ctx, "BOOL value") != 0;  // llama.cpp: non-zero is true
        case ValueType::STRING: return std::string(ps.get_str(ctx, "string value"));
        case ValueType::UINT64: return ps.get<uint64_t>(ctx, "UINT64 value");
        case ValueType::INT64: return ps.get<int64_t>(ctx, "INT64 value");
        case ValueType::FLOAT64: return ps.get<double>(ctx, "FLOAT64 value");
        case ValueType::ARRAY: break;
    }
    ps.bad(ctx(), "internal error: read_scalar(ARRAY)");
}

template <class Ctx>
Value read_array(Parser& ps, const Ctx& ctx) {
    const uint64_t at_type = ps.pos();
    const uint32_t et_raw = ps.get<uint32_t>(ctx, "array element type");
    if (et_raw == static_cast<uint32_t>(ValueType::ARRAY))
        ps.bad(ctx(), "array element type ARRAY at byte ", at_type, ": nested arrays are not supported");
    if (et_raw > kLastValueType)
        ps.bad(ctx(), "unknown array element type ", et_raw, " at byte ", at_type);
    const auto et = static_cast<ValueType>(et_raw);
    const uint64_t at_n = ps.pos();
    const uint64_t n = ps.get<uint64_t>(ctx, "array count");
    if (n > ps.limits().max_array_elems)
        ps.bad(ctx(), "array count ", n, " at byte ", at_n, " is above the limit of ",
               ps.limits().max_array_elems);
    if (n > ps.left() / min_payload_bytes(et))
        ps.bad(ctx(), "array count ", n, " at byte ", at_n, " needs at least ", min_payload_bytes(et),
               " bytes per element but only ", ps.left(), " bytes remain (truncated file)");
    if (et == ValueType::STRING) {
        std::vector<std::string> s;
        s.reserve(n);
        for (uint64_t j = 0; j < n; ++j) {
            auto ectx = [&] { return str_cat(ctx(), "element ", j, ": "); };
            s.emplace_back(ps.get_str(ectx, "string value"));
        }
        return Value::string_array(std::move(s));
    }
    std::vector<Value::Scalar> e;
    e.reserve(n);
    for (uint64_t j = 0; j < n; ++j) e.push_back(read_scalar(ps, et, ctx));
    return Value::array(et, std::move(e));
}

template <class Ctx>
Value read_value(Parser& ps, ValueType t, const Ctx& ctx) {
    if (t == ValueType::ARRAY) return read_array(ps, ctx);
    Value::Scalar s = read_scalar(ps, t, ctx);
    switch (t) {
        case ValueType::UINT8: return Value::u8(static_cast<uint8_t>(std::get<uint64_t>(s)));
        case ValueType::INT8: return Value::i8(static_cast<int8_t>(std::get<int64_t>(s)));
        case ValueType::UINT16: return Value::u16(static_cast<uint16_t>(std::get<uint64_t>(s)));
        case ValueType::INT16: return Value::i16(static_cast<int16_t>(std::get<int64_t>(s)));
        case ValueType::UINT32: return Value::u32(static_cast<uint32_t>(std::get<uint64_t>(s)));
        case ValueType::INT32: return Value::i32(static_cast<int32_t>(std::get<int64_t>(s)));
        case ValueType::FLOAT32: return Value::f32(static_cast<float>(std::get<double>(s)));
        case ValueType::BOOL: return Value::boolean(std::get<bool>(s));
        case ValueType::STRING: return Value::string(std::move(std::get<std::string>(s)));
        case ValueType::UINT64: return Value::u64(std::get<uint64_t>(s));
        case ValueType::INT64: return Value::i64(std::get<int64_t>(s));
        case ValueType::FLOAT64: return Value::f64(std::get<double>(s));
        case ValueType::ARRAY: break;
    }
    ps.bad(ctx(), "internal error: read_value");
}

// Reads `n` bytes of count field at the current position; checks limit and that each
// record (at least `min_bytes`) could still fit in the file.
uint64_t read_count(Parser& ps, std::string_view field, uint64_t limit, uint64_t min_bytes) {
    auto ctx = [] { return std::string(); };
    const uint64_t at = ps.pos();
    const uint64_t n = ps.get<uint64_t>(ctx, field);
    if (n > limit) ps.bad(field, " ", n, " at byte ", at, " is above the limit of ", limit);
    if (n > ps.left() / min_bytes)
        ps.bad(field, " ", n, " at byte ", at, " needs at least ", min_bytes, " bytes per record but only ",
               ps.left(), " bytes remain (truncated file)");
    return n;
}

void check_header(Parser& ps, uint32_t& version) {
    auto ctx = [] { return std::string(); };
    const auto magic = ps.get<uint32_t>(ctx, "magic");
    if (magic != 0x46554747u)  // "GGUF" read as little-endian u32
        ps.bad("magic at byte 0 is 0x", std::hex, magic, std::dec, ", expected \"GGUF\" (not a GGUF file)");
    version = ps.get<uint32_t>(ctx, "version");
    if (version == 0) ps.bad("version 0 at byte 4 is invalid");
    if ((version & 0xFFFFu) == 0)
        ps.bad("version 0x", std::hex, version, std::dec,
               " at byte 4 looks like a big-endian GGUF file; only little-endian files are supported");
    if (version == 1) ps.bad("version 1 at byte 4 (GGUF v1) is no longer supported; convert it to v3");
    if (version > 3) ps.bad("version ", version, " at byte 4 is newer than the supported version 3");
}

}  // namespace

uint64_t TensorInfo::row_bytes() const { return ggml_row_size(type, static_cast<uint64_t>(ne[0])).value_or(0); }

File::~File() = default;

std::unique_ptr<File> File::open(const std::string& path, const ReadLimits& limits) {
    std::unique_ptr<File> f(new File());
    f->map_ = std::make_unique<MappedFile>(path);
    f->base_ = f->map_->data();
    f->size_ = f->map_->size();
    f->name_ = path;
    f->parse_all(limits);
    return f;
}

std::unique_ptr<File> File::parse(const uint8_t* data, size_t size, std::string name,
                                  const ReadLimits& limits) {
    std::unique_ptr<File> f(new File());
    f->base_ = data;
    f->size_ = size;
    f->name_ = std::move(name);
    f->parse_all(limits);
    return f;
}

void File::parse_all(const ReadLimits& limits) {
    Parser ps(base_, size_, name_, limits);
    check_header(ps, version_);
    const uint64_t n_tensors = read_count(ps, "tensor_count", limits.max_tensor_count, kMinTensorInfoBytes);
    const uint64_t n_kv = read_count(ps, "kv_count", limits.max_kv_count, kMinKvBytes);

    // Metadata. Keys are string_views into the file bytes, which outlive parsing.
    std::unordered_set<std::string_view> keys;
    kv_.reserve(std::min<uint64_t>(n_kv, 4096));  // a Value is ~100 bytes, a KV record 13+
    for (uint64_t i = 0; i < n_kv; ++i) {
        const uint64_t at_key = ps.pos();
        auto kctx = [&] { return str_cat("key ", i, ": "); };
        const std::string_view key = ps.get_str(kctx, "key");
        auto ctx = [&] { return str_cat("key ", i, " ('", key, "'): "); };
        if (!keys.insert(key).second) ps.bad(ctx(), "duplicate key at byte ", at_key);
        const uint64_t at_type = ps.pos();
        const uint32_t t = ps.get<uint32_t>(ctx, "value type");
        if (t > kLastValueType) ps.bad(ctx(), "unknown value type ", t, " at byte ", at_type);
        Value v = read_value(ps, static_cast<ValueType>(t), ctx);
        if (key == "general.alignment") {
            if (v.type() != ValueType::UINT32)
                ps.bad(ctx(), "type ", value_type_name(v.type()), " at byte ", at_type,
                       " must be UINT32");
            const uint32_t a = v.as_u32(key);
            if (a == 0 || (a & (a - 1)) != 0)
                ps.bad(ctx(), "alignment ", a, " at byte ", at_type + 4, " is not a non-zero power of two");
            alignment_ = a;
        }
        kv_.push_back({std::string(key), std::move(v)});
    }

    // Tensor infos; offsets must follow llama.cpp's dense packing (spec §1.5).
    std::unordered_set<std::string_view> names;
    tensors_.reserve(n_tensors);
    uint64_t cursor = 0;
    for (uint64_t i = 0; i < n_tensors; ++i) {
        const uint64_t at_name = ps.pos();
        auto nctx = [&] { return str_cat("tensor ", i, ": "); };
        const std::string_view name = ps.get_str(nctx, "name");
        if (name.size() > kMaxNameBytes)
            ps.bad("tensor ", i, ": name at byte ", at_name, " is ", name.size(),
                   " bytes long; the limit is ", kMaxNameBytes);
        auto ctx = [&] { return str_cat("tensor ", i, " ('", name, "'): "); };
        if (!names.insert(name).second) ps.bad(ctx(), "duplicate tensor name at byte ", at_name);

        TensorInfo ti;
        ti.name = std::string(name);
        const uint64_t at_dims = ps.pos();
        ti.n_dims = ps.get<uint32_t>(ctx, "n_dims");
        if (ti.n_dims < 1 || ti.n_dims > kMaxDims)
            ps.bad(ctx(), "n_dims ", ti.n_dims, " at byte ", at_dims, " is not in 1..", kMaxDims);
        uint64_t n_elem = 1;
        for (uint32_t j = 0; j < ti.n_dims; ++j) {
            const uint64_t at = ps.pos();
            const auto d = static_cast<int64_t>(ps.get<uint64_t>(ctx, "ne"));
            if (d < 1) ps.bad(ctx(), "ne[", j, "] = ", d, " at byte ", at, " must be >= 1");
            auto prod = checked_mul(n_elem, static_cast<uint64_t>(d));
            if (!prod || *prod > static_cast<uint64_t>(INT64_MAX))
                ps.bad(ctx(), "ne[", j, "] = ", d, " at byte ", at, " makes the element count overflow");
            n_elem = *prod;
            ti.ne[j] = d;
        }
        const uint64_t at_type = ps.pos();
        const uint32_t type_id = ps.get<uint32_t>(ctx, "type");
        const auto traits = ggml_type_traits(type_id);
        if (!traits)
            ps.bad(ctx(), is_removed_ggml_type(type_id) ? "removed" : "unknown", " ggml type id ", type_id,
                   " at byte ", at_type);
        ti.type = static_cast<GgmlType>(type_id);
        const auto row = ggml_row_size(ti.type, static_cast<uint64_t>(ti.ne[0]));
        if (!row)
            ps.bad(ctx(), "ne[0] = ", ti.ne[0], " is not a multiple of the block size ",
                   traits->block_size, " of type ", traits->name);
        const auto nbytes = checked_mul(*row, n_elem / static_cast<uint64_t>(ti.ne[0]));
        if (!nbytes) ps.bad(ctx(), "byte size overflows");
        ti.nbytes = *nbytes;

        const uint64_t at_off = ps.pos();
        ti.offset = ps.get<uint64_t>(ctx, "offset");
        if (ti.offset % alignment_ != 0)
            ps.bad(ctx(), "offset ", ti.offset, " at byte ", at_off, " is not a multiple of the alignment ",
                   alignment_);
        if (ti.offset != cursor)
            ps.bad(ctx(), "offset ", ti.offset, " at byte ", at_off,
                   " does not match the expected dense offset ", cursor);
        const auto end = checked_add(cursor, ti.nbytes);
        const auto next = end ? checked_align_up(*end, alignment_) : std::nullopt;
        if (!next) ps.bad(ctx(), "data end overflows");
        cursor = *next;
        tensors_.push_back(std::move(ti));
    }

    // Data blob: starts at the next multiple of the alignment (absolute offset).
    data_offset_ = *checked_align_up(ps.pos(), alignment_);  // pos <= size < 2^63
    for (size_t i = 0; i < tensors_.size(); ++i) {
        TensorInfo& ti = tensors_[i];
        const auto begin = checked_add(data_offset_, ti.offset);
        const auto end = begin ? checked_add(*begin, ti.nbytes) : std::nullopt;
        if (!end || *end > size_)
            ps.bad("tensor ", i, " ('", ti.name, "'): data at bytes [", begin.value_or(UINT64_MAX), ", ",
                   end.value_or(UINT64_MAX), ") extends past the end of the file (", size_, " bytes)");
        ti.data = base_ + *begin;
        tensor_index_.emplace(ti.name, i);
    }
}

const Value* File::find(std::string_view key) const {
    for (const auto& kv : kv_)
        if (kv.key == key) return &kv.value;
    return nullptr;
}

std::string File::describe_key(std::string_view key) const { return str_cat("key '", key, "' in '", name_, "'"); }

const Value& File::at(std::string_view key) const {
    const Value* v = find(key);
    if (!v) fail("'", name_, "': missing key '", key, "'");
    return *v;
}

uint32_t File::get_u32_or(std::string_view key, uint32_t def) const {
    const Value* v = find(key);
    return v ? v->as_u32(describe_key(key)) : def;
}
float File::get_f32_or(std::string_view key, float def) const {
    const Value* v = find(key);
    return v ? v->as_f32(describe_key(key)) : def;
}
bool File::get_bool_or(std::string_view key, bool def) const {
    const Value* v = find(key);
    return v ? v->as_bool(describe_key(key)) : def;
}
std::string File::get_string_or(std::string_view key, std::string def) const {
    const Value* v = find(key);
    return v ? v->as_string(describe_key(key)) : def;
}

std::vector<int64_t> File::get_per_layer(std::string_view key, size_t n) const {
    const Value& v = at(key);
    if (!v.is_array()) return std::vector<int64_t>(n, v.as_u32(describe_key(key)));
    auto r = v.as_int_array(describe_key(key));
    if (r.size() != n)
        fail(describe_key(key), " has ", r.size(), " elements, expected one per layer (", n, ")");
    return r;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(std::string(name));
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace hf2q::gguf

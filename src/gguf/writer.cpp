// gguf::Writer: streaming GGUF v3 writer with llama.cpp's dense, padded layout.
//
// Layout: header, metadata, tensor infos, zero padding to the alignment, then each
// tensor's bytes followed by zero padding to the alignment (the last tensor too).
// Offsets are dense: off[0] = 0, off[i+1] = off[i] + pad(nbytes[i]).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/checked.h"
#include "core/error.h"
#include "core/interrupt_cleanup.h"
#include "gguf/gguf.h"
#include "gguf/utf8.h"

namespace hf2q::gguf {
namespace {

constexpr uint32_t kVersion = 3;
constexpr uint32_t kDefaultAlignment = 32;
constexpr size_t kMaxNameBytes = 63;

void check_value_utf8(const std::string& key, const Value& v) {
    if (v.type() == ValueType::STRING && !valid_utf8(std::get<std::string>(v.scalar())))
        fail("GGUF key '", key, "': string value is not valid UTF-8");
    const auto& s = v.strings();
    for (size_t i = 0; i < s.size(); ++i)
        if (!valid_utf8(s[i])) fail("GGUF key '", key, "': array element ", i, " is not valid UTF-8");
}

uint32_t check_alignment(const Value& v) {
    if (v.type() != ValueType::UINT32) fail("GGUF key 'general.alignment' must be UINT32");
    const uint32_t a = v.as_u32("general.alignment");
    if (a == 0 || (a & (a - 1)) != 0)
        fail("GGUF key 'general.alignment' = ", a, " is not a non-zero power of two");
    return a;
}

}  // namespace

Writer::Writer() = default;

Writer::~Writer() {
    if (!finished_) close_and_remove();
}

void Writer::close_and_remove() noexcept {
    if (fp_) std::fclose(fp_);
    fp_ = nullptr;
    if (!tmp_path_.empty()) ::unlink(tmp_path_.c_str());
    release_temp_file(cleanup_slot_);
    cleanup_slot_ = -1;
}

void Writer::set(std::string key, Value v) {
    if (fp_ || finished_) fail("gguf::Writer: set('", key, "') after begin()");
    if (!valid_utf8(key)) fail("GGUF key '", key, "' is not valid UTF-8");
    check_value_utf8(key, v);
    if (key == "general.alignment") alignment_ = check_alignment(v);
    for (auto& kv : kv_) {
        if (kv.key == key) {
            kv.value = std::move(v);
            return;
        }
    }
    kv_.push_back({std::move(key), std::move(v)});
}

void Writer::remove(std::string_view key) {
    if (fp_ || finished_) fail("gguf::Writer: remove('", key, "') after begin()");
    std::erase_if(kv_, [&](const KeyValue& kv) { return kv.key == key; });
    if (key == "general.alignment") alignment_ = kDefaultAlignment;
}

void Writer::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne) {
    if (fp_ || finished_) fail("gguf::Writer: add_tensor('", name, "') after begin()");
    if (name.size() > kMaxNameBytes)
        fail("tensor name '", name, "' is ", name.size(), " bytes long; GGUF allows at most ", kMaxNameBytes);
    if (!valid_utf8(name)) fail("tensor name '", name, "' is not valid UTF-8");
    if (!names_.insert(name).second) fail("duplicate tensor name '", name, "'");
    if (ne.empty() || ne.size() > 4) {
        names_.erase(name);
        fail("tensor '", name, "': ", ne.size(), " dimensions, expected 1..4");
    }
    uint64_t rows = 1;
    for (size_t j = 0; j < ne.size(); ++j) {
        auto p = ne[j] >= 1 ? checked_mul(j ? rows : 1, static_cast<uint64_t>(ne[j])) : std::nullopt;
        if (!p || *p > static_cast<uint64_t>(INT64_MAX)) {
            names_.erase(name);
            fail("tensor '", name, "': bad dimension ne[", j, "] = ", ne[j]);
        }
        if (j) rows = *p;
    }
    const auto row = ggml_row_size(type, static_cast<uint64_t>(ne[0]));
    const auto nbytes = row ? checked_mul(*row, rows) : std::nullopt;
    if (!nbytes) {
        names_.erase(name);
        fail("tensor '", name, "': ne[0] = ", ne[0], " is not a multiple of the block size ",
             ggml_traits(type).block_size, " of type ", ggml_type_name(type));
    }
    tensors_.push_back({std::move(name), type, std::move(ne), *nbytes});
}

void Writer::write_raw(const void* p, size_t n) {
    if (n == 0) return;
    if (std::fwrite(p, 1, n, fp_) != n)
        fail("cannot write '", tmp_path_, "': ", std::strerror(errno));
    file_pos_ += n;
}

void Writer::write_padding() {
    static constexpr uint8_t kZeros[256] = {};
    uint64_t pad = *checked_align_up(file_pos_, alignment_) - file_pos_;
    while (pad > 0) {
        const size_t k = pad < sizeof kZeros ? static_cast<size_t>(pad) : sizeof kZeros;
        write_raw(kZeros, k);
        pad -= k;
    }
}

void Writer::write_value(const Value& v) {
    auto scalar = [&](ValueType t, const Value::Scalar& s) {
        switch (t) {
            case ValueType::UINT8: put(static_cast<uint8_t>(std::get<uint64_t>(s))); break;
            case ValueType::INT8: put(static_cast<int8_t>(std::get<int64_t>(s))); break;
            case ValueType::UINT16: put(static_cast<uint16_t>(std::get<uint64_t>(s))); break;
            case ValueType::INT16: put(static_cast<int16_t>(std::get<int64_t>(s))); break;
            case ValueType::UINT32: put(static_cast<uint32_t>(std::get<uint64_t>(s))); break;
            case ValueType::INT32: put(static_cast<int32_t>(std::get<int64_t>(s))); break;
            case ValueType::FLOAT32: put(static_cast<float>(std::get<double>(s))); break;
            case ValueType::BOOL: put(static_cast<uint8_t>(std::get<bool>(s) ? 1 : 0)); break;
            case ValueType::STRING: {
                const auto& str = std::get<std::string>(s);
                put(static_cast<uint64_t>(str.size()));
                write_raw(str.data(), str.size());
                break;
            }
            case ValueType::UINT64: put(std::get<uint64_t>(s)); break;
            case ValueType::INT64: put(std::get<int64_t>(s)); break;
            case ValueType::FLOAT64: put(std::get<double>(s)); break;
            case ValueType::ARRAY: HF2Q_ASSERT(false);
        }
    };
    put(static_cast<uint32_t>(v.type()));
    if (!v.is_array()) {
        scalar(v.type(), v.scalar());
        return;
    }
    put(static_cast<uint32_t>(v.elem_type()));
    put(static_cast<uint64_t>(v.array_size()));
    for (const auto& s : v.strings()) {
        put(static_cast<uint64_t>(s.size()));
        write_raw(s.data(), s.size());
    }
    for (const auto& e : v.elems()) scalar(v.elem_type(), e);
}

void Writer::begin(const std::string& path) {
    if (fp_ || finished_) fail("gguf::Writer: begin() called twice");
    path_ = path;
    tmp_path_ = str_cat(path, ".tmp-", ::getpid());
    fp_ = std::fopen(tmp_path_.c_str(), "wb");
    if (!fp_) {
        const int e = errno;
        tmp_path_.clear();  // nothing to remove
        fail("cannot create '", path, ".tmp-", ::getpid(), "': ", std::strerror(e));
    }
    cleanup_slot_ = register_temp_file(tmp_path_);  // removed on Ctrl-C too
    std::setvbuf(fp_, nullptr, _IOFBF, 1 << 20);
    file_pos_ = 0;
    write_raw("GGUF", 4);
    put(kVersion);
    put(static_cast<uint64_t>(tensors_.size()));
    put(static_cast<uint64_t>(kv_.size()));
    for (const auto& kv : kv_) {
        put(static_cast<uint64_t>(kv.key.size()));
        write_raw(kv.key.data(), kv.key.size());
        write_value(kv.value);
    }
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
        put(static_cast<uint64_t>(t.name.size()));
        write_raw(t.name.data(), t.name.size());
        put(static_cast<uint32_t>(t.ne.size()));
        for (int64_t d : t.ne) put(static_cast<uint64_t>(d));
        put(static_cast<uint32_t>(t.type));
        put(offset);
        const auto next = checked_add(offset, t.nbytes);
        const auto padded = next ? checked_align_up(*next, alignment_) : std::nullopt;
        if (!padded) fail("GGUF data size overflows at tensor '", t.name, "'");
        offset = *padded;
    }
    write_padding();
    cur_tensor_ = 0;
    cur_written_ = 0;
}

void Writer::write_tensor_data(const void* data, size_t n) {
    if (!fp_) fail("gguf::Writer: write_tensor_data() outside begin()..finish()");
    if (cur_tensor_ >= tensors_.size())
        fail("gguf::Writer: ", n, " bytes of tensor data after all ", tensors_.size(),
             " tensors were complete");
    const PendingTensor& t = tensors_[cur_tensor_];
    if (n > t.nbytes - cur_written_)
        fail("gguf::Writer: tensor ", cur_tensor_, " ('", t.name, "'): ", n,
             " more bytes would exceed its declared size of ", t.nbytes, " bytes (", cur_written_,
             " already written)");
    write_raw(data, n);
    cur_written_ += n;
    if (cur_written_ == t.nbytes) {
        write_padding();
        ++cur_tensor_;
        cur_written_ = 0;
    }
}

void Writer::finish() {
    if (!fp_) fail("gguf::Writer: finish() without begin()");
    if (cur_tensor_ < tensors_.size())
        fail("gguf::Writer: tensor ", cur_tensor_, " ('", tensors_[cur_tensor_].name, "') has ",
             cur_written_, " of its ", tensors_[cur_tensor_].nbytes, " bytes; ",
             tensors_.size() - cur_tensor_, " of ", tensors_.size(), " tensors are incomplete");
    if (std::fflush(fp_) != 0 || ::fsync(::fileno(fp_)) != 0)
        fail("cannot flush '", tmp_path_, "': ", std::strerror(errno));
    const int rc = std::fclose(fp_);
    fp_ = nullptr;
    if (rc != 0) fail("cannot close '", tmp_path_, "': ", std::strerror(errno));
    if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0)
        fail("cannot rename '", tmp_path_, "' to '", path_, "': ", std::strerror(errno));
    finished_ = true;
    release_temp_file(cleanup_slot_);
    cleanup_slot_ = -1;
    // Make the rename durable too; failure here leaves a complete file, so it is ignored.
    const auto slash = path_.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash));
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

}  // namespace hf2q::gguf

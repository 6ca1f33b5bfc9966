// safetensors reader: the header is parsed and validated, tensor data is used in
// place through a memory map.
//
// File layout: u64 little-endian header length N, N bytes of JSON, then the data
// section. The JSON object maps tensor names to {"dtype", "shape", "data_offsets":
// [begin, end]} with offsets relative to the data section; "__metadata__" (free-form
// strings) is skipped. Nothing is trusted: the header length, every offset, shape and
// byte count is checked with overflow-safe arithmetic, ranges may not overlap and names
// must be unique. Errors name the file and, where it applies, the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hf2q {
class MappedFile;
}

namespace hf2q::convert {

// Element types the converter reads. Other safetensors dtypes are rejected by name.
enum class StDtype { F32, F16, BF16 };
std::string_view st_dtype_name(StDtype t);
size_t st_dtype_size(StDtype t);

struct StTensor {
    std::string name;
    StDtype dtype = StDtype::F32;
    std::vector<int64_t> shape;     // row-major (PyTorch order); empty for a scalar
    uint64_t begin = 0, end = 0;    // byte range within the data section
    const uint8_t* data = nullptr;  // begin of the tensor's bytes (caller keeps the buffer)

    uint64_t nbytes() const { return end - begin; }
    uint64_t n_elements() const;
};

// Header sanity limit (safetensors' own reader uses the same bound).
inline constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;

// Parses and validates a whole safetensors image [data, data + size). Tensors are
// returned sorted by name. `name` is used in error messages.
std::vector<StTensor> parse_safetensors(const uint8_t* data, size_t size, const std::string& name);

// One memory-mapped safetensors file.
class SafetensorsFile {
  public:
    explicit SafetensorsFile(const std::string& path);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::string& path() const { return path_; }
    const std::vector<StTensor>& tensors() const { return tensors_; }  // sorted by name
    const StTensor* find(std::string_view name) const;

  private:
    std::string path_;
    std::unique_ptr<MappedFile> map_;
    std::vector<StTensor> tensors_;
};

// All safetensors files of a Hugging Face model directory. With
// model.safetensors.index.json, exactly the shards its weight_map names are opened and
// every tensor must sit in the shard the map names; without it, every *.safetensors
// file of the directory is opened (normally the single model.safetensors). Shards are
// kept in file-name order; a tensor name may appear only once.
class Checkpoint {
  public:
    struct Entry {
        const StTensor* tensor;
        size_t shard;  // index into shards()
    };

    static std::unique_ptr<Checkpoint> open(const std::string& dir);

    const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }
    // Every tensor: shards in file-name order, names sorted inside a shard.
    const std::vector<Entry>& tensors() const { return entries_; }

  private:
    Checkpoint() = default;
    std::vector<std::unique_ptr<SafetensorsFile>> shards_;
    std::vector<Entry> entries_;
};

}  // namespace hf2q::convert

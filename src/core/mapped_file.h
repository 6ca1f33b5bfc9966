// Read-only memory map of a whole file. Tensor data in GGUF and safetensors files is
// used in place through this map; nothing is copied at load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hf2q {

class MappedFile {
public:
    // Throws hf2q::Error naming the path and the OS error.
    explicit MappedFile(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }

private:
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace hf2q

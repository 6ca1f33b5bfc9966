// Helpers for the GGUF tests: a byte builder for hand-made files and temp paths.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace hf2q::gguf::testing {

// Little-endian byte builder with named positions ("marks") for patching fields.
class Builder {
public:
    std::vector<uint8_t> bytes;
    std::map<std::string, size_t> marks;

    Builder& mark(const std::string& name) {
        marks[name] = bytes.size();
        return *this;
    }
    template <class T>
    Builder& put(T v) {
        uint8_t b[sizeof(T)];
        std::memcpy(b, &v, sizeof v);
        bytes.insert(bytes.end(), b, b + sizeof b);
        return *this;
    }
    Builder& u32(uint32_t v) { return put(v); }
    Builder& u64(uint64_t v) { return put(v); }
    Builder& str(std::string_view s) {
        u64(s.size());
        bytes.insert(bytes.end(), s.begin(), s.end());
        return *this;
    }
    Builder& pad(size_t align) {
        while (bytes.size() % align) bytes.push_back(0);
        return *this;
    }
    Builder& zeros(size_t n) {
        bytes.insert(bytes.end(), n, 0);
        return *this;
    }
    size_t at(const std::string& name) const { return marks.at(name); }
    template <class T>
    void patch(const std::string& name, T v, size_t extra = 0) {
        std::memcpy(bytes.data() + marks.at(name) + extra, &v, sizeof v);
    }
};

// A unique path in the test temp folder; the folder is removed by the destructor.
class TempDir {
public:
    TempDir() {
        static int counter = 0;
        path_ = std::filesystem::temp_directory_path() /
                ("hf2q_gguf_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    std::string file(const std::string& name) const { return (path_ / name).string(); }
    size_t n_entries() const {
        return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(path_),
                                                 std::filesystem::directory_iterator()));
    }

private:
    std::filesystem::path path_;
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace hf2q::gguf::testing

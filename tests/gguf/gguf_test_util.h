// Helpers for the GGUF tests: a byte builder for hand-made files and temp paths.
#pragma once

#include "support/temp_dir.h"
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

using TempDir = hf2q::test::TempDir;

inline std::vector<uint8_t> read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace hf2q::gguf::testing

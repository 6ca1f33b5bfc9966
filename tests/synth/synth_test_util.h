// Shared by the synth/quantize tests: a fresh directory per test, removed after it,
// and whole-file reads for byte comparisons.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace hf2q::synth_test {

struct TempDir {
    std::filesystem::path path;
    explicit TempDir(const std::string& prefix) {
        path = std::filesystem::temp_directory_path() /
               (prefix + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        std::filesystem::create_directories(path);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
};

inline std::string read_all(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace hf2q::synth_test

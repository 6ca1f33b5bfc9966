// Shared by the synth/quantize tests: a fresh directory per test, removed after it,
// and whole-file reads for byte comparisons.
#pragma once

#include "support/temp_dir.h"
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace hf2q::synth_test {

using hf2q::test::TempDir;

inline std::string read_all(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace hf2q::synth_test

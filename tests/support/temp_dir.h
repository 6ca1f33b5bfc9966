// A fresh, empty directory for one test, shared by every test area that writes files
// (GGUF, safetensors, tokenizer files, synthesized models).
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <iterator>
#include <string>
#include <string_view>

namespace hf2q::test {

// A new directory under the system's temp folder, named hf2q_<tag>_<pid>_<n> (unique
// to this process and object), removed with everything in it by the destructor.
class TempDir {
  public:
    explicit TempDir(std::string_view tag = "test") {
        static std::atomic<int> counter{0};
        path_ = std::filesystem::temp_directory_path() /
                ("hf2q_" + std::string(tag) + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    const std::filesystem::path& path() const { return path_; }
    std::string file(std::string_view name) const { return (path_ / name).string(); }
    size_t n_entries() const {
        return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(path_),
                                                 std::filesystem::directory_iterator()));
    }

  private:
    std::filesystem::path path_;
};

}  // namespace hf2q::test

// A one-line progress bar with rate and ETA on stderr, for long work (convert,
// quantize, load). It draws only when stderr is a terminal; otherwise it prints a
// line at start and at finish so logs stay readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace hf2q {

class Progress {
public:
    // total: units of work (bytes, tensors); unit: label shown after the counts.
    Progress(std::string label, uint64_t total, std::string unit = "B", bool enabled = true);
    ~Progress();
    void add(uint64_t done);  // thread-safe
    void finish();

private:
    void draw(bool final_line);

    std::string label_, unit_;
    uint64_t total_, done_ = 0;
    bool enabled_, tty_, finished_ = false;
    std::chrono::steady_clock::time_point start_, last_draw_;
    std::mutex mu_;
};

// "1.23 GiB" style formatting of a byte count.
std::string format_bytes(uint64_t n);

}  // namespace hf2q

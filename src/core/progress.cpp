#include "core/progress.h"

#include <unistd.h>

#include <cstdio>

namespace hf2q {

std::string format_bytes(uint64_t n) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(n);
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
    return buf;
}

Progress::Progress(std::string label, uint64_t total, std::string unit, bool enabled)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), enabled_(enabled) {
    tty_ = ::isatty(STDERR_FILENO) != 0;
    start_ = last_draw_ = std::chrono::steady_clock::now();
    if (enabled_ && !tty_) std::fprintf(stderr, "%s ...\n", label_.c_str());
}

Progress::~Progress() { finish(); }

static std::string format_amount(uint64_t v, const std::string& unit) {
    if (unit == "B") return format_bytes(v);
    return std::to_string(v) + " " + unit;
}

void Progress::draw(bool final_line) {
    using namespace std::chrono;
    double secs = duration<double>(steady_clock::now() - start_).count();
    double frac = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
    double eta = (frac > 0 && frac < 1) ? secs / frac - secs : 0.0;
    if (tty_) {
        const int width = 30;
        int filled = static_cast<int>(frac * width);
        std::string bar(filled, '=');
        if (filled < width) bar += '>' + std::string(width - filled - 1, ' ');
        std::fprintf(stderr, "\r%s [%s] %3.0f%% %s / %s  %.1fs elapsed, ETA %.0fs   ",
                     label_.c_str(), bar.c_str(), frac * 100, format_amount(done_, unit_).c_str(),
                     format_amount(total_, unit_).c_str(), secs, eta);
        if (final_line) std::fprintf(stderr, "\n");
    } else if (final_line) {
        std::fprintf(stderr, "%s done: %s in %.1fs\n", label_.c_str(),
                     format_amount(done_, unit_).c_str(), secs);
    }
    std::fflush(stderr);
}

void Progress::add(uint64_t done) {
    if (!enabled_) return;
    std::lock_guard<std::mutex> lk(mu_);
    done_ += done;
    auto now = std::chrono::steady_clock::now();
    if (tty_ && now - last_draw_ > std::chrono::milliseconds(100)) {
        last_draw_ = now;
        draw(false);
    }
}

void Progress::finish() {
    if (!enabled_) return;
    std::lock_guard<std::mutex> lk(mu_);
    if (finished_) return;
    finished_ = true;
    draw(true);
}

}  // namespace hf2q

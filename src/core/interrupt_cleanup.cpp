#include "core/interrupt_cleanup.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace hf2q {
namespace {

constexpr int kSlots = 16;
constexpr size_t kPathMax = 4096;

char g_paths[kSlots][kPathMax];
std::atomic<bool> g_used[kSlots];
std::mutex g_mutex;  // registration only; never taken in the handler

extern "C" void on_interrupt(int sig) {
    for (int i = 0; i < kSlots; ++i)
        if (g_used[i].load(std::memory_order_acquire)) ::unlink(g_paths[i]);
    ::signal(sig, SIG_DFL);  // so the exit status still says which signal stopped us
    ::raise(sig);
}

}  // namespace

void install_interrupt_cleanup() {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
}

int register_temp_file(const std::string& path) {
    if (path.empty() || path.size() >= kPathMax) return -1;
    std::lock_guard<std::mutex> lock(g_mutex);
    for (int i = 0; i < kSlots; ++i) {
        if (g_used[i].load(std::memory_order_relaxed)) continue;
        std::memcpy(g_paths[i], path.c_str(), path.size() + 1);
        g_used[i].store(true, std::memory_order_release);
        return i;
    }
    return -1;
}

void release_temp_file(int slot) {
    if (slot < 0 || slot >= kSlots) return;
    std::lock_guard<std::mutex> lock(g_mutex);
    g_used[slot].store(false, std::memory_order_release);
}

}  // namespace hf2q

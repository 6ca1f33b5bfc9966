// A fixed pool of worker threads with a blocking parallel_for.
//
// The CPU backend splits work on rows or heads; each call blocks until every chunk
// is done, so callers need no other synchronisation.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hf2q {

class ThreadPool {
public:
    // n_threads <= 0 means hardware concurrency. The caller's thread takes part, so
    // n_threads - 1 workers are started.
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    // Calls fn(begin, end, thread_index) over [0, n) split into contiguous chunks of at
    // least `grain` items. thread_index < size().
    void parallel_for(int64_t n, int64_t grain,
                      const std::function<void(int64_t, int64_t, int)>& fn);

private:
    void worker_loop(int index);
    void run_chunks(int thread_index);

    int n_threads_ = 1;
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable cv_start_, cv_done_;
    uint64_t generation_ = 0;
    int pending_ = 0;
    bool stop_ = false;
    // Current job.
    const std::function<void(int64_t, int64_t, int)>* fn_ = nullptr;
    int64_t n_ = 0, chunk_ = 0, n_chunks_ = 0;
    std::atomic<int64_t>* next_ = nullptr;
};

}  // namespace hf2q

#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>

namespace hf2q {

ThreadPool::ThreadPool(int n_threads) {
    if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    n_threads_ = n_threads;
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_start_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(int thread_index) {
    for (;;) {
        int64_t c = next_->fetch_add(1);
        if (c >= n_chunks_) break;
        int64_t b = c * chunk_;
        int64_t e = std::min(n_, b + chunk_);
        (*fn_)(b, e, thread_index);
    }
}

void ThreadPool::worker_loop(int index) {
    uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_start_.wait(lk, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
        }
        run_chunks(index);
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (--pending_ == 0) cv_done_.notify_one();
        }
    }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t, int)>& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(1, grain);
    // A few chunks per thread balance uneven work without much contention.
    int64_t chunk = std::max(grain, (n + n_threads_ * 4 - 1) / (n_threads_ * 4));
    int64_t n_chunks = (n + chunk - 1) / chunk;
    if (n_threads_ == 1 || n_chunks == 1) {
        for (int64_t b = 0; b < n; b += chunk) fn(b, std::min(n, b + chunk), 0);
        return;
    }
    std::atomic<int64_t> next{0};
    {
        std::lock_guard<std::mutex> lk(mu_);
        fn_ = &fn;
        n_ = n;
        chunk_ = chunk;
        n_chunks_ = n_chunks;
        next_ = &next;
        pending_ = static_cast<int>(workers_.size());
        ++generation_;
    }
    cv_start_.notify_all();
    run_chunks(0);
    std::unique_lock<std::mutex> lk(mu_);
    cv_done_.wait(lk, [&] { return pending_ == 0; });
}

}  // namespace hf2q

// Sampling ops (ops/sampling.h): argmax and top-k over rows of logits, threaded over
// rows. One sequential scan per row in index order keeps the first of equal maxima,
// the same rule as runtime::argmax; top-k keeps a k-entry heap ordered as the host
// sampler's top-k stage orders its candidates (larger value, then lower index). The
// results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_ops.h"

namespace hf2q::cpu {
namespace {

constexpr int64_t kScanGrain = 65536;  // values per parallel_for chunk

int32_t argmax_row(const float* x, int64_t n) {
    float best = -std::numeric_limits<float>::infinity();
    int64_t best_i = -1;
    bool nan = false;
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        if (v > best) {
            best = v;
            best_i = i;
        } else if (std::isnan(v)) {
            nan = true;
        }
    }
    if (nan) return ops::kArgmaxNaN;
    if (best == std::numeric_limits<float>::infinity()) return ops::kArgmaxPosInf;
    if (best_i < 0) return ops::kArgmaxAllNegInf;
    return static_cast<int32_t>(best_i);
}

struct Entry {
    float v;
    int32_t i;
};

// a ranks above b: the larger value, then the lower index (-0.0 == +0.0).
bool above(const Entry& a, const Entry& b) {
    return a.v > b.v || (a.v == b.v && a.i < b.i);
}

// Row r of topk_rows into ids / values (k entries) and its status; `heap` is scratch.
int32_t topk_row(const float* x, int64_t n, int32_t k, int32_t* ids, float* values, std::vector<Entry>& heap) {
    constexpr float kInf = std::numeric_limits<float>::infinity();
    heap.clear();
    bool nan = false, pos_inf = false;
    for (int64_t j = 0; j < n; ++j) {
        const float v = x[j];
        if (!(v > -kInf)) {
            nan = nan || std::isnan(v);
            continue;
        }
        pos_inf = pos_inf || v == kInf;
        const Entry e{v, static_cast<int32_t>(j)};
        if (heap.size() < static_cast<size_t>(k)) {  // the heap's front is its lowest entry
            heap.push_back(e);
            std::push_heap(heap.begin(), heap.end(), above);
        } else if (above(e, heap.front())) {
            std::pop_heap(heap.begin(), heap.end(), above);
            heap.back() = e;
            std::push_heap(heap.begin(), heap.end(), above);
        }
    }
    std::sort_heap(heap.begin(), heap.end(), above);
    for (int32_t t = 0; t < k; ++t) {
        const bool real = static_cast<size_t>(t) < heap.size();
        ids[t] = real ? heap[static_cast<size_t>(t)].i : -1;
        values[t] = real ? heap[static_cast<size_t>(t)].v : -kInf;
    }
    if (nan) return ops::kArgmaxNaN;
    if (pos_inf) return ops::kArgmaxPosInf;
    if (heap.empty()) return ops::kArgmaxAllNegInf;
    return static_cast<int32_t>(heap.size());
}

}  // namespace

void topk_rows(Context& c, const ops::TopkRowsParams& p) {
    if (!ops::check_topk_rows(p)) return;
    const int64_t stride = p.stride != 0 ? p.stride : p.n;
    c.pool.parallel_for(p.rows, std::max<int64_t>(1, kScanGrain / p.n), [&](int64_t r0, int64_t r1, int) {
        std::vector<Entry> heap;
        heap.reserve(static_cast<size_t>(p.k));
        for (int64_t r = r0; r < r1; ++r)
            p.status[r] = topk_row(p.x + r * stride, p.n, p.k, p.ids + r * p.k, p.values + r * p.k, heap);
    });
}

void argmax_rows(Context& c, const ops::ArgmaxRowsParams& p) {
    if (!ops::check_argmax_rows(p)) return;
    const int64_t stride = ops::argmax_stride(p);
    c.pool.parallel_for(p.rows, std::max<int64_t>(1, kScanGrain / p.n),
                        [&](int64_t r0, int64_t r1, int) {
                            for (int64_t r = r0; r < r1; ++r) {
                                p.out[r] = argmax_row(p.x + r * stride, p.n);
                                if (p.host_out) p.host_out[r] = p.out[r];
                            }
                        });
}

}  // namespace hf2q::cpu

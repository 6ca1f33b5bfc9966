// Sampling ops (ops/sampling.h): argmax over rows of logits, threaded over rows.
// One sequential scan per row in index order keeps the first of equal maxima, the
// same rule as runtime::argmax; the result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>

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

}  // namespace

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

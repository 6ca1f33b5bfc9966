// RMSNorm over rows of n floats (Gemma 4: weight used as w, not 1 + w).
//   y = x · (mean(x²) + eps)^(−1/2) [· w]          (w == nullptr: weightless)
//   y = add_to + x · (mean(x²) + eps)^(−1/2) · w    (fused residual add)
// The sum of squares is accumulated sequentially in double (exact enough that the
// f32 mean is correctly rounded for any realistic n); everything after the mean is f32
// in the order transformers uses: (x · r) · w, then the residual add.
#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_ops.h"
#include "core/error.h"

namespace hf2q::cpu {
namespace {

void norm_row(const ops::RmsNormParams& p, int64_t r) {
    const int64_t n = p.n;
    const float* x = p.x + r * n;
    const float* w = p.w;
    const float* res = p.add_to ? p.add_to + r * n : nullptr;
    float* y = p.y + r * n;

    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    const float mean = static_cast<float>(ss / static_cast<double>(n));
    const float inv = 1.0f / std::sqrt(mean + p.eps);

    // y may alias x or add_to: each element is read before it is written.
    if (w == nullptr && res == nullptr) {
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv;
    } else if (res == nullptr) {
        for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * inv) * w[i];
    } else if (w == nullptr) {
        for (int64_t i = 0; i < n; ++i) y[i] = res[i] + x[i] * inv;
    } else {
        for (int64_t i = 0; i < n; ++i) y[i] = res[i] + (x[i] * inv) * w[i];
    }
    if (p.out_scale != 1.0f)
        for (int64_t i = 0; i < n; ++i) y[i] *= p.out_scale;
    if (p.rope_inv_freq != nullptr) {  // the arithmetic of cpu::rope, one head
        const int64_t half = n / 2;
        const float pf = static_cast<float>(p.rope_pos[r / p.rope_heads]);
        for (int64_t k = 0; k < half; ++k) {
            const float a = pf * p.rope_inv_freq[k];
            const float cs = std::cos(a), sn = std::sin(a);
            const float x0 = y[k], x1 = y[k + half];
            y[k] = x0 * cs - x1 * sn;
            y[k + half] = x1 * cs + x0 * sn;
        }
    }
}

}  // namespace

void rms_norm(Context& c, const ops::RmsNormParams& p) {
    if (p.rows == 0) return;
    HF2Q_ASSERT(p.rows > 0 && p.n > 0 && p.x != nullptr && p.y != nullptr);
    HF2Q_ASSERT(p.rope_inv_freq == nullptr ||
                (p.rope_pos != nullptr && p.rope_heads > 0 && p.n % 2 == 0 && p.add_to == nullptr && p.out_scale == 1.0f));
    const int64_t grain = std::max<int64_t>(1, 8192 / p.n);
    c.pool.parallel_for(p.rows, grain, [&](int64_t r0, int64_t r1, int) {
        for (int64_t r = r0; r < r1; ++r) norm_row(p, r);
    });
}

}  // namespace hf2q::cpu

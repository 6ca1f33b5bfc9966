// NeoX ("rotate-half") RoPE in place on x [n_tokens][n_heads][head_dim]: pairs
// (k, k + d/2), angle p · inv_freq[k] in f32, cosf/sinf. A token's cos/sin table
// (d/2 each) is built once in the worker's scratch and shared by all its heads.
#include <cmath>

#include "backends/cpu/cpu_ops.h"
#include "core/error.h"

namespace hf2q::cpu {

void rope(Context& c, const ops::RopeParams& p) {
    if (p.n_tokens == 0) return;
    HF2Q_ASSERT(p.n_tokens > 0 && p.n_heads > 0 && p.head_dim > 0 && p.head_dim % 2 == 0);
    HF2Q_ASSERT(p.x != nullptr && p.pos != nullptr && p.inv_freq != nullptr);
    const int64_t half = p.head_dim / 2;
    c.scratch.reserve(2 * half);
    c.pool.parallel_for(p.n_tokens, 1, [&](int64_t t0, int64_t t1, int th) {
        float* cs = c.scratch.get(th);  // [half] cos
        float* sn = cs + half;          // [half] sin
        for (int64_t t = t0; t < t1; ++t) {
            const float pf = static_cast<float>(p.pos[t]);
            for (int64_t k = 0; k < half; ++k) {
                const float a = pf * p.inv_freq[k];
                cs[k] = std::cos(a);
                sn[k] = std::sin(a);
            }
            for (int64_t h = 0; h < p.n_heads; ++h) {
                float* v = p.x + (t * p.n_heads + h) * p.head_dim;
                for (int64_t k = 0; k < half; ++k) {
                    const float x0 = v[k], x1 = v[k + half];
                    v[k] = x0 * cs[k] - x1 * sn[k];
                    v[k + half] = x1 * cs[k] + x0 * sn[k];
                }
            }
        }
    });
}

}  // namespace hf2q::cpu

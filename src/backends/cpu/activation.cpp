// Element-wise ops: GeGLU (gelu_tanh(gate) · up) and the add/scale/mul/softcap helpers.
// gelu_tanh follows PyTorch's scalar CPU kernel for approximate="tanh" in f32:
//   inner = β · (u + κ · u³), β = √2 · (2/√π) · 0.5 = √(2/π), κ = 0.044715
//   gelu  = (0.5 · u) · (1 + tanh(inner))
#include <algorithm>
#include <cmath>
#include <numbers>

#include "backends/cpu/cpu_ops.h"
#include "core/error.h"

namespace hf2q::cpu {
namespace {

constexpr int64_t kElemGrain = 16384;  // element-wise work per chunk

inline float gelu_tanh(float u) {
    // M_SQRT2 · M_2_SQRTPI · 0.5 in double, as PyTorch writes it, then rounded to f32.
    constexpr float kBeta =
        static_cast<float>(std::numbers::sqrt2 * (2.0 * std::numbers::inv_sqrtpi) * 0.5);
    constexpr float kKappa = 0.044715f;
    const float u3 = u * u * u;
    const float inner = kBeta * (u + kKappa * u3);
    return 0.5f * u * (1.0f + std::tanh(inner));
}

// Runs fn(i0, i1) over [0, n) in chunks; a no-op for n == 0.
template <class Fn>
void for_range(Context& c, int64_t n, const Fn& fn) {
    if (n == 0) return;
    HF2Q_ASSERT(n > 0);
    c.pool.parallel_for(n, kElemGrain, [&](int64_t i0, int64_t i1, int) { fn(i0, i1); });
}

}  // namespace

void geglu(Context& c, const ops::GegluParams& p) {
    if (p.rows == 0) return;
    HF2Q_ASSERT(p.rows > 0 && p.n > 0 && p.gate != nullptr && p.out != nullptr);
    const int64_t gs = p.gate_stride ? p.gate_stride : p.n;
    const int64_t us = p.up_stride ? p.up_stride : p.n;
    const int64_t os = p.out_stride ? p.out_stride : p.n;
    HF2Q_ASSERT(gs >= p.n && us >= p.n && os >= p.n);
    const int64_t grain = std::max<int64_t>(1, kElemGrain / p.n);
    c.pool.parallel_for(p.rows, grain, [&](int64_t r0, int64_t r1, int) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* g = p.gate + r * gs;
            float* o = p.out + r * os;
            if (p.up == nullptr) {
                for (int64_t i = 0; i < p.n; ++i) o[i] = gelu_tanh(g[i]);
            } else {
                const float* u = p.up + r * us;
                for (int64_t i = 0; i < p.n; ++i) o[i] = gelu_tanh(g[i]) * u[i];
            }
        }
    });
}

void add(Context& c, const float* a, const float* b, float* y, int64_t n) {
    for_range(c, n, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) y[i] = a[i] + b[i];
    });
}

void scale(Context& c, float* x, float s, int64_t n) {
    for_range(c, n, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) x[i] *= s;
    });
}

void mul(Context& c, const float* a, const float* b, float* y, int64_t n) {
    for_range(c, n, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) y[i] = a[i] * b[i];
    });
}

void softcap(Context& c, float* x, float cap, int64_t n) {
    HF2Q_ASSERT(n == 0 || cap > 0.0f);
    for_range(c, n, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) x[i] = cap * std::tanh(x[i] / cap);
    });
}

}  // namespace hf2q::cpu

// RMSNorm over the last axis: y = x / sqrt(mean(x²) + eps) [* w], computed in f32.
// Gemma 4 multiplies by w, not (1 + w). Optional fused residual / scale variants
// are separate params so each call says exactly what it computes.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "ops/moe.h"
#include "ops/prepared.h"

namespace hf2q::ops {

struct RmsNormParams {
    const float* x = nullptr;  // [rows][n]
    const float* w = nullptr;  // [n] or nullptr for the weightless variant
    float* y = nullptr;        // [rows][n]; may alias x
    int64_t rows = 0;
    int64_t n = 0;
    float eps = 1e-6f;
    // If add_to is set: y = add_to + norm(x)·w (residual add fused), y may alias add_to.
    const float* add_to = nullptr;  // [rows][n]
    // Then y ·= out_scale (a separate rounding, as a following scale op would do).
    float out_scale = 1.0f;
    // If rope_inv_freq is set (no add_to, out_scale 1): each row is a head of token
    // row / rope_heads and is rotated after the norm as ops/rope.h describes, with
    // n the head dim. Fuses the head norm and RoPE of q and k into one pass.
    const float* rope_inv_freq = nullptr;  // [n / 2]
    const int32_t* rope_pos = nullptr;     // [rows / rope_heads]
    int64_t rope_heads = 0;
};

// The norms around Gemma 4's residual stream in one op: a residual update by a
// normed branch, then the norms of the updated rows that the following blocks read
// (e.g. the attention block's post-norm + residual, then the MLP's, router's and
// experts' input norms; or a layer's post-MLP norms, the layer scalar, and the next
// layer's input norm). Per row of n values, each step rounded as its RmsNormParams
// counterpart (x·inv, ·w, + residual, ·scale):
//   one branch:   h = rmsnorm(b0; w0)
//   two branches: h = rmsnorm(rmsnorm(b0; w0) + rmsnorm(b1; w1); sum_w)
//   x = (x + h) · scale
//   y[j] = rmsnorm(x; out_w[j]) · out_scale[j]   for j < n_out
// With `combine` (two branches; combine->out == b1), b1 is first the experts'
// weighted combine (ops/moe.h), so the MoE layer's combine joins the same pass.
// Backend::residual_norms' default runs exactly that sequence of ops (so b0 and b1
// are clobbered: scratch); a device backend does it in one pass.
struct ResidualNormsParams {
    static constexpr int kMaxOut = 3;
    float* x = nullptr;  // [rows][n] the residual stream, updated in place
    int64_t rows = 0;
    int64_t n = 0;
    float eps = 1e-6f;
    int n_branch = 1;                            // 1 or 2
    float* b[2] = {nullptr, nullptr};            // [rows][n] branch outputs (clobbered)
    const float* w[2] = {nullptr, nullptr};      // [n] their norm weights
    const float* sum_w = nullptr;                // [n] norm of the branch sum (two branches only)
    const MoeCombineParams* combine = nullptr;   // optional: b[1] = this combine (see above)
    float scale = 1.0f;                          // the layer scalar
    int n_out = 0;                               // 0 .. kMaxOut
    float* y[kMaxOut] = {nullptr, nullptr, nullptr};        // [rows][n]; distinct from x and b
    const float* out_w[kMaxOut] = {nullptr, nullptr, nullptr};  // [n] or nullptr (no weight)
    float out_scale[kMaxOut] = {1.0f, 1.0f, 1.0f};
    void* y_prep[kMaxOut] = {nullptr, nullptr, nullptr};  // optional: y[j] prepared (ops/prepared.h)
    void* y_bf16[kMaxOut] = {nullptr, nullptr, nullptr};  // optional: y[j]'s BF16 rows (ops/prepared.h)
};

inline void check_residual_norms(const ResidualNormsParams& p) {
    HF2Q_ASSERT(p.x != nullptr && p.rows >= 0 && p.n > 0);
    HF2Q_ASSERT(p.n_branch == 1 || p.n_branch == 2);
    for (int k = 0; k < p.n_branch; ++k) HF2Q_ASSERT(p.b[k] != nullptr && p.w[k] != nullptr);
    HF2Q_ASSERT((p.n_branch == 2) == (p.sum_w != nullptr));
    if (p.combine != nullptr) {
        const MoeCombineParams& c = *p.combine;
        HF2Q_ASSERT(p.n_branch == 2 && c.out == p.b[1] && c.n == p.n && c.n_tokens == p.rows && c.k > 0);
        HF2Q_ASSERT(c.out_stride == p.n);
        HF2Q_ASSERT(c.y != nullptr && c.slot_of != nullptr && c.weights != nullptr);
    }
    HF2Q_ASSERT(p.n_out >= 0 && p.n_out <= ResidualNormsParams::kMaxOut);
    for (int j = 0; j < p.n_out; ++j) HF2Q_ASSERT(p.y[j] != nullptr && p.y[j] != p.x);
}

}  // namespace hf2q::ops

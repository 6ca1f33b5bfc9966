// RMSNorm over the last axis: y = x / sqrt(mean(x²) + eps) [* w], computed in f32.
// Gemma 4 multiplies by w, not (1 + w). Optional fused residual / scale variants
// are separate params so each call says exactly what it computes.
#pragma once

#include <cstdint>

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

}  // namespace hf2q::ops

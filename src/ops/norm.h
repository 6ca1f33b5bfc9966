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
};

}  // namespace hf2q::ops

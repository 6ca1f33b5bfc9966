// Linear layer on block-format weights: y[t][o] = Σ_i x[t][i] · W[o][i], f32
// accumulation, W used in its stored format (never expanded to a full f32 copy).
#pragma once

#include <cstdint>

#include "ops/prepared.h"
#include "ops/types.h"

namespace hf2q::ops {

struct MatmulParams {
    WeightView w;               // n_out × n_in
    const float* x = nullptr;   // [n_tokens][x_stride], first n_in used
    float* y = nullptr;         // [n_tokens][y_stride], first n_out written
    int64_t n_tokens = 0;
    int64_t x_stride = 0;       // 0 means n_in
    int64_t y_stride = 0;       // 0 means n_out
    const void* x_prep = nullptr;  // optional: x in the backend's prepared form (ops/prepared.h)
    const void* x_bf16 = nullptr;  // optional: x's rows in BF16 (ops/prepared.h)
};

// Several linear layers on one input: y[i] = x · w[i]ᵀ for i < n, every w[i] with the
// same n_in (attention q/k/v, an MLP's gate and up). The result is that of n separate
// matmuls; a device backend prepares x once (quantized or converted) and may cover
// several weights with one launch.
struct MultiMatmulParams {
    static constexpr int kMax = 3;
    WeightView w[kMax];
    float* y[kMax] = {};
    int64_t y_stride[kMax] = {};  // 0 means that weight's n_out
    int n = 0;                    // weights used, 1 .. kMax
    const float* x = nullptr;     // [n_tokens][x_stride]
    int64_t n_tokens = 0;
    int64_t x_stride = 0;         // 0 means n_in
    const void* x_prep = nullptr; // optional: x prepared (ops/prepared.h)
    const void* x_bf16 = nullptr; // optional: x's rows in BF16 (ops/prepared.h)
};

// Whether the weights' BF16 copies lie back to back in this order (Backend::
// batch_layouts), one n_in: a matmul_multi over them whose outputs' columns also lie
// back to back (y[i] = y[0] + the earlier n_outs, one row stride) may run as one
// product over the joint rows. False for fewer than two weights.
inline bool back_to_back_batch_layouts(const WeightView* const* w, int n) {
    if (n < 2 || w[0]->batch_layout == nullptr) return false;
    const auto* base = static_cast<const uint16_t*>(w[0]->batch_layout);
    int64_t rows = 0;
    for (int i = 0; i < n; ++i) {
        if (w[i]->n_in != w[0]->n_in || w[i]->batch_layout != base + rows * w[0]->n_in) return false;
        rows += w[i]->n_out;
    }
    return true;
}

// Row gather of an embedding table: out[t] = dequant(W[ids[t]]) · scale.
struct GetRowsParams {
    WeightView w;               // n_out rows (vocabulary) × n_in (width)
    const int32_t* ids = nullptr;  // [n_tokens], each in [0, n_out)
    float* out = nullptr;       // [n_tokens][n_in]
    int64_t n_tokens = 0;
    float scale = 1.0f;
};

}  // namespace hf2q::ops

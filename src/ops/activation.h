// Element-wise ops.
#pragma once

#include <cstdint>

#include "ops/prepared.h"

namespace hf2q::ops {

// out[i] = gelu_tanh(gate[i]) · up[i] over rows; gate/up/out rows have the given
// strides (so a fused [gate | up] projection can be used in place).
// gelu_tanh(u) = 0.5·u·(1 + tanh(√(2/π)·(u + 0.044715·u³)))
struct GegluParams {
    const float* gate = nullptr;
    const float* up = nullptr;  // nullptr: out = gelu_tanh(gate)
    float* out = nullptr;
    int64_t rows = 0;
    int64_t n = 0;
    int64_t gate_stride = 0, up_stride = 0, out_stride = 0;  // 0 means n
    void* out_prep = nullptr;  // optional: also out in the backend's prepared form (ops/prepared.h)
    void* out_bf16 = nullptr;  // optional: also out's BF16 rows (ops/prepared.h)
};

// GEGLU over the rows of a fused gate_up product (each row n gate values, then n up
// values) into out, rows of n: out[r] = gelu_tanh(gu[r][0..n)) ⊙ gu[r][n..2n).
inline GegluParams gate_up_geglu(const float* gu, float* out, int64_t rows, int64_t n) {
    GegluParams g;
    g.gate = gu;
    g.up = gu + n;
    g.out = out;
    g.rows = rows;
    g.n = n;
    g.gate_stride = g.up_stride = 2 * n;
    return g;
}

}  // namespace hf2q::ops

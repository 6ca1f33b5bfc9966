// NeoX ("rotate-half") rotary embedding, in place.
// For head vector x of length d at position p, with k in [0, d/2):
//   a = p · inv_freq[k] (f32), c = cos a, s = sin a
//   x'[k]       = x[k]·c − x[k + d/2]·s
//   x'[k + d/2] = x[k + d/2]·c + x[k]·s
// Proportional RoPE (Gemma 4 full layers) is expressed by inv_freq[k] = 0 for the
// pairs that do not rotate.
#pragma once

#include <cstdint>

namespace hf2q::ops {

struct RopeParams {
    float* x = nullptr;              // [n_tokens][n_heads][head_dim], rotated in place
    const int32_t* pos = nullptr;    // [n_tokens]
    const float* inv_freq = nullptr; // [head_dim / 2]
    int64_t n_tokens = 0;
    int64_t n_heads = 0;
    int64_t head_dim = 0;            // even
};

}  // namespace hf2q::ops

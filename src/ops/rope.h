// NeoX ("rotate-half") rotary embedding, in place.
// For head vector x of length d at position p, with k in [0, d/2):
//   a = p · inv_freq[k] (f32), c = cos a, s = sin a
//   x'[k]       = x[k]·c − x[k + d/2]·s
//   x'[k + d/2] = x[k + d/2]·c + x[k]·s
// Proportional RoPE (Gemma 4 full layers) is expressed by inv_freq[k] = 0 for the
// pairs that do not rotate.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "ops/attention.h"

namespace hf2q::ops {

struct RopeParams {
    float* x = nullptr;              // [n_tokens][n_heads][head_dim], rotated in place
    const int32_t* pos = nullptr;    // [n_tokens]
    const float* inv_freq = nullptr; // [head_dim / 2]
    int64_t n_tokens = 0;
    int64_t n_heads = 0;
    int64_t head_dim = 0;            // even
};

// A layer's attention inputs from its raw q/k/v projections, in one op (each step
// rounded as the RmsNormParams / KvStoreParams it replaces):
//   q[t][h] = rope(rmsnorm(q[t][h]; q_w))                      in place, every layer
// and on layers that own a KV cache (store):
//   k̂ = rope(rmsnorm(k[t][h]; k_w)),  v̂ = rmsnorm(v_src[t][h])  (no weight),
//   v_src = v, or the raw k on K=V layers (v_from_k),
//   k̂ and v̂ written to each token's slot of the KV pools (ops/gather.h KvStoreParams).
// k and v are scratch: their contents afterwards are unspecified (Backend's default,
// the op sequence, leaves k̂ and v̂ in them).
//
// Sources (q_src): the raw projections may instead come from one buffer of rows of
// src_stride floats, token t's q heads at q_src + t·src_stride, its k and v heads at
// k_src / v_src + t·src_stride (one matmul over q/k/v's concatenated weights writes
// them so). Then q receives q̂ (out of place, packed) and k, v are packed scratch;
// the sources are read only and must not overlap q, k or v.
struct AttentionInputsParams {
    float* q = nullptr;          // [n_tokens][n_heads][head_dim]
    const float* q_src = nullptr;  // null: q, k and v themselves (packed, in place)
    const float* k_src = nullptr;
    const float* v_src = nullptr;
    int64_t src_stride = 0;        // floats from one token's source row to the next
    const float* q_w = nullptr;  // [head_dim] or nullptr
    int64_t n_heads = 0;
    int64_t n_tokens = 0;
    int64_t head_dim = 0;        // even
    float eps = 1e-6f;
    const float* rope_inv_freq = nullptr;  // [head_dim / 2]
    const int32_t* pos = nullptr;          // [n_tokens]
    bool store = false;
    float* k = nullptr;          // [n_tokens][n_kv_heads][head_dim]
    const float* k_w = nullptr;  // [head_dim] or nullptr
    float* v = nullptr;          // [n_tokens][n_kv_heads][head_dim]; with v_from_k, scratch only
    bool v_from_k = false;
    int64_t n_kv_heads = 0;
    void* k_pool = nullptr;  // elements of kv_type (ops/attention.h)
    void* v_pool = nullptr;
    KvType kv_type = KvType::f32;
    int64_t block_size = 0;
    const int32_t* const* tables = nullptr;  // [n_tokens]
    float* k_scale = nullptr;  // i8 pools: the row scales (ops/attention.h)
    float* v_scale = nullptr;
};

inline void check_attention_inputs(const AttentionInputsParams& p) {
    HF2Q_ASSERT(p.q != nullptr && p.n_heads > 0 && p.n_tokens >= 0 && p.head_dim > 0 && p.head_dim % 2 == 0);
    HF2Q_ASSERT(p.rope_inv_freq != nullptr && p.pos != nullptr);
    if (p.q_src != nullptr) {
        HF2Q_ASSERT(p.src_stride >= p.n_heads * p.head_dim);
        HF2Q_ASSERT(!p.store || (p.k_src != nullptr && (p.v_from_k || p.v_src != nullptr) &&
                                 p.src_stride >= p.n_kv_heads * p.head_dim));
    }
    if (!p.store) return;
    HF2Q_ASSERT(p.k != nullptr && p.v != nullptr && p.n_kv_heads > 0 && p.k_pool != nullptr && p.v_pool != nullptr);
    HF2Q_ASSERT(p.block_size > 0 && p.tables != nullptr);
    HF2Q_ASSERT(!kv_type_scaled(p.kv_type) || (p.k_scale != nullptr && p.v_scale != nullptr));
}

}  // namespace hf2q::ops

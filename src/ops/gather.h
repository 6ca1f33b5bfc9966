// Row movement ops: gather rows into a dense buffer, weighted scatter-add back,
// and writes into the paged KV cache (layout in ops/attention.h).
#pragma once

#include <cstdint>

#include "ops/attention.h"

namespace hf2q::ops {

// dst[i][0..n) = src[rows[i]][0..n)
struct GatherRowsParams {
    const float* src = nullptr;
    int64_t src_stride = 0;  // floats between source rows
    float* dst = nullptr;
    int64_t dst_stride = 0;
    const int32_t* rows = nullptr;  // [n_rows]
    int64_t n_rows = 0;
    int64_t n = 0;
};

// dst[rows[i]][j] += weights[i] · src[i][j], applied in increasing i (deterministic).
struct ScatterAddParams {
    const float* src = nullptr;  // [n_rows][src_stride]
    int64_t src_stride = 0;
    float* dst = nullptr;
    int64_t dst_stride = 0;
    const int32_t* rows = nullptr;     // [n_rows]
    const float* weights = nullptr;    // [n_rows]
    int64_t n_rows = 0;
    int64_t n = 0;
};

// Writes K and V rows of n_tokens tokens into the cache pools at their positions:
// pool row of position p = tables[t][p / block_size] · block_size + p % block_size,
// each pool row holding `row` values (n_kv_heads · head_dim) of kv_type
// (ops/attention.h: f16 pools get the values rounded to nearest even; i8 pools get
// each head_dim-value row's codes, and its scale in k_scale / v_scale).
struct KvStoreParams {
    const float* k = nullptr;  // [n_tokens][row]
    const float* v = nullptr;  // [n_tokens][row]
    void* k_pool = nullptr;
    void* v_pool = nullptr;
    KvType kv_type = KvType::f32;
    int64_t row = 0;
    int64_t block_size = 0;
    const int32_t* pos = nullptr;            // [n_tokens]
    const int32_t* const* tables = nullptr;  // [n_tokens]
    int64_t n_tokens = 0;
    int64_t head_dim = 0;        // values per scaled row (i8; divides row)
    float* k_scale = nullptr;    // i8: [pool rows · row / head_dim]
    float* v_scale = nullptr;
};

// Copies whole blocks inside one pool: pool[dst[i]] = pool[src[i]] (copy on write).
struct CopyBlocksParams {
    void* pool = nullptr;
    int64_t block_bytes = 0;  // block_size · row · kv_type_bytes
    const int32_t* src = nullptr;
    const int32_t* dst = nullptr;
    int64_t n = 0;
};

}  // namespace hf2q::ops

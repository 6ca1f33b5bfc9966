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
// pool slot of position p = tables[t][p / block_size] · block_size + p % block_size,
// each slot holding `row` values (n_kv_heads · head_dim) of kv_type, each head's
// head_dim values where ops::kv_pool_index puts them
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
    int64_t head_dim = 0;        // values per head's row (divides row)
    float* k_scale = nullptr;    // i8: [pool rows · row / head_dim]
    float* v_scale = nullptr;
};

// The token ids a batch embeds when some of them are the previous step's greedy picks,
// still on the backend (hf2q::kPreviousArgmax): out[t] = tokens[t] where from[t] < 0,
// else ids[from[t]], an id outside [0, n_vocab) (an ops::argmax_rows error code)
// replaced by 0 so the step stays in bounds; the host reports that error when it
// reads the id, and the step that took it is dropped.
struct FeedTokensParams {
    const int32_t* tokens = nullptr;  // [n] ids given by the host
    const int32_t* from = nullptr;    // [n] row of ids, or -1
    const int32_t* ids = nullptr;     // the previous step's argmax_rows output
    int32_t* out = nullptr;           // [n]
    int64_t n = 0;
    int64_t n_vocab = 0;
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

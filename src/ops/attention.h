// Attention of a flat batch of query tokens over a paged KV cache.
//
// KV pool layout (one pool per cached layer):
//   k_pool, v_pool: [n_blocks][block_size][n_kv_heads][head_dim] of KvType: f32,
//   IEEE half (f16, llama.cpp's default cache type: half the memory and the bytes
//   that decode reads), or FP8 E4M3 (e4m3: a quarter; 3 mantissa bits, largest
//   finite 448, no scale, as vLLM's fp8 cache with its default scale of 1: Gemma 4's
//   K and V leave their RMS norms near unit size). Values are rounded once, when
//   stored (round to nearest even; e4m3 saturates to ±448, as the hardware's
//   satfinite conversion; the same on every backend); attention reads them back
//   exactly and computes in f32 as for an f32 cache holding the rounded values.
//   Or int8 with a scale per row (i8: the bytes of e4m3, llama.cpp's q8_0 kind of
//   cache with one scale per (position, KV head) row instead of per 32 values): a
//   row x of head_dim values is stored as codes c = rint(x / d), |c| ≤ 127, with
//   d = max|x| / 127 (quant::quantize_row_i8) in k_scale / v_scale, indexed like
//   the rows: [n_blocks][block_size][n_kv_heads]. Its rounding is at most d / 2,
//   1/254 of the row's largest value. Attention computes as for an f32 cache holding
//   c · d, except that d is applied to the score (K) and to the softmax weight (V)
//   rather than to each value, so results match that cache to rounding, not bits.
// A sequence's block table maps logical block b (positions b·block_size ...) to a
// physical block id, or −1 when the block was released (sliding layers).
//
// Query token t at absolute position p = pos[t] of sequence with table tables[t]
// attends keys at positions j with lo ≤ j ≤ p, where lo = 0 for full attention and
// lo = max(0, p − window + 1) for a sliding window (p − j < window). Every such key
// must already be in the cache. Scores are s = scale · ⟨q, k⟩ (Gemma 4: scale 1.0),
// softmax in f32 (online, blockwise: memory stays O(head_dim) per query head), GQA:
// query head h reads KV head h / (n_heads / n_kv_heads).
#pragma once

#include <cstdint>

namespace hf2q::ops {

enum class KvType : uint8_t { f32, f16, e4m3, i8 };

// Bytes of one pool element.
constexpr int64_t kv_type_bytes(KvType t) {
    return t == KvType::f16 ? 2 : (t == KvType::e4m3 || t == KvType::i8) ? 1 : 4;
}
// Whether pools of type t come with a scale per row (k_scale, v_scale).
constexpr bool kv_type_scaled(KvType t) { return t == KvType::i8; }
// Bytes of one cached (position, KV head) row of head_dim values, scale included.
constexpr int64_t kv_row_bytes(KvType t, int64_t head_dim) {
    return head_dim * kv_type_bytes(t) + (kv_type_scaled(t) ? 4 : 0);
}

// Where a block's rows lie: [block_size][n_kv_heads][head_dim], so one head's rows are
// n_kv_heads · head_dim values apart (256-byte runs for an i8 pool at head size 256), and
// the i8 scales [n_blocks][block_size][n_kv_heads]. Every kernel and test finds rows
// through these functions, so the order is stated once. Session 48 measured the
// head-major order ([n_kv_heads][block_size][head_dim], one head's rows contiguous) on an
// H100 and it gave nothing: the warp kernel's memory pipeline alone 95.5 -> 96.7 us, a
// 64-sequence step int8 5,151 -> 5,162, fp8 5,197 -> 5,195, f16 4,316 -> 4,285 tokens/s
// (docs/performance.md).

// Index of the first value of the row of KV head kvh at slot s of physical block `block`
// (kv_row = n_kv_heads · head_dim values a position); an i8 pool's scale of that row is at
// kv_scale_index(block, s, kvh, block_size, n_kv_heads) = kv_pool_index(...) / head_dim
// (the CUDA kernels find a row's scale so).
constexpr int64_t kv_pool_index(int64_t block, int64_t s, int64_t kvh, int64_t block_size, int64_t kv_row,
                                int64_t head_dim) {
    return (block * block_size + s) * kv_row + kvh * head_dim;
}
constexpr int64_t kv_scale_index(int64_t block, int64_t s, int64_t kvh, int64_t block_size, int64_t n_kv_heads) {
    return (block * block_size + s) * n_kv_heads + kvh;
}
// Index of value i (< kv_row: head i / head_dim, its value i % head_dim) of slot s of
// physical block `block`: a position's K or V row as the projections give it, placed.
constexpr int64_t kv_value_index(int64_t block, int64_t s, int64_t i, int64_t block_size, int64_t kv_row,
                                 int64_t head_dim) {
    return kv_pool_index(block, s, i / head_dim, block_size, kv_row, head_dim) + i % head_dim;
}

struct AttentionParams {
    const float* q = nullptr;     // [n_tokens][n_heads][head_dim]
    float* out = nullptr;         // [n_tokens][n_heads][head_dim]
    int64_t n_tokens = 0;
    int64_t n_heads = 0;
    int64_t n_kv_heads = 0;
    int64_t head_dim = 0;
    const void* k_pool = nullptr;  // elements of kv_type (below)
    const void* v_pool = nullptr;
    int64_t block_size = 0;
    const int32_t* pos = nullptr;                // [n_tokens]
    const int32_t* const* tables = nullptr;      // [n_tokens] → block table of its sequence
    const int32_t* table_len = nullptr;          // [n_tokens] entries in that table
    int32_t window = 0;                          // 0: full attention
    float scale = 1.0f;
    int64_t n_blocks = 0;                        // blocks in each pool; 0: ids not range-checked
    // Host-side bound on the positions of this batch: every pos[t] < max_keys, or 0
    // when unknown. Only sizes the work (device backends split the key range by it);
    // a result never depends on it beyond rounding, and a wrong bound stays correct.
    int64_t max_keys = 0;
    // Host-side promise, given for batches in which every sequence has one token
    // (decode): the keys before each token's position were stored by earlier batches,
    // so only the key at pos[t] comes from this batch's own KV store. A device backend
    // may then fetch the earlier keys before that store has finished (CUDA: before the
    // wait on the previous kernel), and need not look for runs of one sequence's
    // consecutive tokens (there are none). false promises nothing; results never
    // depend on it.
    bool earlier_keys_stored = false;
    KvType kv_type = KvType::f32;  // element type of k_pool and v_pool
    // Optional, in batches the prepared contract allows: out's rows (n_tokens rows of
    // n_heads·head_dim values) also in the backend's prepared form (ops/prepared.h).
    void* out_prep = nullptr;
    // Optional, in batches whose matmuls read BF16 rows (Backend::reads_bf16_rows):
    // out's rows also rounded to BF16 (ops/prepared.h), for the output projection.
    void* out_bf16 = nullptr;
    // i8 pools: the scale of each row (layout above); nullptr for the other types.
    const float* k_scale = nullptr;
    const float* v_scale = nullptr;
};

}  // namespace hf2q::ops

// Attention of a flat batch of query tokens over a paged KV cache (layout and mask in
// ops/attention.h).
//
// One work item is a (token, query head) pair; items are independent, so threads take
// contiguous ranges of them. An item walks its sequence's logical blocks that overlap
// [lo, p] through the block table (blocks wholly below lo, e.g. released sliding
// blocks, are never touched) with a blockwise online softmax in f32:
//   scores of the block's keys → block max bm; if bm > m: rescale l and acc by
//   exp(m − bm), m = bm; then l += e_j, acc += e_j · v_j with e_j = exp(s_j − m).
// Per worker memory: block_size scores + head_dim accumulator (its scratch). An f16
// cache is read by the same dot_f32 / axpy_f32 (cpu_ops.h), which convert each
// value exactly in the loop, so it computes as an f32 cache holding the rounded values.
// An item reads only its own q row before writing its own out row, so out may alias q.
// Block ids are validated before the parallel region (a bad id is a bug in the caller's
// KV bookkeeping), so workers never throw.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cpu/cpu_ops.h"
#include "core/error.h"
#include "quant/quant.h"

namespace hf2q::cpu {

// quant::e4m3_to_fp32 of every code, once (cpu_ops.h).
E4m3Table::E4m3Table() {
    for (int c = 0; c < 256; ++c) v[c] = quant::e4m3_to_fp32(static_cast<uint8_t>(c));
}

namespace {

// Lowest key position visible to a query at position p.
int64_t window_lo(int64_t p, int32_t window) {
    return window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
}

void check_tables(const ops::AttentionParams& p) {
    for (int64_t t = 0; t < p.n_tokens; ++t) {
        const int64_t pos = p.pos[t];
        if (pos < 0) fail("internal error: attention: token ", t, " has position ", pos);
        const int32_t* table = p.tables[t];
        const int64_t b_end = pos / p.block_size;
        if (table == nullptr || b_end >= p.table_len[t])
            fail("internal error: attention: token ", t, " at position ", pos, " needs block ",
                 b_end, " but its block table has ", table ? p.table_len[t] : 0, " entries");
        for (int64_t b = window_lo(pos, p.window) / p.block_size; b <= b_end; ++b) {
            const int32_t id = table[b];
            if (id < 0 || (p.n_blocks > 0 && id >= p.n_blocks))
                fail("internal error: attention: token ", t, " at position ", pos,
                     " needs logical block ", b, " whose physical id is ", id,
                     (id < 0 ? " (released)" : " (beyond the pool)"));
        }
    }
}

// out = softmax(scale · q·Kᵀ) · V for one (token, head); scores: [block_size],
// acc: [head_dim] scratch. KV: float, uint16_t (f16 bits), E4m3, or int8_t (i8
// codes: a key's score is scaled by its row's K scale, its softmax weight by the V
// scale, as the CUDA kernels do).
template <class KV>
HF2Q_CPU_CLONES void attend(const ops::AttentionParams& p, int64_t t, int64_t h, float* scores,
                            float* acc) {
    const int64_t d = p.head_dim;
    const int64_t kv_row = p.n_kv_heads * d;  // floats per cached position
    const int64_t kvh = h / (p.n_heads / p.n_kv_heads);
    const float* q = p.q + (t * p.n_heads + h) * d;
    const int64_t pos = p.pos[t];
    const int64_t lo = window_lo(pos, p.window);
    const int32_t* table = p.tables[t];

    float m = -std::numeric_limits<float>::infinity();
    float l = 0.0f;
    std::fill(acc, acc + d, 0.0f);
    for (int64_t b = lo / p.block_size; b <= pos / p.block_size; ++b) {
        const int64_t j0 = std::max(lo, b * p.block_size);
        const int64_t j1 = std::min(pos + 1, (b + 1) * p.block_size);
        // Slot s of physical block table[b] holds position b·block_size + s.
        const int64_t base = ops::kv_pool_index(table[b], 0, kvh, p.block_size, kv_row, d);
        const int64_t stride = kv_row;  // values from slot to slot (ops/attention.h's order)
        const KV* k = static_cast<const KV*>(p.k_pool) + base;
        const KV* v = static_cast<const KV*>(p.v_pool) + base;
        const int64_t first = b * p.block_size;
        // Row scales of i8 pools: row (slot, kvh) of this block at rs + slot · scale stride.
        constexpr bool kScaled = std::is_same_v<KV, int8_t>;
        const int64_t rs = ops::kv_scale_index(table[b], 0, kvh, p.block_size, p.n_kv_heads);
        const int64_t rs_stride = p.n_kv_heads;
        auto row_scale = [&](const float* sc, int64_t j) {
            if constexpr (kScaled)
                return sc[rs + (j - first) * rs_stride];
            else
                return 1.0f;
        };

        float bm = -std::numeric_limits<float>::infinity();
        for (int64_t j = j0; j < j1; ++j) {
            float s = p.scale * dot_f32(q, k + (j - first) * stride, d);
            if constexpr (kScaled) s *= row_scale(p.k_scale, j);
            scores[j - j0] = s;
            bm = std::max(bm, s);
        }
        if (bm > m) {
            const float corr = std::exp(m - bm);  // 0 on the first block (m = −inf)
            l *= corr;
            for (int64_t i = 0; i < d; ++i) acc[i] *= corr;
            m = bm;
        }
        for (int64_t j = j0; j < j1; ++j) {
            const float e = std::exp(scores[j - j0] - m);
            l += e;
            axpy_f32(acc, kScaled ? e * row_scale(p.v_scale, j) : e, v + (j - first) * stride, d);
        }
    }
    float* out = p.out + (t * p.n_heads + h) * d;
    for (int64_t i = 0; i < d; ++i) out[i] = acc[i] / l;
}

}  // namespace

void attention(Context& c, const ops::AttentionParams& p) {
    if (p.n_tokens == 0) return;
    HF2Q_ASSERT(p.n_tokens > 0 && p.n_heads > 0 && p.n_kv_heads > 0 && p.head_dim > 0);
    HF2Q_ASSERT(p.n_heads % p.n_kv_heads == 0 && p.block_size > 0 && p.window >= 0);
    HF2Q_ASSERT(p.q != nullptr && p.out != nullptr && p.k_pool != nullptr && p.v_pool != nullptr);
    HF2Q_ASSERT(p.pos != nullptr && p.tables != nullptr && p.table_len != nullptr);
    check_tables(p);
    HF2Q_ASSERT(!ops::kv_type_scaled(p.kv_type) || (p.k_scale != nullptr && p.v_scale != nullptr));

    c.scratch.reserve(p.block_size + p.head_dim);
    c.pool.parallel_for(p.n_tokens * p.n_heads, 1, [&](int64_t i0, int64_t i1, int th) {
        float* scores = c.scratch.get(th);
        float* acc = scores + p.block_size;
        for (int64_t i = i0; i < i1; ++i) {
            switch (p.kv_type) {
                case ops::KvType::f16: attend<uint16_t>(p, i / p.n_heads, i % p.n_heads, scores, acc); break;
                case ops::KvType::e4m3: attend<E4m3>(p, i / p.n_heads, i % p.n_heads, scores, acc); break;
                case ops::KvType::f32: attend<float>(p, i / p.n_heads, i % p.n_heads, scores, acc); break;
                case ops::KvType::i8: attend<int8_t>(p, i / p.n_heads, i % p.n_heads, scores, acc); break;
            }
        }
    });
}

}  // namespace hf2q::cpu

// Row movement ops (ops/gather.h): gather, weighted scatter-add, KV-cache stores and
// block copies. A row stride of 0 means n (rows packed).
//
// scatter_add is threaded over column ranges: each worker applies every source row,
// in increasing i, to its own columns, so repeated destination rows accumulate in the
// documented order whatever the thread count.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_ops.h"
#include "core/error.h"
#include "quant/quant.h"

namespace hf2q::cpu {
namespace {

constexpr int64_t kCopyGrain = 16384;  // floats per chunk

}  // namespace

void gather_rows(Context& c, const ops::GatherRowsParams& p) {
    if (p.n_rows == 0 || p.n == 0) return;
    HF2Q_ASSERT(p.n_rows > 0 && p.n > 0 && p.src && p.dst && p.rows);
    const int64_t ss = p.src_stride ? p.src_stride : p.n;
    const int64_t ds = p.dst_stride ? p.dst_stride : p.n;
    HF2Q_ASSERT(ss >= p.n && ds >= p.n);
    for (int64_t i = 0; i < p.n_rows; ++i) HF2Q_ASSERT(p.rows[i] >= 0);
    c.pool.parallel_for(p.n_rows, std::max<int64_t>(1, kCopyGrain / p.n),
                        [&](int64_t i0, int64_t i1, int) {
                            for (int64_t i = i0; i < i1; ++i)
                                std::memcpy(p.dst + i * ds, p.src + p.rows[i] * ss,
                                            static_cast<size_t>(p.n) * sizeof(float));
                        });
}

void scatter_add(Context& c, const ops::ScatterAddParams& p) {
    if (p.n_rows == 0 || p.n == 0) return;
    HF2Q_ASSERT(p.n_rows > 0 && p.n > 0 && p.src && p.dst && p.rows && p.weights);
    const int64_t ss = p.src_stride ? p.src_stride : p.n;
    const int64_t ds = p.dst_stride ? p.dst_stride : p.n;
    HF2Q_ASSERT(ss >= p.n && ds >= p.n);
    for (int64_t i = 0; i < p.n_rows; ++i) HF2Q_ASSERT(p.rows[i] >= 0);
    const int64_t grain = std::max<int64_t>(64, kCopyGrain / p.n_rows);
    c.pool.parallel_for(p.n, grain, [&](int64_t j0, int64_t j1, int) {
        for (int64_t i = 0; i < p.n_rows; ++i) {
            const float w = p.weights[i];
            const float* s = p.src + i * ss;
            float* d = p.dst + p.rows[i] * ds;
            for (int64_t j = j0; j < j1; ++j) d[j] += w * s[j];
        }
    });
}

// One row of values into a pool row of type t: the quantizer's F32 row (a copy) or
// F16 rows (ggml's round to nearest even), E4M3 codes (quant::fp32_to_e4m3), or i8
// codes with a scale per head_dim values (quant::quantize_rows_i8) into scale: one
// position's row of every KV head, each head's at its place in the block (ops/attention.h).
static void store_kv_row(const float* src, void* pool, float* scale, int64_t block, int64_t s,
                         const ops::KvStoreParams& p) {
    const ops::KvType t = p.kv_type;
    const int64_t hd = p.head_dim, heads = p.row / hd, bytes = ops::kv_type_bytes(t);
    for (int64_t h = 0; h < heads; ++h) {
        const float* x = src + h * hd;
        uint8_t* dst = static_cast<uint8_t*>(pool) +
                       ops::kv_pool_index(block, s, h, p.block_size, p.row, hd) * bytes;
        if (t == ops::KvType::e4m3) {
            for (int64_t i = 0; i < hd; ++i) dst[i] = quant::fp32_to_e4m3(x[i]);
        } else if (t == ops::KvType::i8) {
            quant::quantize_rows_i8(x, reinterpret_cast<int8_t*>(dst),
                                    scale + ops::kv_scale_index(block, s, h, p.block_size, heads), 1, hd);
        } else {
            const GgmlType type = t == ops::KvType::f16 ? GgmlType::F16 : GgmlType::F32;
            quant::quantize(type, x, dst, 1, hd, nullptr);
        }
    }
}

void kv_store(Context& c, const ops::KvStoreParams& p) {
    if (p.n_tokens == 0) return;
    HF2Q_ASSERT(p.n_tokens > 0 && p.row > 0 && p.block_size > 0);
    HF2Q_ASSERT(p.k && p.v && p.k_pool && p.v_pool && p.pos && p.tables);
    HF2Q_ASSERT(p.head_dim > 0 && p.row % p.head_dim == 0);
    if (ops::kv_type_scaled(p.kv_type)) HF2Q_ASSERT(p.k_scale && p.v_scale);
    for (int64_t t = 0; t < p.n_tokens; ++t) {
        if (p.pos[t] < 0 || p.tables[t] == nullptr || p.tables[t][p.pos[t] / p.block_size] < 0)
            fail("internal error: kv_store: token ", t, " at position ", p.pos[t],
                 " has no cache block");
    }
    c.pool.parallel_for(
        p.n_tokens, std::max<int64_t>(1, kCopyGrain / p.row), [&](int64_t t0, int64_t t1, int) {
            for (int64_t t = t0; t < t1; ++t) {
                const int64_t pos = p.pos[t], block = p.tables[t][pos / p.block_size];
                store_kv_row(p.k + t * p.row, p.k_pool, p.k_scale, block, pos % p.block_size, p);
                store_kv_row(p.v + t * p.row, p.v_pool, p.v_scale, block, pos % p.block_size, p);
            }
        });
}

// Destination blocks must be distinct and not among the sources (copy on write copies
// shared blocks into fresh ones), so the copies are independent.
void copy_blocks(Context& c, const ops::CopyBlocksParams& p) {
    if (p.n == 0) return;
    HF2Q_ASSERT(p.n > 0 && p.block_bytes > 0 && p.pool && p.src && p.dst);
    for (int64_t i = 0; i < p.n; ++i)
        HF2Q_ASSERT(p.src[i] >= 0 && p.dst[i] >= 0 && p.src[i] != p.dst[i]);
    auto* pool = static_cast<uint8_t*>(p.pool);
    c.pool.parallel_for(p.n, 1, [&](int64_t i0, int64_t i1, int) {
        for (int64_t i = i0; i < i1; ++i)
            std::memcpy(pool + p.dst[i] * p.block_bytes, pool + p.src[i] * p.block_bytes,
                        static_cast<size_t>(p.block_bytes));
    });
}

void feed_tokens(Context&, const ops::FeedTokensParams& p) {
    HF2Q_ASSERT(p.n >= 0 && p.n_vocab > 0);
    for (int64_t t = 0; t < p.n; ++t) {
        if (p.from[t] < 0) {
            p.out[t] = p.tokens[t];
            continue;
        }
        const int32_t id = p.ids[p.from[t]];
        p.out[t] = id >= 0 && id < p.n_vocab ? id : 0;
    }
}

}  // namespace hf2q::cpu

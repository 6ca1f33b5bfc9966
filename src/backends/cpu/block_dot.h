// Dot products of weight rows in their ggml block formats with f32 activation rows,
// each 32-value group of a row decoded in registers: matmul's path for a few tokens
// (decode), where decoding a tile of rows into memory first (matmul.cpp's path for
// many tokens) cost more than the products.
//
// Bits: a group's values are decoded with the very operations of quant::dequantize_row
// (the same binary32 expressions, left to right; contraction is off project-wide), and
// group g's eight-value slice u is added into accumulator u as dot_f32 adds elements
// 32g + 8u .. 32g + 8u + 7, then summed by sum_lanes. So every output equals
// dot_f32(dequantize_row(row), x) bit for bit: the two matmul paths agree, and a token's
// result does not depend on how many tokens share the call. tests/ops/block_dot_test.cpp
// checks this for every format and both SIMD clones.
//
// The same decoders also fill matmul's tiles for many tokens (block_decode), faster than
// quant::dequantize_row's loops for the same values.
//
// Formats: F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, for rows whose
// length is a multiple of 32 (the others keep quant::dequantize_row and the tiles).
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/cpu/cpu_ops.h"
#include "core/ggml_type.h"
#include "quant/quant_impl.h"

namespace hf2q::cpu {

// y[t · ys + r] = Σ_i W[r][i] · x[t · xs + i] for rows r < n_rows and tokens t < n_tok.
struct BlockDotArgs {
    const uint8_t* w = nullptr;  // row 0 of W; row r at w + r · row_bytes
    uint64_t row_bytes = 0;
    int64_t n_rows = 0;
    int64_t n_in = 0;  // a multiple of 32
    const float* x = nullptr;
    int64_t xs = 0;
    int64_t n_tok = 0;
    float* y = nullptr;
    int64_t ys = 0;
};

// Tokens that share one pass over a row (their accumulators stay in the 16 AVX2 registers);
// block_dot takes more in groups of this many.
inline constexpr int64_t kBlockDotTokens = 4;

// True where block_dot has a decoder for rows of n_in values of type t.
bool has_block_dot(GgmlType t, int64_t n_in);
// True where block_decode is the faster way to fill matmul's tiles (the format's kTiles).
bool has_block_decode(GgmlType t, int64_t n_in);
// The products above (compiled for AVX2 and the baseline, HF2Q_CPU_CLONES). Requires
// has_block_dot(t, a.n_in).
void block_dot(GgmlType t, const BlockDotArgs& a);
// Rows decoded into out ([n_rows][n_in] f32) with the same decoders: quant::dequantize_row's
// values, bit for bit, for matmul's tiles. Requires has_block_dot(t, n_in).
void block_decode(GgmlType t, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, int64_t n_in,
                  float* out);

namespace block_dot_detail {

namespace q = quant::detail;
using I8 = int32_t __attribute__((vector_size(32)));

// Eight bytes as eight 32-bit lanes, each shifted right by `shift` and masked by `mask`
// (the bits of a code field): two words shifted lane by lane, one shift and one mask (GCC
// turns a conversion of an 8-byte vector into per-byte scalar code).
inline void load_b8(const uint8_t* p, uint32_t shift, uint32_t mask, U8& v) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    const U8 words = {lo, lo, lo, lo, hi, hi, hi, hi};
    v = (words >> (U8{0, 8, 16, 24, 0, 8, 16, 24} + shift)) & mask;
}
// Eight signed bytes as eight 32-bit lanes.
inline void load_sb8(const int8_t* p, I8& v) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    const U8 words = {lo, lo, lo, lo, hi, hi, hi, hi};
    v = (I8)(words << U8{24, 16, 8, 0, 24, 16, 8, 0}) >> 24;
}
// Lanes holding small non-negative or signed integers, as floats (static_cast<float>).
inline void int_to_f8(const I8& v, F8& f) {
    f = __builtin_convertvector(v, F8);
}
inline void int_to_f8(const U8& v, F8& f) {
    int_to_f8((I8)v, f);
}

// Each format: kBlockBytes, kGroups (32-value groups a block), decode(block, group, w),
// which writes the group's values 8u .. 8u + 7 to w[u] exactly as dequantize_row does, and
// kTiles: whether block_decode fills matmul's tiles faster than quant::dequantize_row: true
// where that one's loops are slow (at 8 tokens matmul ran 1.06-2x faster with F16, Q4_0,
// Q5_0, Q5_K and Q6_K), false for BF16, Q8_0 and Q4_K, whose loops the compiler vectorises
// as well (block_decode no faster: 0.86-1.0x). hf2q_bench_ops BM_Matmul 2048 x 2048, one
// thread, on a 2-core VM like CI's.

struct F16 {
    static constexpr int kBlockBytes = 64, kGroups = 1;
    static constexpr bool kTiles = true;
    [[gnu::always_inline]] static void decode(const uint8_t* b, int, F8 (&w)[4]) {
        for (int u = 0; u < 4; ++u) {
            U8 h;  // GCC makes this one widening load
            for (int k = 0; k < 8; ++k) h[k] = q::load_u16(b + 16 * u + 2 * k);
            half8_to_f8(h, w[u]);
        }
    }
};

struct BF16 {
    static constexpr int kBlockBytes = 64, kGroups = 1;
    static constexpr bool kTiles = false;
    [[gnu::always_inline]] static void decode(const uint8_t* b, int, F8 (&w)[4]) {
        for (int u = 0; u < 4; ++u) {
            U8 h;  // GCC makes this one widening load
            for (int k = 0; k < 8; ++k) h[k] = q::load_u16(b + 16 * u + 2 * k);
            h <<= 16;
            std::memcpy(&w[u], &h, sizeof h);
        }
    }
};

struct Q8_0 {
    static constexpr int kBlockBytes = sizeof(q::BlockQ8_0), kGroups = 1;
    static constexpr bool kTiles = false;
    [[gnu::always_inline]] static void decode(const uint8_t* p, int, F8 (&w)[4]) {
        const auto& b = *reinterpret_cast<const q::BlockQ8_0*>(p);
        F8 d;
        splat(q::load_f16(b.d), d);
        for (int u = 0; u < 4; ++u) {
            I8 c;
            load_sb8(b.qs + 8 * u, c);
            int_to_f8(c, w[u]);
            w[u] *= d;
        }
    }
};

// The 4-bit codes of a legacy block: values 0-15 from the low nibbles of qs[0..15], 16-31
// from the high ones, so slice u is qs[8 (u % 2) ..] shifted by 4 (u / 2).
inline void nibbles(const uint8_t* qs, int u, U8& v) {
    load_b8(qs + 8 * (u % 2), 4u * static_cast<uint32_t>(u / 2), 15u, v);
}
// The fifth bits of slice u of a Q5_0 / Q5_1 block, at bit 4.
inline void fifth_bits(uint32_t qh, int u, U8& h) {
    const U8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
    h = ((U8{} + qh) >> (lane + 8u * static_cast<uint32_t>(u)) & 1u) << 4;
}

struct Q4_0 {
    static constexpr int kBlockBytes = sizeof(q::BlockQ4_0), kGroups = 1;
    static constexpr bool kTiles = true;
    [[gnu::always_inline]] static void decode(const uint8_t* p, int, F8 (&w)[4]) {
        const auto& b = *reinterpret_cast<const q::BlockQ4_0*>(p);
        F8 d;
        splat(q::load_f16(b.d), d);
        for (int u = 0; u < 4; ++u) {
            U8 v;
            nibbles(b.qs, u, v);
            int_to_f8((I8)v - 8, w[u]);
            w[u] *= d;
        }
    }
};

struct Q4_1 {
    static constexpr int kBlockBytes = sizeof(q::BlockQ4_1), kGroups = 1;
    static constexpr bool kTiles = true;
    [[gnu::always_inline]] static void decode(const uint8_t* p, int, F8 (&w)[4]) {
        const auto& b = *reinterpret_cast<const q::BlockQ4_1*>(p);
        F8 d, m;
        splat(q::load_f16(b.d), d);
        splat(q::load_f16(b.m), m);
        for (int u = 0; u < 4; ++u) {
            U8 v;
            nibbles(b.qs, u, v);
            int_to_f8(v, w[u]);
            w[u] = w[u] * d + m;
        }
    }
};

struct Q5_0 {
    static constexpr int kBlockBytes = sizeof(q::BlockQ5_0), kGroups = 1;
    static constexpr bool kTiles = true;
    [[gnu::always_inline]] static void decode(const uint8_t* p, int, F8 (&w)[4]) {
        const auto& b = *reinterpret_cast<const q::BlockQ5_0*>(p);
        F8 d;
        splat(q::load_f16(b.d), d);
        const uint32_t qh = q::load_qh(b.qh);
        for (int u = 0; u < 4; ++u) {
            U8 v, h;
            nibbles(b.qs, u, v);
            fifth_bits(qh, u, h);
            int_to_f8((I8)(v | h) - 16, w[u]);
            w[u] *= d;
        }
    }
};

struct Q5_1 {
    static constexpr int kBlockBytes = sizeof(q::BlockQ5_1), kGroups = 1;
    static constexpr bool kTiles = true;
    [[gnu::always_inline]] static void decode(const uint8_t* p, int, F8 (&w)[4]) {
        const auto& b = *reinterpret_cast<const q::BlockQ5_1*>(p);
        F8 d, m;
        splat(q::load_f16(b.d), d);
        splat(q::load_f16(b.m), m);
        const uint32_t qh = q::load_qh(b.qh);
        for (int u = 0; u < 4; ++u) {
            U8 v, h;
            nibbles(b.qs, u, v);
            fifth_bits(qh, u, h);
            int_to_f8(v | h, w[u]);
            w[u] = w[u] * d + m;
        }
    }
};

// Q4_K / Q5_K: group j (0-7) is sub-block j, d · sc_j · code − dmin · m_j, its codes the
// low (j even) or high (j odd) nibbles of qs[32 (j / 2) ..], plus bit j of qh[l] for Q5_K.
template <class Block, bool kFifth>
struct K45 {
    static constexpr int kBlockBytes = sizeof(Block), kGroups = 8;
    static constexpr bool kTiles = kFifth;
    [[gnu::always_inline]] static void decode(const uint8_t* p, int j, F8 (&w)[4]) {
        const auto& b = *reinterpret_cast<const Block*>(p);
        int sc = 0, mn = 0;
        q::get_scale_min_k4(j, b.scales, &sc, &mn);
        F8 d1, m1;
        splat(q::load_f16(b.d) * static_cast<float>(sc), d1);
        splat(q::load_f16(b.dmin) * static_cast<float>(mn), m1);
        const uint8_t* qs = b.qs + 32 * (j / 2);
        const uint32_t shift = 4 * static_cast<uint32_t>(j % 2);
        for (int u = 0; u < 4; ++u) {
            U8 v;
            load_b8(qs + 8 * u, shift, 15u, v);
            if constexpr (kFifth) {
                U8 h;
                load_b8(b.qh + 8 * u, static_cast<uint32_t>(j), 1u, h);
                v += h << 4;
            }
            int_to_f8(v, w[u]);
            w[u] = d1 * w[u] - m1;
        }
    }
};
using Q4_K = K45<q::BlockQ4_K, false>;
using Q5_K = K45<q::BlockQ5_K, true>;

// Q6_K: half h = g / 4 of the block, quarter k = g % 4 of it: value l (0-31) is
// (ql[64h + 32 (k % 2) + l] >> 4 (k / 2)) & 15 | ((qh[32h + l] >> 2k) & 3) << 4, minus 32,
// times d · scales[8h + 2k + l / 16].
struct Q6_K {
    static constexpr int kBlockBytes = sizeof(q::BlockQ6_K), kGroups = 8;
    static constexpr bool kTiles = true;
    [[gnu::always_inline]] static void decode(const uint8_t* p, int g, F8 (&w)[4]) {
        const auto& b = *reinterpret_cast<const q::BlockQ6_K*>(p);
        const int h = g / 4, k = g % 4;
        const uint8_t* ql = b.ql + 64 * h + 32 * (k % 2);
        const uint8_t* qh = b.qh + 32 * h;
        const int8_t* sc = b.scales + 8 * h + 2 * k;
        const float d = q::load_f16(b.d);
        for (int u = 0; u < 4; ++u) {
            U8 lo, hi;
            load_b8(ql + 8 * u, 4u * static_cast<uint32_t>(k / 2), 15u, lo);
            load_b8(qh + 8 * u, 2u * static_cast<uint32_t>(k), 3u, hi);
            const U8 code = lo | (hi << 4);
            int_to_f8((I8)code - 32, w[u]);
            F8 ds;
            splat(d * static_cast<float>(sc[u / 2]), ds);
            w[u] = ds * w[u];
        }
    }
};

// NT tokens' dot products with one row: each group decoded once, then multiplied into
// every token's accumulators.
template <class Fmt, int NT>
[[gnu::always_inline]] inline void row_tokens(const uint8_t* row, int64_t n_in, const float* x,
                                              int64_t xs, float* y, int64_t ys) {
    F8 acc[NT][4] = {};
    const int64_t n_blocks = n_in / (32 * Fmt::kGroups);
    for (int64_t bi = 0; bi < n_blocks; ++bi) {
        const uint8_t* block = row + bi * Fmt::kBlockBytes;
        for (int g = 0; g < Fmt::kGroups; ++g) {
            F8 w[4];
            Fmt::decode(block, g, w);
            const float* xg = x + (bi * Fmt::kGroups + g) * 32;
            for (int t = 0; t < NT; ++t)
                for (int u = 0; u < 4; ++u) {
                    F8 xv;
                    std::memcpy(&xv, xg + t * xs + 8 * u, sizeof xv);
                    acc[t][u] += w[u] * xv;
                }
        }
    }
    for (int t = 0; t < NT; ++t) y[t * ys] = sum_lanes(acc[t]);
}

// One row's values into out (n_in floats).
template <class Fmt>
[[gnu::always_inline]] inline void decode_row(const uint8_t* row, int64_t n_in, float* out) {
    const int64_t n_blocks = n_in / (32 * Fmt::kGroups);
    for (int64_t bi = 0; bi < n_blocks; ++bi)
        for (int g = 0; g < Fmt::kGroups; ++g) {
            F8 w[4];
            Fmt::decode(row + bi * Fmt::kBlockBytes, g, w);
            std::memcpy(out + (bi * Fmt::kGroups + g) * 32, w, sizeof w);
        }
}

// Tokens kBlockDotTokens at a time, every row of the call for each group of tokens.
template <class Fmt>
[[gnu::always_inline]] inline void rows(const BlockDotArgs& a) {
    static_assert(kBlockDotTokens == 4, "rows() dispatches groups of 1-4 tokens");
    for (int64_t t0 = 0; t0 < a.n_tok; t0 += kBlockDotTokens) {
        const int64_t nt = a.n_tok - t0 < kBlockDotTokens ? a.n_tok - t0 : kBlockDotTokens;
        const float* x = a.x + t0 * a.xs;
        float* y = a.y + t0 * a.ys;
        for (int64_t r = 0; r < a.n_rows; ++r) {
            const uint8_t* row = a.w + static_cast<uint64_t>(r) * a.row_bytes;
            switch (nt) {
                case 1:
                    row_tokens<Fmt, 1>(row, a.n_in, x, a.xs, y + r, a.ys);
                    break;
                case 2:
                    row_tokens<Fmt, 2>(row, a.n_in, x, a.xs, y + r, a.ys);
                    break;
                case 3:
                    row_tokens<Fmt, 3>(row, a.n_in, x, a.xs, y + r, a.ys);
                    break;
                default:
                    row_tokens<Fmt, 4>(row, a.n_in, x, a.xs, y + r, a.ys);
                    break;
            }
        }
    }
}

// Calls run.template operator()<Fmt>() for t's format; false if t has none.
template <class Run>
[[gnu::always_inline]] inline bool visit(GgmlType t, Run&& run) {
    switch (t) {
        case GgmlType::F16:
            run.template operator()<F16>();
            return true;
        case GgmlType::BF16:
            run.template operator()<BF16>();
            return true;
        case GgmlType::Q8_0:
            run.template operator()<Q8_0>();
            return true;
        case GgmlType::Q4_0:
            run.template operator()<Q4_0>();
            return true;
        case GgmlType::Q4_1:
            run.template operator()<Q4_1>();
            return true;
        case GgmlType::Q5_0:
            run.template operator()<Q5_0>();
            return true;
        case GgmlType::Q5_1:
            run.template operator()<Q5_1>();
            return true;
        case GgmlType::Q4_K:
            run.template operator()<Q4_K>();
            return true;
        case GgmlType::Q5_K:
            run.template operator()<Q5_K>();
            return true;
        case GgmlType::Q6_K:
            run.template operator()<Q6_K>();
            return true;
        default:
            return false;
    }
}

}  // namespace block_dot_detail
}  // namespace hf2q::cpu

// Legacy 32-element formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (and the Q8_1 helper).
//
// Nibble order in every block: byte j holds element j (low nibble) and element j+16 (high
// nibble). Q5_x keep the fifth bits in a little-endian u32 `qh`, bit j for element j.
// Without importance weights the quantizers are ggml's quantize_row_*_ref (truncating casts,
// unrounded FP32 scale); with weights they are the *_impl searches, whose per-element weight
// uses the variance of the whole row.
#include <cfloat>
#include <cmath>

#include "quant/quant_impl.h"

namespace hf2q::quant::detail {
namespace {

// The element of largest magnitude (first wins on ties), sign kept.
float signed_absmax(const float* x, int n) {
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < n; ++j) {
        const float v = x[j];
        if (amax < std::fabs(v)) {
            amax = std::fabs(v);
            max = v;
        }
    }
    return max;
}

void min_max(const float* x, int n, float* mn, float* mx) {
    float lo = FLT_MAX;
    float hi = -FLT_MAX;
    for (int j = 0; j < n; ++j) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

// σ² of the imatrix weights: mean of x² over the whole row.
float row_sigma2(const float* x, int64_t n) {
    float sum_x2 = 0.0f;
    for (int64_t j = 0; j < n; ++j) sum_x2 += x[j] * x[j];
    return sum_x2 / static_cast<float>(n);
}

void pack_nibbles(const uint8_t* L, uint8_t* qs) {
    for (int j = 0; j < kQK / 2; ++j)
        qs[j] = static_cast<uint8_t>((L[j] & 15) | ((L[j + 16] & 15) << 4));
}

// Packs 5-bit codes into qs (low nibbles) and the little-endian qh (bit 4 of each code).
void pack_5bit(const uint8_t* L, uint8_t* qs, uint8_t* qh) {
    uint32_t h = 0;
    for (int j = 0; j < kQK; ++j) h |= static_cast<uint32_t>((L[j] >> 4) & 1) << j;
    pack_nibbles(L, qs);
    for (int k = 0; k < 4; ++k) qh[k] = static_cast<uint8_t>(h >> (8 * k));
}

// Symmetric reference (Q4_0: nmax 8, Q5_0: nmax 16): d = max/-nmax, q = trunc(x/d + nmax + .5).
void ref_symmetric(const float* x, int nmax, float* d_out, uint8_t* L) {
    const float max = signed_absmax(x, kQK);
    const float d = max / static_cast<float>(-nmax);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float bias = static_cast<float>(nmax) + 0.5f;
    const int qmax = 2 * nmax - 1;
    for (int j = 0; j < kQK; ++j) {
        const float v = x[j] * id;
        const int q = static_cast<int8_t>(trunc_to_i32(v + bias));
        L[j] = static_cast<uint8_t>(q < qmax ? q : qmax);
    }
    *d_out = d;
}

// Asymmetric reference (Q4_1: nmax 15 clamped, Q5_1: nmax 31 unclamped).
void ref_asymmetric(const float* x, int nmax, bool clamp, float* d_out, float* m_out, uint8_t* L) {
    float mn = 0.0f;
    float mx = 0.0f;
    min_max(x, kQK, &mn, &mx);
    const float d = (mx - mn) / static_cast<float>(nmax);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kQK; ++j) {
        const float v = (x[j] - mn) * id;
        int q = static_cast<int8_t>(trunc_to_i32(v + 0.5f));
        if (clamp && q > nmax) q = nmax;
        L[j] = static_cast<uint8_t>(q);
    }
    *d_out = d;
    *m_out = mn;
}

// imatrix path of Q4_0/Q5_0: weighted make_qx_quants, codes stored as found.
float impl_symmetric(const float* x, const float* qw, float sigma2, int nmax, uint8_t* L) {
    float w[kQK];
    int8_t l8[kQK];
    importance_weights(x, qw, kQK, sigma2, w);  // (their sum is not needed here)
    const float d = make_qx_quants(kQK, nmax, x, l8, 1, w);
    for (int j = 0; j < kQK; ++j) L[j] = static_cast<uint8_t>(l8[j]);
    return d;
}

// imatrix path of Q4_1/Q5_1: make_qkx3_quants; returns d, *m = the (negative) offset.
float impl_asymmetric(const float* x, const float* qw, float sigma2, int nmax, float* m,
                      uint8_t* L) {
    float w[kQK];
    uint8_t aux[kQK];
    importance_weights(x, qw, kQK, sigma2, w);  // (their sum is not needed here)
    float the_min = 0.0f;
    const float d = make_qkx3_quants(kQK, nmax, x, w, L, &the_min, aux, -0.9f, 0.05f, 36, false);
    *m = -the_min;
    return d;
}

}  // namespace

namespace {

// Rows of 32-value blocks with a scale only (Q4_0, Q5_0: levels 0 .. 2·nmax − 1 around
// nmax): the importance-weighted search when weights are given, else ggml's
// reference rounding. pack stores the levels into the block.
template <class Block, class Pack>
void quantize_symmetric_rows(const float* x, Block* y, int64_t n, const float* qw, int nmax, Pack pack) {
    const float sigma2 = qw ? row_sigma2(x, n) : 0.0f;
    for (int64_t ib = 0; ib < n / kQK; ++ib) {
        const float* xb = x + ib * kQK;
        uint8_t L[kQK];
        float d = 0.0f;
        if (qw)
            d = impl_symmetric(xb, qw + ib * kQK, sigma2, nmax, L);
        else
            ref_symmetric(xb, nmax, &d, L);
        store_f16(y[ib].d, d);
        pack(L, y[ib]);
    }
}

// Rows of 32-value blocks with a scale and a min (Q4_1, Q5_1: levels 0 .. nmax).
// ref_clamp: whether the reference clamps the levels to nmax (ref_asymmetric).
template <class Block, class Pack>
void quantize_asymmetric_rows(const float* x, Block* y, int64_t n, const float* qw, int nmax, bool ref_clamp,
                              Pack pack) {
    const float sigma2 = qw ? row_sigma2(x, n) : 0.0f;
    for (int64_t ib = 0; ib < n / kQK; ++ib) {
        const float* xb = x + ib * kQK;
        uint8_t L[kQK];
        float d = 0.0f;
        float m = 0.0f;
        if (qw)
            d = impl_asymmetric(xb, qw + ib * kQK, sigma2, nmax, &m, L);
        else
            ref_asymmetric(xb, nmax, ref_clamp, &d, &m, L);
        store_f16(y[ib].d, d);
        store_f16(y[ib].m, m);
        pack(L, y[ib]);
    }
}

}  // namespace

void quantize_row_q4_0(const float* x, void* dst, int64_t n, const float* qw) {
    quantize_symmetric_rows(x, static_cast<BlockQ4_0*>(dst), n, qw, 8,
                            [](const uint8_t* L, BlockQ4_0& b) { pack_nibbles(L, b.qs); });
}

void quantize_row_q5_0(const float* x, void* dst, int64_t n, const float* qw) {
    quantize_symmetric_rows(x, static_cast<BlockQ5_0*>(dst), n, qw, 16,
                            [](const uint8_t* L, BlockQ5_0& b) { pack_5bit(L, b.qs, b.qh); });
}

void quantize_row_q4_1(const float* x, void* dst, int64_t n, const float* qw) {
    quantize_asymmetric_rows(x, static_cast<BlockQ4_1*>(dst), n, qw, 15, true,
                             [](const uint8_t* L, BlockQ4_1& b) { pack_nibbles(L, b.qs); });
}

void quantize_row_q5_1(const float* x, void* dst, int64_t n, const float* qw) {
    quantize_asymmetric_rows(x, static_cast<BlockQ5_1*>(dst), n, qw, 31, false,
                             [](const uint8_t* L, BlockQ5_1& b) { pack_5bit(L, b.qs, b.qh); });
}

// Q8_0 ignores importance weights (as ggml does).
void quantize_row_q8_0(const float* x, void* dst, int64_t n, const float*) {
    auto* y = static_cast<BlockQ8_0*>(dst);
    for (int64_t ib = 0; ib < n / kQK; ++ib) {
        const float* xb = x + ib * kQK;
        float amax = 0.0f;
        for (int j = 0; j < kQK; ++j) amax = max_f(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        store_f16(y[ib].d, d);
        for (int j = 0; j < kQK; ++j)
            y[ib].qs[j] = static_cast<int8_t>(trunc_to_i32(std::round(xb[j] * id)));
    }
}

// Q8_1 block: d f16 @0, s f16 @2 (d · Σq), qs[32] int8 @4.
void quantize_row_q8_1(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<uint8_t*>(dst);
    for (int64_t ib = 0; ib < n / kQK; ++ib, y += 36) {
        const float* xb = x + ib * kQK;
        float amax = 0.0f;
        for (int j = 0; j < kQK; ++j) amax = max_f(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < kQK; ++j) {
            const auto q = static_cast<int8_t>(trunc_to_i32(std::round(xb[j] * id)));
            y[4 + j] = static_cast<uint8_t>(q);
            sum += q;
        }
        store_f16(y, d);
        store_f16(y + 2, static_cast<float>(sum) * d);
    }
}

void dequantize_row_q4_0(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockQ4_0*>(src);
    for (int64_t ib = 0; ib < n / kQK; ++ib, dst += kQK) {
        const float d = load_f16(x[ib].d);
        for (int j = 0; j < kQK / 2; ++j) {
            dst[j] = static_cast<float>((x[ib].qs[j] & 15) - 8) * d;
            dst[j + 16] = static_cast<float>((x[ib].qs[j] >> 4) - 8) * d;
        }
    }
}

void dequantize_row_q4_1(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockQ4_1*>(src);
    for (int64_t ib = 0; ib < n / kQK; ++ib, dst += kQK) {
        const float d = load_f16(x[ib].d);
        const float m = load_f16(x[ib].m);
        for (int j = 0; j < kQK / 2; ++j) {
            dst[j] = static_cast<float>(x[ib].qs[j] & 15) * d + m;
            dst[j + 16] = static_cast<float>(x[ib].qs[j] >> 4) * d + m;
        }
    }
}

void dequantize_row_q5_0(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockQ5_0*>(src);
    for (int64_t ib = 0; ib < n / kQK; ++ib, dst += kQK) {
        const float d = load_f16(x[ib].d);
        const uint32_t qh = load_qh(x[ib].qh);
        for (int j = 0; j < kQK / 2; ++j) {
            const int h0 = static_cast<int>((qh >> j) & 1) << 4;
            const int h1 = static_cast<int>((qh >> (j + 16)) & 1) << 4;
            dst[j] = static_cast<float>(((x[ib].qs[j] & 15) | h0) - 16) * d;
            dst[j + 16] = static_cast<float>(((x[ib].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

void dequantize_row_q5_1(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockQ5_1*>(src);
    for (int64_t ib = 0; ib < n / kQK; ++ib, dst += kQK) {
        const float d = load_f16(x[ib].d);
        const float m = load_f16(x[ib].m);
        const uint32_t qh = load_qh(x[ib].qh);
        for (int j = 0; j < kQK / 2; ++j) {
            const int h0 = static_cast<int>((qh >> j) & 1) << 4;
            const int h1 = static_cast<int>((qh >> (j + 16)) & 1) << 4;
            dst[j] = static_cast<float>((x[ib].qs[j] & 15) | h0) * d + m;
            dst[j + 16] = static_cast<float>((x[ib].qs[j] >> 4) | h1) * d + m;
        }
    }
}

void dequantize_row_q8_0(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockQ8_0*>(src);
    for (int64_t ib = 0; ib < n / kQK; ++ib, dst += kQK) {
        const float d = load_f16(x[ib].d);
        for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(x[ib].qs[j]) * d;
    }
}

}  // namespace hf2q::quant::detail

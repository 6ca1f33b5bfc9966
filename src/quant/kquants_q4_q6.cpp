// Q4_K, Q5_K (8 sub-blocks of 32, 6-bit scales and mins) and Q6_K (16 sub-blocks of 16,
// int8 scales); spec §4.3-§4.5, §4.7.
//
// Q4_K/Q5_K scale packing in scales[12]: for j < 4, scales[j] low 6 bits = sc_j and
// scales[j+4] low 6 bits = m_j; for j >= 4, scales[j+4] = sc_j low nibble | m_j low nibble << 4,
// with the top 2 bits of sc_j / m_j in bits 6-7 of scales[j-4] / scales[j].
// Quants: chunk c (64 elements) uses qs[32c..32c+31]: element 64c+l low nibble, 64c+32+l high.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/quant_impl.h"

namespace hf2q::quant::detail {
namespace {

void pack_scale_min_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* scales) {
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            scales[j] = ls[j];
            scales[j + 4] = lm[j];
        } else {
            scales[j + 4] = static_cast<uint8_t>((ls[j] & 15) | ((lm[j] & 15) << 4));
            scales[j - 4] = static_cast<uint8_t>(scales[j - 4] | ((ls[j] >> 4) << 6));
            scales[j] = static_cast<uint8_t>(scales[j] | ((lm[j] >> 4) << 6));
        }
    }
}

// Scale search shared by Q4_K (nmax 15) and Q5_K (nmax 31); fills L (256 codes), d, dmin
// and the packed scales. With qw: the imatrix variant (qkx3 + make_qp_quants).
struct KScales {
    float d;
    float dmin;
    uint8_t scales[12];
};

KScales k_search_ref(const float* x, int nmax, float rmin, int nstep, uint8_t* L) {
    uint8_t aux[32];
    float weights[32];
    float mins[8];
    float scales[8];
    float max_scale = 0.0f;
    float max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
        float sum_x2 = 0.0f;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = std::sqrt(sum_x2 / 32.0f);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], aux, rmin,
                                     0.1f, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t ls[8];
    uint8_t lm[8];
    for (int j = 0; j < 8; ++j) {
        // The int -> uint8 conversion wraps before the min, as in ggml.
        ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
        lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
    }
    KScales k{max_scale / 63.0f, max_min / 63.0f, {}};
    pack_scale_min_k4(ls, lm, k.scales);
    return k;
}

KScales k_search_imatrix(const float* x, const float* qw, int nmax, uint8_t* L) {
    uint8_t aux[32];
    float weights[32];
    float sw[8];
    float mins[8];
    float scales[8];
    float sum_x2 = 0.0f;
    for (int l = 0; l < kQK_K; ++l) sum_x2 += x[l] * x[l];
    const float sigma2 = 2.0f * sum_x2 / static_cast<float>(kQK_K);
    for (int j = 0; j < 8; ++j) {
        sw[j] = importance_weights(x + 32 * j, qw + 32 * j, 32, sigma2, weights);
        scales[j] = make_qkx3_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], aux,
                                     -0.9f, 0.05f, 36, false);
    }
    uint8_t ls[8];
    uint8_t lm[8];
    KScales k{make_qp_quants(8, 63, scales, ls, sw), make_qp_quants(8, 63, mins, lm, sw), {}};
    for (int j = 0; j < 8; ++j) {
        ls[j] = std::min<uint8_t>(63, ls[j]);
        lm[j] = std::min<uint8_t>(63, lm[j]);
    }
    pack_scale_min_k4(ls, lm, k.scales);
    return k;
}

// Re-quantizes every sub-block with a nonzero stored scale against the stored d, dmin.
void k_requantize(const float* x, const uint8_t* d16, const uint8_t* dmin16, const uint8_t* scales,
                  int nmax, uint8_t* L) {
    const float dd = load_f16(d16);
    const float dmin = load_f16(dmin16);
    for (int j = 0; j < 8; ++j) {
        int sc = 0;
        int m = 0;
        get_scale_min_k4(j, scales, &sc, &m);
        const float d = dd * static_cast<float>(sc);
        if (d == 0.0f) continue;
        const float dm = dmin * static_cast<float>(m);
        for (int ii = 0; ii < 32; ++ii) {
            const int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = static_cast<uint8_t>(clamp_int(l, 0, nmax));
        }
    }
}

template <class Block>
void k_quantize_block(const float* x, const float* qw, int nmax, Block& y, uint8_t* L) {
    const KScales k =
        qw ? k_search_imatrix(x, qw, nmax, L)
           : (nmax == 15 ? k_search_ref(x, 15, -1.0f, 20, L) : k_search_ref(x, 31, -0.5f, 15, L));
    std::memcpy(y.scales, k.scales, sizeof(y.scales));
    store_f16(y.d, k.d);
    store_f16(y.dmin, k.dmin);
    k_requantize(x, y.d, y.dmin, y.scales, nmax, L);
}

// ---- Q6_K -------------------------------------------------------------------------------
void q6_k_block(const float* x, const float* qw, BlockQ6_K& y) {
    int8_t L[kQK_K];
    float scales[16];
    float max_scale = 0.0f;
    float max_abs_scale = 0.0f;
    for (int ib = 0; ib < 16; ++ib) {
        const float* w = qw ? qw + 16 * ib : nullptr;
        const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1, w);
        scales[ib] = scale;
        const float abs_scale = std::fabs(scale);
        if (abs_scale > max_abs_scale) {
            max_abs_scale = abs_scale;
            max_scale = scale;
        }
    }
    if (max_abs_scale < kGroupMaxEps) {
        std::memset(&y, 0, sizeof(y));
        return;
    }
    const float iscale = -128.0f / max_scale;
    store_f16(y.d, 1.0f / iscale);
    for (int ib = 0; ib < 16; ++ib)
        y.scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    const float dd = load_f16(y.d);
    for (int j = 0; j < 16; ++j) {
        const float d = dd * static_cast<float>(y.scales[j]);
        if (d == 0.0f) continue;
        for (int ii = 0; ii < 16; ++ii) {
            const int l = clamp_int(nearest_int(x[16 * j + ii] / d), -32, 31);
            L[16 * j + ii] = static_cast<int8_t>(l + 32);
        }
    }
    for (int j = 0; j < kQK_K; j += 128) {
        uint8_t* ql = y.ql + j / 2;
        uint8_t* qh = y.qh + j / 4;
        for (int l = 0; l < 32; ++l) {
            const int q1 = L[j + l] & 15;
            const int q2 = L[j + l + 32] & 15;
            const int q3 = L[j + l + 64] & 15;
            const int q4 = L[j + l + 96] & 15;
            ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
            ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
            qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                         ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
        }
    }
}

}  // namespace

void quantize_row_q4_k(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<BlockQ4_K*>(dst);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        uint8_t L[kQK_K];
        k_quantize_block(x + i * kQK_K, qw ? qw + i * kQK_K : nullptr, 15, y[i], L);
        for (int j = 0; j < kQK_K; j += 64)
            for (int l = 0; l < 32; ++l)
                y[i].qs[j / 2 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
}

void quantize_row_q5_k(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<BlockQ5_K*>(dst);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        uint8_t L[kQK_K];
        k_quantize_block(x + i * kQK_K, qw ? qw + i * kQK_K : nullptr, 31, y[i], L);
        std::memset(y[i].qh, 0, sizeof(y[i].qh));
        for (int e = 0; e < kQK_K; ++e) {
            if (L[e] > 15)
                y[i].qh[e % 32] = static_cast<uint8_t>(y[i].qh[e % 32] | (1 << (e / 32)));
        }
        for (int j = 0; j < kQK_K; j += 64)
            for (int l = 0; l < 32; ++l)
                y[i].qs[j / 2 + l] =
                    static_cast<uint8_t>((L[j + l] & 15) | ((L[j + l + 32] & 15) << 4));
    }
}

void quantize_row_q6_k(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<BlockQ6_K*>(dst);
    for (int64_t i = 0; i < n / kQK_K; ++i)
        q6_k_block(x + i * kQK_K, qw ? qw + i * kQK_K : nullptr, y[i]);
}

namespace {

// Q4_K and Q5_K blocks: 8 sub-blocks of 32 values with 6-bit scales and mins; the
// low 4 bits of value l of sub-block j in qs, fifth(block, l, j) its fifth bit
// (always 0 for Q4_K) already shifted to bit 4.
template <class Block, class Fifth>
void dequantize_rows_k45(const Block* x, float* dst, int64_t n, Fifth fifth) {
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        const float d = load_f16(x[i].d);
        const float min = load_f16(x[i].dmin);
        for (int j = 0; j < 8; ++j) {
            int sc = 0;
            int m = 0;
            get_scale_min_k4(j, x[i].scales, &sc, &m);
            const float d1 = d * static_cast<float>(sc);
            const float m1 = min * static_cast<float>(m);
            const uint8_t* q = x[i].qs + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            for (int l = 0; l < 32; ++l)
                dst[32 * j + l] = d1 * static_cast<float>(((q[l] >> shift) & 15) + fifth(x[i], l, j)) - m1;
        }
        dst += kQK_K;
    }
}

}  // namespace

void dequantize_row_q4_k(const void* src, float* dst, int64_t n) {
    dequantize_rows_k45(static_cast<const BlockQ4_K*>(src), dst, n, [](const BlockQ4_K&, int, int) { return 0; });
}

void dequantize_row_q5_k(const void* src, float* dst, int64_t n) {
    dequantize_rows_k45(static_cast<const BlockQ5_K*>(src), dst, n,
                        [](const BlockQ5_K& b, int l, int j) { return ((b.qh[l] >> j) & 1) << 4; });
}

void dequantize_row_q6_k(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockQ6_K*>(src);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        const float d = load_f16(x[i].d);
        for (int h = 0; h < 2; ++h) {
            const uint8_t* ql = x[i].ql + 64 * h;
            const uint8_t* qh = x[i].qh + 32 * h;
            const int8_t* sc = x[i].scales + 8 * h;
            float* y = dst + 128 * h;
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
                y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
                y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
                y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
            }
        }
        dst += kQK_K;
    }
}

}  // namespace hf2q::quant::detail

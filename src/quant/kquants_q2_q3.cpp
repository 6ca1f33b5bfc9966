// Q2_K and Q3_K: 256-element super-blocks of 16 sub-blocks of 16 (spec §4.1, §4.2, §4.7).
//
// 2-bit layout shared by both: element e = 128h + 32g + t lives in bits 2g..2g+1 of
// qs[32h + t]. Q3_K adds a high bit, bit e/32 of hmask[e%32], and 6-bit scale codes packed
// as 4 low bits in scales[0..7] (two per byte) plus 2 high bits in scales[8..11].
#include <cmath>
#include <cstring>

#include "quant/quant_impl.h"

namespace hf2q::quant::detail {
namespace {

void pack_2bit(const uint8_t* L, uint8_t* qs) {
    for (int j = 0; j < kQK_K; j += 128)
        for (int l = 0; l < 32; ++l)
            qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                                 (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

// Re-quantizes Q2_K codes against the stored (rounded) scales; sub-blocks whose scale code
// is 0 keep the codes of the search.
void q2_k_requantize(const float* x, const BlockQ2_K& y, uint8_t* L) {
    const float dd = load_f16(y.d);
    const float dmin = load_f16(y.dmin);
    for (int j = 0; j < 16; ++j) {
        const float d = dd * static_cast<float>(y.scales[j] & 15);
        if (d == 0.0f) continue;
        const float dm = dmin * static_cast<float>(y.scales[j] >> 4);
        for (int ii = 0; ii < 16; ++ii) {
            const int l = nearest_int((x[16 * j + ii] + dm) / d);
            L[16 * j + ii] = static_cast<uint8_t>(clamp_int(l, 0, 3));
        }
    }
}

void q2_k_block_ref(const float* x, BlockQ2_K& y) {
    uint8_t L[kQK_K];
    uint8_t aux[16];
    float weights[16];
    float mins[16];
    float scales[16];
    float max_scale = 0.0f;
    float max_min = 0.0f;
    for (int j = 0; j < 16; ++j) {
        for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
        scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], aux, -0.5f,
                                     0.1f, 15, true);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
        const float iscale = 15.0f / max_scale;
        for (int j = 0; j < 16; ++j)
            y.scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
        store_f16(y.d, max_scale / 15.0f);
    } else {
        std::memset(y.scales, 0, sizeof(y.scales));
        store_f16(y.d, 0.0f);
    }
    if (max_min > 0) {
        const float iscale = 15.0f / max_min;
        for (int j = 0; j < 16; ++j)
            y.scales[j] = static_cast<uint8_t>(y.scales[j] | (nearest_int(iscale * mins[j]) << 4));
        store_f16(y.dmin, max_min / 15.0f);
    } else {
        store_f16(y.dmin, 0.0f);
    }
    q2_k_requantize(x, y, L);
    pack_2bit(L, y.qs);
}

void q2_k_block_imatrix(const float* x, const float* qw, BlockQ2_K& y) {
    uint8_t L[kQK_K];
    uint8_t aux[16];
    uint8_t Ls[16];
    uint8_t Lm[16];
    float weight[16];
    float sw[16];
    float mins[16];
    float scales[16];
    float sumx2 = 0.0f;
    for (int j = 0; j < kQK_K; ++j) sumx2 += x[j] * x[j];
    const float sigma2 = sumx2 / static_cast<float>(kQK_K);
    for (int j = 0; j < 16; ++j) {
        sw[j] = importance_weights(x + 16 * j, qw + 16 * j, 16, sigma2, weight);
        scales[j] = make_qkx3_quants(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], aux, -0.9f,
                                     0.05f, 36, false);
    }
    const float dm = make_qp_quants(16, 15, scales, Ls, sw);
    const float mm = make_qp_quants(16, 15, mins, Lm, sw);
    store_f16(y.d, dm);
    store_f16(y.dmin, mm);
    for (int j = 0; j < 16; ++j) y.scales[j] = static_cast<uint8_t>(Ls[j] | (Lm[j] << 4));
    q2_k_requantize(x, y, L);
    pack_2bit(L, y.qs);
}

// 6-bit scale code of Q3_K sub-block s (0..15), 0..63.
int q3_k_scale_code(const uint8_t* scales, int s) {
    const int lo = s < 8 ? (scales[s] & 15) : (scales[s - 8] >> 4);
    const int hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    return lo | (hi << 4);
}

void q3_k_set_scale_code(uint8_t* scales, int s, int code) {
    if (s < 8)
        scales[s] = static_cast<uint8_t>(code & 15);
    else
        scales[s - 8] = static_cast<uint8_t>(scales[s - 8] | ((code & 15) << 4));
    scales[8 + s % 4] = static_cast<uint8_t>(scales[8 + s % 4] | ((code >> 4) << (2 * (s / 4))));
}

// Re-quantizes against the stored scales, then splits codes 0..7 into hmask and 2-bit qs.
void q3_k_finish(const float* x, BlockQ3_K& y, int8_t* L) {
    const float dd = load_f16(y.d);
    for (int j = 0; j < 16; ++j) {
        const float d = dd * static_cast<float>(q3_k_scale_code(y.scales, j) - 32);
        if (d == 0.0f) continue;
        for (int ii = 0; ii < 16; ++ii) {
            const int l = clamp_int(nearest_int(x[16 * j + ii] / d), -4, 3);
            L[16 * j + ii] = static_cast<int8_t>(l + 4);
        }
    }
    std::memset(y.hmask, 0, sizeof(y.hmask));
    uint8_t low[kQK_K];
    for (int e = 0; e < kQK_K; ++e) {
        int l = L[e];
        if (l > 3) {
            y.hmask[e % 32] = static_cast<uint8_t>(y.hmask[e % 32] | (1 << (e / 32)));
            l -= 4;
        }
        low[e] = static_cast<uint8_t>(l);
    }
    pack_2bit(low, y.qs);
}

void q3_k_block_ref(const float* x, BlockQ3_K& y) {
    int8_t L[kQK_K];
    float scales[16];
    float max_scale = 0.0f;
    float amax = 0.0f;
    for (int j = 0; j < 16; ++j) {
        scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j, true);
        const float scale = std::fabs(scales[j]);
        if (scale > amax) {
            amax = scale;
            max_scale = scales[j];
        }
    }
    std::memset(y.scales, 0, sizeof(y.scales));
    if (max_scale != 0.0f) {
        const float iscale = -32.0f / max_scale;
        for (int j = 0; j < 16; ++j) {
            // ggml stores the rounded value in an int8 before clamping.
            const auto l8 = static_cast<int8_t>(nearest_int(iscale * scales[j]));
            q3_k_set_scale_code(y.scales, j, clamp_int<int>(l8, -32, 31) + 32);
        }
        store_f16(y.d, 1.0f / iscale);
    } else {
        store_f16(y.d, 0.0f);
    }
    q3_k_finish(x, y, L);
}

void q3_k_block_imatrix(const float* x, const float* qw, BlockQ3_K& y) {
    int8_t L[kQK_K];
    int8_t Ls[16];
    float weight[16];
    float sw[16];
    float scales[16];
    float sumx2 = 0.0f;
    for (int j = 0; j < kQK_K; ++j) sumx2 += x[j] * x[j];
    const float sigma2 = 2.0f * sumx2 / static_cast<float>(kQK_K);
    for (int j = 0; j < 16; ++j) {
        sw[j] = importance_weights(x + 16 * j, qw + 16 * j, 16, sigma2, weight);
        scales[j] = make_qx_quants(16, 4, x + 16 * j, L + 16 * j, 1, weight);
    }
    std::memset(y.scales, 0, sizeof(y.scales));
    const float d_block = make_qx_quants(16, 32, scales, Ls, 1, sw);
    for (int j = 0; j < 16; ++j) q3_k_set_scale_code(y.scales, j, Ls[j]);
    store_f16(y.d, d_block);
    q3_k_finish(x, y, L);
}

}  // namespace

void quantize_row_q2_k(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<BlockQ2_K*>(dst);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        if (qw)
            q2_k_block_imatrix(x + i * kQK_K, qw + i * kQK_K, y[i]);
        else
            q2_k_block_ref(x + i * kQK_K, y[i]);
    }
}

void quantize_row_q3_k(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<BlockQ3_K*>(dst);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        if (qw)
            q3_k_block_imatrix(x + i * kQK_K, qw + i * kQK_K, y[i]);
        else
            q3_k_block_ref(x + i * kQK_K, y[i]);
    }
}

// Both decoders walk element e = 128h + 32g + 16k + l (sub-block 8h + 2g + k), which reads
// bits 2g of qs[32h + 16k + l] and, for Q3_K, bit 4h + g of hmask[16k + l].
void dequantize_row_q2_k(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockQ2_K*>(src);
    for (int64_t i = 0; i < n / kQK_K; ++i, dst += kQK_K) {
        const float d = load_f16(x[i].d);
        const float min = load_f16(x[i].dmin);
        for (int h = 0; h < 2; ++h)
            for (int g = 0; g < 4; ++g)
                for (int k = 0; k < 2; ++k) {
                    const uint8_t sc = x[i].scales[8 * h + 2 * g + k];
                    const float dl = d * static_cast<float>(sc & 15);
                    const float ml = min * static_cast<float>(sc >> 4);
                    const uint8_t* q = x[i].qs + 32 * h + 16 * k;
                    float* y = dst + 128 * h + 32 * g + 16 * k;
                    for (int l = 0; l < 16; ++l)
                        y[l] = dl * static_cast<float>((q[l] >> (2 * g)) & 3) - ml;
                }
    }
}

void dequantize_row_q3_k(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockQ3_K*>(src);
    for (int64_t i = 0; i < n / kQK_K; ++i, dst += kQK_K) {
        const float d_all = load_f16(x[i].d);
        for (int h = 0; h < 2; ++h)
            for (int g = 0; g < 4; ++g)
                for (int k = 0; k < 2; ++k) {
                    const int s = 8 * h + 2 * g + k;
                    const float dl =
                        d_all * static_cast<float>(q3_k_scale_code(x[i].scales, s) - 32);
                    const uint8_t* q = x[i].qs + 32 * h + 16 * k;
                    const uint8_t* hm = x[i].hmask + 16 * k;
                    float* y = dst + 128 * h + 32 * g + 16 * k;
                    for (int l = 0; l < 16; ++l) {
                        const int low = (q[l] >> (2 * g)) & 3;
                        const int high = (hm[l] >> (4 * h + g)) & 1;
                        y[l] = dl * static_cast<float>(low - (high ? 0 : 4));
                    }
                }
    }
}

}  // namespace hf2q::quant::detail

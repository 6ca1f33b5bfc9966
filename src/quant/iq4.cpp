// IQ4_NL (blocks of 32, one f16 scale) and IQ4_XS (super-blocks of 256: f16 d plus a 6-bit
// scale per 32-element block) over the non-linear codebook kValuesIQ4NL; spec §3.8, §5.1, §6.
//
// Both quantizers are ggml's quantize_row_iq4_nl_impl with ntry = 7, the setting
// ggml_quantize_chunk uses with and without an importance matrix. Nibble order per 32-element
// group: byte j = element j (low nibble) | element j+16 (high nibble).
#include <cmath>
#include <cstring>

#include "quant/quant_impl.h"

namespace hf2q::quant::detail {
namespace {

constexpr int kNtry = 7;

// Nearest codebook index; ties go to the upper index.
int best_index(float x) {
    const int8_t* v = kValuesIQ4NL;
    if (x <= static_cast<float>(v[0])) return 0;
    if (x >= static_cast<float>(v[15])) return 15;
    int ml = 0;
    int mu = 15;
    while (mu - ml > 1) {
        const int mav = (ml + mu) / 2;
        if (x < static_cast<float>(v[mav]))
            mu = mav;
        else
            ml = mav;
    }
    return x - static_cast<float>(v[mu - 1]) < static_cast<float>(v[mu]) - x ? mu - 1 : mu;
}

// Best scale for one 32-element block xb with weights w (codes into L); 0 for a zero block.
float block_scale(const float* xb, const float* w, uint8_t* L) {
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < kQK; ++j) {
        const float ax = std::fabs(xb[j]);
        if (ax > amax) {
            amax = ax;
            max = xb[j];
        }
    }
    if (amax < kGroupMaxEps) return 0.0f;
    const auto v0 = static_cast<float>(kValuesIQ4NL[0]);
    float d = -max / v0;
    float id = 1.0f / d;
    float sumqx = 0.0f;
    float sumq2 = 0.0f;
    for (int j = 0; j < kQK; ++j) {
        const int l = best_index(id * xb[j]);
        L[j] = static_cast<uint8_t>(l);
        const auto q = static_cast<float>(kValuesIQ4NL[l]);
        sumqx += w[j] * q * xb[j];
        sumq2 += w[j] * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int itry = -kNtry; itry <= kNtry; ++itry) {
        id = static_cast<float>(itry + kValuesIQ4NL[0]) / max;
        sumqx = 0.0f;
        sumq2 = 0.0f;
        for (int j = 0; j < kQK; ++j) {
            const auto q = static_cast<float>(kValuesIQ4NL[best_index(id * xb[j])]);
            sumqx += w[j] * q * xb[j];
            sumq2 += w[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

// Per-block scales of a super-block of nb blocks (x: 32·nb values); L gets the search codes.
// Returns the scale of largest magnitude.
float super_block_scales(const float* x, const float* qw, int nb, float* scales, uint8_t* L) {
    const int n = kQK * nb;
    float sigma2 = 0.0f;
    for (int j = 0; j < n; ++j) sigma2 += x[j] * x[j];
    sigma2 *= 2.0f / static_cast<float>(n);
    float max_scale = 0.0f;
    float amax_scale = 0.0f;
    float w[kQK];
    for (int ib = 0; ib < nb; ++ib) {
        const float* xb = x + kQK * ib;
        for (int j = 0; j < kQK; ++j)
            w[j] = qw ? qw[kQK * ib + j] * std::sqrt(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
        scales[ib] = block_scale(xb, w, L + kQK * ib);
        const float abs_d = std::fabs(scales[ib]);
        if (abs_d > amax_scale) {
            amax_scale = abs_d;
            max_scale = scales[ib];
        }
    }
    return max_scale;
}

void pack_nibbles(const uint8_t* L, int n, uint8_t* qs) {
    for (int g = 0; g < n / kQK; ++g)
        for (int j = 0; j < 16; ++j)
            qs[16 * g + j] = static_cast<uint8_t>(L[32 * g + j] | (L[32 * g + 16 + j] << 4));
}

}  // namespace

void quantize_row_iq4_nl(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<BlockIQ4_NL*>(dst);
    for (int64_t ib = 0; ib < n / kQK; ++ib) {
        const float* xb = x + kQK * ib;
        uint8_t L[kQK] = {};
        float scale = 0.0f;
        super_block_scales(xb, qw ? qw + kQK * ib : nullptr, 1, &scale, L);
        store_f16(y[ib].d, scale);
        const float id = scale != 0.0f ? 1.0f / scale : 0.0f;
        for (int j = 0; j < kQK; ++j) L[j] = static_cast<uint8_t>(best_index(id * xb[j]));
        pack_nibbles(L, kQK, y[ib].qs);
    }
}

void quantize_row_iq4_xs(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<BlockIQ4_XS*>(dst);
    constexpr int kNb = kQK_K / kQK;
    for (int64_t ibl = 0; ibl < n / kQK_K; ++ibl) {
        const float* xs = x + kQK_K * ibl;
        uint8_t L[kQK_K] = {};
        float scales[kNb];
        const float max_scale =
            super_block_scales(xs, qw ? qw + kQK_K * ibl : nullptr, kNb, scales, L);
        const float d = -max_scale / 32.0f;
        store_f16(y[ibl].d, d);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t scales_h = 0;
        for (int ib = 0; ib < kNb; ++ib) {
            const int l = clamp_int(nearest_int(id * scales[ib]), -32, 31);
            const float dl = d * static_cast<float>(l);
            const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
            for (int j = 0; j < kQK; ++j)
                L[kQK * ib + j] = static_cast<uint8_t>(best_index(idl * xs[kQK * ib + j]));
            const int c = l + 32;
            if (ib % 2 == 0)
                y[ibl].scales_l[ib / 2] = static_cast<uint8_t>(c & 15);
            else
                y[ibl].scales_l[ib / 2] =
                    static_cast<uint8_t>(y[ibl].scales_l[ib / 2] | ((c & 15) << 4));
            scales_h = static_cast<uint16_t>(scales_h | ((c >> 4) << (2 * ib)));
        }
        store_u16(y[ibl].scales_h, scales_h);
        pack_nibbles(L, kQK_K, y[ibl].qs);
    }
}

void dequantize_row_iq4_nl(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockIQ4_NL*>(src);
    for (int64_t ib = 0; ib < n / kQK; ++ib, dst += kQK) {
        const float d = load_f16(x[ib].d);
        for (int j = 0; j < 16; ++j) {
            dst[j] = d * static_cast<float>(kValuesIQ4NL[x[ib].qs[j] & 15]);
            dst[j + 16] = d * static_cast<float>(kValuesIQ4NL[x[ib].qs[j] >> 4]);
        }
    }
}

void dequantize_row_iq4_xs(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockIQ4_XS*>(src);
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        const float d = load_f16(x[i].d);
        const uint16_t scales_h = load_u16(x[i].scales_h);
        for (int ib = 0; ib < kQK_K / kQK; ++ib, dst += kQK) {
            const int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 15) |
                           (((scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d * static_cast<float>(ls - 32);
            const uint8_t* qs = x[i].qs + 16 * ib;
            for (int j = 0; j < 16; ++j) {
                dst[j] = dl * static_cast<float>(kValuesIQ4NL[qs[j] & 15]);
                dst[j + 16] = dl * static_cast<float>(kValuesIQ4NL[qs[j] >> 4]);
            }
        }
    }
}

}  // namespace hf2q::quant::detail

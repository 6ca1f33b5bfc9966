// MXFP4 (OCP microscaling FP4): blocks of 32 E2M1 values sharing one E8M0 exponent byte.
// Layout: e @0, qs[16] @1 (element j low nibble, j+16 high nibble). The table holds doubled
// E2M1 values, so the scale is 2^(e-128) rather than 2^(e-127). Spec §3.9; the reference
// quantizer ignores importance weights.
#include <cmath>

#include "quant/quant_impl.h"

namespace hf2q::quant::detail {
namespace {

// Index of the table entry nearest to x at scale d; ties keep the lower index.
int best_index_mxfp4(float x, float d) {
    int best = 0;
    float best_err = std::fabs(static_cast<float>(kValuesMXFP4[0]) * d - x);
    for (int i = 1; i < 16; ++i) {
        const float err = std::fabs(static_cast<float>(kValuesMXFP4[i]) * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

// Shared exponent: floor(log2(amax)) - 2 + 127, or 0 for an all-zero block. ggml converts the
// float to uint8 directly; for amax < 2^-125 (or inf) that is out of range, and x86 converts
// through a 32-bit integer and keeps the low byte, which trunc_to_i32 reproduces without UB.
uint8_t shared_exponent(float amax) {
    if (!(amax > 0.0f)) return 0;
    const float e = std::floor(std::log2(amax)) - 2.0f + 127.0f;
    return static_cast<uint8_t>(trunc_to_i32(e) & 0xFF);
}

}  // namespace

void quantize_row_mxfp4(const float* x, void* dst, int64_t n, const float*) {
    auto* y = static_cast<BlockMXFP4*>(dst);
    for (int64_t ib = 0; ib < n / kQK; ++ib) {
        const float* xb = x + kQK * ib;
        float amax = 0.0f;
        for (int j = 0; j < kQK; ++j)
            if (amax < std::fabs(xb[j])) amax = std::fabs(xb[j]);
        const uint8_t e = shared_exponent(amax);
        const float d = e8m0_to_fp32_half(e);
        y[ib].e = e;
        for (int j = 0; j < kQK / 2; ++j) {
            const int q0 = best_index_mxfp4(xb[j], d);
            const int q1 = best_index_mxfp4(xb[j + 16], d);
            y[ib].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

void dequantize_row_mxfp4(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockMXFP4*>(src);
    for (int64_t ib = 0; ib < n / kQK; ++ib, dst += kQK) {
        const float d = e8m0_to_fp32_half(x[ib].e);
        for (int j = 0; j < kQK / 2; ++j) {
            dst[j] = static_cast<float>(kValuesMXFP4[x[ib].qs[j] & 15]) * d;
            dst[j + 16] = static_cast<float>(kValuesMXFP4[x[ib].qs[j] >> 4]) * d;
        }
    }
}

}  // namespace hf2q::quant::detail

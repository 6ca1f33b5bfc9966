// F32, F16 and BF16 rows, and the scalar FP16/BF16 conversions with ggml's rounding:
// FP32->FP16 round-to-nearest-even with subnormals, overflow to inf, NaN -> 0x7E00 (sign
// kept); FP32->BF16 round-to-nearest-even on the dropped 16 bits, NaN forced quiet.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "quant/quant_impl.h"

namespace hf2q::quant {

namespace {
uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
}
float float_of(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
}
}  // namespace

uint16_t fp32_to_fp16(float f) {
    const uint32_t u = bits_of(f);
    const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return sign | 0x7E00u;   // NaN
    if (a >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 rounds to inf (or is inf)
    if (a >= 0x38800000u) {                       // normal half: |f| >= 2^-14
        // Rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even;
        // a mantissa carry correctly bumps the exponent.
        const uint32_t r = a - 0x38000000u;
        return sign | static_cast<uint16_t>((r + 0xFFFu + ((r >> 13) & 1u)) >> 13);
    }
    // Subnormal half or zero: adding 0.5 puts the half's unit 2^-24 at the float's last
    // mantissa bit, so the hardware's round-to-nearest-even does the rounding.
    const float v = float_of(a) + 0.5f;
    return sign | static_cast<uint16_t>(bits_of(v) - 0x3F000000u);
}

uint8_t fp32_to_e4m3(float f) {
    const uint32_t u = bits_of(f);
    const auto sign = static_cast<uint8_t>((u >> 24) & 0x80u);
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return sign | 0x7Fu;      // NaN
    if (a >= 0x43E00000u) return sign | 0x7Eu;     // >= 448 (and inf): satfinite
    if (a >= 0x3C800000u) {                        // normal: |f| >= 2^-6
        // Rebias the exponent (127 -> 7), keep 3 mantissa bits, round the 20 dropped
        // bits to nearest even. Below 448 the carry never reaches the NaN code.
        const uint32_t e = (a >> 23) - 120u, m = a & 0x7FFFFFu;
        uint32_t r = (e << 3) | (m >> 20);
        const uint32_t rem = m & 0xFFFFFu;
        if (rem > 0x80000u || (rem == 0x80000u && (r & 1u))) ++r;
        return static_cast<uint8_t>(sign | r);
    }
    // Subnormal steps of 2^-9: k = |f|·2^9 rounded to nearest even (exact scaling);
    // k = 8 is the smallest normal, code 0x08.
    const float k = std::rint(float_of(a) * 512.0f);
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(k));
}

float e4m3_to_fp32(uint8_t c) {
    const uint32_t e = (c >> 3) & 15u, m = c & 7u;
    float v;
    if (e == 15u && m == 7u)
        v = float_of(0x7FC00000u);
    else if (e == 0u)
        v = static_cast<float>(m) * 0x1p-9f;
    else
        v = float_of(((e + 120u) << 23) | (m << 20));
    return (c & 0x80u) ? -v : v;
}

float quantize_row_i8(const float* x, int8_t* c, int64_t n) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        const float q = std::nearbyint(x[i] * id);  // the default rounding: to nearest even
        // NaN -> 0, as CUDA's float-to-int conversion.
        c[i] = static_cast<int8_t>(q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q == q ? q : 0.0f);
    }
    return d;
}

void quantize_rows_i8(const float* x, int8_t* c, float* d, int64_t nrows, int64_t n) {
    for (int64_t r = 0; r < nrows; ++r) d[r] = quantize_row_i8(x + r * n, c + r * n, n);
}

float fp16_to_fp32(uint16_t h) {
    return detail::half_to_float(h);
}

uint16_t fp32_to_bf16(float f) {
    const uint32_t u = bits_of(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
    return static_cast<uint16_t>((u + (0x7FFFu + ((u >> 16) & 1u))) >> 16);
}

namespace detail {

void quantize_row_f32(const float* x, void* dst, int64_t n, const float*) {
    std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
}
void dequantize_row_f32(const void* src, float* dst, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void quantize_row_f16(const float* x, void* dst, int64_t n, const float*) {
    auto* y = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; ++i) store_u16(y + 2 * i, fp32_to_fp16(x[i]));
}
void dequantize_row_f16(const void* src, float* dst, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = load_f16(p + 2 * i);
}

void quantize_row_bf16(const float* x, void* dst, int64_t n, const float*) {
    auto* y = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; ++i) store_u16(y + 2 * i, fp32_to_bf16(x[i]));
}
void dequantize_row_bf16(const void* src, float* dst, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load_u16(p + 2 * i));
}

}  // namespace detail
}  // namespace hf2q::quant

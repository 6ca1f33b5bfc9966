// F32, F16 and BF16 rows, and the scalar FP16/BF16 conversions with ggml's rounding:
// FP32->FP16 round-to-nearest-even with subnormals, overflow to inf, NaN -> 0x7E00 (sign
// kept); FP32->BF16 round-to-nearest-even on the dropped 16 bits, NaN forced quiet.
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

// ggml block formats: dequantization, reference quantizers (with and without
// importance weights) and dot products, bit-exact with ggml's reference code.
//
// Supported storage types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4. Rows are contiguous blocks; a row of n
// elements needs n to be a multiple of the type's block size.
//
// This library is compiled with floating-point contraction disabled: the quantizers'
// bytes depend on it (docs/formats.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/ggml_type.h"

namespace hf2q::quant {

// True for the storage types listed above.
bool is_supported(GgmlType t);

// Decodes n elements (n a multiple of the block size) from src into dst.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

// Quantizes nrows rows of n_per_row floats into dst as ggml_quantize_chunk does.
// imatrix: nullptr, or n_per_row importance weights (one per column); ignored by
// types whose reference ignores it (Q8_0, MXFP4, F16, BF16, F32).
// Returns the number of bytes written (nrows * row size). Throws hf2q::Error if the
// type is unsupported or n_per_row is not a multiple of the block size.
size_t quantize(GgmlType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                const float* imatrix);

// Dot product of one stored row (n elements of type t) with float activations,
// accumulated in f32. Used by the CPU reference backend's matmul.
float vec_dot_f32(GgmlType t, const void* row, const float* x, int64_t n);

// Scalar conversions with ggml's exact rounding (round-to-nearest-even; NaN rules
// as ggml's reference routines).
uint16_t fp32_to_fp16(float f);
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);
// FP8 E4M3 (the OCP format CUDA's __nv_fp8_e4m3 holds): round to nearest even,
// magnitudes from 448 up (and ±inf) saturate to ±448 (CUDA's __NV_SATFINITE), NaN ->
// 0x7F with its sign; decoding is exact (0x7F / 0xFF decode to NaN).
uint8_t fp32_to_e4m3(float f);
float e4m3_to_fp32(uint8_t c);
// One row of the KV cache's i8 pools (ops/attention.h): d = max|x| / 127 (f32
// division), codes c[i] = rint(x[i] · (1 / d)) (round to nearest even, clamped to
// ±127, NaN to 0; all zeros when d is 0), so that c[i] · d is within d / 2 of x[i]. Returns d.
// The CUDA stores compute the same d and codes bit for bit.
float quantize_row_i8(const float* x, int8_t* c, int64_t n);
// quantize_row_i8 over nrows contiguous rows of n values: codes to c[r·n..], scales to d[r].
void quantize_rows_i8(const float* x, int8_t* c, float* d, int64_t nrows, int64_t n);
inline float bf16_to_fp32(uint16_t h) {
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}

}  // namespace hf2q::quant

// Public entry points of src/quant: argument checks and the one dispatch over GgmlType,
// plus the f32 dot product that decodes stored blocks on the fly.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "core/checked.h"
#include "core/error.h"
#include "quant/quant_impl.h"

namespace hf2q::quant {
namespace {

using QuantizeRowFn = void (*)(const float*, void*, int64_t, const float*);
using DequantizeRowFn = void (*)(const void*, float*, int64_t);

struct TypeOps {
    QuantizeRowFn quantize;
    DequantizeRowFn dequantize;
};

// nullopt for types this library does not handle.
std::optional<TypeOps> type_ops(GgmlType t) {
    using namespace detail;
    switch (t) {
        case GgmlType::F32:
            return TypeOps{quantize_row_f32, dequantize_row_f32};
        case GgmlType::F16:
            return TypeOps{quantize_row_f16, dequantize_row_f16};
        case GgmlType::BF16:
            return TypeOps{quantize_row_bf16, dequantize_row_bf16};
        case GgmlType::Q4_0:
            return TypeOps{quantize_row_q4_0, dequantize_row_q4_0};
        case GgmlType::Q4_1:
            return TypeOps{quantize_row_q4_1, dequantize_row_q4_1};
        case GgmlType::Q5_0:
            return TypeOps{quantize_row_q5_0, dequantize_row_q5_0};
        case GgmlType::Q5_1:
            return TypeOps{quantize_row_q5_1, dequantize_row_q5_1};
        case GgmlType::Q8_0:
            return TypeOps{quantize_row_q8_0, dequantize_row_q8_0};
        case GgmlType::Q2_K:
            return TypeOps{quantize_row_q2_k, dequantize_row_q2_k};
        case GgmlType::Q3_K:
            return TypeOps{quantize_row_q3_k, dequantize_row_q3_k};
        case GgmlType::Q4_K:
            return TypeOps{quantize_row_q4_k, dequantize_row_q4_k};
        case GgmlType::Q5_K:
            return TypeOps{quantize_row_q5_k, dequantize_row_q5_k};
        case GgmlType::Q6_K:
            return TypeOps{quantize_row_q6_k, dequantize_row_q6_k};
        case GgmlType::IQ4_NL:
            return TypeOps{quantize_row_iq4_nl, dequantize_row_iq4_nl};
        case GgmlType::IQ4_XS:
            return TypeOps{quantize_row_iq4_xs, dequantize_row_iq4_xs};
        case GgmlType::MXFP4:
            return TypeOps{quantize_row_mxfp4, dequantize_row_mxfp4};
        case GgmlType::Q8_1:
        case GgmlType::Q8_K:
        case GgmlType::IQ2_XXS:
        case GgmlType::IQ2_XS:
        case GgmlType::IQ3_XXS:
        case GgmlType::IQ1_S:
        case GgmlType::IQ3_S:
        case GgmlType::IQ2_S:
        case GgmlType::I8:
        case GgmlType::I16:
        case GgmlType::I32:
        case GgmlType::I64:
        case GgmlType::F64:
        case GgmlType::IQ1_M:
        case GgmlType::TQ1_0:
        case GgmlType::TQ2_0:
        case GgmlType::NVFP4:
        case GgmlType::Q1_0:
            return std::nullopt;
    }
    return std::nullopt;  // an id outside the enum
}

std::string type_label(GgmlType t) {
    const auto traits = ggml_type_traits(static_cast<uint32_t>(t));
    if (traits) return std::string(traits->name);
    return str_cat("type id ", static_cast<uint32_t>(t));
}

TypeOps require_ops(GgmlType t, const char* what) {
    const auto ops = type_ops(t);
    if (!ops) fail("quant::", what, ": unsupported type ", type_label(t));
    return *ops;
}

uint32_t require_row(GgmlType t, int64_t n, const char* what) {
    const uint32_t bs = ggml_traits(t).block_size;
    if (n < 0 || n % bs != 0)
        fail("quant::", what, ": row length ", n, " is not a non-negative multiple of the ",
             type_label(t), " block size ", bs);
    return bs;
}

// Accumulates Σ a[i]·b[i] into 16 interleaved partial sums: lane k takes i ≡ k (mod 16),
// a fixed order, so results are deterministic. GNU vector types make the lanes SIMD
// registers without relying on the auto-vectoriser (which may not reorder a float sum).
using F32x4 = float __attribute__((vector_size(16)));

inline F32x4 load4(const float* p) {
    F32x4 v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}

void dot_accumulate(const float* a, const float* b, int64_t n, float* acc) {
    F32x4 s[4];
    std::memcpy(s, acc, sizeof(s));
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 4; ++k) s[k] += load4(a + i + 4 * k) * load4(b + i + 4 * k);
    std::memcpy(acc, s, sizeof(s));
    for (int k = 0; i < n; ++i, ++k) acc[k] += a[i] * b[i];
}

}  // namespace

bool is_supported(GgmlType t) {
    return type_ops(t).has_value();
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
    const TypeOps ops = require_ops(t, "dequantize_row");
    require_row(t, n, "dequantize_row");
    ops.dequantize(src, dst, n);
}

size_t quantize(GgmlType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                const float* imatrix) {
    const TypeOps ops = require_ops(t, "quantize");
    require_row(t, n_per_row, "quantize");
    if (nrows < 0) fail("quant::quantize: negative row count ", nrows);
    const uint64_t row_bytes = *ggml_row_size(t, static_cast<uint64_t>(n_per_row));
    const auto total = checked_mul(row_bytes, static_cast<uint64_t>(nrows));
    if (!total || *total > SIZE_MAX)
        fail("quant::quantize: ", nrows, " rows of ", n_per_row, " ", type_label(t),
             " elements overflow the size type");
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t r = 0; r < nrows; ++r)
        ops.quantize(src + r * n_per_row, out + static_cast<uint64_t>(r) * row_bytes, n_per_row,
                     imatrix);
    return static_cast<size_t>(*total);
}

float vec_dot_f32(GgmlType t, const void* row, const float* x, int64_t n) {
    const TypeOps ops = require_ops(t, "vec_dot_f32");
    const uint32_t bs = require_row(t, n, "vec_dot_f32");
    float acc[16] = {};
    if (t == GgmlType::F32 && reinterpret_cast<uintptr_t>(row) % alignof(float) == 0) {
        dot_accumulate(static_cast<const float*>(row), x, n, acc);
    } else {
        // Decode up to 256 elements (whole blocks) into a stack buffer, then dot.
        constexpr int64_t kChunk = 256;
        const uint32_t ts = ggml_traits(t).type_size;
        const auto* src = static_cast<const uint8_t*>(row);
        float buf[kChunk];
        for (int64_t i = 0; i < n; i += kChunk) {
            const int64_t m = std::min(kChunk, n - i);
            ops.dequantize(src + i / bs * ts, buf, m);
            dot_accumulate(buf, x + i, m, acc);
        }
    }
    float sum = 0.0f;
    for (float a : acc) sum += a;
    return sum;
}

}  // namespace hf2q::quant

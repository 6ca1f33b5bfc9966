// The 8-bit activation form of the integer GEMV (gemv_q8.cu), shared by the ops
// that write it directly for the next matmul (ops/prepared.h): elementwise.cu's
// residual norms and GEGLU.
//
// Layout for rows × n values (n a multiple of 32): the int8 values of all rows,
// then (256-byte aligned) per 32 values (d, d·Σq). d = amax / 127, q = round(x / d).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace hf2q::cuda {

struct Q8View {
    int8_t* q = nullptr;   // [rows][n]
    float2* ds = nullptr;  // [rows][n / 32]
};

__host__ __device__ inline size_t q8_scales_offset(int64_t rows, int64_t n) {
    return (static_cast<size_t>(rows) * static_cast<size_t>(n) + 255) / 256 * 256;
}

__host__ __device__ inline Q8View q8_view(void* base, int64_t rows, int64_t n) {
    Q8View v;
    v.q = static_cast<int8_t*>(base);
    v.ds = reinterpret_cast<float2*>(v.q + q8_scales_offset(rows, n));
    return v;
}

// One 32-value block by 8 consecutive lanes of a warp, 4 values (v) each: values
// 4c .. 4c + 3 of row r for the lane of group c (c counted in 4-value groups from
// the row start). Every lane of the warp takes part in the shuffles; `in` says
// whether this lane's values are real (whole 8-lane groups are in or out).
__device__ __forceinline__ void quantize_q8_values(const float (&v)[4], bool in, Q8View out, int64_t r, int64_t n,
                                                   int64_t c) {
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
    for (int off = 1; off < 8; off <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    // One division, then products: four IEEE divisions (each a reciprocal, its
    // refinement and a branch to the slow path) were a sixth of residual_norms_kernel's
    // instructions (ncu, session 27). v·(1/d) differs from v/d by at most an ulp
    // before the rounding to an integer, far below the rounding's own half-step. A
    // scale below FLT_MIN would make 1/d overflow to infinity (and q garbage), so
    // blocks that small (largest value under 127·FLT_MIN, about 1.5e-36) take FLT_MIN
    // as their scale: q·d still gives each value within half a step (before, a block
    // under about 9e-44 got d = 0 and lost its values altogether). A NaN block keeps
    // its NaN scale (and q = 0), so the NaN reaches the product as before.
    constexpr float kMinScale = 1.17549435e-38f;  // FLT_MIN
    float d = amax / 127.0f;
    if (amax > 0.0f && d < kMinScale) d = kMinScale;  // also where amax / 127 underflows to 0
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    uint32_t packed = 0;
    int qsum = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int q = __float2int_rn(v[k] * id);
        packed |= static_cast<uint32_t>(q & 0xff) << (8 * k);
        qsum += q;
    }
#pragma unroll
    for (int off = 1; off < 8; off <<= 1) qsum += __shfl_xor_sync(0xffffffffu, qsum, off);
    if (!in) return;
    reinterpret_cast<uint32_t*>(out.q + r * n)[c] = packed;
    if (c % 8 == 0) out.ds[r * (n / 32) + c / 8] = make_float2(d, d * static_cast<float>(qsum));
}

}  // namespace hf2q::cuda

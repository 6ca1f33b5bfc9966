// Sampling ops (ops/sampling.h): the index of each row's largest logit, so a greedy
// decode step copies one int per output row to the host instead of n_vocab floats.
//
// argmax_rows_kernel: one block per row (blocks stride over rows past the grid).
// Each thread scans its share of the row in increasing index order: a scalar head up
// to the row's first 16-byte boundary (row starts need not be aligned: any stride is
// allowed), the aligned body as float4 loads with four in flight per thread, then a
// scalar tail. Because a thread meets its indices in increasing order, a strict `>`
// keeps the first of equal maxima; warps and then the block combine (value, index)
// pairs by larger value, then lower index, so the row's result is the lowest index of
// its maximum, as runtime::argmax picks it. NaN loses every comparison, so it is
// tracked by a flag OR-ed over the block; +inf wins and is reported after the reduction.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace hf2q::cuda {
namespace {

constexpr int kMaxThreads = 1024;
constexpr int64_t kMaxBlocks = 65535;  // rows beyond this are strided over
constexpr int32_t kNone = INT32_MAX;   // no value above -inf seen yet

struct Best {
    float v;
    int32_t i;
};

// Scan step: indices arrive in increasing order within a thread.
__device__ __forceinline__ void take(Best& b, float v, int32_t i, bool& nan) {
    if (v > b.v) {
        b.v = v;
        b.i = i;
    } else if (isnan(v)) {
        nan = true;
    }
}

__device__ __forceinline__ void take4(Best& b, float4 a, int32_t i, bool& nan) {
    take(b, a.x, i, nan);
    take(b, a.y, i + 1, nan);
    take(b, a.z, i + 2, nan);
    take(b, a.w, i + 3, nan);
}

// Reduction step: indices from anywhere in the row.
__device__ __forceinline__ void combine(Best& b, float ov, int32_t oi) {
    if (ov > b.v || (ov == b.v && oi < b.i)) {
        b.v = ov;
        b.i = oi;
    }
}

__device__ Best warp_best(Best b) {
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, b.v, off);
        const int32_t oi = __shfl_xor_sync(0xffffffffu, b.i, off);
        combine(b, ov, oi);
    }
    return b;
}

// This thread's best of x[0..n).
__device__ Best scan_row(const float* x, int32_t n, bool& nan) {
    Best b{-INFINITY, kNone};
    const int32_t T = static_cast<int32_t>(blockDim.x), t = static_cast<int32_t>(threadIdx.x);
    // Floats before the first 16-byte boundary (float pointers are 4-byte aligned).
    const auto misalign = static_cast<int32_t>(reinterpret_cast<uintptr_t>(x) & 15u);
    const int32_t head = min(n, ((16 - misalign) & 15) / 4);
    if (t < head) take(b, x[t], t, nan);
    const float4* v4 = reinterpret_cast<const float4*>(x + head);
    const int32_t nv = (n - head) / 4;
    int32_t j = t;
    for (; j + 3 * T < nv; j += 4 * T) {
        float4 a[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) a[u] = __ldg(v4 + j + u * T);
#pragma unroll
        for (int u = 0; u < 4; ++u) take4(b, a[u], head + 4 * (j + u * T), nan);
    }
    for (; j < nv; j += T) take4(b, __ldg(v4 + j), head + 4 * j, nan);
    for (int32_t i = head + 4 * nv + t; i < n; i += T) take(b, x[i], i, nan);
    return b;
}

__global__ void __launch_bounds__(kMaxThreads)
    argmax_rows_kernel(ops::ArgmaxRowsParams p, int64_t stride) {
    pdl_begin();
    __shared__ float best_v[kMaxThreads / 32];
    __shared__ int32_t best_i[kMaxThreads / 32];
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
    const int n_warps = static_cast<int>(blockDim.x / 32);
    for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
        bool nan = false;
        Best b = warp_best(scan_row(p.x + r * stride, static_cast<int32_t>(p.n), nan));
        if (lane == 0) {
            best_v[warp] = b.v;
            best_i[warp] = b.i;
        }
        const bool any_nan = __syncthreads_or(nan) != 0;  // also publishes best_v / best_i
        if (warp == 0) {
            b = lane < n_warps ? Best{best_v[lane], best_i[lane]} : Best{-INFINITY, kNone};
            b = warp_best(b);
            if (lane == 0) {
                int32_t out = b.i;
                if (any_nan)
                    out = ops::kArgmaxNaN;
                else if (b.v == INFINITY)
                    out = ops::kArgmaxPosInf;
                else if (b.i == kNone)
                    out = ops::kArgmaxAllNegInf;
                p.out[r] = out;
            }
        }
        __syncthreads();  // the next row rewrites best_v / best_i
    }
}

// About 16 values per thread, whole warps, at most kMaxThreads.
int threads_for(int64_t n) {
    const int64_t want = (n + 15) / 16;
    return static_cast<int>(std::clamp<int64_t>((want + 31) / 32 * 32, 32, kMaxThreads));
}

}  // namespace

void launch_argmax_rows(const ops::ArgmaxRowsParams& p, cudaStream_t s) {
    if (!ops::check_argmax_rows(p)) return;
    const auto blocks = static_cast<unsigned>(std::min(p.rows, kMaxBlocks));
    launch(argmax_rows_kernel, blocks, threads_for(p.n), 0, s, p, ops::argmax_stride(p));
    HF2Q_CUDA_LAUNCH_CHECK();
}

}  // namespace hf2q::cuda

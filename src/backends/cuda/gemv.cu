// Matrix-vector products for decode and small batches, dense and grouped by expert.
//
// Two weight rows per block of four warps: the threads walk the rows in 8-value
// chunks (dq8 decodes a chunk with one read of its block's scales) and dot each
// chunk with up to 8 activation rows (each activation chunk loaded once for both
// rows), so every weight byte comes from memory once per 8 activation rows;
// further rows re-read the block's weight rows from L1/L2. Grouped (MoE) launches add a grid dimension over the active experts: block
// y finds the y-th expert with rows (a ballot scan of the offsets) and runs that
// expert's rows, so no routing information goes through the host.
#include "backends/cuda/common.cuh"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/gemv.h"
#include "backends/cuda/grouping.cuh"

namespace hf2q::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kRows = 2;  // weight rows per block, sharing each activation load

__device__ __forceinline__ void load8(const float* x, bool vec, float (&v)[8]) {  // activations
    if (vec) {
        const float4 a = reinterpret_cast<const float4*>(x)[0];
        const float4 b = reinterpret_cast<const float4*>(x)[1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = x[k];
    }
}

// NT: activation rows per pass over the weights (1 for single-token decode keeps
// the registers, and so the occupancy, of the common case low).
//
// A block of kWarps warps computes kRows weight rows; its 128 threads split the
// row length (thread j takes the 8-value chunks j, j + 128, ...), so even a
// matrix of a few thousand rows puts every SM to work with many loads in flight.
// Partial sums are reduced in the warp, then across the warps in shared memory.
template <GgmlType T, int NT>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(GemvArgs a) {
    pdl_begin();
    __shared__ float part[kWarps][kRows][NT];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t o0 = blockIdx.x * static_cast<int64_t>(kRows);
    int64_t r0 = 0, r1 = a.n_rows;
    const uint8_t* w = a.w;
    if (a.offsets != nullptr) {
        const int e = active_expert(a.offsets, a.n_experts, static_cast<int>(blockIdx.y));
        if (e < 0) return;  // uniform across the block
        r0 = a.offsets[e];
        r1 = a.offsets[e + 1];
        w += static_cast<uint64_t>(e) * a.expert_bytes;
    }
    const int nrow = static_cast<int>(a.n_out - o0 < kRows ? a.n_out - o0 : kRows);
    const uint8_t* row[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) row[r] = w + static_cast<uint64_t>(o0 + (r < nrow ? r : 0)) * a.row_bytes;
    const int64_t n8 = a.n_in / 8 * 8;
    const bool vec = a.x_vec;
    constexpr int kThreads = kWarps * 32;
    for (int64_t c0 = r0; c0 < r1; c0 += NT) {
        const int nt = static_cast<int>(r1 - c0 < NT ? r1 - c0 : NT);
        const float* xr[NT];
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const int64_t r = c0 + (t < nt ? t : 0);
            xr[t] = a.x + (a.x_rows ? static_cast<int64_t>(a.x_rows[r]) : r) * a.x_stride;
        }
        float acc[kRows][NT] = {};
#pragma unroll 2
        for (int64_t i = 8 * static_cast<int64_t>(threadIdx.x); i < n8; i += 8 * kThreads) {
            float wv[kRows][8];
#pragma unroll
            for (int r = 0; r < kRows; ++r) dq8<T>(row[r], i, wv[r]);
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t < nt) {
                    float xv[8];
                    load8(xr[t] + i, vec, xv);
#pragma unroll
                    for (int r = 0; r < kRows; ++r)
#pragma unroll
                        for (int k = 0; k < 8; ++k) acc[r][t] = fmaf(wv[r][k], xv[k], acc[r][t]);
                }
            }
        }
        for (int64_t i = n8 + threadIdx.x; i < a.n_in; i += kThreads) {  // rows not a multiple of 8
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                const float wv = dq<T>(row[r], i);
#pragma unroll
                for (int t = 0; t < NT; ++t)
                    if (t < nt) acc[r][t] = fmaf(wv, xr[t][i], acc[r][t]);
            }
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                float v = acc[r][t];
                for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
                if (lane == 0) part[warp][r][t] = v;
            }
        __syncthreads();
        if (threadIdx.x < kRows * NT) {
            const int r = static_cast<int>(threadIdx.x) / NT, t = static_cast<int>(threadIdx.x) % NT;
            float v = 0.0f;
#pragma unroll
            for (int q = 0; q < kWarps; ++q) v += part[q][r][t];
            if (t < nt && r < nrow) a.y[(c0 + t) * a.y_stride + o0 + r] = v;
        }
        __syncthreads();
    }
}

}  // namespace

void launch_gemv(const GemvArgs& a, int64_t max_active_experts, cudaStream_t s) {
    if (a.n_out <= 0 || (a.offsets == nullptr && a.n_rows <= 0) || max_active_experts <= 0) return;
    GemvArgs args = a;
    args.x_vec = x_rows_vec16(a);
    const dim3 grid(static_cast<unsigned>((a.n_out + kRows - 1) / kRows),
                    static_cast<unsigned>(a.offsets ? max_active_experts : 1));
    HF2Q_ASSERT(grid.y <= 65535);
    // One activation row per pass when rows are single (decode; experts with one
    // routed token on average), else eight.
    const int64_t groups = a.offsets ? a.n_experts : 1;
    const bool single = a.offsets ? a.n_rows <= groups : a.n_rows == 1;
    bool ok = dispatch_type(a.type, [&]<GgmlType T>() {
        if (single)
            launch(gemv_kernel<T, 1>, grid, kWarps * 32, 0, s, args);
        else
            launch(gemv_kernel<T, 8>, grid, kWarps * 32, 0, s, args);
    });
    if (!ok) fail("CUDA matmul: unsupported weight type ", ggml_type_name(a.type));
    HF2Q_CUDA_LAUNCH_CHECK();
}

}  // namespace hf2q::cuda

// Matrix-vector products for decode and small batches, dense and grouped by expert.
//
// One warp per output row: the lanes walk the row in 8-value chunks (dq8 decodes a
// chunk with one read of its block's scales) and dot each chunk with up to kChunk
// activation rows, so every weight byte comes from memory once per kChunk rows;
// further chunks of rows re-read the warp's weight row from L1/L2. Four warps per
// block. Grouped (MoE) launches add a grid dimension over the active experts: block
// y finds the y-th expert with rows (a ballot scan of the offsets) and runs that
// expert's rows, so no routing information goes through the host.
#include "backends/cuda/common.cuh"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/gemv.h"

namespace hf2q::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kChunk = 8;

// Index of the y-th expert whose row range is not empty, or −1 (whole warp).
__device__ int active_expert(const int32_t* offsets, int64_t n_experts, int y) {
    const int lane = threadIdx.x % 32;
    int seen = 0;
    for (int64_t e0 = 0; e0 < n_experts; e0 += 32) {
        const int64_t e = e0 + lane;
        const bool has = e < n_experts && offsets[e + 1] > offsets[e];
        const unsigned mask = __ballot_sync(0xffffffffu, has);
        const int n = __popc(mask);
        if (y < seen + n) {
            unsigned m = mask;
            for (int skip = y - seen; skip > 0; --skip) m &= m - 1;  // drop lowest set bits
            return static_cast<int>(e0) + __ffs(m) - 1;
        }
        seen += n;
    }
    return -1;
}

__device__ __forceinline__ void load8(const float* x, bool vec, float (&v)[8]) {
    if (vec) {
        const float4 a = reinterpret_cast<const float4*>(x)[0];
        const float4 b = reinterpret_cast<const float4*>(x)[1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = x[k];
    }
}

template <GgmlType T>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(GemvArgs a) {
    const int lane = threadIdx.x % 32;
    const int64_t o = blockIdx.x * static_cast<int64_t>(kWarps) + threadIdx.x / 32;
    int64_t r0 = 0, r1 = a.n_rows;
    const uint8_t* w = a.w;
    if (a.offsets != nullptr) {
        const int e = active_expert(a.offsets, a.n_experts, static_cast<int>(blockIdx.y));
        if (e < 0) return;
        r0 = a.offsets[e];
        r1 = a.offsets[e + 1];
        w += static_cast<uint64_t>(e) * a.expert_bytes;
    }
    if (o >= a.n_out) return;
    const uint8_t* row = w + static_cast<uint64_t>(o) * a.row_bytes;
    const int64_t n8 = a.n_in / 8 * 8;
    const bool vec = a.x_vec;
    for (int64_t c0 = r0; c0 < r1; c0 += kChunk) {
        const int nt = static_cast<int>(r1 - c0 < kChunk ? r1 - c0 : kChunk);
        const float* xr[kChunk];
#pragma unroll
        for (int t = 0; t < kChunk; ++t) {
            const int64_t r = c0 + (t < nt ? t : 0);
            xr[t] = a.x + (a.x_rows ? static_cast<int64_t>(a.x_rows[r]) : r) * a.x_stride;
        }
        float acc[kChunk] = {};
        // Unrolled so each lane has several weight loads in flight: a row is only a
        // few KiB, and without them the loop waits a memory latency per step.
#pragma unroll 4
        for (int64_t i = 8 * lane; i < n8; i += 8 * 32) {
            float wv[8];
            dq8<T>(row, i, wv);
#pragma unroll
            for (int t = 0; t < kChunk; ++t) {
                if (t < nt) {
                    float xv[8];
                    load8(xr[t] + i, vec, xv);
#pragma unroll
                    for (int k = 0; k < 8; ++k) acc[t] += wv[k] * xv[k];
                }
            }
        }
        for (int64_t i = n8 + lane; i < a.n_in; i += 32) {  // tail of rows not a multiple of 8
            const float wv = dq<T>(row, i);
#pragma unroll
            for (int t = 0; t < kChunk; ++t)
                if (t < nt) acc[t] += wv * xr[t][i];
        }
#pragma unroll
        for (int t = 0; t < kChunk; ++t) {
            float v = acc[t];
            for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
            if (lane == 0 && t < nt) a.y[(c0 + t) * a.y_stride + o] = v;
        }
    }
}

}  // namespace

void launch_gemv(const GemvArgs& a, int64_t max_active_experts, cudaStream_t s) {
    if (a.n_out <= 0 || (a.offsets == nullptr && a.n_rows <= 0) || max_active_experts <= 0) return;
    GemvArgs args = a;
    args.x_vec = a.x_stride % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
    const dim3 grid(static_cast<unsigned>((a.n_out + kWarps - 1) / kWarps),
                    static_cast<unsigned>(a.offsets ? max_active_experts : 1));
    HF2Q_ASSERT(grid.y <= 65535);
    bool ok = dispatch_type(a.type, [&]<GgmlType T>() { gemv_kernel<T><<<grid, kWarps * 32, 0, s>>>(args); });
    if (!ok) fail("CUDA matmul: unsupported weight type ", ggml_type_name(a.type));
    HF2Q_CUDA_LAUNCH_CHECK();
}

}  // namespace hf2q::cuda

// Mixture-of-experts on the device (ops/moe.h): grouping of the routed (token, slot)
// pairs by expert, grouped expert matmuls, and the weighted combine. Routing itself
// is in rows.cu. Nothing here reads the routing on the host unless the caller hands
// host offsets in (prefill: the tensor-core path sizes its launches with them; the
// grouped tile GEMM of gemm_grouped.cu where it covers the weight type, else the
// expansion + cuBLAS path of gemm.cu).
#include "backends/cuda/common.cuh"
#include "backends/cuda/gemm.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/kernels.h"

namespace hf2q::cuda {
namespace {

// Routed rows from which a device-only grouped product (batched decode) takes the
// tile GEMM instead of the grouped GEMV. Off by default: at 32, 64 and 128 sequences
// of the 26B-A4B (4 routed rows per expert at 64) the tile GEMM measured 1,041 /
// 1,702 / 2,626 tok/s against the GEMV's 1,271 / 1,882 / 2,631 (H200, 99774db,
// docs/performance.md), and the GEMV has become faster since. A compile definition
// so the crossover can be measured (HF2Q_MOE_TILE_MIN_ROWS=...).
#ifndef HF2Q_MOE_TILE_MIN_ROWS
#define HF2Q_MOE_TILE_MIN_ROWS (int64_t{1} << 40)
#endif
constexpr int64_t kTileMinRows = HF2Q_MOE_TILE_MIN_ROWS;

constexpr int kGroupWarps = 32;
constexpr int64_t kMaxGroupExperts = 256;  // shared memory: kGroupWarps × E counters

__device__ __forceinline__ unsigned lanemask_lt() {
    return (1u << (threadIdx.x % 32)) - 1u;
}

// One block of 32 warps; warp w owns a contiguous segment of the pairs. Pass 1
// counts per (warp, expert), a scan turns the counts into each warp's first slot
// per expert, pass 2 walks the segment again and assigns slots in pair order, so
// the sort is stable and the result does not depend on scheduling.
__global__ void __launch_bounds__(kGroupWarps * 32) moe_group_kernel(ops::MoeGroupParams p) {
    pdl_begin();
    extern __shared__ int32_t cnt[];  // [kGroupWarps][E]
    const int64_t E = p.n_experts, n = p.n_tokens * p.k;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int64_t i = threadIdx.x; i < kGroupWarps * E; i += blockDim.x) cnt[i] = 0;
    __syncthreads();
    const int64_t seg = (n + kGroupWarps - 1) / kGroupWarps;
    const int64_t b0 = min(n, warp * seg), b1 = min(n, b0 + seg);
    int32_t* mine = cnt + warp * E;
    for (int64_t base = b0; base < b1; base += 32) {
        const int64_t i = base + lane;
        const bool ok = i < b1;
        const int32_t e = ok ? p.ids[i] : -1;
        const unsigned peers = __match_any_sync(0xffffffffu, e);
        if (ok && (peers & lanemask_lt()) == 0) mine[e] += __popc(peers);
        __syncwarp();
    }
    __syncthreads();
    // Thread e: prefix over warps; then a block-wide scan of the per-expert totals.
    __shared__ int32_t totals[kMaxGroupExperts + 1];
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
        int32_t run = 0;
        for (int w = 0; w < kGroupWarps; ++w) {
            const int32_t c = cnt[w * E + e];
            cnt[w * E + e] = run;
            run += c;
        }
        totals[e] = run;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t run = 0;
        for (int64_t e = 0; e < E; ++e) {
            const int32_t c = totals[e];
            totals[e] = run;
            p.offsets[e] = run;
            run += c;
        }
        p.offsets[E] = run;
    }
    __syncthreads();
    for (int64_t base = b0; base < b1; base += 32) {
        const int64_t i = base + lane;
        const bool ok = i < b1;
        const int32_t e = ok ? p.ids[i] : -1;
        const unsigned peers = __match_any_sync(0xffffffffu, e);
        if (ok) {
            const int32_t r = totals[e] + mine[e] + __popc(peers & lanemask_lt());
            p.rows[r] = static_cast<int32_t>(i / p.k);
            p.slot_of[i] = r;
        }
        __syncwarp();
        if (ok && (peers & lanemask_lt()) == 0) mine[e] += __popc(peers);
        __syncwarp();
    }
}

__global__ void moe_combine_kernel(ops::MoeCombineParams p) {
    pdl_begin();
    const int64_t t = blockIdx.y;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        float acc = 0.0f;
        for (int64_t j = 0; j < p.k; ++j) {
            const int64_t s = t * p.k + j;
            acc += p.weights[s] * p.y[static_cast<int64_t>(p.slot_of[s]) * p.y_stride + i];
        }
        p.out[t * p.out_stride + i] = acc;
    }
}

}  // namespace

void launch_moe_group(const ops::MoeGroupParams& p, cudaStream_t s) {
    if (p.n_experts <= 0 || p.n_experts > kMaxGroupExperts)
        fail("CUDA MoE: ", p.n_experts, " experts (supported: 1 to ", kMaxGroupExperts, ")");
    const size_t smem = static_cast<size_t>(kGroupWarps * p.n_experts) * sizeof(int32_t);
    launch(moe_group_kernel, 1, kGroupWarps * 32, smem, s, p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

void launch_moe_combine(const ops::MoeCombineParams& p, cudaStream_t s) {
    if (p.n_tokens <= 0 || p.n <= 0) return;
    HF2Q_ASSERT(p.n_tokens <= 2147483647);
    const dim3 grid(static_cast<unsigned>((p.n + 255) / 256), static_cast<unsigned>(p.n_tokens));
    launch(moe_combine_kernel, grid, 256, 0, s, p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

void launch_moe_matmul(const ops::MoeMatmulParams& p, MatmulEnv& env, cudaStream_t s) {
    if (p.n_rows <= 0 || p.w.n_out <= 0) return;
    HF2Q_ASSERT(!p.geglu || (p.w.n_out % 2 == 0 && p.geglu_scratch != nullptr));
    const ExpertLoad load = p.host_offsets ? expert_load(p.host_offsets, p.n_experts) : ExpertLoad{};
    // Host offsets showing fewer than 8 routed rows per active expert: the grouped GEMV
    // (which reads each expert's weights once for all its rows) beats the tile GEMM
    // (H200, 26B-A4B gate_up Q4_K, 4 rows per expert: 249 µs against 606).
    const bool few_rows_per_expert = p.host_offsets != nullptr && p.n_rows < 8 * load.active;
    const bool tiles = env.precision == MatmulPrecision::bf16 &&
                       (p.host_offsets != nullptr || p.n_rows >= kTileMinRows) && !few_rows_per_expert;
    if (tiles) {
        ensure_activations(env, p.n_rows * p.w.n_in);
        // With geglu, only the register kernels fuse it (and only without y_prep).
        if (gemm_grouped_tiles(p, p.host_offsets ? &load : nullptr, *env.ws, s)) return;
    }
    if (p.geglu) {  // unfused: the product into the scratch, then the GEGLU op
        launch_moe_matmul(ops::geglu_product(p), env, s);
        launch_geglu(ops::geglu_of_product(p), s);
        return;
    }
    if (tiles && p.host_offsets != nullptr) {
        gemm_bf16_grouped(p, *env.ws, env.cublas, s);
        return;
    }
    GemvArgs a = gemv_args(p.w, p.x, p.x_stride, p.y, p.y_stride);
    a.expert_bytes = p.expert_bytes;
    a.x_rows = p.x_rows;
    a.offsets = p.offsets;
    a.n_experts = p.n_experts;
    a.n_rows = p.n_rows;
    a.x_prep = p.x_prep;
    launch_any_gemv(a, std::min(p.n_rows, p.n_experts), env, s);
}

}  // namespace hf2q::cuda

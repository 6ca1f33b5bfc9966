// Mixture-of-experts on the device (ops/moe.h): top-k routing, grouping of the routed
// (token, slot) pairs by expert (both fused into one kernel for small batches),
// grouped expert matmuls, and the weighted combine. Nothing here reads the routing on
// the host unless the caller hands host offsets in (prefill: the tensor-core path
// sizes its launches with them; the grouped tile GEMM of gemm_grouped.cu where it
// covers the weight type, else the expansion + cuBLAS path of gemm.cu).
#include <cfloat>

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

constexpr int kMaxTopK = 16;
constexpr int kMaxExpertsPerLane = 8;  // up to 256 experts

constexpr int kGroupWarps = 32;
constexpr int64_t kMaxGroupExperts = 256;  // shared memory: kGroupWarps × E counters

// The fused routing + grouping (one block of kGroupWarps warps) takes batches of up
// to kFusedMaxTokens tokens (one token per warp) and kFusedMaxPairs pairs (the ids
// it keeps in shared memory): decode and batched decode up to 32 sequences. At 64
// (two tokens per warp, routed one after the other) it was slower than the routing
// kernel's 16 blocks plus the grouping kernel (ncu, H200, 26B-A4B at 64 sequences:
// 23.8 µs per layer against 5.2 + 6.1 µs).
constexpr int64_t kFusedMaxTokens = 32;
constexpr int64_t kFusedMaxPairs = 512;
static_assert(kFusedMaxPairs <= 32 * kGroupWarps, "a counting warp per 32 pairs");

// Routes token t with one warp (every lane calls it, lane = threadIdx.x % 32): the
// lanes hold the expert logits (expert e on lane e % 32), softmax in f32 with warp
// reductions, top-k by k rounds of a warp arg-max (larger logit first, lower index
// on ties), renormalise, per-expert scale. Lane j < k writes the j-th selection to
// p.ids / p.weights and returns its expert (other lanes return -1). Decode runs one
// token per layer, so the whole routing is a few dozen shuffles instead of a thread
// walking every expert k times. Shared by the routing kernel and the fused kernel,
// so both give the same bits.
__device__ __forceinline__ int32_t route_token(const ops::MoeRouteParams& p, int64_t t, int lane) {
    const float* lg = p.logits + t * p.n_experts;
    float v[kMaxExpertsPerLane];
    float mx = -FLT_MAX;
#pragma unroll
    for (int j = 0; j < kMaxExpertsPerLane; ++j) {
        const int64_t e = lane + 32 * j;
        v[j] = e < p.n_experts ? lg[e] : -FLT_MAX;
        mx = fmaxf(mx, v[j]);
    }
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxExpertsPerLane; ++j)
        if (lane + 32 * j < p.n_experts) sum += expf(v[j] - mx);
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);

    unsigned taken = 0;  // bit j: expert lane + 32·j already selected
    int32_t my_id = -1;
    float my_prob = 0.0f, sel_sum = 0.0f;
    for (int64_t k = 0; k < p.k; ++k) {
        float bv = -FLT_MAX;
        int32_t bi = 0x7fffffff;
#pragma unroll
        for (int j = 0; j < kMaxExpertsPerLane; ++j) {
            const int32_t e = lane + 32 * j;
            if (e < p.n_experts && !(taken >> j & 1u) && (v[j] > bv || bi == 0x7fffffff)) {
                bv = v[j];
                bi = e;
            }
        }
        for (int off = 16; off > 0; off >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
            const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, off);
            if (ov > bv || (ov == bv && oi < bi)) {
                bv = ov;
                bi = oi;
            }
        }
        if (bi % 32 == lane) taken |= 1u << (bi / 32);
        const float prob = expf(bv - mx) / sum;
        sel_sum += prob;
        if (lane == k) {
            my_id = bi;
            my_prob = prob;
        }
    }
    if (lane < p.k) {
        float w = my_prob / sel_sum;
        if (p.expert_scale) w *= p.expert_scale[my_id];
        p.ids[t * p.k + lane] = my_id;
        p.weights[t * p.k + lane] = w;
    }
    return my_id;
}

// One warp per token (a few per block).
__global__ void moe_route_kernel(ops::MoeRouteParams p) {
    pdl_begin();
    const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
    if (t >= p.n_tokens) return;
    route_token(p, t, threadIdx.x % 32);
}

__device__ __forceinline__ unsigned lanemask_lt() {
    return (1u << (threadIdx.x % 32)) - 1u;
}

// The grouping of the n = n_tokens·k pairs whose experts are ids[0 .. n) (global or
// shared memory; p.ids is not read), by every thread of a block of kGroupWarps warps,
// of which the first n_warps (1 to kGroupWarps) do the counting. cnt: n_warps × E
// ints of shared memory. Warp w < n_warps owns a contiguous segment of the pairs.
// Pass 1 counts per (warp, expert), a scan turns the counts into each warp's first
// slot per expert, pass 2 walks the segment again and assigns slots in pair order, so
// the sort is stable and the result depends neither on scheduling nor on n_warps.
// Begins with a __syncthreads (after zeroing cnt), which publishes the caller's
// shared-memory writes.
__device__ __forceinline__ void group_pairs(const ops::MoeGroupParams& p, const int32_t* ids, int n_warps,
                                            int32_t* cnt) {
    const int64_t E = p.n_experts, n = p.n_tokens * p.k;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int64_t i = threadIdx.x; i < n_warps * E; i += blockDim.x) cnt[i] = 0;
    __syncthreads();
    const int64_t seg = (n + n_warps - 1) / n_warps;
    const bool counts = warp < n_warps;  // warp-uniform
    const int64_t b0 = counts ? min(n, warp * seg) : n, b1 = min(n, b0 + seg);
    int32_t* mine = cnt + (counts ? warp : 0) * E;
    for (int64_t base = b0; base < b1; base += 32) {
        const int64_t i = base + lane;
        const bool ok = i < b1;
        const int32_t e = ok ? ids[i] : -1;
        const unsigned peers = __match_any_sync(0xffffffffu, e);
        if (ok && (peers & lanemask_lt()) == 0) mine[e] += __popc(peers);
        __syncwarp();
    }
    __syncthreads();
    // Thread e: prefix over warps; then warp 0 scans the per-expert totals (lane l
    // holds a run of E / 32 experts).
    __shared__ int32_t totals[kMaxGroupExperts];
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
        int32_t run = 0;
        for (int w = 0; w < n_warps; ++w) {
            const int32_t c = cnt[w * E + e];
            cnt[w * E + e] = run;
            run += c;
        }
        totals[e] = run;
    }
    __syncthreads();
    if (warp == 0) {
        const int64_t per = (E + 31) / 32, e0 = min(E, lane * per), e1 = min(E, e0 + per);
        int32_t mine_sum = 0;
        for (int64_t e = e0; e < e1; ++e) mine_sum += totals[e];
        int32_t incl = mine_sum;
        for (int off = 1; off < 32; off <<= 1) {
            const int32_t o = __shfl_up_sync(0xffffffffu, incl, off);
            if (lane >= off) incl += o;
        }
        int32_t run = incl - mine_sum;
        for (int64_t e = e0; e < e1; ++e) {
            const int32_t c = totals[e];
            totals[e] = run;
            p.offsets[e] = run;
            run += c;
        }
        if (lane == 31) p.offsets[E] = incl;
    }
    __syncthreads();
    for (int64_t base = b0; base < b1; base += 32) {
        const int64_t i = base + lane;
        const bool ok = i < b1;
        const int32_t e = ok ? ids[i] : -1;
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

__global__ void __launch_bounds__(kGroupWarps * 32) moe_group_kernel(ops::MoeGroupParams p) {
    pdl_begin();
    extern __shared__ int32_t cnt[];  // [kGroupWarps][E]
    group_pairs(p, p.ids, kGroupWarps, cnt);
}

// Routing then grouping in one block (kFusedMaxTokens, kFusedMaxPairs): warp w routes
// tokens w, w + kGroupWarps, ... and keeps their experts in shared memory too; the
// grouping reads them there, counting with the fewest warps that take 32 pairs each.
__global__ void __launch_bounds__(kGroupWarps * 32)
    moe_route_group_kernel(ops::MoeRouteParams r, ops::MoeGroupParams g, int n_warps) {
    pdl_begin();
    extern __shared__ int32_t cnt[];  // [n_warps][E]
    __shared__ int32_t ids[kFusedMaxPairs];
    const int lane = threadIdx.x % 32;
    for (int64_t t = threadIdx.x / 32; t < r.n_tokens; t += kGroupWarps) {
        const int32_t id = route_token(r, t, lane);
        if (lane < r.k) ids[t * r.k + lane] = id;
    }
    group_pairs(g, ids, n_warps, cnt);
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

namespace {

// The shapes the routing and the grouping kernels take; otherwise they fail, saying
// what is not supported. The fused kernel takes a subset of both.
void check_route(const ops::MoeRouteParams& p) {
    if (p.k > kMaxTopK || p.k > p.n_experts) fail("CUDA MoE routing: top-k ", p.k, " not supported");
    if (p.n_experts > 32 * kMaxExpertsPerLane)
        fail("CUDA MoE routing: ", p.n_experts, " experts (supported: up to ", 32 * kMaxExpertsPerLane, ")");
}
void check_group(const ops::MoeGroupParams& p) {
    if (p.n_experts <= 0 || p.n_experts > kMaxGroupExperts)
        fail("CUDA MoE: ", p.n_experts, " experts (supported: 1 to ", kMaxGroupExperts, ")");
}

}  // namespace

void launch_moe_route(const ops::MoeRouteParams& p, cudaStream_t s) {
    if (p.n_tokens <= 0) return;
    check_route(p);
    constexpr int kWarpsPerBlock = 4;
    launch(moe_route_kernel, grid_1d(p.n_tokens, kWarpsPerBlock), kWarpsPerBlock * 32, 0, s, p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

void launch_moe_group(const ops::MoeGroupParams& p, cudaStream_t s) {
    check_group(p);
    const size_t smem = static_cast<size_t>(kGroupWarps * p.n_experts) * sizeof(int32_t);
    launch(moe_group_kernel, 1, kGroupWarps * 32, smem, s, p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

// Batches within the fused kernel's bounds (decode: one token, 8 pairs) take one
// launch instead of two dependent ones on the critical path; larger batches the two
// ops. Shapes either op rejects fail first, with its message.
void launch_moe_route_group(const ops::MoeRouteParams& r, const ops::MoeGroupParams& g, cudaStream_t s) {
    if (r.n_tokens > 0) check_route(r);
    check_group(g);
    const int64_t n = r.n_tokens * r.k;
    const bool fused = r.n_tokens > 0 && r.n_tokens <= kFusedMaxTokens && n <= kFusedMaxPairs && r.k > 0;
    if (!fused) {
        launch_moe_route(r, s);
        launch_moe_group(g, s);
        return;
    }
    const int n_warps = static_cast<int>((n + 31) / 32);  // 32 pairs per counting warp
    const size_t smem = static_cast<size_t>(n_warps * r.n_experts) * sizeof(int32_t);
    launch(moe_route_group_kernel, 1, kGroupWarps * 32, smem, s, r, g, n_warps);
    HF2Q_CUDA_LAUNCH_CHECK();
}

void launch_moe_combine(const ops::MoeCombineParams& p, cudaStream_t s) {
    if (p.n_tokens <= 0 || p.n <= 0) return;
    HF2Q_ASSERT(p.n_tokens <= 2147483647);
    const dim3 grid(static_cast<unsigned>((p.n + 255) / 256), static_cast<unsigned>(p.n_tokens));
    launch(moe_combine_kernel, grid, 256, 0, s, p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

// May take the tensor-core paths (launch_moe_matmul may still choose the GEMV from
// the host offsets' rows per expert).
bool moe_matmul_uses_gemm(const ops::MoeMatmulParams& p, const MatmulEnv& env) {
    return p.n_rows > 0 && p.w.n_out > 0 && env.precision == MatmulPrecision::bf16 &&
           (p.host_offsets != nullptr || p.n_rows >= kTileMinRows);
}

void launch_moe_matmul(const ops::MoeMatmulParams& p, MatmulEnv& env, cudaStream_t s) {
    if (p.n_rows <= 0 || p.w.n_out <= 0) return;
    HF2Q_ASSERT(!p.geglu || (p.w.n_out % 2 == 0 && p.geglu_scratch != nullptr));
    const ExpertLoad load = p.host_offsets ? expert_load(p.host_offsets, p.n_experts) : ExpertLoad{};
    // Host offsets showing fewer than 8 routed rows per active expert: the grouped GEMV
    // (which reads each expert's weights once for all its rows) beats the tile GEMM
    // (H200, 26B-A4B gate_up Q4_K, 4 rows per expert: 249 µs against 606).
    const bool few_rows_per_expert = p.host_offsets != nullptr && p.n_rows < 8 * load.active;
    const bool tiles = moe_matmul_uses_gemm(p, env) && !few_rows_per_expert;
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
    a.x_n_rows = p.x_n_rows;
    launch_any_gemv(a, std::min(p.n_rows, p.n_experts), env, s);
}

}  // namespace hf2q::cuda

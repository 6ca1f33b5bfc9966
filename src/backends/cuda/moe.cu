// Mixture-of-experts on the device (ops/moe.h): top-k routing, grouping of the routed
// (token, slot) pairs by expert (both fused into one kernel for small batches, and
// with the router product before them into one kernel in decode), grouped expert
// matmuls, and the weighted combine. Nothing here reads the routing on
// the host unless the caller hands host offsets in (prefill: the tensor-core path
// sizes its launches with them; the grouped tile GEMM of gemm_grouped.cu where it
// covers the weight type, else the expansion + cuBLAS path of gemm.cu).
#include <cfloat>

#include <cooperative_groups.h>

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

// The router product fused with the routing and the grouping (decode): one block of
// kRouterThreads threads per expert, whose threads split the F32 router row in
// float4 columns; the last block to finish routes and groups. A thread loads its
// first kRouterCols columns of the row into registers before the PDL wait (model
// weights, common.cuh), so the 26B-A4B's 1.4 MB of router rows (128 × 2816 floats:
// 5.5 columns per thread) stream in while the previous kernel runs, and only the
// activations' loads from L2 remain after it. H200, 26B-A4B (f32 GEMV + fused
// routing kernel before): tg128 361 -> 368 tokens/s; at 8 sequences the fused
// kernel was slower (946 -> 931: every block re-reads 8 tokens' activations, and
// one block routes them all), so it takes up to kRouterMaxTokens = 4 tokens (one
// accumulator per token in registers) and kRouterMaxPairs pairs (the last block
// counts with its own warps, 32 pairs each). A first version with one warp per
// expert (32 blocks: one warp per SM, the row in three dependent rounds) was slower
// than the two kernels (tg128 357 -> 349).
constexpr int kRouterThreads = 128;
// Whether the fused router kernel routes with every thread of its last block
// (route_token_ranked) rather than one warp per token. A compile definition for A/Bs.
#ifndef HF2Q_ROUTE_RANKED
#define HF2Q_ROUTE_RANKED 1
#endif
constexpr int kRouterWarps = kRouterThreads / 32;
constexpr int kRouterCols = 6;
constexpr int64_t kRouterMaxTokens = 4;
constexpr int64_t kRouterMaxPairs = 32 * kRouterWarps;

// The softmax's largest logit and denominator of one token's logits lg, by a whole
// warp: lane l holds experts l, l + 32, ... in v. Shared by both routings below, so
// their weights are the same bits.
__device__ __forceinline__ void softmax_max_sum(const float* lg, int64_t n_experts, int lane,
                                                float (&v)[kMaxExpertsPerLane], float& mx, float& sum) {
    mx = -FLT_MAX;
#pragma unroll
    for (int j = 0; j < kMaxExpertsPerLane; ++j) {
        const int64_t e = lane + 32 * j;
        v[j] = e < n_experts ? lg[e] : -FLT_MAX;
        mx = fmaxf(mx, v[j]);
    }
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxExpertsPerLane; ++j)
        if (lane + 32 * j < n_experts) sum += expf(v[j] - mx);
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
}

// Routes token t with one warp (every lane calls it, lane = threadIdx.x % 32): the
// lanes hold the expert logits (expert e on lane e % 32), softmax in f32 with warp
// reductions, top-k by k rounds of a warp arg-max (larger logit first, lower index
// on ties), renormalise, per-expert scale. Lane j < k writes the j-th selection to
// p.ids / p.weights and returns its expert (other lanes return -1). Decode runs one
// token per layer, so the whole routing is a few dozen shuffles instead of a thread
// walking every expert k times. Shared by the routing kernel and the fused kernel,
// so both give the same bits.
// lg: the token's n_experts logits (route_token: p.logits' row t).
__device__ __forceinline__ int32_t route_token_at(const ops::MoeRouteParams& p, const float* lg, int64_t t, int lane) {
    float v[kMaxExpertsPerLane];
    float mx, sum;
    softmax_max_sum(lg, p.n_experts, lane, v, mx, sum);
    // A NaN or +inf logit makes every probability NaN; the CPU's selection then takes
    // the experts in index order. Equal keys do the same here (ties take the lower
    // index), where NaN compares would leave the lanes disagreeing on the arg-max.
    if (!isfinite(sum)) {
#pragma unroll
        for (int j = 0; j < kMaxExpertsPerLane; ++j) v[j] = 0.0f;
    }

    unsigned taken = 0;  // bit j: expert lane + 32·j already selected
    int32_t my_id = -1;
    float my_prob = 0.0f, sel_sum = 0.0f;
    for (int64_t k = 0; k < p.k; ++k) {
        // A lane without a candidate holds (-inf, 0x7fffffff): an expert's -inf logit
        // ties with it and wins by index, so it never selects expert 0x7fffffff (with
        // -FLT_MAX here, -inf logits did, and group_pairs indexed shared memory by it).
        float bv = -INFINITY;
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
__device__ __forceinline__ int32_t route_token(const ops::MoeRouteParams& p, int64_t t, int lane) {
    return route_token_at(p, p.logits + t * p.n_experts, t, lane);
}

// Routes token t (logits lg in shared memory, every one finite) with every thread of
// the block: thread e (and e + blockDim.x, ...) counts the experts ranked before it (a
// larger logit, or an equal one of lower index), which is the round in which
// route_token's arg-max picks it, so the k selections come from one pass of
// independent compares instead of k dependent rounds of shuffles on one warp (ncu,
// the 26B-A4B's router kernel: about 1,700 instructions of one warp for one token).
// The block's first warp then weighs them with route_token's operations in its order
// (the same bits). Non-finite logits take route_token, whose sentinel order this does
// not copy. sel: kMaxTopK ints of shared memory; ids as in route_then_group. Ends on a
// block barrier (sel serves the next token). Only the router kernel's last block uses
// it: E² compares a token cost the grouped kernel's 5-32 tokens more than the warps'
// rounds (session 29: 8 × tg128 −0.7 %).
__device__ __forceinline__ void route_token_ranked(const ops::MoeRouteParams& p, int64_t t, const float* lg,
                                                   int32_t* sel, int32_t* ids) {
    const int lane = threadIdx.x % 32;
    const int n_experts = static_cast<int>(p.n_experts);  // ≤ kMaxGroupExperts
    for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
        const float v = lg[e];
        // Four independent counts: one counter made the E compares one dependent chain
        // (ncu: about 680 issued instructions a warp, most of them waiting on the last).
        int c[4] = {0, 0, 0, 0};
        int i = 0;
#pragma unroll 2
        for (; i + 4 <= e; i += 4) {
#pragma unroll
            for (int u = 0; u < 4; ++u) c[u] += lg[i + u] >= v ? 1 : 0;
        }
        for (; i < e; ++i) c[0] += lg[i] >= v ? 1 : 0;
#pragma unroll 2
        for (i = e + 1; i + 4 <= n_experts; i += 4) {
#pragma unroll
            for (int u = 0; u < 4; ++u) c[u] += lg[i + u] > v ? 1 : 0;
        }
        for (; i < n_experts; ++i) c[0] += lg[i] > v ? 1 : 0;
        const int before = c[0] + c[1] + c[2] + c[3];
        if (before < p.k) sel[before] = e;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        float v[kMaxExpertsPerLane];
        float mx, sum;
        softmax_max_sum(lg, p.n_experts, lane, v, mx, sum);
        int32_t id = -1;
        float prob = 0.0f;
        if (lane < p.k) {
            id = sel[lane];
            prob = expf(lg[id] - mx) / sum;
        }
        float sel_sum = 0.0f;
        for (int64_t k = 0; k < p.k; ++k) sel_sum += __shfl_sync(0xffffffffu, prob, static_cast<int>(k));
        if (lane < p.k) {
            float w = prob / sel_sum;
            if (p.expert_scale) w *= p.expert_scale[id];
            p.ids[t * p.k + lane] = id;
            p.weights[t * p.k + lane] = w;
            ids[t * p.k + lane] = id;
        }
    }
    __syncthreads();
}

// Whether every one of n values in shared memory is finite, by every thread of the
// block (a block barrier).
__device__ __forceinline__ bool all_finite(const float* v, int64_t n) {
    bool finite = true;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) finite = finite && isfinite(v[i]);
    return __syncthreads_and(finite) != 0;
}

// One warp per token (a few per block).
__global__ void moe_route_kernel(ops::MoeRouteParams p) {
    pdl_begin();
    const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
    if (t >= p.n_tokens) return;
    route_token(p, t, threadIdx.x % 32);
}

// The grouping of the n = n_tokens·k pairs whose experts are ids[0 .. n) (global or
// shared memory; p.ids is not read), by every thread of a block (kGroupWarps warps or
// fewer), of which the first n_warps (1 to the block's warps) do the counting. cnt:
// n_warps × E ints of shared memory. Warp w < n_warps owns a contiguous segment of the pairs.
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

// The grouping of the router kernel's few pairs (n = n_tokens·k ≤ kRouterMaxPairs) by
// direct counts: expert e's offset is the number of pairs of a lower expert, pair i's
// row the number before it in (expert, pair) order, the stable order group_pairs
// gives, without its counters, scans and five barriers (ncu, the 26B-A4B's router
// kernel: about 600 instructions of one warp after the routing). ids: shared memory,
// published by the caller's barrier; every id < E.
__device__ __forceinline__ void group_few_pairs(const ops::MoeGroupParams& p, const int32_t* ids) {
    const int n = static_cast<int>(p.n_tokens * p.k), n_experts = static_cast<int>(p.n_experts);
    const int k = static_cast<int>(p.k);
    for (int e = threadIdx.x; e <= n_experts; e += blockDim.x) {
        int below = 0;
        for (int j = 0; j < n; ++j) below += ids[j] < e ? 1 : 0;
        p.offsets[e] = below;  // offsets[E] = n
    }
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int32_t ei = ids[i];
        int r = 0;
        for (int j = 0; j < n; ++j) r += (ids[j] < ei || (ids[j] == ei && j < i)) ? 1 : 0;
        p.rows[r] = i / k;
        p.slot_of[i] = r;
    }
}

__global__ void __launch_bounds__(kGroupWarps * 32) moe_group_kernel(ops::MoeGroupParams p) {
    pdl_begin();
    extern __shared__ int32_t cnt[];  // [kGroupWarps][E]
    group_pairs(p, p.ids, kGroupWarps, cnt);
}

// Routing then grouping by every thread of a block: warp w routes tokens w, w +
// (the block's warps), ... and keeps their experts in ids (shared memory, n_tokens·k
// of them); the grouping reads them there, counting with n_warps warps (cnt: n_warps ×
// E ints of shared memory). The body of both fused kernels below.
__device__ __forceinline__ void route_then_group(const ops::MoeRouteParams& r, const ops::MoeGroupParams& g,
                                                 int32_t* ids, int n_warps, int32_t* cnt) {
    const int lane = threadIdx.x % 32;
    for (int64_t t = threadIdx.x / 32; t < r.n_tokens; t += blockDim.x / 32) {
        const int32_t id = route_token(r, t, lane);
        if (lane < r.k) ids[t * r.k + lane] = id;
    }
    group_pairs(g, ids, n_warps, cnt);
}

// Routing then grouping in one block (kFusedMaxTokens, kFusedMaxPairs), counting with
// the fewest warps that take 32 pairs each.
__global__ void __launch_bounds__(kGroupWarps * 32)
    moe_route_group_kernel(ops::MoeRouteParams r, ops::MoeGroupParams g, int n_warps) {
    pdl_begin();
    extern __shared__ int32_t cnt[];  // [n_warps][E]
    __shared__ int32_t ids[kFusedMaxPairs];
    route_then_group(r, g, ids, n_warps, cnt);
}

// Adds x[t] · w over the float4 columns tid, tid + kRouterThreads, ... (kRouterCols
// of them from base·kRouterThreads on, wv holding them; past n4 zeros) to acc[t].
__device__ __forceinline__ void router_cols(const float4 (&wv)[kRouterCols], const float4* x, int64_t xs4, int64_t n4,
                                            int64_t base, int n_tok, float (&acc)[kRouterMaxTokens]) {
#pragma unroll
    for (int t = 0; t < kRouterMaxTokens; ++t) {
        if (t >= n_tok) break;
        float a = acc[t];
#pragma unroll
        for (int c = 0; c < kRouterCols; ++c) {
            const int64_t i = base + threadIdx.x + static_cast<int64_t>(c) * kRouterThreads;
            if (i >= n4) break;
            const float4 xv = x[t * xs4 + i];
            a = fmaf(wv[c].x, xv.x, a);
            a = fmaf(wv[c].y, xv.y, a);
            a = fmaf(wv[c].z, xv.z, a);
            a = fmaf(wv[c].w, xv.w, a);
        }
        acc[t] = a;
    }
}

__device__ __forceinline__ void load_router_cols(float4 (&wv)[kRouterCols], const float4* w, int64_t n4, int64_t base) {
#pragma unroll
    for (int c = 0; c < kRouterCols; ++c) {
        const int64_t i = base + threadIdx.x + static_cast<int64_t>(c) * kRouterThreads;
        const uint4 u = i < n4 ? ld_weights16(w + i) : make_uint4(0, 0, 0, 0);
        wv[c] = make_float4(__uint_as_float(u.x), __uint_as_float(u.y), __uint_as_float(u.z), __uint_as_float(u.w));
    }
}

// The router product, the routing and the grouping in one launch (kRouterThreads,
// kRouterMaxTokens, kRouterMaxPairs): block e computes expert e's logits for every
// token; the last block to finish (a counter every block increments once) reads
// them all and runs route_then_group with its own warps. That block resets the
// counter, so the kernel can be launched again (and replayed in a graph); `arrived`
// belongs to one stream, so launches never overlap.
__global__ void __launch_bounds__(kRouterThreads)
    moe_router_route_group_kernel(ops::MoeRouteParams r, ops::MoeGroupParams g, int n_warps, unsigned* arrived) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t e = blockIdx.x, n4 = r.router_w.n_in / 4;
    const int64_t xs4 = (r.router_x_stride ? r.router_x_stride : r.router_w.n_in) / 4;
    const float4* w = reinterpret_cast<const float4*>(static_cast<const uint8_t*>(r.router_w.data) +
                                                      static_cast<uint64_t>(e) * r.router_w.row_bytes);
    const float4* x = reinterpret_cast<const float4*>(r.router_x);
    const int n_tok = static_cast<int>(r.n_tokens);
    float4 wv[kRouterCols];
    load_router_cols(wv, w, n4, 0);  // model weights: before the wait
    pdl_begin();
    float acc[kRouterMaxTokens];
#pragma unroll
    for (int t = 0; t < kRouterMaxTokens; ++t) acc[t] = 0.0f;
    router_cols(wv, x, xs4, n4, 0, n_tok, acc);
    for (int64_t base = kRouterCols * kRouterThreads; base < n4; base += kRouterCols * kRouterThreads) {
        load_router_cols(wv, w, n4, base);  // rows wider than 3,072 values
        router_cols(wv, x, xs4, n4, base, n_tok, acc);
    }
    // Per token: the warp's butterfly sum, then the warps' sums in warp order.
    __shared__ float part[kRouterWarps][kRouterMaxTokens];
#pragma unroll
    for (int t = 0; t < kRouterMaxTokens; ++t) {
        if (t >= n_tok) break;
        float v = acc[t];
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) part[warp][t] = v;
    }
    __syncthreads();
    float* logits = const_cast<float*>(r.logits);  // an output with router_x (ops/moe.h)
    if (threadIdx.x < n_tok) {
        float v = part[0][threadIdx.x];
        for (int k = 1; k < kRouterWarps; ++k) v += part[k][threadIdx.x];
        logits[threadIdx.x * r.n_experts + e] = v;
    }

    // Every block publishes its logits and counts itself in; the block that counts
    // last sees all of them.
    __syncthreads();
    if (!last_block_to_arrive(arrived)) return;

    // The logits into shared memory, read from L2 (__ldcg: never a stale L1 line of
    // another SM's writes); the routing then reads them there.
    extern __shared__ float smem[];  // [n_tokens][E] logits, then [n_warps][E] counters
    const int64_t n_logits = r.n_tokens * r.n_experts;
    for (int64_t i = threadIdx.x; i < n_logits; i += blockDim.x) smem[i] = __ldcg(r.logits + i);
    __syncthreads();
    ops::MoeRouteParams rs = r;
    rs.logits = smem;
    __shared__ int32_t ids[kRouterMaxPairs];
    __shared__ int32_t sel[kMaxTopK];
    int32_t* cnt = reinterpret_cast<int32_t*>(smem + n_logits);
    if (HF2Q_ROUTE_RANKED && all_finite(smem, n_logits)) {
        for (int64_t t = 0; t < r.n_tokens; ++t) route_token_ranked(rs, t, smem + t * r.n_experts, sel, ids);
        group_few_pairs(g, ids);
    } else {
        route_then_group(rs, g, ids, n_warps, cnt);
    }
}

// The router product, the routing and the grouping of batched decode (17 to
// kBatchRouterMaxTokens tokens, kBatchRouterExperts experts) in one launch, where they
// were a cuBLAS split-K GEMM on the router's BF16 copy, its reduction kernel, the
// routing kernel and the grouping kernel: at 64 sequences of the 26B-A4B about 17 µs
// of every MoE layer's critical path (CUPTI, H100, session 50), for 1.4 MB of router
// rows. Clusters of kBatchRouterBlocks blocks: cluster c takes tokens 8c .. 8c + 7,
// its block r experts 16r .. 16r + 15, so each block reads 16 router rows (from L2
// after the first cluster) and 8 token rows once.
//   1. Logits: S = W·Xᵀ for the block's 16 × 8 on the tensor cores, m16n8k8 in TF32
//      split in three (w = w_hi + w_lo, x likewise; w_hi·x_lo + w_lo·x_hi + w_hi·x_hi
//      into f32 accumulators), so the logits are f32 products to about 2^-21, not the
//      BF16 ones the GEMM gave. Each warp sums a 16th of n_in; the parts are added in
//      warp order. The k index is permuted as in gemv_mma.cu (lane t4 holds values
//      4·t4 .. 4·t4 + 3 of every 16: two steps' fragments from one 16-byte load).
//   2. Routing: after a cluster barrier, block r gathers token 8c + r's logits from the
//      cluster's shared memory and routes it with route_token's operations (one warp).
//   3. Grouping: the last block to finish (a counter, as the small router kernel's)
//      groups every pair with group_pairs, as the grouping kernel does (the same bits).
// 1 (default): batches of kBatchRouterMinTokens .. kBatchRouterMaxTokens take this kernel;
// 0: the router product, then the routing ops, for the A/B (out/s51e.sh, s51g.sh).
#ifndef HF2Q_BATCH_ROUTER
#define HF2Q_BATCH_ROUTER 1
#endif
constexpr int kBatchRouterBlocks = 8;   // blocks a cluster
constexpr int kBatchRouterRows = 16;    // experts a block: the MMA's m
constexpr int kBatchRouterTokens = 8;   // tokens a cluster: the MMA's n
constexpr int64_t kBatchRouterExperts = kBatchRouterBlocks * kBatchRouterRows;
constexpr int64_t kBatchRouterMinTokens = 17;  // past the GEMV's batches (kGemvTokens)
// At most 32 tokens: at 64 sequences (8 clusters, 512 pairs grouped by the last block) the
// kernel lost 2 % of an H100 step against the product and the two routing kernels, at 17 and
// 32 it won (session 51, docs/performance.md).
#ifndef HF2Q_BATCH_ROUTER_MAX_TOKENS
#define HF2Q_BATCH_ROUTER_MAX_TOKENS 32
#endif
constexpr int64_t kBatchRouterMaxTokens = HF2Q_BATCH_ROUTER_MAX_TOKENS;
constexpr int64_t kBatchRouterMaxPairs = 512;  // ids staged for the grouping
// Warps a block, each a 16th of n_in: session 50's first version, 4 warps a quarter each (44
// dependent steps of six MMAs into one accumulator), took 33.7 us alone at 17 tokens (ncu,
// H100) and lost 8 % at 64 sequences; 16 warps, 11 steps each, three accumulator chains.
constexpr int kBatchRouterWarps = 16;

// TF32 of x (round to nearest, ties away: cvt.rna) and the TF32 of what is left.
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(hi) : "f"(x));
    const float rest = x - __uint_as_float(hi);
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(lo) : "f"(rest));
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One m16n8k8 step in three TF32 products, each into its own accumulators (three
// independent MMA chains): weights (rows g, g + 8) at k slots t4 and t4 + 4 = wa.x, wb.x,
// wa.y, wb.y; token g's values x0, x1 there.
__device__ __forceinline__ void mma_3xtf32(float (&c)[3][4], float wa0, float wb0, float wa1, float wb1, float x0,
                                           float x1) {
    uint32_t ah[4], al[4], bh[2], bl[2];
    split_tf32(wa0, ah[0], al[0]);
    split_tf32(wb0, ah[1], al[1]);
    split_tf32(wa1, ah[2], al[2]);
    split_tf32(wb1, ah[3], al[3]);
    split_tf32(x0, bh[0], bl[0]);
    split_tf32(x1, bh[1], bl[1]);
    mma_tf32(c[0], ah, bl[0], bl[1]);
    mma_tf32(c[1], al, bh[0], bh[1]);
    mma_tf32(c[2], ah, bh[0], bh[1]);
}

__global__ void __cluster_dims__(kBatchRouterBlocks, 1, 1) __launch_bounds__(kBatchRouterWarps * 32)
    moe_router_batch_kernel(ops::MoeRouteParams r, ops::MoeGroupParams g, unsigned* arrived) {
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, t4 = lane % 4;
    const int rank = static_cast<int>(cluster.block_rank());
    const int64_t n_in = r.router_w.n_in, E = r.n_experts;
    const int64_t e0 = static_cast<int64_t>(rank) * kBatchRouterRows;
    const int64_t tok0 = static_cast<int64_t>(blockIdx.x / kBatchRouterBlocks) * kBatchRouterTokens;
    const uint8_t* w0 = static_cast<const uint8_t*>(r.router_w.data) + static_cast<uint64_t>(e0) * r.router_w.row_bytes;
    // The block's rows are model weights: asked of L2 before the wait (common.cuh).
    if (threadIdx.x == 0) prefetch_l2(w0, static_cast<uint32_t>(kBatchRouterRows * r.router_w.row_bytes));
    pdl_begin();

    // 1. This warp's share of n_in (launch_moe_router_route_group: n_in % (16 · warps) == 0).
    const int64_t share = n_in / kBatchRouterWarps, k_begin = warp * share;
    const float* wa = reinterpret_cast<const float*>(w0 + static_cast<uint64_t>(gq) * r.router_w.row_bytes);
    const float* wb = reinterpret_cast<const float*>(w0 + static_cast<uint64_t>(gq + 8) * r.router_w.row_bytes);
    const int64_t xs = r.router_x_stride ? r.router_x_stride : n_in;
    const bool tok_ok = tok0 + gq < r.n_tokens;
    const float* x = r.router_x + (tok_ok ? tok0 + gq : 0) * xs;
    float c3[3][4] = {};
#pragma unroll 4
    for (int64_t k = k_begin + 4 * t4; k < k_begin + share; k += 16) {
        const uint4 ua = ld_weights16(wa + k), ub = ld_weights16(wb + k);
        const float4 xv = tok_ok ? *reinterpret_cast<const float4*>(x + k) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        mma_3xtf32(c3, __uint_as_float(ua.x), __uint_as_float(ub.x), __uint_as_float(ua.y), __uint_as_float(ub.y),
                   xv.x, xv.y);
        mma_3xtf32(c3, __uint_as_float(ua.z), __uint_as_float(ub.z), __uint_as_float(ua.w), __uint_as_float(ub.w),
                   xv.z, xv.w);
    }
    float c[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) c[i] = c3[2][i] + (c3[0][i] + c3[1][i]);
    // c[i]: expert row gq + 8·(i / 2), token column 2·t4 + i % 2.
    __shared__ float part[kBatchRouterWarps][kBatchRouterRows * kBatchRouterTokens];
    __shared__ float lg[kBatchRouterTokens][kBatchRouterRows];  // the block's logits, by token
#pragma unroll
    for (int i = 0; i < 4; ++i) part[warp][(2 * t4 + i % 2) * kBatchRouterRows + gq + 8 * (i / 2)] = c[i];
    __syncthreads();
    if (threadIdx.x < kBatchRouterRows * kBatchRouterTokens) {
        const int tt = threadIdx.x / kBatchRouterRows, e = threadIdx.x % kBatchRouterRows;  // 128 = 8 × 16
        float v = part[0][threadIdx.x];
#pragma unroll
        for (int w = 1; w < kBatchRouterWarps; ++w) v += part[w][threadIdx.x];
        lg[tt][e] = v;
        if (tok0 + tt < r.n_tokens) const_cast<float*>(r.logits)[(tok0 + tt) * E + e0 + e] = v;
    }
    cluster.sync();  // every block's logits, for the routing's reads

    // 2. Token tok0 + rank: its logits from the cluster's blocks, then route_token's routing.
    __shared__ float row[kBatchRouterExperts];
    const int64_t t = tok0 + rank;
    if (warp == 0) {
        for (int e = lane; e < E; e += 32) {
            const float* src = cluster.map_shared_rank(&lg[0][0], e / kBatchRouterRows);
            row[e] = src[rank * kBatchRouterRows + e % kBatchRouterRows];
        }
        __syncwarp();
        if (t < r.n_tokens) (void)route_token_at(r, row, t, lane);
    }
    cluster.sync();  // no block leaves while another reads its logits

    // 3. The last block of the grid groups every pair (as the small router kernel's last block).
    if (!last_block_to_arrive(arrived)) return;  // the cluster barrier above orders the ids
    __shared__ int32_t ids[kBatchRouterMaxPairs];
    __shared__ int32_t cnt[kBatchRouterWarps * kBatchRouterExperts];
    const int64_t n = r.n_tokens * r.k;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ids[i] = __ldcg(r.ids + i);
    group_pairs(g, ids, n > 32 * (kBatchRouterWarps - 1) ? kBatchRouterWarps : static_cast<int>((n + 31) / 32), cnt);
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
    if (p.router_x != nullptr) fail("CUDA moe_route: a router input is taken by moe_route_group only (ops/moe.h)");
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

// Takes decode-sized batches (kRouterMaxTokens, kRouterMaxPairs) of an F32 router
// whose rows and inputs allow 16-byte loads (n_in % 4 == 0, aligned); anything else
// returns false having launched nothing, for the caller to run the router matmul and
// then launch_moe_route_group. Shapes the routing or the grouping rejects fail first.
bool launch_moe_router_route_group(const ops::MoeRouteParams& r, const ops::MoeGroupParams& g, unsigned* arrived,
                                   cudaStream_t s) {
    HF2Q_ASSERT(r.router_x != nullptr && arrived != nullptr);
    if (r.n_tokens > 0) check_route(ops::routing_of(r));
    check_group(g);
    const ops::WeightView& w = r.router_w;
    const int64_t xs = r.router_x_stride ? r.router_x_stride : w.n_in;
    if (r.n_tokens <= 0 || r.k <= 0 || w.type != GgmlType::F32 || w.n_in % 4 != 0 || xs % 4 != 0 ||
        w.row_bytes != static_cast<uint64_t>(w.n_in) * 4 || !aligned16(w.data) || !aligned16(r.router_x))
        return false;
    if (HF2Q_BATCH_ROUTER && r.n_tokens >= kBatchRouterMinTokens && r.n_tokens <= kBatchRouterMaxTokens &&
        r.n_experts == kBatchRouterExperts && w.n_in % (16 * kBatchRouterWarps) == 0 &&
        r.n_tokens * r.k <= kBatchRouterMaxPairs) {
        const int64_t clusters = (r.n_tokens + kBatchRouterTokens - 1) / kBatchRouterTokens;
        launch(moe_router_batch_kernel, static_cast<unsigned>(clusters * kBatchRouterBlocks), kBatchRouterWarps * 32,
               0, s, r, g, arrived);
        HF2Q_CUDA_LAUNCH_CHECK();
        return true;
    }
    if (r.n_tokens > kRouterMaxTokens || r.n_tokens * r.k > kRouterMaxPairs) return false;
    const int n_warps = static_cast<int>((r.n_tokens * r.k + 31) / 32);  // 32 pairs per counting warp
    const size_t smem = static_cast<size_t>(r.n_tokens * r.n_experts + n_warps * r.n_experts) * sizeof(float);
    launch(moe_router_route_group_kernel, static_cast<unsigned>(r.n_experts), kRouterThreads, smem, s, r, g,
           n_warps, arrived);
    HF2Q_CUDA_LAUNCH_CHECK();
    return true;
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

namespace {

// The grouped GEMV's arguments for p (the integer or the f32 one, launch_any_gemv).
GemvArgs moe_gemv_args(const ops::MoeMatmulParams& p) {
    GemvArgs a = gemv_args(p.w, p.x, p.x_stride, p.y, p.y_stride);
    a.expert_bytes = p.expert_bytes;
    a.x_rows = p.x_rows;
    a.offsets = p.offsets;
    a.n_experts = p.n_experts;
    a.n_rows = p.n_rows;
    a.x_prep = p.x_prep;
    a.x_n_rows = p.x_n_rows;
    a.w_copy = static_cast<const uint8_t*>(p.w.expert_layout);
    return a;
}

}  // namespace

void launch_moe_matmul(const ops::MoeMatmulParams& p, MatmulEnv& env, cudaStream_t s) {
    if (p.combine != nullptr) {  // ops/moe.h: the product, then one token's combine
        const ops::MoeMatmulParams q = ops::combine_product(p);
        // Folded into the routed GEMV where it takes the product (a decode step's down
        // product): the combine's kernel, and residual_norms' loads of the 8 expert
        // rows after it, leave the experts' chain. launch_gemv_q8_combined rejects
        // empty products and the shapes its kernel does not take.
        if (!moe_matmul_uses_gemm(q, env) && env.precision == MatmulPrecision::bf16 &&
            launch_gemv_q8_combined(moe_gemv_args(q), *p.combine, env.ws->q8_bytes, env.ws->q8, s))
            return;
        launch_moe_matmul(q, env, s);
        launch_moe_combine(*p.combine, s);
        return;
    }
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
    if (p.geglu) {
        // Where the plain product would take the grouped tensor-core GEMV, that kernel
        // runs the GEGLU as its epilogue (the same bits; the scratch goes untouched).
        if (!tiles && env.precision == MatmulPrecision::bf16) {
            GemvArgs a = moe_gemv_args(p);
            a.glu = p.w.n_out / 2;
            a.y_stride = p.y_stride ? p.y_stride : a.glu;
            a.y_prep = p.y_prep;
            if (launch_gemv_q8_geglu(a, std::min(p.n_rows, p.n_experts), env.ws->q8_bytes, env.ws->q8, s)) return;
        }
        // Unfused: the product into the scratch, then the GEGLU op.
        launch_moe_matmul(ops::geglu_product(p), env, s);
        launch_geglu(ops::geglu_of_product(p), s);
        return;
    }
    if (tiles && p.host_offsets != nullptr) {
        gemm_bf16_grouped(p, *env.ws, env.cublas, s);
        return;
    }
    launch_any_gemv(moe_gemv_args(p), std::min(p.n_rows, p.n_experts), env, s);
}

}  // namespace hf2q::cuda

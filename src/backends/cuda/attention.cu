// Attention of query tokens over the paged KV cache (ops/attention.h): the dispatcher
// and the small kernels around the two fast paths (attention_common.cuh).
//
// A call runs, in order on the stream:
//   1. plan (n_tokens ≥ kMinRun): one block per query tile finds the runs of rows
//      with one block table and consecutive positions; runs of ≥ kMinRun rows are
//      recorded for the tile kernel and their tokens flagged as handled;
//   2. the tensor-core tile kernel over those runs (attention_tile.cu);
//   3. the split kernel over every other token (attention_split.cu), with the key
//      range split in n_split parts when the (token, head group) blocks alone
//      cannot fill the GPU (decode);
//   4. the combiner merging split partials (n_split > 1).
// Given out_prep or out_bf16 (ops/prepared.h), the split kernel or the combiner,
// whichever writes a token's final output, also writes its prepared form or BF16 row
// from the values it holds; after a tile plan (n_tokens ≥ kMinRun) or the generic
// kernel, a separate pass over out does.
// Positions and tables are device data, so the split between the paths is decided
// on the device; the host only sizes the grids. Everything lives in the caller's
// workspace (plan, flags, partials); nothing is allocated here.
//
// Head sizes other than 64, 128, 256 and 512 (or unaligned buffers) take a generic
// f32 kernel: one block of 4 warps per (token, head), a warp per key.
#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "backends/cuda/attention_common.cuh"
#include "backends/cuda/gemm.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/q8.cuh"

// 1 (default): the split kernel and the combiner write the output's BF16 rows (out_bf16)
// from the values they hold, so the output projection of a batched decode step (17-64
// sequences) needs no conversion kernel (30 a step of the 26B-A4B; H100, 64 sequences int8
// 5,166-5,172 -> 5,190-5,202 tokens/s, session 51); 0: a separate pass converts out, the
// cost the matmul paid before, for the A/B (out/s51e.sh).
#ifndef HF2Q_ATTN_BF16_ROWS
#define HF2Q_ATTN_BF16_ROWS 1
#endif

namespace hf2q::cuda {
namespace {

using attn::kMaxSplits;
using attn::kMinRun;
using attn::kPlanStride;

// ---- generic fallback ---------------------------------------------------------

constexpr int kWarps = 4;
constexpr int kMaxPerLane = 16;  // head_dim <= 512

// One block of 4 warps per (token, head). Each warp takes every 4th visible key,
// lanes split the head dimension, the dot product is a warp reduction, and the warp
// keeps an online softmax; the 4 partial states are merged at the end.
template <class KV>
__global__ void attention_generic_kernel(ops::AttentionParams p) {
    pdl_begin();
    const int64_t t = blockIdx.x, h = blockIdx.y;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t hd = p.head_dim, kvh = h / (p.n_heads / p.n_kv_heads);
    const int64_t row = p.n_kv_heads * hd;
    const int32_t pos = p.pos[t];
    const int32_t lo = attn::window_lo(pos, p.window);
    const int32_t* table = p.tables[t];
    const float* q = p.q + (t * p.n_heads + h) * hd;

    float qr[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
    for (int c = 0; c < kMaxPerLane; ++c) {
        const int64_t d = lane + 32 * c;
        qr[c] = d < hd ? q[d] : 0.0f;
        acc[c] = 0.0f;
    }
    float m = -FLT_MAX, l = 0.0f;
    for (int32_t j = lo + warp; j <= pos; j += kWarps) {
        const int64_t block = table[j / p.block_size], slot = j % p.block_size;
        const int64_t at = ops::kv_pool_index(block, slot, kvh, p.block_size, row, hd);
        const KV* k = static_cast<const KV*>(p.k_pool) + at;
        const KV* v = static_cast<const KV*>(p.v_pool) + at;
        // i8 pools: the row's scales go on the score and on the softmax weight.
        float ks = 1.0f, vs = 1.0f;
        if constexpr (kv_scaled<KV>) {
            const int64_t r = ops::kv_scale_index(block, slot, kvh, p.block_size, p.n_kv_heads);
            ks = p.k_scale[r];
            vs = p.v_scale[r];
        }
        float dot = 0.0f;
#pragma unroll
        for (int c = 0; c < kMaxPerLane; ++c) {
            const int64_t d = lane + 32 * c;
            if (d < hd) dot += qr[c] * from_kv(k[d]);
        }
        for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        const float s = dot * ks * p.scale;
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new), e = expf(s - m_new);
        l = l * corr + e;
#pragma unroll
        for (int c = 0; c < kMaxPerLane; ++c) {
            const int64_t d = lane + 32 * c;
            if (d < hd) acc[c] = acc[c] * corr + e * vs * from_kv(v[d]);
        }
        m = m_new;
    }

    __shared__ float sm[kWarps], sl[kWarps];
    __shared__ float sacc[kWarps][32 * kMaxPerLane];
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
#pragma unroll
    for (int c = 0; c < kMaxPerLane; ++c) sacc[warp][lane + 32 * c] = acc[c];
    __syncthreads();
    float M = -FLT_MAX;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm[w]);
    float L = 0.0f, f[kWarps];
    for (int w = 0; w < kWarps; ++w) {
        f[w] = sl[w] > 0.0f ? expf(sm[w] - M) : 0.0f;
        L += sl[w] * f[w];
    }
    float* out = p.out + (t * p.n_heads + h) * hd;
    for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < kWarps; ++w) o += sacc[w][d] * f[w];
        out[d] = o / L;
    }
}

// ---- plan ---------------------------------------------------------------------

// Index of the last set bit at or below r (bit 0 is always set).
__device__ int run_begin(const unsigned* words, int r) {
    for (int i = r / 32; i >= 0; --i) {
        unsigned bits = words[i];
        if (i == r / 32) bits &= (2u << (r % 32)) - 1;
        if (bits) return i * 32 + 31 - __clz(bits);
    }
    return 0;
}

// Index of the first set bit above r, or n_rows.
__device__ int run_end(const unsigned* words, int r, int n_rows) {
    for (int i = r / 32; i < n_rows / 32; ++i) {
        unsigned bits = words[i];
        if (i == r / 32) bits &= ~((2u << (r % 32)) - 1);
        if (bits) return i * 32 + __ffs(bits) - 1;
    }
    return n_rows;
}

// One block of bm threads (a multiple of 32, ≤ kMaxTileRows) per query tile: row r
// starts a new run unless it continues row r − 1 (same table, next position).
// plan: [n_tiles][kPlanStride] (see attention_common.cuh); handled: [n_tokens].
__global__ void attention_plan_kernel(const ops::AttentionParams p, int bm, int* __restrict__ plan,
                                      int* __restrict__ handled) {
    pdl_begin();
    __shared__ unsigned breaks[attn::kMaxTileRows / 32];
    __shared__ int n_runs;
    const int r = static_cast<int>(threadIdx.x);
    const int64_t t0 = int64_t{blockIdx.x} * bm, t = t0 + r;
    const int n_valid = static_cast<int>(min(int64_t{bm}, p.n_tokens - t0));
    const bool valid = r < n_valid;
    bool brk = true;  // rows past the batch end every run
    if (valid && r > 0) brk = p.tables[t] != p.tables[t - 1] || p.pos[t] != p.pos[t - 1] + 1;
    const unsigned ballot = __ballot_sync(0xffffffffu, brk);
    if (r % 32 == 0) breaks[r / 32] = ballot;
    if (r == 0) n_runs = 0;
    __syncthreads();
    if (valid) {
        const int b = run_begin(breaks, r), e = run_end(breaks, r, bm);
        const bool taken = e - b >= kMinRun;
        handled[t] = taken ? 1 : 0;
        if (taken && b == r) {
            const int i = atomicAdd(&n_runs, 1);  // order is irrelevant: runs are disjoint
            plan[blockIdx.x * kPlanStride + 1 + 2 * i] = b;
            plan[blockIdx.x * kPlanStride + 2 + 2 * i] = e;
        }
    }
    __syncthreads();
    if (r == 0) plan[blockIdx.x * kPlanStride] = n_runs;
}

// ---- combine ------------------------------------------------------------------

constexpr int kCombineThreads = 128;  // head_dim ≤ 512: a float4 per thread

// One block per (token, head): out = Σ_s w_s·acc_s / Σ_s w_s·l_s, w_s = 2^(m_s − M).
// Splits past the token's keys are empty (l_s = 0, acc_s never written); the first
// warp lists the others in order, so the sum over the head dimension reads only them.
// Given out_prep (out_bf16), the block also writes the prepared form (the BF16 row) of
// its output.
__global__ void attention_combine_kernel(const ops::AttentionParams p,
                                         const int* __restrict__ handled, int n_split,
                                         const float* __restrict__ part) {
    pdl_begin();
    const int64_t t = blockIdx.x, h = blockIdx.y;
    if (handled != nullptr && handled[t]) return;
    const int64_t D = p.head_dim;
    const int64_t row = t * p.n_heads + h;
    const float* acc = part + row * n_split * D;
    const float* ml = part + p.n_tokens * p.n_heads * n_split * D + row * n_split * 2;
    __shared__ float w[kMaxSplits];   // weights of the non-empty splits, in split order
    __shared__ int live[kMaxSplits];  // their split indices
    __shared__ int n_live;
    __shared__ float inv_l;
    if (threadIdx.x < 32) {
        // Each lane reads its splits' (m, l) once, all loads before any use: this
        // runs once per (token, head) of every decode step, so latency matters.
        constexpr int kPerLane = kMaxSplits / 32;
        const int lane = static_cast<int>(threadIdx.x);
        float m[kPerLane], l[kPerLane];
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) {
            const int sp = lane + 32 * k;
            const float2 v = sp < n_split ? reinterpret_cast<const float2*>(ml)[sp] : make_float2(0.0f, 0.0f);
            m[k] = v.x;
            l[k] = v.y;
        }
        float M = -FLT_MAX;
#pragma unroll
        for (int k = 0; k < kPerLane; ++k)
            if (l[k] > 0.0f) M = fmaxf(M, m[k]);
        for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
        float L = 0.0f;
        int n = 0;
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) {
            const int sp = lane + 32 * k;
            const float wk = l[k] > 0.0f ? exp2f(m[k] - M) : 0.0f;  // empty splits: never read acc
            const bool keep = wk > 0.0f;
            const unsigned kept = __ballot_sync(0xffffffffu, keep);
            if (keep) {
                const int at = n + __popc(kept & ((1u << lane) - 1u));
                w[at] = wk;
                live[at] = sp;
            }
            n += __popc(kept);
            L += wk * l[k];
        }
        for (int off = 16; off > 0; off >>= 1) L += __shfl_xor_sync(0xffffffffu, L, off);
        if (lane == 0) {
            inv_l = 1.0f / L;
            n_live = n;
        }
    }
    __syncthreads();
    // Thread i merges values 4i .. 4i + 3 (D / 4 ≤ kCombineThreads), so 8 consecutive
    // lanes hold a 32-value block of the prepared form (q8.cuh); lanes past D / 4 of a
    // warp with any below take part in its shuffles with zeros.
    const int n = n_live;
    const int d4 = static_cast<int>(threadIdx.x);
    const bool in = d4 < D / 4;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (in) {
        float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int i = 0; i < n; ++i) {
            const float4 a = *reinterpret_cast<const float4*>(acc + live[i] * D + 4 * d4);
            o.x += w[i] * a.x;
            o.y += w[i] * a.y;
            o.z += w[i] * a.z;
            o.w += w[i] * a.w;
        }
        v[0] = o.x * inv_l, v[1] = o.y * inv_l, v[2] = o.z * inv_l, v[3] = o.w * inv_l;
        *reinterpret_cast<float4*>(p.out + row * D + 4 * d4) =
            make_float4(v[0], v[1], v[2], v[3]);
        if (p.out_bf16 != nullptr)
            reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(p.out_bf16) + row * D)[d4] =
                make_uint2(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]));
    }
    if (p.out_prep != nullptr && threadIdx.x / 32 * 32 < D / 4) {
        const int64_t n_out = p.n_heads * D;
        const Q8View oq = q8_view(p.out_prep, p.n_tokens, n_out);
        quantize_q8_values(v, in, oq, t, n_out, h * (D / 4) + d4);
    }
}

// ---- dispatch -----------------------------------------------------------------

// Fewest KV chunks (attn::split_chunk_keys) a split is sized for when the batch's
// key bound is known. With one chunk a block pays its fixed costs (q rows, key
// offsets, partials, its share of the combine) for a single 16 KiB load of K and V,
// and the kernel's double buffer has nothing to overlap; two keep one load in flight
// behind the math while short contexts still spread over many blocks. Measured on
// the H200 against 1, 4 and 8 (docs/attention.md): best or close up to ~1000 keys.
// That was kernel time; for one-token decode a second split also costs the combine
// launch on the critical path, so the choice is a compile definition for the A/B of
// whole decode steps: 4 (one split, no combine at tg128's <= 128 keys) did not win
// (tg128 369.9 / 368.3 -> 364.4 / 367.8, docs/performance.md, session 14).
#ifndef HF2Q_ATTN_MIN_CHUNKS
#define HF2Q_ATTN_MIN_CHUNKS 2
#endif
constexpr int64_t kMinChunksPerSplit = HF2Q_ATTN_MIN_CHUNKS;

// Decode batches (one token per sequence, promised by earlier_keys_stored) skip the
// plan and the tile kernel: the plan would find no run, and the tile kernel's launch
// would only read that. Their two launches sat on the critical path of every layer
// at 17+ sequences (the plan runs from kMinRun tokens: 2.3 µs a layer at 64), and
// without the plan's flags the split kernel fetches its first keys before its wait
// (split_fetch_early). H200, 26B-A4B, 64 sequences, with the router's batch copy
// (weights.cpp): 4,636 / 4,628 -> 4,671 / 4,678 tokens/s (docs/performance.md,
// session 33). 1: plan whenever n_tokens >= kMinRun, as before, for the A/B.
#ifndef HF2Q_ATTN_PLAN_ALWAYS
#define HF2Q_ATTN_PLAN_ALWAYS 0
#endif
constexpr bool kPlanAlways = HF2Q_ATTN_PLAN_ALWAYS != 0;

// Chunks of the longest key range visible below a bound on the positions (at most the
// window on sliding layers).
int64_t visible_chunks(const ops::AttentionParams& p, int64_t bound) {
    const int64_t keys = p.window > 0 ? std::min<int64_t>(bound, p.window) : bound;
    const int64_t ck = attn::split_chunk_keys(p.head_dim, ops::kv_type_bytes(p.kv_type));
    return (keys + ck - 1) / ck;
}

// Chunks of the longest visible key range (max_keys > 0: known).
int64_t split_chunks(const ops::AttentionParams& p) { return visible_chunks(p, p.max_keys); }

// The most key-range splits worth launching: kMinChunksPerSplit chunks of the
// longest visible key range per split. Unknown bound (max_keys == 0): kMaxSplits,
// i.e. no cap.
int64_t useful_splits(const ops::AttentionParams& p) {
    if (p.max_keys <= 0) return kMaxSplits;
    return std::max<int64_t>(1, split_chunks(p) / kMinChunksPerSplit);
}

// Batches whose blocks fill more than one wave of the split kernel (many decode
// sequences) take attention_wave_splits (kernels.h). Why: at 64 sequences the
// 26B-A4B's full layers (head size 512, 8 heads a block, 2 blocks an SM by shared
// memory) ran 5 splits, 640 blocks, in 2.4 waves of 264; 2 splits run in one. H200,
// 64 sequences at 1,024: 4,719 / 4,718 -> 4,756 / 4,758 tokens/s (docs/performance.md,
// session 33).
// 0: the splits of the rule above alone, for the A/B.
#ifndef HF2Q_ATTN_WAVE_SPLITS
#define HF2Q_ATTN_WAVE_SPLITS 1
#endif
constexpr bool kWaveSplits = HF2Q_ATTN_WAVE_SPLITS != 0;
// 1 (default): the wave rule may also pick more splits than the rule above (up to the
// key bound's useful splits and what the workspace holds), not only fewer (at 64
// sequences of the 26B-A4B, with 3 blocks an SM, the sliding layers would go from 2
// splits, 1,024 blocks in 3 waves of 396: cost 51, to 3 in 4 waves: 48). H200, 64
// sequences at 1,024: 4,818 / 4,813 -> 4,847 / 4,837 tokens/s (docs/performance.md,
// session 34). 0: at most the rule above's count, for the A/B.
#ifndef HF2Q_ATTN_WAVE_ABOVE_CAP
#define HF2Q_ATTN_WAVE_ABOVE_CAP 1
#endif
constexpr bool kWaveAboveCap = HF2Q_ATTN_WAVE_ABOVE_CAP != 0;

// Fewest chunks the longest key range's splits span for the keys-by-warp split kernel
// (attention_split.cu, HF2Q_SPLIT_WARP_KEYS): each of its items ends with a merge of its
// four warps' accumulators through shared memory, which two chunks (two 16-key tiles a
// warp) do not repay. H100, session 45, the 26B-A4B's decode steps at 1,024 keys against
// the chunk kernel alone in the same call. int8 (out/s45a.sh, s45c.sh): one sequence at 300
// and 1,024 keys (2-3 chunks a split) 8.8 -> 9.8 and 9.6 -> 11.5 us a launch with it; 8, 16,
// 32 and 64 sequences (4, 8, 16 and 16 chunks) +0.8, +0.4, +1.6 and +1.3 % a step. fp8
// (out/s45e.sh): 8 sequences (4 chunks) -1.1 %, 32 and 64 (16) +0.9 and +1.1 %; the E4M3
// chunk kernel fetches its first keys before its wait (split_fetch_early), which the warp
// kernel does not, a likely reason why short splits favour it there.
#ifndef HF2Q_SPLIT_WARP_MIN_CHUNKS
#define HF2Q_SPLIT_WARP_MIN_CHUNKS 4
#endif
#ifndef HF2Q_SPLIT_WARP_MIN_CHUNKS_E4M3
#define HF2Q_SPLIT_WARP_MIN_CHUNKS_E4M3 8
#endif
int64_t warp_min_chunks(ops::KvType kv) {
    return kv == ops::KvType::e4m3 ? HF2Q_SPLIT_WARP_MIN_CHUNKS_E4M3 : HF2Q_SPLIT_WARP_MIN_CHUNKS;
}

// Query heads a split block serves: the largest power of two ≤ 8 dividing the GQA
// group, so they share K/V loads.
int split_heads_per_block(const ops::AttentionParams& p) {
    const int64_t group = p.n_heads / p.n_kv_heads;
    return group % 8 == 0 ? 8 : group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1;
}

int sm_count() {
    int dev = 0, n = 0;
    HF2Q_CUDA_CHECK(cudaGetDevice(&dev));
    HF2Q_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n > 0 ? n : 1;
}

}  // namespace

int attention_wave_splits(int64_t blocks, int64_t slots, int64_t chunks, int most) {
    HF2Q_ASSERT(blocks > 0 && slots > 0 && chunks >= 0 && most >= 1);
    if (blocks * most <= slots) return most;
    int best = most;
    int64_t best_cost = INT64_MAX;
    for (int n = 1; n <= most; ++n) {
        const int64_t waves = (blocks * n + slots - 1) / slots;
        const int64_t cost = waves * ((chunks + n - 1) / n + 1);
        if (cost < best_cost) best = n, best_cost = cost;
    }
    return best;
}

int64_t attention_split_slots(const ops::AttentionParams& p, bool tensor_cores, bool warps) {
    static const int n_sm = sm_count();
    return int64_t{attn::split_blocks_per_sm(p, split_heads_per_block(p), tensor_cores, warps)} * n_sm;
}

namespace {

// The key range is split until there are ~4 blocks per SM, as far as the workspace
// holds the partials (fit splits of them) and the batch's key bound leaves each split
// kMinChunksPerSplit chunks (short contexts: few splits, a cheap combine or none); past
// one wave of blocks, into the count with the fewest waves × chunks among those up to
// the useful splits (which may exceed the ~4 blocks per SM).
int split_count(const ops::AttentionParams& p, int64_t blocks, int64_t fit, bool tensor_cores, bool warps) {
    static const int n_sm = sm_count();
    const int64_t target = 4 * static_cast<int64_t>(n_sm);
    if (blocks >= target || fit < 1) return 1;
    const int64_t want = std::min({int64_t{kMaxSplits}, (target + blocks - 1) / blocks, useful_splits(p)});
    int n_split = static_cast<int>(std::max<int64_t>(1, std::min(want, fit)));
    if (kWaveSplits && n_split > 1 && p.max_keys > 0) {
        const int64_t slots = attention_split_slots(p, tensor_cores, warps);
        int most = n_split;
        if (kWaveAboveCap && blocks * n_split > slots)
            most = static_cast<int>(
                std::max<int64_t>(n_split, std::min({int64_t{kMaxSplits}, useful_splits(p), fit})));
        n_split = attention_wave_splits(blocks, slots, split_chunks(p), most);
    }
    return n_split;
}

// Chunks the longest key range's splits span with n_split splits: by the key bound,
// else by the window; unbounded where neither is known.
int64_t split_span_chunks(const ops::AttentionParams& p, int n_split) {
    if (p.max_keys <= 0 && p.window <= 0) return INT64_MAX;
    return (visible_chunks(p, p.max_keys > 0 ? p.max_keys : p.window) + n_split - 1) / n_split;
}

}  // namespace

AttentionSplitPlan attention_split_plan(const ops::AttentionParams& p, const AttentionWorkspace& ws, size_t used) {
    HF2Q_ASSERT(p.n_tokens > 0 && p.n_heads > 0 && p.n_kv_heads > 0 && p.head_dim > 0);
    const int hb = split_heads_per_block(p);
    const int64_t blocks = p.n_tokens * (p.n_heads / hb);
    const bool tensor_cores = !ws.f32_only;
    int64_t fit = 0;
    if (ws.buf != nullptr && ws.floats > used)
        fit = static_cast<int64_t>((ws.floats - used) / static_cast<size_t>(p.n_tokens * p.n_heads * (p.head_dim + 2)));
    AttentionSplitPlan plan{split_count(p, blocks, fit, tensor_cores, false), false};
    if (attn::split_warps_available(p, hb, tensor_cores)) {
        const int n = split_count(p, blocks, fit, tensor_cores, true);
        if (split_span_chunks(p, n) >= warp_min_chunks(p.kv_type)) plan = {n, true};
    }
    return plan;
}

void launch_attention(const ops::AttentionParams& p, const AttentionWorkspace& ws, cudaStream_t s) {
    if (p.n_tokens <= 0) return;
    if (p.head_dim > 32 * kMaxPerLane) fail("CUDA attention: head size ", p.head_dim, " above 512");
    HF2Q_ASSERT(p.n_heads > 0 && p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0);
    HF2Q_ASSERT(p.head_dim > 0 && p.block_size > 0 && p.window >= 0);
    HF2Q_ASSERT(p.out_prep == nullptr || p.n_heads * p.head_dim % 32 == 0);
    const int64_t D = p.head_dim;
    // The BF16 rows and the prepared form of out, by separate passes over it (paths that
    // do not write them).
    const int64_t n_out = p.n_heads * D;
    auto bf16_out = [&] {
        if (p.out_bf16 != nullptr) to_bf16_rows(p.out, n_out, p.n_tokens, n_out, p.out_bf16, s);
    };
    auto quantize_out = [&] {
        if (p.out_prep != nullptr) launch_quantize_q8(p.out, n_out, p.n_tokens, n_out, p.out_prep, s);
        bf16_out();
    };
    // The split kernel and the combiner store 4 BF16 values at a time.
    const bool bf16_stores =
        HF2Q_ATTN_BF16_ROWS && p.out_bf16 != nullptr && reinterpret_cast<uintptr_t>(p.out_bf16) % 8 == 0;
    const bool fast = (D == 64 || D == 128 || D == 256 || D == 512) && aligned16(p.q) &&
                      aligned16(p.out) && aligned16(p.k_pool) && aligned16(p.v_pool);
    if (!fast) {
        dim3 grid(static_cast<unsigned>(p.n_tokens), static_cast<unsigned>(p.n_heads));
        dispatch_kv(p.kv_type, [&]<class KV>() { launch(attention_generic_kernel<KV>, grid, 32 * kWarps, 0, s, p); });
        HF2Q_CUDA_LAUNCH_CHECK();
        quantize_out();
        return;
    }
    const float scale_log2 = p.scale * attn::kLog2e;

    // 1-2. Long runs on tensor cores. The plan (ints) heads the workspace.
    size_t used = 0;  // floats of the workspace taken by the plan
    const int* handled = nullptr;
    // A batch given earlier_keys_stored has one token per sequence (ops/attention.h):
    // no runs, so no plan and no tile launch (kPlanAlways).
    const bool runs_possible = kPlanAlways || !p.earlier_keys_stored;
    if (runs_possible && p.n_tokens >= kMinRun && ws.buf != nullptr && !ws.f32_only) {
        const int bm = attn::tile_rows(D);
        const int64_t n_tiles = (p.n_tokens + bm - 1) / bm;
        const size_t plan_ints =
            (static_cast<size_t>(n_tiles * kPlanStride + p.n_tokens) + 63) / 64 * 64;
        if (n_tiles <= 65535 && plan_ints <= ws.floats) {
            int* plan = reinterpret_cast<int*>(ws.buf);
            int* flags = plan + n_tiles * kPlanStride;
            launch(attention_plan_kernel, static_cast<unsigned>(n_tiles), bm, 0, s, p, bm, plan, flags);
            HF2Q_CUDA_LAUNCH_CHECK();
            attn::launch_tile(p, plan, n_tiles, scale_log2, s);
            handled = flags;
            used = plan_ints;
        }
    }

    // 3-4. Everything else on the split kernel. A block serves HB query heads of one
    // KV head (the largest power of two ≤ 8 dividing the group) so they share K/V
    // loads; attention_split_plan splits the key range and picks the kernel.
    const int hb = split_heads_per_block(p);
    const AttentionSplitPlan plan = attention_split_plan(p, ws, used);
    const int n_split = plan.n_split;
    // The kernel writing a token's final output (the split kernel or the combiner)
    // writes its prepared form too. The tile kernels do not, so after a plan (which
    // rows they took is device data) one pass quantizes every row instead.
    ops::AttentionParams sp = p;
    if (handled != nullptr) sp.out_prep = sp.out_bf16 = nullptr;
    if (!bf16_stores) sp.out_bf16 = nullptr;
    float* part = ws.buf != nullptr ? ws.buf + used : nullptr;
    attn::launch_split(sp, handled, hb, n_split, part, scale_log2, !ws.f32_only, plan.warps, s);
    if (n_split > 1) {
        const dim3 grid(static_cast<unsigned>(p.n_tokens), static_cast<unsigned>(p.n_heads));
        launch(attention_combine_kernel, grid, kCombineThreads, 0, s, sp, handled, n_split, part);
        HF2Q_CUDA_LAUNCH_CHECK();
    }
    if (handled != nullptr) {
        quantize_out();
    } else if (!bf16_stores) {
        bf16_out();  // the split kernel and the combiner wrote the prepared form
    }
}

}  // namespace hf2q::cuda

// Flash attention on tensor cores for query tiles of consecutive positions (prefill,
// chunked prefill, long runs inside mixed batches).
//
// One block per (query head, tile of BM query tokens). The planner (attention.cu)
// splits each tile into runs of rows with one block table and consecutive positions;
// the block walks, run after run, the key range [lo(first row), last row's position]
// in tiles of BN keys. Rows outside the current run are fully masked, which leaves
// their online-softmax state untouched, so runs share the accumulators.
//
// Per key tile: K (then V) rows are gathered through the block table with cp.async:
// from an f16 pool straight into the F16 tile, from an f32 pool into an f32
// staging buffer that is then converted to F16 in shared memory. The tiles feed
// mma.sync m16n8k16 (F16 x F16 -> f32). While S = Q·Kᵀ and the softmax
// run, the V tile is in flight; while O += P·V runs, the next K tile is. Softmax is
// online in f32 and in log2 units (scale·log2 e folded into the scores).
//
// Warps: BM/16 row groups x DS head-dim splits. A warp owns 16 query rows and D/DS
// output columns (128 f32 accumulators per thread at D = 256 and 512). With DS = 2
// (D = 512) the two warps of a row group each score half of the key tile, exchange
// row maxima through shared memory, and publish P (F16) for the other's P·V.
//
//   D    BM   BN  DS  warps  shared memory (f32 cache / f16 cache: no staging)
//   64   128  64  1   8       53 / 37 KiB
//   128  128  64  1   8      102 / 70 KiB
//   256  128  64  1   8      198 / 134 KiB
//   512   64  32  2   8      200 / 136 KiB
#include <cfloat>

#include "backends/cuda/attention_common.cuh"

namespace hf2q::cuda::attn {
namespace {

template <int D, class KV>
struct TileShape {
    static constexpr int kRows = D == 512 ? 64 : 128;    // BM: query rows per block
    static constexpr int kKeys = D == 512 ? 32 : 64;     // BN: keys per tile
    static constexpr int kDSplit = D == 512 ? 2 : 1;     // DS: warps sharing a row group
    static constexpr int kMinBlocks = D >= 128 ? 1 : 2;  // blocks per SM the registers allow
    static constexpr int kWarps = kRows / 16 * kDSplit;
    static constexpr int kThreads = 32 * kWarps;
    // Shared rows are padded by 16 bytes so the 8 row addresses of an ldmatrix fall
    // on distinct bank groups.
    static constexpr int kLd = D + 8;       // halfs per Q/K/V row
    static constexpr int kLdP = kKeys + 8;  // halfs per P row
    static constexpr size_t kQBytes = size_t{kRows} * kLd * 2;
    static constexpr size_t kKvBytes = size_t{kKeys} * kLd * 2;
    // f32, E4M3 and i8 pools are staged as stored, then converted to the F16 tile.
    static constexpr size_t kStageBytes = sizeof(KV) != 2 ? size_t{kKeys} * D * sizeof(KV) : 0;
    static constexpr size_t kPBytes = kDSplit > 1 ? size_t{kRows} * kLdP * 2 : 0;
    static constexpr size_t kRedBytes = size_t{kDSplit} * kRows * 4;
    static constexpr size_t kOffBytes = 2 * size_t{kKeys} * 8;
    // i8 pools: the K and V scales of the rows of both offset slots.
    static constexpr size_t kScaleBytes = kv_scaled<KV> ? 2 * 2 * size_t{kKeys} * 4 : 0;
    static constexpr size_t kSmem =
        kQBytes + 2 * kKvBytes + kStageBytes + kPBytes + kRedBytes + kOffBytes + kScaleBytes;
    static_assert(kSmem <= 227 * 1024, "tile does not fit in shared memory");
    static_assert(kThreads == 256 && kKeys % (16 * kDSplit) == 0, "unexpected tile shape");
};

// Starts the copy of one key tile (rows given by pool offsets; -1 = zeros): an f32
// or E4M3 pool's into the staging buffer [BN][D] (as stored), an f16 pool's into the
// tile [BN][LD].
template <int D, int BN, int NT, int LD, class KV>
__device__ __forceinline__ void issue_tile(unsigned char* stage, half* tile, const KV* __restrict__ pool,
                                           const int64_t* off) {
    constexpr int VEC = 16 / sizeof(KV);
#pragma unroll 4
    for (int u = threadIdx.x; u < BN * D / VEC; u += NT) {
        const int r = u / (D / VEC), c = (u % (D / VEC)) * VEC;
        const int64_t o = off[r];
        void* dst = sizeof(KV) != 2 ? static_cast<void*>(stage + (r * D + c) * sizeof(KV))
                                    : static_cast<void*>(tile + r * LD + c);
        cp_async16(dst, pool + (o < 0 ? 0 : o + c), o < 0 ? 0 : 16);
    }
    cp_async_commit();
}

// Staging buffer [BN][D] of f32, E4M3 or i8 -> F16 tile [BN][LD], E4M3 and i8 codes
// exactly (the i8 row scales are applied to the scores and to P: the kernel).
template <int D, int BN, int NT, int LD, class KV>
__device__ __forceinline__ void convert_tile(const unsigned char* stage, half* dst) {
#pragma unroll 4
    for (int u = threadIdx.x; u < BN * D / 8; u += NT) {
        const int r = u / (D / 8), c = (u % (D / 8)) * 8;
        uint4 v;
        if constexpr (kv_scaled<KV>) {
            const uint2 e = *reinterpret_cast<const uint2*>(stage + r * D + c);
            v = make_uint4(i8x2_to_half2_bits(e.x, 0), i8x2_to_half2_bits(e.x, 1), i8x2_to_half2_bits(e.y, 0),
                           i8x2_to_half2_bits(e.y, 1));
        } else if constexpr (sizeof(KV) == 1) {
            const uint2 e = *reinterpret_cast<const uint2*>(stage + r * D + c);
            const half2 h0 = e4m3x2_to_half2(static_cast<uint16_t>(e.x)),
                        h1 = e4m3x2_to_half2(static_cast<uint16_t>(e.x >> 16)),
                        h2 = e4m3x2_to_half2(static_cast<uint16_t>(e.y)),
                        h3 = e4m3x2_to_half2(static_cast<uint16_t>(e.y >> 16));
            v = make_uint4(*reinterpret_cast<const uint32_t*>(&h0), *reinterpret_cast<const uint32_t*>(&h1),
                           *reinterpret_cast<const uint32_t*>(&h2), *reinterpret_cast<const uint32_t*>(&h3));
        } else {
            const float* f = reinterpret_cast<const float*>(stage);
            const float4 a = *reinterpret_cast<const float4*>(f + r * D + c);
            const float4 b = *reinterpret_cast<const float4*>(f + r * D + c + 4);
            v.x = pack_half2(a.x, a.y);
            v.y = pack_half2(a.z, a.w);
            v.z = pack_half2(b.x, b.y);
            v.w = pack_half2(b.z, b.w);
        }
        *reinterpret_cast<uint4*>(dst + r * LD + c) = v;
    }
}

// Barrier of the DS warps of one row group (ids 1..BM/16; 0 is __syncthreads).
template <int DS>
__device__ __forceinline__ void row_group_sync(int rg) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(rg + 1), "r"(32 * DS) : "memory");
}

template <int D, class KV>
__global__ void __launch_bounds__(TileShape<D, KV>::kThreads, TileShape<D, KV>::kMinBlocks)
    attention_tile_kernel(const ops::AttentionParams p, const int* __restrict__ plan,
                          float scale_log2) {
    pdl_begin();
    using T = TileShape<D, KV>;
    constexpr bool kStaged = sizeof(KV) != 2;  // f32, E4M3 and i8 pools: staged, then converted
    const KV* const k_pool = static_cast<const KV*>(p.k_pool);
    const KV* const v_pool = static_cast<const KV*>(p.v_pool);
    constexpr int BM = T::kRows, BN = T::kKeys, DS = T::kDSplit, NT = T::kThreads, LD = T::kLd;
    constexpr int LDP = T::kLdP;
    constexpr int DW = D / DS;    // output columns per warp
    constexpr int BNW = BN / DS;  // score columns per warp

    const int h = static_cast<int>(blockIdx.x);
    // Latest tiles first: they have the longest key ranges (causal), so the tail of
    // the grid is short blocks.
    const int64_t tile = gridDim.y - 1 - blockIdx.y;
    const int* runs = plan + tile * kPlanStride;
    const int n_runs = runs[0];
    if (n_runs == 0) return;

    extern __shared__ __align__(16) unsigned char smem[];
    half* qh = reinterpret_cast<half*>(smem);               // [BM][LD]
    half* kh = reinterpret_cast<half*>(smem + T::kQBytes);  // [BN][LD]
    half* vh = reinterpret_cast<half*>(smem + T::kQBytes + T::kKvBytes);
    unsigned char* stage = smem + T::kQBytes + 2 * T::kKvBytes;  // [BN][D] of KV
    unsigned char* tail = smem + T::kQBytes + 2 * T::kKvBytes + T::kStageBytes;
    half* ps = reinterpret_cast<half*>(tail);                  // [BM][LDP] (DS > 1)
    float* red = reinterpret_cast<float*>(tail + T::kPBytes);  // [DS][BM]
    int64_t* rowoff = reinterpret_cast<int64_t*>(tail + T::kPBytes + T::kRedBytes);  // [2][BN]
    // i8 pools: [2][BN] K scales, then [2][BN] V scales, beside rowoff's slots (0 for
    // rows of zeros).
    float* rowsc = reinterpret_cast<float*>(tail + T::kPBytes + T::kRedBytes + T::kOffBytes);
    auto scales_of = [&](int64_t off) {
        if constexpr (kv_scaled<KV>)
            return off >= 0 ? make_float2(__ldg(p.k_scale + off / D), __ldg(p.v_scale + off / D))
                            : make_float2(0.0f, 0.0f);
        else
            return make_float2(0.0f, 0.0f);
    };
    auto row_scales = [&](int slot, int r, float2 kv) {
        if constexpr (kv_scaled<KV>) {
            rowsc[slot * BN + r] = kv.x;
            rowsc[2 * BN + slot * BN + r] = kv.y;
        }
    };

    const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
    const int rg = warp / DS, ds = warp % DS;
    const int64_t t0 = tile * BM;
    const int64_t kvh = h / (p.n_heads / p.n_kv_heads);
    const int64_t kv_row = p.n_kv_heads * D;  // values per cached position
    const int32_t bs =
        static_cast<int32_t>(p.block_size);  // 32-bit index math (no 64-bit division)

    // Q tile -> F16 (rows past the batch are zeros).
#pragma unroll 4
    for (int u = tid; u < BM * D / 8; u += NT) {
        const int r = u / (D / 8), c = (u % (D / 8)) * 8;
        uint4 v = {0, 0, 0, 0};
        if (t0 + r < p.n_tokens) {
            const float4* src =
                reinterpret_cast<const float4*>(p.q + ((t0 + r) * p.n_heads + h) * D + c);
            const float4 a = __ldg(src), b = __ldg(src + 1);
            v.x = pack_half2(a.x, a.y);
            v.y = pack_half2(a.z, a.w);
            v.z = pack_half2(b.x, b.y);
            v.w = pack_half2(b.z, b.w);
        }
        *reinterpret_cast<uint4*>(qh + r * LD + c) = v;
    }

    // Accumulator fragments: o[i] covers columns ds·DW + 8i + 2(lane%4) + {0,1} of
    // row r0 (elements 0, 1) and r0 + 8 (elements 2, 3).
    const int r0 = rg * 16 + lane / 4;
    float o[DW / 8][4];
#pragma unroll
    for (int i = 0; i < DW / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    // Running max (log2 units) and sum per row. m starts at -FLT_MAX, not -inf, so a
    // row whose keys are all masked so far gets corr = exp2(0) = 1 and p = exp2(-inf)
    // = 0 instead of NaN; its first visible key then gives corr = exp2(-huge) = 0.
    float m[2] = {-FLT_MAX, -FLT_MAX}, l[2] = {0.0f, 0.0f};

    for (int ri = 0; ri < n_runs; ++ri) {
        const int rb = runs[1 + 2 * ri], re = runs[2 + 2 * ri];
        const int32_t* table = p.tables[t0 + rb];
        const int32_t p_first = p.pos[t0 + rb];
        const int32_t p_last = p_first + (re - rb - 1);
        const int32_t lo_min = window_lo(p_first, p.window), lo_max = window_lo(p_last, p.window);
        // Visible keys of this thread's two rows: lo ≤ j ≤ hi (empty outside the run).
        int32_t lo_r[2], hi_r[2];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const int r = r0 + 8 * k;
            const bool in = r >= rb && r < re;
            hi_r[k] = in ? p_first + (r - rb) : -1;
            lo_r[k] = in ? window_lo(hi_r[k], p.window) : 0;
        }
        const bool all_rows = rb == 0 && re == BM;
        const int kt0 = lo_min / BN, kt1 = p_last / BN;
        // Pool offset of key j (this KV head), or -1 outside [lo_min, p_last]: keys
        // below are released or never read, keys above may not exist yet.
        auto key_offset = [&](int32_t j) -> int64_t {
            if (j < lo_min || j > p_last) return -1;
            return ops::kv_pool_index(table[j / bs], j % bs, kvh, bs, kv_row, D);
        };

        __syncthreads();  // the previous run no longer reads rowoff or the tiles
        if (tid < BN) {
            rowoff[tid] = key_offset(kt0 * BN + tid);
            rowoff[BN + tid] = kt0 + 1 <= kt1 ? key_offset((kt0 + 1) * BN + tid) : -1;
            row_scales(0, tid, scales_of(rowoff[tid]));
            row_scales(1, tid, scales_of(rowoff[BN + tid]));
        }
        __syncthreads();
        issue_tile<D, BN, NT, LD>(stage, kh, k_pool, rowoff);

        for (int kt = kt0; kt <= kt1; ++kt) {
            const int slot = (kt - kt0) & 1;
            const int32_t kb = kt * BN;
            cp_async_wait<0>();
            __syncthreads();  // K tile staged; every warp is done with kh and vh
            if constexpr (kStaged) {
                convert_tile<D, BN, NT, LD, KV>(stage, kh);
                __syncthreads();
            }
            issue_tile<D, BN, NT, LD>(stage, vh, v_pool, rowoff + slot * BN);
            // Table lookups of tile kt + 2 (their latency hides behind S = Q·Kᵀ),
            // stored into this slot once every thread has issued the V copy above.
            const int64_t next_off =
                tid < BN && kt + 2 <= kt1 ? key_offset((kt + 2) * BN + tid) : -1;
            const float2 next_sc = scales_of(next_off);  // i8 pools

            // S = Q·Kᵀ for this warp's 16 rows and BNW keys.
            float sc[BNW / 8][4];
#pragma unroll
            for (int i = 0; i < BNW / 8; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.0f;
#pragma unroll 4
            for (int k = 0; k < D / 16; ++k) {
                uint32_t a[4];
                ldmatrix_x4(a, qh + (rg * 16 + lane % 16) * LD + k * 16 + (lane / 16) * 8);
#pragma unroll
                for (int n2 = 0; n2 < BNW / 16; ++n2) {
                    uint32_t b[4];
                    ldmatrix_x4(b, kh + (ds * BNW + n2 * 16 + (lane / 16) * 8 + lane % 8) * LD +
                                       k * 16 + ((lane / 8) % 2) * 8);
                    mma_f16(sc[2 * n2], a, b[0], b[1]);
                    mma_f16(sc[2 * n2 + 1], a, b[2], b[3]);
                }
            }

            // Scale, mask, row maxima.
            const bool unmasked = all_rows && kb >= lo_max && kb + BN - 1 <= p_first;
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int i = 0; i < BNW / 8; ++i)
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const int k = c / 2;
                    const int jl = ds * BNW + i * 8 + (lane % 4) * 2 + (c & 1);  // key of the tile
                    const int32_t j = kb + jl;
                    float s = sc[i][c];
                    if constexpr (kv_scaled<KV>) s *= rowsc[slot * BN + jl];  // the key's K scale
                    s *= scale_log2;
                    if (!unmasked && (j < lo_r[k] || j > hi_r[k])) s = -INFINITY;
                    sc[i][c] = s;
                    mx[k] = fmaxf(mx[k], s);
                }
#pragma unroll
            for (int k = 0; k < 2; ++k) {
                mx[k] = fmaxf(mx[k], __shfl_xor_sync(0xffffffffu, mx[k], 1));
                mx[k] = fmaxf(mx[k], __shfl_xor_sync(0xffffffffu, mx[k], 2));
            }
            if constexpr (DS > 1) {
                if (lane % 4 == 0) {
                    red[ds * BM + r0] = mx[0];
                    red[ds * BM + r0 + 8] = mx[1];
                }
                row_group_sync<DS>(rg);
#pragma unroll
                for (int k = 0; k < 2; ++k) {
                    float v = red[r0 + 8 * k];
#pragma unroll
                    for (int d = 1; d < DS; ++d) v = fmaxf(v, red[d * BM + r0 + 8 * k]);
                    mx[k] = v;
                }
            }
            // Online softmax.
            float base[2];
#pragma unroll
            for (int k = 0; k < 2; ++k) {
                const float m_new = fmaxf(m[k], mx[k]);
                const float corr = exp2f(m[k] - m_new);
                m[k] = m_new;
                base[k] = m_new;
                l[k] *= corr;
#pragma unroll
                for (int i = 0; i < DW / 8; ++i) {
                    o[i][2 * k] *= corr;
                    o[i][2 * k + 1] *= corr;
                }
            }
#pragma unroll
            for (int i = 0; i < BNW / 8; ++i)
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const float e = exp2f(sc[i][c] - base[c / 2]);
                    // i8 pools: P·V's weight carries the key's V scale (l does not).
                    if constexpr (kv_scaled<KV>)
                        sc[i][c] = e * rowsc[2 * BN + slot * BN + ds * BNW + i * 8 + (lane % 4) * 2 + (c & 1)];
                    else
                        sc[i][c] = e;
                    l[c / 2] += e;
                }
            if constexpr (DS > 1) {
#pragma unroll
                for (int i = 0; i < BNW / 8; ++i) {
                    const int col = ds * BNW + i * 8 + (lane % 4) * 2;
                    *reinterpret_cast<uint32_t*>(ps + r0 * LDP + col) =
                        pack_half2(sc[i][0], sc[i][1]);
                    *reinterpret_cast<uint32_t*>(ps + (r0 + 8) * LDP + col) =
                        pack_half2(sc[i][2], sc[i][3]);
                }
            }

            cp_async_wait<0>();
            __syncthreads();  // V tile staged; P published (DS > 1); every warp is done with kh
            if constexpr (kStaged) {
                convert_tile<D, BN, NT, LD, KV>(stage, vh);
                __syncthreads();
            }
            // Slot `slot` is free: its scales were read before the barrier above.
            if (tid < BN && kt + 2 <= kt1) {
                rowoff[slot * BN + tid] = next_off;
                row_scales(slot, tid, next_sc);
            }
            if (kt < kt1) issue_tile<D, BN, NT, LD>(stage, kh, k_pool, rowoff + (slot ^ 1) * BN);

                // O += P·V over all BN keys, this warp's DW columns.
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
                uint32_t a[4];
                if constexpr (DS == 1) {
                    a[0] = pack_half2(sc[2 * kk][0], sc[2 * kk][1]);
                    a[1] = pack_half2(sc[2 * kk][2], sc[2 * kk][3]);
                    a[2] = pack_half2(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
                    a[3] = pack_half2(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
                } else {
                    ldmatrix_x4(a, ps + (rg * 16 + lane % 16) * LDP + kk * 16 + (lane / 16) * 8);
                }
#pragma unroll
                for (int n2 = 0; n2 < DW / 16; ++n2) {
                    uint32_t b[4];
                    ldmatrix_x4_trans(b, vh + (kk * 16 + ((lane / 8) % 2) * 8 + lane % 8) * LD +
                                             ds * DW + n2 * 16 + (lane / 16) * 8);
                    mma_f16(o[2 * n2], a, b[0], b[1]);
                    mma_f16(o[2 * n2 + 1], a, b[2], b[3]);
                }
            }
        }
    }

    // Row sums: over the quad, then over the DS warps of the row group.
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        l[k] += __shfl_xor_sync(0xffffffffu, l[k], 1);
        l[k] += __shfl_xor_sync(0xffffffffu, l[k], 2);
    }
    if constexpr (DS > 1) {
        // red was last read before the final V barrier, so it is free.
        if (lane % 4 == 0) {
            red[ds * BM + r0] = l[0];
            red[ds * BM + r0 + 8] = l[1];
        }
        row_group_sync<DS>(rg);
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            float v = 0.0f;
#pragma unroll
            for (int d = 0; d < DS; ++d) v += red[d * BM + r0 + 8 * k];
            l[k] = v;
        }
    }
    // Rows of no run (l = 0) belong to the split kernel.
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        if (l[k] <= 0.0f) continue;
        const int64_t t = t0 + r0 + 8 * k;
        float* dst = p.out + (t * p.n_heads + h) * D + ds * DW + (lane % 4) * 2;
        const float inv = 1.0f / l[k];
#pragma unroll
        for (int i = 0; i < DW / 8; ++i)
            *reinterpret_cast<float2*>(dst + i * 8) =
                make_float2(o[i][2 * k] * inv, o[i][2 * k + 1] * inv);
    }
}

template <int D, class KV>
void launch_tile_dk(const ops::AttentionParams& p, const int* plan, int64_t n_tiles,
                    float scale_log2, cudaStream_t s) {
    using T = TileShape<D, KV>;
    allow_smem<attention_tile_kernel<D, KV>>(T::kSmem);
    const dim3 grid(static_cast<unsigned>(p.n_heads), static_cast<unsigned>(n_tiles));
    launch(attention_tile_kernel<D, KV>, grid, T::kThreads, T::kSmem, s, p, plan, scale_log2);
    HF2Q_CUDA_LAUNCH_CHECK();
}

template <int D>
void launch_tile_d(const ops::AttentionParams& p, const int* plan, int64_t n_tiles,
                   float scale_log2, cudaStream_t s) {
    dispatch_kv(p.kv_type, [&]<class KV>() { launch_tile_dk<D, KV>(p, plan, n_tiles, scale_log2, s); });
}

}  // namespace

int tile_rows(int64_t head_dim) {
    return head_dim == 512 ? TileShape<512, float>::kRows : TileShape<256, float>::kRows;
}

void launch_tile(const ops::AttentionParams& p, const int* plan, int64_t n_tiles, float scale_log2,
                 cudaStream_t s) {
    if (launch_tile_wgmma(p, plan, n_tiles, scale_log2, s)) return;
    switch (p.head_dim) {
        case 64:
            return launch_tile_d<64>(p, plan, n_tiles, scale_log2, s);
        case 128:
            return launch_tile_d<128>(p, plan, n_tiles, scale_log2, s);
        case 256:
            return launch_tile_d<256>(p, plan, n_tiles, scale_log2, s);
        case 512:
            return launch_tile_d<512>(p, plan, n_tiles, scale_log2, s);
        default:
            fail("internal error: attention tile kernel for head size ", p.head_dim);
    }
}

}  // namespace hf2q::cuda::attn

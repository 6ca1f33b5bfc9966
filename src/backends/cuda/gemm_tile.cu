// Batched decode's dense products (17-64 tokens) from the tile copy of Q4_K weights
// (ops::Backend::tile_layout), instead of cuBLAS on their BF16 copies: 0.625 bytes a
// value where the copies take 2. At 64 sequences of the 26B-A4B, q/k/v and o took about
// 31 µs of a sliding layer's critical path on an H100 (session 58's trace), reading
// 69 MB of BF16 copies at 2.0-2.4 TB/s.
//
// The copy (repack below) stores a weight's rows in groups of 16, each group's values
// in units of 32 (one Q4_K sub-block): 256 bytes of quants, laid out so that lane L
// of a warp loads the 8 bytes at 8L and has the A fragments (m16n8k16, rows = weight
// rows) of the unit's two k-steps, then 64 bytes of BF16 (scale, −min) pairs, rows
// g and g + 8 side by side. A fragment word is decoded with the BF16 form of the
// exponent trick: (nibbles & 0x000F000F) | 0x43004300 is the pair 128 + q exactly;
// minus 128 (exact), then one fused multiply-add with (d·sc, −dmin·m) rounded to
// BF16. So each weight is rounded to BF16 once more than the BF16 copy rounds it
// (the scale's rounding: about 2^-9 of a value, well under Q4_K's own step).
//
// A block is 16 warps: eight slices of 32 rows (256 a block) times the two sub-blocks
// of each 64-value chunk, so the block's 512 threads decode every weight once and
// reuse it for all tokens (8 n-tiles of 8 at 64). The chunks stream through a ring of
// cp.async slots, the weights asked for before pdl_begin (weights are never written
// by kernels, common.cuh). The K range is split over a cluster of S blocks (S a
// function of n_in alone, so a product gives the same bits alone or in a launch with
// others, at any token count from 17 to 64): each block leaves its partial tile in
// its shared memory and the cluster sums the tiles over distributed shared memory in
// a fixed order, with no global workspace and no second kernel.
#include <cooperative_groups.h>

#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/gemm.h"
#include "backends/cuda/mma.cuh"

namespace hf2q::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = 16;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 256;         // weight rows a block: 8 slices of 32
constexpr int kChunk = 64;         // K values a ring slot holds: two units
constexpr int kSlots = 4;
constexpr int kAhead = kSlots - 1;
constexpr int kUnitBytes = 320;    // 16 rows × 32 values: 256 quant bytes, 64 scale bytes
constexpr int kUnitQuantBytes = 256;
constexpr int kGroupRows = 16;
constexpr int kWeightSlotBytes = (kRows / kGroupRows) * 2 * kUnitBytes;  // 10,240
// One token's chunk: 128 bytes padded to 144, so the 8 rows an ldmatrix reads fall on
// distinct banks.
constexpr int kTokRowBytes = 2 * kChunk + 16;
constexpr int kMaxCluster = 8;
// Partial tiles in shared memory: [token][kRows + 4] floats (the pad puts the lanes of
// an accumulator store on distinct banks).
constexpr int kPartStride = kRows + 4;

template <int kTok>
struct Smem {
    static constexpr int kSlotBytes = kWeightSlotBytes + kTok * kTokRowBytes;
    static constexpr int kRing = kSlots * kSlotBytes;
    static constexpr int kPart = kTok * kPartStride * 4;
    static constexpr int kBytes = kRing > kPart ? kRing : kPart;
    static_assert(kSlotBytes % 16 == 0 && kBytes + 1024 <= 227 * 1024);
};

struct TileProduct {
    const uint8_t* w = nullptr;  // the tile copy
    float* y = nullptr;
    int64_t ys = 0;
    int32_t n_out = 0, block0 = 0;
};

struct TileParams {
    TileProduct p[ops::MultiMatmulParams::kMax];
    int32_t n = 0;
    const __nv_bfloat16* x = nullptr;  // [n_tokens][n_in] BF16, 16-byte aligned
    int32_t n_tokens = 0, n_in = 0, splits = 1;
};

__device__ __forceinline__ uint2 lds64(const uint8_t* p) { return *reinterpret_cast<const uint2*>(p); }

__device__ __forceinline__ uint32_t bf16x2_fma(uint32_t a, uint32_t b, uint32_t c) {
    const __nv_bfloat162 r = __hfma2(*reinterpret_cast<const __nv_bfloat162*>(&a),
                                     *reinterpret_cast<const __nv_bfloat162*>(&b),
                                     *reinterpret_cast<const __nv_bfloat162*>(&c));
    return *reinterpret_cast<const uint32_t*>(&r);
}
__device__ __forceinline__ uint32_t bf16x2_sub(uint32_t a, uint32_t b) {
    const __nv_bfloat162 r =
        __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
    return *reinterpret_cast<const uint32_t*>(&r);
}

// The A fragment (a0 .. a3) of one k-step from its quant word: nibble p (bits 4p ..)
// and p + 4 (bits 16 + 4p ..) are fragment register p's two values. Registers 0 and 2
// are row g (scale pair lo), 1 and 3 row g + 8 (hi); sc/mn: (scale, scale) and
// (−min, −min) of each row.
__device__ __forceinline__ void decode_word(uint32_t w, uint32_t sc_lo, uint32_t mn_lo, uint32_t sc_hi, uint32_t mn_hi,
                                            uint32_t (&a)[4]) {
    constexpr uint32_t k128 = 0x43004300u;  // BF16 128.0, twice
#pragma unroll
    for (int p = 0; p < 4; ++p) {
        const uint32_t q = bf16x2_sub(((w >> (4 * p)) & 0x000F000Fu) | k128, k128);  // exact
        a[p] = bf16x2_fma(q, (p & 1) ? sc_hi : sc_lo, (p & 1) ? mn_hi : mn_lo);
    }
}

// Chunk kc of the block's 16 row groups into dst: each group's two units (640 bytes,
// contiguous in the copy) at dst + 640·group.
__device__ __forceinline__ void stage_weights(const uint8_t* tile_w, int64_t units, int kc, uint8_t* dst) {
    constexpr int kPiecesPerGroup = 2 * kUnitBytes / 16;  // 40
    constexpr int kPieces = (kRows / kGroupRows) * kPiecesPerGroup;
#pragma unroll
    for (int k = 0; k < (kPieces + kThreads - 1) / kThreads; ++k) {
        const int i = static_cast<int>(threadIdx.x) + k * kThreads;
        if (i >= kPieces) break;
        const int grp = i / kPiecesPerGroup, piece = i % kPiecesPerGroup;
        const uint8_t* src = tile_w + (static_cast<uint64_t>(grp) * static_cast<uint64_t>(units) + 2 * kc) * kUnitBytes;
        cp_async16(dst + grp * 2 * kUnitBytes + 16 * piece, src + 16 * piece, 16);
    }
}

// Chunk kc of the tokens' BF16 rows into dst (tokens past n_tokens as zeros).
template <int kTok>
__device__ __forceinline__ void stage_tokens(const TileParams& p, int kc, uint8_t* dst) {
    constexpr int kPieces = kTok * (2 * kChunk / 16);
#pragma unroll
    for (int k = 0; k < (kPieces + kThreads - 1) / kThreads; ++k) {
        const int i = static_cast<int>(threadIdx.x) + k * kThreads;
        if (kPieces % kThreads != 0 && i >= kPieces) break;
        const int tok = i >> 3, piece = i & 7;
        const bool in = tok < p.n_tokens;
        const __nv_bfloat16* src =
            p.x + static_cast<int64_t>(in ? tok : 0) * p.n_in + static_cast<int64_t>(kc) * kChunk + 8 * piece;
        cp_async16(dst + tok * kTokRowBytes + 16 * piece, src, in ? 16 : 0);
    }
}

// acc[mt][nt] += weight rows 32·slice + 16·mt .. + 15 × tokens 8·nt .. + 7 over unit
// `half` of the chunk in `slot`.
template <int kTok>
__device__ __forceinline__ void mma_unit(const uint8_t* slot, int slice, int half, int lane,
                                         float (&acc)[2][kTok / 8][4]) {
    uint32_t a[2][2][4];  // [m-tile][k-step][register]
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
        const uint8_t* unit = slot + ((2 * slice + mt) * 2 + half) * kUnitBytes;
        const uint2 q = lds64(unit + 8 * lane);
        const uint2 s = lds64(unit + kUnitQuantBytes + 8 * (lane >> 2));  // (sc, −mn) of rows g, g + 8
        const uint32_t sc_lo = __byte_perm(s.x, 0, 0x1010), mn_lo = __byte_perm(s.x, 0, 0x3232);
        const uint32_t sc_hi = __byte_perm(s.y, 0, 0x1010), mn_hi = __byte_perm(s.y, 0, 0x3232);
        decode_word(q.x, sc_lo, mn_lo, sc_hi, mn_hi, a[mt][0]);
        decode_word(q.y, sc_lo, mn_lo, sc_hi, mn_hi, a[mt][1]);
    }
    const uint8_t* tok = slot + kWeightSlotBytes;
    // ldmatrix.x4 from token rows: matrices (tokens 0-7, k 0-7), (0-7, 8-15), (8-15,
    // 0-7), (8-15, 8-15) of a pair of n-tiles: b0, b1 of n-tile 2np, then of 2np + 1.
    const uint8_t* b_row = tok + ((lane & 7) + 8 * (lane >> 4)) * kTokRowBytes + 16 * ((lane >> 3) & 1);
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        const int ks = 2 * half + s;  // the k-step within the chunk
#pragma unroll
        for (int np = 0; np < kTok / 16; ++np) {
            uint32_t b[4];
            ldmatrix_x4(b, b_row + np * 16 * kTokRowBytes + 32 * ks);
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                mma_bf16(acc[mt][2 * np], a[mt][s], b[0], b[1]);
                mma_bf16(acc[mt][2 * np + 1], a[mt][s], b[2], b[3]);
            }
        }
    }
}

// f(token, row, value) for each accumulator value of this thread's slice (m16n8
// layout: rows g and g + 8, tokens 2t and 2t + 1 of each n-tile).
template <int kTok, class F>
__device__ __forceinline__ void for_each_acc(const float (&acc)[2][kTok / 8][4], int slice, int lane, F&& f) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < kTok / 8; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r)
                f(nt * 8 + 2 * (lane & 3) + (r & 1), 32 * slice + 16 * mt + (lane >> 2) + 8 * (r >> 1), acc[mt][nt][r]);
}

template <int kTok>
__global__ void __launch_bounds__(kThreads, 1) tile_gemm_kernel(const TileParams p) {
    using S = Smem<kTok>;
    extern __shared__ __align__(16) uint8_t smem[];
    // This block's product (selected, not indexed: no local copy of the parameters).
    TileProduct pr = p.p[0];
#pragma unroll
    for (int i = 1; i < ops::MultiMatmulParams::kMax; ++i)
        if (i < p.n && static_cast<int>(blockIdx.x) >= p.p[i].block0) pr = p.p[i];
    const int local = static_cast<int>(blockIdx.x) - pr.block0;
    const int tile = local / p.splits, split = local % p.splits;
    const int n_chunks = p.n_in / kChunk, units = p.n_in / 32;
    const int c0 = split * n_chunks / p.splits, nc = (split + 1) * n_chunks / p.splits - c0;
    const uint8_t* tile_w = pr.w + static_cast<uint64_t>(tile) * (kRows / kGroupRows) * static_cast<uint64_t>(units) *
                                       kUnitBytes;
    auto slot = [&](int j) { return smem + (j % kSlots) * S::kSlotBytes; };

    // Weights first (one group), before the wait; then each chunk's tokens (a group
    // each), so chunk i is complete once all but the kAhead − 1 latest groups are.
    for (int j = 0; j < kAhead; ++j)
        if (j < nc) stage_weights(tile_w, units, c0 + j, slot(j));
    cp_async_commit();
    pdl_begin();
    for (int j = 0; j < kAhead; ++j) {
        if (j < nc) stage_tokens<kTok>(p, c0 + j, slot(j) + kWeightSlotBytes);
        cp_async_commit();
    }

    const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
    const int slice = warp & 7, half = warp >> 3;
    float acc[2][kTok / 8][4] = {};
    for (int i = 0; i < nc; ++i) {
        cp_async_wait<kAhead - 1>();
        __syncthreads();  // chunk i visible to all; slot (i − 1) free for chunk i + kAhead
        if (i + kAhead < nc) {
            stage_weights(tile_w, units, c0 + i + kAhead, slot(i + kAhead));
            stage_tokens<kTok>(p, c0 + i + kAhead, slot(i + kAhead) + kWeightSlotBytes);
        }
        cp_async_commit();
        mma_unit<kTok>(slot(i), slice, half, lane, acc);
    }
    cp_async_wait<0>();
    __syncthreads();  // the ring is free: the partial tile takes its place

    // The second sub-block's warps hand their sums to the first's (a fixed order).
    float* part = reinterpret_cast<float*>(smem);
    if (half == 1)
        for_each_acc<kTok>(acc, slice, lane, [&](int t, int r, float v) { part[t * kPartStride + r] = v; });
    __syncthreads();
    const int row0 = tile * kRows;
    if (half == 0) {
        if (p.splits == 1) {
            for_each_acc<kTok>(acc, slice, lane, [&](int t, int r, float v) {
                if (t < p.n_tokens && row0 + r < pr.n_out) pr.y[t * pr.ys + row0 + r] = v + part[t * kPartStride + r];
            });
        } else {
            for_each_acc<kTok>(acc, slice, lane, [&](int t, int r, float v) { part[t * kPartStride + r] += v; });
        }
    }
    if (p.splits == 1) return;

    // The cluster's partial tiles (one a split, in its blocks' shared memory), summed in
    // split order: block `split` sums rows split·kRows/S .. + kRows/S − 1 of all.
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const int rows_per = kRows / p.splits, quads = rows_per / 4;
    const float* parts[kMaxCluster];
#pragma unroll
    for (int k = 0; k < kMaxCluster; ++k)
        if (k < p.splits) parts[k] = cluster.map_shared_rank(part, k);
    for (int i = static_cast<int>(threadIdx.x); i < p.n_tokens * quads; i += kThreads) {
        const int t = i / quads, r = split * rows_per + 4 * (i % quads);
        float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int k = 0; k < kMaxCluster; ++k) {
            if (k >= p.splits) break;
            const float4 v = *reinterpret_cast<const float4*>(parts[k] + t * kPartStride + r);
            s.x += v.x;
            s.y += v.y;
            s.z += v.z;
            s.w += v.w;
        }
        float* yt = pr.y + t * pr.ys + row0 + r;
        const float v[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (row0 + r + j < pr.n_out) yt[j] = v[j];
    }
    cluster.sync();  // no block leaves while another still reads its tile
}

// The tile copy's bytes of unit (group, unit j), lane by lane, from Q4_K rows: one
// thread a unit. Rows past n_out are zeros (the copy's row groups fill whole tiles).
__global__ void repack_tile_kernel(const uint8_t* src, uint64_t row_bytes, int64_t n_out, int64_t units,
                                   int64_t n_units, uint8_t* dst) {
    pdl_begin();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n_units;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t grp = i / units, j = i % units;
        uint8_t* out = dst + static_cast<uint64_t>(i) * kUnitBytes;
        const int sb = static_cast<int>(j % 8);  // sub-block of its 256-value block
        // Scale pairs first: rows g and g + 8 at 8g.
        uint16_t sc_bits[16], mn_bits[16];
        const uint8_t* qs[16];
        for (int rr = 0; rr < kGroupRows; ++rr) {
            const int64_t row = grp * kGroupRows + rr;
            qs[rr] = nullptr;
            sc_bits[rr] = mn_bits[rr] = 0;
            if (row >= n_out) continue;
            const uint8_t* blk = src + static_cast<uint64_t>(row) * row_bytes + static_cast<uint64_t>(j / 8) * 144;
            const uint8_t* sc = blk + 4;
            const int s = sb < 4 ? sc[sb] & 63 : (sc[sb + 4] & 15) | ((sc[sb - 4] >> 6) << 4);
            const int m = sb < 4 ? sc[sb + 4] & 63 : (sc[sb + 4] >> 4) | ((sc[sb] >> 6) << 4);
            const float d = half_bits(blk[0] | (blk[1] << 8)), dmin = half_bits(blk[2] | (blk[3] << 8));
            // Exact in f32 (11 + 6 bits), then rounded to BF16 once.
            sc_bits[rr] = __bfloat16_as_ushort(__float2bfloat16_rn(d * static_cast<float>(s)));
            mn_bits[rr] = __bfloat16_as_ushort(__float2bfloat16_rn(-(dmin * static_cast<float>(m))));
            qs[rr] = blk + 16 + 32 * (sb / 2);
        }
        for (int g = 0; g < 8; ++g) {
            uint16_t* o = reinterpret_cast<uint16_t*>(out + kUnitQuantBytes + 8 * g);
            o[0] = sc_bits[g];
            o[1] = mn_bits[g];
            o[2] = sc_bits[g + 8];
            o[3] = mn_bits[g + 8];
        }
        // Lane L = 4g + t, word s (k-step s), nibble n: fragment register p = n % 4, its
        // value n / 4: row g + 8 (p % 2), k 16s + 2t + 8 (p / 2) + n / 4.
        for (int lane = 0; lane < 32; ++lane) {
            const int g = lane >> 2, t = lane & 3;
            uint32_t words[2] = {0, 0};
            for (int s = 0; s < 2; ++s)
                for (int n = 0; n < 8; ++n) {
                    const int p = n & 3, rr = g + 8 * (p & 1), k = 16 * s + 2 * t + 8 * (p >> 1) + (n >> 2);
                    const uint32_t q = qs[rr] ? (qs[rr][k] >> (4 * (sb & 1))) & 15 : 0;
                    words[s] |= q << (n < 4 ? 4 * n : 16 + 4 * (n - 4));
                }
            uint32_t* o = reinterpret_cast<uint32_t*>(out + 8 * lane);
            o[0] = words[0];
            o[1] = words[1];
        }
    }
}

// Splits of the K range (the cluster's size): a function of n_in alone. At least 8
// chunks a block; K = 2,816 (the 26B-A4B's q/k/v) 4, 4,096 (o) 8.
int splits_for(int64_t n_in) {
    const int64_t chunks = n_in / kChunk;
    int s = 1;
    while (s < kMaxCluster && chunks / (2 * s) >= 8) s *= 2;
    return s;
}

template <int kTok>
void launch_instance(const TileParams& p, int blocks, cudaStream_t s) {
    constexpr size_t bytes = Smem<kTok>::kBytes;
    allow_smem<tile_gemm_kernel<kTok>>(bytes, 100);
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = static_cast<unsigned>(p.splits);
    attr[1].val.clusterDim.y = 1;
    attr[1].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(blocks));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = bytes;
    cfg.stream = s;
    cfg.attrs = HF2Q_CUDA_PDL ? attr : attr + 1;
    cfg.numAttrs = HF2Q_CUDA_PDL ? 2 : 1;
    HF2Q_CUDA_CHECK(cudaLaunchKernelEx(&cfg, tile_gemm_kernel<kTok>, p));
    HF2Q_CUDA_LAUNCH_CHECK();
}

}  // namespace

uint64_t tile_layout_bytes(int64_t n_out, int64_t n_in) {
    const uint64_t groups = static_cast<uint64_t>((n_out + kRows - 1) / kRows) * (kRows / kGroupRows);
    return groups * static_cast<uint64_t>(n_in / 32) * kUnitBytes;
}

bool tile_layout_supported(const ops::WeightView& w) {
    return w.type == GgmlType::Q4_K && !w.empty() && w.n_in > 0 && w.n_in % 256 == 0 && w.n_in <= (1 << 20) &&
           w.n_out > 0 && w.n_out <= (int64_t{1} << 24) && w.row_bytes == static_cast<uint64_t>(w.n_in / 256) * 144;
}

void repack_tile_layout(const ops::WeightView& w, uint8_t* dst, cudaStream_t s) {
    HF2Q_ASSERT(tile_layout_supported(w));
    const int64_t units = w.n_in / 32;
    const int64_t groups = static_cast<int64_t>(tile_layout_bytes(w.n_out, w.n_in) / kUnitBytes) / units;
    const int64_t n = groups * units;
    launch(repack_tile_kernel, grid_1d(n, 128), 128, 0, s, static_cast<const uint8_t*>(w.data), w.row_bytes, w.n_out,
           units, n, dst);
    HF2Q_CUDA_LAUNCH_CHECK();
}

bool tile_gemm_covers(const ops::WeightView& w, int64_t n_tokens) {
    return n_tokens >= 17 && n_tokens <= 64 && w.tile_layout != nullptr && aligned16(w.tile_layout) &&
           tile_layout_supported(w);
}

void launch_tile_gemm(const ops::WeightView* const* w, float* const* y, const int64_t* y_stride, int n,
                      const __nv_bfloat16* xb, int64_t n_tokens, cudaStream_t s) {
    HF2Q_ASSERT(n >= 1 && n <= ops::MultiMatmulParams::kMax && aligned16(xb));
    const int64_t n_in = w[0]->n_in;
    TileParams p;
    p.n = n;
    p.x = xb;
    p.n_tokens = static_cast<int32_t>(n_tokens);
    p.n_in = static_cast<int32_t>(n_in);
    p.splits = splits_for(n_in);
    int64_t blocks = 0;
    for (int i = 0; i < n; ++i) {
        const ops::WeightView& wi = *w[i];
        HF2Q_ASSERT(wi.n_in == n_in && tile_gemm_covers(wi, n_tokens));
        TileProduct& q = p.p[i];
        q.w = static_cast<const uint8_t*>(wi.tile_layout);
        q.y = y[i];
        q.ys = y_stride[i] ? y_stride[i] : wi.n_out;
        q.n_out = static_cast<int32_t>(wi.n_out);
        q.block0 = static_cast<int32_t>(blocks);
        blocks += (wi.n_out + kRows - 1) / kRows * p.splits;
    }
    HF2Q_ASSERT(blocks <= 2147483647);
    if (n_tokens <= 32)
        launch_instance<32>(p, static_cast<int>(blocks), s);
    else
        launch_instance<64>(p, static_cast<int>(blocks), s);
}

}  // namespace hf2q::cuda

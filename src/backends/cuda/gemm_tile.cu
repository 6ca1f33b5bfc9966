// Batched decode's dense products (17-64 tokens) from the tile copy of Q4_K weights
// (ops::Backend::tile_layout), instead of cuBLAS on their BF16 copies: 0.625 bytes a
// value where the copies take 2. At 64 sequences of the 26B-A4B, q/k/v and o took about
// 31 µs of a sliding layer's critical path on an H100 (session 58's trace), reading
// 69 MB of BF16 copies at 2.0-2.4 TB/s.
//
// The copy (repack below) stores a weight's rows in groups of 16, each group's values
// in units of 32 (one Q4_K sub-block): 256 bytes of quants, laid out so that lane L
// of a warp loads the 8 bytes at 8L and has the A fragments (m16n8k16 layout, rows =
// weight rows) of the unit's two k16 steps, then 64 bytes of BF16 (scale, −min) pairs,
// rows g and g + 8 side by side. A fragment word is decoded with the BF16 form of the
// exponent trick: (nibbles & 0x000F000F) | 0x43004300 is the pair 128 + q exactly;
// minus 128 (exact), then one fused multiply-add with (d·sc, −dmin·m) rounded to
// BF16. So each weight is rounded to BF16 once more than the BF16 copy rounds it
// (the scale's rounding: about 2^-9 of a value, well under Q4_K's own step).
//
// The products run on Hopper's warpgroup MMA with A from registers (sm_90a): a block
// is two warpgroups, each warp one row group (16 rows, 128 a block), and each k16
// step of a 64-value chunk is one wgmma m64nTk16 a warpgroup (T = 32 or 64 tokens),
// B (the tokens) read by the tensor cores from shared memory in the 128-byte
// swizzle. A warp decodes each weight once, and decodes chunk i + 1 while chunk i
// multiplies (session 60: the mma.sync form of this kernel, where B went through
// ldmatrix and every warp issued 32 MMAs a chunk, issued an instruction every 2.6
// cycles and lost to cuBLAS). The chunks stream through a ring of cp.async slots,
// the weights asked for before pdl_begin (weights are never written by kernels,
// common.cuh). The K range is split over a cluster of S blocks (S a function of n_in
// alone, so a product gives the same bits alone or in a launch with others, at any
// token count from 17 to 64): each block leaves its partial tile in its shared memory
// and the cluster sums the tiles over distributed shared memory in a fixed order,
// with no global workspace and no second kernel.
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/gemm.h"
#include "backends/cuda/mma.cuh"

namespace hf2q::cuda {
namespace {

// Warps a block, one 16-row group each, whole warpgroups: 8 (two warpgroups, 128 rows,
// two blocks an SM) by default; 4 (64 rows, four an SM) for the A/B of more, smaller
// blocks (session 60: a block's chain, not bytes, bounds the kernel).
#ifndef HF2Q_TILE_WARPS
#define HF2Q_TILE_WARPS 8
#endif
constexpr int kWarps = HF2Q_TILE_WARPS;
static_assert(kWarps % 4 == 0 && kWarps <= 16);
constexpr int kThreads = 32 * kWarps;
constexpr int kGroupRows = 16;
constexpr int kRows = kWarps * kGroupRows;  // weight rows a block
constexpr int kChunk = 64;                  // K values a ring slot holds: two units, four k16 steps
#ifndef HF2Q_TILE_SLOTS
#define HF2Q_TILE_SLOTS 5
#endif
constexpr int kSlots = HF2Q_TILE_SLOTS;
// Chunks in flight ahead of the one multiplying: a slot is refilled once every warp
// has retired the products that read it, two chunks after (see the loop).
constexpr int kAhead = kSlots - 2;
constexpr int kUnitBytes = 320;  // 16 rows × 32 values: 256 quant bytes, 64 scale bytes
constexpr int kUnitQuantBytes = 256;
constexpr int kWeightSlotBytes = (kRows / kGroupRows) * 2 * kUnitBytes;  // 5,120 at 8 warps
#ifndef HF2Q_TILE_MAX_CLUSTER
#define HF2Q_TILE_MAX_CLUSTER 8
#endif
constexpr int kMaxCluster = HF2Q_TILE_MAX_CLUSTER;
// The blocks an SM the registers must leave room for (__launch_bounds__' minimum): 16
// warps' worth, two blocks at 8 warps (the 64-token kernel takes 93 registers). Three
// (80 registers) lost 0.6 % at 64 sequences on an H100 (session 63). The shared memory
// is left to set the rest: capping the 32-token kernel at two blocks an SM, where three
// fit, lost 0.3-1.1 % at 17-32 sequences there.
constexpr int kMinBlocks = 16 / kWarps;
// Partial tiles in shared memory: [token][kRows + 4] floats (the pad puts the lanes of
// an accumulator store on distinct banks).
constexpr int kPartStride = kRows + 4;

// A ring slot: the tokens' chunk (one 128-byte row a token, swizzled, 1,024-byte
// aligned for the descriptor), then the weights' 16-row groups, 640 bytes each.
template <int kTok>
struct Smem {
    static constexpr int kTokBytes = kTok * 2 * kChunk;
    static constexpr int kSlotBytes = (kTokBytes + kWeightSlotBytes + 1023) / 1024 * 1024;
    static constexpr int kRing = kSlots * kSlotBytes;
    static constexpr int kPart = kTok * kPartStride * 4;
    static constexpr int kBytes = (kRing > kPart ? kRing : kPart) + 1024;  // + alignment slack
    static_assert(kSlotBytes % 1024 == 0 && kBytes + 1024 <= 227 * 1024);
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

// The A fragments of a chunk's four k16 steps for row group `grp` of the slot's
// weights: step 2u + s is word s of unit u.
__device__ __forceinline__ void decode_chunk(const uint8_t* wslot, int grp, int lane, uint32_t (&a)[4][4]) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
        const uint8_t* unit = wslot + (2 * grp + u) * kUnitBytes;
        const uint2 q = lds64(unit + 8 * lane);
        const uint2 s = lds64(unit + kUnitQuantBytes + 8 * (lane >> 2));  // (sc, −mn) of rows g, g + 8
        const uint32_t sc_lo = __byte_perm(s.x, 0, 0x1010), mn_lo = __byte_perm(s.x, 0, 0x3232);
        const uint32_t sc_hi = __byte_perm(s.y, 0, 0x1010), mn_hi = __byte_perm(s.y, 0, 0x3232);
        decode_word(q.x, sc_lo, mn_lo, sc_hi, mn_hi, a[2 * u]);
        decode_word(q.y, sc_lo, mn_lo, sc_hi, mn_hi, a[2 * u + 1]);
    }
}

// The cluster's barrier (release/acquire: this block's partial tile visible to the
// others' reads), a relaxed one, and distributed shared memory: the address of the
// same variable in block `rank` of the cluster, and a 16-byte load from it.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_sync_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
}
__device__ __forceinline__ uint32_t dsmem_addr(uint32_t addr, int rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
__device__ __forceinline__ float4 ld_dsmem_f4(uint32_t addr) {
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}

// This thread's share of a chunk's copies, its addresses worked out once: chunk kc
// of the block's row groups (each group's two units, 640 bytes contiguous in the copy,
// at 640·group of the slot's weights), and of the tokens' BF16 rows in the 128-byte
// swizzle (mma.cuh: smem_desc_sw128: the 16-byte piece c of token n at piece
// c ^ (n % 8)), tokens past n_tokens as zeros.
template <int kTok>
struct Stager {
    static constexpr int kGroupPieces = 2 * kUnitBytes / 16;  // 40
    static constexpr int kWeightPieces = (kRows / kGroupRows) * kGroupPieces;
    static constexpr int kW = (kWeightPieces + kThreads - 1) / kThreads;
    static constexpr int kTokenPieces = kTok * (2 * kChunk / 16);
    static constexpr int kT = (kTokenPieces + kThreads - 1) / kThreads;
    const uint8_t* w_src[kW];
    int w_dst[kW];
    const uint8_t* t_src[kT];
    int t_dst[kT], t_bytes[kT];

    __device__ __forceinline__ Stager(const TileParams& p, const uint8_t* tile_w, int units) {
        const int tid = static_cast<int>(threadIdx.x);
#pragma unroll
        for (int k = 0; k < kW; ++k) {
            const int i = tid + k * kThreads, grp = i / kGroupPieces, piece = i % kGroupPieces;
            const bool in = i < kWeightPieces;
            w_src[k] = in ? tile_w + static_cast<uint64_t>(grp) * static_cast<uint64_t>(units) * kUnitBytes + 16 * piece
                          : tile_w;
            w_dst[k] = in ? grp * 2 * kUnitBytes + 16 * piece : -1;
        }
#pragma unroll
        for (int k = 0; k < kT; ++k) {
            const int i = tid + k * kThreads, tok = i >> 3, piece = i & 7;
            const bool in = tok < p.n_tokens;
            t_src[k] = reinterpret_cast<const uint8_t*>(p.x + static_cast<int64_t>(in ? tok : 0) * p.n_in + 8 * piece);
            t_dst[k] = i < kTokenPieces ? tok * (2 * kChunk) + ((piece ^ (tok & 7)) << 4) : -1;
            t_bytes[k] = in ? 16 : 0;
        }
    }
    __device__ __forceinline__ void weights(int kc, uint8_t* dst) const {
#pragma unroll
        for (int k = 0; k < kW; ++k)
            if (w_dst[k] >= 0) cp_async16(dst + w_dst[k], w_src[k] + static_cast<int64_t>(kc) * (2 * kUnitBytes), 16);
    }
    __device__ __forceinline__ void tokens(int kc, uint8_t* dst) const {
#pragma unroll
        for (int k = 0; k < kT; ++k)
            if (t_dst[k] >= 0)
                cp_async16(dst + t_dst[k], t_src[k] + static_cast<int64_t>(kc) * (2 * kChunk), t_bytes[k]);
    }
};

// acc += the warpgroup's 64 rows × the slot's tokens over one k16 step.
template <int kTok>
__device__ __forceinline__ void wgmma_step(float (&acc)[kTok / 2], const uint32_t (&a)[4], uint64_t desc) {
    if constexpr (kTok == 64)
        wgmma_m64n64k16_bf16(acc, a, desc);
    else
        wgmma_m64n32k16_bf16(acc, a, desc);
}

// f(token, row, value) for each accumulator value of this warp's 16 rows (the
// m64nT layout: per n8 tile, rows g and g + 8, tokens 2t and 2t + 1).
template <int kTok, class F>
__device__ __forceinline__ void for_each_acc(const float (&acc)[kTok / 2], int warp, int lane, F&& f) {
#pragma unroll
    for (int nt = 0; nt < kTok / 8; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r)
            f(nt * 8 + 2 * (lane & 3) + (r & 1), kGroupRows * warp + (lane >> 2) + 8 * (r >> 1), acc[4 * nt + r]);
}

// This block's share of a launch: its product (selected, not indexed: no local copy
// of the parameters), row tile, K split and chunks c0 .. c0 + nc − 1.
struct TileBlock {
    TileProduct pr;
    const uint8_t* w = nullptr;  // the row tile's groups in the copy
    int tile = 0, split = 0, c0 = 0, nc = 0, units = 0;
};
__device__ __forceinline__ TileBlock tile_block(const TileParams& p) {
    TileBlock b;
    b.pr = p.p[0];
#pragma unroll
    for (int i = 1; i < ops::MultiMatmulParams::kMax; ++i)
        if (i < p.n && static_cast<int>(blockIdx.x) >= p.p[i].block0) b.pr = p.p[i];
    const int local = static_cast<int>(blockIdx.x) - b.pr.block0;
    b.tile = local / p.splits;
    b.split = local % p.splits;
    const int n_chunks = p.n_in / kChunk;
    b.units = p.n_in / 32;
    b.c0 = b.split * n_chunks / p.splits;
    b.nc = (b.split + 1) * n_chunks / p.splits - b.c0;
    b.w = b.pr.w + static_cast<uint64_t>(b.tile) * (kRows / kGroupRows) * static_cast<uint64_t>(b.units) * kUnitBytes;
    return b;
}

__device__ __forceinline__ uint8_t* align1024(uint8_t* p) {
    return p + ((1024u - (smem_u32(p) & 1023u)) & 1023u);
}

// The block's product tile from its accumulators, stored where K is not split, else
// summed over the cluster's partial tiles, which take the ring's place: block `split`
// sums rows split·kRows/S .. + kRows/S − 1 of all, in split order, every split's value
// asked for before the first sum. Every thread of the block calls it (the cluster
// barriers count them all), after its last read of the ring.
template <int kTok>
__device__ __forceinline__ void finish_tile(const float (&acc)[kTok / 2], const TileParams& p, const TileBlock& b,
                                            uint8_t* smem, int warp, int lane) {
    const int row0 = b.tile * kRows;
    if (p.splits == 1) {
        for_each_acc<kTok>(acc, warp, lane, [&](int t, int r, float v) {
            if (t < p.n_tokens && row0 + r < b.pr.n_out) b.pr.y[t * b.pr.ys + row0 + r] = v;
        });
        return;
    }
    __syncthreads();  // the ring is free: the partial tile takes its place
    float* part = reinterpret_cast<float*>(smem);
    for_each_acc<kTok>(acc, warp, lane, [&](int t, int r, float v) { part[t * kPartStride + r] = v; });
    cluster_sync();
    const int rows_per = kRows / p.splits, quads = rows_per / 4;
    const uint32_t part_addr = smem_u32(part);
    uint32_t parts[kMaxCluster];
#pragma unroll
    for (int k = 0; k < kMaxCluster; ++k) parts[k] = k < p.splits ? dsmem_addr(part_addr, k) : 0;
    for (int i = static_cast<int>(threadIdx.x); i < p.n_tokens * quads; i += kThreads) {
        const int t = i / quads, r = b.split * rows_per + 4 * (i % quads);
        const uint32_t off = static_cast<uint32_t>(t * kPartStride + r) * 4;
        float4 v[kMaxCluster];
#pragma unroll
        for (int k = 0; k < kMaxCluster; ++k)
            if (k < p.splits) v[k] = ld_dsmem_f4(parts[k] + off);
        float4 sum = v[0];
#pragma unroll
        for (int k = 1; k < kMaxCluster; ++k) {
            if (k < p.splits) {
                sum.x += v[k].x;
                sum.y += v[k].y;
                sum.z += v[k].z;
                sum.w += v[k].w;
            }
        }
        float* yt = b.pr.y + t * b.pr.ys + row0 + r;
        const float out[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (row0 + r + j < b.pr.n_out) yt[j] = out[j];
    }
    // No block leaves while another still reads its tile. The reads are done (their
    // values were summed), so the arrive orders nothing (relaxed: no wait for the
    // stores to y to drain).
    cluster_sync_relaxed();
}

template <int kTok>
__global__ void __launch_bounds__(kThreads, kMinBlocks) tile_gemm_kernel(const TileParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using S = Smem<kTok>;
    extern __shared__ __align__(16) uint8_t smem_raw[];
    uint8_t* const smem = align1024(smem_raw);
    const TileBlock b = tile_block(p);
    const int c0 = b.c0, nc = b.nc;
    auto slot = [&](int j) { return smem + (j % kSlots) * S::kSlotBytes; };
    const Stager<kTok> st(p, b.w, b.units);

    // Weights first (one group), before the wait; then each chunk's tokens (a group
    // each), so chunk i is complete once all but the kAhead − 1 latest groups are.
    for (int j = 0; j < kAhead; ++j)
        if (j < nc) st.weights(c0 + j, slot(j) + S::kTokBytes);
    cp_async_commit();
    pdl_begin();
    for (int j = 0; j < kAhead; ++j) {
        if (j < nc) st.tokens(c0 + j, slot(j));
        cp_async_commit();
    }

    const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
    float acc[kTok / 2];
#pragma unroll
    for (int i = 0; i < kTok / 2; ++i) acc[i] = 0.0f;
    // Chunk i: decoded into its own fragment buffer (the products of chunk i − 1 still
    // read the other one), multiplied as one wgmma group; then wait<1> retires chunk
    // i − 1's group. So at chunk i's barrier every warp has retired chunk i − 2, whose
    // slot takes chunk i + kAhead.
    auto chunk = [&](int i, uint32_t(&f)[4][4]) {
        cp_async_wait<kAhead - 1>();
        fence_async_smem();  // this thread's token copies, visible to the tensor cores' reads
        __syncthreads();
        if (i + kAhead < nc) {
            st.weights(c0 + i + kAhead, slot(i + kAhead) + S::kTokBytes);
            st.tokens(c0 + i + kAhead, slot(i + kAhead));
        }
        cp_async_commit();
        decode_chunk(slot(i) + S::kTokBytes, warp, lane, f);
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < 4; ++s) wgmma_step<kTok>(acc, f[s], smem_desc_sw128(slot(i) + 32 * s));
        wgmma_commit();
        wgmma_wait<1>();
    };
    // Pairs, then an odd chunk: on every path a buffer is written only after the group
    // that read it retired (else ptxas serializes the products).
    uint32_t f0[4][4], f1[4][4];
    int c = 0;
    for (; c + 1 < nc; c += 2) {
        chunk(c, f0);
        chunk(c + 1, f1);
    }
    if (c < nc) chunk(c, f0);
    wgmma_wait<0>();
    fence_operands(acc);
    cp_async_wait<0>();
    finish_tile<kTok>(acc, p, b, smem, warp, lane);
#else
    (void)p;
    __trap();
#endif
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
            int s = 0, m = 0;
            kscale(blk + 4, sb, s, m);
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
    launch_cluster(tile_gemm_kernel<kTok>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), bytes,
                   static_cast<unsigned>(p.splits), s, p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

}  // namespace

uint64_t tile_layout_bytes(int64_t n_out, int64_t n_in) {
    const uint64_t groups = static_cast<uint64_t>((n_out + kRows - 1) / kRows) * (kRows / kGroupRows);
    return groups * static_cast<uint64_t>(n_in / 32) * kUnitBytes;
}

// Only where the kernel runs (an sm_90a build on Hopper): no copy that nothing reads.
bool tile_layout_supported(const ops::WeightView& w) {
    return use_wgmma() && w.type == GgmlType::Q4_K && !w.empty() && w.n_in > 0 && w.n_in % 256 == 0 &&
           w.n_in <= (1 << 20) && w.n_out > 0 && w.n_out <= (int64_t{1} << 24) &&
           w.row_bytes == static_cast<uint64_t>(w.n_in / 256) * 144;
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

bool tile_gemm_covers(const ops::WeightView& w, int64_t n_tokens, int max_tokens) {
    return n_tokens >= 17 && n_tokens <= std::min(max_tokens, kTileGemmMaxTokens) && w.tile_layout != nullptr &&
           aligned16(w.tile_layout) && tile_layout_supported(w);
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
        HF2Q_ASSERT(wi.n_in == n_in && tile_gemm_covers(wi, n_tokens, kTileGemmMaxTokens));
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

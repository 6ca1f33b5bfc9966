// Batched decode's dense products (17-64 tokens) read from the weights' block formats
// (gemm.h: launch_small_gemm) instead of their BF16 copies: Q4_K holds a weight in
// 0.56 bytes and the Q6_K planes in 0.82 where the copies take 2, and at 64 sequences
// those products read 3.3 GB of copies a step. Session 21's kernel of the same idea
// lost to cuBLAS because its blocks never had enough bytes in flight (ncu: 5.7 % of
// DRAM bandwidth); everything here is arranged around that:
//
//   * A block computes 128 weight rows (4 warps × 32) × all tokens (padded to 32 or
//     64) over a range of 64-value chunks of K. A ring of kSlots chunk slots in shared
//     memory (cp.async groups) keeps kSlots − 1 chunks in flight: ~30 KB of weight
//     bytes a block, two blocks an SM.
//   * The first chunks of weights are asked for before pdl_begin(): weights are never
//     written by kernels (common.cuh), so their latency overlaps the previous kernel.
//     The tokens (activations) only after it.
//   * Split-K over one wave: row tiles × splits ≈ 2 × SMs, at least 8 chunks a split.
//     Partial f32 tiles go to the workspace; the last block of a tile to arrive sums
//     them in split order (the same bits whichever block is last) and resets the
//     tile's counter (CUDA graphs replay the same launch).
//
// The tensor cores multiply tokens (A: BF16 rows staged in shared memory, ldmatrix)
// by weights (B: decoded by each lane from the staged block bytes straight into its
// m16n8k16 fragments). A weight is decoded as expand_to_bf16 decodes it (the f32
// value of dequant.cuh's Piece, rounded to BF16 once), so the products are cuBLAS's
// on the BF16 copies up to the order of the sums.
//
// Off by default (HF2Q_SMALL_GEMM, gemm.h): on an H100 it made a 64-sequence step 11 %
// slower than cuBLAS on the copies. Kept, compiled and tested, as the base of the next
// attempt (docs/performance.md, session 42: what to change).
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/gemm.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/mma.cuh"

namespace hf2q::cuda {
namespace {

constexpr int kRows = 128;     // weight rows a block: 4 warps × 32
constexpr int kThreads = 128;
constexpr int kChunk = 64;     // K values a ring slot holds
constexpr int kMinChunksPerSplit = 8;
constexpr int kMaxSplits = 32;
// Blocks an SM a product's splits aim at (two fit by shared memory). Session 42 measured
// 2; 1 would leave half the SMs' room to the kernels of the other stream (the experts
// beside the dense MLP). Session 43 found the kernel slower than cuBLAS alone, so that
// A/B (out/s42d.sh) was not run; the knob stays for the next attempt's split counts.
#ifndef HF2Q_SMALL_GEMM_WAVE
#define HF2Q_SMALL_GEMM_WAVE 2
#endif
constexpr int kWaveBlocksPerSm = HF2Q_SMALL_GEMM_WAVE;
// One token's chunk in shared memory: 128 bytes padded to 144, so the 8 rows an
// ldmatrix reads fall on distinct banks.
constexpr int kTokRowBytes = 2 * kChunk + 16;

// How a chunk of one weight row is staged (kRowBytes a row, kPieces 16-byte copies)
// and where its pieces come from in the row (src: byte offset of piece `piece` of
// chunk kc in a row of nb 256-value blocks).
template <GgmlType T>
struct Staged;

// Q4_K as stored (144-byte blocks: d, dmin, 12 scale bytes, 128 quant bytes). A chunk
// of 64 values is sub-blocks 2c and 2c + 1 of block b: the block's 16-byte header and
// quant bytes 32c .. 32c + 31 (low nibbles: sub-block 2c, high: 2c + 1). Rows of 48
// bytes (12 words) put the 8 rows a warp's lanes read on distinct banks.
template <>
struct Staged<GgmlType::Q4_K> {
    static constexpr int kRowBytes = 48;
    static constexpr int kPieces = 3;
    static constexpr int kSlots = 6;
    __device__ __forceinline__ static uint64_t src(int kc, int piece, int) {
        const uint64_t b = static_cast<uint64_t>(kc >> 2) * 144;
        return piece == 0 ? b : b + 16 + 32 * (kc & 3) + 16 * (piece - 1);
    }
};

// Q6_K in planes (gemv_q8.cu: ql [nb][128], qh [nb][64], scales [nb][16], d [nb],
// the row padded to 16 bytes). Chunk c of block b (half h = c / 2): ql bytes 64h ..
// 64h + 63 (low nibbles for even c, high for odd), qh bytes 32h .. 32h + 31, the
// block's 16 scales and the aligned 16 bytes that hold its d. Staged as ql 64 | qh 32
// | scales 16 | d's 16 | 16 unused: rows of 144 bytes (36 words), distinct banks.
template <>
struct Staged<GgmlType::Q6_K> {
    static constexpr int kRowBytes = 144;
    static constexpr int kPieces = 8;
    static constexpr int kSlots = 4;
    __device__ __forceinline__ static uint64_t src(int kc, int piece, int nb) {
        const uint64_t b = static_cast<uint64_t>(kc >> 2), h = static_cast<uint64_t>((kc & 3) >> 1);
        const uint64_t n = static_cast<uint64_t>(nb);
        if (piece < 4) return b * 128 + 64 * h + 16 * static_cast<uint64_t>(piece);
        if (piece < 6) return n * 128 + b * 64 + 32 * h + 16 * static_cast<uint64_t>(piece - 4);
        if (piece == 6) return n * 192 + b * 16;
        return (n * 208 + 2 * b) & ~uint64_t{15};
    }
};

// One product of a launch. Blocks block0 .. block0 + tiles·splits − 1 are its; block
// block0 + tile·splits + split computes rows tile·128 .. + 127 over its split of K.
struct SmallProduct {
    const uint8_t* w = nullptr;  // row 0: Q4_K rows or Q6_K planes
    uint64_t row_bytes = 0;
    float* y = nullptr;
    int64_t ys = 0;
    float* part = nullptr;       // splits > 1: [tiles][splits][kTok][kRows] partial sums
    unsigned* arrivals = nullptr;  // splits > 1: [tiles], zero between launches
    int32_t n_out = 0, tiles = 0, splits = 1, block0 = 0;
};

struct SmallParams {
    SmallProduct p[ops::MultiMatmulParams::kMax];
    int32_t n = 0;
    const __nv_bfloat16* x = nullptr;  // [n_tokens][n_in] BF16, 16-byte aligned
    int32_t n_tokens = 0, n_in = 0;
};

__device__ __forceinline__ uint32_t lds32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// B fragments of one weight row for the 4 k-steps of a chunk: b[ks][0] holds values
// 16ks + 2t, + 1 and b[ks][1] values 16ks + 2t + 8, + 9 (low half: the lower k), t =
// lane % 4. r: the row's staged bytes; kc: the chunk's index in the row.
template <GgmlType T>
__device__ __forceinline__ void decode_row(const uint8_t* r, int t, int kc, int nb, uint32_t (&b)[4][2]);

template <>
__device__ __forceinline__ void decode_row<GgmlType::Q4_K>(const uint8_t* r, int t, int kc, int, uint32_t (&b)[4][2]) {
    const uint4 h = *reinterpret_cast<const uint4*>(r);
    const int c = kc & 3;  // the same for the whole block: kscale_header's branches do not diverge
    int sc0, m0, sc1, m1;
    kscale_header(make_uint2(h.x, h.y), make_uint2(h.z, h.w), 2 * c, sc0, m0);
    kscale_header(make_uint2(h.x, h.y), make_uint2(h.z, h.w), 2 * c + 1, sc1, m1);
    // Piece<Q4_K>::decode's arithmetic: d·sc and dmin·m rounded, then one fma.
    const float d = half_bits(h.x), dmin = half_bits(h.x >> 16);
    const float da = __fmul_rn(d, static_cast<float>(sc0)), ma = __fmul_rn(dmin, static_cast<float>(m0));
    const float db = __fmul_rn(d, static_cast<float>(sc1)), mb = __fmul_rn(dmin, static_cast<float>(m1));
    auto v = [](float dd, float mm, uint32_t q) { return fmaf(dd, small_int(static_cast<int32_t>(q & 15)), -mm); };
    // Bytes 2t and 2t + 1 of each 16-byte half are the low half of word t / 2 shifted.
    const int sh = 16 * (t & 1);
    const uint8_t* qs = r + 16 + 4 * (t >> 1);
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
        const uint32_t u0 = lds32(qs + 16 * kk) >> sh, u1 = lds32(qs + 16 * kk + 8) >> sh;
        b[kk][0] = pack_bf16(v(da, ma, u0), v(da, ma, u0 >> 8));
        b[kk][1] = pack_bf16(v(da, ma, u1), v(da, ma, u1 >> 8));
        b[kk + 2][0] = pack_bf16(v(db, mb, u0 >> 4), v(db, mb, u0 >> 12));
        b[kk + 2][1] = pack_bf16(v(db, mb, u1 >> 4), v(db, mb, u1 >> 12));
    }
}

template <>
__device__ __forceinline__ void decode_row<GgmlType::Q6_K>(const uint8_t* r, int t, int kc, int nb,
                                                           uint32_t (&b)[4][2]) {
    const int c = kc & 3, odd = c & 1;
    const int doff = static_cast<int>((static_cast<uint32_t>(nb) * 208u + 2u * static_cast<uint32_t>(kc >> 2)) & 15u);
    const float dh = half_bits(*reinterpret_cast<const uint16_t*>(r + 112 + doff));
    const uint32_t scw = lds32(r + 96 + 4 * c);  // scales 4c .. 4c + 3: one per k-step
    const int sh = 16 * (t & 1);
    const uint8_t* ql = r + 4 * (t >> 1);
    const uint8_t* qh = r + 64 + 4 * (t >> 1);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        // Piece<Q6_K>::decode's arithmetic: d·scale rounded, times q − 32.
        const float ds = __fmul_rn(dh, static_cast<float>(static_cast<int8_t>(scw >> (8 * ks))));
        const int lsh = 4 * odd, hsh = 4 * odd + 2 * (ks >> 1);
        auto v = [&](uint32_t l, uint32_t hb, int k) {
            const int32_t q = static_cast<int32_t>(((l >> (8 * k + lsh)) & 15) | (((hb >> (8 * k + hsh)) & 3) << 4));
            return __fmul_rn(ds, small_int(q - 32));
        };
        const uint32_t l0 = lds32(ql + 16 * ks) >> sh, l1 = lds32(ql + 16 * ks + 8) >> sh;
        const uint32_t h0 = lds32(qh + 16 * (ks & 1)) >> sh, h1 = lds32(qh + 16 * (ks & 1) + 8) >> sh;
        b[ks][0] = pack_bf16(v(l0, h0, 0), v(l0, h0, 1));
        b[ks][1] = pack_bf16(v(l1, h1, 0), v(l1, h1, 1));
    }
}

template <GgmlType T, int kTok>
struct Ring {
    static constexpr int kSlots = Staged<T>::kSlots;
    static constexpr int kWeightBytes = kRows * Staged<T>::kRowBytes;
    static constexpr int kSlotBytes = kWeightBytes + kTok * kTokRowBytes;
    static constexpr int kBytes = kSlots * kSlotBytes;
    static_assert(kWeightBytes % 16 == 0 && kSlotBytes % 16 == 0);
    // Two blocks an SM (228 KB, 1 KB reserved a block).
    static_assert(2 * (kBytes + 1024 + 16) <= 228 * 1024);
};

// One chunk of the 128 weight rows (rows past n_out staged as zeros) into dst.
template <GgmlType T>
__device__ __forceinline__ void stage_weights(const SmallProduct& pr, int row0, int kc, int nb, uint8_t* dst) {
    using S = Staged<T>;
#pragma unroll
    for (int k = 0; k < S::kPieces; ++k) {
        const int i = static_cast<int>(threadIdx.x) + k * kThreads;
        const int r = i / S::kPieces, piece = i % S::kPieces;
        const bool in = row0 + r < pr.n_out;
        const uint8_t* row = pr.w + static_cast<uint64_t>(in ? row0 + r : 0) * pr.row_bytes;
        cp_async16(dst + r * S::kRowBytes + 16 * piece, row + S::src(kc, piece, nb), in ? 16 : 0);
    }
}

// One chunk of the tokens' BF16 rows (tokens past n_tokens staged as zeros) into dst.
template <int kTok>
__device__ __forceinline__ void stage_tokens(const SmallParams& p, int kc, uint8_t* dst) {
#pragma unroll
    for (int k = 0; k < kTok * 8 / kThreads; ++k) {
        const int i = static_cast<int>(threadIdx.x) + k * kThreads;
        const int tok = i >> 3, piece = i & 7;
        const bool in = tok < p.n_tokens;
        const __nv_bfloat16* src =
            p.x + static_cast<int64_t>(in ? tok : 0) * p.n_in + static_cast<int64_t>(kc) * kChunk + 8 * piece;
        cp_async16(dst + tok * kTokRowBytes + 16 * piece, src, in ? 16 : 0);
    }
}

// acc[mt][nt] += tokens 16mt .. 16mt + 15 × weight rows warp·32 + 8nt .. + 7 over the
// chunk in slot (its index in the row: kc).
template <GgmlType T, int kTok>
__device__ __forceinline__ void mma_chunk(const uint8_t* slot, int kc, int nb, float (&acc)[kTok / 16][4][4]) {
    const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
    uint32_t b[4][4][2];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
        decode_row<T>(slot + (warp * 32 + nt * 8 + (lane >> 2)) * Staged<T>::kRowBytes, lane & 3, kc, nb, b[nt]);
    const uint8_t* tok = slot + Ring<T, kTok>::kWeightBytes;
    // ldmatrix.x4: lanes 8i .. 8i + 7 address matrix i's rows: a0 (rows 0-7, k 0-7),
    // a1 (rows 8-15), a2 (k 8-15), a3 (both).
    const uint8_t* a_row = tok + ((lane & 7) + 8 * ((lane >> 3) & 1)) * kTokRowBytes + 16 * (lane >> 4);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        uint32_t a[kTok / 16][4];
#pragma unroll
        for (int mt = 0; mt < kTok / 16; ++mt) ldmatrix_x4(a[mt], a_row + mt * 16 * kTokRowBytes + 32 * ks);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int mt = 0; mt < kTok / 16; ++mt) mma_bf16(acc[mt][nt], a[mt], b[nt][ks][0], b[nt][ks][1]);
    }
}

// f(tok, col, v0, v1) for each pair of adjacent columns of the block's tile this lane
// holds (m16n8 accumulator layout: token row lane / 4 (+8), columns 2 (lane % 4) + 0, 1
// of warp w's 32 rows).
template <int kTok, class F>
__device__ __forceinline__ void for_each_pair(const float (&acc)[kTok / 16][4][4], int warp, int lane, F&& f) {
#pragma unroll
    for (int mt = 0; mt < kTok / 16; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
                f(mt * 16 + (lane >> 2) + 8 * hf, warp * 32 + nt * 8 + 2 * (lane & 3), acc[mt][nt][2 * hf],
                  acc[mt][nt][2 * hf + 1]);
}

// The block's partial tile into its split's slab; the last of the tile's blocks to
// arrive sums the slabs in split order into y and resets the tile's counter.
template <int kTok>
__device__ void reduce_splits(const SmallProduct& pr, int n_tokens, int tile, int split,
                              const float (&acc)[kTok / 16][4][4]) {
    __shared__ int last;
    const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
    constexpr int kSlab = kTok * kRows;
    float* const tile_part = pr.part + static_cast<int64_t>(tile) * pr.splits * kSlab;
    float* const mine = tile_part + static_cast<int64_t>(split) * kSlab;
    for_each_pair<kTok>(acc, warp, lane, [&](int tok, int col, float v0, float v1) {
        *reinterpret_cast<float2*>(mine + tok * kRows + col) = make_float2(v0, v1);
    });
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned before = atomicAdd(pr.arrivals + tile, 1u);
        last = before == static_cast<unsigned>(pr.splits - 1);
        if (last) pr.arrivals[tile] = 0;  // every split has arrived: ready for the next launch
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    // Four values a load and kSumGroups loads a split in flight per thread (up to 32
    // KB a block with the k loop's unrolling): one value at a time, the L2 latency of
    // every split's load in turn made this tail longer than the product.
    constexpr int kSumGroups = 4;
    const int64_t row0 = static_cast<int64_t>(tile) * kRows;
    const int n4 = n_tokens * (kRows / 4);
    const float4* const part4 = reinterpret_cast<const float4*>(tile_part);
    for (int i0 = static_cast<int>(threadIdx.x); i0 < n4; i0 += kThreads * kSumGroups) {
        float4 s[kSumGroups];
#pragma unroll
        for (int u = 0; u < kSumGroups; ++u) s[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
        for (int k = 0; k < pr.splits; ++k) {  // in split order: the same bits whichever block is last
#pragma unroll
            for (int u = 0; u < kSumGroups; ++u) {
                const int i = i0 + u * kThreads;
                if (i >= n4) continue;
                const float4 v = __ldcg(part4 + static_cast<int64_t>(k) * (kSlab / 4) + i);
                s[u].x += v.x;
                s[u].y += v.y;
                s[u].z += v.z;
                s[u].w += v.w;
            }
        }
#pragma unroll
        for (int u = 0; u < kSumGroups; ++u) {
            const int i = i0 + u * kThreads;
            if (i >= n4) continue;
            const int tok = i / (kRows / 4);
            const int64_t row = row0 + 4 * (i % (kRows / 4));
            float* yt = pr.y + tok * pr.ys;
            const float v[4] = {s[u].x, s[u].y, s[u].z, s[u].w};
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (row + j < pr.n_out) yt[row + j] = v[j];
        }
    }
}

template <GgmlType T, int kTok>
__global__ void __launch_bounds__(kThreads, 2) small_gemm_kernel(const SmallParams p) {
    using R = Ring<T, kTok>;
    constexpr int kAhead = R::kSlots - 1;
    extern __shared__ __align__(16) uint8_t ring[];
    // This block's product (selected, not indexed: no local copy of the parameters).
    SmallProduct pr = p.p[0];
#pragma unroll
    for (int i = 1; i < ops::MultiMatmulParams::kMax; ++i)
        if (i < p.n && static_cast<int>(blockIdx.x) >= p.p[i].block0) pr = p.p[i];
    const int local = static_cast<int>(blockIdx.x) - pr.block0;
    const int tile = local / pr.splits, split = local % pr.splits;
    const int nb = p.n_in / 256, n_chunks = p.n_in / kChunk;
    const int c0 = split * n_chunks / pr.splits, nc = (split + 1) * n_chunks / pr.splits - c0;
    const int row0 = tile * kRows;
    auto slot = [&](int j) { return ring + (j % R::kSlots) * R::kSlotBytes; };

    // Weights first (one group), before the wait; then each chunk's tokens (a group
    // each), so chunk i is complete once all but the kAhead − 1 latest groups are.
    for (int j = 0; j < kAhead; ++j)
        if (j < nc) stage_weights<T>(pr, row0, c0 + j, nb, slot(j));
    cp_async_commit();
    pdl_begin();
    for (int j = 0; j < kAhead; ++j) {
        if (j < nc) stage_tokens<kTok>(p, c0 + j, slot(j) + R::kWeightBytes);
        cp_async_commit();
    }

    float acc[kTok / 16][4][4] = {};
    for (int i = 0; i < nc; ++i) {
        cp_async_wait<kAhead - 1>();
        __syncthreads();  // chunk i visible to all; slot (i − 1) free for chunk i + kAhead
        if (i + kAhead < nc) {
            stage_weights<T>(pr, row0, c0 + i + kAhead, nb, slot(i + kAhead));
            stage_tokens<kTok>(p, c0 + i + kAhead, slot(i + kAhead) + R::kWeightBytes);
        }
        cp_async_commit();
        mma_chunk<T, kTok>(slot(i), c0 + i, nb, acc);
    }
    cp_async_wait<0>();

    if (pr.splits > 1) {
        reduce_splits<kTok>(pr, p.n_tokens, tile, split, acc);
        return;
    }
    const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
    for_each_pair<kTok>(acc, warp, lane, [&](int tok, int col, float v0, float v1) {
        const int64_t row = static_cast<int64_t>(row0) + col;
        if (tok >= p.n_tokens) return;
        float* yt = pr.y + tok * pr.ys;
        if (row < pr.n_out) yt[row] = v0;
        if (row + 1 < pr.n_out) yt[row + 1] = v1;
    });
}

int sm_count() {
    static const int n = [] {
        int dev = 0, v = 0;
        HF2Q_CUDA_CHECK(cudaGetDevice(&dev));
        HF2Q_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
        return std::max(v, 1);
    }();
    return n;
}

int tokens_tile(int64_t n_tokens) { return n_tokens <= 32 ? 32 : 64; }

// Splits of a product of `tiles` row tiles over n_in values: one wave of
// kWaveBlocksPerSm blocks an SM, at least kMinChunksPerSplit chunks a split, within the
// workspace. A function of the product's shape alone (and the fixed workspace), so a
// product gives the same bits alone and inside a matmul_multi.
int splits_for(int64_t tiles, int64_t n_in, int64_t n_tokens, const GemmWorkspace& ws) {
    const int64_t slab = static_cast<int64_t>(tokens_tile(n_tokens)) * kRows;
    int64_t s = std::min<int64_t>(
        {int64_t{kWaveBlocksPerSm} * sm_count() / tiles, n_in / kChunk / kMinChunksPerSplit, kMaxSplits});
    s = std::min<int64_t>(s, static_cast<int64_t>(ws.split_floats) / (tiles * slab));
    if (tiles > static_cast<int64_t>(ws.n_arrivals)) s = 1;
    return static_cast<int>(std::max<int64_t>(s, 1));
}

template <GgmlType T, int kTok>
void launch_instance(const SmallParams& p, int blocks, cudaStream_t s) {
    constexpr size_t bytes = Ring<T, kTok>::kBytes;
    allow_smem<small_gemm_kernel<T, kTok>>(bytes, 100);
    launch(small_gemm_kernel<T, kTok>, blocks, kThreads, bytes, s, p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

}  // namespace

bool small_gemm_shape_ok(const ops::WeightView& w, int64_t n_tokens) {
    if (n_tokens < 17 || n_tokens > 64 || w.empty() || w.n_in <= 0 || w.n_in % 256 != 0 || w.n_in > (1 << 24) ||
        w.n_out <= 0 || w.n_out > (int64_t{1} << 30))
        return false;
    if (w.type == GgmlType::Q4_K)
        return w.row_bytes == static_cast<uint64_t>(w.n_in / 256) * 144 && aligned16(w.data);
    if (w.type == GgmlType::Q6_K) return w.decode_layout != nullptr && aligned16(w.decode_layout);
    return false;
}

void launch_small_gemm(const ops::WeightView* const* w, float* const* y, const int64_t* y_stride, int n,
                       const __nv_bfloat16* xb, int64_t n_tokens, GemmWorkspace& ws, cudaStream_t s) {
    HF2Q_ASSERT(n >= 1 && n <= ops::MultiMatmulParams::kMax && aligned16(xb));
    const GgmlType type = w[0]->type;
    const int64_t n_in = w[0]->n_in, slab = static_cast<int64_t>(tokens_tile(n_tokens)) * kRows;
    SmallParams p;
    p.n = n;
    p.x = xb;
    p.n_tokens = static_cast<int32_t>(n_tokens);
    p.n_in = static_cast<int32_t>(n_in);
    int64_t blocks = 0, floats = 0, counters = 0;
    for (int i = 0; i < n; ++i) {
        const ops::WeightView& wi = *w[i];
        HF2Q_ASSERT(wi.type == type && wi.n_in == n_in && small_gemm_shape_ok(wi, n_tokens));
        SmallProduct& q = p.p[i];
        const bool planes = type == GgmlType::Q6_K;
        q.w = static_cast<const uint8_t*>(planes ? wi.decode_layout : wi.data);
        q.row_bytes = planes ? q6k_planes_row_bytes(n_in) : wi.row_bytes;
        q.y = y[i];
        q.ys = y_stride[i] ? y_stride[i] : wi.n_out;
        q.n_out = static_cast<int32_t>(wi.n_out);
        const int64_t tiles = (wi.n_out + kRows - 1) / kRows;
        q.tiles = static_cast<int32_t>(tiles);
        q.splits = splits_for(tiles, n_in, n_tokens, ws);
        q.block0 = static_cast<int32_t>(blocks);
        blocks += tiles * q.splits;
        if (q.splits > 1) {
            q.part = ws.split + floats;
            q.arrivals = ws.arrivals + counters;
            floats += tiles * q.splits * slab;
            counters += tiles;
        }
    }
    if (n > 1 && (floats > static_cast<int64_t>(ws.split_floats) || counters > static_cast<int64_t>(ws.n_arrivals))) {
        // Their split tiles do not fit side by side: one launch each, the same splits.
        for (int i = 0; i < n; ++i) launch_small_gemm(w + i, y + i, y_stride + i, 1, xb, n_tokens, ws, s);
        return;
    }
    HF2Q_ASSERT(blocks <= 2147483647);
    const int g = static_cast<int>(blocks);
    const bool t32 = tokens_tile(n_tokens) == 32;
    if (type == GgmlType::Q4_K)
        t32 ? launch_instance<GgmlType::Q4_K, 32>(p, g, s) : launch_instance<GgmlType::Q4_K, 64>(p, g, s);
    else
        t32 ? launch_instance<GgmlType::Q6_K, 32>(p, g, s) : launch_instance<GgmlType::Q6_K, 64>(p, g, s);
}

}  // namespace hf2q::cuda

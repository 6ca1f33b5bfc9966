// Grouped expert GEMM with the weights decoded in registers (gemm_grouped.cuh:
// launch_reg_tiles): prefill's MoE gate_up and down for the expert types of
// Q4_K_M files (Q4_K, Q5_0, Q8_0).
//
// Why a second kernel? The shared-memory decoder (gemm_grouped.cu) spends about
// eleven instructions per tensor-core instruction (ncu, pp4096 gate_up: 33 % tensor
// pipe, issue slots half busy at 4 warps per scheduler): each value is decoded
// through f32, stored to shared memory as BF16 and read back by ldmatrix, and the
// next stage's raw weights wait in registers. Here
//   - the raw blocks go to shared memory by cp.async, in a 4-stage ring with the
//     activations, so loads run three stages ahead and hold no registers;
//   - each warp reads the quantized words of its own A fragments and decodes two
//     values per instruction in BF16x2 arithmetic: a nibble pair becomes
//     128 + q with one lop3 (0x4300 | q is 128 + q in BF16), one hsub2 makes it q,
//     one hfma2 (or hmul2) applies the scale;
//   - a block row's scales are decoded by one lane of its quad and shuffled to the
//     other three.
// The price is precision, and it is small: the scales d·sc and dmin·m (Q4_K) or d
// (Q5_0, Q8_0) are rounded to BF16 before the multiply, so a weight carries up to
// two BF16 roundings where the other path has one (docs/architecture.md). The
// test reproduces this arithmetic exactly (GroupedTileGemmMatchesBf16Reference).
//
// The fragment layout fixes which values a thread decodes: for k16 step s of a
// 64-value stage, lane t4 holds the pairs (k, k + 2) and (k + 1, k + 3) with
// k = 16·s + 4·t4, which is what a lop3 on a word of four nibble bytes gives. The
// mma wants (2·t4, 2·t4 + 1) and (2·t4 + 8, 2·t4 + 9) of the step instead, so the
// activations are stored permuted to match: within every 16 values, the even ones
// first, then the odd ones (to_bf16's perm16). The product is unchanged (the same
// permutation on both sides of a dot product).
//
// Two kernels share the decoders. 128-token tiles (prefill, experts with 96+ rows)
// run on Hopper's wgmma (grouped_wgmma_gemm_kernel, sm_90a builds); 32-token tiles
// (and 128-token ones elsewhere) on mma.sync m16n8k16 (grouped_reg_gemm_kernel).
// Both use the other kernel's tile: kBM = 128 outputs × BN tokens × 64 values per
// stage, 8 warps, f32 accumulators. With TileArgs::x_rows they gather the
// activation rows themselves, so gate_up converts each token's row once instead of
// once per expert it is routed to (gemm_grouped_tiles). With TileArgs::glu they
// apply gate_up's GEGLU in the epilogue (gemm_grouped.cuh: tile_weight_row), so
// the 2F-wide product never reaches memory.
#include <cuda_bf16.h>

#include "backends/cuda/common.cuh"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/gemm_grouped.cuh"
#include "backends/cuda/mma.cuh"

namespace hf2q::cuda::grouped {
namespace {

constexpr int kStages = 4;

constexpr int kMT = 2;                 // m16 tiles per warp (32 output rows)
constexpr int kRows = 2 * kMT;         // output rows per thread: g + 8·i
constexpr uint32_t kMagic = 0x43004300u;  // BF16 128.0 in both halves

// A stage of one weight row in shared memory: the bytes that hold its 64 values,
// copied as `kPieces` pieces of `kPieceBytes`, `kStride` bytes apart (strides whose
// words spread the 32 lanes of a fragment load over distinct banks).
//   Q4_K: the 16-byte block header (d, dmin, scales), then the 32 nibble bytes of
//         the stage (low nibbles: sub-block 2c, high: 2c + 1).
//   Q5_0: two whole blocks (44 bytes; 4-byte aligned because rows of an even
//         number of blocks are, which reg_tiles_cover checks).
//   Q8_0: 80 bytes from the 16-byte boundary at or below the stage's two blocks
//         (68 bytes), which then start 0, 4, 8 or 12 bytes in (Rows<Q8_0> knows
//         where): five 16-byte copies instead of seventeen 4-byte ones (with those,
//         Q8_0 down took 851 µs a call against Q5_0's 575 at pp4096,
//         docs/performance.md). The last piece may read up to 12 bytes past the
//         row; allocations carry 16 bytes of slack (cuda_backend.cu).
template <GgmlType T>
struct Stage;

template <>
struct Stage<GgmlType::Q4_K> {
    static constexpr int kPieces = 3, kPieceBytes = 16, kStride = 48;
    __device__ static const uint8_t* piece(const uint8_t* row, int64_t k0, int p) {
        const uint8_t* b = row + (k0 >> 8) * 144;
        return p == 0 ? b : b + 16 + 32 * ((k0 >> 6) & 3) + 16 * (p - 1);
    }
};
template <>
struct Stage<GgmlType::Q5_0> {
    static constexpr int kPieces = 11, kPieceBytes = 4, kStride = 48;
    __device__ static const uint8_t* piece(const uint8_t* row, int64_t k0, int p) { return row + (k0 >> 5) * 22 + 4 * p; }
};
template <>
struct Stage<GgmlType::Q8_0> {
    static constexpr int kPieces = 5, kPieceBytes = 16, kStride = 80;
    __device__ static const uint8_t* piece(const uint8_t* row, int64_t k0, int p) {
        const uintptr_t first = reinterpret_cast<uintptr_t>(row + (k0 >> 5) * 34);
        return reinterpret_cast<const uint8_t*>(first & ~uintptr_t{15}) + 16 * p;
    }
};

template <int BN>
struct RegTiling {
    static constexpr int WM = 4, WN = kWarps / WM;
    static constexpr int NT = BN / WN / 8;
    static_assert(kBM / WM == 16 * kMT, "a warp covers kMT m16 tiles");
    static_assert(NT >= 2 && NT % 2 == 0, "B fragments are loaded two n8 tiles at a time");
    template <GgmlType T>
    static constexpr int kABytes = kBM * Stage<T>::kStride;
    static constexpr int kBBytes = BN * kLd * 2;
    template <GgmlType T>
    static constexpr int kStageBytes = kABytes<T> + kBBytes;
    template <GgmlType T>
    static constexpr size_t kSmem = static_cast<size_t>(kStages) * kStageBytes<T>;
};

__device__ __forceinline__ uint32_t lds32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
// The 4 bytes at p ≡ 2 (mod 4): two aligned words and a funnel shift.
__device__ __forceinline__ uint32_t lds32_a2(const uint8_t* p) {
    const uint8_t* a = p - 2;
    return __funnelshift_r(lds32(a), lds32(a + 4), 16);
}

__device__ __forceinline__ __nv_bfloat162 as_bf2(uint32_t u) { return *reinterpret_cast<const __nv_bfloat162*>(&u); }
__device__ __forceinline__ uint32_t as_u32(__nv_bfloat162 v) { return *reinterpret_cast<const uint32_t*>(&v); }
// (a & mask) | add in one lop3: written out because the compiler splits it into
// two when both constants are immediates (a LOP3 takes one).
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t mask, uint32_t add) {
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(mask), "r"(add));
    return d;
}
// 128 + the nibbles at bits 0-3 and 16-19 of w, as a BF16 pair.
__device__ __forceinline__ __nv_bfloat162 nibble_pair(uint32_t w) { return as_bf2(and_or(w, 0x000F000Fu, kMagic)); }

// One thread's view of a stage: the scales of its R rows (BF16 pairs: .x for steps
// 0-1, .y for steps 2-3), loaded once per stage; the quantized words of a k16 step
// (words), loaded per step so that only one step's words occupy registers; and the
// A fragment value pair p (0: values k, k + 2; 1: k + 1, k + 3) of row i (frag).
// Rows are r0 + 8·i of the stage's shared slot sa; R is 4 in the mma.sync kernel
// (two m16 tiles), 2 in the wgmma one (one warp's 16 rows). scales() gets the
// stage index s (Q4_K: which sub-blocks; Q8_0: where its blocks sit in the slot)
// and the rows' global addresses (low bits: `base`, which Q8_0 needs, Stage<Q8_0>).
template <GgmlType T, int R>
struct Rows;

// Q4_K: d1 = d·sc and m1 = dmin·m of the stage's two sub-blocks 2c and 2c + 1 of
// its 256-value block (c = stage index % 4: a stage is 64 values); value d1·q − m1.
// Step s reads the nibble bytes 16·(s % 2) + 4·t4 .. + 3: low nibbles for s < 2
// (sub-block 2c), high ones for s ≥ 2 (sub-block 2c + 1).
template <int R>
struct Rows<GgmlType::Q4_K, R> {
    static constexpr int S = Stage<GgmlType::Q4_K>::kStride;
    uint32_t sc[R], mn[R];

    __device__ void scales(const uint8_t* sa, int r0, int t4, int lane, const uint32_t (&)[R], int64_t s) {
        static_assert(kBK == 64, "a stage is a quarter of a Q4_K block");
        const int c = static_cast<int>(s & 3);
        const uint4 h = *reinterpret_cast<const uint4*>(sa + (r0 + 8 * (t4 % R)) * S);  // this lane's row
        float d1[2], m1[2];
#pragma unroll
        for (int t = 0; t < 2; ++t) {
            const uint32_t j = static_cast<uint32_t>(2 * c + t);
            const uint32_t b4 = __byte_perm(h.y, h.z, j), b8 = __byte_perm(h.z, h.w, j), b0 = __byte_perm(h.x, h.y, j);
            const uint32_t sv = j < 4 ? (b4 & 63) : ((b8 & 15) | ((b0 >> 2) & 0x30));
            const uint32_t mv = j < 4 ? (b8 & 63) : (((b8 >> 4) & 15) | ((b4 >> 2) & 0x30));
            d1[t] = half_bits(h.x) * small_int(static_cast<int32_t>(sv));
            m1[t] = half_bits(h.x >> 16) * small_int(static_cast<int32_t>(mv));
        }
        const uint32_t s2 = pack_bf16(d1[0], d1[1]), m2 = pack_bf16(-m1[0], -m1[1]);
#pragma unroll
        for (int i = 0; i < R; ++i) {
            sc[i] = __shfl_sync(0xffffffffu, s2, (lane & ~3) | i);
            mn[i] = __shfl_sync(0xffffffffu, m2, (lane & ~3) | i);
        }
    }
    __device__ void words(const uint8_t* sa, int r0, int t4, int step, uint32_t (&w)[R][2]) const {
#pragma unroll
        for (int i = 0; i < R; ++i) w[i][0] = lds32(sa + (r0 + 8 * i) * S + 16 + 16 * (step & 1) + 4 * t4);
    }
    __device__ uint32_t frag(const uint32_t (&w)[R][2], int i, int step, int p) const {
        const uint32_t q = w[i][0] >> (4 * (step >> 1) + 8 * p);
        const __nv_bfloat162 v = __hsub2(nibble_pair(q), as_bf2(kMagic));
        const __nv_bfloat162 d = step < 2 ? __low2bfloat162(as_bf2(sc[i])) : __high2bfloat162(as_bf2(sc[i]));
        const __nv_bfloat162 m = step < 2 ? __low2bfloat162(as_bf2(mn[i])) : __high2bfloat162(as_bf2(mn[i]));
        return as_u32(__hfma2(v, d, m));
    }
};

// d of the stage's two blocks (at byte 0 and byte `second`) of this lane's row as a
// BF16 pair, shuffled to the quad: Q5_0 and Q8_0.
template <int S, int R>
__device__ __forceinline__ void block_scales(const uint8_t* sa, int r0, int t4, int lane, int second,
                                             uint32_t (&d)[R]) {
    const uint8_t* mine = sa + (r0 + 8 * (t4 % R)) * S;
    const uint32_t dd = pack_bf16(half_bits(lds32(mine)), half_bits(lds32(mine + second - 2) >> 16));
#pragma unroll
    for (int i = 0; i < R; ++i) d[i] = __shfl_sync(0xffffffffu, dd, (lane & ~3) | i);
}

// Q5_0: blocks of 22 bytes (d, qh, 16 nibble bytes); value d·(q − 16) with bit 4 of
// q from qh. Block 0 of the stage sits at offset 0 (its qh and qs 2 bytes off a
// word), block 1 at 22 (word aligned from qh on). Step s reads block s / 2: qs
// bytes 4·t4 .. + 3 (low nibbles for even s, high for odd) and qh >> 4·t4.
template <int R>
struct Rows<GgmlType::Q5_0, R> {
    static constexpr int S = Stage<GgmlType::Q5_0>::kStride;
    uint32_t d[R];
    __device__ void scales(const uint8_t* sa, int r0, int t4, int lane, const uint32_t (&)[R], int64_t) {
        block_scales<S, R>(sa, r0, t4, lane, 22, d);
    }
    __device__ void words(const uint8_t* sa, int r0, int t4, int step, uint32_t (&w)[R][2]) const {
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const uint8_t* row = sa + (r0 + 8 * i) * S;
            w[i][0] = step < 2 ? lds32_a2(row + 6 + 4 * t4) : lds32(row + 28 + 4 * t4);
            w[i][1] = (step < 2 ? lds32_a2(row + 2) : lds32(row + 24)) >> (4 * t4);
        }
    }
    // The four high bits of the step (qh bits 0-3 or 16-19 after the shift) go to
    // bit 4 of each BF16 mantissa: hb · 0x4001 puts bit i at i and i + 14, so bits 0
    // and 2 (pair 0) land on 4 and 20 after << 4, bits 1 and 3 (pair 1) after << 3.
    __device__ uint32_t frag(const uint32_t (&w)[R][2], int i, int step, int p) const {
        const int hi = step & 1;
        const uint32_t n = w[i][0] >> (4 * hi + 8 * p);
        const uint32_t y = ((w[i][1] >> (16 * hi)) & 15u) * 0x4001u;
        const uint32_t bits = and_or(y << (4 - p), 0x00100010u, kMagic);
        const __nv_bfloat162 v = __hsub2(as_bf2(and_or(n, 0x000F000Fu, bits)), as_bf2(0x43104310u));  // 144
        const __nv_bfloat162 dd = step < 2 ? __low2bfloat162(as_bf2(d[i])) : __high2bfloat162(as_bf2(d[i]));
        return as_u32(__hmul2(v, dd));
    }
};

// Q8_0: blocks of 34 bytes (d, 32 signed bytes); value d·q. Block 0 at offset
// sh[i] of row i's slot (0, 4, 8 or 12: the stage's first byte mod 16, Stage<Q8_0>;
// its bytes 2 off a word), block 1 at sh[i] + 34 (bytes word aligned). Step s reads
// bytes 16·(s % 2) + 4·t4 .. + 3 of block s / 2.
template <int R>
struct Rows<GgmlType::Q8_0, R> {
    static constexpr int S = Stage<GgmlType::Q8_0>::kStride;
    uint32_t d[R];
    int sh[R];
    // Stage s of a row starts 68·s bytes after the row.
    __device__ void scales(const uint8_t* sa, int r0, int t4, int lane, const uint32_t (&base)[R], int64_t s) {
        int mine = 0;  // the shift of the row whose scales this lane decodes (t4 % R)
#pragma unroll
        for (int i = 0; i < R; ++i) {
            sh[i] = static_cast<int>((base[i] + 68u * static_cast<uint32_t>(s)) & 15u);
            if (t4 % R == i) mine = sh[i];
        }
        block_scales<S, R>(sa + mine, r0, t4, lane, 34, d);
    }
    __device__ void words(const uint8_t* sa, int r0, int t4, int step, uint32_t (&w)[R][2]) const {
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const uint8_t* b = sa + (r0 + 8 * i) * S + sh[i] + 16 * (step & 1) + 4 * t4;
            w[i][0] = step < 2 ? lds32_a2(b + 2) : lds32(b + 36);
        }
    }
    // Signed bytes p and p + 2 of the word as exact floats (2^23 + (q + 128)),
    // packed to BF16 (exact: |q| ≤ 128), times d.
    __device__ uint32_t frag(const uint32_t (&w)[R][2], int i, int step, int p) const {
        const uint32_t u = w[i][0] ^ 0x80808080u;
        const float lo = __int_as_float(__byte_perm(u, 0x4B000000u, 0x7440u | p)) - 8388736.0f;
        const float hi = __int_as_float(__byte_perm(u, 0x4B000000u, 0x7442u | p)) - 8388736.0f;
        const __nv_bfloat162 dd = step < 2 ? __low2bfloat162(as_bf2(d[i])) : __high2bfloat162(as_bf2(d[i]));
        return as_u32(__hmul2(as_bf2(pack_bf16(lo, hi)), dd));
    }
};

// A thread's share of a stage's weight copies: two threads per tile row, the first
// taking pieces 0 .. kHalf − 1 of the row's stage, the second the rest. The tile's
// rows are tile_weight_row's (rows past the last repeat it; their outputs are not
// written). The source row is found once; a stage only adds its offset.
template <GgmlType T>
struct WeightCopy {
    using St = Stage<T>;
    static constexpr int kHalf = (St::kPieces + 1) / 2;
    int row, first, count;
    const uint8_t* src;
    __device__ WeightCopy(const TileArgs& a, const BlockTile& t, int tid)
        : row(tid / 2), first((tid % 2) * kHalf), count(tid % 2 ? St::kPieces - kHalf : kHalf),
          src(t.w + static_cast<uint64_t>(tile_weight_row(a, t, tid / 2)) * a.row_bytes) {}
    // Stage k0's pieces into the stage's weight rows at dst (kStride bytes apart).
    __device__ void issue(unsigned char* dst, int64_t k0) const {
#pragma unroll
        for (int j = 0; j < kHalf; ++j) {
            if (j < count) {
                const int p = first + j;
                unsigned char* const d = dst + row * St::kStride + p * St::kPieceBytes;
                if constexpr (St::kPieceBytes == 16)
                    cp_async16(d, St::piece(src, k0, p), 16);
                else
                    cp_async4(d, St::piece(src, k0, p));
            }
        }
    }
};

// The activation rows one thread copies: tile rows b_n + Step·j, j < J, as element
// offsets into a.x (x_rows gathers them when given), or −1 past the tile's rows.
template <int J, int Step = kThreads / 8>
struct XRows {
    int64_t off[J];
    __device__ XRows(const TileArgs& a, int r0, int r1, int b_n) {
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const int r = r0 + b_n + j * Step;
            off[j] = r < r1 ? static_cast<int64_t>(a.x_rows ? a.x_rows[r] : r) * a.n_in : -1;
        }
    }
};

// The low 32 bits of the global addresses of tile rows r0 + 8·i (Rows::scales).
template <int R>
__device__ __forceinline__ void row_bases(const TileArgs& a, const BlockTile& t, int r0, uint32_t (&base)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i)
        base[i] = static_cast<uint32_t>(
            reinterpret_cast<uintptr_t>(t.w + static_cast<uint64_t>(tile_weight_row(a, t, r0 + 8 * i)) * a.row_bytes));
}

template <GgmlType T, int BN>
__global__ void __launch_bounds__(kThreads, 2) grouped_reg_gemm_kernel(TileArgs a) {
    pdl_begin();
    using G = RegTiling<BN>;
    extern __shared__ __align__(16) unsigned char smem_raw[];

    BlockTile t;
    if (!block_tile<BN>(a, t)) return;  // whole block
    const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
    const int wm = warp % G::WM, wn = warp / G::WM;
    const int g = lane / 4, t4 = lane % 4;

    // Stage s's copies into ring slot s % kStages: the weights (WeightCopy), then the
    // activations, rows r0 .. r1 in 16-byte pieces, 8 threads per row (zeros past
    // r1). The pointers are formed once; a stage only adds its offset.
    const WeightCopy<T> wcopy(a, t, tid);
    const int b_n = tid / 8, b_c = (tid % 8) * 8;
    const XRows<BN / (kThreads / 8)> xr(a, t.r0, t.r1, b_n);
    auto issue = [&](int64_t s) {
        unsigned char* const slot = smem_raw + (s % kStages) * G::template kStageBytes<T>;
        const int64_t k0 = s * kBK;
        wcopy.issue(slot, k0);
        __nv_bfloat16* const sb = reinterpret_cast<__nv_bfloat16*>(slot + G::template kABytes<T>);
#pragma unroll
        for (int j = 0; j < BN / (kThreads / 8); ++j) {
            const int n = b_n + j * (kThreads / 8);
            const bool ok = xr.off[j] >= 0;
            cp_async16(sb + n * kLd + b_c, ok ? a.x + xr.off[j] + k0 + b_c : a.x, ok ? 16 : 0);
        }
    };

    float acc[kMT][G::NT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < G::NT; ++nt)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[mt][nt][j] = 0.0f;

    // This thread's weight rows in the tile (fragment rows g, g + 8 of each m16
    // tile; row row0 + 8·i of the loads) and its B fragment address (see gemm_grouped.cu).
    const int row0 = wm * (kBM / G::WM) + g;  // rows row0 + 8·i, i < kRows
    uint32_t base[kRows];
    row_bases(a, t, row0, base);
    const int b_row = wn * (BN / G::WN) + (lane % 8) + 8 * (lane / 16), b_col = 8 * ((lane / 8) % 2);

    const int64_t n_stages = a.n_in / kBK;
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < n_stages) issue(s);
        cp_async_commit();
    }
    for (int64_t s = 0; s < n_stages; ++s) {
        cp_async_wait<kStages - 2>();
        __syncthreads();  // stage s landed for every thread; slot (s − 1) % kStages is free
        if (s + kStages - 1 < n_stages) issue(s + kStages - 1);
        cp_async_commit();

        const unsigned char* const slot = smem_raw + (s % kStages) * G::template kStageBytes<T>;
        const __nv_bfloat16* const sb = reinterpret_cast<const __nv_bfloat16*>(slot + G::template kABytes<T>);
        Rows<T, kRows> rw;
        rw.scales(slot, row0, t4, lane, base, s);
#pragma unroll
        for (int step = 0; step < kBK / 16; ++step) {
            uint32_t words[kRows][2];
            rw.words(slot, row0, t4, step, words);
            uint32_t af[kMT][4];
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
                af[mt][0] = rw.frag(words, 2 * mt, step, 0);
                af[mt][1] = rw.frag(words, 2 * mt + 1, step, 0);
                af[mt][2] = rw.frag(words, 2 * mt, step, 1);
                af[mt][3] = rw.frag(words, 2 * mt + 1, step, 1);
            }
#pragma unroll
            for (int np = 0; np < G::NT / 2; ++np) {
                uint32_t bf[4];
                ldmatrix_x4(bf, sb + (b_row + 16 * np) * kLd + 16 * step + b_col);
#pragma unroll
                for (int mt = 0; mt < kMT; ++mt) {
                    mma_bf16(acc[mt][2 * np], af[mt], bf[0], bf[1]);
                    mma_bf16(acc[mt][2 * np + 1], af[mt], bf[2], bf[3]);
                }
            }
        }
    }
    cp_async_wait<0>();  // no copy may be left in flight when the block exits
    if (a.glu > 0)
        store_glu_tiles(a, acc, wm * (kBM / G::WM), t.r0 + wn * (BN / G::WN), t.r1);
    else
        store_tiles(a, acc, t.m0 + wm * (kBM / G::WM), t.r0 + wn * (BN / G::WN), t.r1);
}

// The same product on Hopper's warpgroup MMA, for 128-token tiles (prefill): each
// of the two warpgroups owns 64 of the tile's 128 output rows and all 128 tokens,
// one wgmma m64n128k16 per k16 step, so the activations go from shared memory to
// the tensor cores without ldmatrix, each warp decodes only its own 16 rows (the
// mma.sync kernel decodes every row twice, once per token half), and the
// decoding of step k + 1 runs while step k multiplies. The activations are stored
// in the 128-byte swizzle the descriptor names (mma.cuh: smem_desc_sw128).
//
// Groups and slots: one wgmma group per step, A fragments double-buffered. Before
// a step's decode overwrites its buffer, wait<1> retires every group but the last
// (the one two steps back used this buffer). So by step 1 of stage s every group
// of stage s − 1 has retired, and after the barrier of stage s + 1 no warpgroup
// still reads slot (s − 1) % kStages: the ring looks kStages − 2 stages ahead.
template <GgmlType T>
__global__ void __launch_bounds__(kThreads, 2) grouped_wgmma_gemm_kernel(TileArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    pdl_begin();
    constexpr int BN = 128;
    using St = Stage<T>;
    constexpr int kBBytes = BN * kBK * 2;  // 128-byte rows
    constexpr int kABytes = kBM * St::kStride;
    constexpr int kStageBytes = kBBytes + kABytes;
    static_assert(kStageBytes % 1024 == 0, "every stage's B tile starts 1,024-byte aligned");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char* const smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);

    BlockTile t;
    if (!block_tile<BN>(a, t)) return;  // whole block
    const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t4 = lane % 4;
    const int row0 = 16 * warp + g;  // rows row0 and row0 + 8 (warp w of warpgroup w / 4: rows 16·w ..)
    uint32_t base[2];
    row_bases(a, t, row0, base);

    const WeightCopy<T> wcopy(a, t, tid);
    const int b_n = tid / 8, b_c = tid % 8;
    const XRows<BN / (kThreads / 8), kThreads / 8> xr(a, t.r0, t.r1, b_n);
    auto issue = [&](int64_t s) {
        unsigned char* const slot = smem + (s % kStages) * kStageBytes;
        const int64_t k0 = s * kBK;
        wcopy.issue(slot + kBBytes, k0);
#pragma unroll
        for (int j = 0; j < BN / (kThreads / 8); ++j) {
            const int n = b_n + j * (kThreads / 8);
            const bool ok = xr.off[j] >= 0;
            cp_async16(slot + n * 128 + ((b_c ^ (n & 7)) << 4), ok ? a.x + xr.off[j] + k0 + 8 * b_c : a.x,
                       ok ? 16 : 0);
        }
    };

    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    uint32_t af[2][4];

    const int64_t n_stages = a.n_in / kBK;
#pragma unroll
    for (int s = 0; s < kStages - 2; ++s) {
        if (s < n_stages) issue(s);
        cp_async_commit();
    }
    for (int64_t s = 0; s < n_stages; ++s) {
        cp_async_wait<kStages - 3>();
        __syncthreads();  // stage s landed; every warpgroup is done with slot (s − 2) % kStages
        if (s + kStages - 2 < n_stages) issue(s + kStages - 2);
        cp_async_commit();

        const unsigned char* const slot = smem + (s % kStages) * kStageBytes;
        Rows<T, 2> rw;
        rw.scales(slot + kBBytes, row0, t4, lane, base, s);
#pragma unroll
        for (int step = 0; step < kBK / 16; ++step) {
            uint32_t words[2][2];
            rw.words(slot + kBBytes, row0, t4, step, words);
            uint32_t(&f)[4] = af[step % 2];
            wgmma_wait<1>();
            f[0] = rw.frag(words, 0, step, 0);
            f[1] = rw.frag(words, 1, step, 0);
            f[2] = rw.frag(words, 0, step, 1);
            f[3] = rw.frag(words, 1, step, 1);
            wgmma_fence();
            wgmma_m64n128k16_bf16(acc, f, smem_desc_sw128(slot + 32 * step));
            wgmma_commit();
        }
    }
    wgmma_wait<0>();
    fence_operands(acc);
    cp_async_wait<0>();
    // The m64n128 accumulators of a warp are the C fragments of one m16 × 16 n8 tiles.
    const auto& tiles = reinterpret_cast<const float(&)[1][16][4]>(acc);
    if (a.glu > 0)
        store_glu_tiles(a, tiles, 16 * warp, t.r0, t.r1);
    else
        store_tiles(a, tiles, t.m0 + 16 * warp, t.r0, t.r1);
#else
    (void)a;
    __trap();
#endif
}

template <GgmlType T>
constexpr size_t wgmma_smem() {
    return static_cast<size_t>(kStages) * (128 * kBK * 2 + kBM * Stage<T>::kStride) + 1024;  // + alignment slack
}

template <GgmlType T, int BN>
void launch_typed(const TileArgs& a, unsigned m_tiles, unsigned n_tiles, cudaStream_t s) {
    constexpr size_t smem = RegTiling<BN>::template kSmem<T>;
    allow_smem<grouped_reg_gemm_kernel<T, BN>>(smem);
    launch(grouped_reg_gemm_kernel<T, BN>, dim3(m_tiles, n_tiles), kThreads, smem, s, a);
}

template <GgmlType T>
void launch_type(const TileArgs& a, unsigned m_tiles, unsigned n_tiles, bool wide, cudaStream_t s) {
    if (wide && use_wgmma()) {
        constexpr size_t smem = wgmma_smem<T>();
        allow_smem<grouped_wgmma_gemm_kernel<T>>(smem);
        launch(grouped_wgmma_gemm_kernel<T>, dim3(m_tiles, n_tiles), kThreads, smem, s, a);
    } else if (wide)
        launch_typed<T, 128>(a, m_tiles, n_tiles, s);
    else
        launch_typed<T, 32>(a, m_tiles, n_tiles, s);
}

}  // namespace

bool reg_tiles_cover(GgmlType type, const void* w, uint64_t row_bytes, uint64_t expert_bytes, int64_t n_in) {
    if (n_in <= 0 || n_in % kBK != 0) return false;
    const uint64_t align = type == GgmlType::Q4_K ? 16 : 4;  // the cp.async piece size
    if (type != GgmlType::Q4_K && type != GgmlType::Q5_0 && type != GgmlType::Q8_0) return false;
    return (reinterpret_cast<uintptr_t>(w) | row_bytes | expert_bytes) % align == 0;
}

void launch_reg_tiles(const TileArgs& a, GgmlType type, unsigned m_tiles, unsigned n_tiles, bool wide,
                      cudaStream_t s) {
    switch (type) {
        case GgmlType::Q4_K: launch_type<GgmlType::Q4_K>(a, m_tiles, n_tiles, wide, s); break;
        case GgmlType::Q5_0: launch_type<GgmlType::Q5_0>(a, m_tiles, n_tiles, wide, s); break;
        case GgmlType::Q8_0: launch_type<GgmlType::Q8_0>(a, m_tiles, n_tiles, wide, s); break;
        default: HF2Q_ASSERT(false);
    }
    HF2Q_CUDA_LAUNCH_CHECK();
}

}  // namespace hf2q::cuda::grouped

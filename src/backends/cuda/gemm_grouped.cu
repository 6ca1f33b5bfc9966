// Grouped expert GEMM with the weight tiles decoded in shared memory (gemm.h:
// gemm_grouped_tiles): the prefill MoE's gate_up and down products.
//
// Why not gemm_bf16_grouped (expand every active expert to BF16, then cuBLAS's
// grouped GEMM)? At 4,096 tokens the 26B-A4B's expansion writes and reads back
// about 1.5 GB per layer, and the grouped call reached 131 TFLOP/s where dense
// GEMMs of the same sizes reach 500+: the MoE was 48 % of pp4096. Here each block
// decodes its weight tile (dq8, the same values the expansion writes) straight into
// shared memory, so the quantized bytes are the only weight traffic, and one launch
// covers every expert.
//
// The tile: kBM = 128 weight rows (outputs) × BN routed rows (tokens of one
// expert) × kBK = 64 values of the reduction per stage, 8 warps (4 along the
// outputs, 2 along the tokens), mma.sync m16n8k16 BF16 × BF16 -> f32. Two stages
// in shared memory: while the warps multiply stage k, the next stage's activations
// arrive by cp.async and its quantized weights arrive in registers (Piece::fetch,
// issued a stage ahead); after the multiply they are decoded and stored as BF16.
// One barrier per stage.
//
// Which (expert, token tile) a block works on comes from the device offsets
// (find_tile), so the grid only needs an upper bound of the tile count (blocks
// beyond the last tile return at once) and the launch needs nothing from the host:
// batched decode (routing on the device, CUDA graphs) can use it too.
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/gemm.h"
#include "backends/cuda/gemm_grouped.cuh"
#include "backends/cuda/mma.cuh"

namespace hf2q::cuda {
namespace {

using namespace grouped;

// 128-token tiles for experts with 96+ rows (else expansion + cuBLAS). A compile
// definition so the two paths can be measured against each other.
#ifndef HF2Q_GROUPED_WIDE_TILES
#define HF2Q_GROUPED_WIDE_TILES 1
#endif
constexpr bool kWideTiles = HF2Q_GROUPED_WIDE_TILES != 0;

constexpr int kPieces = kBK / 8;                    // 8-value pieces per tile row and stage
constexpr int kAPieces = kBM * kPieces / kThreads;  // weight pieces per thread and stage
static_assert(kBM * kPieces % kThreads == 0, "every thread decodes the same number of pieces");

template <int BN>
struct Tiling {
    static constexpr int WM = 4, WN = kWarps / WM;  // warps along the outputs and the tokens
    static constexpr int MT = kBM / WM / 16;        // m16 tiles per warp
    static constexpr int NT = BN / WN / 8;          // n8 tiles per warp
    static_assert(NT >= 2 && NT % 2 == 0, "B fragments are loaded two n8 tiles at a time");
    static constexpr int kStage = (kBM + BN) * kLd;  // BF16 values of one stage (A, then B)
    static constexpr size_t kSmem = 2 * static_cast<size_t>(kStage) * sizeof(__nv_bfloat16);
};

// The pieces the tile decodes: dq8's fetch/decode split (dequant.cuh), except for
// Q4_K and Q5_0, the expert types of Q4_K_M files, and Q8_0 (Q4_K here), where the generic decode cost about 200
// instructions per 8 weights (ncu) and made the kernel ALU-bound. Here the K-quant
// header comes in one 16-byte load (blocks are 16-byte aligned: gemm_grouped_tiles
// checks), the sub-block's scale bytes are picked with prmt instead of byte
// selects, and each value becomes a float with one prmt (2^23 + q) and one add.
// The same operations as the CPU's dequantizer: d1·q − m1 in one fma.
template <GgmlType T>
struct TilePiece : Piece<T> {
    __device__ __forceinline__ static TilePiece fetch(const uint8_t* row, int64_t k) { return {Piece<T>::fetch(row, k)}; }
};

template <>
struct TilePiece<GgmlType::Q4_K> {
    uint4 h;  // d, dmin, scales[12]
    uint2 q;  // the 8 bytes holding this piece's nibbles
    __device__ __forceinline__ static TilePiece fetch(const uint8_t* row, int64_t k) {
        const uint8_t* b = row + (k >> 8) * 144;
        const int e = static_cast<int>(k & 255);
        return {*reinterpret_cast<const uint4*>(b), *reinterpret_cast<const uint2*>(b + 16 + 32 * (e >> 6) + (e & 31))};
    }
    __device__ __forceinline__ void decode(int64_t k, float (&v)[8]) const {
        const int e = static_cast<int>(k & 255);
        const uint32_t j = static_cast<uint32_t>(e >> 5);  // sub-block 0..7
        // Low bytes: header byte 4 + j, 8 + j, and j (kscale's s[j], s[j + 4], s[j − 4]).
        const uint32_t b4 = __byte_perm(h.y, h.z, j), b8 = __byte_perm(h.z, h.w, j), b0 = __byte_perm(h.x, h.y, j);
        const uint32_t sc = j < 4 ? (b4 & 63) : ((b8 & 15) | ((b0 >> 2) & 0x30));
        const uint32_t m = j < 4 ? (b8 & 63) : (((b8 >> 4) & 15) | ((b4 >> 2) & 0x30));
        const float d1 = half_bits(h.x) * small_int(static_cast<int32_t>(sc));
        const float m1 = half_bits(h.x >> 16) * small_int(static_cast<int32_t>(m));
        const int shift = (e & 32) ? 4 : 0;
        const uint32_t w[2] = {(q.x >> shift) & 0x0F0F0F0Fu, (q.y >> shift) & 0x0F0F0F0Fu};
#pragma unroll
        for (int i = 0; i < 8; ++i)
            v[i] = fmaf(d1, __int_as_float(__byte_perm(w[i / 4], 0x4B000000u, 0x7440u | (i % 4))) - 8388608.0f, -m1);
    }
};

// Q5_0, the expert down type of Q4_K_M files (704-wide rows take no K-quant): blocks
// are 22 bytes, so only 2-byte aligned; the words holding a piece are loaded at
// 4-byte alignment and shifted into place without branches (load8_a2). The 8 high
// bits are spread to the bytes' bit 4 with one multiply (bit i -> bit 8·i).
template <>
struct TilePiece<GgmlType::Q5_0> {
    uint32_t dq, qh;  // d in the low 16 bits of dq; qh: the block's 32 high bits
    uint2 q;          // the 8 bytes holding this piece's nibbles
    __device__ __forceinline__ static TilePiece fetch(const uint8_t* row, int64_t k) {
        const uint8_t* b = row + (k >> 5) * 22;
        const uintptr_t off = reinterpret_cast<uintptr_t>(b) & 3;  // 0 or 2
        const uint32_t* w = reinterpret_cast<const uint32_t*>(b - off);
        const uint32_t sh = static_cast<uint32_t>(off) * 8;
        const uint32_t w0 = w[0], w1 = w[1];
        return {w0 >> sh, __funnelshift_rc(w0, w1, 16 + sh), load8_a2(b + 6 + (k & 15))};
    }
    __device__ __forceinline__ void decode(int64_t k, float (&v)[8]) const {
        const int j = static_cast<int>(k & 31);
        const float d = half_bits(dq);
        const int shift = j < 16 ? 0 : 4;
        const uint32_t hb = qh >> j;
        const uint32_t w[2] = {((q.x >> shift) & 0x0F0F0F0Fu) | ((((hb & 15u) * 0x00204081u) & 0x01010101u) << 4),
                               ((q.y >> shift) & 0x0F0F0F0Fu) | (((((hb >> 4) & 15u) * 0x00204081u) & 0x01010101u) << 4)};
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = d * (__int_as_float(__byte_perm(w[i / 4], 0x4B000000u, 0x7440u | (i % 4))) - 8388624.0f);
    }
};

// Q8_0 (34-byte blocks, 2-byte aligned): the same word loads (load8_a2); the signed
// bytes become floats through 2^23 + (q + 128).
template <>
struct TilePiece<GgmlType::Q8_0> {
    uint32_t d;  // in the low 16 bits
    uint2 q;     // this piece's 8 signed bytes
    __device__ __forceinline__ static TilePiece fetch(const uint8_t* row, int64_t k) {
        const uint8_t* b = row + (k >> 5) * 34;
        const uint32_t d = *reinterpret_cast<const uint16_t*>(b);
        return {d, load8_a2(b + 2 + (k & 31))};
    }
    __device__ __forceinline__ void decode(int64_t, float (&v)[8]) const {
        const float dd = half_bits(d);
        const uint32_t w[2] = {q.x ^ 0x80808080u, q.y ^ 0x80808080u};
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = dd * (__int_as_float(__byte_perm(w[i / 4], 0x4B000000u, 0x7440u | (i % 4))) - 8388736.0f);
    }
};

template <GgmlType T, int BN>
__global__ void __launch_bounds__(kThreads, 2) grouped_tile_gemm_kernel(TileArgs a) {
    pdl_begin();
    using G = Tiling<BN>;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __nv_bfloat16* const smem = reinterpret_cast<__nv_bfloat16*>(smem_raw);

    BlockTile t;
    if (!block_tile<BN>(a, t)) return;  // whole block
    const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
    const int wm = warp % G::WM, wn = warp / G::WM;

    // This thread's pieces of a stage: values col .. col + 8 of tile rows row0 + 32·i
    // (weights: i < kAPieces; activations: the same pattern over BN rows). Weight rows
    // past n_out decode as zeros (their outputs are not written).
    constexpr int kRowStep = kThreads / kPieces;
    const int row0 = tid / kPieces, col = (tid % kPieces) * 8;
    // Stage k0's weight pieces: fetch_a issues the loads into raw (one stage ahead),
    // put_a decodes them and stores them as BF16 into the stage's shared tile. Every
    // piece loads an in-bounds address (rows clamped to n_out − 1, values to the last
    // piece of the row; n_in % 8 == 0); pieces past the row or the outputs store zeros.
    using P = TilePiece<T>;
    P raw[kAPieces];
    auto fetch_a = [&](int64_t k0) {
        const int64_t k = k0 + col < a.n_in ? k0 + col : a.n_in - 8;
#pragma unroll
        for (int i = 0; i < kAPieces; ++i) {
            const int64_t m = min(t.m0 + row0 + kRowStep * i, a.n_out - 1);
            raw[i] = P::fetch(t.w + static_cast<uint64_t>(m) * a.row_bytes, k);
        }
    };
    auto put_a = [&](__nv_bfloat16* sa, int64_t k0) {
        const bool k_in = k0 + col < a.n_in;
        const int64_t k = k_in ? k0 + col : a.n_in - 8;
#pragma unroll
        for (int i = 0; i < kAPieces; ++i) {
            const bool ok = k_in && t.m0 + row0 + kRowStep * i < a.n_out;
            float v[8];
            raw[i].decode(k, v);
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = ok ? v[j] : 0.0f;
            *reinterpret_cast<uint4*>(sa + (row0 + kRowStep * i) * kLd + col) = pack8_bf16(v);
        }
    };
    // Stage k0's activation rows r0 .. r1 by cp.async (zeros past the expert's rows or
    // the row end).
    auto load_b = [&](__nv_bfloat16* sb, int64_t k0) {
        const int64_t k = k0 + col;
#pragma unroll
        for (int n = row0; n < BN; n += kRowStep) {
            const int64_t r = t.r0 + n;
            const bool ok = r < t.r1 && k < a.n_in;
            cp_async16(sb + n * kLd + col, ok ? a.x + r * a.n_in + k : a.x, ok ? 16 : 0);
        }
    };

    float acc[G::MT][G::NT][4];
#pragma unroll
    for (int mt = 0; mt < G::MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < G::NT; ++nt)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[mt][nt][j] = 0.0f;

    // Fragment addresses inside a stage (see ldmatrix_x4): the A matrices are (rows
    // 0-7, 8-15) × (k 0-7, 8-15) in the order a0..a3; the B matrices (tokens 0-7, k
    // 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15): b0, b1 of two n8 tiles.
    const int a_row = wm * (kBM / G::WM) + (lane % 8) + 8 * ((lane / 8) % 2), a_col = 8 * (lane / 16);
    const int b_row = wn * (BN / G::WN) + (lane % 8) + 8 * (lane / 16), b_col = 8 * ((lane / 8) % 2);

    const int64_t n_stages = (a.n_in + kBK - 1) / kBK;
    fetch_a(0);
    put_a(smem, 0);
    load_b(smem + kBM * kLd, 0);
    cp_async_commit();
    if (n_stages > 1) fetch_a(kBK);
    for (int64_t s = 0; s < n_stages; ++s) {
        const __nv_bfloat16* const sa = smem + (s % 2) * G::kStage;
        const __nv_bfloat16* const sb = sa + kBM * kLd;
        __nv_bfloat16* const next = smem + ((s + 1) % 2) * G::kStage;
        cp_async_wait<0>();
        __syncthreads();  // stage s complete; every warp is done with stage s − 1's buffer
        const bool more = s + 1 < n_stages;
        if (more) {
            load_b(next + kBM * kLd, (s + 1) * kBK);
            cp_async_commit();
        }
#pragma unroll
        for (int kk = 0; kk < kBK; kk += 16) {
            uint32_t af[G::MT][4];
#pragma unroll
            for (int mt = 0; mt < G::MT; ++mt) ldmatrix_x4(af[mt], sa + (a_row + 16 * mt) * kLd + kk + a_col);
#pragma unroll
            for (int np = 0; np < G::NT / 2; ++np) {
                uint32_t bf[4];
                ldmatrix_x4(bf, sb + (b_row + 16 * np) * kLd + kk + b_col);
#pragma unroll
                for (int mt = 0; mt < G::MT; ++mt) {
                    mma_bf16(acc[mt][2 * np], af[mt], bf[0], bf[1]);
                    mma_bf16(acc[mt][2 * np + 1], af[mt], bf[2], bf[3]);
                }
            }
        }
        // Stage s + 1's weights were fetched during this stage's multiply (the loads
        // had the whole of it to arrive); decode them, then fetch stage s + 2's.
        if (more) {
            put_a(next, (s + 1) * kBK);
            if (s + 2 < n_stages) fetch_a((s + 2) * kBK);
        }
    }

    store_tiles(a, acc, t.m0 + wm * (kBM / G::WM), t.r0 + wn * (BN / G::WN), t.r1);
}

// The weight types with a tile decoder here: the block formats of the common
// file types (others take the expansion path).
bool tile_type(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_0:
        case GgmlType::Q5_0:
        case GgmlType::Q8_0:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
        case GgmlType::Q6_K: return true;
        default: return false;
    }
}

template <class F>
void dispatch_tile_type(GgmlType t, F&& f) {
    switch (t) {
        case GgmlType::Q4_0: f.template operator()<GgmlType::Q4_0>(); return;
        case GgmlType::Q5_0: f.template operator()<GgmlType::Q5_0>(); return;
        case GgmlType::Q8_0: f.template operator()<GgmlType::Q8_0>(); return;
        case GgmlType::Q4_K: f.template operator()<GgmlType::Q4_K>(); return;
        case GgmlType::Q5_K: f.template operator()<GgmlType::Q5_K>(); return;
        case GgmlType::Q6_K: f.template operator()<GgmlType::Q6_K>(); return;
        default: HF2Q_ASSERT(false);
    }
}

template <int BN>
void launch_tiles(const TileArgs& a, GgmlType type, unsigned m_tiles, unsigned n_tiles, cudaStream_t s) {
    dispatch_tile_type(type, [&]<GgmlType T>() {
        allow_smem<grouped_tile_gemm_kernel<T, BN>>(Tiling<BN>::kSmem);
        launch(grouped_tile_gemm_kernel<T, BN>, dim3(m_tiles, n_tiles), kThreads, Tiling<BN>::kSmem, s, a);
    });
    HF2Q_CUDA_LAUNCH_CHECK();
}

// Whether gemm_grouped_tiles takes p on the register-decoding kernels
// (gemm_grouped_reg.cu: Q4_K / Q5_0 / Q8_0 weights and inputs they can load) rather
// than its shared-memory decoder.
bool grouped_tiles_in_registers(const ops::MoeMatmulParams& p) {
    const int64_t n_in = p.w.n_in;
    return reg_tiles_cover(p.w.type, p.w.data, p.w.row_bytes, p.expert_bytes, n_in) &&
           (p.x_stride ? p.x_stride : n_in) % 4 == 0 && aligned16(p.x);  // to_bf16's perm16 reads float4s
}

}  // namespace

ExpertLoad expert_load(const int32_t* host_offsets, int64_t n_experts) {
    ExpertLoad l;
    for (int64_t e = 0; e < n_experts; ++e) {
        const int64_t c = host_offsets[e + 1] - host_offsets[e];
        if (c <= 0) continue;
        ++l.active;
        l.tiles32 += (c + 31) / 32;
        l.tiles128 += (c + 127) / 128;
    }
    return l;
}

bool gemm_grouped_tiles(const ops::MoeMatmulParams& p, const ExpertLoad* load, GemmWorkspace& ws, cudaStream_t s) {
    const int64_t n_in = p.w.n_in, n_out = p.w.n_out;
    if (!tile_type(p.w.type) || n_in <= 0 || n_in % 8 != 0 || p.n_rows <= 0 || n_out <= 0) return false;
    const bool in_registers = grouped_tiles_in_registers(p);
    if (p.geglu && (!in_registers || p.y_prep != nullptr)) return false;
    // TilePiece<Q4_K> loads the 16-byte header of every block as one uint4.
    if (p.w.type == GgmlType::Q4_K &&
        ((reinterpret_cast<uintptr_t>(p.w.data) | p.w.row_bytes | p.expert_bytes) % 16) != 0)
        return false;
    // Token tiles: each tile decodes its expert's weights again, so wide tiles decode
    // less and narrow ones waste less of the tensor cores on padding. Experts
    // averaging 96+ rows (pp4096 and up) take 128-token tiles, fewer take 32. Without
    // host offsets (batched decode) the grid is the bound n_rows / 32 + (experts with
    // a partial tile), in 32-token tiles. kWideTiles = false leaves the 96+ case to
    // the expansion + cuBLAS path (false), for the A/B of docs/performance.md.
    int64_t n_tiles = p.n_rows / 32 + std::min(p.n_experts, p.n_rows);
    bool wide = false;
    if (p.host_offsets != nullptr) {
        HF2Q_ASSERT(load != nullptr);
        if (load->active == 0) return true;
        wide = p.n_rows >= 96 * load->active;
        if (wide && !kWideTiles) return false;
        n_tiles = wide ? load->tiles128 : load->tiles32;
    }
    const int64_t m_tiles = (n_out + kBM - 1) / kBM;
    if (n_tiles > 65535 || m_tiles > 2147483647) return false;

    const int64_t xs = p.x_stride ? p.x_stride : n_in;
    // The register kernels gather rows themselves: with x_rows over fewer rows than
    // the product has (gate_up: each token's row serves its k experts), only those
    // rows are converted, once each.
    const bool gather = in_registers && p.x_rows != nullptr && p.x_n_rows > 0 && p.x_n_rows < p.n_rows;
    if (gather)
        to_bf16(p.x, xs, nullptr, p.x_n_rows, n_in, ws, s, true);
    else
        to_bf16(p.x, xs, p.x_rows, p.n_rows, n_in, ws, s, in_registers);
    TileArgs a;
    a.w = static_cast<const uint8_t*>(p.w.data);
    a.row_bytes = p.w.row_bytes;
    a.expert_bytes = p.expert_bytes;
    a.n_in = n_in;
    a.n_out = n_out;
    a.x = ws.x;
    a.x_rows = gather ? p.x_rows : nullptr;
    a.offsets = p.offsets;
    a.n_experts = p.n_experts;
    a.y = p.y;
    a.glu = p.geglu ? n_out / 2 : 0;
    a.ys = p.y_stride ? p.y_stride : (p.geglu ? n_out / 2 : n_out);
    const auto mt = static_cast<unsigned>(m_tiles), nt = static_cast<unsigned>(n_tiles);
    if (in_registers)
        launch_reg_tiles(a, p.w.type, mt, nt, wide, s);
    else if (wide)
        launch_tiles<128>(a, p.w.type, mt, nt, s);
    else
        launch_tiles<32>(a, p.w.type, mt, nt, s);
    return true;
}

}  // namespace hf2q::cuda

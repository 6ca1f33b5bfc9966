// What the two grouped expert GEMM kernels share (gemm.h: gemm_grouped_tiles):
// the tile shape along the outputs and the reduction, the launch arguments, and
// the search for a block's (expert, token tile). gemm_grouped.cu decodes weight
// tiles into shared memory for every tile type; gemm_grouped_reg.cu decodes the
// Q4_K_M expert types (Q4_K, Q5_0, Q8_0) in registers. Internal to the CUDA backend.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/common.cuh"
#include "core/ggml_type.h"

namespace hf2q::cuda::grouped {

constexpr int kBM = 128;      // weight rows per tile
constexpr int kBK = 64;       // reduction values per stage
constexpr int kLd = kBK + 8;  // shared row stride in BF16 values: rows 144 bytes apart, so
                              // the 8 row addresses of an ldmatrix phase hit distinct banks
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
struct TileArgs {
    const uint8_t* w;  // expert 0, row 0
    uint64_t row_bytes, expert_bytes;
    int64_t n_in, n_out;
    const __nv_bfloat16* x;   // [n_rows][n_in] BF16, rows grouped by expert, or with
                              // x_rows the ungathered rows (register kernels only)
    const int32_t* x_rows;    // row r of the product reads x row x_rows[r], or null: r
    const int32_t* offsets;   // [n_experts + 1], device
    int64_t n_experts;
    float* y;                 // [n_rows][ys]
    int64_t ys;
    int64_t glu = 0;          // > 0 (register kernels): the GEGLU epilogue of ops/moe.h,
                              // n_out = 2·glu rows, y gets glu outputs per row
};

// The y-th non-empty token tile over all experts: expert e owns ceil(rows(e) / BN)
// tiles in expert order. Called by a whole warp (warp-uniform result); false when
// y is past the last tile.
template <int BN>
__device__ bool find_tile(const int32_t* offsets, int64_t n_experts, int y, int& expert, int& r0, int& r1) {
    const int lane = threadIdx.x % 32;
    int seen = 0;
    for (int64_t e0 = 0; e0 < n_experts; e0 += 32) {
        const int64_t e = e0 + lane;
        const int lo = e < n_experts ? offsets[e] : 0, hi = e < n_experts ? offsets[e + 1] : 0;
        const int tiles = (hi - lo + BN - 1) / BN;
        int incl = tiles;  // inclusive prefix sum over the lanes
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const int v = __shfl_up_sync(0xffffffffu, incl, d);
            if (lane >= d) incl += v;
        }
        const int total = __shfl_sync(0xffffffffu, incl, 31);
        if (y < seen + total) {
            const int rel = y - seen;
            const int owner = __ffs(__ballot_sync(0xffffffffu, incl > rel)) - 1;
            const int first = __shfl_sync(0xffffffffu, incl - tiles, owner);
            const int olo = __shfl_sync(0xffffffffu, lo, owner), ohi = __shfl_sync(0xffffffffu, hi, owner);
            expert = static_cast<int>(e0) + owner;
            r0 = olo + (rel - first) * BN;
            r1 = min(ohi, r0 + BN);
            return true;
        }
        seen += total;
    }
    return false;
}

// A block's tile: its expert, routed rows [r0, r1), first output m0 and the
// expert's weights. block_tile is false (for the whole block) when blockIdx.y is
// past the last token tile (the grid is sized by a bound).
struct BlockTile {
    int expert = 0, r0 = 0, r1 = 0;
    int64_t m0 = 0;
    const uint8_t* w = nullptr;
};
template <int BN>
__device__ bool block_tile(const TileArgs& a, BlockTile& t) {
    if (!find_tile<BN>(a.offsets, a.n_experts, static_cast<int>(blockIdx.y), t.expert, t.r0, t.r1)) return false;
    t.m0 = static_cast<int64_t>(blockIdx.x) * kBM;
    t.w = a.w + static_cast<uint64_t>(t.expert) * a.expert_bytes;
    return true;
}

// Stores a warp's f32 accumulators of MT × NT m16n8 tiles: value j of tile (mt, nt)
// belongs to output m_base + 16·mt + g + 8·(j / 2) of routed row r_base + 8·nt +
// 2·t4 + j % 2 (g = lane / 4, t4 = lane % 4); outputs past n_out and rows past r1
// are not written.
template <int MT, int NT>
__device__ __forceinline__ void store_tiles(const TileArgs& a, const float (&acc)[MT][NT][4], int64_t m_base,
                                            int64_t r_base, int r1) {
    const int lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int64_t m = m_base + 16 * mt + g + 8 * (j / 2);
                const int64_t r = r_base + 8 * nt + 2 * t4 + (j % 2);
                if (m < a.n_out && r < r1) a.y[r * a.ys + m] = acc[mt][nt][j];
            }
}

// With a.glu (the GEGLU epilogue), tile row 16·q + 8·h + i of m-tile x holds weight
// row h·glu + f, f = 64·x + 8·q + i: a thread's fragment rows g and g + 8 (values
// j and j + 2 of an m16n8 tile) are then the gate and the up row of one output f,
// and the 128-row tile yields 64 outputs. Rows past the last one repeat it (their
// outputs are not written).
__device__ __forceinline__ int64_t tile_weight_row(const TileArgs& a, const BlockTile& t, int tr) {
    if (a.glu == 0) return min(t.m0 + tr, a.n_out - 1);
    const int64_t f = min(t.m0 / 2 + 8 * (tr / 16) + tr % 8, a.glu - 1);
    return f + ((tr / 8) & 1) * a.glu;
}

// store_tiles for a.glu: the warp's m16 tiles start at tile row `tile_row` (a
// multiple of 16); y[r][f] = gelu_tanh(gate) · up in f32, as the GEGLU op computes it.
template <int MT, int NT>
__device__ __forceinline__ void store_glu_tiles(const TileArgs& a, const float (&acc)[MT][NT][4], int tile_row,
                                                int64_t r_base, int r1) {
    const int lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int64_t f = static_cast<int64_t>(blockIdx.x) * (kBM / 2) + 8 * (tile_row / 16 + mt) + g;
                const int64_t r = r_base + 8 * nt + 2 * t4 + j;
                if (f < a.glu && r < r1) a.y[r * a.ys + f] = gelu_tanh(acc[mt][nt][j]) * acc[mt][nt][j + 2];
            }
}

// The register-decoding kernel (gemm_grouped_reg.cu) for a weight type, or false
// when it does not cover the type or the layout: Q4_K, Q5_0 and Q8_0 with
// n_in % 64 == 0, 16-byte aligned Q4_K rows, 4-byte aligned Q5_0/Q8_0 rows. Its
// activations are permuted (to_bf16's perm16); the others' are not.
bool reg_tiles_cover(GgmlType type, const void* w, uint64_t row_bytes, uint64_t expert_bytes, int64_t n_in);

// Launches it over m_tiles × n_tiles blocks of kBM outputs × (wide ? 128 : 32)
// tokens.
void launch_reg_tiles(const TileArgs& a, GgmlType type, unsigned m_tiles, unsigned n_tiles, bool wide,
                      cudaStream_t s);

}  // namespace hf2q::cuda::grouped

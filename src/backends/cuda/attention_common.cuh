// Internals shared by the attention kernels (attention*.cu): constants of the work
// split between the kernels, PTX wrappers, and the launchers the dispatcher in
// attention.cu calls.
//
// The three kernel families:
//   attention_tile.cu   tensor cores (F16 operands, f32 accumulation) over query tiles
//                       whose rows are consecutive positions of one sequence (prefill);
//   attention_split.cu  f32 CUDA cores, one (token, KV head) per block, optionally split
//                       along the key range (decode, mixed batches, short runs);
//   attention.cu        the dispatcher, the tile planner, the split combiner and a
//                       generic fallback for head sizes the fast kernels do not cover.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "backends/cuda/common.cuh"
#include "ops/attention.h"

namespace hf2q::cuda::attn {

constexpr float kLog2e = 1.4426950408889634f;

// A query tile is handed to the tensor-core kernel as "runs": maximal ranges of its
// rows that share one block table and have consecutive positions. Runs shorter than
// kMinRun (decode tokens, short speculative drafts, the few rows of a sequence that
// spill into a tile) go to the split kernel instead: a 16-row run already wastes
// most of a 64- or 128-row tensor-core tile.
constexpr int kMinRun = 16;
constexpr int kMaxTileRows = 128;
constexpr int kMaxRuns = kMaxTileRows / kMinRun;
// Plan of one tile in the workspace (ints): [0] = number of runs, then per run its
// first row and one past its last row (tile-relative).
constexpr int kPlanStride = 1 + 2 * kMaxRuns;

// Split-KV partials: at most this many key-range splits per (token, head).
constexpr int kMaxSplits = 128;

// Keys per chunk of the split kernel (CK): a chunk holds CK·head_dim = 4096 floats of
// K and as many of V (16 KiB each). A split's share of the key range is whole chunks,
// so the dispatcher sizes the number of splits in these units.
__host__ __device__ constexpr int split_chunk_keys(int64_t head_dim) {
    return static_cast<int>(4096 / head_dim);
}

// Lowest key position visible to a query at position p (ops/attention.h).
__host__ __device__ inline int32_t window_lo(int32_t p, int32_t window) {
    return window > 0 ? (p - window + 1 > 0 ? p - window + 1 : 0) : 0;
}

// Rows per query tile of the tensor-core kernel for a head size (64 or 128).
int tile_rows(int64_t head_dim);

// Tensor-core kernel over the tiles described by `plan` (n_tiles entries of
// kPlanStride ints). Rows outside every run are left untouched.
void launch_tile(const ops::AttentionParams& p, const int* plan, int64_t n_tiles, float scale_log2,
                 cudaStream_t s);

// Split kernel over every token t with handled == nullptr or handled[t] == 0. With
// n_split == 1 it writes `out`; otherwise per (token, head, split) partials into
// part: acc [n_tokens][n_heads][n_split][head_dim], then (m, l) [n_tokens][n_heads]
// [n_split][2] (m in log2 units), merged by the combiner.
void launch_split(const ops::AttentionParams& p, const int* handled, int heads_per_block,
                  int n_split, float* part, float scale_log2, cudaStream_t s);

// Raises a kernel's dynamic shared-memory limit once per device.
template <auto Kernel>
void allow_smem(size_t bytes) {
    static std::atomic<uint64_t> done{0};
    int dev = 0;
    HF2Q_CUDA_CHECK(cudaGetDevice(&dev));
    const uint64_t bit = uint64_t{1} << (dev & 63);
    if (done.load(std::memory_order_acquire) & bit) return;
    HF2Q_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes)));
    done.fetch_or(bit, std::memory_order_acq_rel);
}

// ---- PTX wrappers -------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; bytes == 0 writes zeros instead.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

// c += a·b for one m16n8k16 tile: F16 operands, f32 accumulators.
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as one F16 pair (lo in the low half, as the MMA fragments expect).
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}

}  // namespace hf2q::cuda::attn

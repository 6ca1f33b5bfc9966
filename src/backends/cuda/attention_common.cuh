// Internals shared by the attention kernels (attention*.cu): constants of the work
// split between the kernels and the launchers the dispatcher in attention.cu calls
// (the PTX wrappers are in mma.cuh).
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
#include "backends/cuda/mma.cuh"
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

// Keys per chunk of the split kernel (CK): a chunk holds 16 KiB of K and as many of
// V, i.e. CK·head_dim = 4096 values of an f32 cache, 8192 of an f16 one, 16384 of an
// e4m3 one (fewer chunks, so fewer block barriers per key, for the same shared
// memory), and at most 128 keys (the split kernel's threads: a chunk's rows are
// divided among them). A split's share of the key range is whole chunks, so the
// dispatcher sizes the number of splits in these units.
// HF2Q_SPLIT_BYTE_CHUNK: the bytes of K a chunk of a one-byte pool (e4m3, i8) holds, 16384
// (default, as every pool) or 8192 for the A/B: half the keys a chunk, so half the shared memory
// a block (i8 at head size 256, 2 heads a block: 80 registers instead of 114, so about 6 blocks
// an SM where shared memory allowed 3) and half the work between two barriers, for half the
// bytes a block has in flight. Why it is asked: the i8 pools' sliding layers read at 65 % of
// copy where f16's read at 83-91 % (session 43), and their 16-chunk key ranges split into
// waves less evenly than f16's 32 chunks. Measured (H100, session 44, out/s44a.sh): the i8
// kernel at 64 sequences 119.8 -> 129.1 us (one sequence at 32,768 keys, head size 512: 51.1 ->
// 54.1), the int8 row 5,075 / 5,077 -> 5,092 / 5,096 tokens/s: no clear win, so it stays 16384.
// HF2Q_SPLIT_HALF_CHUNK: the same for f16 pools (16384 or 8192), whose sliding layers read
// at 83-91 % of copy: what is left there is the waves' fill and each item's first chunk.
// Measured (H100, session 44, out/s44b.sh): 204.2 -> 219.1 us, the f16 row 4,317 / 4,315 ->
// 4,302 / 4,303: lost. (Neither is bound by the waves: a balanced split that fills one wave
// exactly did not speed the kernel either, branch wip/balanced-split.)
#ifndef HF2Q_SPLIT_BYTE_CHUNK
#define HF2Q_SPLIT_BYTE_CHUNK 16384
#endif
#ifndef HF2Q_SPLIT_HALF_CHUNK
#define HF2Q_SPLIT_HALF_CHUNK 16384
#endif
static_assert(HF2Q_SPLIT_BYTE_CHUNK == 16384 || HF2Q_SPLIT_BYTE_CHUNK == 8192, "HF2Q_SPLIT_BYTE_CHUNK: 16384 or 8192");
static_assert(HF2Q_SPLIT_HALF_CHUNK == 16384 || HF2Q_SPLIT_HALF_CHUNK == 8192, "HF2Q_SPLIT_HALF_CHUNK: 16384 or 8192");
__host__ __device__ constexpr int split_chunk_keys(int64_t head_dim, int64_t kv_bytes) {
    // The switches' smaller chunks keep at least 16 keys where 16 KiB holds 16 (the MMA score
    // phase's key tile: an f16 chunk of head size 512 stays 16 keys).
    const int64_t bytes = kv_bytes == 1 ? HF2Q_SPLIT_BYTE_CHUNK : kv_bytes == 2 ? HF2Q_SPLIT_HALF_CHUNK : 16384;
    const int64_t full = 16384 / (head_dim * kv_bytes), least = full < 16 ? full : 16;
    const int64_t want = bytes / (head_dim * kv_bytes), keys = want > least ? want : least;
    return static_cast<int>(keys < 128 ? keys : 128);
}
static_assert(split_chunk_keys(256, 1) == HF2Q_SPLIT_BYTE_CHUNK / 256 &&
                  split_chunk_keys(512, 1) == HF2Q_SPLIT_BYTE_CHUNK / 512,
              "one-byte chunks: HF2Q_SPLIT_BYTE_CHUNK of K");
static_assert(split_chunk_keys(256, 2) == HF2Q_SPLIT_HALF_CHUNK / 512 && split_chunk_keys(512, 2) == 16,
              "f16 chunks: HF2Q_SPLIT_HALF_CHUNK of K, but the MMA tile's 16 keys at least");
static_assert(split_chunk_keys(512, 4) == 8 && split_chunk_keys(64, 4) == 64 && split_chunk_keys(64, 1) == 128,
              "f32 chunks: 16 KiB of K; at most 128 keys");

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

// The same on Hopper's warpgroup MMA (attention_wgmma.cu): head sizes 256 and 512
// over an F16 cache in sm_90a builds on a 9.x device; false (nothing launched)
// otherwise. launch_tile takes it first.
bool launch_tile_wgmma(const ops::AttentionParams& p, const int* plan, int64_t n_tiles, float scale_log2,
                       cudaStream_t s);

// Split kernel over every token t with handled == nullptr or handled[t] == 0. With
// n_split == 1 it writes `out`; otherwise per (token, head, split) partials into
// part: acc [n_tokens][n_heads][n_split][head_dim], then (m, l) [n_tokens][n_heads]
// [n_split][2] (m in log2 units), merged by the combiner. tensor_cores: the score
// phase may run on tensor cores with F16 operands (attention_split.cu), else all f32.
// warps: the keys-by-warp kernel where split_warps_available (else ignored).
void launch_split(const ops::AttentionParams& p, const int* handled, int heads_per_block, int n_split, float* part,
                  float scale_log2, bool tensor_cores, bool warps, cudaStream_t s);

// Whether launch_split has a keys-by-warp kernel for these arguments (HF2Q_SPLIT_WARP_KEYS,
// attention_split.cu: the 8-bit pools at head size 256 on tensor cores).
bool split_warps_available(const ops::AttentionParams& p, int heads_per_block, bool tensor_cores);

// Blocks of the split kernel launch_split would run for these arguments that one SM
// holds at once (at least 1).
int split_blocks_per_sm(const ops::AttentionParams& p, int heads_per_block, bool tensor_cores, bool warps);

}  // namespace hf2q::cuda::attn

// The grouped expert GEMV of batched decode on the integer tensor cores
// (gemv_mma.cu). Internal to the CUDA backend: gemv_q8.cu chooses it for grouped
// launches of several activation rows per expert.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/gemv.h"
#include "backends/cuda/q8.cuh"

namespace hf2q::cuda {

// Whether the tensor-core kernel takes these grouped arguments: a Q4_K, Q5_0 or
// Q8_0 weight (HF2Q_GEMV_MMA builds, see gemv_mma.cu), rows 4-byte aligned, and a
// 16-row tile that fits in the kernel's shared memory.
bool gemv_mma_supported(const GemvArgs& a);

// Whether the kernel also takes them with a.glu's GEGLU epilogue: Q4_K rows, the
// tiles-in-turn launch (experts averaging at most 8 routed rows), glu a multiple of 32.
bool gemv_mma_geglu_supported(const GemvArgs& a);

// y rows of the grouped product (with a.glu: its GEGLU, gemv_mma_geglu_supported) from
// the quantized activations xq (row r of the grouping reads xq row r), a.offsets
// grouping the rows by expert.
void launch_gemv_mma(const GemvArgs& a, const Q8View& xq, int64_t max_active_experts, cudaStream_t s);

// Q4_K's scaled copy (GemvArgs::w_copy, ops::WeightView::expert_layout), which the
// kernel reads instead of the blocks as stored: each 144-byte block of 256 values
// becomes kQ4kScaledBlock bytes, first the eight 32-value sub-blocks' (d·scale,
// dmin·min) as half2 (the header's 6-bit scales and mins decoded and multiplied out,
// rounded to f16 once: a relative change of at most 2^-11 a sub-block's scale), then
// the block's 128 quant bytes as stored. Rows and experts stay in order, back to back.
constexpr uint32_t kQ4kScaledBlock = 160;
uint64_t q4k_scaled_row_bytes(int64_t n_in);
// Whether n_expert experts of w (Q4_K rows of whole blocks, expert_bytes apart, the
// rows, experts and data 16-byte aligned) can have the copy (the build's switch on, and
// rows short enough for the shared memory of the kernel that reads it).
bool q4k_scaled_supported(const ops::WeightView& w, uint64_t expert_bytes, int64_t n_expert);
// Writes the copy of those experts to dst (q4k_scaled_row_bytes(n_in) · n_out ·
// n_expert bytes) and waits for it. False where a product d·scale or dmin·min is
// finite but past f16's range (dst is then not to be used).
bool repack_q4k_scaled(const ops::WeightView& w, uint64_t expert_bytes, int64_t n_expert, uint8_t* dst,
                       cudaStream_t s);

// Q5_0's lane copy (GemvArgs::w_copy, ops::WeightView::expert_layout), which the
// kernel's pairs of units read instead of the blocks as stored: the same 44 bytes a
// pair of 22-byte blocks, the same values exactly, in another order: both blocks'
// d (f16), then both blocks' fifth bits, each transposed so that a lane finds its 8
// with one shift (q50_lane_bits in gemv_mma.cu), then both blocks' 16 quant bytes as
// stored. Every piece on a 4-byte boundary. Rows (an even number of blocks) and
// experts stay in order, back to back.
constexpr uint32_t kQ50LanePair = 44;
// Whether n_expert experts of w (Q5_0 rows of an even number of blocks, expert_bytes
// apart, the data and expert_bytes 4-byte aligned, as the kernel asks of the
// blocks it reads) can have the copy (the build's switches on, and rows short
// enough for the shared memory of the kernel that reads it).
bool q50_lanes_supported(const ops::WeightView& w, uint64_t expert_bytes, int64_t n_expert);
// Writes the copy of those experts to dst (w.row_bytes · n_out · n_expert bytes, dst
// 4-byte aligned) and waits for it.
void repack_q50_lanes(const ops::WeightView& w, uint64_t expert_bytes, int64_t n_expert, uint8_t* dst,
                      cudaStream_t s);

}  // namespace hf2q::cuda

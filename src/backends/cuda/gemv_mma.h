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

}  // namespace hf2q::cuda

// The CUDA backend: ops::Backend on device memory, one stream per backend (and one
// more for the side chain of ops::Backend::begin_side).
#pragma once

#include <memory>

#include "ops/backend.h"

namespace hf2q::cuda {

// How batched work computes: tensor cores (BF16 matmul operands, F16 attention
// operands, f32 accumulation) or f32 throughout (cuBLAS SGEMM and f32 attention;
// the reference precision the parity tests use).
enum class MatmulPrecision { bf16, f32 };

struct CudaOptions {
    int device = 0;
    // Batched matmuls: BF16 tensor cores (default) or f32 SGEMM (reference precision).
    MatmulPrecision precision = MatmulPrecision::bf16;
    // Allocate the matmul and attention workspaces (~0.5 GiB). Off for a backend
    // that only holds memory (the model's weights); its ops must not be called.
    bool workspaces = true;
    // Run the side chain of ops::Backend::begin_side (a MoE layer's routed experts)
    // on a second stream, concurrently with the main chain (its dense MLP), and the
    // products of a batched matmul_multi (17-128 tokens: q, k and v) on streams of
    // their own. Off, everything runs in issue order on the one stream: the same
    // results, bit for bit (the tests compare the two), for measuring the overlap.
    bool concurrent_side = true;
    // Batched decode's dense products of 17 .. this many tokens read the Q4_K tile
    // copies (gemm_tile.cu) where every product of a launch has one, the others cuBLAS
    // on the BF16 copies. 32 by default (session 61, H100: 32 sequences +3.7 %; at 64
    // cuBLAS is as fast a call and the tile GEMM lost 0.5 %); at most 64 (the kernel's
    // largest token tile: the tests' setting); 16 or less: never.
    int tile_gemm_max_tokens = 32;
};

// Number of usable CUDA devices (0 when there is no driver or GPU).
int device_count();

// Throws hf2q::Error if no device is usable.
std::unique_ptr<ops::Backend> make_backend(const CudaOptions& opts);

}  // namespace hf2q::cuda

// Batched (prefill) linear layers on the tensor cores (gemm.cu). Internal to the
// CUDA backend.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <vector>

#include "ops/backend.h"

namespace hf2q::cuda {

// Device scratch of the tensor-core path: BF16 copies of weight tiles and of the
// activations, and the pointer arrays of grouped launches. Sized once by the
// backend (weights) or grown on first use (activations: the largest batch seen).
struct GemmWorkspace {
    __nv_bfloat16* w = nullptr;   // weight rows expanded to BF16
    size_t w_elems = 0;
    __nv_bfloat16* x = nullptr;   // activations in BF16
    size_t x_elems = 0;
    void** ptrs = nullptr;        // 3 × kMaxGroup pointers (A, B, C) of a grouped GEMM
    float* f32 = nullptr;         // f32 weight rows of the reference (SGEMM) path
    size_t f32_elems = 0;
    bool no_grouped_gemm = false;  // cuBLAS refused the grouped BF16 → f32 call once
    int8_t* q8 = nullptr;         // activations quantized to 8 bits for the integer GEMV
    size_t q8_bytes = 0;
};

// Largest number of experts one grouped GEMM launch covers.
constexpr int kMaxGroup = 128;

// out[r] = bf16(x[rows ? rows[r] : r]) for r < n_rows, rows of n values (stride xs),
// into ws.x (which must hold n_rows·n values). perm16 (n % 16 == 0) stores every 16
// values with the even ones first, then the odd ones: the order the register-
// decoding grouped GEMM's fragments take them in (gemm_grouped_reg.cu).
void to_bf16(const float* x, int64_t xs, const int32_t* rows, int64_t n_rows, int64_t n, GemmWorkspace& ws,
             cudaStream_t s, bool perm16 = false);
// The same into `out` (n_rows · n values, row after row): a producer's BF16 rows
// (ops/prepared.h) where its fused kernel does not run.
void to_bf16_rows(const float* x, int64_t xs, int64_t n_rows, int64_t n, void* out, cudaStream_t s);

// y = x · Wᵀ for a batch: W expanded to BF16 in row chunks that fit the workspace
// (or read from p.w.batch_layout, expanded once at load), x converted to BF16 once,
// cuBLAS BF16 GEMM with f32 accumulation and f32 output. x_ready: ws.x already holds
// p.x in BF16 (to_bf16, not permuted), as for the second and third weights of a
// matmul_multi. With p.x_bf16 (its producer's BF16 rows, ops/prepared.h) the GEMM
// reads those and nothing is converted: the same values, so the same bits.
void gemm_bf16(const ops::MatmulParams& p, GemmWorkspace& ws, cublasHandle_t h, cudaStream_t s, bool x_ready = false);

// Weights gemm_bf16 multiplies as stored, with no expansion and no batch copy: BF16
// rows of n_in contiguous values.
inline bool bf16_rows_direct(const ops::WeightView& w) {
    return w.type == GgmlType::BF16 && w.n_in > 0 && w.row_bytes == 2 * static_cast<uint64_t>(w.n_in);
}

// The same over the experts of a 3-D weight, with the rows of each expert known on
// the host (p.host_offsets): the active experts are expanded in groups that fit
// the workspace and multiplied with one grouped cuBLAS call per group.
void gemm_bf16_grouped(const ops::MoeMatmulParams& p, GemmWorkspace& ws, cublasHandle_t h, cudaStream_t s);

// What host offsets say about a grouped product: experts with rows, and the token
// tiles of 32 and of 128 rows they need. One pass over the offsets, shared by the
// dispatch (moe.cu) and the tile launch.
struct ExpertLoad {
    int64_t active = 0, tiles32 = 0, tiles128 = 0;
};
ExpertLoad expert_load(const int32_t* host_offsets, int64_t n_experts);

// The same product with the weight tiles decoded in shared memory (gemm_grouped.cu):
// no expanded copy of the experts, one launch for all of them. True when it ran;
// false for weight types or shapes it does not cover (the caller then takes another
// path). With p.host_offsets, `load` (their expert_load) sizes the launch exactly;
// without them (load null) it is sized by a bound and reads only device memory
// (graph capture). A geglu product (ops/moe.h) is covered only by the register
// kernels, which apply it in their epilogue, and only without y_prep.
bool gemm_grouped_tiles(const ops::MoeMatmulParams& p, const ExpertLoad* load, GemmWorkspace& ws, cudaStream_t s);

// All of w's rows expanded to BF16 into out (n_out × n_in values): the batch layout
// (ops::Backend::batch_layout) that gemm_bf16 then multiplies without expanding.
void expand_to_bf16(const ops::WeightView& w, __nv_bfloat16* out, cudaStream_t s);

// Batched decode's dense products from the tile copy of Q4_K weights (gemm_tile.cu):
// 17-64 tokens (17-32 by default: CudaOptions::tile_gemm_max_tokens), BF16 tensor-core
// precision (warpgroup MMA: sm_90a builds on Hopper).
// tile_layout_supported: the weights the copy is made for (none elsewhere);
// tile_layout_bytes: its size (rows padded to tiles of 128);
// repack_tile_layout writes it (dst: tile_layout_bytes, 16-byte aligned). launch_tile_gemm
// runs products 0 .. n - 1 (all tile_gemm_covers, one n_in; the activations' BF16 rows
// in xb: rows of n_in values, 16-byte aligned) in one launch; each product's bits are a
// function of its own shape and tokens, whatever it is launched with.
bool tile_layout_supported(const ops::WeightView& w);
uint64_t tile_layout_bytes(int64_t n_out, int64_t n_in);
void repack_tile_layout(const ops::WeightView& w, uint8_t* dst, cudaStream_t s);
// tile_gemm_covers: w has a copy the kernel reads and 17 <= n_tokens <= max_tokens
// (MatmulEnv::tile_max_tokens, at most kTileGemmMaxTokens).
constexpr int kTileGemmMaxTokens = 64;
bool tile_gemm_covers(const ops::WeightView& w, int64_t n_tokens, int max_tokens);
void launch_tile_gemm(const ops::WeightView* const* w, float* const* y, const int64_t* y_stride, int n,
                      const __nv_bfloat16* xb, int64_t n_tokens, cudaStream_t s);

// Reference precision: W expanded to f32 in row chunks, cuBLAS SGEMM (FP32 units).
void gemm_f32(const ops::MatmulParams& p, GemmWorkspace& ws, cublasHandle_t h, cudaStream_t s);

}  // namespace hf2q::cuda

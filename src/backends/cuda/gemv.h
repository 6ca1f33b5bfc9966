// Matrix-vector products on block-format weights (gemv.cu): decode and small
// batches, dense or grouped by expert. Internal to the CUDA backend.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/ggml_type.h"
#include "ops/moe.h"
#include "ops/types.h"

namespace hf2q::cuda {

// Up to this many tokens the GEMV (weights streamed once per 8 tokens, re-read from
// L1/L2 for further tokens) beats expanding the weights for a tensor-core GEMM.
constexpr int64_t kGemvTokens = 16;

struct GemvArgs {
    GgmlType type = GgmlType::F32;
    const uint8_t* w = nullptr;   // expert 0 (or the only matrix), n_out rows
    uint64_t row_bytes = 0;
    uint64_t expert_bytes = 0;
    int64_t n_in = 0;
    int64_t n_out = 0;
    const float* x = nullptr;     // rows of n_in activations, x_stride apart
    int64_t x_stride = 0;
    const int32_t* x_rows = nullptr;  // optional: output row r reads x row x_rows[r]
    float* y = nullptr;           // y[r][o], y_stride apart
    int64_t y_stride = 0;
    int64_t n_rows = 0;           // rows when offsets is null
    const int32_t* offsets = nullptr;  // [n_experts + 1] device, grouped launches
    int64_t n_experts = 0;
    bool x_vec = false;           // set by the launcher: x rows allow 16-byte loads
    const void* x_prep = nullptr; // the integer GEMV: x rows already quantized (q8.cuh);
                                  // with x_rows, the x_n_rows rows it indexes
    int64_t x_n_rows = 0;         // with x_rows and x_prep: the rows x_prep holds
    // GEGLU epilogue (launch_gemv_q8_geglu only): glu > 0 means n_out = 2·glu rows,
    // the gate rows [0, glu) then the up rows [glu, 2·glu), and y[r][j] (j < glu,
    // y_stride apart) gets gelu_tanh(gate)·up; y_prep, if set, y in the prepared form
    // (q8.cuh, n_rows rows of glu values).
    int64_t glu = 0;
    void* y_prep = nullptr;
    // Q4_K and Q5_0 experts only: the same experts in the backend's copy (gemv_mma.h:
    // Q4_K's scaled copy, Q5_0's lane copy; ops::WeightView::expert_layout), which the
    // tensor-core kernel reads instead of w.
    const uint8_t* w_copy = nullptr;
};

// The arguments for y = x · Wᵀ (strides 0 mean dense rows); callers add the rows or
// the expert grouping.
inline GemvArgs gemv_args(const ops::WeightView& w, const float* x, int64_t x_stride, float* y, int64_t y_stride) {
    GemvArgs a;
    a.type = w.type;
    a.w = static_cast<const uint8_t*>(w.data);
    a.row_bytes = w.row_bytes;
    a.n_in = w.n_in;
    a.n_out = w.n_out;
    a.x = x;
    a.x_stride = x_stride ? x_stride : w.n_in;
    a.y = y;
    a.y_stride = y_stride ? y_stride : w.n_out;
    return a;
}

// Whether x's rows allow 16-byte loads (set by the launchers as x_vec).
inline bool x_rows_vec16(const GemvArgs& a) {
    return a.x_stride % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
}

// Grouped launches cover at most max_active_experts experts with rows (an upper
// bound the caller knows without reading the offsets: min(rows, n_experts)).
void launch_gemv(const GemvArgs& a, int64_t max_active_experts, cudaStream_t s);

// The integer GEMV (gemv_q8.cu): activations quantized to 8 bits per 32 values,
// dp4a dot products. For Q4_0, Q5_0, Q8_0, Q4_K, Q5_K and Q6_K rows whose length
// is a multiple of 32; a.n_rows must be set (grouped launches too: the routed rows).
// Bytes of device scratch it needs for the quantized activations.
size_t q8_workspace_bytes(int64_t rows, int64_t n_in);
// Whether launch_gemv_q8 can run these arguments with that much scratch.
bool gemv_q8_supported(const GemvArgs& a, size_t workspace_bytes);
// Quantizes rows × n values (n a multiple of 32) into `out` (q8_workspace_bytes(rows,
// n) bytes): the prepared form of ops/prepared.h, for producers without a fused path.
void launch_quantize_q8(const float* x, int64_t x_stride, int64_t rows, int64_t n, void* out, cudaStream_t s);
void launch_gemv_q8(const GemvArgs& a, int64_t max_active_experts, int8_t* workspace, cudaStream_t s);
// A grouped one-token product with the weighted combine of its routed rows folded in
// (ops::MoeMatmulParams::combine; c.y is a's y): launched where the routed kernel takes
// every routed row of an output column in one warp (the 32-value formats' short rows:
// a decode step's down product); false, nothing launched, otherwise.
bool launch_gemv_q8_combined(const GemvArgs& a, const ops::MoeCombineParams& c, size_t workspace_bytes,
                             int8_t* workspace, cudaStream_t s);
// The grouped product with its GEGLU epilogue (a.glu > 0, a.y_stride set) in the
// tensor-core kernel (gemv_mma.cu), where launch_gemv_q8 would take that kernel for
// the plain product and a block covers 32 gate rows and their 32 up rows; the same
// bits as that product followed by the GEGLU op (launch_geglu). False, nothing
// launched, otherwise.
bool launch_gemv_q8_geglu(const GemvArgs& a, int64_t max_active_experts, size_t workspace_bytes, int8_t* workspace,
                          cudaStream_t s);
// Up to ops::MultiMatmulParams::kMax dense weights (no offsets) on the same
// activations (a[i].x, x_stride and n_rows equal): one quantization, one launch per
// weight type.
void launch_gemv_q8_multi(const GemvArgs* a, int n, int8_t* workspace, cudaStream_t s);

// Q6_K rows in planes (gemv_q8.cu; ops::WeightView::decode_layout): bytes of one
// repacked row of n_in values, the repack of `rows` plain rows on stream s, and the
// one-token GEMV over the planes (a.w / a.row_bytes: the planes; the same result as
// launch_gemv_q8 on the plain rows, bit for bit).
uint64_t q6k_planes_row_bytes(int64_t n_in);
void launch_repack_q6k_planes(const uint8_t* src, uint64_t src_row_bytes, uint8_t* dst, int64_t rows, int64_t n_in,
                              cudaStream_t s);
void launch_gemv_q6k_planes(const GemvArgs& a, int8_t* workspace, cudaStream_t s);

struct MatmulEnv;
// The GEMV for these arguments (matmul.cu): the integer one in the default
// precision where it supports the weight type, else the f32 one.
void launch_any_gemv(const GemvArgs& a, int64_t max_active_experts, MatmulEnv& env, cudaStream_t s);

}  // namespace hf2q::cuda

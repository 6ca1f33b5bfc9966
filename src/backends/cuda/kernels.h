// Launchers of the CUDA backend's kernels, one op family per .cu file. All
// pointers are device pointers; every launcher enqueues on `s` and returns.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "ops/backend.h"

namespace hf2q::cuda {

// Scratch the matmul may use to expand weight tiles (device memory, bytes).
struct MatmulScratch {
    float* buf = nullptr;
    size_t floats = 0;
};

void launch_rms_norm(const ops::RmsNormParams& p, cudaStream_t s);
void launch_rope(const ops::RopeParams& p, cudaStream_t s);
void launch_geglu(const ops::GegluParams& p, cudaStream_t s);
void launch_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t s);
void launch_mul(const float* a, const float* b, float* y, int64_t n, cudaStream_t s);
void launch_scale(float* x, float v, int64_t n, cudaStream_t s);
void launch_softcap(float* x, float cap, int64_t n, cudaStream_t s);
void launch_get_rows(const ops::GetRowsParams& p, cudaStream_t s);
void launch_matmul(const ops::MatmulParams& p, const MatmulScratch& scratch, cublasHandle_t h, cudaStream_t s);
void launch_attention(const ops::AttentionParams& p, cudaStream_t s);
void launch_moe_route(const ops::MoeRouteParams& p, cudaStream_t s);
void launch_gather_rows(const ops::GatherRowsParams& p, cudaStream_t s);
void launch_scatter_add(const ops::ScatterAddParams& p, cudaStream_t s);
void launch_kv_store(const ops::KvStoreParams& p, cudaStream_t s);
void launch_copy_blocks(const ops::CopyBlocksParams& p, cudaStream_t s);

bool type_supported(GgmlType t);

}  // namespace hf2q::cuda

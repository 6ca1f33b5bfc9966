// Linear layers and embedding gathers on block-format weights: the dispatcher.
//
//   n_tokens <= kGemvTokens (decode, small batches): every weight byte read once per
//     8 tokens; gemv_q8.cu (8-bit activations, integer dot products) for the common
//     block formats in the default precision, else gemv.cu (f32 arithmetic).
//   larger batches: gemm.cu, weight tiles expanded to BF16 (or read from the BF16
//     batch copy) and multiplied on the tensor cores by cuBLAS (or expanded to f32
//     and SGEMM in the reference precision). Reading the block formats directly for
//     17-128 tokens (a split-K tile kernel on the register decoders) was measured
//     slower than cuBLAS on the BF16 copies (docs/performance.md, session 21).
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/gemm.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/kernels.h"

namespace hf2q::cuda {
namespace {

template <GgmlType T>
__global__ void get_rows_kernel(ops::GetRowsParams p) {
    pdl_begin();
    const int64_t n = p.n_tokens * p.w.n_in;
    const uint8_t* base = static_cast<const uint8_t*>(p.w.data);
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t t = idx / p.w.n_in, i = idx % p.w.n_in;
        const uint8_t* row = base + static_cast<uint64_t>(p.ids[t]) * p.w.row_bytes;
        p.out[idx] = dq<T>(row, i) * p.scale;
    }
}

}  // namespace

bool type_supported(GgmlType t) { return dispatch_type(t, NoTypeOp{}); }

void ensure_activations(MatmulEnv& env, int64_t elems) {
    GemmWorkspace& ws = *env.ws;
    if (static_cast<size_t>(elems) <= ws.x_elems) return;
    HF2Q_CUDA_CHECK(cudaDeviceSynchronize());
    if (ws.x) HF2Q_CUDA_CHECK(cudaFree(ws.x));
    ws.x = nullptr;
    ws.x_elems = 0;
    void* p = nullptr;
    if (cudaMalloc(&p, static_cast<size_t>(elems) * sizeof(__nv_bfloat16)) != cudaSuccess) {
        cudaGetLastError();
        fail("out of GPU memory for the matmul activations (", elems, " BF16 values); use a smaller --ubatch");
    }
    ws.x = static_cast<__nv_bfloat16*>(p);
    ws.x_elems = static_cast<size_t>(elems);
}

void launch_get_rows(const ops::GetRowsParams& p, cudaStream_t s) {
    const int64_t n = p.n_tokens * p.w.n_in;
    if (n <= 0) return;
    bool ok = dispatch_type(p.w.type, [&]<GgmlType T>() {
        launch(get_rows_kernel<T>, grid_1d(n, 256), 256, 0, s, p);
    });
    if (!ok) fail("CUDA get_rows: unsupported weight type ", ggml_type_name(p.w.type));
    HF2Q_CUDA_LAUNCH_CHECK();
}

void launch_any_gemv(const GemvArgs& a, int64_t max_active_experts, MatmulEnv& env, cudaStream_t s) {
    if (env.precision == MatmulPrecision::bf16 && gemv_q8_supported(a, env.ws->q8_bytes))
        launch_gemv_q8(a, max_active_experts, env.ws->q8, s);
    else
        launch_gemv(a, max_active_experts, s);
}

bool matmul_uses_gemv(int64_t n_tokens) { return n_tokens <= kGemvTokens; }

void launch_matmul(const ops::MatmulParams& p, MatmulEnv& env, cudaStream_t s) {
    if (p.n_tokens <= 0 || p.w.n_out <= 0) return;
    if (matmul_uses_gemv(p.n_tokens)) {
        GemvArgs a = gemv_args(p.w, p.x, p.x_stride, p.y, p.y_stride);
        a.n_rows = p.n_tokens;
        a.x_prep = p.x_prep;
        if (p.n_tokens == 1 && p.w.decode_layout != nullptr && p.w.type == GgmlType::Q6_K &&
            env.precision == MatmulPrecision::bf16 && gemv_q8_supported(a, env.ws->q8_bytes)) {
            // The planes of CudaBackend::decode_layout: the same sums, fewer loads.
            a.w = static_cast<const uint8_t*>(p.w.decode_layout);
            a.row_bytes = q6k_planes_row_bytes(p.w.n_in);
            launch_gemv_q6k_planes(a, env.ws->q8, s);
            return;
        }
        launch_any_gemv(a, 1, env, s);
        return;
    }
    if (env.precision == MatmulPrecision::f32) {
        gemm_f32(p, *env.ws, env.cublas, s);
        return;
    }
    ensure_activations(env, p.n_tokens * p.w.n_in);
    gemm_bf16(p, *env.ws, env.cublas, s);
}

void launch_matmul_multi(const ops::MultiMatmulParams& p, MatmulEnv& env, cudaStream_t s) {
    ops::check_matmul_multi(p);
    if (p.n_tokens <= 0) return;
    if (matmul_uses_gemv(p.n_tokens) && env.precision == MatmulPrecision::bf16) {
        GemvArgs a[ops::MultiMatmulParams::kMax];
        bool q8 = true;
        for (int i = 0; i < p.n; ++i) {
            a[i] = gemv_args(p.w[i], p.x, p.x_stride, p.y[i], p.y_stride[i]);
            a[i].n_rows = p.n_tokens;
            a[i].x_prep = p.x_prep;
            q8 = q8 && gemv_q8_supported(a[i], env.ws->q8_bytes);
        }
        if (q8) {  // the activations quantized once for all weights
            launch_gemv_q8_multi(a, p.n, env.ws->q8, s);
            return;
        }
    }
    if (!matmul_uses_gemv(p.n_tokens) && env.precision == MatmulPrecision::bf16) {
        // The activations converted to BF16 once for all weights (same n_in). H200,
        // session 21, 64 sequences: 4,420 / 4,421 -> 4,523 / 4,486 tokens/s.
        ensure_activations(env, p.n_tokens * p.w[0].n_in);
        for (int i = 0; i < p.n; ++i)
            gemm_bf16({p.w[i], p.x, p.y[i], p.n_tokens, p.x_stride, p.y_stride[i]}, *env.ws, env.cublas, s, i > 0);
        return;
    }
    for (int i = 0; i < p.n; ++i) launch_matmul({p.w[i], p.x, p.y[i], p.n_tokens, p.x_stride, p.y_stride[i]}, env, s);
}

}  // namespace hf2q::cuda

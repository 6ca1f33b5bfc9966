// Linear layers and embedding gathers on block-format weights: the dispatcher.
//
//   n_tokens <= kGemvTokens (decode, small batches): every weight byte read once per
//     8 tokens; gemv_q8.cu (8-bit activations, integer dot products) for the common
//     block formats in the default precision, else gemv.cu (f32 arithmetic).
//   17-128 tokens on Q4_K / Q5_0 / Q8_0 weights (sm_90a on Hopper, default
//     precision): gemm_grouped_reg.cu's dense split kernel, the weights decoded in
//     registers from their block format (HF2Q_DENSE_SPLIT);
//   larger batches and other types: gemm.cu, weight tiles expanded to BF16 (or read
//     from the BF16 batch copy) and multiplied on the tensor cores by cuBLAS (or
//     expanded to f32 and SGEMM in the reference precision).
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/gemm.h"
#include "backends/cuda/gemm_grouped.cuh"
#include "backends/cuda/gemv.h"
#include "backends/cuda/kernels.h"

// 1 (default): dense batches of kGemvTokens + 1 .. grouped::kDenseMaxRows tokens on
// Q4_K / Q5_0 / Q8_0 weights take the dense split kernel (gemm_grouped_reg.cu),
// which reads the block format (0.56-1.06 bytes a weight) where cuBLAS reads the
// BF16 copy (2 bytes): at 64 sequences the dense products were about 17 % of a
// step (docs/performance.md). Its scales are rounded to BF16 before they multiply,
// as for the experts' tile kernels. 0: cuBLAS, for A/Bs.
#ifndef HF2Q_DENSE_SPLIT
#define HF2Q_DENSE_SPLIT 0
#endif

namespace hf2q::cuda {
namespace {

// Whether the dense split kernel takes p (see HF2Q_DENSE_SPLIT).
bool dense_split_takes(const ops::MatmulParams& p, const MatmulEnv& env) {
    const int64_t xs = p.x_stride ? p.x_stride : p.w.n_in;
    return HF2Q_DENSE_SPLIT != 0 && env.precision == MatmulPrecision::bf16 &&
           grouped::dense_split_covers(p.w.type, p.w.data, p.w.row_bytes, p.w.n_in, p.w.n_out, p.n_tokens) &&
           xs % 4 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;  // to_bf16's perm16 reads float4s
}

// The dense split kernel for p (dense_split_takes). x_ready: env.ws->x already
// holds p.x in BF16, permuted (perm16); else it is converted here. The caller has
// sized the activations (ensure_activations).
void dense_split(const ops::MatmulParams& p, MatmulEnv& env, cudaStream_t s, bool x_ready) {
    const int64_t n_in = p.w.n_in;
    if (!x_ready) to_bf16(p.x, p.x_stride ? p.x_stride : n_in, nullptr, p.n_tokens, n_in, *env.ws, s, true);
    grouped::TileArgs a;
    a.w = static_cast<const uint8_t*>(p.w.data);
    a.row_bytes = p.w.row_bytes;
    a.expert_bytes = 0;
    a.n_in = n_in;
    a.n_out = p.w.n_out;
    a.x = env.ws->x;
    a.x_rows = nullptr;
    a.offsets = nullptr;
    a.n_experts = 1;
    a.y = p.y;
    a.ys = p.y_stride ? p.y_stride : p.w.n_out;
    grouped::launch_dense_split(a, p.w.type, p.n_tokens, s);
}

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
    if (dense_split_takes(p, env)) {
        dense_split(p, env, s, false);
        return;
    }
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
        // The activations converted once for all weights (same n_in): permuted for
        // the dense split kernel, plain for cuBLAS, so only when one of them takes
        // every weight.
        int split = 0;
        for (int i = 0; i < p.n; ++i)
            split += dense_split_takes({p.w[i], p.x, p.y[i], p.n_tokens, p.x_stride, p.y_stride[i]}, env);
        if (split == 0 || split == p.n) {
            ensure_activations(env, p.n_tokens * p.w[0].n_in);
            for (int i = 0; i < p.n; ++i) {
                const ops::MatmulParams one{p.w[i], p.x, p.y[i], p.n_tokens, p.x_stride, p.y_stride[i]};
                if (split > 0)
                    dense_split(one, env, s, i > 0);
                else
                    gemm_bf16(one, *env.ws, env.cublas, s, i > 0);
            }
            return;
        }
    }
    for (int i = 0; i < p.n; ++i) launch_matmul({p.w[i], p.x, p.y[i], p.n_tokens, p.x_stride, p.y_stride[i]}, env, s);
}

}  // namespace hf2q::cuda

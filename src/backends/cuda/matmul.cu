// Linear layers and embedding gathers on block-format weights.
//
// matmul, n_tokens <= 8 (decode): one warp per output row decodes the weight row once
//   and dots it with every token's activations (each weight byte read once).
// matmul, larger batches: weight rows are expanded to f32 in chunks into a scratch
//   buffer and multiplied with cuBLAS SGEMM (f32 accumulation). A correct baseline;
//   tensor-core tiles that decode on the fly replace it.
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/kernels.h"

namespace hf2q::cuda {
namespace {

constexpr int kMaxGemvTokens = 8;

template <GgmlType T>
__global__ void get_rows_kernel(ops::GetRowsParams p) {
    const int64_t n = p.n_tokens * p.w.n_in;
    const uint8_t* base = static_cast<const uint8_t*>(p.w.data);
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t t = idx / p.w.n_in, i = idx % p.w.n_in;
        const uint8_t* row = base + static_cast<uint64_t>(p.ids[t]) * p.w.row_bytes;
        p.out[idx] = dq<T>(row, i) * p.scale;
    }
}

template <GgmlType T>
__global__ void gemv_kernel(ops::MatmulParams p, int64_t xs, int64_t ys) {
    const int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (o >= p.w.n_out) return;
    const uint8_t* row = static_cast<const uint8_t*>(p.w.data) + static_cast<uint64_t>(o) * p.w.row_bytes;
    float acc[kMaxGemvTokens] = {};
    for (int64_t i = lane; i < p.w.n_in; i += 32) {
        const float w = dq<T>(row, i);
#pragma unroll
        for (int t = 0; t < kMaxGemvTokens; ++t)
            if (t < p.n_tokens) acc[t] += w * p.x[t * xs + i];
    }
#pragma unroll
    for (int t = 0; t < kMaxGemvTokens; ++t) {
        float v = acc[t];
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0 && t < p.n_tokens) p.y[t * ys + o] = v;
    }
}

template <GgmlType T>
__global__ void expand_kernel(const uint8_t* w, uint64_t row_bytes, int64_t n_in, int64_t rows, float* out) {
    const int64_t n = rows * n_in;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = idx / n_in, i = idx % n_in;
        out[idx] = dq<T>(w + static_cast<uint64_t>(r) * row_bytes, i);
    }
}

void check_cublas(cublasStatus_t st, const char* what) {
    if (st != CUBLAS_STATUS_SUCCESS) fail("cuBLAS error ", static_cast<int>(st), " in ", what);
}

// y[:, n0:n0+rows] = x · W[n0:n0+rows]ᵀ with W rows given as f32 (ld n_in).
void sgemm_rows(cublasHandle_t h, const float* w, int64_t rows, const ops::MatmulParams& p, int64_t xs,
                int64_t ys, int64_t n0) {
    const float one = 1.0f, zero = 0.0f;
    // Column-major view: C (rows × T, ld ys) = Wᵀ-as-stored (K × rows)ᵀ · X (K × T, ld xs).
    check_cublas(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(p.n_tokens),
                             static_cast<int>(p.w.n_in), &one, w, static_cast<int>(p.w.n_in), p.x,
                             static_cast<int>(xs), &zero, p.y + n0, static_cast<int>(ys)),
                 "matmul");
}

}  // namespace

namespace {
struct Nothing {
    template <GgmlType T>
    void operator()() const {}
};
}  // namespace

bool type_supported(GgmlType t) { return dispatch_type(t, Nothing{}); }

void launch_get_rows(const ops::GetRowsParams& p, cudaStream_t s) {
    const int64_t n = p.n_tokens * p.w.n_in;
    if (n <= 0) return;
    bool ok = dispatch_type(p.w.type, [&]<GgmlType T>() {
        get_rows_kernel<T><<<grid_1d(n, 256), 256, 0, s>>>(p);
    });
    if (!ok) fail("CUDA get_rows: unsupported weight type ", ggml_type_name(p.w.type));
    HF2Q_CUDA_LAUNCH_CHECK();
}

void launch_matmul(const ops::MatmulParams& p, const MatmulScratch& scratch, cublasHandle_t h, cudaStream_t s) {
    if (p.n_tokens <= 0 || p.w.n_out <= 0) return;
    const int64_t xs = p.x_stride ? p.x_stride : p.w.n_in;
    const int64_t ys = p.y_stride ? p.y_stride : p.w.n_out;
    if (p.n_tokens <= kMaxGemvTokens) {
        const int warps = 8;
        const unsigned grid = static_cast<unsigned>((p.w.n_out + warps - 1) / warps);
        bool ok = dispatch_type(p.w.type, [&]<GgmlType T>() { gemv_kernel<T><<<grid, warps * 32, 0, s>>>(p, xs, ys); });
        if (!ok) fail("CUDA matmul: unsupported weight type ", ggml_type_name(p.w.type));
        HF2Q_CUDA_LAUNCH_CHECK();
        return;
    }
    check_cublas(cublasSetStream(h, s), "cublasSetStream");
    if (p.w.type == GgmlType::F32) {
        sgemm_rows(h, static_cast<const float*>(p.w.data), p.w.n_out, p, xs, ys, 0);
        return;
    }
    const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(p.w.n_out, static_cast<int64_t>(scratch.floats) / p.w.n_in));
    HF2Q_ASSERT(chunk >= 1 && static_cast<size_t>(p.w.n_in) <= scratch.floats);
    for (int64_t n0 = 0; n0 < p.w.n_out; n0 += chunk) {
        const int64_t rows = std::min(chunk, p.w.n_out - n0);
        const uint8_t* w = static_cast<const uint8_t*>(p.w.data) + static_cast<uint64_t>(n0) * p.w.row_bytes;
        bool ok = dispatch_type(p.w.type, [&]<GgmlType T>() {
            expand_kernel<T><<<grid_1d(rows * p.w.n_in, 256), 256, 0, s>>>(w, p.w.row_bytes, p.w.n_in, rows, scratch.buf);
        });
        if (!ok) fail("CUDA matmul: unsupported weight type ", ggml_type_name(p.w.type));
        HF2Q_CUDA_LAUNCH_CHECK();
        sgemm_rows(h, scratch.buf, rows, p, xs, ys, n0);
    }
}

}  // namespace hf2q::cuda

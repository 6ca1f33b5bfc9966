// Batched linear layers (gemm.h). The block formats are expanded to BF16 tiles in
// a workspace (each weight byte read once per call) and multiplied by cuBLAS on the
// tensor cores with f32 accumulation. BF16 rather than F16 for the activations: the
// residual stream and the GELU products of Gemma 4 reach magnitudes where F16's
// range is not safe, and BF16 keeps f32's exponent.
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/gemm.h"
#include "backends/cuda/mma.cuh"

namespace hf2q::cuda {
namespace {

// The experts of one expansion group, passed by value to the kernels.
struct ExpertList {
    int32_t id[kMaxGroup];
    int32_t n = 0;
};

void check_cublas(cublasStatus_t st, const char* what) {
    if (st != CUBLAS_STATUS_SUCCESS) fail("cuBLAS error ", static_cast<int>(st), " in ", what);
}

__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// Eight values at p (16-byte aligned for BF16: rows of n_in % 8 == 0 values).
__device__ __forceinline__ void store8(float* p, const float (&v)[8]) {
#pragma unroll
    for (int k = 0; k < 8; ++k) p[k] = v[k];
}
__device__ __forceinline__ void store8(__nv_bfloat16* p, const float (&v)[8]) {
    *reinterpret_cast<uint4*>(p) = pack8_bf16(v);
}

// Matrix z of the launch: rows [row0, row0 + rows) of expert list.id[z] (or of the
// single matrix when list is empty), written densely to out + z·rows·n_in.
// Each thread decodes 8 consecutive values (n_in % 8 == 0) or one (otherwise).
template <GgmlType T, class Out>
__global__ void expand_kernel(const uint8_t* w, uint64_t row_bytes, uint64_t expert_bytes, int64_t n_in,
                              int64_t row0, int64_t rows, ExpertList list, Out* out) {
    pdl_begin();
    const int z = static_cast<int>(blockIdx.y);
    const uint8_t* base = w + (list.n > 0 ? static_cast<uint64_t>(list.id[z]) * expert_bytes : 0) +
                          static_cast<uint64_t>(row0) * row_bytes;
    Out* dst = out + static_cast<int64_t>(z) * rows * n_in;
    const bool by8 = n_in % 8 == 0;
    const int64_t per_row = by8 ? n_in / 8 : n_in;
    const int64_t n = rows * per_row;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = idx / per_row, c = idx % per_row;
        const uint8_t* row = base + static_cast<uint64_t>(r) * row_bytes;
        if (by8) {
            float v[8];
            dq8<T>(row, 8 * c, v);
            store8(dst + r * n_in + 8 * c, v);
        } else {
            store(dst + r * n_in + c, dq<T>(row, c));
        }
    }
}

// out[r] = bf16(x[src(r)]), src(r) = rows ? rows[r] : r; 8 values per thread when
// the rows allow 16-byte accesses (by8), else one.
__global__ void to_bf16_kernel(const float* x, int64_t xs, const int32_t* rows, int64_t n_rows, int64_t n,
                               bool by8, __nv_bfloat16* out) {
    pdl_begin();
    const int64_t per_row = by8 ? n / 8 : n;
    const int64_t total = n_rows * per_row;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = idx / per_row, c = idx % per_row;
        const float* src = x + (rows ? static_cast<int64_t>(rows[r]) : r) * xs;
        if (by8) {
            const float4 a = reinterpret_cast<const float4*>(src)[2 * c];
            const float4 b = reinterpret_cast<const float4*>(src)[2 * c + 1];
            const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
            store8(out + r * n + 8 * c, v);
        } else {
            out[r * n + c] = __float2bfloat16_rn(src[c]);
        }
    }
}

// perm16: whole 16-value groups, the 8 even values stored first, then the 8 odd.
__global__ void to_bf16_perm16_kernel(const float* x, int64_t xs, const int32_t* rows, int64_t n_rows, int64_t n,
                                      __nv_bfloat16* out) {
    pdl_begin();
    const int64_t per_row = n / 16, total = n_rows * per_row;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = idx / per_row, c = idx % per_row;
        const float4* src = reinterpret_cast<const float4*>(x + (rows ? static_cast<int64_t>(rows[r]) : r) * xs) + 4 * c;
        const float4 a = src[0], b = src[1], d = src[2], e = src[3];
        const float even[8] = {a.x, a.z, b.x, b.z, d.x, d.z, e.x, e.z};
        const float odd[8] = {a.y, a.w, b.y, b.w, d.y, d.w, e.y, e.w};
        store8(out + r * n + 16 * c, even);
        store8(out + r * n + 16 * c + 8, odd);
    }
}

// Pointer arrays of one grouped GEMM: slot z multiplies expanded expert z with the
// activation rows of expert list.id[z].
__global__ void group_ptrs_kernel(ExpertList list, const int32_t* offsets, const __nv_bfloat16* w,
                                  int64_t w_elems_per_expert, const __nv_bfloat16* x, int64_t n_in, float* y,
                                  int64_t ys, void** ptrs) {
    pdl_begin();
    const int z = static_cast<int>(threadIdx.x);
    if (z >= list.n) return;
    const int64_t off = offsets[list.id[z]];
    ptrs[z] = const_cast<__nv_bfloat16*>(w + z * w_elems_per_expert);
    ptrs[kMaxGroup + z] = const_cast<__nv_bfloat16*>(x + off * n_in);
    ptrs[2 * kMaxGroup + z] = y + off * ys;
}

template <class Out>
void expand(GgmlType type, const uint8_t* w, uint64_t row_bytes, uint64_t expert_bytes, int64_t n_in,
            int64_t row0, int64_t rows, const ExpertList& list, Out* out, cudaStream_t s) {
    const int64_t per_matrix = rows * (n_in % 8 == 0 ? n_in / 8 : n_in);
    const dim3 grid(grid_1d(per_matrix, 256), static_cast<unsigned>(std::max(1, list.n)));
    bool ok = dispatch_type(type, [&]<GgmlType T>() {
        launch(expand_kernel<T, Out>, grid, 256, 0, s, w, row_bytes, expert_bytes, n_in, row0, rows, list, out);
    });
    if (!ok) fail("CUDA matmul: unsupported weight type ", ggml_type_name(type));
    HF2Q_CUDA_LAUNCH_CHECK();
}

// C (rows × n, column-major, ld ldc) = A (k × rows)ᵀ · B (k × n): y rows are tokens.
void gemm_ex(cublasHandle_t h, int64_t rows, int64_t n, int64_t k, const __nv_bfloat16* a, const __nv_bfloat16* b,
             float* c, int64_t ldc) {
    const float one = 1.0f, zero = 0.0f;
    check_cublas(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(n),
                              static_cast<int>(k), &one, a, CUDA_R_16BF, static_cast<int>(k), b, CUDA_R_16BF,
                              static_cast<int>(k), &zero, c, CUDA_R_32F, static_cast<int>(ldc), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT),
                 "BF16 GEMM");
}

// to_bf16_kernel over n_rows rows into out, 8 values a thread where the rows and
// out allow 16-byte accesses.
void launch_to_bf16(const float* x, int64_t xs, const int32_t* rows, int64_t n_rows, int64_t n,
                    __nv_bfloat16* out, cudaStream_t s) {
    const bool by8 = n % 8 == 0 && xs % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(out) % 16 == 0;
    launch(to_bf16_kernel, grid_1d(n_rows * (by8 ? n / 8 : n), 256), 256, 0, s, x, xs, rows, n_rows, n, by8, out);
    HF2Q_CUDA_LAUNCH_CHECK();
}

}  // namespace

void to_bf16(const float* x, int64_t xs, const int32_t* rows, int64_t n_rows, int64_t n, GemmWorkspace& ws,
             cudaStream_t s, bool perm16) {
    HF2Q_ASSERT(static_cast<size_t>(n_rows * n) <= ws.x_elems);
    if (perm16) {
        HF2Q_ASSERT(n % 16 == 0 && xs % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0);
        launch(to_bf16_perm16_kernel, grid_1d(n_rows * (n / 16), 256), 256, 0, s, x, xs, rows, n_rows, n, ws.x);
        HF2Q_CUDA_LAUNCH_CHECK();
        return;
    }
    launch_to_bf16(x, xs, rows, n_rows, n, ws.x, s);
}

void to_bf16_rows(const float* x, int64_t xs, int64_t n_rows, int64_t n, void* out, cudaStream_t s) {
    if (n_rows <= 0 || n <= 0) return;
    launch_to_bf16(x, xs, nullptr, n_rows, n, static_cast<__nv_bfloat16*>(out), s);
}

void gemm_bf16(const ops::MatmulParams& p, GemmWorkspace& ws, cublasHandle_t h, cudaStream_t s, bool x_ready) {
    const int64_t n_in = p.w.n_in, xs = p.x_stride ? p.x_stride : n_in, ys = p.y_stride ? p.y_stride : p.w.n_out;
    const __nv_bfloat16* xb = p.x_bf16 != nullptr ? static_cast<const __nv_bfloat16*>(p.x_bf16) : ws.x;
    if (!x_ready && p.x_bf16 == nullptr) to_bf16(p.x, xs, nullptr, p.n_tokens, n_in, ws, s);
    check_cublas(cublasSetStream(h, s), "cublasSetStream");
    // The rows expand_to_bf16 wrote at load (the same values), or BF16 rows as stored.
    const void* rows = p.w.batch_layout != nullptr ? p.w.batch_layout : bf16_rows_direct(p.w) ? p.w.data : nullptr;
    if (rows != nullptr) {
        gemm_ex(h, p.w.n_out, p.n_tokens, n_in, static_cast<const __nv_bfloat16*>(rows), xb, p.y, ys);
        return;
    }
    const int64_t chunk = std::min<int64_t>(p.w.n_out, static_cast<int64_t>(ws.w_elems) / n_in);
    HF2Q_ASSERT(chunk >= 1);
    for (int64_t n0 = 0; n0 < p.w.n_out; n0 += chunk) {
        const int64_t rows = std::min(chunk, p.w.n_out - n0);
        expand(p.w.type, static_cast<const uint8_t*>(p.w.data), p.w.row_bytes, 0, n_in, n0, rows, ExpertList{}, ws.w,
               s);
        gemm_ex(h, rows, p.n_tokens, n_in, ws.w, xb, p.y + n0, ys);
    }
}

void expand_to_bf16(const ops::WeightView& w, __nv_bfloat16* out, cudaStream_t s) {
    expand(w.type, static_cast<const uint8_t*>(w.data), w.row_bytes, 0, w.n_in, 0, w.n_out, ExpertList{}, out, s);
}

void gemm_bf16_grouped(const ops::MoeMatmulParams& p, GemmWorkspace& ws, cublasHandle_t h, cudaStream_t s) {
    const int64_t n_in = p.w.n_in, n_out = p.w.n_out;
    const int64_t xs = p.x_stride ? p.x_stride : n_in, ys = p.y_stride ? p.y_stride : n_out;
    const int64_t per_expert = n_in * n_out;
    const int64_t fit = std::min<int64_t>(kMaxGroup, static_cast<int64_t>(ws.w_elems) / per_expert);
    HF2Q_ASSERT(fit >= 1);
    to_bf16(p.x, xs, p.x_rows, p.n_rows, n_in, ws, s);
    check_cublas(cublasSetStream(h, s), "cublasSetStream");

    std::vector<int32_t> active;
    for (int64_t e = 0; e < p.n_experts; ++e)
        if (p.host_offsets[e + 1] > p.host_offsets[e]) active.push_back(static_cast<int32_t>(e));
    for (size_t g0 = 0; g0 < active.size(); g0 += static_cast<size_t>(fit)) {
        ExpertList list;
        list.n = static_cast<int32_t>(std::min<size_t>(static_cast<size_t>(fit), active.size() - g0));
        std::vector<int> m(static_cast<size_t>(list.n)), n(m.size()), k(m.size()), lda(m.size()), ldb(m.size()),
            ldc(m.size()), size(m.size(), 1);
        std::vector<cublasOperation_t> ta(m.size(), CUBLAS_OP_T), tb(m.size(), CUBLAS_OP_N);
        std::vector<float> alpha(m.size(), 1.0f), beta(m.size(), 0.0f);
        for (int z = 0; z < list.n; ++z) {
            const int32_t e = active[g0 + static_cast<size_t>(z)];
            list.id[z] = e;
            const size_t zi = static_cast<size_t>(z);
            m[zi] = static_cast<int>(n_out);
            n[zi] = p.host_offsets[e + 1] - p.host_offsets[e];
            k[zi] = lda[zi] = ldb[zi] = static_cast<int>(n_in);
            ldc[zi] = static_cast<int>(ys);
        }
        expand(p.w.type, static_cast<const uint8_t*>(p.w.data), p.w.row_bytes, p.expert_bytes, n_in, 0, n_out, list,
               ws.w, s);
        if (!ws.no_grouped_gemm) {
            launch(group_ptrs_kernel, 1, kMaxGroup, 0, s, list, p.offsets, ws.w, per_expert, ws.x, n_in, p.y, ys, ws.ptrs);
            HF2Q_CUDA_LAUNCH_CHECK();
            const cublasStatus_t st = cublasGemmGroupedBatchedEx(
                h, ta.data(), tb.data(), m.data(), n.data(), k.data(), alpha.data(),
                const_cast<const void* const*>(ws.ptrs), CUDA_R_16BF, lda.data(),
                const_cast<const void* const*>(ws.ptrs + kMaxGroup), CUDA_R_16BF, ldb.data(), beta.data(),
                ws.ptrs + 2 * kMaxGroup, CUDA_R_32F, ldc.data(), list.n, size.data(), CUBLAS_COMPUTE_32F);
            if (st == CUBLAS_STATUS_SUCCESS) continue;
            if (st != CUBLAS_STATUS_NOT_SUPPORTED) check_cublas(st, "grouped BF16 GEMM");
            ws.no_grouped_gemm = true;  // this cuBLAS lacks the combination: one GEMM per expert
        }
        for (int z = 0; z < list.n; ++z) {
            const int64_t off = p.host_offsets[list.id[z]];
            gemm_ex(h, n_out, n[static_cast<size_t>(z)], n_in, ws.w + z * per_expert, ws.x + off * n_in,
                    p.y + off * ys, ys);
        }
    }
}

void gemm_f32(const ops::MatmulParams& p, GemmWorkspace& ws, cublasHandle_t h, cudaStream_t s) {
    const int64_t n_in = p.w.n_in, xs = p.x_stride ? p.x_stride : n_in, ys = p.y_stride ? p.y_stride : p.w.n_out;
    check_cublas(cublasSetStream(h, s), "cublasSetStream");
    const float one = 1.0f, zero = 0.0f;
    auto sgemm = [&](const float* w, int64_t rows, int64_t n0) {
        check_cublas(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(p.n_tokens),
                                 static_cast<int>(n_in), &one, w, static_cast<int>(n_in), p.x, static_cast<int>(xs),
                                 &zero, p.y + n0, static_cast<int>(ys)),
                     "SGEMM");
    };
    if (p.w.type == GgmlType::F32 && reinterpret_cast<uintptr_t>(p.w.data) % 4 == 0) {
        sgemm(static_cast<const float*>(p.w.data), p.w.n_out, 0);
        return;
    }
    const int64_t chunk = std::min<int64_t>(p.w.n_out, static_cast<int64_t>(ws.f32_elems) / n_in);
    HF2Q_ASSERT(chunk >= 1);
    for (int64_t n0 = 0; n0 < p.w.n_out; n0 += chunk) {
        const int64_t rows = std::min(chunk, p.w.n_out - n0);
        expand(p.w.type, static_cast<const uint8_t*>(p.w.data), p.w.row_bytes, 0, n_in, n0, rows, ExpertList{},
               ws.f32, s);
        sgemm(ws.f32, rows, n0);
    }
}

}  // namespace hf2q::cuda

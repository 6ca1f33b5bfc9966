// Linear layers and embedding gathers on block-format weights: the dispatcher.
//
//   n_tokens <= kGemvTokens (decode, small batches): every weight byte read once per
//     8 tokens; gemv_q8.cu (8-bit activations, integer dot products) for the common
//     block formats in the default precision, else gemv.cu (f32 arithmetic).
//   17-32 tokens (CudaOptions::tile_gemm_max_tokens), Q4_K weights with a tile copy,
//     every product of the launch (tile_gemm_covers): gemm_tile.cu, 0.625 bytes a
//     value, on warpgroup MMAs (session 61: at 64 tokens cuBLAS is as fast).
//     Two kernels before it that read the block formats lost to cuBLAS on the BF16
//     copies: session 21's split-K tile kernel on the register decoders (too few bytes
//     in flight) and session 42's gemm_small.cu (latency-bound at about 5 warps an SM;
//     off until session 61 removed it, docs/performance.md).
//   larger batches and the other types: gemm.cu, weight tiles expanded to BF16 (or
//     read from the BF16 batch copy) and multiplied on the tensor cores by cuBLAS (or
//     expanded to f32 and SGEMM in the reference precision).
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

namespace {

// Batches of at most this many tokens run a matmul_multi's products concurrently
// (forked_products). Why: at 17-128 tokens each product is a small cuBLAS GEMM
// (H200, 26B-A4B at 64 tokens: k and v of 11.5 MB each, 128 blocks, split-K with a
// reduction kernel) that leaves most of the GPU idle; one after the other, q, k and
// v took 27 µs of every sliding layer's critical path; forked, 64 sequences went
// from 4,671 / 4,678 to 4,702 / 4,703 tokens/s (docs/performance.md, session 33).
// Larger batches fill the GPU with each product alone. 0: never, for the A/B.
#ifndef HF2Q_MATMUL_FORK_TOKENS
#define HF2Q_MATMUL_FORK_TOKENS 128
#endif
constexpr int64_t kForkMaxTokens = HF2Q_MATMUL_FORK_TOKENS;

// Whether a matmul reads the producer's BF16 rows x_bf16 (ops/prepared.h): absent or
// 16-byte aligned. Below that alignment cuBLAS takes other kernels, whose sums round
// differently from those on the rows converted here, and the contract asks for the
// same bits either way; so such rows are ignored and x converted.
bool usable_bf16_rows(const void* x_bf16) { return x_bf16 == nullptr || aligned16(x_bf16); }

// Product i of p as a matmul op (with p's BF16 rows, if any).
ops::MatmulParams product(const ops::MultiMatmulParams& p, int i) {
    ops::MatmulParams m{p.w[i], p.x, p.y[i], p.n_tokens, p.x_stride, p.y_stride[i]};
    m.x_bf16 = p.x_bf16;
    return m;
}

// The products of p after the first on env.fork's streams, the first on s, all
// reading the BF16 activations converted once; s waits for all of them. False (and
// nothing issued) where the fork does not apply: a product without BF16 rows to read
// would expand its weight into the one shared scratch. Each product is the same
// cuBLAS call as on one stream (same shapes and workspace size), so the same bits.
bool forked_products(const ops::MultiMatmulParams& p, MatmulEnv& env, cudaStream_t s) {
    const MatmulFork* f = env.fork;
    if (f == nullptr || p.n < 2 || p.n_tokens > kForkMaxTokens) return false;
    for (int i = 0; i < p.n; ++i)
        if (p.w[i].batch_layout == nullptr && !bf16_rows_direct(p.w[i])) return false;
    const int64_t n_in = p.w[0].n_in;
    if (p.x_bf16 == nullptr) to_bf16(p.x, p.x_stride ? p.x_stride : n_in, nullptr, p.n_tokens, n_in, *env.ws, s);
    HF2Q_CUDA_CHECK(cudaEventRecord(f->start, s));
    for (int i = 1; i < p.n; ++i) {
        cudaStream_t fs = f->stream[i - 1];
        HF2Q_CUDA_CHECK(cudaStreamWaitEvent(fs, f->start, 0));
        gemm_bf16(product(p, i), *env.ws, f->cublas[i - 1], fs, true);
        HF2Q_CUDA_CHECK(cudaEventRecord(f->done[i - 1], fs));
    }
    gemm_bf16(product(p, 0), *env.ws, env.cublas, s, true);
    for (int i = 1; i < p.n; ++i) HF2Q_CUDA_CHECK(cudaStreamWaitEvent(s, f->done[i - 1], 0));
    return true;
}

// The rows of all of p's products where they can run as one GEMM, else 0: their BF16
// copies lie back to back in p's order (ops::Backend::batch_layouts), and so do their
// outputs' columns (y[i] = y[0] + the earlier weights' n_out, one row stride). Why:
// at 17-128 tokens one launch over the joint rows fills the GPU where each product
// alone does not (H200, q/k/v of the 26B-A4B's sliding layers at 64 tokens, in a
// graph: 14.8 µs against 21.0 forked on three streams and 24.7 one after the other).
int64_t joint_rows(const ops::MultiMatmulParams& p) {
    const ops::WeightView* w[ops::MultiMatmulParams::kMax];
    int64_t rows = 0;
    for (int i = 0; i < p.n; ++i) {
        w[i] = &p.w[i];
        if (p.y_stride[i] != p.y_stride[0] || p.y[i] != p.y[0] + rows) return 0;
        rows += p.w[i].n_out;
    }
    return ops::back_to_back_batch_layouts(w, p.n) && p.y_stride[0] >= rows && rows <= 2147483647 ? rows : 0;
}

// The tokens' BF16 rows for the tile GEMM (gemm_tile.cu): the producer's (x_bf16,
// usable_bf16_rows) where given, else x converted into ws.x (the same values;
// ensure_activations first).
const __nv_bfloat16* gemm_tokens(const float* x, int64_t x_stride, const void* x_bf16, int64_t n_tokens, int64_t n_in,
                                 MatmulEnv& env, cudaStream_t s) {
    if (x_bf16 != nullptr) return static_cast<const __nv_bfloat16*>(x_bf16);
    to_bf16(x, x_stride ? x_stride : n_in, nullptr, n_tokens, n_in, *env.ws, s);
    return env.ws->x;
}

// p's products in one launch of the tile GEMM (gemm_tile.cu) where every one has a
// tile copy; false (nothing issued) where one has none. A product without one (a Q6_K
// v) would run as a second, serial GEMM where the joint BF16 copy takes one
// (session 60, H100: q and k on the tile GEMM, v on cuBLAS after it, lost 1 % at 64
// sequences).
bool tile_gemm_multi(const ops::MultiMatmulParams& p, MatmulEnv& env, cudaStream_t s) {
    for (int i = 0; i < p.n; ++i)
        if (!tile_gemm_covers(p.w[i], p.n_tokens, env.tile_max_tokens)) return false;
    const __nv_bfloat16* xb = gemm_tokens(p.x, p.x_stride, p.x_bf16, p.n_tokens, p.w[0].n_in, env, s);
    const ops::WeightView* w[ops::MultiMatmulParams::kMax];
    for (int i = 0; i < p.n; ++i) w[i] = &p.w[i];
    launch_tile_gemm(w, p.y, p.y_stride, p.n, xb, p.n_tokens, s);
    return true;
}

}  // namespace

void launch_matmul(const ops::MatmulParams& p, MatmulEnv& env, cudaStream_t s) {
    if (p.n_tokens <= 0 || p.w.n_out <= 0) return;
    if (!usable_bf16_rows(p.x_bf16)) {
        ops::MatmulParams q = p;
        q.x_bf16 = nullptr;
        return launch_matmul(q, env, s);
    }
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
    if (tile_gemm_covers(p.w, p.n_tokens, env.tile_max_tokens)) {
        const ops::WeightView* w = &p.w;
        const __nv_bfloat16* xb = gemm_tokens(p.x, p.x_stride, p.x_bf16, p.n_tokens, p.w.n_in, env, s);
        launch_tile_gemm(&w, &p.y, &p.y_stride, 1, xb, p.n_tokens, s);
        return;
    }
    gemm_bf16(p, *env.ws, env.cublas, s);
}

void launch_matmul_multi(const ops::MultiMatmulParams& p, MatmulEnv& env, cudaStream_t s) {
    ops::check_matmul_multi(p);
    if (p.n_tokens <= 0) return;
    if (!usable_bf16_rows(p.x_bf16)) {
        ops::MultiMatmulParams q = p;
        q.x_bf16 = nullptr;
        return launch_matmul_multi(q, env, s);
    }
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
        // The activations converted to BF16 once for all weights (same n_in), or read
        // from their producer's BF16 rows (p.x_bf16). H200, session 21, 64 sequences:
        // 4,420 / 4,421 -> 4,523 / 4,486 tokens/s.
        ensure_activations(env, p.n_tokens * p.w[0].n_in);
        if (tile_gemm_multi(p, env, s)) return;
        if (const int64_t rows = joint_rows(p); rows > 0) {
            ops::MatmulParams m = product(p, 0);
            m.w.n_out = rows;
            gemm_bf16(m, *env.ws, env.cublas, s);
            return;
        }
        if (forked_products(p, env, s)) return;
        for (int i = 0; i < p.n; ++i) gemm_bf16(product(p, i), *env.ws, env.cublas, s, i > 0);
        return;
    }
    for (int i = 0; i < p.n; ++i) launch_matmul(product(p, i), env, s);
}

}  // namespace hf2q::cuda

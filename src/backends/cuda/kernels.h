// Launchers of the CUDA backend's kernels, one op family per .cu file. All
// pointers are device pointers; every launcher enqueues on `s` and returns.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backends/cuda/cuda_backend.h"
#include "ops/backend.h"

namespace hf2q::cuda {

struct GemmWorkspace;

// Streams over which a batched matmul_multi spreads its products (matmul.cu): the
// second and third run on these, each with its own cuBLAS handle and workspace,
// concurrently with the first on the calling stream. Owned by the backend.
struct MatmulFork {
    static constexpr int kStreams = ops::MultiMatmulParams::kMax - 1;
    cudaStream_t stream[kStreams] = {};
    cublasHandle_t cublas[kStreams] = {};
    cudaEvent_t start = nullptr;      // recorded on the calling stream after its input
    cudaEvent_t done[kStreams] = {};  // recorded on stream[i] after its product
};

// What the matmul launchers share: the workspace, the cuBLAS handle, the precision,
// and (optional) the streams of concurrent products.
struct MatmulEnv {
    GemmWorkspace* ws = nullptr;
    cublasHandle_t cublas = nullptr;
    MatmulPrecision precision = MatmulPrecision::bf16;
    const MatmulFork* fork = nullptr;
    int tile_max_tokens = 0;  // CudaOptions::tile_gemm_max_tokens
};

// Grows the BF16 activation buffer of the workspace to at least `elems` values
// (synchronises the device when it has to reallocate; the size only grows).
void ensure_activations(MatmulEnv& env, int64_t elems);

// Scratch the attention may use for split-KV partial results (device memory).
struct AttentionWorkspace {
    float* buf = nullptr;
    size_t floats = 0;
    bool f32_only = false;  // reference precision: no F16 tensor-core tiles
};

void launch_rms_norm(const ops::RmsNormParams& p, cudaStream_t s);
// One kernel for the whole op where rows fit in registers (n % 4 == 0, n <= 8192,
// 16-byte aligned rows); false otherwise (the caller runs the rms_norm sequence).
bool launch_residual_norms(const ops::ResidualNormsParams& p, cudaStream_t s);
// One kernel for head dims of a multiple of 128 (8-byte aligned rows); false
// otherwise (the caller runs the op sequence).
bool launch_attention_inputs(const ops::AttentionInputsParams& p, cudaStream_t s);
void launch_rope(const ops::RopeParams& p, cudaStream_t s);
void launch_geglu(const ops::GegluParams& p, cudaStream_t s);
void launch_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t s);
void launch_mul(const float* a, const float* b, float* y, int64_t n, cudaStream_t s);
void launch_scale(float* x, float v, int64_t n, cudaStream_t s);
void launch_softcap(float* x, float cap, int64_t n, cudaStream_t s);
void launch_get_rows(const ops::GetRowsParams& p, cudaStream_t s);
// Whether launch_matmul(_multi) of n_tokens rows takes the GEMV (whose only
// scratch is env.ws->q8) rather than the tensor-core or SGEMM paths.
bool matmul_uses_gemv(int64_t n_tokens);
void launch_matmul(const ops::MatmulParams& p, MatmulEnv& env, cudaStream_t s);
void launch_matmul_multi(const ops::MultiMatmulParams& p, MatmulEnv& env, cudaStream_t s);
void launch_attention(const ops::AttentionParams& p, const AttentionWorkspace& ws, cudaStream_t s);

// The key-range splits, at most `most`, launch_attention gives a batch of `blocks`
// (token, head group) blocks of the split kernel when `slots` of them run at once
// and the longest key range is `chunks` chunks: `most` where blocks · most fit in one
// wave, else the count that minimises waves × (chunks a split + 1), the fewest on a tie.
int attention_wave_splits(int64_t blocks, int64_t slots, int64_t chunks, int most);

// Blocks of the split kernel serving p that the GPU runs at once (blocks an SM × SMs);
// warps: of the keys-by-warp kernel (attention_split.cu) where it has one.
int64_t attention_split_slots(const ops::AttentionParams& p, bool tensor_cores, bool warps);

// How launch_attention runs a batch on the split kernel: its key-range splits, and
// whether the keys-by-warp kernel serves it (8-bit pools at head size 256, where each split
// spans enough chunks). used: floats of ws taken before (by the tile kernels' plan).
struct AttentionSplitPlan {
    int n_split = 1;
    bool warps = false;
};
AttentionSplitPlan attention_split_plan(const ops::AttentionParams& p, const AttentionWorkspace& ws, size_t used);

void launch_moe_route(const ops::MoeRouteParams& p, cudaStream_t s);
void launch_moe_group(const ops::MoeGroupParams& p, cudaStream_t s);
// moe_route then moe_group (ops::Backend::moe_route_group), fused into one kernel
// where the batch is small enough.
void launch_moe_route_group(const ops::MoeRouteParams& r, const ops::MoeGroupParams& g, cudaStream_t s);
// The same with r's router product first (r.router_x set, ops/moe.h), as one kernel
// where the batch is decode-sized and the router weight F32 with 16-byte aligned
// rows; false (nothing launched) otherwise. `arrived`: a zeroed device counter used
// by no other stream (the kernel leaves it zero).
bool launch_moe_router_route_group(const ops::MoeRouteParams& r, const ops::MoeGroupParams& g, unsigned* arrived,
                                   cudaStream_t s);
// Whether launch_moe_matmul(p) takes a tensor-core path (the expansion scratch of
// env.ws, cuBLAS) rather than the grouped GEMV (only env.ws->q8).
bool moe_matmul_uses_gemm(const ops::MoeMatmulParams& p, const MatmulEnv& env);
void launch_moe_matmul(const ops::MoeMatmulParams& p, MatmulEnv& env, cudaStream_t s);
void launch_moe_combine(const ops::MoeCombineParams& p, cudaStream_t s);
void launch_gather_rows(const ops::GatherRowsParams& p, cudaStream_t s);
void launch_scatter_add(const ops::ScatterAddParams& p, cudaStream_t s);
void launch_kv_store(const ops::KvStoreParams& p, cudaStream_t s);
void launch_copy_blocks(const ops::CopyBlocksParams& p, cudaStream_t s);
void launch_feed_tokens(const ops::FeedTokensParams& p, cudaStream_t s);
// Scratch for argmax_rows over few long rows (a decode step's logits): each row's
// values split over several blocks, the last of them to finish reducing their bests
// (sampling.cu). `arrived`: zeroed counters, one per row, used by no other stream
// (left zeroed); `part`: 4 words per (row, split). Null: one block per row.
struct ArgmaxWorkspace {
    unsigned* arrived = nullptr;
    int64_t n_arrived = 0;
    uint32_t* part = nullptr;
    int64_t n_part = 0;  // (row, split) entries
};
void launch_argmax_rows(const ops::ArgmaxRowsParams& p, const ArgmaxWorkspace& ws, cudaStream_t s);
// topk_rows (sampling.cu) and the scratch it needs for up to `rows` rows of n values.
size_t topk_rows_scratch_bytes(int64_t rows, int64_t n);
void launch_topk_rows(const ops::TopkRowsParams& p, cudaStream_t s);

bool type_supported(GgmlType t);

}  // namespace hf2q::cuda

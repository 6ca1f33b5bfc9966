// Row movement and routing: MoE top-k routing, gather, weighted scatter-add, KV
// cache writes and copy-on-write block copies (ops/moe.h, ops/gather.h).
#include <cfloat>

#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace hf2q::cuda {
namespace {

constexpr int kMaxTopK = 16;

// One thread per token: softmax over experts in f32, top-k by repeated selection
// (lower index wins ties), renormalise, per-expert scale.
__global__ void moe_route_kernel(ops::MoeRouteParams p) {
    const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (t >= p.n_tokens) return;
    const float* lg = p.logits + t * p.n_experts;
    float mx = -FLT_MAX;
    for (int64_t e = 0; e < p.n_experts; ++e) mx = fmaxf(mx, lg[e]);
    float sum = 0.0f;
    for (int64_t e = 0; e < p.n_experts; ++e) sum += expf(lg[e] - mx);
    int32_t ids[kMaxTopK];
    float probs[kMaxTopK];
    float sel_sum = 0.0f;
    for (int64_t k = 0; k < p.k; ++k) {
        int32_t best = -1;
        float bv = -FLT_MAX;
        for (int64_t e = 0; e < p.n_experts; ++e) {
            bool taken = false;
            for (int64_t j = 0; j < k; ++j) taken |= ids[j] == e;
            if (!taken && (best < 0 || lg[e] > bv)) {
                best = static_cast<int32_t>(e);
                bv = lg[e];
            }
        }
        ids[k] = best;
        probs[k] = expf(bv - mx) / sum;
        sel_sum += probs[k];
    }
    for (int64_t k = 0; k < p.k; ++k) {
        float w = probs[k] / sel_sum;
        if (p.expert_scale) w *= p.expert_scale[ids[k]];
        p.ids[t * p.k + k] = ids[k];
        p.weights[t * p.k + k] = w;
    }
}

__global__ void gather_kernel(ops::GatherRowsParams p) {
    const int64_t n = p.n_rows * p.n;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t i = idx / p.n, j = idx % p.n;
        p.dst[i * p.dst_stride + j] = p.src[static_cast<int64_t>(p.rows[i]) * p.src_stride + j];
    }
}

// One thread per column: rows are applied in order, so repeated destination rows
// accumulate deterministically.
__global__ void scatter_add_kernel(ops::ScatterAddParams p) {
    const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (j >= p.n) return;
    for (int64_t i = 0; i < p.n_rows; ++i) {
        float* d = p.dst + static_cast<int64_t>(p.rows[i]) * p.dst_stride + j;
        *d = *d + p.weights[i] * p.src[i * p.src_stride + j];
    }
}

__global__ void kv_store_kernel(ops::KvStoreParams p) {
    const int64_t n = p.n_tokens * p.row;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t t = idx / p.row, j = idx % p.row;
        const int32_t pos = p.pos[t];
        const int64_t slot = static_cast<int64_t>(p.tables[t][pos / p.block_size]) * p.block_size + pos % p.block_size;
        p.k_pool[slot * p.row + j] = p.k[idx];
        p.v_pool[slot * p.row + j] = p.v[idx];
    }
}

__global__ void copy_blocks_kernel(ops::CopyBlocksParams p) {
    const int64_t n = p.n * p.block_floats;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t b = idx / p.block_floats, j = idx % p.block_floats;
        p.pool[static_cast<int64_t>(p.dst[b]) * p.block_floats + j] =
            p.pool[static_cast<int64_t>(p.src[b]) * p.block_floats + j];
    }
}

}  // namespace

void launch_moe_route(const ops::MoeRouteParams& p, cudaStream_t s) {
    if (p.n_tokens <= 0) return;
    if (p.k > kMaxTopK || p.k > p.n_experts) fail("CUDA MoE routing: top-k ", p.k, " not supported");
    moe_route_kernel<<<grid_1d(p.n_tokens, 128), 128, 0, s>>>(p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

void launch_gather_rows(const ops::GatherRowsParams& p, cudaStream_t s) {
    if (p.n_rows * p.n <= 0) return;
    gather_kernel<<<grid_1d(p.n_rows * p.n, 256), 256, 0, s>>>(p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

void launch_scatter_add(const ops::ScatterAddParams& p, cudaStream_t s) {
    if (p.n_rows <= 0 || p.n <= 0) return;
    scatter_add_kernel<<<grid_1d(p.n, 256), 256, 0, s>>>(p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

void launch_kv_store(const ops::KvStoreParams& p, cudaStream_t s) {
    if (p.n_tokens * p.row <= 0) return;
    kv_store_kernel<<<grid_1d(p.n_tokens * p.row, 256), 256, 0, s>>>(p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

void launch_copy_blocks(const ops::CopyBlocksParams& p, cudaStream_t s) {
    if (p.n * p.block_floats <= 0) return;
    copy_blocks_kernel<<<grid_1d(p.n * p.block_floats, 256), 256, 0, s>>>(p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

}  // namespace hf2q::cuda

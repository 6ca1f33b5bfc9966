// Row movement: gather, weighted scatter-add, KV cache writes and copy-on-write
// block copies (ops/gather.h). MoE routing is in moe.cu.
#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace hf2q::cuda {
namespace {

__global__ void gather_kernel(ops::GatherRowsParams p) {
    pdl_begin();
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
    pdl_begin();
    const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (j >= p.n) return;
    for (int64_t i = 0; i < p.n_rows; ++i) {
        float* d = p.dst + static_cast<int64_t>(p.rows[i]) * p.dst_stride + j;
        *d = *d + p.weights[i] * p.src[i * p.src_stride + j];
    }
}

// KV is the pool element: float, or half (__float2half_rn: round to nearest even,
// as the CPU's fp32_to_fp16).
template <class KV>
__global__ void kv_store_kernel(ops::KvStoreParams p) {
    pdl_begin();
    const int64_t n = p.n_tokens * p.row;
    KV* const kp = static_cast<KV*>(p.k_pool);
    KV* const vp = static_cast<KV*>(p.v_pool);
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t t = idx / p.row, j = idx % p.row;
        const int32_t pos = p.pos[t];
        const int64_t block = p.tables[t][pos / p.block_size];
        const int64_t at = ops::kv_value_index(block, pos % p.block_size, j, p.block_size, p.row, p.head_dim);
        kp[at] = to_kv<KV>(p.k[idx]);
        vp[at] = to_kv<KV>(p.v[idx]);
    }
}

// i8 pools: one warp per (token, KV head) row of head_dim values: its largest
// magnitude, then the codes and the scale (quant::quantize_row_i8, bit for bit).
__global__ void kv_store_i8_kernel(ops::KvStoreParams p) {
    pdl_begin();
    const int64_t heads = p.row / p.head_dim, rows = p.n_tokens * heads;
    const int lane = static_cast<int>(threadIdx.x % 32);
    for (int64_t r = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; r < rows;
         r += static_cast<int64_t>(gridDim.x) * blockDim.x / 32) {
        const int64_t t = r / heads, h = r % heads;
        const int32_t pos = p.pos[t];
        const int64_t block = p.tables[t][pos / p.block_size], s = pos % p.block_size;
        const int64_t at = ops::kv_pool_index(block, s, h, p.block_size, p.row, p.head_dim);
        for (int kv = 0; kv < 2; ++kv) {
            const float* x = (kv == 0 ? p.k : p.v) + t * p.row + h * p.head_dim;
            kv_i8* dst = static_cast<kv_i8*>(kv == 0 ? p.k_pool : p.v_pool) + at;
            float amax = 0.0f;
            for (int64_t i = lane; i < p.head_dim; i += 32) amax = fmaxf(amax, fabsf(x[i]));
            for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            const float2 d = i8_scale(amax);
            for (int64_t i = lane; i < p.head_dim; i += 32) dst[i] = static_cast<kv_i8>(i8_code(x[i], d.y));
            if (lane == 0)
                (kv == 0 ? p.k_scale : p.v_scale)[ops::kv_scale_index(block, s, h, p.block_size, heads)] = d.x;
        }
    }
}

// Blocks are copied in 4-byte words (block_bytes is a multiple of 4: rows of an even
// number of values).
__global__ void copy_blocks_kernel(ops::CopyBlocksParams p) {
    pdl_begin();
    const int64_t words = p.block_bytes / 4, n = p.n * words;
    uint32_t* const pool = static_cast<uint32_t*>(p.pool);
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t b = idx / words, j = idx % words;
        pool[static_cast<int64_t>(p.dst[b]) * words + j] = pool[static_cast<int64_t>(p.src[b]) * words + j];
    }
}

__global__ void feed_tokens_kernel(ops::FeedTokensParams p) {
    pdl_begin();
    for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < p.n;
         t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int32_t from = p.from[t];
        if (from < 0) {
            p.out[t] = p.tokens[t];
            continue;
        }
        const int32_t id = p.ids[from];
        p.out[t] = id >= 0 && id < p.n_vocab ? id : 0;
    }
}

}  // namespace

void launch_feed_tokens(const ops::FeedTokensParams& p, cudaStream_t s) {
    if (p.n <= 0) return;
    launch(feed_tokens_kernel, grid_1d(p.n, 256), 256, 0, s, p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

void launch_gather_rows(const ops::GatherRowsParams& p, cudaStream_t s) {
    if (p.n_rows * p.n <= 0) return;
    launch(gather_kernel, grid_1d(p.n_rows * p.n, 256), 256, 0, s, p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

void launch_scatter_add(const ops::ScatterAddParams& p, cudaStream_t s) {
    if (p.n_rows <= 0 || p.n <= 0) return;
    launch(scatter_add_kernel, grid_1d(p.n, 256), 256, 0, s, p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

void launch_kv_store(const ops::KvStoreParams& p, cudaStream_t s) {
    if (p.n_tokens * p.row <= 0) return;
    HF2Q_ASSERT(p.head_dim > 0 && p.row % p.head_dim == 0);
    if (ops::kv_type_scaled(p.kv_type)) {
        HF2Q_ASSERT(p.k_scale && p.v_scale);
        launch(kv_store_i8_kernel, grid_1d(p.n_tokens * (p.row / p.head_dim) * 32, 256), 256, 0, s, p);
    } else {
        dispatch_kv(p.kv_type, [&]<class KV>() {
            if constexpr (!kv_scaled<KV>)
                launch(kv_store_kernel<KV>, grid_1d(p.n_tokens * p.row, 256), 256, 0, s, p);
        });
    }
    HF2Q_CUDA_LAUNCH_CHECK();
}

void launch_copy_blocks(const ops::CopyBlocksParams& p, cudaStream_t s) {
    if (p.n * p.block_bytes <= 0) return;
    HF2Q_ASSERT(p.block_bytes % 4 == 0);
    launch(copy_blocks_kernel, grid_1d(p.n * (p.block_bytes / 4), 256), 256, 0, s, p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

}  // namespace hf2q::cuda

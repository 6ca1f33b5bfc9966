// Attention of query tokens over the paged KV cache (ops/attention.h).
//
// One block of 4 warps per (token, head). Each warp takes every 4th visible key,
// lanes split the head dimension (head_dim <= 512: 16 values per lane), the dot
// product is a warp reduction, and the warp keeps an online softmax (running max,
// sum and weighted V). The 4 partial states are merged at the end. Memory is O(1)
// per query; only the visible key range [lo, pos] is read. A correct baseline for
// the tiled flash-attention kernels.
#include <cfloat>

#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace hf2q::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxPerLane = 16;  // head_dim <= 512

__global__ void attention_kernel(ops::AttentionParams p) {
    const int64_t t = blockIdx.x, h = blockIdx.y;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t hd = p.head_dim, kvh = h / (p.n_heads / p.n_kv_heads);
    const int64_t row = p.n_kv_heads * hd;
    const int32_t pos = p.pos[t];
    const int32_t lo = p.window > 0 ? max(0, pos - p.window + 1) : 0;
    const int32_t* table = p.tables[t];
    const float* q = p.q + (t * p.n_heads + h) * hd;

    float qr[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
    for (int c = 0; c < kMaxPerLane; ++c) {
        const int64_t d = lane + 32 * c;
        qr[c] = d < hd ? q[d] : 0.0f;
        acc[c] = 0.0f;
    }
    float m = -FLT_MAX, l = 0.0f;
    for (int32_t j = lo + warp; j <= pos; j += kWarps) {
        const int64_t slot = static_cast<int64_t>(table[j / p.block_size]) * p.block_size + j % p.block_size;
        const float* k = p.k_pool + slot * row + kvh * hd;
        const float* v = p.v_pool + slot * row + kvh * hd;
        float dot = 0.0f;
#pragma unroll
        for (int c = 0; c < kMaxPerLane; ++c) {
            const int64_t d = lane + 32 * c;
            if (d < hd) dot += qr[c] * k[d];
        }
        for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        const float s = dot * p.scale;
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new), e = expf(s - m_new);
        l = l * corr + e;
#pragma unroll
        for (int c = 0; c < kMaxPerLane; ++c) {
            const int64_t d = lane + 32 * c;
            if (d < hd) acc[c] = acc[c] * corr + e * v[d];
        }
        m = m_new;
    }

    __shared__ float sm[kWarps], sl[kWarps];
    __shared__ float sacc[kWarps][32 * kMaxPerLane];
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
#pragma unroll
    for (int c = 0; c < kMaxPerLane; ++c) sacc[warp][lane + 32 * c] = acc[c];
    __syncthreads();
    float M = -FLT_MAX;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm[w]);
    float L = 0.0f, f[kWarps];
    for (int w = 0; w < kWarps; ++w) {
        f[w] = sl[w] > 0.0f ? expf(sm[w] - M) : 0.0f;
        L += sl[w] * f[w];
    }
    float* out = p.out + (t * p.n_heads + h) * hd;
    for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < kWarps; ++w) o += sacc[w][d] * f[w];
        out[d] = o / L;
    }
}

}  // namespace

void launch_attention(const ops::AttentionParams& p, cudaStream_t s) {
    if (p.n_tokens <= 0) return;
    if (p.head_dim > 32 * kMaxPerLane) fail("CUDA attention: head size ", p.head_dim, " above 512");
    HF2Q_ASSERT(p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0);
    dim3 grid(static_cast<unsigned>(p.n_tokens), static_cast<unsigned>(p.n_heads));
    attention_kernel<<<grid, 32 * kWarps, 0, s>>>(p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

}  // namespace hf2q::cuda

// Element-wise ops: RMSNorm (one block per row), RoPE (NeoX), GELU-tanh gating,
// add / mul / scale / softcap. f32 throughout; see ops/*.h for the semantics.
#include <algorithm>
#include <cmath>

#include "backends/cuda/common.cuh"
#include "backends/cuda/gemm.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/mma.cuh"
#include "backends/cuda/q8.cuh"

namespace hf2q::cuda {
namespace {

constexpr int kThreads = 256;

__device__ float block_sum(float v, float* shared) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += shared[w];
    __syncthreads();
    return total;
}

// The largest of v over the block (as block_sum; shared: 32 floats).
__device__ float block_max(float v, float* shared) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float m = shared[0];
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) m = fmaxf(m, shared[w]);
    __syncthreads();
    return m;
}

// 1/rms of a row from its sum of squares.
__device__ __forceinline__ float inv_rms(float ss, int64_t n, float eps) {
    return 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
}

// One output value of a norm without RoPE: x·inv (·w) (+ a) (·out_scale), each step
// rounded on its own. has_w / has_a say whether wi / ai are used.
__device__ __forceinline__ float norm_value(const ops::RmsNormParams& p, float xi, float inv, bool has_w, float wi,
                                            bool has_a, float ai) {
    float v = __fmul_rn(xi, inv);
    if (has_w) v = __fmul_rn(v, wi);
    if (has_a) v = __fadd_rn(ai, v);
    if (p.out_scale != 1.0f) v = __fmul_rn(v, p.out_scale);
    return v;
}

// The NeoX rotation of one pair (x0, x1) = (v[k], v[k + half]) at position pos
// (ops/rope.h), each step rounded on its own as the CPU reference does.
__device__ __forceinline__ void rotate_pair(float& x0, float& x1, float pos, float inv_freq) {
    const float ang = __fmul_rn(pos, inv_freq);
    const float c = cosf(ang), s = sinf(ang);
    const float y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    x1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
    x0 = y0;
}

__global__ void rms_norm_kernel(ops::RmsNormParams p) {
    pdl_begin();
    __shared__ float shared[32];
    const int64_t r = blockIdx.x;
    const float* x = p.x + r * p.n;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < p.n; i += blockDim.x) ss += x[i] * x[i];
    ss = block_sum(ss, shared);
    const float inv = inv_rms(ss, p.n, p.eps);
    float* y = p.y + r * p.n;
    if (p.rope_inv_freq != nullptr) {  // each thread owns a rotation pair (k, k + half)
        const int64_t half = p.n / 2;
        const float pf = static_cast<float>(p.rope_pos[r / p.rope_heads]);
        for (int64_t k = threadIdx.x; k < half; k += blockDim.x) {
            float x0 = __fmul_rn(x[k], inv), x1 = __fmul_rn(x[k + half], inv);
            if (p.w) {
                x0 = __fmul_rn(x0, p.w[k]);
                x1 = __fmul_rn(x1, p.w[k + half]);
            }
            rotate_pair(x0, x1, pf, p.rope_inv_freq[k]);
            y[k] = x0;
            y[k + half] = x1;
        }
        return;
    }
    const float* a = p.add_to ? p.add_to + r * p.n : nullptr;
    for (int64_t i = threadIdx.x; i < p.n; i += blockDim.x)
        y[i] = norm_value(p, x[i], inv, p.w != nullptr, p.w ? p.w[i] : 0.0f, a != nullptr, a ? a[i] : 0.0f);
}

// Rows of up to kRowVecs·4 values per thread (≤ 8192 with 1024 threads), held in
// registers: every load of the row (x, w, add_to) is issued before the reduction,
// so a decode step's one-row norm costs one memory latency instead of one per loop
// iteration (the loop kernel above took ~10 µs per single-row norm). The element
// arithmetic is the loop kernel's (norm_value). y may alias x or add_to: each
// thread writes only the values it read.
constexpr int kRowVecs = 2;

// The float4 value groups of a row that a thread of the row-in-registers kernels
// holds: threadIdx.x + k·blockDim.x for k < kRowVecs.
__device__ __forceinline__ int64_t row_slot(int k) {
    return threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
}
__device__ __forceinline__ float4 load4(const float* base, int64_t i) {
    return reinterpret_cast<const float4*>(base)[i];
}
// Whether row slot k holds values of a row of n4 float4 groups. kFull: the block was
// sized so that every slot does (n4 = kRowVecs · blockDim.x), and the check, with the
// branch around each guarded load and store, leaves the code.
template <bool kFull>
__device__ __forceinline__ bool in_row(int k, int64_t n4) {
    return kFull || row_slot(k) < n4;
}

__global__ void rms_norm_row_kernel(ops::RmsNormParams p) {
    pdl_begin();
    __shared__ float shared[32];
    const int64_t r = blockIdx.x, n4 = p.n / 4;
    const float4* x = reinterpret_cast<const float4*>(p.x + r * p.n);
    const float4* w = reinterpret_cast<const float4*>(p.w);
    const float4* a = p.add_to ? reinterpret_cast<const float4*>(p.add_to + r * p.n) : nullptr;
    float4 xv[kRowVecs], wv[kRowVecs], av[kRowVecs];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) {
        const int64_t i = row_slot(k);
        if (i < n4) {
            xv[k] = x[i];
            if (w) wv[k] = w[i];
            if (a) av[k] = a[i];
            ss += xv[k].x * xv[k].x;
            ss += xv[k].y * xv[k].y;
            ss += xv[k].z * xv[k].z;
            ss += xv[k].w * xv[k].w;
        }
    }
    ss = block_sum(ss, shared);
    const float inv = inv_rms(ss, p.n, p.eps);
    auto one = [&](float xi, float wi, float ai) { return norm_value(p, xi, inv, w != nullptr, wi, a != nullptr, ai); };
    float4* y = reinterpret_cast<float4*>(p.y + r * p.n);
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) {
        const int64_t i = row_slot(k);
        if (i < n4) {
            const float4 wk = w ? wv[k] : make_float4(0, 0, 0, 0), ak = a ? av[k] : make_float4(0, 0, 0, 0);
            y[i] = make_float4(one(xv[k].x, wk.x, ak.x), one(xv[k].y, wk.y, ak.y), one(xv[k].z, wk.z, ak.z),
                               one(xv[k].w, wk.w, ak.w));
        }
    }
}

// Two block-wide sums at once (one pair of barriers).
__device__ float2 block_sum2(float2 v, float2* shared) {
    for (int o = 16; o > 0; o >>= 1) {
        v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
        v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float2 total = make_float2(0.0f, 0.0f);
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) {
        total.x += shared[w].x;
        total.y += shared[w].y;
    }
    __syncthreads();
    return total;
}

__device__ __forceinline__ float sum_sq(float4 v) {
    return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
}

// Element-wise over float4 lanes.
template <class F>
__device__ __forceinline__ float4 map4(float4 a, float4 b, F f) {
    return make_float4(f(a.x, b.x), f(a.y, b.y), f(a.z, b.z), f(a.w, b.w));
}

// The norm weights residual_norms_kernel applies to a thread's row slots, by slot:
// w[0]; w[1] and sum_w (two branches, else none); out_w[j] (j < n_out, nullptr for
// a weightless output). Early, all are loaded into registers before pdl_begin():
// they are model weights, which no kernel writes (common.cuh), and the weight
// streaming of a decode step evicts them from L2, so loading each after the block
// reduction that precedes its use would add a DRAM round trip to a one-row kernel
// that is a chain of such latencies; loaded early they overlap the previous
// kernel's tail. Late (rows too wide to keep them all in registers), each is loaded
// where it is used.
enum NormWeightSlot { kW0, kW1, kSumW, kOutW };

template <bool kEarly, bool kFull>
struct NormWeights {
    static constexpr int kSlots = kOutW + ops::ResidualNormsParams::kMaxOut;
    const float* w[kSlots];
    float4 v[kEarly ? kSlots : 1][kRowVecs];

    __device__ NormWeights(const ops::ResidualNormsParams& p, int64_t n4) {
        const bool two = p.n_branch == 2;
        w[kW0] = p.w[0];
        w[kW1] = two ? p.w[1] : nullptr;
        w[kSumW] = two ? p.sum_w : nullptr;
#pragma unroll
        for (int j = 0; j < ops::ResidualNormsParams::kMaxOut; ++j) w[kOutW + j] = j < p.n_out ? p.out_w[j] : nullptr;
        if constexpr (kEarly) {
#pragma unroll
            for (int s = 0; s < kSlots; ++s) {
#pragma unroll
                for (int k = 0; k < kRowVecs; ++k)
                    if (w[s] != nullptr && in_row<kFull>(k, n4)) v[s][k] = load4(w[s], row_slot(k));
            }
        }
    }
    // Slot s's weights at row slot k, value group i = row_slot(k) < n4 (s and k
    // compile-time constants after unrolling, so v stays in registers).
    __device__ __forceinline__ float4 at(int s, int k, int64_t i) const {
        if constexpr (kEarly)
            return v[s][k];
        else
            return load4(w[s], i);
    }
};

// The MoE combine (ops/moe.h) of row r at a thread's row slots: for j < c.k, with
// e = r·c.k + j, b1 += c.weights[e] · (expert row c.slot_of[e] of c.y), in increasing
// j with moe_combine_kernel's float operations (so the sums are bit-identical). Per
// chunk of kChunk experts, all weights and slots are loaded first, then all y rows:
// two dependent memory latencies per chunk, where a loop over j, whose count is
// known only at run time, waits for both per expert.
template <int kChunk, bool kFull>
__device__ __forceinline__ void combine_rows(const ops::MoeCombineParams& c, int64_t r, int64_t n4,
                                             float4 (&b1)[kRowVecs]) {
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) b1[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int64_t j0 = 0; j0 < c.k; j0 += kChunk) {
        const int64_t m = c.k - j0;  // this chunk's experts: min(m, kChunk)
        float wj[kChunk];
        const float* yj[kChunk];
#pragma unroll
        for (int j = 0; j < kChunk; ++j) {
            if (j >= m) break;
            const int64_t sl = r * c.k + j0 + j;
            wj[j] = c.weights[sl];
            yj[j] = c.y + static_cast<int64_t>(c.slot_of[sl]) * c.y_stride;
        }
        float4 yv[kChunk][kRowVecs];
#pragma unroll
        for (int j = 0; j < kChunk; ++j) {
            if (j >= m) break;
#pragma unroll
            for (int k = 0; k < kRowVecs; ++k)
                if (in_row<kFull>(k, n4)) yv[j][k] = load4(yj[j], row_slot(k));
        }
#pragma unroll
        for (int j = 0; j < kChunk; ++j) {
            if (j >= m) break;
#pragma unroll
            for (int k = 0; k < kRowVecs; ++k) {
                if (!in_row<kFull>(k, n4)) continue;
                const float w = wj[j];
                const float4 y = yv[j][k], a = b1[k];
                b1[k] = make_float4(a.x + w * y.x, a.y + w * y.y, a.z + w * y.z, a.w + w * y.w);
            }
        }
    }
}

// Threads per block up to which residual_norms_kernel loads its norm weights early
// (NormWeights): rows of up to 4·kRowVecs·384 = 3072 values, which covers Gemma 4's
// E2B, E4B and 26B-A4B. The registers that takes (ptxas: 162 a thread, of the 168
// that 384 threads may have) would not fit a wider row's block on one SM.
constexpr int kEarlyMaxThreads = 384;
// And only for decode-sized batches: its blocks take most of an SM's registers, so
// at a prompt's thousands of rows the late kernel's three blocks per SM hide the
// latencies better.
constexpr int64_t kEarlyMaxRows = 64;
// Rows that fill every thread's kRowVecs slots (the 26B-A4B's 2,816 values on 352
// threads, the E4B's 2,560 on 320) take residual_norms_kernel<true, true>, without
// the per-slot checks: ncu (session 29) had the one-row kernel at 1,198 instructions
// a warp, about 11 cycles apart, many of them the checks and the branches around
// each guarded load. A compile definition for the A/B (0: every row checks).
#ifndef HF2Q_RESIDUAL_NORMS_FULL
#define HF2Q_RESIDUAL_NORMS_FULL 1
#endif

// Experts per chunk of combine_rows: Gemma 4's top 8 at once in the early kernel;
// 2 in the late one, whose 1024 threads have 64 registers each (chunks of 4 spill).
template <bool kEarly>
constexpr int kCombineChunk = kEarly ? 8 : 2;

// ops::ResidualNormsParams, one block per row held in registers as in
// rms_norm_row_kernel: branch norm(s), residual update, output norms, with three
// (two branches) or two block reductions and one pass over memory. Each element
// step is rounded on its own, in the order of the rms_norm sequence it replaces.
// Outputs with a prepared buffer are also quantized for the integer GEMV: 8
// consecutive threads hold a 32-value block (blockDim is a multiple of 32); outputs
// with BF16 rows (ops/prepared.h) are also written rounded to BF16, 4 values a
// store (what to_bf16 would write from y, without its launch). With
// c.k > 0 (p.combine), b1 is the experts' weighted combine (combine_rows). kEarly:
// the norm weights are loaded before the wait (NormWeights).
template <bool kEarly, bool kFull>
__global__ void __launch_bounds__(kEarly ? kEarlyMaxThreads : 1024)
    residual_norms_kernel(ops::ResidualNormsParams p, ops::MoeCombineParams c) {
    const int64_t r = blockIdx.x, n4 = p.n / 4;
    const NormWeights<kEarly, kFull> nw(p, n4);
    pdl_begin();
    __shared__ float2 shared[32];
    auto at = [&](const float* base, int64_t i) { return load4(base + r * p.n, i); };
    const bool two = p.n_branch == 2, combine = two && c.k > 0;
    float4 h[kRowVecs], x[kRowVecs], b1[kRowVecs];
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) {
        const int64_t i = row_slot(k);
        if (!in_row<kFull>(k, n4)) continue;
        h[k] = at(p.b[0], i);
        x[k] = at(p.x, i);
        if (two && !combine) b1[k] = at(p.b[1], i);
    }
    if (combine) combine_rows<kCombineChunk<kEarly>, kFull>(c, r, n4, b1);
    float2 ss = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) {
        if (!in_row<kFull>(k, n4)) continue;
        ss.x += sum_sq(h[k]);
        if (two) ss.y += sum_sq(b1[k]);
    }
    ss = block_sum2(ss, shared);
    const float inv0 = inv_rms(ss.x, p.n, p.eps), inv1 = inv_rms(ss.y, p.n, p.eps);
    const auto normed = [](float inv) { return [inv](float v, float w) { return __fmul_rn(__fmul_rn(v, inv), w); }; };
    float ssh = 0.0f;
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) {
        const int64_t i = row_slot(k);
        if (!in_row<kFull>(k, n4)) continue;
        h[k] = map4(h[k], nw.at(kW0, k, i), normed(inv0));
        if (two) {
            h[k] = map4(h[k], map4(b1[k], nw.at(kW1, k, i), normed(inv1)),
                        [](float a, float b) { return __fadd_rn(a, b); });
            ssh += sum_sq(h[k]);
        }
    }
    float invh = inv0;  // one branch: h is already normed
    if (two) invh = inv_rms(block_sum2(make_float2(ssh, 0.0f), shared).x, p.n, p.eps);
    float ssx = 0.0f;
    float4* xo = reinterpret_cast<float4*>(p.x + r * p.n);
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) {
        const int64_t i = row_slot(k);
        if (!in_row<kFull>(k, n4)) continue;
        const float4 hk = two ? map4(h[k], nw.at(kSumW, k, i), normed(invh)) : h[k];
        x[k] = map4(x[k], hk, [&](float a, float v) {
            const float s = __fadd_rn(a, v);
            return p.scale != 1.0f ? __fmul_rn(s, p.scale) : s;
        });
        xo[i] = x[k];
        ssx += sum_sq(x[k]);
    }
    if (p.n_out == 0) return;
    const float invx = inv_rms(block_sum2(make_float2(ssx, 0.0f), shared).x, p.n, p.eps);
#pragma unroll  // constant output slots keep NormWeights' registers
    for (int j = 0; j < ops::ResidualNormsParams::kMaxOut; ++j) {
        if (j >= p.n_out) break;
        float4* y = reinterpret_cast<float4*>(p.y[j] + r * p.n);
        const bool has_w = p.out_w[j] != nullptr;
        const float s = p.out_scale[j];
        const bool prep = p.y_prep[j] != nullptr;
        const Q8View yq = q8_view(p.y_prep[j], p.rows, p.n);
        uint2* const yb = p.y_bf16[j] != nullptr
                              ? reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(p.y_bf16[j]) + r * p.n)
                              : nullptr;
#pragma unroll
        for (int k = 0; k < kRowVecs; ++k) {
            const int64_t i = row_slot(k);
            const bool in = in_row<kFull>(k, n4);
            float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (in) {
                const float4 wk = has_w ? nw.at(kOutW + j, k, i) : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
                o = map4(x[k], wk, [&](float v, float wi) {
                    float a = __fmul_rn(v, invx);
                    if (has_w) a = __fmul_rn(a, wi);
                    return s != 1.0f ? __fmul_rn(a, s) : a;
                });
                y[i] = o;
                if (yb != nullptr) yb[i] = make_uint2(pack_bf16(o.x, o.y), pack_bf16(o.z, o.w));
            }
            if (prep) quantize_q8_values({o.x, o.y, o.z, o.w}, in, yq, r, p.n, i);  // whole warp
        }
    }
}

// ops::AttentionInputsParams: one block per head row (the q heads of every token,
// then on cache-owning layers the k heads and the v heads), head_dim / 4 threads.
// Thread j owns the rotation pairs (2j, 2j + 1) and their partners half + 2j, half +
// 2j + 1, loaded as float2s, so the row stays in registers; the element steps are
// rms_norm_kernel's. k̂ and v̂ go straight to their pool slots (k and v untouched),
// as KV (float, or half rounded to nearest even: ops/attention.h).
__device__ __forceinline__ void store2(float* p, float2 v) { *reinterpret_cast<float2*>(p) = v; }
__device__ __forceinline__ void store2(half* p, float2 v) { *reinterpret_cast<half2*>(p) = __floats2half2_rn(v.x, v.y); }
__device__ __forceinline__ void store2(kv_e4m3* p, float2 v) { *reinterpret_cast<uint16_t*>(p) = float2_to_e4m3x2(v); }
// Two i8 codes given 1 / d (i8_code).
__device__ __forceinline__ void store2_i8(kv_i8* p, float2 v, float id) {
    *reinterpret_cast<char2*>(p) = make_char2(static_cast<signed char>(i8_code(v.x, id)),
                                              static_cast<signed char>(i8_code(v.y, id)));
}

// The head-norm weights and the RoPE frequencies are model constants, which no
// kernel writes (common.cuh): they are loaded before the wait, so their latency
// overlaps the q/k/v product instead of following the block reduction.
template <class KV>
__global__ void attention_inputs_kernel(ops::AttentionInputsParams p) {
    __shared__ float shared[32];
    const int64_t D = p.head_dim, half = D / 2, nq = p.n_tokens * p.n_heads, nk = p.n_tokens * p.n_kv_heads;
    const int64_t b = blockIdx.x;
    const bool is_q = b < nq, is_k = !is_q && b < nq + nk, rope = is_q || is_k;
    const float* w = is_q ? p.q_w : is_k ? p.k_w : nullptr;
    const int64_t k0 = 2 * threadIdx.x;
    float wv[4] = {}, freq[2] = {};
    if (w != nullptr) {
        wv[0] = w[k0];
        wv[1] = w[k0 + 1];
        wv[2] = w[half + k0];
        wv[3] = w[half + k0 + 1];
    }
    if (rope) {
        freq[0] = p.rope_inv_freq[k0];
        freq[1] = p.rope_inv_freq[k0 + 1];
    }
    pdl_begin();
    const float* src;
    float* dst = nullptr;  // q rows (in place, or read from q_src)
    KV* pool_dst = nullptr;  // k̂ / v̂ rows
    float* scale_dst = nullptr;  // i8 pools: the row's scale
    int64_t t;
    if (is_q) {
        t = b / p.n_heads;
        src = p.q_src ? p.q_src + t * p.src_stride + (b % p.n_heads) * D : p.q + b * D;
        dst = p.q + b * D;
    } else {
        const int64_t row = is_k ? b - nq : b - nq - nk;  // token · n_kv_heads + head
        t = row / p.n_kv_heads;
        const int32_t pos = p.pos[t];
        const int64_t at = ops::kv_pool_index(p.tables[t][pos / p.block_size], pos % p.block_size, row % p.n_kv_heads,
                                              p.block_size, p.n_kv_heads * D, D);
        const float* kv_src = p.q_src ? (is_k || p.v_from_k ? p.k_src : p.v_src) : (is_k || p.v_from_k ? p.k : p.v);
        src = p.q_src ? kv_src + t * p.src_stride + (row % p.n_kv_heads) * D : kv_src + row * D;
        pool_dst = static_cast<KV*>(is_k ? p.k_pool : p.v_pool) + at;
        if constexpr (kv_scaled<KV>) scale_dst = (is_k ? p.k_scale : p.v_scale) + at / D;
    }
    float2 lo = *reinterpret_cast<const float2*>(src + k0), hi = *reinterpret_cast<const float2*>(src + half + k0);
    const float ss = block_sum(lo.x * lo.x + lo.y * lo.y + hi.x * hi.x + hi.y * hi.y, shared);
    const float inv = inv_rms(ss, D, p.eps);
    auto normed = [&](float v, int j) {
        const float y = __fmul_rn(v, inv);
        return w ? __fmul_rn(y, wv[j]) : y;
    };
    lo = make_float2(normed(lo.x, 0), normed(lo.y, 1));
    hi = make_float2(normed(hi.x, 2), normed(hi.y, 3));
    if (rope) {
        const float pf = static_cast<float>(p.pos[t]);
        rotate_pair(lo.x, hi.x, pf, freq[0]);
        rotate_pair(lo.y, hi.y, pf, freq[1]);
    }
    if (pool_dst != nullptr) {  // the whole block's row (a block-uniform branch)
        if constexpr (kv_scaled<KV>) {
            const float m4 = fmaxf(fmaxf(fabsf(lo.x), fabsf(lo.y)), fmaxf(fabsf(hi.x), fabsf(hi.y)));
            const float amax = block_max(m4, shared);
            const float2 d = i8_scale(amax);
            store2_i8(pool_dst + k0, lo, d.y);
            store2_i8(pool_dst + half + k0, hi, d.y);
            if (threadIdx.x == 0) *scale_dst = d.x;
        } else {
            store2(pool_dst + k0, lo);
            store2(pool_dst + half + k0, hi);
        }
    } else {
        store2(dst + k0, lo);
        store2(dst + half + k0, hi);
    }
}

__global__ void rope_kernel(ops::RopeParams p) {
    pdl_begin();
    const int64_t half = p.head_dim / 2;
    const int64_t n = p.n_tokens * p.n_heads * half;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t k = idx % half, th = idx / half, t = th / p.n_heads;
        float* v = p.x + th * p.head_dim;
        float x0 = v[k], x1 = v[k + half];
        rotate_pair(x0, x1, static_cast<float>(p.pos[t]), p.inv_freq[k]);
        v[k] = x0;
        v[k + half] = x1;
    }
}

// GEGLU that also writes the prepared form of its output (ops/prepared.h): 4
// values per thread, 8 threads per 32-value block; the values are geglu_kernel's.
__global__ void geglu_q8_kernel(ops::GegluParams p, int64_t gs, int64_t us, int64_t os) {
    pdl_begin();
    const int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x, per_row = p.n / 4;
    const bool in = g < p.rows * per_row;  // whole 8-thread groups are in or out
    const int64_t r = in ? g / per_row : 0, c = in ? g % per_row : 0;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (in) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int64_t i = 4 * c + k;
            float a = gelu_tanh(p.gate[r * gs + i]);
            if (p.up) a *= p.up[r * us + i];
            p.out[r * os + i] = a;
            v[k] = a;
        }
    }
    quantize_q8_values(v, in, q8_view(p.out_prep, p.rows, p.n), r, p.n, c);
}

// Rows along y, values along x (grid-stride both ways): no division per value.
// Given out_bf16, each value is also written rounded to BF16 (ops/prepared.h).
__global__ void geglu_kernel(ops::GegluParams p, int64_t gs, int64_t us, int64_t os) {
    pdl_begin();
    __nv_bfloat16* const ob = static_cast<__nv_bfloat16*>(p.out_bf16);
    for (int64_t r = blockIdx.y; r < p.rows; r += gridDim.y)
        for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.n;
             i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
            float g = gelu_tanh(p.gate[r * gs + i]);
            if (p.up) g *= p.up[r * us + i];
            p.out[r * os + i] = g;
            if (ob != nullptr) ob[r * p.n + i] = __float2bfloat16_rn(g);
        }
}

template <class F>
__global__ void map_kernel(int64_t n, F f) {
    pdl_begin();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        f(i);
}

template <class F>
void launch_map(int64_t n, cudaStream_t s, F f) {
    if (n <= 0) return;
    launch(map_kernel<F>, grid_1d(n, kThreads), kThreads, 0, s, n, f);
    HF2Q_CUDA_LAUNCH_CHECK();
}

}  // namespace

namespace {
// Threads of a row-in-registers kernel for rows of n4 float4 groups: kRowVecs groups
// each, whole warps.
int row_threads(int64_t n4) {
    const int64_t per_thread = (n4 + kRowVecs - 1) / kRowVecs;
    return static_cast<int>(std::max<int64_t>(32, (per_thread + 31) / 32 * 32));
}
}  // namespace

void launch_rms_norm(const ops::RmsNormParams& p, cudaStream_t s) {
    if (p.rows <= 0) return;
    const int64_t n4 = p.n / 4;
    if (p.rope_inv_freq == nullptr && p.n % 4 == 0 && n4 <= int64_t{kRowVecs} * 1024 && aligned16(p.x) &&
        aligned16(p.y) && aligned16(p.w) && aligned16(p.add_to)) {
        const int threads = row_threads(n4);
        launch(rms_norm_row_kernel, static_cast<unsigned>(p.rows), threads, 0, s, p);
        HF2Q_CUDA_LAUNCH_CHECK();
        return;
    }
    launch(rms_norm_kernel, static_cast<unsigned>(p.rows), kThreads, 0, s, p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

bool launch_residual_norms(const ops::ResidualNormsParams& p, cudaStream_t s) {
    const int64_t n4 = p.n / 4;
    for (int j = 0; j < p.n_out; ++j) HF2Q_ASSERT(p.y_prep[j] == nullptr || p.n % 32 == 0);
    bool ok = p.n % 4 == 0 && n4 <= int64_t{kRowVecs} * 1024 && aligned16(p.x) && aligned16(p.sum_w);
    for (int k = 0; k < p.n_branch; ++k) ok = ok && aligned16(p.b[k]) && aligned16(p.w[k]);
    for (int j = 0; j < p.n_out; ++j) ok = ok && aligned16(p.y[j]) && aligned16(p.out_w[j]);
    if (p.combine) ok = ok && aligned16(p.combine->y) && p.combine->y_stride % 4 == 0;
    if (!ok) return false;
    if (p.rows <= 0) return true;
    const int threads = row_threads(n4);
    const ops::MoeCombineParams c = p.combine ? *p.combine : ops::MoeCombineParams{};
    const bool early = threads <= kEarlyMaxThreads && p.rows <= kEarlyMaxRows;
    if (early && HF2Q_RESIDUAL_NORMS_FULL && n4 == int64_t{kRowVecs} * threads)
        launch(residual_norms_kernel<true, true>, static_cast<unsigned>(p.rows), threads, 0, s, p, c);
    else if (early)
        launch(residual_norms_kernel<true, false>, static_cast<unsigned>(p.rows), threads, 0, s, p, c);
    else
        launch(residual_norms_kernel<false, false>, static_cast<unsigned>(p.rows), threads, 0, s, p, c);
    HF2Q_CUDA_LAUNCH_CHECK();
    return true;
}

bool launch_attention_inputs(const ops::AttentionInputsParams& p, cudaStream_t s) {
    // Rows of a multiple of 128 values (whole warps of head_dim / 4 threads), 8-byte
    // aligned for the float2 loads.
    auto a8 = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 8 == 0; };
    const int64_t D = p.head_dim;
    if (D % 128 != 0 || D > 4096 || !a8(p.q) || (p.store && !(a8(p.k) && a8(p.v) && a8(p.k_pool) && a8(p.v_pool))))
        return false;
    if (p.q_src != nullptr &&
        (p.src_stride % 2 != 0 || !a8(p.q_src) || (p.store && !(a8(p.k_src) && (p.v_from_k || a8(p.v_src))))))
        return false;
    const int64_t rows = p.n_tokens * (p.n_heads + (p.store ? 2 * p.n_kv_heads : 0));
    if (rows <= 0) return true;
    HF2Q_ASSERT(rows <= 2147483647);
    dispatch_kv(p.kv_type, [&]<class KV>() {
        launch(attention_inputs_kernel<KV>, static_cast<unsigned>(rows), static_cast<unsigned>(D / 4), 0, s, p);
    });
    HF2Q_CUDA_LAUNCH_CHECK();
    return true;
}

void launch_rope(const ops::RopeParams& p, cudaStream_t s) {
    const int64_t n = p.n_tokens * p.n_heads * (p.head_dim / 2);
    if (n <= 0) return;
    launch(rope_kernel, grid_1d(n, kThreads), kThreads, 0, s, p);
    HF2Q_CUDA_LAUNCH_CHECK();
}

void launch_geglu(const ops::GegluParams& p, cudaStream_t s) {
    const int64_t n = p.rows * p.n;
    if (n <= 0) return;
    if (p.out_prep != nullptr) {
        HF2Q_ASSERT(p.n % 32 == 0);
        const int64_t os = p.out_stride ? p.out_stride : p.n;
        launch(geglu_q8_kernel, grid_1d(n / 4, kThreads), kThreads, 0, s, p, p.gate_stride ? p.gate_stride : p.n,
               p.up_stride ? p.up_stride : p.n, os);
        HF2Q_CUDA_LAUNCH_CHECK();
        if (p.out_bf16 != nullptr) to_bf16_rows(p.out, os, p.rows, p.n, p.out_bf16, s);  // both forms: not fused
        return;
    }
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>((p.n + kThreads - 1) / kThreads, 1024)),
                    static_cast<unsigned>(std::min<int64_t>(p.rows, 65535)));
    launch(geglu_kernel, grid, kThreads, 0, s, p, p.gate_stride ? p.gate_stride : p.n, p.up_stride ? p.up_stride : p.n,
           p.out_stride ? p.out_stride : p.n);
    HF2Q_CUDA_LAUNCH_CHECK();
}

void launch_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t s) {
    launch_map(n, s, [=] __device__(int64_t i) { y[i] = a[i] + b[i]; });
}
void launch_mul(const float* a, const float* b, float* y, int64_t n, cudaStream_t s) {
    launch_map(n, s, [=] __device__(int64_t i) { y[i] = a[i] * b[i]; });
}
void launch_scale(float* x, float v, int64_t n, cudaStream_t s) {
    launch_map(n, s, [=] __device__(int64_t i) { x[i] = x[i] * v; });
}
void launch_softcap(float* x, float cap, int64_t n, cudaStream_t s) {
    launch_map(n, s, [=] __device__(int64_t i) { x[i] = cap * tanhf(x[i] / cap); });
}

}  // namespace hf2q::cuda

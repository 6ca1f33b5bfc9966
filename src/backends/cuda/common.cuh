// Shared helpers of the CUDA backend: error checks, launch geometry.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "ops/attention.h"

#define HF2Q_CUDA_CHECK(expr)                                                                \
    do {                                                                                     \
        cudaError_t hf2q_err_ = (expr);                                                      \
        if (hf2q_err_ != cudaSuccess)                                                        \
            ::hf2q::fail("CUDA error: ", cudaGetErrorString(hf2q_err_), " (", #expr, " at ", \
                         __FILE__, ":", __LINE__, ")");                                      \
    } while (0)

// Checks the last launch (configuration errors surface here; execution errors at
// the next synchronising call).
#define HF2Q_CUDA_LAUNCH_CHECK() HF2Q_CUDA_CHECK(cudaGetLastError())

namespace hf2q::cuda {

// 16-byte alignment of an address or a byte count (vector loads).
inline bool aligned16(uint64_t v) {
    return v % 16 == 0;
}
inline bool aligned16(const void* p) {
    return aligned16(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)));
}

inline unsigned grid_1d(int64_t n, int threads) {
    int64_t g = (n + threads - 1) / threads;
    return static_cast<unsigned>(g < 1 ? 1 : (g > 2147483647 ? 2147483647 : g));
}

// Programmatic dependent launch (sm_90). Every kernel of this backend is launched
// through launch(), which allows it to be scheduled while the kernel before it on
// the stream is still running (in CUDA graphs too). A decode step is about a
// thousand small kernels, and the gap between two dependent launches is a large
// part of its time; with this the next kernel's blocks are already resident when
// its predecessor ends.
//
// The contract: every kernel begins with pdl_begin(), before any memory access. It
// waits until the previous kernel has completed and its writes are visible, then
// lets the next kernel launch. A kernel that skipped the wait could end before its
// predecessor, and the kernel after it (which waits only for its direct
// predecessor) would then read unfinished results. Outside such a launch both
// instructions do nothing.
//
// Why the wait comes first: a kernel that let its successor launch before waiting
// let it launch while its own predecessor still ran, and that successor's successor
// in turn, so kernels two or more steps ahead could sit in SM slots (registers,
// warps) that the running kernel and the concurrent experts' chain needed (the trace
// put the dense MLP's down products, launched during its gate/up products, on the
// critical path). With the wait first only the next kernel is resident early, which
// is all the launch gap needs. H200, 26B-A4B q4_k_m (synth), against launch-first
// (89c4279) in the same device call: tg128 +4.6 %, 8 × tg128 +5.2 %; against
// launch-first everywhere but the GEGLU (4c94767): 64 × tg32 at depth 1,024 +2.3 %,
// pp4096 (ubatch 512) unchanged (docs/performance.md, session 24).
//
// The one exception to "before any memory access": bytes no kernel writes, i.e.
// model weights, may be touched first, both hints (the integer GEMV's L2 prefetch of
// its weight rows) and reads (residual_norms_kernel's norm weights, elementwise.cu),
// which is what lets their latency overlap the predecessor. That is safe because
// weights are written only by the uploads of model loading, which synchronise before
// any forward pass, so no kernel still running can be writing them.
//
// Two more kinds of bytes may be read before the wait, for the same reason: (1) a
// batch's own inputs (positions, block tables), written only by the host's uploads,
// which precede the step's first kernel; (2) bytes written two or more kernels back
// on the stream: a kernel starts only once its predecessor has passed its own wait,
// i.e. once everything before that predecessor has finished. The decode attention
// reads both before its wait (attention_split.cu): its keys' block tables, and the
// earlier keys themselves, given the forward pass's promise that they come from
// earlier batches (ops::AttentionParams::earlier_keys_stored).
__device__ __forceinline__ void pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, s>>>(args...) as a programmatic dependent launch
// (HF2Q_CUDA_PDL, a CMake option, on by default; off, a plain launch), in thread-block
// clusters of `cluster` blocks along x where cluster > 1.
template <class... Params, class... Args>
void launch_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, unsigned cluster, cudaStream_t s,
                    Args&&... args) {
    cudaLaunchAttribute attr[2];
    unsigned n = 0;
#if HF2Q_CUDA_PDL
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
#endif
    if (cluster > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = cluster;
        attr[n].val.clusterDim.y = 1;
        attr[n++].val.clusterDim.z = 1;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = n;
    HF2Q_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
    launch_cluster(kernel, grid, block, smem, 1, s, std::forward<Args>(args)...);
}

// The lanes of the calling thread's warp below it, as a mask.
__device__ __forceinline__ unsigned lanemask_lt() {
    return (1u << (threadIdx.x % 32)) - 1u;
}

// 16 weight bytes (16-byte aligned) that a kernel reads once: read-only, and past L1
// so that the activations, which every warp re-reads, stay there (the GEMVs, the
// fused router of moe.cu).
__device__ __forceinline__ uint4 ld_weights16(const void* p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}

// Whether this block is the last of the gridDim.x blocks counting on `arrived` to count
// itself in (the same answer for every thread; all call it, after the block's stores
// that the last block reads: behind a block barrier, or made by thread 0). The
// cooperative-groups grid barrier's pattern: thread 0's fence and increment release the
// block's stores, its fence after them orders the other blocks' before the block's later
// loads (acquire). The last block resets the counter, ready for the next launch and
// graph replays.
__device__ __forceinline__ bool last_block_to_arrive(unsigned* arrived) {
    __shared__ bool last;
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(arrived, 1u) == gridDim.x - 1;
        if (last) {
            __threadfence();
            *arrived = 0;  // every block has counted: ready for the next launch
        }
    }
    __syncthreads();
    return last;
}

// Asks L2 to fetch the 16-byte pieces that lie wholly within bytes at p, without
// waiting and without a destination (sm_90: cp.async.bulk.prefetch, whose address and
// size are multiples of 16; nothing outside [p, p + bytes) is touched).
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const uint64_t a = reinterpret_cast<uint64_t>(p), b0 = (a + 15) & ~uint64_t{15}, b1 = (a + bytes) & ~uint64_t{15};
    if (b1 > b0)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(b0), "r"(static_cast<uint32_t>(b1 - b0))
                     : "memory");
#else
    (void)p;
    (void)bytes;
#endif
}

// KV cache elements (ops/attention.h KvType): float, half or FP8 E4M3 (kv_e4m3).
// Stores round to nearest even (the CPU reference's fp32_to_fp16 / fp32_to_e4m3;
// E4M3 saturates to ±448, __NV_SATFINITE); loads are exact.
using kv_e4m3 = __nv_fp8_e4m3;
// int8 codes of i8 pools (a scale per row beside them: ops/attention.h).
using kv_i8 = int8_t;
template <class KV>
inline constexpr bool kv_scaled = std::is_same_v<KV, kv_i8>;
// Calls f.template operator()<KV>() with the element type of a pool of type t.
template <class F>
void dispatch_kv(ops::KvType t, F&& f) {
    switch (t) {
        case ops::KvType::f16: f.template operator()<half>(); return;
        case ops::KvType::e4m3: f.template operator()<kv_e4m3>(); return;
        case ops::KvType::f32: f.template operator()<float>(); return;
        case ops::KvType::i8: f.template operator()<kv_i8>(); return;
    }
}
template <class KV>
__device__ __forceinline__ KV to_kv(float v) {
    if constexpr (sizeof(KV) == 2)
        return __float2half_rn(v);
    else if constexpr (sizeof(KV) == 1)
        return KV(v);  // __nv_fp8_e4m3(float): __NV_SATFINITE, round to nearest even
    else
        return v;
}
__device__ __forceinline__ float from_kv(float v) { return v; }
__device__ __forceinline__ float from_kv(half v) { return __half2float(v); }
__device__ __forceinline__ float from_kv(kv_e4m3 v) { return static_cast<float>(v); }
__device__ __forceinline__ float from_kv(kv_i8 v) { return static_cast<float>(v); }
// The i8 code of x given id = 1 / d (quant::quantize_row_i8: round to nearest even,
// clamped to ±127; NaN gives 0, as the conversion does).
__device__ __forceinline__ int i8_code(float x, float id) {
    return max(-127, min(127, __float2int_rn(__fmul_rn(x, id))));
}
// The row scale d of a row whose largest magnitude is amax, and 1 / d (0 for d = 0).
__device__ __forceinline__ float2 i8_scale(float amax) {
    const float d = __fdiv_rn(amax, 127.0f);
    return make_float2(d, d > 0.0f ? __frcp_rn(d) : 0.0f);
}
// Two E4M3 codes (the low byte first) as two exact halves.
__device__ __forceinline__ half2 e4m3x2_to_half2(uint16_t c) {
    const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(c), __NV_E4M3);
    return *reinterpret_cast<const half2*>(&r);
}
// Two values as E4M3 codes (the first in the low byte), rounded as to_kv.
__device__ __forceinline__ uint16_t float2_to_e4m3x2(float2 v) {
    return static_cast<uint16_t>(__nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, __NV_E4M3));
}
// Four consecutive values at a 16-byte (float), 8-byte (half) or 4-byte (E4M3)
// aligned address.
__device__ __forceinline__ float4 load_kv4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 load_kv4(const half* p) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    const float2 a = __half22float2(*reinterpret_cast<const half2*>(&u.x));
    const float2 b = __half22float2(*reinterpret_cast<const half2*>(&u.y));
    return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ float4 load_kv4(const kv_e4m3* p) {
    const uint32_t u = *reinterpret_cast<const uint32_t*>(p);
    const float2 a = __half22float2(e4m3x2_to_half2(static_cast<uint16_t>(u)));
    const float2 b = __half22float2(e4m3x2_to_half2(static_cast<uint16_t>(u >> 16)));
    return make_float4(a.x, a.y, b.x, b.y);
}

// i8 codes to floats without I2F (a quarter-rate instruction): byte i of w ^ 0x80
// (c + 128, unsigned) becomes the low byte of 2^23's mantissa, and 2^23 + 128 is
// subtracted again; exact.
__device__ __forceinline__ float i8_byte_to_float(uint32_t w, int i) {
    const uint32_t u = __byte_perm(w ^ 0x80808080u, 0x4B000000u, 0x7650u + static_cast<uint32_t>(i));
    return __uint_as_float(u) - 8388736.0f;
}
// Codes 2k and 2k + 1 of w as a half2 (bits), exactly: c + 128 as the low byte of
// 1024's mantissa (0x64xx), minus 1152.
__device__ __forceinline__ uint32_t i8x2_to_half2_bits(uint32_t w, int k) {
    const uint32_t u = __byte_perm(w ^ 0x80808080u, 0x64646464u, k == 0 ? 0x4140u : 0x4342u);
    const half2 h = __hsub2(*reinterpret_cast<const half2*>(&u), __float2half2_rn(1152.0f));
    return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ float4 load_kv4(const kv_i8* p) {
    const uint32_t w = *reinterpret_cast<const uint32_t*>(p);
    return make_float4(i8_byte_to_float(w, 0), i8_byte_to_float(w, 1), i8_byte_to_float(w, 2),
                       i8_byte_to_float(w, 3));
}

// Whether the warpgroup-MMA kernels run here: an sm_90a build (HF2Q_WGMMA) on a
// compute capability 9.x device (cuda_backend.cu).
bool use_wgmma();

// gelu_tanh(u) = 0.5·u·(1 + tanh(√(2/π)·(u + 0.044715·u³))) (ops/activation.h): the
// GEGLU kernels and the grouped GEMM's GEGLU epilogue share it, so fused and
// unfused expert products round alike.
__device__ __forceinline__ float gelu_tanh(float u) {
    const float k = 0.7978845608028654f;  // sqrt(2/pi)
    return 0.5f * u * (1.0f + tanhf(k * (u + 0.044715f * u * u * u)));
}

}  // namespace hf2q::cuda

// Shared helpers of the CUDA backend: error checks, launch geometry.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "core/error.h"

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
// The contract: every kernel begins with pdl_begin(), before any memory access.
// It lets the next kernel launch, then waits until the previous kernel has
// completed and its writes are visible. A kernel that skipped the wait could end
// before its predecessor, and the kernel after it (which waits only for its
// direct predecessor) would then read unfinished results. Outside such a launch
// both instructions do nothing. The one exception to "before any memory access":
// bytes no kernel writes, i.e. model weights, may be touched first, both hints (the
// integer GEMV's L2 prefetch of its weight rows) and reads (residual_norms_kernel's
// norm weights, elementwise.cu), which is what lets their latency overlap the
// predecessor. That is safe because weights are written only by the uploads of
// model loading, which synchronise before any forward pass, so no kernel still
// running can be writing them.
__device__ __forceinline__ void pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, s>>>(args...) as a programmatic dependent launch
// (HF2Q_CUDA_PDL, a CMake option, on by default; off, a plain launch).
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = attr;
#if HF2Q_CUDA_PDL
    cfg.numAttrs = 1;
#else
    cfg.numAttrs = 0;
#endif
    HF2Q_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
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

// KV cache elements (ops/attention.h KvType): float or half. Stores round to
// nearest even (the CPU reference's fp32_to_fp16); loads are exact.
template <class KV>
__device__ __forceinline__ KV to_kv(float v) {
    if constexpr (sizeof(KV) == 2)
        return __float2half_rn(v);
    else
        return v;
}
__device__ __forceinline__ float from_kv(float v) { return v; }
__device__ __forceinline__ float from_kv(half v) { return __half2float(v); }
// Four consecutive values at a 16-byte (float) or 8-byte (half) aligned address.
__device__ __forceinline__ float4 load_kv4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 load_kv4(const half* p) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    const float2 a = __half22float2(*reinterpret_cast<const half2*>(&u.x));
    const float2 b = __half22float2(*reinterpret_cast<const half2*>(&u.y));
    return make_float4(a.x, a.y, b.x, b.y);
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

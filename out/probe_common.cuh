// What the device probes in out/ share (sessions 47-48; not part of the build): asynchronous
// 16-byte copies into shared memory past L1, their groups, and the device's copy rate.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

__device__ __forceinline__ void cp16(void* dst, const void* src) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n"); }
template <int N>
__device__ __forceinline__ void wait_group() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// cudaMemcpy's rate (read + write, TB/s) over 20 copies of `bytes` from src into a scratch buffer.
inline double copy_rate(const void* src, size_t bytes) {
    void* dst = nullptr;
    if (cudaMalloc(&dst, bytes) != cudaSuccess) return 0.0;
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(a);
    for (int i = 0; i < 20; ++i) cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, a, b);
    cudaFree(dst);
    return 2.0 * static_cast<double>(bytes) * 20 / ms / 1e9;
}

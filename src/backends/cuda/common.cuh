// Shared helpers of the CUDA backend: error checks, launch geometry.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

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

}  // namespace hf2q::cuda

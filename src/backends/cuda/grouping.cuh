// Device helpers of the launches grouped by expert (gemv.cu, gemv_q8.cu).
#pragma once

#include <cstdint>

namespace hf2q::cuda {

// Index of the y-th expert whose row range offsets[e] .. offsets[e + 1] is not
// empty, or −1. Called by a whole warp (a ballot scan of the offsets), so no
// routing information has to go through the host. kUnroll · 32 experts' offsets are
// loaded at once (4: one memory latency for 128 experts instead of four in a row; a
// block cannot start its weight loads before it knows its expert), at the price of
// registers (the one-row GEMV with segment selection, compiled for 40 registers,
// keeps 1). The y-th set bit is found with __fns.
template <int kUnroll = 1>
__device__ __forceinline__ int active_expert(const int32_t* offsets, int64_t n_experts, int y) {
    const int lane = threadIdx.x % 32;
    int seen = 0;
    for (int64_t e0 = 0; e0 < n_experts; e0 += 32 * kUnroll) {
        bool has[kUnroll];
#pragma unroll
        for (int i = 0; i < kUnroll; ++i) {
            const int64_t e = e0 + 32 * i + lane;
            has[i] = e < n_experts && offsets[e + 1] > offsets[e];
        }
#pragma unroll
        for (int i = 0; i < kUnroll; ++i) {
            const unsigned mask = __ballot_sync(0xffffffffu, has[i]);
            const int n = __popc(mask);
            if (y < seen + n)
                return static_cast<int>(e0) + 32 * i + static_cast<int>(__fns(mask, 0, y - seen + 1));
            seen += n;
        }
    }
    return -1;
}

// ex[k]: the expert of grouped row rows[k], the number of experts whose rows end at or
// before it (the offsets rise from 0). Called by a whole warp; like active_expert<4>
// it loads four chunks of 32 experts' ends at once, one latency for 128 experts
// (gemv_q8.cu's routed-row kernel).
template <int KE>
__device__ __forceinline__ void routed_experts(const int32_t* offsets, int64_t n_experts, const int (&rows)[KE],
                                               int (&ex)[KE]) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int k = 0; k < KE; ++k) ex[k] = 0;
    for (int64_t e0 = 0; e0 < n_experts; e0 += 128) {
        int end[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int64_t e = e0 + 32 * i + lane;
            end[i] = e < n_experts ? offsets[e + 1] : 0x7fffffff;
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int k = 0; k < KE; ++k) ex[k] += __popc(__ballot_sync(0xffffffffu, end[i] <= rows[k]));
    }
}

}  // namespace hf2q::cuda

// Device helpers of the launches grouped by expert (gemv.cu, gemv_q8.cu).
#pragma once

#include <cstdint>

namespace hf2q::cuda {

// Index of the y-th expert whose row range offsets[e] .. offsets[e + 1] is not
// empty, or −1. Called by a whole warp (a ballot scan of the offsets), so no
// routing information has to go through the host.
__device__ __forceinline__ int active_expert(const int32_t* offsets, int64_t n_experts, int y) {
    const int lane = threadIdx.x % 32;
    int seen = 0;
    for (int64_t e0 = 0; e0 < n_experts; e0 += 32) {
        const int64_t e = e0 + lane;
        const bool has = e < n_experts && offsets[e + 1] > offsets[e];
        const unsigned mask = __ballot_sync(0xffffffffu, has);
        const int n = __popc(mask);
        if (y < seen + n) {
            unsigned m = mask;
            for (int skip = y - seen; skip > 0; --skip) m &= m - 1;  // drop lowest set bits
            return static_cast<int>(e0) + __ffs(m) - 1;
        }
        seen += n;
    }
    return -1;
}

}  // namespace hf2q::cuda

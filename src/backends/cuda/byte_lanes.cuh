// Per-byte integer helpers of the integer GEMVs (gemv_q8.cu, gemv_mma.cu): the
// block formats' quants arrive packed four to a word and are turned into signed
// bytes in place, a few integer operations per word.
#pragma once

#include <cstdint>

namespace hf2q::cuda {

// Bit 4 of byte k of the result is bit k of the low 4 bits of v (the fifth bit of
// four Q5_0 quants): one multiply places copies of the 4 bits 7 apart (bit k lands
// on bit 8k, the other copies elsewhere, no carries), the mask keeps bits 8k.
__device__ __forceinline__ uint32_t bit4_of_bytes(uint32_t v) {
    return (((v & 15u) * 0x00204081u) & 0x01010101u) << 4;
}

// Bit 4 of byte k of the result is bit 4 + k of v (the fifth bits of the upper four
// quants of a Q5_0 lane): the same multiply on the high nibble in place, whose copies
// land on bit 8k + 4 directly, one shift fewer than bit4_of_bytes(v >> 4).
__device__ __forceinline__ uint32_t bit4_of_bytes_hi(uint32_t v) {
    return ((v & 0xF0u) * 0x00204081u) & 0x10101010u;
}

// Per byte q − k as signed bytes, for bytes of q and k below 128 (the offset-binary
// quants: Q4_0 − 8, Q5_0 − 16, Q6_K − 32): with bit 7 set in every byte of q the
// subtraction cannot borrow across bytes, and flipping bit 7 back gives q − k mod
// 256. Three integer operations; __vsubss4 (saturating, which these never need) has
// no sm_90 instruction and compiles to about fifteen.
__device__ __forceinline__ uint32_t sub_small_bytes(uint32_t q, uint32_t k) {
    return ((q | 0x80808080u) - k) ^ 0x80808080u;
}

}  // namespace hf2q::cuda

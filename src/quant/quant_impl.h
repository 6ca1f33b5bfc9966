// Private to src/quant (and read by the CPU backend's row decoders, backends/cpu/block_dot.h,
// for the block layouts): block structs, rounding helpers shared by the quantizers, and the
// per-type row entry points the dispatcher in quant.cpp calls.
//
// Block structs hold only byte arrays (alignment 1), so a row may start at any address;
// multi-byte fields are little-endian and read with load_u16/store_u16. Sizes are the
// file format's and asserted below.
//
// Bit-exactness: every formula here is evaluated in plain binary32, left to right, in the
// order ggml's reference writes it (see docs/formats.md). Do not "simplify" a division into a
// multiplication by a reciprocal or reorder a sum.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "quant/quant.h"

namespace hf2q::quant::detail {

constexpr int kQK = 32;     // block size of the legacy formats, IQ4_NL and MXFP4
constexpr int kQK_K = 256;  // super-block size of the k-quants and IQ4_XS
constexpr float kGroupMaxEps = 1e-15f;

inline uint16_t load_u16(const uint8_t* p) {
    return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
inline void store_u16(uint8_t* p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v & 0xFF);
    p[1] = static_cast<uint8_t>(v >> 8);
}
// FP16 -> FP32, exact; inline and branch-free so row decoders can vectorise it.
inline float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t em = h & 0x7FFFu;
    // Normal, inf and NaN: rebias the exponent 15 -> 127 (twice for exponent 31 -> 255).
    uint32_t norm = (em << 13) + 0x38000000u;
    norm += em >= 0x7C00u ? 0x38000000u : 0u;
    const float sub = static_cast<float>(em) * 0x1p-24f;  // zero/subnormal: exact
    uint32_t sub_bits;
    std::memcpy(&sub_bits, &sub, sizeof(sub_bits));
    const uint32_t r = (em < 0x400u ? sub_bits : norm) | sign;
    float f;
    std::memcpy(&f, &r, sizeof(f));
    return f;
}
inline float load_f16(const uint8_t* p) {
    return half_to_float(load_u16(p));
}
inline void store_f16(uint8_t* p, float v) {
    store_u16(p, fp32_to_fp16(v));
}
// The little-endian fifth bits of a Q5_0 / Q5_1 block (bit j for value j).
inline uint32_t load_qh(const uint8_t* qh) {
    return static_cast<uint32_t>(qh[0]) | (static_cast<uint32_t>(qh[1]) << 8) |
           (static_cast<uint32_t>(qh[2]) << 16) | (static_cast<uint32_t>(qh[3]) << 24);
}
// Scale and min of sub-block j (0-7) of a Q4_K / Q5_K block from its packed scales[12]
// (the packing is described in kquants_q4_q6.cpp).
inline void get_scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// ---- block layouts (ggml-common.h) -------------------------------------------------------
struct BlockQ4_0 {
    uint8_t d[2];
    uint8_t qs[kQK / 2];
};
struct BlockQ4_1 {
    uint8_t d[2];
    uint8_t m[2];
    uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {
    uint8_t d[2];
    uint8_t qh[4];
    uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {
    uint8_t d[2];
    uint8_t m[2];
    uint8_t qh[4];
    uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {
    uint8_t d[2];
    int8_t qs[kQK];
};
struct BlockQ2_K {
    uint8_t scales[16];
    uint8_t qs[64];
    uint8_t d[2];
    uint8_t dmin[2];
};
struct BlockQ3_K {
    uint8_t hmask[32];
    uint8_t qs[64];
    uint8_t scales[12];
    uint8_t d[2];
};
struct BlockQ4_K {
    uint8_t d[2];
    uint8_t dmin[2];
    uint8_t scales[12];
    uint8_t qs[128];
};
struct BlockQ5_K {
    uint8_t d[2];
    uint8_t dmin[2];
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
};
struct BlockQ6_K {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint8_t d[2];
};
struct BlockIQ4_NL {
    uint8_t d[2];
    uint8_t qs[kQK / 2];
};
struct BlockIQ4_XS {
    uint8_t d[2];
    uint8_t scales_h[2];
    uint8_t scales_l[4];
    uint8_t qs[128];
};
struct BlockMXFP4 {
    uint8_t e;
    uint8_t qs[kQK / 2];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockMXFP4) == 17);

// Non-linear 4-bit codebook shared by IQ4_NL and IQ4_XS.
inline constexpr int8_t kValuesIQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
// E2M1 values doubled (MXFP4); the E8M0 scale is halved to compensate.
inline constexpr int8_t kValuesMXFP4[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// ---- rounding helpers --------------------------------------------------------------------
// Round half to even via the 1.5·2^23 trick; replicated bit for bit (also outside the
// |f| <= 4194303 range where ggml's result is garbage) so pathological inputs still match.
inline int nearest_int(float f) {
    float v = f + 12582912.0f;
    int32_t i;
    std::memcpy(&i, &v, sizeof(i));
    return (i & 0x007FFFFF) - 0x00400000;
}

// C's float -> integer conversion as x86-64 performs it (cvttss2si, also used for 8-bit
// targets): truncation toward zero, and INT32_MIN for NaN or out-of-range values, where C++
// leaves the conversion undefined. Lets non-finite input produce ggml's bytes without UB.
inline int32_t trunc_to_i32(float v) {
    if (v >= -2147483648.0f && v < 2147483648.0f) return static_cast<int32_t>(v);
    return INT32_MIN;
}

// ggml's importance weights of n values, qw · √(σ² + x²) each, into w; returns their
// sum (the K-quants' per-sub-block weight of the scale search).
inline float importance_weights(const float* x, const float* qw, int n, float sigma2, float* w) {
    for (int l = 0; l < n; ++l) w[l] = qw[l] * std::sqrt(sigma2 + x[l] * x[l]);
    float sum = 0.0f;
    for (int l = 0; l < n; ++l) sum += w[l];
    return sum;
}

// ggml's MAX(a, b) macro: unlike std::fmax it propagates a NaN in b.
inline float max_f(float a, float b) {
    return a > b ? a : b;
}

template <class T>
inline T clamp_int(T v, T lo, T hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

// Scale of 2^(e-128) encoded by an E8M0 byte (MXFP4 stores doubled E2M1 values).
inline float e8m0_to_fp32_half(uint8_t e) {
    uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

// ---- scale search routines (ggml-quants.c helpers; spec §7) ------------------------------
// L receives n codes; see docs/formats.md for the value ranges of each routine.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L, int rmse_type, const float* qw);
float make_q3_quants(int n, int nmax, const float* x, int8_t* L, bool do_rmse);
float make_qkx2_quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad);
float make_qkx3_quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad);
float make_qp_quants(int n, int nmax, const float* x, uint8_t* L, const float* w);

// ---- per-type row entry points -----------------------------------------------------------
// quantize_row_*: one row of n elements (n a multiple of the block size, already checked);
// qw is the row's importance weights (n values) or nullptr. dequantize_row_*: the inverse.
#define HF2Q_QUANT_ROW_FNS(name)                                                     \
    void quantize_row_##name(const float* x, void* dst, int64_t n, const float* qw); \
    void dequantize_row_##name(const void* src, float* dst, int64_t n);

HF2Q_QUANT_ROW_FNS(f32)
HF2Q_QUANT_ROW_FNS(f16)
HF2Q_QUANT_ROW_FNS(bf16)
HF2Q_QUANT_ROW_FNS(q4_0)
HF2Q_QUANT_ROW_FNS(q4_1)
HF2Q_QUANT_ROW_FNS(q5_0)
HF2Q_QUANT_ROW_FNS(q5_1)
HF2Q_QUANT_ROW_FNS(q8_0)
HF2Q_QUANT_ROW_FNS(q2_k)
HF2Q_QUANT_ROW_FNS(q3_k)
HF2Q_QUANT_ROW_FNS(q4_k)
HF2Q_QUANT_ROW_FNS(q5_k)
HF2Q_QUANT_ROW_FNS(q6_k)
HF2Q_QUANT_ROW_FNS(iq4_nl)
HF2Q_QUANT_ROW_FNS(iq4_xs)
HF2Q_QUANT_ROW_FNS(mxfp4)

#undef HF2Q_QUANT_ROW_FNS

// Q8_1 (activation-side helper, not a storage type here): 36-byte blocks {d, s, qs[32]}.
void quantize_row_q8_1(const float* x, void* dst, int64_t n);

}  // namespace hf2q::quant::detail

// Element-wise decoding of ggml block formats on the device: dq(type, row, i) is the
// i-th value of a stored row, bit-exact with the CPU dequantizer (the products are
// written with __fmul_rn/__fsub_rn so the compiler cannot contract them into FMAs,
// which would change the last bit).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/ggml_type.h"

namespace hf2q::cuda {

__device__ __forceinline__ float f16(const uint8_t* p) {
    uint16_t h = static_cast<uint16_t>(p[0] | (p[1] << 8));
    return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ float bf16(const uint8_t* p) {
    uint32_t u = static_cast<uint32_t>(p[0] | (p[1] << 8)) << 16;
    return __uint_as_float(u);
}

static __device__ __constant__ const int8_t kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                          1,    13,   25,  38,  53,  69,  89,  113};
static __device__ __constant__ const int8_t kMxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Nibble j (0..31) of a 32-element block with 16 packed bytes (low nibbles first).
__device__ __forceinline__ int nib32(const uint8_t* qs, int j) {
    return j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
}

// 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block.
__device__ __forceinline__ void kscale(const uint8_t* s, int j, int& sc, int& m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

__device__ __forceinline__ float mxfp4_scale(uint8_t e) {
    uint32_t bits = e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : (e == 1 ? 0x00400000u : 0x00200000u);
    return __uint_as_float(bits);
}

template <GgmlType T>
__device__ __forceinline__ float dq(const uint8_t* row, int64_t i);

template <>
__device__ __forceinline__ float dq<GgmlType::F32>(const uint8_t* row, int64_t i) {
    return reinterpret_cast<const float*>(row)[i];
}
template <>
__device__ __forceinline__ float dq<GgmlType::F16>(const uint8_t* row, int64_t i) {
    return f16(row + 2 * i);
}
template <>
__device__ __forceinline__ float dq<GgmlType::BF16>(const uint8_t* row, int64_t i) {
    return bf16(row + 2 * i);
}
template <>
__device__ __forceinline__ float dq<GgmlType::Q4_0>(const uint8_t* row, int64_t i) {
    const uint8_t* b = row + (i / 32) * 18;
    return __fmul_rn(static_cast<float>(nib32(b + 2, static_cast<int>(i % 32)) - 8), f16(b));
}
template <>
__device__ __forceinline__ float dq<GgmlType::Q4_1>(const uint8_t* row, int64_t i) {
    const uint8_t* b = row + (i / 32) * 20;
    return __fadd_rn(__fmul_rn(static_cast<float>(nib32(b + 4, static_cast<int>(i % 32))), f16(b)), f16(b + 2));
}
template <>
__device__ __forceinline__ float dq<GgmlType::Q5_0>(const uint8_t* row, int64_t i) {
    const uint8_t* b = row + (i / 32) * 22;
    const int j = static_cast<int>(i % 32);
    uint32_t qh = b[2] | (b[3] << 8) | (b[4] << 16) | (static_cast<uint32_t>(b[5]) << 24);
    int q = nib32(b + 6, j) | (((qh >> j) & 1) << 4);
    return __fmul_rn(static_cast<float>(q - 16), f16(b));
}
template <>
__device__ __forceinline__ float dq<GgmlType::Q5_1>(const uint8_t* row, int64_t i) {
    const uint8_t* b = row + (i / 32) * 24;
    const int j = static_cast<int>(i % 32);
    uint32_t qh = b[4] | (b[5] << 8) | (b[6] << 16) | (static_cast<uint32_t>(b[7]) << 24);
    int q = nib32(b + 8, j) | (((qh >> j) & 1) << 4);
    return __fadd_rn(__fmul_rn(static_cast<float>(q), f16(b)), f16(b + 2));
}
template <>
__device__ __forceinline__ float dq<GgmlType::Q8_0>(const uint8_t* row, int64_t i) {
    const uint8_t* b = row + (i / 32) * 34;
    return __fmul_rn(static_cast<float>(static_cast<int8_t>(b[2 + i % 32])), f16(b));
}
template <>
__device__ __forceinline__ float dq<GgmlType::Q2_K>(const uint8_t* row, int64_t i) {
    const uint8_t* b = row + (i / 256) * 84;
    const int e = static_cast<int>(i % 256), h = e / 128, g = (e % 128) / 32, t = e % 32;
    const int q = (b[16 + 32 * h + t] >> (2 * g)) & 3;
    const uint8_t sc = b[e / 16];
    const float dl = __fmul_rn(f16(b + 80), static_cast<float>(sc & 15));
    const float ml = __fmul_rn(f16(b + 82), static_cast<float>(sc >> 4));
    return __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
}
template <>
__device__ __forceinline__ float dq<GgmlType::Q3_K>(const uint8_t* row, int64_t i) {
    const uint8_t* b = row + (i / 256) * 110;
    const int e = static_cast<int>(i % 256), h = e / 128, g = (e % 128) / 32, t = e % 32, s = e / 16;
    const int low2 = (b[32 + 32 * h + t] >> (2 * g)) & 3;
    const int hb = (b[e % 32] >> (e / 32)) & 1;
    const uint8_t* sc = b + 96;
    const int lo = s < 8 ? (sc[s] & 15) : (sc[s - 8] >> 4);
    const int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    const float dl = __fmul_rn(f16(b + 108), static_cast<float>((lo | (hi << 4)) - 32));
    return __fmul_rn(dl, static_cast<float>(low2 - (hb ? 0 : 4)));
}
template <>
__device__ __forceinline__ float dq<GgmlType::Q4_K>(const uint8_t* row, int64_t i) {
    const uint8_t* b = row + (i / 256) * 144;
    const int e = static_cast<int>(i % 256), c = e / 64, l = e % 32;
    int sc, m;
    kscale(b + 4, e / 32, sc, m);
    const uint8_t byte = b[16 + 32 * c + l];
    const int q = (e % 64) >= 32 ? (byte >> 4) : (byte & 15);
    const float d1 = __fmul_rn(f16(b), static_cast<float>(sc));
    const float m1 = __fmul_rn(f16(b + 2), static_cast<float>(m));
    return __fsub_rn(__fmul_rn(d1, static_cast<float>(q)), m1);
}
template <>
__device__ __forceinline__ float dq<GgmlType::Q5_K>(const uint8_t* row, int64_t i) {
    const uint8_t* b = row + (i / 256) * 176;
    const int e = static_cast<int>(i % 256), c = e / 64, l = e % 32;
    int sc, m;
    kscale(b + 4, e / 32, sc, m);
    const uint8_t byte = b[48 + 32 * c + l];
    const int low = (e % 64) >= 32 ? (byte >> 4) : (byte & 15);
    const int q = low + 16 * ((b[16 + e % 32] >> (e / 32)) & 1);
    const float d1 = __fmul_rn(f16(b), static_cast<float>(sc));
    const float m1 = __fmul_rn(f16(b + 2), static_cast<float>(m));
    return __fsub_rn(__fmul_rn(d1, static_cast<float>(q)), m1);
}
template <>
__device__ __forceinline__ float dq<GgmlType::Q6_K>(const uint8_t* row, int64_t i) {
    const uint8_t* b = row + (i / 256) * 210;
    const int e = static_cast<int>(i % 256), h = e / 128, r = e % 128, g = r / 32, l = r % 32;
    const uint8_t qlb = b[64 * h + l + 32 * (g & 1)];
    const int low = g < 2 ? (qlb & 15) : (qlb >> 4);
    const int high = (b[128 + 32 * h + l] >> (2 * g)) & 3;
    const float d = __fmul_rn(f16(b + 208), static_cast<float>(static_cast<int8_t>(b[192 + e / 16])));
    return __fmul_rn(d, static_cast<float>((low | (high << 4)) - 32));
}
template <>
__device__ __forceinline__ float dq<GgmlType::IQ4_NL>(const uint8_t* row, int64_t i) {
    const uint8_t* b = row + (i / 32) * 18;
    return __fmul_rn(f16(b), static_cast<float>(kIq4nl[nib32(b + 2, static_cast<int>(i % 32))]));
}
template <>
__device__ __forceinline__ float dq<GgmlType::IQ4_XS>(const uint8_t* row, int64_t i) {
    const uint8_t* b = row + (i / 256) * 136;
    const int e = static_cast<int>(i % 256), ib = e / 32, j = e % 32;
    const int scales_h = b[2] | (b[3] << 8);
    const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((scales_h >> (2 * ib)) & 3) << 4);
    const float dl = __fmul_rn(f16(b), static_cast<float>(ls - 32));
    return __fmul_rn(dl, static_cast<float>(kIq4nl[nib32(b + 8 + 16 * ib, j)]));
}
template <>
__device__ __forceinline__ float dq<GgmlType::MXFP4>(const uint8_t* row, int64_t i) {
    const uint8_t* b = row + (i / 32) * 17;
    return __fmul_rn(static_cast<float>(kMxfp4[nib32(b + 1, static_cast<int>(i % 32))]), mxfp4_scale(b[0]));
}

// Eight consecutive values i0 .. i0+7 of a row (i0 % 8 == 0, all inside the row),
// for the GEMV and the weight expansion. Equal to dq<T> up to the rounding of one
// fused multiply-add (v = a·q + b in one rounding instead of two): the matmul
// paths do not promise bit-exact weights, get_rows does (it uses dq).
//
// Speed matters more than anywhere else here: decode reads every weight through
// these functions. Quants are loaded as whole words (a byte load per value keeps
// the load/store unit, not memory, the limit), scales once per call, and small
// integers become floats with the exponent trick instead of I2F conversions
// (quarter rate): __int_as_float(0x4B400000 + q) − 1.5·2^23 == q for |q| < 2^22.
__device__ __forceinline__ float small_int(int32_t q) {
    return __int_as_float(0x4B400000 + q) - 12582912.0f;
}

// The 8 bytes at p (any alignment), little-endian, with the widest loads the
// address allows (rows of odd-sized blocks are only 2-byte aligned).
__device__ __forceinline__ uint2 load8(const uint8_t* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if ((a & 7) == 0) return *reinterpret_cast<const uint2*>(p);
    if ((a & 1) == 0) {
        const uint32_t* w = reinterpret_cast<const uint32_t*>(a & ~uintptr_t{3});
        if ((a & 3) == 0) return make_uint2(w[0], w[1]);
        const uint32_t w0 = w[0], w1 = w[1], w2 = w[2];
        return make_uint2(__funnelshift_r(w0, w1, 16), __funnelshift_r(w1, w2, 16));
    }
    uint2 r = make_uint2(0, 0);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        r.x |= static_cast<uint32_t>(p[k]) << (8 * k);
        r.y |= static_cast<uint32_t>(p[4 + k]) << (8 * k);
    }
    return r;
}

// The 8 (16) bytes at a 2-byte aligned p (rows of 18-, 22-, 34- and 210-byte blocks),
// without branches: 4-byte words from p rounded down, shifted into place by a
// funnel shift (no divergence when the lanes of a warp sit at different
// alignments, which load8's branches would serialise). The word after the last one
// is read only when p is not 4-byte aligned, so nothing past the bytes' own last
// word is touched.
__device__ __forceinline__ uint2 load8_a2(const uint8_t* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uint32_t* w = reinterpret_cast<const uint32_t*>(a & ~uintptr_t{3});
    const uint32_t sh = static_cast<uint32_t>(a & 3) * 8;  // 0 or 16
    const uint32_t w0 = w[0], w1 = w[1], w2 = sh != 0 ? w[2] : 0u;
    return make_uint2(__funnelshift_rc(w0, w1, sh), __funnelshift_rc(w1, w2, sh));
}
__device__ __forceinline__ uint4 load16_a2(const uint8_t* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uint32_t* w = reinterpret_cast<const uint32_t*>(a & ~uintptr_t{3});
    const uint32_t sh = static_cast<uint32_t>(a & 3) * 8;
    const uint32_t w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = sh != 0 ? w[4] : 0u;
    return make_uint4(__funnelshift_rc(w0, w1, sh), __funnelshift_rc(w1, w2, sh), __funnelshift_rc(w2, w3, sh),
                      __funnelshift_rc(w3, w4, sh));
}

__device__ __forceinline__ uint32_t byte_of(uint2 u, int k) { return ((k < 4 ? u.x : u.y) >> (8 * (k & 3))) & 0xffu; }

__device__ __forceinline__ float half_bits(uint32_t h) { return __half2float(__ushort_as_half(static_cast<uint16_t>(h))); }

template <GgmlType T>
__device__ __forceinline__ void dq8(const uint8_t* row, int64_t i0, float (&v)[8]) {
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = dq<T>(row, i0 + k);
}

template <>
__device__ __forceinline__ void dq8<GgmlType::F32>(const uint8_t* row, int64_t i0, float (&v)[8]) {
    const float* r = reinterpret_cast<const float*>(row) + i0;
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = r[k];
}

template <>
__device__ __forceinline__ void dq8<GgmlType::F16>(const uint8_t* row, int64_t i0, float (&v)[8]) {
    const uint2 a = load8(row + 2 * i0), b = load8(row + 2 * i0 + 8);
    const uint32_t w[4] = {a.x, a.y, b.x, b.y};
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = half_bits(w[k / 2] >> (16 * (k & 1)));
}

template <>
__device__ __forceinline__ void dq8<GgmlType::BF16>(const uint8_t* row, int64_t i0, float (&v)[8]) {
    const uint2 a = load8(row + 2 * i0), b = load8(row + 2 * i0 + 8);
    const uint32_t w[4] = {a.x, a.y, b.x, b.y};
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = __uint_as_float((k & 1) ? (w[k / 2] & 0xffff0000u) : (w[k / 2] << 16));
}

// Scale and min of sub-block j from the 16-byte Q4_K/Q5_K header (d, dmin, scales).
__device__ __forceinline__ void kscale_header(uint2 h0, uint2 h1, int j, int& sc, int& m) {
    // scales[i] is header byte 4 + i.
    auto s = [&](int i) -> int {
        const int k = 4 + i;
        return static_cast<int>(k < 8 ? byte_of(h0, k) : byte_of(h1, k - 8));
    };
    if (j < 4) {
        sc = s(j) & 63;
        m = s(j + 4) & 63;
    } else {
        sc = (s(j + 4) & 15) | ((s(j - 4) >> 6) << 4);
        m = (s(j + 4) >> 4) | ((s(j) >> 6) << 4);
    }
}

// The same without branches, for decoders whose lanes take different sub-blocks (the
// integer GEMV's Q4_K units: the branching form diverges inside every warp). byte_perm
// picks scales[j] (a), scales[j + 4] (b) and header byte j (c: scales[j − 4] for
// j >= 4) for both cases, and the case is a select: the same integers (checked for
// every j on random headers). Q5_K's one-row kernel keeps the other form: this one
// spills 16 bytes at its 40 registers (ptxas, sm_90a).
__device__ __forceinline__ void kscale_header_select(uint2 h0, uint2 h1, int j, int& sc, int& m) {
    const uint32_t sel = static_cast<uint32_t>(j);
    const uint32_t a = __byte_perm(h0.y, h1.x, sel), b = __byte_perm(h1.x, h1.y, sel), c = __byte_perm(h0.x, h0.y, sel);
    const bool low = j < 4;
    sc = static_cast<int>(low ? (a & 63) : ((b & 15) | ((c >> 2) & 0x30)));
    m = static_cast<int>(low ? (b & 63) : (((b >> 4) & 15) | ((a >> 2) & 0x30)));
}

// The block formats of the common file types split dq8 in two: fetch() issues the
// loads of a piece (8 values) into registers, decode() turns them into values.
// dq8 is the two in a row; the grouped tile GEMM issues the fetch of its next
// stage a whole stage ahead of the decode, so the loads' latency is hidden behind
// the tensor-core work instead of stalling every warp once per stage.
template <GgmlType T>
struct Piece;

// The fp16 scale at an even offset of a block (every block size here is even and
// rows are 2-byte aligned), as raw bits: fetch() must not use what it loads.
__device__ __forceinline__ uint32_t half_at(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }

template <>
struct Piece<GgmlType::Q4_K> {
    uint2 h0, h1, q;
    __device__ __forceinline__ static Piece fetch(const uint8_t* row, int64_t i0) {
        const uint8_t* b = row + (i0 / 256) * 144;
        const int e = static_cast<int>(i0 % 256), c = e / 64, l = e % 32;
        return {load8(b), load8(b + 8), load8(b + 16 + 32 * c + l)};
    }
    __device__ __forceinline__ void decode(int64_t i0, float (&v)[8]) const {
        const int e = static_cast<int>(i0 % 256);
        int sc, m;
        kscale_header(h0, h1, e / 32, sc, m);
        const float d1 = half_bits(h0.x) * static_cast<float>(sc);
        const float m1 = half_bits(h0.x >> 16) * static_cast<float>(m);
        const int shift = (e % 64) >= 32 ? 4 : 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = fmaf(d1, small_int(static_cast<int32_t>((byte_of(q, k) >> shift) & 15)), -m1);
    }
};

template <>
struct Piece<GgmlType::Q5_K> {
    uint2 h0, h1, q, qh;
    __device__ __forceinline__ static Piece fetch(const uint8_t* row, int64_t i0) {
        const uint8_t* b = row + (i0 / 256) * 176;
        const int e = static_cast<int>(i0 % 256), c = e / 64, l = e % 32;
        return {load8(b), load8(b + 8), load8(b + 48 + 32 * c + l), load8(b + 16 + l)};
    }
    __device__ __forceinline__ void decode(int64_t i0, float (&v)[8]) const {
        const int e = static_cast<int>(i0 % 256), sub = e / 32;
        int sc, m;
        kscale_header(h0, h1, sub, sc, m);
        const float d1 = half_bits(h0.x) * static_cast<float>(sc);
        const float m1 = half_bits(h0.x >> 16) * static_cast<float>(m);
        const int shift = (e % 64) >= 32 ? 4 : 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const int32_t low = static_cast<int32_t>((byte_of(q, k) >> shift) & 15);
            const int32_t hi = static_cast<int32_t>((byte_of(qh, k) >> sub) & 1);
            v[k] = fmaf(d1, small_int(low + 16 * hi), -m1);
        }
    }
};

template <>
struct Piece<GgmlType::Q6_K> {
    uint2 ql, qh;
    uint32_t d_bits;
    int32_t scale;  // the 16-wide scale of these 8 consecutive values
    __device__ __forceinline__ static Piece fetch(const uint8_t* row, int64_t i0) {
        const uint8_t* b = row + (i0 / 256) * 210;
        const int e = static_cast<int>(i0 % 256), h = e / 128, r = e % 128, g = r / 32, l = r % 32;
        return {load8(b + 64 * h + l + 32 * (g & 1)), load8(b + 128 + 32 * h + l), half_at(b + 208),
                static_cast<int8_t>(b[192 + e / 16])};
    }
    __device__ __forceinline__ void decode(int64_t i0, float (&v)[8]) const {
        const float d = half_bits(d_bits) * static_cast<float>(scale);
        const int g = static_cast<int>(i0 % 128) / 32;
        const int lshift = g < 2 ? 0 : 4;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const int32_t low = static_cast<int32_t>((byte_of(ql, k) >> lshift) & 15);
            const int32_t high = static_cast<int32_t>((byte_of(qh, k) >> (2 * g)) & 3);
            v[k] = d * small_int((low | (high << 4)) - 32);
        }
    }
};

template <>
struct Piece<GgmlType::Q8_0> {
    uint2 q;
    uint32_t d_bits;
    __device__ __forceinline__ static Piece fetch(const uint8_t* row, int64_t i0) {
        const uint8_t* b = row + (i0 / 32) * 34;
        return {load8(b + 2 + i0 % 32), half_at(b)};
    }
    __device__ __forceinline__ void decode(int64_t, float (&v)[8]) const {
        const float d = half_bits(d_bits);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = d * small_int(static_cast<int8_t>(byte_of(q, k)));
    }
};

template <>
struct Piece<GgmlType::Q5_0> {
    uint2 q;
    uint32_t qh, d_bits;
    __device__ __forceinline__ static Piece fetch(const uint8_t* row, int64_t i0) {
        const uint8_t* b = row + (i0 / 32) * 22;
        const int j = static_cast<int>(i0 % 32);
        return {load8(b + 6 + (j % 16)), load8(b + 2).x /* bytes 2..5: the 32 high bits */, half_at(b)};
    }
    __device__ __forceinline__ void decode(int64_t i0, float (&v)[8]) const {
        const float d = half_bits(d_bits);
        const int j = static_cast<int>(i0 % 32);
        const int shift = j < 16 ? 0 : 4;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const int32_t lo = static_cast<int32_t>((byte_of(q, k) >> shift) & 15);
            const int32_t hi = static_cast<int32_t>((qh >> (j + k)) & 1);
            v[k] = d * small_int((lo | (hi << 4)) - 16);
        }
    }
};

template <>
struct Piece<GgmlType::Q4_0> {
    uint2 q;
    uint32_t d_bits;
    __device__ __forceinline__ static Piece fetch(const uint8_t* row, int64_t i0) {
        const uint8_t* b = row + (i0 / 32) * 18;
        return {load8(b + 2 + (i0 % 32) % 16), half_at(b)};
    }
    __device__ __forceinline__ void decode(int64_t i0, float (&v)[8]) const {
        const float d = half_bits(d_bits);
        const int shift = (i0 % 32) < 16 ? 0 : 4;
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = d * small_int(static_cast<int32_t>((byte_of(q, k) >> shift) & 15) - 8);
    }
};

#define HF2Q_DQ8_FROM_PIECE(T)                                                                   \
    template <>                                                                                  \
    __device__ __forceinline__ void dq8<T>(const uint8_t* row, int64_t i0, float (&v)[8]) {      \
        Piece<T>::fetch(row, i0).decode(i0, v);                                                  \
    }
HF2Q_DQ8_FROM_PIECE(GgmlType::Q4_K)
HF2Q_DQ8_FROM_PIECE(GgmlType::Q5_K)
HF2Q_DQ8_FROM_PIECE(GgmlType::Q6_K)
HF2Q_DQ8_FROM_PIECE(GgmlType::Q8_0)
HF2Q_DQ8_FROM_PIECE(GgmlType::Q5_0)
HF2Q_DQ8_FROM_PIECE(GgmlType::Q4_0)
#undef HF2Q_DQ8_FROM_PIECE

template <>
__device__ __forceinline__ void dq8<GgmlType::MXFP4>(const uint8_t* row, int64_t i0, float (&v)[8]) {
    const uint8_t* b = row + (i0 / 32) * 17;
    const int j = static_cast<int>(i0 % 32);
    const float d = mxfp4_scale(b[0]);
    uint2 q;
    q.x = 0;
    q.y = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // blocks of 17 bytes: no alignment to use
        q.x |= static_cast<uint32_t>(b[1 + j % 16 + k]) << (8 * k);
        q.y |= static_cast<uint32_t>(b[1 + j % 16 + 4 + k]) << (8 * k);
    }
    const int shift = j < 16 ? 0 : 4;
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = small_int(kMxfp4[(byte_of(q, k) >> shift) & 15]) * d;
}

// A dispatch_type callable that does nothing: dispatch_type(t, NoTypeOp{}) only
// says whether t is supported.
struct NoTypeOp {
    template <GgmlType T>
    void operator()() const {}
};

// Calls f.template operator()<T>() for the runtime type t; false if t is not a
// storage type this backend decodes.
template <class F>
bool dispatch_type(GgmlType t, F&& f) {
    switch (t) {
        case GgmlType::F32: f.template operator()<GgmlType::F32>(); return true;
        case GgmlType::F16: f.template operator()<GgmlType::F16>(); return true;
        case GgmlType::BF16: f.template operator()<GgmlType::BF16>(); return true;
        case GgmlType::Q4_0: f.template operator()<GgmlType::Q4_0>(); return true;
        case GgmlType::Q4_1: f.template operator()<GgmlType::Q4_1>(); return true;
        case GgmlType::Q5_0: f.template operator()<GgmlType::Q5_0>(); return true;
        case GgmlType::Q5_1: f.template operator()<GgmlType::Q5_1>(); return true;
        case GgmlType::Q8_0: f.template operator()<GgmlType::Q8_0>(); return true;
        case GgmlType::Q2_K: f.template operator()<GgmlType::Q2_K>(); return true;
        case GgmlType::Q3_K: f.template operator()<GgmlType::Q3_K>(); return true;
        case GgmlType::Q4_K: f.template operator()<GgmlType::Q4_K>(); return true;
        case GgmlType::Q5_K: f.template operator()<GgmlType::Q5_K>(); return true;
        case GgmlType::Q6_K: f.template operator()<GgmlType::Q6_K>(); return true;
        case GgmlType::IQ4_NL: f.template operator()<GgmlType::IQ4_NL>(); return true;
        case GgmlType::IQ4_XS: f.template operator()<GgmlType::IQ4_XS>(); return true;
        case GgmlType::MXFP4: f.template operator()<GgmlType::MXFP4>(); return true;
        default: return false;
    }
}

}  // namespace hf2q::cuda

// Integer matrix-vector products for decode and small batches (llama.cpp's MMVQ
// recipe, written for this backend): the activations are quantized to 8 bits per
// 32 values (a scale d and d·Σq, see q8.cuh), and each weight unit is
// dotted with them by dp4a, four products per instruction.
//
// Why not the f32 GEMV (gemv.cu)? At one token that kernel reads 4 bytes of
// activation per weight value from L1, 7× the weight bytes of a 4.5-bit format, and
// spends several instructions per value decoding to float: it reached 0.4–0.6 TB/s.
// Here an activation value is 1 byte and a 4-bit weight costs about half an
// instruction.
//
// Layout of the work: one warp per weight row (two rows per warp when 8 activation
// rows share the pass, so each activation load serves both; four for the grouped
// experts of batched decode, see kGroupedRows; the experts' one-row launches of short
// rows take gemv_q8_routed_kernel below). The lanes walk the
// row in units (16 bytes of Q4_K quants, 32 values), so a row of 2816 Q4_K values
// is 88 units over 32 lanes. The one-row variant keeps one unit in flight per lane
// and 40 registers, so 12 blocks (48 warps) fit on an SM: measured on the H200,
// that hides the load latency better than two units per lane at 8 blocks (tg128 of
// the 26B-A4B 253.5 -> 275.4 tokens/s, the Q6_K LM head 516 -> 361 µs) or two rows
// per warp at 4 blocks (211.8). No shared memory and no block barrier: partial sums
// are reduced with warp shuffles (reduce_scatter).
//
// Precision: the activation rounding (relative error ≤ 1/254 of each block's
// largest value) is the same order as the BF16 operands of the tensor-core path,
// and only the default precision uses it; --precision f32 keeps the f32 GEMV.
#include "backends/cuda/byte_lanes.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/gemv.h"
#include "backends/cuda/gemv_mma.h"
#include "backends/cuda/grouping.cuh"
#include "backends/cuda/q8.cuh"
#include "ops/matmul.h"

namespace hf2q::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int64_t kMaxRowValues = int64_t{1} << 30;  // 32-bit unit, block and byte offsets within a row

// Quantized activation row: int8 values and per 32 values (scale d, d·Σq).
struct XRow {
    const int8_t* q;
    const float2* ds;
};

__device__ __forceinline__ int4 ld_x16(const int8_t* p) { return *reinterpret_cast<const int4*>(p); }
__device__ __forceinline__ int2 ld_x8(const int8_t* p) { return *reinterpret_cast<const int2*>(p); }

__device__ __forceinline__ int dot16(uint4 w, int4 x, int acc) {
    acc = __dp4a(static_cast<int>(w.x), x.x, acc);
    acc = __dp4a(static_cast<int>(w.y), x.y, acc);
    acc = __dp4a(static_cast<int>(w.z), x.z, acc);
    return __dp4a(static_cast<int>(w.w), x.w, acc);
}

__device__ __forceinline__ uint4 nibbles_lo(uint4 q) {
    return make_uint4(q.x & 0x0F0F0F0Fu, q.y & 0x0F0F0F0Fu, q.z & 0x0F0F0F0Fu, q.w & 0x0F0F0F0Fu);
}
__device__ __forceinline__ uint4 nibbles_hi(uint4 q) {
    return make_uint4((q.x >> 4) & 0x0F0F0F0Fu, (q.y >> 4) & 0x0F0F0F0Fu, (q.z >> 4) & 0x0F0F0F0Fu,
                      (q.w >> 4) & 0x0F0F0F0Fu);
}
// Each byte of q with bit j of the matching qh byte as its bit 4 (Q5_K's fifth bit).
__device__ __forceinline__ uint4 with_bit4(uint4 q, uint4 qh, int j) {
    return make_uint4(q.x | (((qh.x >> j) & 0x01010101u) << 4), q.y | (((qh.y >> j) & 0x01010101u) << 4),
                      q.z | (((qh.z >> j) & 0x01010101u) << 4), q.w | (((qh.w >> j) & 0x01010101u) << 4));
}
__device__ __forceinline__ uint4 sub_bytes(uint4 q, uint32_t k) {
    return make_uint4(sub_small_bytes(q.x, k), sub_small_bytes(q.y, k), sub_small_bytes(q.z, k),
                      sub_small_bytes(q.w, k));
}
__device__ __forceinline__ uint4 sub_bytes_saturating(uint4 q, uint32_t k) {
    return make_uint4(__vsubss4(q.x, k), __vsubss4(q.y, k), __vsubss4(q.z, k), __vsubss4(q.w, k));
}

// Keeps decoded quants where they were computed: without it the front end recomputes
// them (the Q4_K nibble masks, for example) inside every token's body of the
// eight-row variants, 32 instructions a token (PTX and SASS of 0df26f6). The empty
// asm emits nothing; it only makes the values opaque to the optimiser.
__device__ __forceinline__ void pin(uint32_t& v) { asm volatile("" : "+r"(v)); }
__device__ __forceinline__ void pin(uint4& v) {
    pin(v.x);
    pin(v.y);
    pin(v.z);
    pin(v.w);
}
__device__ __forceinline__ void pin(uint2& v) {
    pin(v.x);
    pin(v.y);
}

// A unit of a weight row: load() decodes it to packed signed bytes and scales,
// X::load() fetches the matching activations of one activation row, dot() gives
// the unit's contribution to that row's output. kVals values per unit.
template <GgmlType T>
struct Unit;

// What Q4_K and Q5_K units share. Unit (c, h) of a 256-value block is quant bytes
// 32c + 16h .. +16, whose low nibbles are values 16h.. of sub-block 2c and high
// nibbles those of sub-block 2c + 1. Each sub-block's min term uses the sum of its 32
// (rounded) activations and is added by the h = 0 unit only.
struct KUnit {
    static constexpr int kVals = 32;
    uint4 lo, hi;          // the two sub-blocks' quants, one per byte
    float d0, d1, m0, m1;  // their scales and (h = 0 only) mins
    uint32_t v0;           // first value of the unit's low half in the row
    uint32_t sb;           // index of sub-block 2c in the row (32-value blocks)
    // kSelect: the scales by kscale_header_select (Q4_K) or kscale_header (Q5_K).
    template <bool kSelect>
    __device__ void place(uint4 hd, uint32_t b, uint32_t c, uint32_t h) {
        const float d = half_bits(hd.x), dmin = half_bits(hd.x >> 16);
        const uint2 h0 = make_uint2(hd.x, hd.y), h1 = make_uint2(hd.z, hd.w);
        auto scale = [&](int j, int& sc, int& m) {
            if constexpr (kSelect)
                kscale_header_select(h0, h1, j, sc, m);
            else
                kscale_header(h0, h1, j, sc, m);
        };
        int sc, m;
        scale(2 * c, sc, m);
        d0 = d * static_cast<float>(sc);
        m0 = h == 0 ? dmin * static_cast<float>(m) : 0.0f;
        scale(2 * c + 1, sc, m);
        d1 = d * static_cast<float>(sc);
        m1 = h == 0 ? dmin * static_cast<float>(m) : 0.0f;
        v0 = b * 256 + 64 * c + 16 * h;
        sb = b * 8 + 2 * c;
    }
    __device__ void pin_quants() {
        pin(lo);
        pin(hi);
    }
    struct X {
        int4 a, b;
        float2 s0, s1;
        __device__ void load(XRow x, const KUnit& w) {
            a = ld_x16(x.q + w.v0);
            b = ld_x16(x.q + w.v0 + 32);
            s0 = x.ds[w.sb];
            s1 = x.ds[w.sb + 1];
        }
    };
    __device__ float dot(const X& x) const {
        const float p0 = static_cast<float>(dot16(lo, x.a, 0)), p1 = static_cast<float>(dot16(hi, x.b, 0));
        return d0 * x.s0.x * p0 + d1 * x.s1.x * p1 - (m0 * x.s0.y + m1 * x.s1.y);
    }
};

// Q4_K: 144-byte blocks (d, dmin, 12 scale bytes, 128 quant bytes).
template <>
struct Unit<GgmlType::Q4_K> : KUnit {
    __device__ void load(const uint8_t* row, uint32_t u) {
        const uint32_t b = u / 8, c = (u % 8) / 2, h = u % 2;
        const uint8_t* blk = row + b * 144;
        const uint4 q = ld_weights16(blk + 16 + 32 * c + 16 * h);
        place<true>(ld_weights16(blk), b, c, h);
        lo = nibbles_lo(q);
        hi = nibbles_hi(q);
    }
};

// Q5_K: 176-byte blocks, as Q4_K with the fifth bits from qh[16h .. 16h + 16) (bit
// 2c for the low nibbles, 2c + 1 for the high ones).
template <>
struct Unit<GgmlType::Q5_K> : KUnit {
    __device__ void load(const uint8_t* row, uint32_t u) {
        const uint32_t b = u / 8, c = (u % 8) / 2, h = u % 2;
        const uint8_t* blk = row + b * 176;
        const uint4 qh = ld_weights16(blk + 16 + 16 * h), q = ld_weights16(blk + 48 + 32 * c + 16 * h);
        place<false>(ld_weights16(blk), b, c, h);
        const uint4 l = nibbles_lo(q), hn = nibbles_hi(q);
        lo = with_bit4(l, qh, 2 * c);
        hi = with_bit4(hn, qh, 2 * c + 1);
    }
};

// Q6_K (210-byte blocks, 2-byte aligned): unit (h, l0) covers l = l0 .. l0 + 8 of the
// half h for all four groups g: ql bytes 64h + l (g 0 low, g 2 high) and 64h + 32 + l
// (g 1 low, g 3 high), qh bytes 128 + 32h + l (bits 2g). Group g's 8 values start at
// 128h + 32g + l0 and share one scale.
template <>
struct Unit<GgmlType::Q6_K> {
    static constexpr int kVals = 32;
    uint2 q[4];
    float d[4];
    uint32_t v0, xb;  // value of (g 0, l0); 32-blocks of the activation for g 0
    // Unit u of a row: block b, half h, offset l0 of its 8 values in each group. Every
    // layout (plain, planes) and the register kernel's activation loads use this.
    struct At {
        uint32_t b = 0, h = 0, l0 = 0;
        At() = default;
        __device__ explicit At(uint32_t u) : b(u / 8), h((u % 8) / 4), l0(8 * (u % 4)) {}
    };
    // Where the activations of the unit are: all X::load needs.
    __device__ void place(const At& at) {
        v0 = at.b * 256 + 128 * at.h + at.l0;
        xb = at.b * 8 + 4 * at.h;
    }
    __device__ void load(const uint8_t* row, uint32_t u) {
        const At at(u);
        const uint8_t* blk = row + at.b * 210;
        assemble(load8_a2(blk + 64 * at.h + at.l0), load8_a2(blk + 64 * at.h + 32 + at.l0),
                 load8_a2(blk + 128 + 32 * at.h + at.l0), load8_a2(blk + 192 + 8 * at.h), f16(blk + 208), at);
    }
    // The unit from its pieces: ql bytes l0.. of the half's two 32-byte runs (qa, qb),
    // qh bytes, the half's 8 scales and the block scale.
    __device__ void assemble(uint2 qa, uint2 qb, uint2 qh, uint2 sc, float dd, const At& at) {
        const uint32_t m4 = 0x0F0F0F0Fu, m2 = 0x03030303u;
        auto make = [&](uint2 ql, int shift_l, int shift_h) {
            return make_uint2(sub_small_bytes(((ql.x >> shift_l) & m4) | (((qh.x >> shift_h) & m2) << 4), 0x20202020u),
                              sub_small_bytes(((ql.y >> shift_l) & m4) | (((qh.y >> shift_h) & m2) << 4), 0x20202020u));
        };
        q[0] = make(qa, 0, 0);
        q[1] = make(qb, 0, 2);
        q[2] = make(qa, 4, 4);
        q[3] = make(qb, 4, 6);
#pragma unroll
        for (int g = 0; g < 4; ++g)
            d[g] = dd * static_cast<float>(static_cast<int8_t>(byte_of(sc, 2 * g + at.l0 / 16)));
        place(at);
    }
    __device__ void pin_quants() {
#pragma unroll
        for (int g = 0; g < 4; ++g) pin(q[g]);
    }
    struct X {
        int2 a[4];
        float s[4];
        __device__ void load(XRow x, const Unit& w) {
#pragma unroll
            for (int g = 0; g < 4; ++g) {
                a[g] = ld_x8(x.q + w.v0 + 32 * g);
                s[g] = x.ds[w.xb + g].x;
            }
        }
    };
    __device__ float dot(const X& x) const {
        float r = 0.0f;
#pragma unroll
        for (int g = 0; g < 4; ++g) {
            const int p = __dp4a(static_cast<int>(q[g].y), x.a[g].y, __dp4a(static_cast<int>(q[g].x), x.a[g].x, 0));
            r = fmaf(d[g] * x.s[g], static_cast<float>(p), r);
        }
        return r;
    }
};

// Q8_0 (34-byte blocks): unit = half a block, 16 values.
template <>
struct Unit<GgmlType::Q8_0> {
    static constexpr int kVals = 16;
    uint4 q;
    float d;
    uint32_t v0, xb;
    // kWide: the quants by load16_a2, without branches, for the variants that have the
    // registers (a unit's quants are 4-byte aligned in odd blocks and 2-byte aligned in
    // even ones, so load8's branches diverge in every warp); otherwise by load8, as the
    // one-row variant (40 registers) spills the five words of the branch-free form.
    template <bool kWide>
    __device__ void load_as(const uint8_t* row, uint32_t u) {
        const uint32_t b = u / 2, h = u % 2;
        const uint8_t* blk = row + b * 34;
        d = f16(blk);
        if constexpr (kWide) {
            q = load16_a2(blk + 2 + 16 * h);
        } else {
            const uint2 q0 = load8(blk + 2 + 16 * h), q1 = load8(blk + 10 + 16 * h);
            q = make_uint4(q0.x, q0.y, q1.x, q1.y);
        }
        v0 = b * 32 + 16 * h;
        xb = b;
    }
    __device__ void load(const uint8_t* row, uint32_t u) { load_as<false>(row, u); }
    __device__ void load_wide(const uint8_t* row, uint32_t u) { load_as<true>(row, u); }
    __device__ void pin_quants() { pin(q); }
    struct X {
        int4 a;
        float s;
        __device__ void load(XRow x, const Unit& w) {
            a = ld_x16(x.q + w.v0);
            s = x.ds[w.xb].x;
        }
    };
    __device__ float dot(const X& x) const { return d * x.s * static_cast<float>(dot16(q, x.a, 0)); }
};

// What Q5_0 and Q4_0 units share: one 32-value block, values 0..15 in lo and 16..31
// in hi as signed bytes, one scale.
struct BlockUnit {
    static constexpr int kVals = 32;
    uint4 lo, hi;
    float d;
    uint32_t b;
    __device__ void pin_quants() {
        pin(lo);
        pin(hi);
    }
    struct X {
        int4 a, c;
        float s;
        __device__ void load(XRow x, const BlockUnit& w) {
            a = ld_x16(x.q + 32 * w.b);
            c = ld_x16(x.q + 32 * w.b + 16);
            s = x.ds[w.b].x;
        }
    };
    __device__ float dot(const X& x) const { return d * x.s * static_cast<float>(dot16(hi, x.c, dot16(lo, x.a, 0))); }
};

// Q5_0 (22-byte blocks: d, 32 fifth bits, 16 quant bytes).
template <>
struct Unit<GgmlType::Q5_0> : BlockUnit {
    __device__ void load(const uint8_t* row, uint32_t u) {
        b = u;
        const uint8_t* blk = row + b * 22;
        d = f16(blk);
        const uint32_t qh = static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(blk + 2)) |
                            (static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(blk + 4)) << 16);
        const uint4 q = load16_a2(blk + 6);
        const uint4 l = nibbles_lo(q), h = nibbles_hi(q);
        lo = sub_bytes(make_uint4(l.x | bit4_of_bytes(qh), l.y | bit4_of_bytes(qh >> 4), l.z | bit4_of_bytes(qh >> 8),
                                  l.w | bit4_of_bytes(qh >> 12)),
                       0x10101010u);
        hi = sub_bytes(make_uint4(h.x | bit4_of_bytes(qh >> 16), h.y | bit4_of_bytes(qh >> 20),
                                  h.z | bit4_of_bytes(qh >> 24), h.w | bit4_of_bytes(qh >> 28)),
                       0x10101010u);
    }
};

// Q4_0 (18-byte blocks: d, 16 quant bytes).
template <>
struct Unit<GgmlType::Q4_0> : BlockUnit {
    __device__ void load(const uint8_t* row, uint32_t u) {
        b = u;
        const uint8_t* blk = row + b * 18;
        d = f16(blk);
        const uint4 q = load16_a2(blk + 2);
        // The saturating form, not sub_bytes: with the cheaper one the one-row kernels
        // spill 44-48 bytes at their 40 registers (ptxas, sm_90a).
        lo = sub_bytes_saturating(nibbles_lo(q), 0x08080808u);
        hi = sub_bytes_saturating(nibbles_hi(q), 0x08080808u);
    }
};

// A unit's load: the branch-free form where the unit has one (load_wide) and the
// variant several activation rows (NT > 1: 64 registers or more).
// With several activation rows the decoded quants are pinned (pin above).
template <int NT, class U>
__device__ __forceinline__ void load_unit(U& w, const uint8_t* row, uint32_t u) {
    if constexpr (NT > 1 && requires { w.load_wide(row, u); })
        w.load_wide(row, u);
    else
        w.load(row, u);
    if constexpr (NT > 1) w.pin_quants();
}

// Activations are quantized (row r reads x row x_rows[r] when given) by 8 threads
// per 32 values, 4 values each (q8.cuh). The blocks carry (d, d·Σq): the Q4_K/Q5_K
// min terms then multiply the same rounded activations as the scale terms, so the
// whole product is exactly Σ w·x̂ (with the sum of the unrounded values the min
// term's error is not cancelled: 3× larger).
__global__ void quantize_q8_kernel(const float* x, int64_t x_stride, const int32_t* x_rows, int64_t rows,
                                   int64_t n_in, bool x_vec, Q8View out) {
    pdl_begin();
    const int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;  // 4-value group
    const int64_t per_row = n_in / 4;
    const bool in = g < rows * per_row;  // whole 8-thread groups are in or out
    const int64_t r = in ? g / per_row : 0, c = in ? g % per_row : 0;
    const float* src = x + (x_rows ? static_cast<int64_t>(x_rows[r]) : r) * x_stride + 4 * c;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (in) {
        if (x_vec) {
            const float4 f = *reinterpret_cast<const float4*>(src);
            v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
        } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) v[k] = src[k];
        }
    }
    quantize_q8_values(v, in, out, r, n_in, c);
}

// Up to three weights multiplied by the same quantized activations in one launch
// (matmul_multi): blocks [end[i-1], end[i]) work on weight i.
constexpr int kMaxSegments = ops::MultiMatmulParams::kMax;
static_assert(kMaxSegments == 3, "gemv_q8_kernel selects its segment among three");
struct Segments {
    GemvArgs a[kMaxSegments];
    unsigned end[kMaxSegments] = {};
    int n = 0;
};

// NT activation rows per pass over the weights; RW weight rows per warp; KU units
// in flight per lane. MULTI: g may hold several weights (else only g.a[0]; the
// segment selection costs the eight-row variant about ten registers, so the grouped
// experts, which never have segments, use the plain form).
// Blocks per SM the eight-row variant is compiled for (at most 65536 / (128·n)
// registers per thread: 4 → 80-96 as compiled, 8 → 64). A compile definition so the
// occupancy trade that paid for the one-row variant can be measured here too.
#ifndef HF2Q_GEMV8_MIN_BLOCKS
#define HF2Q_GEMV8_MIN_BLOCKS 4
#endif
// Weight rows per warp of the grouped eight-row variant (batched decode's experts,
// about 4 routed rows each at 64 sequences; Q4_K, Q5_0 and Q8_0 experts take the
// tensor-core kernel of gemv_mma.cu instead). Its warps are short-lived (one or two
// units per lane and row on the 704-wide down rows): each starts with the expert
// lookup and ends with a reduction, so four rows per warp keep more loads in flight
// per lookup. A compile definition for the A/B against two (docs/performance.md).
#ifndef HF2Q_GEMV8_GROUPED_ROWS
#define HF2Q_GEMV8_GROUPED_ROWS 4
#endif
constexpr int kGroupedRows = HF2Q_GEMV8_GROUPED_ROWS;

// Sums each of the V values of every lane over the warp, spread over the lanes: each
// step of the butterfly halves the values a lane keeps (sending the other half to
// its partner), so V = 32 sums cost 31 shuffles instead of 160. Lane l ends with the
// sum of value `index`, which it shares with the lanes of its 32 / V group. Each
// sum is the same tree of additions as a plain xor reduction of that value (the
// partners' operands only commute), so the results are bit for bit those of
// reducing the values one by one.
// One butterfly step at lane distance OFF on the first N values (a template, so every
// index is a constant and the values stay in registers).
template <int N, int OFF, int V>
__device__ __forceinline__ void scatter_step(float (&v)[V], int lane, int& index) {
    if constexpr (OFF > 0) {
        if constexpr (N > 1) {
            const bool upper = (lane & OFF) != 0;
#pragma unroll
            for (int i = 0; i < N / 2; ++i) {
                const float send = upper ? v[i] : v[i + N / 2];
                const float keep = upper ? v[i + N / 2] : v[i];
                v[i] = keep + __shfl_xor_sync(0xffffffffu, send, OFF);
            }
            index = 2 * index + (upper ? 1 : 0);
            scatter_step<N / 2, OFF / 2>(v, lane, index);
        } else {
            v[0] += __shfl_xor_sync(0xffffffffu, v[0], OFF);
            scatter_step<1, OFF / 2>(v, lane, index);
        }
    }
}

// Sums each of the V values of every lane over the warp, spread over the lanes: each
// step of the butterfly halves the values a lane keeps (sending the other half to
// its partner), so V = 32 sums cost 31 shuffles instead of 160. Lane l ends with the
// sum of value `index`, which it shares with the lanes of its 32 / V group. Each
// sum is the same tree of additions as a plain xor reduction of that value (the
// partners' operands only commute), so the results are bit for bit those of
// reducing the values one by one.
template <int V>
__device__ __forceinline__ float reduce_scatter(float (&v)[V], int lane, int& index) {
    static_assert(V >= 1 && V <= 32 && (V & (V - 1)) == 0, "a power of two up to 32 values");
    index = 0;
    scatter_step<V, 16>(v, lane, index);
    return v[0];
}

constexpr uint64_t kPrefetchMaxBytes = uint64_t{16} << 20;

// Asks L2 for rows [row0, row0 + rows) of w (one prefetch per 128-byte line, spread
// over the block's threads).
__device__ __forceinline__ void prefetch_rows_l2(const uint8_t* w, int64_t row0, int64_t rows, int64_t n_out,
                                                 uint64_t row_bytes) {
    if (row0 >= n_out) return;
    const int64_t r1 = row0 + rows < n_out ? row0 + rows : n_out;
    const uintptr_t b = reinterpret_cast<uintptr_t>(w + static_cast<uint64_t>(row0) * row_bytes) & ~uintptr_t{127};
    const uintptr_t e = reinterpret_cast<uintptr_t>(w + static_cast<uint64_t>(r1) * row_bytes);
    for (uintptr_t p = b + threadIdx.x * 128u; p < e; p += blockDim.x * 128u)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// The quantized activations a launch reads: row r of the product reads row
// rows[r] of q (rows null: row r). rows is set where the rows were prepared before
// a gather (a MoE layer's expert input, quantized once per token by residual_norms).
struct Q8Input {
    Q8View q;
    const int32_t* rows = nullptr;
};

// Short rows (at most kShortRounds rounds of 32 units per warp, such as the experts'
// 704-value down rows) in one-row grouped launches: kShortRows rows per warp, their
// loads in flight together, half the warps. H200, 26B-A4B: 8 x tg128 890 -> 938
// tokens/s. Wider rows keep one row per warp, one unit per lane in flight at 12
// blocks per SM: four units per lane at 4 blocks (all of a 2,816-value row in one
// round trip) lost on every decode matrix (tg128 352 -> 327; docs/performance.md).
// Compile definitions so the choice can be measured.
#ifndef HF2Q_GEMV1_SHORT_ROWS
#define HF2Q_GEMV1_SHORT_ROWS 2
#endif
#ifndef HF2Q_GEMV1_SHORT_ROUNDS
#define HF2Q_GEMV1_SHORT_ROUNDS 2
#endif
constexpr int kShortRows = HF2Q_GEMV1_SHORT_ROWS;
constexpr int kShortRounds = HF2Q_GEMV1_SHORT_ROUNDS;

// Blocks per SM a variant is compiled for: 12 for the plain one-row variant (40
// registers), 4 (up to 128 registers) where a lane keeps several rows in flight.
// HF2Q_GEMV1_MIN_BLOCKS (a compile definition, for A/Bs) sets the one-row variant's:
// 10 (48 registers) measured 461.2 / 461.5 tokens/s at tg128 against 12's 466.7 /
// 462.6 (H200, 26B-A4B q4_k_m, session 28).
#ifndef HF2Q_GEMV1_MIN_BLOCKS
#define HF2Q_GEMV1_MIN_BLOCKS 12
#endif
constexpr int min_blocks(int nt, int rw, int ku) {
    return nt != 1 ? HF2Q_GEMV8_MIN_BLOCKS : rw * ku == 1 ? HF2Q_GEMV1_MIN_BLOCKS : 4;
}

// The segment block blockIdx.x works on (static indices: no local copy of the
// params) and the block's index within it.
__device__ __forceinline__ int block_segment(const Segments& g) {
    return (g.n > 1 && blockIdx.x >= g.end[0]) + (g.n > 2 && blockIdx.x >= g.end[1]);
}
__device__ __forceinline__ unsigned segment_block(const Segments& g, int seg) {
    return blockIdx.x - (seg == 0 ? 0u : (seg == 1 ? g.end[0] : g.end[1]));
}

// A dense one-token row with its first unit loaded before pdl_begin(): model weights,
// which no kernel writes (common.cuh), so the first round's DRAM latency overlaps the
// previous kernel's tail instead of following the wait (the L2 prefetch of
// gemv_q8_rows, where it applies, serves the later rounds). H200, 26B-A4B q4_k_m,
// against the plain body in the same device call: tg128 439.5 / 444.1 -> 452.7
// tokens/s, and 458-459 with the attention inputs' and q8.cuh's changes of the same
// session (docs/performance.md, session 27). The same sums in the same order as
// gemv_q8_rows<T, 1, 1, 1>: the same bits. A compile definition for A/Bs:
// HF2Q_GEMV_EARLY_UNIT=0 keeps the plain body.
#ifndef HF2Q_GEMV_EARLY_UNIT
#define HF2Q_GEMV_EARLY_UNIT 1
#endif

template <GgmlType T>
__device__ __forceinline__ void gemv_q8_dense_row_early(const GemvArgs& a, int64_t o, const Q8Input& xin) {
    using U = Unit<T>;
    const int lane = threadIdx.x % 32;
    const bool has = o < a.n_out;
    const uint8_t* row = a.w + static_cast<uint64_t>(has ? o : 0) * a.row_bytes;
    const uint32_t units = static_cast<uint32_t>(a.n_in / U::kVals);
    U first;
    if (lane < units) first.load(row, lane);
    pdl_begin();
    if (!has) return;  // whole warp
    const XRow xr = {xin.q.q, xin.q.ds};
    float acc = 0.0f;
    if (lane < units) {
        typename U::X x;
        x.load(xr, first);
        acc += first.dot(x);
    }
    for (uint32_t u = lane + 32; u < units; u += 32) {
        U w;
        w.load(row, u);
        typename U::X x;
        x.load(xr, w);
        acc += w.dot(x);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) a.y[o] = acc;
}

// The rows of weight `a` that block bx of its segment computes: the body of
// gemv_q8_kernel and gemv_q8_mixed_kernel. g.a[0] says whether the launch is grouped.
template <GgmlType T, int NT, int RW, int KU, bool MULTI>
__device__ __forceinline__ void gemv_q8_rows(const Segments& g, const GemvArgs& a, unsigned bx, const Q8Input& xin) {
    using U = Unit<T>;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t o0 = (static_cast<int64_t>(bx) * kWarps + warp) * RW;
    // Dense weights do not depend on the previous kernel: the block asks L2 for its
    // rows before it waits for that kernel (common.cuh), so they stream in while it
    // finishes (tg128 +1 %, docs/performance.md). HF2Q_GEMV_PREFETCH (CMake): 1 for
    // the one-row variant, 2 for every dense variant, 0 never. Grouped experts
    // cannot: the grouping is the previous kernel's output.
    // Only weights of at most kPrefetchMaxBytes: a larger matrix streams from DRAM at
    // full rate anyway, and prefetching it only doubles its L2 requests (31B decode:
    // 93.6 -> 88.4 tok/s with every matrix prefetched).
    if (HF2Q_GEMV_PREFETCH >= (NT == 1 ? 1 : 2) && g.a[0].offsets == nullptr &&
        static_cast<uint64_t>(a.n_out) * a.row_bytes <= kPrefetchMaxBytes)
        prefetch_rows_l2(a.w, static_cast<int64_t>(bx) * kWarps * RW, kWarps * RW, a.n_out, a.row_bytes);
    if constexpr (HF2Q_GEMV_EARLY_UNIT && NT == 1 && RW == 1 && KU == 1)
        if (g.a[0].offsets == nullptr && xin.rows == nullptr && a.n_rows == 1)
            return gemv_q8_dense_row_early<T>(a, o0, xin);
    pdl_begin();
    if (o0 >= a.n_out) return;  // whole warp; no block-wide barrier below
    int64_t r0 = 0, r1 = a.n_rows;
    const uint8_t* w = a.w;
    if (a.offsets != nullptr) {
        // Four loads of offsets at once (one latency for 128 experts): the one-row
        // variant with segments lacks the registers, but grouped launches have none.
        constexpr int kLookup = NT == 1 && MULTI ? 1 : 4;
        const int e = active_expert<kLookup>(a.offsets, a.n_experts, static_cast<int>(blockIdx.y));
        if (e < 0) return;
        r0 = a.offsets[e];
        r1 = a.offsets[e + 1];
        w += static_cast<uint64_t>(e) * a.expert_bytes;
    }
    const uint8_t* row[RW];
#pragma unroll
    for (int r = 0; r < RW; ++r) row[r] = w + static_cast<uint64_t>(o0 + r < a.n_out ? o0 + r : o0) * a.row_bytes;
    const uint32_t units = static_cast<uint32_t>(a.n_in / U::kVals);  // gemv_q8_supported: < 2^30
    const int64_t blocks32 = a.n_in / 32;
    for (int64_t c0 = r0; c0 < r1; c0 += NT) {
        const int nt = static_cast<int>(r1 - c0 < NT ? r1 - c0 : NT);
        XRow xr[NT];
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            int64_t xi = c0 + (t < nt ? t : 0);
            // The gathered prepared rows: one-row variants only, as the eight-row ones
            // are instruction-bound (the gather's address arithmetic cost the Q8_0
            // experts 27 % at 64 sequences) and never get them (launch_segments).
            if constexpr (NT == 1)
                if (xin.rows != nullptr) xi = xin.rows[xi];
            xr[t] = {xin.q.q + xi * a.n_in, xin.q.ds + xi * blocks32};
        }
        float acc[RW][NT] = {};
        for (uint32_t u = lane; u < units; u += 32 * KU) {
            U wu[KU][RW];
            typename U::X x1[KU];  // NT == 1: the activations, loaded with the weights
            bool valid[KU];
#pragma unroll
            for (int k = 0; k < KU; ++k) {  // all loads first: KU units in flight
                valid[k] = u + 32 * k < units;
#pragma unroll
                for (int r = 0; r < RW; ++r) load_unit<NT>(wu[k][r], row[r], valid[k] ? u + 32 * k : u);
                if constexpr (NT == 1) x1[k].load(xr[0], wu[k][0]);
            }
#pragma unroll
            for (int k = 0; k < KU; ++k) {
                if (!valid[k]) continue;
                if constexpr (NT == 1) {
#pragma unroll
                    for (int r = 0; r < RW; ++r) acc[r][0] += wu[k][r].dot(x1[k]);
                } else {
#pragma unroll
                    for (int t = 0; t < NT; ++t) {
                        if (t < nt) {
                            typename U::X xv;
                            xv.load(xr[t], wu[k][0]);
#pragma unroll
                            for (int r = 0; r < RW; ++r) acc[r][t] += wu[k][r].dot(xv);
                        }
                    }
                }
            }
        }
        if constexpr (RW * NT == 32) {
            // The grouped variant: 32 sums, one per lane after the butterfly (31
            // shuffles instead of 160). The other variants keep the plain reduction,
            // which needs fewer registers (the same bits either way).
            float v[RW * NT];
#pragma unroll
            for (int r = 0; r < RW; ++r)
#pragma unroll
                for (int t = 0; t < NT; ++t) v[r * NT + t] = acc[r][t];
            int idx = 0;
            const float sum = reduce_scatter<RW * NT>(v, lane, idx);
            const int r = idx / NT, t = idx % NT;
            if (t < nt && o0 + r < a.n_out) a.y[(c0 + t) * a.y_stride + o0 + r] = sum;
        } else {
#pragma unroll
            for (int r = 0; r < RW; ++r)
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    float v = acc[r][t];
#pragma unroll
                    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
                    if (lane == 0 && t < nt && o0 + r < a.n_out) a.y[(c0 + t) * a.y_stride + o0 + r] = v;
                }
        }
    }
}

template <GgmlType T, int NT, int RW, int KU, bool MULTI>
__global__ void __launch_bounds__(kWarps * 32, min_blocks(NT, RW, KU)) gemv_q8_kernel(Segments g, Q8Input xin) {
    const int seg = MULTI ? block_segment(g) : 0;
    const GemvArgs& a = seg == 0 ? g.a[0] : (seg == 1 ? g.a[1] : g.a[2]);
    gemv_q8_rows<T, NT, RW, KU, MULTI>(g, a, segment_block(g, seg), xin);
}

// One-token products of weights of two types on one input (q/k with a Q6_K v in a
// Q4_K_M file, gate with up): one launch where gemv_q8_kernel needs one per type.
// The second launch would wait for the first to complete (pdl_begin), though it
// does not depend on it: 26B-A4B tg128, a Q6_K v GEMV charged 6.7 µs to the
// critical path after 5.8 µs of q/k (CUPTI trace, docs/performance.md). Each block
// runs its segment's one-row body, so every row is computed as in its own launch
// (the same bits). Built for the pairs the quantization presets mix (dispatch_mixed_pair).
template <GgmlType T0, GgmlType T1>
__global__ void __launch_bounds__(kWarps * 32, min_blocks(1, 1, 1)) gemv_q8_mixed_kernel(Segments g, Q8Input xin) {
    const int seg = block_segment(g);
    const GemvArgs& a = seg == 0 ? g.a[0] : (seg == 1 ? g.a[1] : g.a[2]);
    if (a.type == T0)
        gemv_q8_rows<T0, 1, 1, 1, true>(g, a, segment_block(g, seg), xin);
    else
        gemv_q8_rows<T1, 1, 1, 1, true>(g, a, segment_block(g, seg), xin);
}

// ---- Grouped one-row products by routed row ---------------------------------------
// gemv_q8_kernel's grouped launches give each active expert its own blocks (grid.y), so
// each warp first looks up its expert, then has one unit a lane of its rows in flight.
// At one token the 26B-A4B's down product (8 experts × 2,816 rows of 704 values, two
// rows a warp) was 2.4-2.7 waves of such blocks, each wave a lookup and a load
// latency: 15.8 µs a layer in Q8_0 and 8.6 in Q5_0 for 16.8 and 10.9 MB (CUPTI trace,
// session 23). Here a warp takes one output row of KE routed rows, whatever their
// experts: it finds their experts with one scan of the offsets, then keeps one unit of
// each of those rows in flight per lane, so one token's down product is one wave
// (Q8_0 11.1 µs, Q5_0 9.1; the token's span 2,361 -> 2,292 µs). For the 32-value
// formats each row's sum is the same sequence of additions as in gemv_q8_kernel's
// one-row variants (the butterfly of reduce_scatter is the xor reduction's tree).
// H200, 26B-A4B, against the old launches in the same calls: tg128 +1.2 to +5.1 %,
// 8 × tg128 +5.2 to +9.4 % (docs/performance.md, session 23).
// HF2Q_GEMV_ROUTED (a compile definition, for A/Bs): 0 keeps gemv_q8_kernel.
#ifndef HF2Q_GEMV_ROUTED
#define HF2Q_GEMV_ROUTED 1
#endif
// Routed rows a warp of short rows (at most kShortRounds rounds: the down products)
// takes: one token's 8.
constexpr int kRoutedShort = 8;
// Wide Q4_K rows (the experts' gate_up, 2,816 values: three rounds) take the kernel
// with 4 routed rows a warp from this many routed rows on: at 8 sequences (64 rows)
// 8 × tg128 1,088 -> 1,123; at one token (8 rows) the per-expert launch is as fast
// (tg128 418.9 / 419.2 against 418.8 / 417.2 with it). 8 routed rows a warp (no spills
// either) lost at 8 sequences: 1,116-1,122 -> 1,084-1,088 (session 24).
constexpr int kRoutedWide = 4;
#ifndef HF2Q_GEMV_ROUTED_WIDE_MIN_ROWS
#define HF2Q_GEMV_ROUTED_WIDE_MIN_ROWS 16
#endif
// Blocks per SM the kernel is compiled for: 6 (at most 80 registers as compiled) put one
// token's 2,816 warps of the down product on the H200's 132 SMs at once.
constexpr int kRoutedBlocks = 6;

// The routed rows a warp takes for rows of type T (0: the kernel is not built for T):
// short rows of the 32-value formats (the experts' 704-value down rows cannot be
// K-quants) and Q4_K's wide rows.
template <GgmlType T>
constexpr int kRoutedRows = T == GgmlType::Q4_0 || T == GgmlType::Q5_0 || T == GgmlType::Q8_0 ? kRoutedShort
                            : T == GgmlType::Q4_K                                              ? kRoutedWide
                                                                                               : 0;
// Whether a grouped one-row launch of type T over n_rows routed rows takes
// gemv_q8_routed_kernel: the 32-value formats' short rows (short_one_row, as
// launch_segments decides it), Q4_K's wide rows from HF2Q_GEMV_ROUTED_WIDE_MIN_ROWS
// routed rows on.
template <GgmlType T>
bool routed_launch(bool short_one_row, int64_t n_rows) {
    if constexpr (!HF2Q_GEMV_ROUTED || kRoutedRows<T> == 0)
        return false;
    else if constexpr (kRoutedRows<T> == kRoutedShort)
        return short_one_row;
    else
        return !short_one_row && n_rows >= HF2Q_GEMV_ROUTED_WIDE_MIN_ROWS;
}

// One token's weighted combine of the routed rows (ops::MoeMatmulParams::combine),
// folded into gemv_q8_routed_kernel where the launch is one block row (every routed row
// of an output column in one warp): k slots, slot j's grouped row slot_of[j] and
// weight weights[j]; out: the combined row. k = 0: none.
struct RoutedCombine {
    const int32_t* slot_of = nullptr;
    const float* weights = nullptr;
    float* out = nullptr;
    int k = 0;
};

template <GgmlType T, int KE, bool kCombine>
__global__ void __launch_bounds__(kWarps * 32, kRoutedBlocks)
    gemv_q8_routed_kernel(GemvArgs a, Q8Input xin, RoutedCombine cb) {
    using U = Unit<T>;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
    const int rb = static_cast<int>(blockIdx.y) * KE;  // < n_rows (the grid's height)
    pdl_begin();
    if (o >= a.n_out) return;  // whole warp
    // The combine's slots, loaded with the routing (lane j < k: slot j), so the
    // epilogue does not wait for them.
    int slot_row = 0;
    float slot_w = 0.0f;
    if constexpr (kCombine) {
        if (lane < cb.k) {
            slot_row = cb.slot_of[lane];
            slot_w = cb.weights[lane];
        }
    }
    int r[KE], ex[KE];
#pragma unroll
    for (int k = 0; k < KE; ++k) r[k] = rb + k < a.n_rows ? rb + k : rb;  // past the end: never stored
    routed_experts<KE>(a.offsets, a.n_experts, r, ex);
    const uint32_t units = static_cast<uint32_t>(a.n_in / U::kVals);
    const int64_t blocks32 = a.n_in / 32;
    float acc[KE] = {};
    for (uint32_t u = lane; u < units; u += 32) {
        U wu[KE];
#pragma unroll
        for (int k = 0; k < KE; ++k)  // all loads first: KE units in flight
            load_unit<KE>(wu[k], a.w + static_cast<uint64_t>(ex[k]) * a.expert_bytes +
                                          static_cast<uint64_t>(o) * a.row_bytes, u);
#pragma unroll
        for (int k = 0; k < KE; ++k) {
            const int64_t xi = xin.rows != nullptr ? xin.rows[r[k]] : r[k];
            typename U::X x;
            x.load({xin.q.q + xi * a.n_in, xin.q.ds + xi * blocks32}, wu[k]);
            acc[k] += wu[k].dot(x);
        }
    }
    int idx = 0;
    const float sum = reduce_scatter<KE>(acc, lane, idx);
    if (lane % (32 / KE) == 0 && rb + idx < a.n_rows) a.y[static_cast<int64_t>(rb + idx) * a.y_stride + o] = sum;
    if constexpr (kCombine) {
        // Routed row r's sum is on lane r · 32 / KE (reduce_scatter). Slots in order,
        // each a multiply-add into the sum: moe_combine's and residual_norms' order.
        float c = 0.0f;
        for (int j = 0; j < cb.k; ++j) {
            const int r = __shfl_sync(0xffffffffu, slot_row, j);
            const float w = __shfl_sync(0xffffffffu, slot_w, j);
            c += w * __shfl_sync(0xffffffffu, sum, r * (32 / KE));
        }
        if (lane == 0) cb.out[o] = c;
    }
}

// ---- Q6_K rows in planes (ops::WeightView::decode_layout) --------------------------
// A Q6_K unit of the plain layout takes 13 word loads: its pieces are only 2-byte
// aligned in 210-byte blocks, and the one-token GEMV of the LM head (262,144 rows)
// is bound by those load instructions, not by DRAM (2.1 TB/s). Repacked per row
// into planes (ql [nb][128], qh [nb][64], scales [nb][16], d [nb]; the row padded to
// 16 bytes), the same unit is four aligned 8-byte loads and one 2-byte load of the
// same values, so the same sums: bit for bit the plain kernel's result. H200, the
// 26B-A4B's LM head: 283 -> 234 us, 221 with the activations in registers
// (CudaDecodeLayout.DISABLED_Throughput).
__device__ __forceinline__ uint2 ld_weights8(const uint8_t* p) {
    uint2 r;
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
    return r;
}

// The block scale (2-byte aligned in the planes) as one 2-byte load.
__device__ __forceinline__ float ld_weights_f16(const uint8_t* p) {
    uint16_t h;
    asm("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(h) : "l"(p));
    return __half2float(__ushort_as_half(h));
}

// Where unit u's pieces sit in a planes row of nb blocks: byte offsets of its quants
// (ql; the second run is 32 bytes on), high bits, the half's scales and the block
// scale. They depend on the unit, not on the row, so a lane that walks rows with
// the same units (the register kernel) works them out once.
struct PlaneOffsets {
    Unit<GgmlType::Q6_K>::At at;
    uint32_t ql = 0, qh = 0, sc = 0, d = 0;
    PlaneOffsets() = default;
    __device__ PlaneOffsets(uint32_t n, uint32_t u) : at(u) {
        const uint32_t b = at.b;
        ql = b * 128 + 64 * at.h + at.l0;
        qh = n * 128 + b * 64 + 32 * at.h + at.l0;
        sc = n * 192 + b * 16 + 8 * at.h;
        d = n * 208 + 2 * b;
    }
};

struct Q6kPlaneUnit : Unit<GgmlType::Q6_K> {
    __device__ void load_planes(const uint8_t* row, const PlaneOffsets& o) {
        assemble(ld_weights8(row + o.ql), ld_weights8(row + o.ql + 32), ld_weights8(row + o.qh),
                 ld_weights8(row + o.sc), ld_weights_f16(row + o.d), o.at);
    }
    __device__ void load_planes(const uint8_t* row, uint32_t nb, uint32_t u) { load_planes(row, PlaneOffsets(nb, u)); }
};

// One row per warp, one unit per lane in flight: gemv_q8_kernel<Q6_K, 1, 1, 1> (no
// prefetch: the matrices this serves are far above kPrefetchMaxBytes) with the
// planes' loads, summed in the same order. Two units in flight at 8 blocks per SM lost
// (LM head 234 -> 309 us).
__global__ void __launch_bounds__(kWarps * 32, 12) gemv_q6k_planes_kernel(GemvArgs a, Q8Input xin) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
    pdl_begin();
    if (o >= a.n_out) return;
    const uint8_t* row = a.w + static_cast<uint64_t>(o) * a.row_bytes;
    const uint32_t nb = static_cast<uint32_t>(a.n_in / 256), units = static_cast<uint32_t>(a.n_in / 32);
    const XRow xr = {xin.q.q, xin.q.ds};
    float acc = 0.0f;
    for (uint32_t u = lane; u < units; u += 32) {
        Q6kPlaneUnit wu;
        wu.load_planes(row, nb, u);
        Unit<GgmlType::Q6_K>::X x;
        x.load(xr, wu);
        acc += wu.dot(x);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) a.y[o] = acc;
}

// The activations held in registers: a lane's units of a row are always units lane,
// lane + 32, ... (at most 32·R of them), so it loads their activations once and
// walks kPlaneRows rows with the weight loads only (5 per unit instead of 13). Same
// order of sums as the one-row kernels: the same bits. Compile definition
// HF2Q_Q6K_PLANE_ROWS: rows per warp, 0 for the kernel above (LM head: 4 rows 228
// us, 8 rows 221, 16 rows 223).
#ifndef HF2Q_Q6K_PLANE_ROWS
#define HF2Q_Q6K_PLANE_ROWS 8
#endif
constexpr int kPlaneRows = HF2Q_Q6K_PLANE_ROWS;

template <int R>
__global__ void __launch_bounds__(kWarps * 32) gemv_q6k_planes_xreg_kernel(GemvArgs a, Q8Input xin) {
    using U = Unit<GgmlType::Q6_K>;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t o0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kPlaneRows;
    pdl_begin();
    if (o0 >= a.n_out) return;
    const uint32_t nb = static_cast<uint32_t>(a.n_in / 256), units = static_cast<uint32_t>(a.n_in / 32);
    const XRow xr = {xin.q.q, xin.q.ds};
    U::X x[R];
#pragma unroll
    for (int k = 0; k < R; ++k) {
        const uint32_t u = lane + 32 * k < units ? lane + 32 * k : 0;  // idle lanes: unit 0, in bounds
        U where;  // only the unit's place
        where.place(U::At(u));
        x[k].load(xr, where);
    }
    const int64_t o1 = o0 + kPlaneRows < a.n_out ? o0 + kPlaneRows : a.n_out;
    PlaneOffsets off[R];  // the same for every row: worked out once
#pragma unroll
    for (int k = 0; k < R; ++k) off[k] = PlaneOffsets(nb, lane + 32 * k < units ? lane + 32 * k : 0);
    for (int64_t o = o0; o < o1; ++o) {
        const uint8_t* row = a.w + static_cast<uint64_t>(o) * a.row_bytes;
        Q6kPlaneUnit wu[R];
#pragma unroll
        for (int k = 0; k < R; ++k) wu[k].load_planes(row, off[k]);
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < R; ++k)
            if (lane + 32 * k < units) acc += wu[k].dot(x[k]);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (lane == 0) a.y[o] = acc;
    }
}

// Thread per (row, block): the block's pieces into the row's planes (once, at load).
__global__ void repack_q6k_planes_kernel(const uint8_t* src, uint64_t src_row_bytes, uint8_t* dst,
                                         uint64_t dst_row_bytes, int64_t rows, int64_t nb) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= rows * nb) return;
    const int64_t r = i / nb, b = i % nb;
    const uint8_t* blk = src + static_cast<uint64_t>(r) * src_row_bytes + b * 210;
    uint8_t* row = dst + static_cast<uint64_t>(r) * dst_row_bytes;
    for (int j = 0; j < 128; ++j) row[b * 128 + j] = blk[j];
    for (int j = 0; j < 64; ++j) row[nb * 128 + b * 64 + j] = blk[128 + j];
    for (int j = 0; j < 16; ++j) row[nb * 192 + b * 16 + j] = blk[192 + j];
    row[nb * 208 + 2 * b] = blk[208];
    row[nb * 208 + 2 * b + 1] = blk[209];
}

template <class F>
bool dispatch_q8_type(GgmlType t, F&& f) {
    switch (t) {
        case GgmlType::Q4_0: f.template operator()<GgmlType::Q4_0>(); return true;
        case GgmlType::Q5_0: f.template operator()<GgmlType::Q5_0>(); return true;
        case GgmlType::Q8_0: f.template operator()<GgmlType::Q8_0>(); return true;
        case GgmlType::Q4_K: f.template operator()<GgmlType::Q4_K>(); return true;
        case GgmlType::Q5_K: f.template operator()<GgmlType::Q5_K>(); return true;
        case GgmlType::Q6_K: f.template operator()<GgmlType::Q6_K>(); return true;
        default: return false;
    }
}

}  // namespace

bool gemv_q8_supported(const GemvArgs& a, size_t workspace_bytes) {
    const bool type_ok = dispatch_q8_type(a.type, NoTypeOp{});
    // The kernels index a row's values, units and blocks in 32 bits (fewer
    // instructions per unit than 64-bit arithmetic): rows of up to 2^30 values.
    if (!type_ok || a.n_in <= 0 || a.n_in % 32 != 0 || a.n_in > kMaxRowValues) return false;
    // Q4_K/Q5_K units are 16-byte loads: the rows must keep that alignment.
    if (a.type == GgmlType::Q4_K || a.type == GgmlType::Q5_K) {
        if (!aligned16(a.w) || !aligned16(a.row_bytes) ||
            (a.offsets != nullptr && !aligned16(a.expert_bytes)))
            return false;
    } else if (reinterpret_cast<uintptr_t>(a.w) % 2 != 0 || a.row_bytes % 2 != 0 || a.expert_bytes % 2 != 0) {
        return false;
    }
    return q8_workspace_bytes(a.n_rows, a.n_in) <= workspace_bytes;
}

size_t q8_workspace_bytes(int64_t rows, int64_t n_in) {
    return q8_scales_offset(rows, n_in) + static_cast<size_t>(rows) * static_cast<size_t>(n_in / 32) * sizeof(float2);
}

namespace {

// One activation row per pass when rows are single (decode; experts with one routed
// token on average), else eight over two weight rows per warp.
bool single_rows(const GemvArgs& a) {
    return a.offsets ? a.n_rows <= a.n_experts : a.n_rows == 1;
}

// Quantizes a's activation rows (gathered through a.x_rows) into the workspace, or
// takes them prepared (ops/prepared.h): x's rows themselves, or before the gather
// (x_n_rows of them, read through x_rows by the kernel).
Q8Input quantize_activations(const GemvArgs& a, int8_t* workspace, cudaStream_t s) {
    if (a.x_prep != nullptr && a.x_rows == nullptr)
        return {q8_view(const_cast<void*>(a.x_prep), a.n_rows, a.n_in), nullptr};
    if (a.x_prep != nullptr && a.x_n_rows > 0 && single_rows(a))  // gathered: one-row kernels only
        return {q8_view(const_cast<void*>(a.x_prep), a.x_n_rows, a.n_in), a.x_rows};
    const Q8View xq = q8_view(workspace, a.n_rows, a.n_in);
    const bool x_vec = x_rows_vec16(a);
    launch(quantize_q8_kernel, grid_1d(a.n_rows * a.n_in / 4, 256), 256, 0, s, a.x, a.x_stride, a.x_rows, a.n_rows,
                                                                            a.n_in, x_vec, xq);
    HF2Q_CUDA_LAUNCH_CHECK();
    return {xq, nullptr};
}

}  // namespace

void launch_quantize_q8(const float* x, int64_t x_stride, int64_t rows, int64_t n, void* out, cudaStream_t s) {
    if (rows <= 0) return;
    HF2Q_ASSERT(n % 32 == 0);
    GemvArgs a;
    a.x = x;
    a.x_stride = x_stride;
    a.n_rows = rows;
    a.n_in = n;
    (void)quantize_activations(a, static_cast<int8_t*>(out), s);
}

namespace {

// Whether a one-row launch of these weights takes the short-rows variant (above).
template <GgmlType T>
bool short_rows(const Segments& g) {
    const int64_t rounds = (g.a[0].n_in / Unit<T>::kVals + 31) / 32;
    return g.a[0].offsets != nullptr && kShortRows > 1 && rounds <= kShortRounds;
}

// Gives each weight of g its blocks of rows_per_block rows (g.end: the running block
// counts) and returns the grid's width. The activation gather is already applied (by
// the quantization, or by the kernels through Q8Input::rows).
unsigned place_segments(Segments& g, int64_t rows_per_block) {
    unsigned total = 0;
    for (int i = 0; i < g.n; ++i) {
        g.a[i].x_rows = nullptr;
        total += static_cast<unsigned>((g.a[i].n_out + rows_per_block - 1) / rows_per_block);
        g.end[i] = total;
    }
    return total;
}

// gemv_q8_routed_kernel over a's routed rows (routed_launch): one warp an output row,
// kRoutedRows<T> routed rows a block row.
template <GgmlType T>
void launch_routed(const GemvArgs& a, const Q8Input& xq, cudaStream_t s, const RoutedCombine& cb = {}) {
    if constexpr (kRoutedRows<T> > 0) {
        constexpr int KE = kRoutedRows<T>;
        const dim3 grid(static_cast<unsigned>((a.n_out + kWarps - 1) / kWarps),
                        static_cast<unsigned>((a.n_rows + KE - 1) / KE));
        HF2Q_ASSERT(a.n_rows <= a.n_experts && grid.y <= 65535);  // single rows: int offsets
        if constexpr (kRoutedRows<T> == kRoutedShort) {
            if (cb.out != nullptr) {
                HF2Q_ASSERT(grid.y == 1 && cb.k == a.n_rows);
                launch(gemv_q8_routed_kernel<T, KE, true>, grid, kWarps * 32, 0, s, a, xq, cb);
                return;
            }
        }
        HF2Q_ASSERT(cb.out == nullptr);
        launch(gemv_q8_routed_kernel<T, KE, false>, grid, kWarps * 32, 0, s, a, xq, cb);
    }
}

// Launches the weights of `g` (all of one type) on the quantized activations.
void launch_segments(Segments g, int64_t max_active_experts, Q8Input xq, cudaStream_t s) {
    const bool single = single_rows(g.a[0]);
    const bool grouped = g.a[0].offsets != nullptr;
    if (grouped && !single && gemv_mma_supported(g.a[0])) {  // several rows an expert: the tensor cores
        HF2Q_ASSERT(g.n == 1 && xq.rows == nullptr);
        launch_gemv_mma(g.a[0], xq.q, max_active_experts, s);
        return;
    }
    dispatch_q8_type(g.a[0].type, [&]<GgmlType T>() {
        const bool short_one_row = single && short_rows<T>(g);
        const int64_t rows_per_warp = single ? (short_one_row ? kShortRows : 1) : grouped ? kGroupedRows : 2;
        const unsigned total = place_segments(g, kWarps * rows_per_warp);
        const dim3 grid(total, static_cast<unsigned>(grouped ? max_active_experts : 1));
        HF2Q_ASSERT(grid.y <= 65535);
        // Grouped launches have no segments: the registers go to a one-latency expert lookup.
        if (single && grouped && routed_launch<T>(short_one_row, g.a[0].n_rows)) {
            HF2Q_ASSERT(g.n == 1);
            launch_routed<T>(g.a[0], xq, s);
        } else if (short_one_row)
            launch(gemv_q8_kernel<T, 1, kShortRows, 1, false>, grid, kWarps * 32, 0, s, g, xq);
        else if (single && grouped)
            launch(gemv_q8_kernel<T, 1, 1, 1, false>, grid, kWarps * 32, 0, s, g, xq);
        else if (single)
            launch(gemv_q8_kernel<T, 1, 1, 1, true>, grid, kWarps * 32, 0, s, g, xq);
        else if (grouped)
            launch(gemv_q8_kernel<T, 8, kGroupedRows, 1, false>, grid, kWarps * 32, 0, s, g, xq);
        else if (g.n > 1)
            launch(gemv_q8_kernel<T, 8, 2, 1, true>, grid, kWarps * 32, 0, s, g, xq);
        else
            launch(gemv_q8_kernel<T, 8, 2, 1, false>, grid, kWarps * 32, 0, s, g, xq);
    });
    HF2Q_CUDA_LAUNCH_CHECK();
}

}  // namespace

void launch_gemv_q8(const GemvArgs& a, int64_t max_active_experts, int8_t* workspace, cudaStream_t s) {
    if (a.n_out <= 0 || a.n_rows <= 0 || max_active_experts <= 0) return;
    const Q8Input xq = quantize_activations(a, workspace, s);
    Segments g;
    g.a[0] = a;
    g.n = 1;
    launch_segments(g, max_active_experts, xq, s);
}

bool launch_gemv_q8_geglu(const GemvArgs& a, int64_t max_active_experts, size_t workspace_bytes, int8_t* workspace,
                          cudaStream_t s) {
    // Where launch_gemv_q8 would take the tensor-core kernel for the plain product
    // (launch_segments), and that kernel the tiles in turn (gemv_mma_geglu_supported,
    // which also asks for offsets and output rows).
    if (a.n_rows <= 0 || max_active_experts <= 0 || single_rows(a) || !gemv_q8_supported(a, workspace_bytes) ||
        !gemv_mma_geglu_supported(a))
        return false;
    const Q8Input xq = quantize_activations(a, workspace, s);
    HF2Q_ASSERT(xq.rows == nullptr);  // (several rows an expert)
    launch_gemv_mma(a, xq.q, max_active_experts, s);
    return true;
}

bool launch_gemv_q8_combined(const GemvArgs& a, const ops::MoeCombineParams& c, size_t workspace_bytes,
                             int8_t* workspace, cudaStream_t s) {
    if (a.n_out <= 0 || a.n_rows <= 0 || a.offsets == nullptr || c.n_tokens != 1 || c.k != a.n_rows ||
        c.n != a.n_out || !gemv_q8_supported(a, workspace_bytes))
        return false;
    bool launched = false;
    dispatch_q8_type(a.type, [&]<GgmlType T>() {
        // The routed kernel's one-row launch of short rows (launch_segments' choice),
        // every routed row in one block row.
        if constexpr (kRoutedRows<T> == kRoutedShort) {
            Segments g;
            g.a[0] = a;
            g.n = 1;
            if (!single_rows(a) || !short_rows<T>(g) || !routed_launch<T>(true, a.n_rows) || a.n_rows > kRoutedShort)
                return;
            const Q8Input xq = quantize_activations(a, workspace, s);
            launch_routed<T>(a, xq, s, RoutedCombine{c.slot_of, c.weights, c.out, static_cast<int>(c.k)});
            HF2Q_CUDA_LAUNCH_CHECK();
            launched = true;
        }
    });
    return launched;
}

namespace {

// Calls f.template operator()<T0, T1>() for the type pairs gemv_q8_mixed_kernel is
// built for (in either order): those the quantization presets put on one input
// (convert/ftype.cpp: Q4_K_M's and Q5_K_M's Q6_K attn_v, Q4_K_S's Q5_K attn_v).
template <class F>
bool dispatch_mixed_pair(GgmlType t0, GgmlType t1, F&& f) {
    const auto is = [&](GgmlType x, GgmlType y) { return (t0 == x && t1 == y) || (t0 == y && t1 == x); };
    if (is(GgmlType::Q4_K, GgmlType::Q6_K)) {
        f.template operator()<GgmlType::Q4_K, GgmlType::Q6_K>();
    } else if (is(GgmlType::Q5_K, GgmlType::Q6_K)) {
        f.template operator()<GgmlType::Q5_K, GgmlType::Q6_K>();
    } else if (is(GgmlType::Q4_K, GgmlType::Q5_K)) {
        f.template operator()<GgmlType::Q4_K, GgmlType::Q5_K>();
    } else {
        return false;
    }
    return true;
}

// One token's products of weights of exactly two types (a mixed pair), in one
// launch of gemv_q8_mixed_kernel; false (nothing launched) for any other set.
bool launch_mixed(const GemvArgs* a, int n, const Q8Input& xq, cudaStream_t s) {
    Segments g;
    GgmlType t[2] = {};
    int types = 0;
    for (int i = 0; i < n; ++i) {
        if (a[i].n_out <= 0) continue;
        if (types == 0 || (a[i].type != t[0] && types == 1)) t[types++] = a[i].type;
        else if (a[i].type != t[0] && a[i].type != t[1]) return false;  // a third type
        g.a[g.n++] = a[i];
    }
    if (types != 2) return false;
    const unsigned total = place_segments(g, kWarps);  // one row a warp
    return dispatch_mixed_pair(t[0], t[1], [&]<GgmlType T0, GgmlType T1>() {
        launch(gemv_q8_mixed_kernel<T0, T1>, dim3(total), kWarps * 32, 0, s, g, xq);
        HF2Q_CUDA_LAUNCH_CHECK();
    });
}

}  // namespace

void launch_gemv_q8_multi(const GemvArgs* a, int n, int8_t* workspace, cudaStream_t s) {
    HF2Q_ASSERT(n >= 1 && n <= kMaxSegments && a[0].offsets == nullptr);
    if (a[0].n_rows <= 0) return;
    const Q8Input xq = quantize_activations(a[0], workspace, s);  // every a[i] shares x
    if (a[0].n_rows == 1 && launch_mixed(a, n, xq, s)) return;
    bool done[kMaxSegments] = {};
    for (int i = 0; i < n; ++i) {  // one launch per weight type, in order of first use
        if (done[i]) continue;
        Segments g;
        for (int j = i; j < n; ++j) {
            if (done[j] || a[j].type != a[i].type) continue;
            done[j] = true;
            if (a[j].n_out > 0) g.a[g.n++] = a[j];
        }
        if (g.n > 0) launch_segments(g, 1, xq, s);
    }
}

uint64_t q6k_planes_row_bytes(int64_t n_in) {
    return (static_cast<uint64_t>(n_in / 256) * 210 + 15) / 16 * 16;
}

void launch_repack_q6k_planes(const uint8_t* src, uint64_t src_row_bytes, uint8_t* dst, int64_t rows, int64_t n_in,
                              cudaStream_t s) {
    HF2Q_ASSERT(n_in % 256 == 0);
    const int64_t nb = n_in / 256;
    launch(repack_q6k_planes_kernel, grid_1d(rows * nb, 256), 256, 0, s, src, src_row_bytes, dst,
           q6k_planes_row_bytes(n_in), rows, nb);
    HF2Q_CUDA_LAUNCH_CHECK();
}

void launch_gemv_q6k_planes(const GemvArgs& a, int8_t* workspace, cudaStream_t s) {
    HF2Q_ASSERT(a.n_rows == 1 && a.n_in % 256 == 0 && a.n_in <= kMaxRowValues && a.offsets == nullptr && aligned16(a.w) &&
                a.row_bytes == q6k_planes_row_bytes(a.n_in));
    const Q8Input xq = quantize_activations(a, workspace, s);
    // Rows of up to 3,072 values (the 26B-A4B's 2,816, E4B's 2,560, E2B's 1,536) keep
    // their activations in registers: H200, LM head 234 -> 221 us. Six rounds (the
    // 31B's 5,376) took 197 registers and lost: 445 -> 498 us.
    if (kPlaneRows > 0 && a.n_in / 32 <= 32 * 3)
        launch(gemv_q6k_planes_xreg_kernel<3>, grid_1d(a.n_out, kWarps * kPlaneRows), kWarps * 32, 0, s, a, xq);
    else
        launch(gemv_q6k_planes_kernel, grid_1d(a.n_out, kWarps), kWarps * 32, 0, s, a, xq);
    HF2Q_CUDA_LAUNCH_CHECK();
}

}  // namespace hf2q::cuda

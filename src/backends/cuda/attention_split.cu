// Attention of single query tokens on f32 CUDA cores (in tensor-core precision, the
// scores of f16, E4M3 and i8 pools at head sizes 256 and 512 on tensor cores, and P·V
// of the 8-bit ones: split_mma_ok, split_mma_pv), optionally split along the key range
// (flash decoding).
// Used for decode tokens, mixed batches and the rows of a prefill tile that are not
// part of a long run (attention_common.cuh).
//
// One block of 128 threads per (token, group of HB query heads of one KV head,
// split). The block walks its share of the token's visible keys [lo, pos] in chunks
// of CK keys (16 KiB of K and 16 KiB of V: CK·D = 4096 values of an f32 cache, 8192
// of an f16 one), double-buffered with cp.async (K and V of chunk c + 1 land while
// chunk c is computed). Per chunk:
//   1. scores: thread (key j, part dp) dots PV = 32 (f32) or 64 (f16) head-dim
//      values of K row j with the HB query rows (q in shared memory, broadcast) ->
//      partial sums in shared memory;
//   2. softmax: warp w owns heads w, w + 4, ...; sums the partials, keeps the running
//      max and sum (log2 units) and writes p = exp2(s − m);
//   3. P·V: thread (4 head-dim columns, key phase jp) accumulates HB float4s (with
//      the MMA score phase of an 8-bit pool, on tensor cores: split_mma_pv, each warp a
//      quarter of the head dimension).
// Every query head of the group reuses each K and V load (GQA), and all arithmetic
// is f32, so results match the CPU reference to rounding.
//
// n_split == 1 writes the normalised output (and, given out_prep, its prepared form
// from the same values, staged in shared memory); otherwise the unnormalised
// accumulator and (m, l) go to the workspace and attention.cu's combiner merges the
// splits.
//
// Blocks stride over the tokens (grid.x is capped), so a prefill batch whose tokens
// the tile kernel took costs a few thousand quick skips, not one block per token.
// Pool offsets of a chunk's keys are looked up one chunk ahead by CK threads (32-bit
// index arithmetic) and kept in shared memory.
#include <algorithm>
#include <cfloat>

#include "backends/cuda/attention_common.cuh"
#include "backends/cuda/q8.cuh"

namespace hf2q::cuda::attn {
namespace {

// Blocks along the tokens; more tokens are strided over.
constexpr int64_t kMaxTokenBlocks = 1024;

// KV: the cache element (float, half, kv_e4m3 or kv_i8, ops/attention.h); chunks are staged
// in shared memory as stored and converted to f32 when read (i8: the row scales are
// applied to the score and the softmax weight).
// PV_PAD: the V rows are padded by 16 bytes, as the K rows (the tensor-core P·V phase,
// split_mma_pv: a lane reads 4 rows two keys apart at once).
template <int D, class KV, bool PV_PAD = false>
struct SplitShape {
    static constexpr int kThreads = 128;
    static constexpr int kKeys = split_chunk_keys(D, sizeof(KV));  // CK: keys per chunk
    static constexpr int kParts = kThreads / kKeys;      // DP: parts per K row
    static constexpr int kPartVals = D / kParts;         // PV: values per part (32 or 64)
    static constexpr int kVPhases = kThreads / (D / 4);  // JP: key phases of the P·V threads
    static constexpr int kVec = 16 / sizeof(KV);         // values per 16-byte copy
    static constexpr int kKLd = D + kVec;  // K rows padded by 16 bytes: the score phase reads 8 rows at once
    static constexpr int kVLd = PV_PAD ? D + kVec : D;
    static_assert(kKeys <= kThreads && kParts * kKeys == kThreads && kPartVals % 32 == 0 && kVPhases >= 1,
                  "unexpected split shape");
    // Shared memory, in bytes (every part a multiple of 16).
    static constexpr size_t kKBytes = 2 * size_t{kKeys} * kKLd * sizeof(KV);  // [2][CK][KLD]
    static constexpr size_t kVBytes = 2 * size_t{kKeys} * kVLd * sizeof(KV);  // [2][CK][VLD]
};

// The score phase on tensor cores (MMA = true; tensor-core precision only): S^T = K·Q^T
// as m16n8k16 tiles with the chunk's K rows as the 16-row operand and the HB query
// heads (zero-padded to 8) as the 8-column one, so a GQA group of 2 wastes 3/4 of the
// narrow side, not 7/8 of the wide one. F16 operands: K exactly (f16 pools, and E4M3 and
// i8 codes converted exactly; i8 scales stay on the score), Q rounded to F16 as in the
// tile kernel; f32 accumulators. Each warp takes one 16-key tile of the chunk and a
// share of the head dimension. The k index of the MMA is permuted so a lane's four
// values of a row are consecutive: fragment column pairs (2c, 2c + 1) and (2c + 8,
// 2c + 9) hold dims 4c .. 4c + 3 of the 16, one 4- or 8-byte load each.
// Accumulator chains of a warp's score tile: 1 (default: DK / 16 dependent MMAs, 16 for
// the i8 sliding layers' 64-key chunks) or 2 (even and odd steps apart, summed at the end:
// half the chain's latency between the chunk's first two barriers, for 4 registers), for
// the A/B. Measured (H100, session 44, out/s44a.sh): no change (i8 at 64 sequences 119.8 vs
// 120.2 us, the int8 row 5,075 / 5,077 vs 5,073 / 5,077).
#ifndef HF2Q_SPLIT_SCORE_CHAINS
#define HF2Q_SPLIT_SCORE_CHAINS 1
#endif
static_assert(HF2Q_SPLIT_SCORE_CHAINS == 1 || HF2Q_SPLIT_SCORE_CHAINS == 2, "HF2Q_SPLIT_SCORE_CHAINS: 1 or 2");
constexpr int kScoreChains = HF2Q_SPLIT_SCORE_CHAINS;
template <int D, class KV>
constexpr bool split_mma_ok() {
    constexpr int ck = SplitShape<D, KV>::kKeys;
    return (D == 256 || D == 512) && sizeof(KV) <= 2 && ck >= 16 && 64 % ck == 0;
}
#ifndef HF2Q_SPLIT_MMA
#define HF2Q_SPLIT_MMA 1
#endif

// The P·V phase on tensor cores as well (with the MMA score phase, so in tensor-core
// precision only): O^T += V^T·P^T as m16n8k16 tiles, the chunk's staged V rows as the
// 16-row operand (16 head-dim rows × 16 keys) and P (heads zero-padded to 8) as the
// 8-column one. Warp w takes a quarter of the head dimension for every key of the
// chunk, so the f32 path's reduction over key phases is gone. F16 operands: V exactly
// (E4M3 and i8 codes converted exactly), P rounded to F16
// after the i8 row scale and times 2^8 (kPvScale, exact), so that weights down to
// 2^-22 stay normal F16 numbers; the factor comes off in f32 at the end. The f32
// accumulators take the softmax's per-chunk correction as in the f32 path.
// For the 8-bit caches only: on an H100, 64 sequences at 1,024 tokens went 5,003 -> 5,081
// tokens/s with the int8 cache and 4,324 -> 4,282 with the f16 one (session 42), whose
// f32 P·V reads f16 pairs at no conversion cost and is bound by the copy, not the issue.
// A compile definition for the A/B (0: P·V on f32 cores everywhere).
#ifndef HF2Q_SPLIT_MMA_PV
#define HF2Q_SPLIT_MMA_PV 1
#endif
template <class KV, bool MMA>
constexpr bool split_mma_pv() {
    return MMA && HF2Q_SPLIT_MMA_PV && sizeof(KV) == 1;
}
[[maybe_unused]] constexpr float kPvScale = 256.0f, kPvUnscale = 1.0f / 256.0f;
// m16 tiles of a warp's quarter of the head dimension (4 or 8).
template <int D>
inline constexpr int kPvTiles = D / 4 / 16;

// Partial dot products a key's score is summed from: the MMA score phase's shares of
// the head dimension (64 / CK) or the f32 phase's parts (DP).
template <int D, class KV, bool MMA>
constexpr int split_score_parts() {
    using S = SplitShape<D, KV>;
    return MMA ? 64 / S::kKeys : S::kParts;
}

template <int D, int HB, class KV, bool MMA>
constexpr size_t split_smem_bytes() {
    using S = SplitShape<D, KV, split_mma_pv<KV, MMA>()>;
    return S::kKBytes + S::kVBytes +
           4 * ((MMA ? 0 : size_t{HB} * D)                                // f32 q rows
                + size_t{split_score_parts<D, KV, MMA>()} * HB * S::kKeys  // partial dots
                + size_t{HB} * S::kKeys              // probabilities
                + 4 * size_t{HB}                     // m, l, correction (+ padding)
                + 4 * size_t{S::kKeys}               // pool offsets of two chunks (int64)
                + (kv_scaled<KV> ? 4 * size_t{S::kKeys} : 0));  // i8: K and V row scales of two chunks
}

// Writes G 4-value groups staged in shared memory (v) to row t of out from group c0
// on, given out_bf16 their BF16 rows, and given out_prep their prepared form (q8.cuh):
// NT threads, 8 per 32-value block; every lane of a warp with any group in range takes
// part in the shuffles.
template <int G, int NT>
__device__ __forceinline__ void write_rows(const float* v, const ops::AttentionParams& p, int64_t t,
                                           int64_t c0) {
    static_assert(G % 8 == 0, "whole 32-value blocks");
    const int64_t n = p.n_heads * p.head_dim;
    float* const out = p.out + t * n + 4 * c0;
    uint2* const ob = p.out_bf16 != nullptr
                          ? reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(p.out_bf16) + t * n + 4 * c0)
                          : nullptr;
    Q8View q;  // this row of the prepared form, from group c0 on (row 0 of the view)
    if (p.out_prep != nullptr) {
        const Q8View all = q8_view(p.out_prep, p.n_tokens, n);
        q.q = all.q + t * n + 4 * c0;
        q.ds = all.ds + t * (n / 32) + c0 / 8;
    }
    const int tid = static_cast<int>(threadIdx.x);
#pragma unroll 1
    for (int u0 = tid / 32 * 32; u0 < G; u0 += NT) {  // warp-uniform bound
        const int u = u0 + tid % 32;
        const bool in = u < G;
        float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (in) {
            const float4 f = *reinterpret_cast<const float4*>(v + 4 * u);
            *reinterpret_cast<float4*>(out + 4 * u) = f;
            if (ob != nullptr) ob[u] = make_uint2(pack_bf16(f.x, f.y), pack_bf16(f.z, f.w));
            x[0] = f.x, x[1] = f.y, x[2] = f.z, x[3] = f.w;
        }
        if (q.q != nullptr) quantize_q8_values(x, in, q, 0, n, u);
    }
}

// Four consecutive K values of a staged row as two F16 pairs (exact): values 0, 1 in
// lo and 2, 3 in hi (the MMA score phase's permuted k index).
template <class KV>
__device__ __forceinline__ void k_quad_f16(const KV* r, uint32_t& lo, uint32_t& hi) {
    if constexpr (sizeof(KV) == 2) {
        const uint2 u = *reinterpret_cast<const uint2*>(r);
        lo = u.x;
        hi = u.y;
    } else if constexpr (kv_scaled<KV>) {
        const uint32_t u = *reinterpret_cast<const uint32_t*>(r);
        lo = i8x2_to_half2_bits(u, 0);
        hi = i8x2_to_half2_bits(u, 1);
    } else {  // E4M3
        const uint32_t u = *reinterpret_cast<const uint32_t*>(r);
        const half2 a = e4m3x2_to_half2(static_cast<uint16_t>(u)), b = e4m3x2_to_half2(static_cast<uint16_t>(u >> 16));
        lo = *reinterpret_cast<const uint32_t*>(&a);
        hi = *reinterpret_cast<const uint32_t*>(&b);
    }
}

// k_quad_f16 for the i8 pools with HF2Q_SPLIT_I8_FOLD: the codes as 1152 + code (exact
// F16 integers), the offset left for the caller to take off the scores. (A template, so
// that nvcc accepts it where the switch leaves it unused.)
template <class KV>
__device__ __forceinline__ void k_quad_biased(const KV* r, uint32_t& lo, uint32_t& hi) {
    static_assert(kv_scaled<KV>, "the i8 pools' codes");
    const uint32_t u = *reinterpret_cast<const uint32_t*>(r) ^ 0x80808080u;
    lo = __byte_perm(u, 0x64646464u, 0x4140u);
    hi = __byte_perm(u, 0x64646464u, 0x4342u);
}

// Head-dimension offset (in the warp's quarter) of accumulator row g + 8h of P·V tile
// i. The rows are permuted so that one 4-byte word of a V row (4 consecutive dims)
// feeds two tiles: dims 32p + 4g + 0, 1 are rows g, g + 8 of tile 2p, dims + 2, 3
// those of tile 2p + 1.
template <class KV>
__device__ __forceinline__ int pv_row_dim(int i, int h, int g) {
    static_assert(sizeof(KV) == 1, "P·V on tensor cores reads 8-bit pools (split_mma_pv)");
    return 32 * (i / 2) + 4 * g + 2 * (i % 2) + h;
}

// Byte codes 2k and 2k + 1 of w as an F16 pair (exact), 2k in the low half.
template <class KV>
__device__ __forceinline__ uint32_t code2_to_half2(uint32_t w, int k) {
    if constexpr (kv_scaled<KV>) {
        return i8x2_to_half2_bits(w, k);
    } else {  // E4M3
        const half2 h = e4m3x2_to_half2(static_cast<uint16_t>(w >> (16 * k)));
        return *reinterpret_cast<const uint32_t*>(&h);
    }
}

// One 16-key step of the warp's T P·V tiles: o[i] += A_i·B, A_i the tile's V^T
// fragment (16 dims × 16 keys), B = (b0, b1) the step's P^T fragment. v points at the
// step's first key row (rows VLD apart) at the warp's first dim. Each fragment is
// used as soon as it is formed, so ptxas chooses how far to load ahead.
template <class KV, int T, int VLD>
__device__ __forceinline__ void pv_step(float (&o)[T][4], const KV* v, int lane, uint32_t b0, uint32_t b1) {
    // Lane (g, t) reads dims 4g .. 4g + 3 of keys 2t, 2t + 1, 2t + 8, 2t + 9 (one word
    // each) and pairs the keys byte by byte (PRMT) before the exact conversion.
    static_assert(T % 2 == 0, "byte pools take P·V tiles in pairs");
    const KV* r = v + 2 * (lane % 4) * VLD + 4 * (lane / 4);
#pragma unroll
    for (int q = 0; q < T / 2; ++q) {
        const KV* rq = r + 32 * q;
        const uint32_t w0 = *reinterpret_cast<const uint32_t*>(rq);
        const uint32_t w1 = *reinterpret_cast<const uint32_t*>(rq + VLD);
        const uint32_t w8 = *reinterpret_cast<const uint32_t*>(rq + 8 * VLD);
        const uint32_t w9 = *reinterpret_cast<const uint32_t*>(rq + 9 * VLD);
        const uint32_t d01 = __byte_perm(w0, w1, 0x5140), d23 = __byte_perm(w0, w1, 0x7362);
        const uint32_t e01 = __byte_perm(w8, w9, 0x5140), e23 = __byte_perm(w8, w9, 0x7362);
        const uint32_t a0[4] = {code2_to_half2<KV>(d01, 0), code2_to_half2<KV>(d01, 1),
                                code2_to_half2<KV>(e01, 0), code2_to_half2<KV>(e01, 1)};
        const uint32_t a1[4] = {code2_to_half2<KV>(d23, 0), code2_to_half2<KV>(d23, 1),
                                code2_to_half2<KV>(e23, 0), code2_to_half2<KV>(e23, 1)};
        mma_f16(o[2 * q], a0, b0, b1);
        mma_f16(o[2 * q + 1], a1, b0, b1);
    }
}

// One chunk of the tensor-core P·V phase for warp w: rescales the accumulators by the
// softmax's correction, then adds V^T·P^T over the chunk's keys. vb: the chunk's V
// rows; ps: its probabilities [HB][CK], already times kPvScale (zero past pos).
template <int D, int HB, int CK, int VLD, class KV>
__device__ __forceinline__ void pv_chunk(float (&o)[kPvTiles<D>][4], const KV* vb, const float* ps,
                                         const float* corr_s, int warp, int lane) {
    constexpr int T = kPvTiles<D>;
    static_assert(HB <= 8 && CK % 16 == 0, "P·V tiles: 8 heads, 16 keys");
    const int g = lane / 4, h2 = 2 * (lane % 4);  // accumulator columns: heads h2, h2 + 1
    const float f0 = h2 < HB ? corr_s[h2] : 0.0f, f1 = h2 + 1 < HB ? corr_s[h2 + 1] : 0.0f;
#pragma unroll
    for (int i = 0; i < T; ++i) {
        o[i][0] *= f0;
        o[i][1] *= f1;
        o[i][2] *= f0;
        o[i][3] *= f1;
    }
    const KV* v = vb + warp * (D / 4);
#pragma unroll
    for (int k0 = 0; k0 < CK; k0 += 16) {
        // B fragment: P of head g, keys h2, h2 + 1 (b0) and + 8 (b1) of the step.
        uint32_t b0 = 0, b1 = 0;
        if (g < HB) {
            const float2 x = *reinterpret_cast<const float2*>(ps + g * CK + k0 + h2);
            const float2 y = *reinterpret_cast<const float2*>(ps + g * CK + k0 + h2 + 8);
            b0 = pack_half2(x.x, x.y);
            b1 = pack_half2(y.x, y.y);
        }
        pv_step<KV, T, VLD>(o, v + k0 * VLD, lane, b0, b1);
    }
}

// Stages warp w's share of the P·V accumulators as f32 rows [HB][D] in os, times f
// (kPvUnscale, and given l, 1 / l of the head: the normalised output).
template <int D, int HB, class KV>
__device__ __forceinline__ void pv_stage_rows(float* os, const float (&o)[kPvTiles<D>][4], const float* l,
                                              int warp, int lane) {
    const int g = lane / 4, h2 = 2 * (lane % 4);
    float* const ow = os + warp * (D / 4);
#pragma unroll
    for (int c = 0; c < 2; ++c) {
        const int hh = h2 + c;
        if (hh >= HB) continue;
        const float f = l != nullptr ? kPvUnscale * (1.0f / l[hh]) : kPvUnscale;
#pragma unroll
        for (int i = 0; i < kPvTiles<D>; ++i) {
            ow[hh * D + pv_row_dim<KV>(i, 0, g)] = o[i][c] * f;
            ow[hh * D + pv_row_dim<KV>(i, 1, g)] = o[i][2 + c] * f;
        }
    }
}

// Whether a block fetches its first chunk before the wait on the previous kernel
// (split_item's `early`): given the host's promise that the keys before pos[t] are
// from earlier batches (decode), without the tile plan's flags (written by a kernel of
// this launch) and without i8 row scales (the scale of the key at pos is this batch's).
// Everything read before the wait was written two or more kernels back: the PDL
// chain lets a kernel start only once its predecessor has passed its own wait, that
// is, once every kernel before the predecessor has finished (common.cuh).
// A compile definition for the A/B (0: every block fetches after the wait).
#ifndef HF2Q_SPLIT_FETCH_EARLY
#define HF2Q_SPLIT_FETCH_EARLY 1
#endif
template <class KV>
__device__ __forceinline__ bool split_fetch_early(const ops::AttentionParams& p, const int* handled) {
    return HF2Q_SPLIT_FETCH_EARLY && p.earlier_keys_stored && handled == nullptr && !kv_scaled<KV>;
}

// One (token, head group, split) work item; the caller synchronises between items.
// early (split_fetch_early, the block's first item): the block looks up its first
// chunk's pool offsets and copies all of its keys but the one at pos before
// pdl_begin(), which this function then calls; that key (the previous kernel's store)
// follows after the wait. Those lookups and copies were the split's first two
// dependent memory latencies after the wait. The same values reach shared memory
// either way, so the results are the same bits.
template <int D, int HB, class KV, bool MMA>
__device__ __forceinline__ void split_item(const ops::AttentionParams& p, int64_t t, int n_split,
                                           float* __restrict__ part, float scale_log2, unsigned char* smem,
                                           bool early) {
    static_assert(!MMA || split_mma_ok<D, KV>(), "no MMA score phase for this shape");
    constexpr bool PVM = split_mma_pv<KV, MMA>();  // P·V on tensor cores
    using S = SplitShape<D, KV, PVM>;
    constexpr int CK = S::kKeys, JP = S::kVPhases, KLD = S::kKLd, VLD = S::kVLd, NT = S::kThreads;
    static_assert(!PVM || NT == 128, "the P·V tiles give each of 4 warps a quarter of the head dimension");
    constexpr int VEC = S::kVec, PV = S::kPartVals;
    const KV* const k_pool = static_cast<const KV*>(p.k_pool);
    const KV* const v_pool = static_cast<const KV*>(p.v_pool);

    const int64_t h0 = int64_t{blockIdx.y} * HB;
    const int split = static_cast<int>(blockIdx.z);
    const int64_t kvh = h0 / (p.n_heads / p.n_kv_heads);
    const int64_t kv_row = p.n_kv_heads * D;
    const int32_t bs = static_cast<int32_t>(p.block_size);
    const int32_t pos = p.pos[t];
    const int32_t lo = window_lo(pos, p.window);
    const int32_t* table = p.tables[t];
    // Chunks of this split (every split but possibly the last gets `per` chunks).
    const int n_chunks = (pos - lo + 1 + CK - 1) / CK;
    const int per = (n_chunks + n_split - 1) / n_split;
    const int c_begin = split * per;
    const int c_end = min(n_chunks, c_begin + per);

    constexpr int RP = split_score_parts<D, KV, MMA>();
    // MMA score phase: key tiles of 16 a chunk (MT), shares of the head dimension (KP,
    // DK values each); a warp's (tile, share) is the same in every chunk.
    constexpr int MT = MMA ? CK / 16 : 1, KP = MMA ? 4 / MT : 1, DK = D / KP;
    KV* ks = reinterpret_cast<KV*>(smem);                 // [2][CK][KLD]
    KV* vs = reinterpret_cast<KV*>(smem + S::kKBytes);    // [2][CK][VLD]
    float* qs = reinterpret_cast<float*>(smem + S::kKBytes + S::kVBytes);  // [HB][D] (f32 phase)
    float* red = qs + (MMA ? 0 : HB * D);  // [RP][HB][CK]
    float* ps = red + RP * HB * CK;        // [HB][CK] (PVM: times kPvScale)
    float* m_s = ps + HB * CK;       // [HB]
    float* l_s = m_s + HB;           // [HB]
    float* corr_s = l_s + HB;        // [HB]
    int64_t* koff =
        reinterpret_cast<int64_t*>(corr_s + 2 * HB);  // [2][CK] (8-byte aligned: even offset)
    // i8 pools: the rows' scales, kept beside their offsets (K scales the score, V the
    // softmax weight).
    float* ksc = reinterpret_cast<float*>(koff + 2 * CK);  // [2][CK]
    float* vsc = ksc + 2 * CK;                              // [2][CK]
    auto row_scale = [&](const float* sc, int64_t off) { return off >= 0 ? sc[off / D] : 0.0f; };

    const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;

    // Pool offset of row r of chunk c (this KV head), or -1 past pos.
    auto key_offset = [&](int c, int r) -> int64_t {
        const int32_t j = lo + c * CK + r;
        if (c >= c_end || j > pos) return -1;
        return ops::kv_pool_index(table[j / bs], j % bs, kvh, bs, kv_row, D);
    };
    // Copies 16-byte piece u (row u / (D / VEC)) of the chunk whose offsets are in koff
    // slot b into buffer b; keys past pos become zeros.
    auto issue_piece = [&](int b, int u) {
        const int r = u / (D / VEC), col = (u % (D / VEC)) * VEC;
        const int64_t off = koff[b * CK + r];
        const bool ok = off >= 0;
        cp_async16(ks + (b * CK + r) * KLD + col, k_pool + (ok ? off + col : 0), ok ? 16 : 0);
        cp_async16(vs + (b * CK + r) * VLD + col, v_pool + (ok ? off + col : 0), ok ? 16 : 0);
    };
    // Copies chunk c into buffer b, but for row `skip` (-1: none).
    auto issue = [&](int b, int skip) {
#pragma unroll
        for (int u = tid; u < CK * D / VEC; u += NT)
            if (u / (D / VEC) != skip) issue_piece(b, u);
    };
    // Looks up the pool offsets (and i8 row scales) of the first two chunks, then
    // copies the first chunk but for row `skip` (-1: none).
    auto start_first_chunk = [&](int skip) {
        if (tid < CK) {
            koff[tid] = key_offset(c_begin, tid);
            koff[CK + tid] = key_offset(c_begin + 1, tid);
            if constexpr (kv_scaled<KV>) {
                ksc[tid] = row_scale(p.k_scale, koff[tid]);
                vsc[tid] = row_scale(p.v_scale, koff[tid]);
                ksc[CK + tid] = row_scale(p.k_scale, koff[CK + tid]);
                vsc[CK + tid] = row_scale(p.v_scale, koff[CK + tid]);
            }
        }
        __syncthreads();  // the offsets, for every thread's copies
        if (c_begin < c_end) issue(0, skip);
    };
    // The row of the key at pos when it lies in the first chunk (-1: it does not).
    const int pos_row = c_begin < c_end && c_begin == n_chunks - 1 ? pos - lo - c_begin * CK : -1;
    if (early) {
        start_first_chunk(pos_row);
        pdl_begin();
    }

    // MMA: lane (g, t)'s B fragments of the query rows in F16, kept in registers for
    // the whole item (a warp's share kp of the head dimension is the same in every
    // chunk), the k index permuted as in the score phase: values 4t .. 4t + 3 of each
    // 16 of head g's share (zeros past HB). Why registers: an F16 tile in shared memory
    // (8.3 KB at head size 512) held the 512 kernel of 8 heads a block to 2 blocks an
    // SM; without it (and with only the score phase's partial sums) it fits 3, so a
    // third more of the KV cache is in flight. H200, 26B-A4B, 64 sequences at 1,024:
    // 4,798 / 4,801 -> 4,843 / 4,844 tokens/s with registers at head size 512, 4,859 /
    // 4,861 at every head size (session 33); session 34, every head size against 512
    // only: 4,779 / 4,796 -> 4,818 / 4,813, tg128 502.9 -> 503.8 (docs/performance.md).
    uint32_t qf[MMA ? 2 * (DK / 16) : 1];
    if constexpr (MMA) {
        const int hh = lane / 4, kp = warp / MT;
        const float* qrow = p.q + (t * p.n_heads + h0 + (hh < HB ? hh : 0)) * D + kp * DK + 4 * (lane % 4);
#pragma unroll
        for (int kk = 0; kk < DK / 16; ++kk) {
            float4 f = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (hh < HB) f = __ldg(reinterpret_cast<const float4*>(qrow + 16 * kk));
            qf[2 * kk] = pack_half2(f.x, f.y);
            qf[2 * kk + 1] = pack_half2(f.z, f.w);
        }
    } else {
        for (int u = tid; u < HB * D / 4; u += NT) {
            const int hh = u / (D / 4), c = (u % (D / 4)) * 4;
            *reinterpret_cast<float4*>(qs + hh * D + c) =
                __ldg(reinterpret_cast<const float4*>(p.q + (t * p.n_heads + h0 + hh) * D + c));
        }
    }
    if (tid < HB) {
        m_s[tid] = -FLT_MAX;  // see attention_tile.cu: avoids inf − inf
        l_s[tid] = 0.0f;
    }

    // P·V thread layout: 4 columns d4·4 .. d4·4 + 3, keys jp, jp + JP, ...
    [[maybe_unused]] const int d4 = tid % (D / 4), jp = tid / (D / 4);
    [[maybe_unused]] float4 acc[HB];
#pragma unroll
    for (int hh = 0; hh < HB; ++hh) acc[hh] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    // Tensor-core P·V: warp w's m16n8 accumulators (pv_chunk).
    [[maybe_unused]] float o[PVM ? kPvTiles<D> : 1][4] = {};

    if (!early) {
        start_first_chunk(-1);
    } else if (pos_row >= 0) {  // the key at pos, stored by the previous kernel
        for (int u = tid; u < D / VEC; u += NT) issue_piece(0, pos_row * (D / VEC) + u);
    }
    cp_async_commit();
    for (int c = c_begin; c < c_end; ++c) {
        const int b = (c - c_begin) & 1;
        if (c + 1 < c_end) issue(b ^ 1, -1);
        cp_async_commit();
        // Offsets of chunk c + 2 (slot b, free once chunk c was issued), stored in phase 3.
        const int64_t next_off = tid < CK ? key_offset(c + 2, tid) : -1;
        float next_ks = 0.0f, next_vs = 0.0f;
        if constexpr (kv_scaled<KV>) {
            next_ks = row_scale(p.k_scale, next_off);
            next_vs = row_scale(p.v_scale, next_off);
        }
        cp_async_wait<1>();
        __syncthreads();  // chunk c (and, on the first pass, q, m, l) visible

        if constexpr (MMA) {  // 1. partial scores on tensor cores (split_mma_ok)
            const int mt = warp % MT, kp = warp / MT;
            const KV* k0 = ks + (b * CK + mt * 16 + lane / 4) * KLD + kp * DK + 4 * (lane % 4);
            const KV* k1 = k0 + 8 * KLD;
            float c4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            [[maybe_unused]] float c4b[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // kScoreChains == 2: odd steps
#pragma unroll
            for (int kk = 0; kk < DK / 16; ++kk) {
                uint32_t a[4];
                k_quad_f16(k0 + 16 * kk, a[0], a[2]);
                k_quad_f16(k1 + 16 * kk, a[1], a[3]);
                mma_f16(kScoreChains == 2 && kk % 2 == 1 ? c4b : c4, a, qf[2 * kk], qf[2 * kk + 1]);
            }
            if constexpr (kScoreChains == 2) {
#pragma unroll
                for (int i = 0; i < 4; ++i) c4[i] += c4b[i];
            }
            // c4: keys lane / 4 and + 8 of the tile, heads 2·(lane % 4) and + 1.
            const int j = mt * 16 + lane / 4, hh = 2 * (lane % 4);
            if (hh < HB) {
                red[(kp * HB + hh) * CK + j] = c4[0];
                red[(kp * HB + hh) * CK + j + 8] = c4[2];
            }
            if (hh + 1 < HB) {
                red[(kp * HB + hh + 1) * CK + j] = c4[1];
                red[(kp * HB + hh + 1) * CK + j + 8] = c4[3];
            }
        } else {  // 1. partial scores
            const int j = tid % CK, dp = tid / CK;
            const KV* kr = ks + (b * CK + j) * KLD + dp * PV;
            float dot[HB];
#pragma unroll
            for (int hh = 0; hh < HB; ++hh) dot[hh] = 0.0f;
#pragma unroll
            for (int i = 0; i < PV / 4; ++i) {
                const float4 k4 = load_kv4(kr + 4 * i);
#pragma unroll
                for (int hh = 0; hh < HB; ++hh) {
                    const float4 q4 =
                        *reinterpret_cast<const float4*>(qs + hh * D + dp * PV + 4 * i);
                    dot[hh] += q4.x * k4.x + q4.y * k4.y + q4.z * k4.z + q4.w * k4.w;
                }
            }
#pragma unroll
            for (int hh = 0; hh < HB; ++hh) red[(dp * HB + hh) * CK + j] = dot[hh];
        }
        __syncthreads();

        {  // 2. online softmax per head
            constexpr int PER = (CK + 31) / 32;
            const int32_t kbase = lo + c * CK;
            for (int hh = warp; hh < HB; hh += NT / 32) {
                const float m_old = m_s[hh], l_old = l_s[hh];
                float sv[PER];
                float mx = -INFINITY;
#pragma unroll
                for (int i = 0; i < PER; ++i) {
                    const int j = lane + 32 * i;
                    sv[i] = -INFINITY;
                    if (j < CK && kbase + j <= pos) {
                        float s = 0.0f;
#pragma unroll
                        for (int dp = 0; dp < RP; ++dp) s += red[(dp * HB + hh) * CK + j];
                        if constexpr (kv_scaled<KV>) s *= ksc[b * CK + j];
                        sv[i] = s * scale_log2;
                    }
                    mx = fmaxf(mx, sv[i]);
                }
#pragma unroll
                for (int off = 16; off > 0; off >>= 1)
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
                const float m_new = fmaxf(m_old, mx);
                const float corr = exp2f(m_old - m_new);
                float sum = 0.0f;
#pragma unroll
                for (int i = 0; i < PER; ++i) {
                    const int j = lane + 32 * i;
                    if (j < CK) {
                        const float e = exp2f(sv[i] - m_new);
                        const float w = kv_scaled<KV> ? e * vsc[b * CK + j] : e;
                        ps[hh * CK + j] = PVM ? w * kPvScale : w;
                        sum += e;
                    }
                }
#pragma unroll
                for (int off = 16; off > 0; off >>= 1)
                    sum += __shfl_xor_sync(0xffffffffu, sum, off);
                __syncwarp();  // every lane has read m_s / l_s before lane 0 rewrites them
                if (lane == 0) {
                    m_s[hh] = m_new;
                    l_s[hh] = l_old * corr + sum;
                    corr_s[hh] = corr;
                }
            }
        }
        __syncthreads();

        {  // 3. P·V
            if constexpr (PVM) {
                pv_chunk<D, HB, CK, VLD>(o, vs + b * CK * VLD, ps, corr_s, warp, lane);
            } else {
#pragma unroll
                for (int hh = 0; hh < HB; ++hh) {
                    const float f = corr_s[hh];
                    acc[hh].x *= f;
                    acc[hh].y *= f;
                    acc[hh].z *= f;
                    acc[hh].w *= f;
                }
                const KV* vb = vs + b * CK * D + d4 * 4;
#pragma unroll 4
                for (int j = jp; j < CK; j += JP) {
                    const float4 v4 = load_kv4(vb + j * D);
#pragma unroll
                    for (int hh = 0; hh < HB; ++hh) {
                        const float e = ps[hh * CK + j];
                        acc[hh].x += e * v4.x;
                        acc[hh].y += e * v4.y;
                        acc[hh].z += e * v4.z;
                        acc[hh].w += e * v4.w;
                    }
                }
            }
            if (tid < CK) {
                koff[b * CK + tid] = next_off;
                if constexpr (kv_scaled<KV>) {
                    ksc[b * CK + tid] = next_ks;
                    vsc[b * CK + tid] = next_vs;
                }
            }
        }
        __syncthreads();  // buffer b, koff slot b and ps are free for the next chunk
    }
    cp_async_wait<0>();

    if constexpr (!PVM && JP > 1) {
        // Sum the JP key phases (HB·JP·D = HB·512 floats fit in the K buffers).
        static_assert(size_t{HB} * JP * D * sizeof(float) <= S::kKBytes, "phase sums exceed the K buffers");
        __syncthreads();
        float* red2 = reinterpret_cast<float*>(smem);
#pragma unroll
        for (int hh = 0; hh < HB; ++hh)
            *reinterpret_cast<float4*>(red2 + (jp * HB + hh) * D + d4 * 4) = acc[hh];
        __syncthreads();
        if (jp == 0) {
#pragma unroll
            for (int hh = 0; hh < HB; ++hh)
                for (int q = 1; q < JP; ++q) {
                    const float4 v =
                        *reinterpret_cast<const float4*>(red2 + (q * HB + hh) * D + d4 * 4);
                    acc[hh].x += v.x;
                    acc[hh].y += v.y;
                    acc[hh].z += v.z;
                    acc[hh].w += v.w;
                }
        }
    }
    __syncthreads();  // m_s, l_s final

    if (n_split == 1) {
        // The rows go out through shared memory (the K buffers are free: the phase
        // sums were read before the barrier above), every thread taking a share, and
        // the same values give the prepared form. Quantizing acc in place instead took
        // up to ~60 more registers per thread, and spills (ptxas).
        static_assert(size_t{HB} * D * sizeof(float) <= S::kKBytes, "rows exceed the K buffers");
        float* os = reinterpret_cast<float*>(smem);  // [HB][D]
        if constexpr (PVM) {
            pv_stage_rows<D, HB, KV>(os, o, l_s, warp, lane);
        } else if (jp == 0) {
#pragma unroll
            for (int hh = 0; hh < HB; ++hh) {
                const float inv = 1.0f / l_s[hh];
                *reinterpret_cast<float4*>(os + hh * D + d4 * 4) =
                    make_float4(acc[hh].x * inv, acc[hh].y * inv, acc[hh].z * inv, acc[hh].w * inv);
            }
        }
        __syncthreads();
        write_rows<HB * D / 4, NT>(os, p, t, h0 * (D / 4));
    } else {
        const int64_t rows = p.n_tokens * p.n_heads;
        if constexpr (PVM) {
            if (c_begin < c_end) {  // block-uniform: the rows go out through shared memory
                float* os = reinterpret_cast<float*>(smem);  // [HB][D]
                pv_stage_rows<D, HB, KV>(os, o, nullptr, warp, lane);
                __syncthreads();
                for (int u = tid; u < HB * D / 4; u += NT) {
                    const int hh = u / (D / 4), c4 = u % (D / 4);
                    const int64_t idx = (t * p.n_heads + h0 + hh) * n_split + split;
                    *reinterpret_cast<float4*>(part + idx * D + 4 * c4) =
                        *reinterpret_cast<const float4*>(os + hh * D + 4 * c4);
                }
            }
        } else if (jp == 0 && c_begin < c_end) {
#pragma unroll
            for (int hh = 0; hh < HB; ++hh) {
                const int64_t idx = (t * p.n_heads + h0 + hh) * n_split + split;
                *reinterpret_cast<float4*>(part + idx * D + d4 * 4) = acc[hh];
            }
        }
        if (tid < HB) {
            const int64_t idx = (t * p.n_heads + h0 + tid) * n_split + split;
            float* ml = part + rows * n_split * D + idx * 2;
            ml[0] = m_s[tid];
            ml[1] = c_begin < c_end ? l_s[tid] : 0.0f;
        }
    }
}

template <int D, int HB, class KV, bool MMA>
__global__ void __launch_bounds__(128)
    attention_split_kernel(const ops::AttentionParams p, const int* __restrict__ handled,
                           int n_split, float* __restrict__ part, float scale_log2) {
    const bool early = split_fetch_early<KV>(p, handled);  // split_item waits
    if (!early) pdl_begin();
    extern __shared__ __align__(16) unsigned char sm[];
    for (int64_t t = blockIdx.x; t < p.n_tokens; t += gridDim.x) {
        if (handled != nullptr && handled[t]) continue;
        split_item<D, HB, KV, MMA>(p, t, n_split, part, scale_log2, sm, early && t == blockIdx.x);
        __syncthreads();  // the next item rewrites q, m, l and the offsets
    }
}

// ---- keys by warp (HF2Q_SPLIT_WARP_KEYS) ----------------------------------------

// The 8-bit pools (i8, E4M3) at head size 256 with the MMA phases: each warp takes its own
// 16-key tiles of the split's keys (tiles warp, warp + 4, ...), stages them itself (cp.async,
// HF2Q_SPLIT_WARP_STAGES stages a warp, warp-level waits), and keeps its own online softmax and
// P·V accumulators over the whole head dimension; the four warps merge at the end. Why: with
// a chunk shared by the block, each chunk took four block barriers (scores, softmax on HB of
// the 4 warps, P·V, buffer reuse) and the scores and probabilities a round trip through shared
// memory; ncu on an H100 (session 44, 64 sequences at 1,024 keys): 1.56 instructions a cycle an
// SM, 60 % of cycles with no eligible warp, the largest stall the barrier (1.69 cycles an
// instruction of 7.07), and the kernel at 69 % of DRAM's rate. Here a warp's P tile goes from
// the score accumulators to the P·V operand in registers (movmatrix), and no block barrier
// falls inside the key loop. Same work items, chunk bounds, partials and results (to rounding)
// as split_item's. But each item pays a merge of four warps' accumulators through shared
// memory, which short items do not repay, so launch_attention takes it only where a split
// spans enough chunks (warp_min_chunks, attention.cu); both kernels are built.
// Measured (H100, session 45, out/s45a.sh, s45c.sh, s45e.sh): i8 kernel alone, 64 sequences at
// 1,024 keys 120.1 -> 118.0 us at two stages, 118.7 at three; one sequence at the window 9.6 ->
// 10.1 / 11.5 us (hence the chunk rule); whole decode step, 64 sequences at 1,024, int8 cache:
// 5,082 / 5,072 -> 5,086 / 5,082 (two stages), 5,140 / 5,145 (three); with the chunk rule 5,082 /
// 5,081 -> 5,149 / 5,150; fp8 cache 5,153 / 5,140 -> 5,201 / 5,203.
// A compile definition for the A/B (0: split_item for every instance).
#ifndef HF2Q_SPLIT_WARP_KEYS
#define HF2Q_SPLIT_WARP_KEYS 1
#endif
template <int D, class KV, bool MMA>
constexpr bool split_warp_ok() {
    return HF2Q_SPLIT_WARP_KEYS && MMA && D == 256 && sizeof(KV) == 1;
}
// Stages a warp cycles through: 3 (two tiles in flight while one is computed; 102 KB a block,
// 2 blocks an SM: out/s45a.sh above) or 2 (one in flight; 68 KB, 3 blocks an SM), for the A/B.
#ifndef HF2Q_SPLIT_WARP_STAGES
#define HF2Q_SPLIT_WARP_STAGES 3
#endif
static_assert(HF2Q_SPLIT_WARP_STAGES == 2 || HF2Q_SPLIT_WARP_STAGES == 3, "HF2Q_SPLIT_WARP_STAGES: 2 or 3");
// 1: the i8 pool's K codes enter the score MMAs as 1152 + code (the exact conversion
// without its HSUB2), and each score takes 1152·ΣQ of its head off after the MMAs; 0
// (default): each code converted whole. Off until a GPU has run and measured it (session
// 57 prepared it and found no device; out/s57a.sh is its A/B). Why: on the H200 the kernel is
// bound by issuing instructions, not by DRAM (docs/performance.md, session 49: 998 PTX
// instructions a 16-key tile, the H200 at 65 % of its copy rate); this takes 64 HSUB2
// of them a tile. Safe for the scores: 1152 + code and the F16 q are exact MMA
// operands, the f32 sum of a score's 256 products carries 1152·Σq beside the score
// (about 8 of f32's 24 bits, leaving more than F16's 11), and the offset cancels within
// the tile. Not for P·V, whose accumulators would carry 1152·ΣP over the whole split
// (session 49). Session 51's form of the fold (on a branch since lost) took 2.0 % off
// the kernel on an H100 (ncu) and left the H100's step as it was.
#ifndef HF2Q_SPLIT_I8_FOLD
#define HF2Q_SPLIT_I8_FOLD 0
#endif

// Not kept: a split ring (a stage's K and V in separate copy groups, a tile's K stage refilled
// as soon as its scores were done, so more stays in flight during the P·V). Session 49, H100,
// one call: a 64-sequence step int8 5,247 / 5,248 -> 5,224 / 5,229, fp8 5,294 / 5,295 -> 5,278
// / 5,278; ncu 118.2 -> 119.2 us. The pipeline alone (out/pipe_probe.cu) gained nothing either.

template <int D>
struct WarpShape {
    static constexpr int kTile = 16;      // keys a warp takes at a time (the MMA's m)
    static constexpr int kLd = D + 16;    // bytes a staged row (padded by 16, as the chunk kernel's)
    static constexpr int kStages = HF2Q_SPLIT_WARP_STAGES;
    static constexpr size_t kWarpBytes = size_t{kStages} * 2 * kTile * kLd;  // K and V of every stage
};

// Four warps' stages, then each warp's (m, l) of the block's heads. After the key loop the
// stages hold the warps' scaled accumulators [4][HB][D] and the merged rows [HB][D] (floats).
template <int D, int HB>
constexpr size_t split_warp_smem_bytes() {
    static_assert(5 * size_t{HB} * D * sizeof(float) <= 4 * WarpShape<D>::kWarpBytes, "merge rows exceed the stages");
    return 4 * WarpShape<D>::kWarpBytes + 2 * 4 * size_t{HB} * sizeof(float);
}

// One (token, head group, split) work item of the warp kernel; the caller synchronises
// between items.
template <int D, int HB, class KV>
__device__ __forceinline__ void split_warps_item(const ops::AttentionParams& p, int64_t t, int n_split,
                                                 float* __restrict__ part, float scale_log2, unsigned char* smem) {
    constexpr int CK = SplitShape<D, KV>::kKeys, TK = WarpShape<D>::kTile, LD = WarpShape<D>::kLd;
    constexpr int NT = 128, NW = NT / 32, T = D / 16;  // T: P·V tiles of a warp (the whole head dimension)
    constexpr unsigned kAll = 0xffffffffu;
    // One-byte values, so a row is D / 16 pieces of 16 bytes.
    static_assert(HB <= 8 && sizeof(KV) == 1 && TK * (D / 16) % 32 == 0, "unexpected warp shape");
    const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
    const KV* const k_pool = static_cast<const KV*>(p.k_pool);
    const KV* const v_pool = static_cast<const KV*>(p.v_pool);
    const int64_t h0 = int64_t{blockIdx.y} * HB, kvh = h0 / (p.n_heads / p.n_kv_heads), kv_row = p.n_kv_heads * D;
    const int split = static_cast<int>(blockIdx.z);
    const int32_t bs = static_cast<int32_t>(p.block_size), pos = p.pos[t], lo = window_lo(pos, p.window);
    const int32_t* table = p.tables[t];
    // The split's keys [k_lo, k_hi], whole chunks of CK as split_item's.
    const int n_chunks = (pos - lo + 1 + CK - 1) / CK, per = (n_chunks + n_split - 1) / n_split;
    const int c_begin = split * per, c_end = min(n_chunks, c_begin + per);
    const int32_t k_lo = lo + c_begin * CK, k_hi = min(pos, lo + c_end * CK - 1);
    const int n_tiles = c_begin < c_end ? (k_hi - k_lo + TK) / TK : 0;

    KV* const stage = reinterpret_cast<KV*>(smem + warp * WarpShape<D>::kWarpBytes);  // [stage][K, V][TK][LD]
    float* const m_w = reinterpret_cast<float*>(smem + 4 * WarpShape<D>::kWarpBytes);  // [warp][HB]
    float* const l_w = m_w + NW * HB;

    // q of head g (zeros past HB) in F16 B fragments over the whole head dimension, the k
    // index permuted as in split_item's score phase.
    uint32_t qf[2 * (D / 16)];
    {
        const float* qrow = p.q + (t * p.n_heads + h0 + (g < HB ? g : 0)) * D + 4 * t4;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            float4 f = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (g < HB) f = __ldg(reinterpret_cast<const float4*>(qrow + 16 * kk));
            qf[2 * kk] = pack_half2(f.x, f.y);
            qf[2 * kk + 1] = pack_half2(f.z, f.w);
        }
    }
    // HF2Q_SPLIT_I8_FOLD: 1152·Σq of heads 2·t4 and + 1 (the F16 values the MMAs take), the
    // offset that the biased K codes add to their scores.
    constexpr bool kFold = HF2Q_SPLIT_I8_FOLD && kv_scaled<KV>;
    float bias0 = 0.0f, bias1 = 0.0f;
    if constexpr (kFold) {
        float sq = 0.0f;  // head g's q over this lane's dims
#pragma unroll
        for (int i = 0; i < 2 * (D / 16); ++i) {
            const float2 h = __half22float2(*reinterpret_cast<const half2*>(&qf[i]));
            sq += h.x + h.y;
        }
        sq += __shfl_xor_sync(kAll, sq, 1);
        sq += __shfl_xor_sync(kAll, sq, 2);
        bias0 = 1152.0f * __shfl_sync(kAll, sq, 8 * t4);
        bias1 = 1152.0f * __shfl_sync(kAll, sq, 8 * t4 + 4);
    }

    // Pool offset of key r = lane % 16 of tile j, or −1 (past the split, or no tile j).
    auto tile_offset = [&](int j) -> int64_t {
        const int32_t key = k_lo + j * TK + lane % TK;
        if (j >= n_tiles || key > k_hi) return -1;
        return ops::kv_pool_index(table[key / bs], key % bs, kvh, bs, kv_row, D);
    };
    // The row scales of the i8 pools (E4M3 codes are values: 1).
    auto row_scale = [&](const float* sc, int64_t off) -> float {
        if constexpr (kv_scaled<KV>) return off >= 0 ? sc[off / D] : 0.0f;
        return off >= 0 ? 1.0f : 0.0f;
    };
    // Copies the tile whose row offsets lanes r and r + 16 hold (off) into stage s; rows past the
    // split become zeros.
    auto issue = [&](int s, int64_t off) {
        KV* const ks = stage + s * 2 * TK * LD;
        KV* const vs = ks + TK * LD;
#pragma unroll
        for (int i = 0; i < TK * (D / 16) / 32; ++i) {
            const int u = lane + 32 * i, r = u / (D / 16), col = (u % (D / 16)) * 16;
            const int64_t o = __shfl_sync(kAll, off, r);
            const bool ok = o >= 0;
            cp_async16(ks + r * LD + col, k_pool + (ok ? o + col : 0), ok ? 16 : 0);
            cp_async16(vs + r * LD + col, v_pool + (ok ? o + col : 0), ok ? 16 : 0);
        }
    };

    float m0 = -FLT_MAX, m1 = -FLT_MAX;  // heads 2·t4 and + 1: running max (log2 units)
    float l0 = 0.0f, l1 = 0.0f;          // and this lane's keys' share of the sum
    float o[T][4] = {};
    // Offsets and row scales of the tiles j, j + NW, ... j + (S − 1)·NW: each looked up a tile
    // ahead of its copy, which goes S − 1 tiles ahead of its use.
    constexpr int S = WarpShape<D>::kStages;
    int j = warp;
    int64_t offs[S];
    float kss[S], vss[S];
#pragma unroll
    for (int i = 0; i < S; ++i) {
        offs[i] = tile_offset(j + i * NW);
        kss[i] = row_scale(p.k_scale, offs[i]);
        vss[i] = row_scale(p.v_scale, offs[i]);
    }
#pragma unroll
    for (int i = 0; i + 1 < S; ++i) {
        if (j + i * NW < n_tiles) issue(i, offs[i]);
        cp_async_commit();
    }
    for (int s = 0; j < n_tiles; j += NW, s = s + 1 == S ? 0 : s + 1) {
        if (j + (S - 1) * NW < n_tiles) issue(s == 0 ? S - 1 : s - 1, offs[S - 1]);
        cp_async_commit();
        // ncu's stall sampling (session 46, H100) put 15 % of the warps' stalls on the first use
        // of this table load, five instructions on; reading the entry an iteration earlier took
        // the kernel 120.7 -> 119.2 us under ncu but left a 64-sequence step as it was (session
        // 48, H100: int8 5,150 / 5,134 -> 5,135 / 5,132, fp8 5,191 / 5,189 -> 5,185 / 5,190).
        const int64_t off_after = tile_offset(j + S * NW);
        const float ks_after = row_scale(p.k_scale, off_after), vs_after = row_scale(p.v_scale, off_after);
        cp_async_wait<S - 1>();
        __syncwarp();  // every lane's copies of tile j

        const KV* const ks = stage + s * 2 * TK * LD;
        // Scores S^T = K·Q^T: c[0], c[1] key g, heads 2·t4 and + 1; c[2], c[3] key g + 8.
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        {
            const KV* k0 = ks + g * LD + 4 * t4;
            const KV* k1 = k0 + 8 * LD;
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                uint32_t a[4];
                if constexpr (kFold) {
                    k_quad_biased(k0 + 16 * kk, a[0], a[2]);
                    k_quad_biased(k1 + 16 * kk, a[1], a[3]);
                } else {
                    k_quad_f16(k0 + 16 * kk, a[0], a[2]);
                    k_quad_f16(k1 + 16 * kk, a[1], a[3]);
                }
                mma_f16(c, a, qf[2 * kk], qf[2 * kk + 1]);
            }
            if constexpr (kFold) {
                c[0] -= bias0;
                c[1] -= bias1;
                c[2] -= bias0;
                c[3] -= bias1;
            }
        }
        const int32_t key = k_lo + j * TK + g;
        const float ka = __shfl_sync(kAll, kss[0], g) * scale_log2, kb = __shfl_sync(kAll, kss[0], g + 8) * scale_log2;
        const float va = __shfl_sync(kAll, vss[0], g) * kPvScale, vb = __shfl_sync(kAll, vss[0], g + 8) * kPvScale;
        const float s0 = key <= k_hi ? c[0] * ka : -INFINITY, s1 = key <= k_hi ? c[1] * ka : -INFINITY;
        const float s2 = key + 8 <= k_hi ? c[2] * kb : -INFINITY, s3 = key + 8 <= k_hi ? c[3] * kb : -INFINITY;
        // Online softmax per head over the warp's keys (the lanes of one t4 hold a head's 16).
        float x0 = fmaxf(s0, s2), x1 = fmaxf(s1, s3);
#pragma unroll
        for (int off = 4; off < 32; off <<= 1) {
            x0 = fmaxf(x0, __shfl_xor_sync(kAll, x0, off));
            x1 = fmaxf(x1, __shfl_xor_sync(kAll, x1, off));
        }
        const float n0 = fmaxf(m0, x0), n1 = fmaxf(m1, x1);
        const float r0 = exp2f(m0 - n0), r1 = exp2f(m1 - n1);
        if (__any_sync(kAll, r0 != 1.0f || r1 != 1.0f)) {  // a new maximum: rescale the accumulators
#pragma unroll
            for (int i = 0; i < T; ++i) {
                o[i][0] *= r0;
                o[i][1] *= r1;
                o[i][2] *= r0;
                o[i][3] *= r1;
            }
        }
        m0 = n0;
        m1 = n1;
        const float e0 = exp2f(s0 - n0), e1 = exp2f(s1 - n1), e2 = exp2f(s2 - n0), e3 = exp2f(s3 - n1);
        l0 = l0 * r0 + e0 + e2;
        l1 = l1 * r1 + e1 + e3;
        // P·V on tensor cores: the weights (times the V row scale and kPvScale) as P^T fragments,
        // keys 0-7 and 8-15 of the tile each an 8×8 transpose of the score layout.
        const uint32_t b0 = movmatrix_trans(pack_half2(e0 * va, e1 * va));
        const uint32_t b1 = movmatrix_trans(pack_half2(e2 * vb, e3 * vb));
        pv_step<KV, T, LD>(o, ks + TK * LD, lane, b0, b1);
        __syncwarp();  // stage s is read before the next tile's copies overwrite it
#pragma unroll
        for (int i = 0; i + 1 < S; ++i) offs[i] = offs[i + 1], kss[i] = kss[i + 1], vss[i] = vss[i + 1];
        offs[S - 1] = off_after, kss[S - 1] = ks_after, vss[S - 1] = vs_after;
    }
    cp_async_wait<0>();
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
        l0 += __shfl_xor_sync(kAll, l0, off);
        l1 += __shfl_xor_sync(kAll, l1, off);
    }
    if (g == 0) {
        if (2 * t4 < HB) m_w[warp * HB + 2 * t4] = m0, l_w[warp * HB + 2 * t4] = l0;
        if (2 * t4 + 1 < HB) m_w[warp * HB + 2 * t4 + 1] = m1, l_w[warp * HB + 2 * t4 + 1] = l1;
    }
    __syncthreads();  // every warp's (m, l), and every warp done with its stages

    // Merge: the block's max M and sum L per head; each warp stages its rows times 2^(m − M)
    // (and kPvUnscale), then the rows are summed in warp order.
    float* const rows = reinterpret_cast<float*>(smem);  // [warp][HB][D]
    float* const out_rows = rows + NW * HB * D;          // [HB][D]
    auto merged = [&](int hh, float& M, float& L) {
        M = -FLT_MAX;
        for (int w = 0; w < NW; ++w) M = fmaxf(M, m_w[w * HB + hh]);
        L = 0.0f;
        for (int w = 0; w < NW; ++w) L += exp2f(m_w[w * HB + hh] - M) * l_w[w * HB + hh];
    };
#pragma unroll
    for (int c2 = 0; c2 < 2; ++c2) {
        const int hh = 2 * t4 + c2;
        if (hh >= HB) continue;
        float M, L;
        merged(hh, M, L);
        const float f = exp2f(m_w[warp * HB + hh] - M) * kPvUnscale;
        float* const ow = rows + (warp * HB + hh) * D;
#pragma unroll
        for (int i = 0; i < T; ++i) {
            ow[pv_row_dim<KV>(i, 0, g)] = o[i][c2] * f;
            ow[pv_row_dim<KV>(i, 1, g)] = o[i][2 + c2] * f;
        }
    }
    __syncthreads();
    for (int u = tid; u < HB * D / 4; u += NT) {
        const int hh = u / (D / 4);
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int w = 0; w < NW; ++w) {
            const float4 v = *reinterpret_cast<const float4*>(rows + (w * HB) * D + 4 * u);
            a.x += v.x, a.y += v.y, a.z += v.z, a.w += v.w;
        }
        if (n_split == 1) {
            float M, L;
            merged(hh, M, L);
            const float inv = 1.0f / L;
            a.x *= inv, a.y *= inv, a.z *= inv, a.w *= inv;
            *reinterpret_cast<float4*>(out_rows + 4 * u) = a;
        } else if (n_tiles > 0) {
            const int64_t idx = (t * p.n_heads + h0 + hh) * n_split + split;
            *reinterpret_cast<float4*>(part + idx * D + 4 * (u % (D / 4))) = a;
        }
    }
    if (n_split == 1) {
        __syncthreads();
        write_rows<HB * D / 4, NT>(out_rows, p, t, h0 * (D / 4));
    } else if (tid < HB) {
        float M, L;
        merged(tid, M, L);
        const int64_t rows_all = p.n_tokens * p.n_heads, idx = (t * p.n_heads + h0 + tid) * n_split + split;
        float* ml = part + rows_all * n_split * D + idx * 2;
        ml[0] = M;
        ml[1] = n_tiles > 0 ? L : 0.0f;
    }
}

// At most 170 registers a thread with two stages, so 3 blocks an SM (as shared memory allows).
template <int D, int HB, class KV>
__global__ void __launch_bounds__(128, HF2Q_SPLIT_WARP_STAGES == 2 ? 3 : 2)
    attention_split_warps_kernel(const ops::AttentionParams p, const int* __restrict__ handled, int n_split,
                                 float* __restrict__ part, float scale_log2) {
    pdl_begin();
    extern __shared__ __align__(16) unsigned char sm[];
    for (int64_t t = blockIdx.x; t < p.n_tokens; t += gridDim.x) {
        if (handled != nullptr && handled[t]) continue;
        split_warps_item<D, HB, KV>(p, t, n_split, part, scale_log2, sm);
        __syncthreads();  // the next item rewrites the stages and (m, l)
    }
}

template <int D, int HB, class KV, bool MMA>
void launch_split_dhk(const ops::AttentionParams& p, const int* handled, int n_split, float* part,
                      float scale_log2, bool warps, cudaStream_t s) {
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>(p.n_tokens, kMaxTokenBlocks)),
                    static_cast<unsigned>(p.n_heads / HB), static_cast<unsigned>(n_split));
    if constexpr (split_warp_ok<D, KV, MMA>()) {
        if (warps) {
            constexpr size_t smem = split_warp_smem_bytes<D, HB>();
            allow_smem<attention_split_warps_kernel<D, HB, KV>>(smem);
            launch(attention_split_warps_kernel<D, HB, KV>, grid, 128, smem, s, p, handled, n_split, part,
                   scale_log2);
            HF2Q_CUDA_LAUNCH_CHECK();
            return;
        }
    }
    constexpr size_t smem = split_smem_bytes<D, HB, KV, MMA>();
    allow_smem<attention_split_kernel<D, HB, KV, MMA>>(smem);
    launch(attention_split_kernel<D, HB, KV, MMA>, grid, SplitShape<D, KV>::kThreads, smem, s, p, handled, n_split,
           part, scale_log2);
    HF2Q_CUDA_LAUNCH_CHECK();
}

// Blocks of one kernel an SM holds at once (shared memory, registers), asked of
// the driver once per kernel (WARPS: the keys-by-warp one, where split_warp_ok).
template <int D, int HB, class KV, bool MMA, bool WARPS>
int split_occupancy() {
    static const int n = [] {
        if constexpr (WARPS) {
            constexpr size_t smem = split_warp_smem_bytes<D, HB>();
            allow_smem<attention_split_warps_kernel<D, HB, KV>>(smem);
            int blocks = 0;
            HF2Q_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                &blocks, attention_split_warps_kernel<D, HB, KV>, 128, smem));
            return std::max(blocks, 1);
        }
        constexpr size_t smem = split_smem_bytes<D, HB, KV, MMA>();
        allow_smem<attention_split_kernel<D, HB, KV, MMA>>(smem);
        int blocks = 0;
        HF2Q_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &blocks, attention_split_kernel<D, HB, KV, MMA>, SplitShape<D, KV>::kThreads, smem));
        return std::max(blocks, 1);
    }();
    return n;
}

// Calls f.template operator()<D, HB, KV, MMA>() for the instance that serves p with
// hb heads a block (tensor_cores: the MMA score phase where split_mma_ok).
template <int D, int HB, class F>
void with_split_dh(const ops::AttentionParams& p, bool tensor_cores, F&& f) {
    dispatch_kv(p.kv_type, [&]<class KV>() {
        if constexpr (HF2Q_SPLIT_MMA && split_mma_ok<D, KV>()) {
            if (tensor_cores) return f.template operator()<D, HB, KV, true>();
        }
        f.template operator()<D, HB, KV, false>();
    });
}

template <int D, class F>
void with_split_d(const ops::AttentionParams& p, int hb, bool tensor_cores, F&& f) {
    switch (hb) {
        case 1:
            return with_split_dh<D, 1>(p, tensor_cores, f);
        case 2:
            return with_split_dh<D, 2>(p, tensor_cores, f);
        case 4:
            return with_split_dh<D, 4>(p, tensor_cores, f);
        case 8:
            return with_split_dh<D, 8>(p, tensor_cores, f);
        default:
            fail("internal error: attention split kernel for ", hb, " heads per block");
    }
}

template <class F>
void with_split_kernel(const ops::AttentionParams& p, int hb, bool tensor_cores, F&& f) {
    switch (p.head_dim) {
        case 64:
            return with_split_d<64>(p, hb, tensor_cores, f);
        case 128:
            return with_split_d<128>(p, hb, tensor_cores, f);
        case 256:
            return with_split_d<256>(p, hb, tensor_cores, f);
        case 512:
            return with_split_d<512>(p, hb, tensor_cores, f);
        default:
            fail("internal error: attention split kernel for head size ", p.head_dim);
    }
}

}  // namespace

void launch_split(const ops::AttentionParams& p, const int* handled, int heads_per_block, int n_split, float* part,
                  float scale_log2, bool tensor_cores, bool warps, cudaStream_t s) {
    with_split_kernel(p, heads_per_block, tensor_cores, [&]<int D, int HB, class KV, bool MMA>() {
        launch_split_dhk<D, HB, KV, MMA>(p, handled, n_split, part, scale_log2, warps, s);
    });
}

bool split_warps_available(const ops::AttentionParams& p, int heads_per_block, bool tensor_cores) {
    bool ok = false;
    with_split_kernel(p, heads_per_block, tensor_cores,
                      [&]<int D, int HB, class KV, bool MMA>() { ok = split_warp_ok<D, KV, MMA>(); });
    return ok;
}

int split_blocks_per_sm(const ops::AttentionParams& p, int heads_per_block, bool tensor_cores, bool warps) {
    int n = 1;
    with_split_kernel(p, heads_per_block, tensor_cores, [&]<int D, int HB, class KV, bool MMA>() {
        if constexpr (split_warp_ok<D, KV, MMA>()) {
            if (warps) return void(n = split_occupancy<D, HB, KV, MMA, true>());
        }
        n = split_occupancy<D, HB, KV, MMA, false>();
    });
    return n;
}

}  // namespace hf2q::cuda::attn

// The grouped expert GEMV of batched decode on the integer tensor cores.
//
// Why: at 64 sequences a MoE layer routes 512 rows to 128 experts, about 4 rows an
// expert, and every expert's weights must be read. The dp4a kernel (gemv_q8.cu)
// spends 8 dp4a per 32 values, weight row and activation row, and with 4-8
// activation rows per pass it reads the experts at about a third of the copy rate
// (docs/performance.md). One mma.sync.m16n8k32 does 16 weight rows × 8 activation
// rows × 32 values: the products cost almost nothing, what is left is the scaling
// per 32-value block, weight row and activation row.
//
// Layout of the work: a block of 4 warps owns 16 rows of one expert (Q4_K; two such
// tiles in turn where experts average at most 8 routed rows, HF2Q_GEMV_MMA_Q4K_TILES)
// or 64 (Q5_0 / Q8_0, HF2Q_GEMV_MMA_SPLIT32). It stages the rows in shared memory in
// one go (cp.async, about 25 KB for a 2,816-value Q4_K tile), so every byte is
// requested at once and read from DRAM once, together with the pass's 8 activation
// rows and their scales. For Q4_K each warp then takes every 4th unit of the 16 rows (a unit
// is the 64 values of one quant chunk, two sub-blocks), and the warps' partial sums
// meet in shared memory, in a fixed order; for Q5_0 / Q8_0 each warp takes 16 of
// the 64 rows whole (a unit is one 32-value block) and writes its own sums. All of
// the expert's activation rows go through in passes of 8.
//
// Why the activations are staged too: read from global memory by the fragment
// loads, each unit of a warp waited for L2 (a block's warps read disjoint parts of
// the rows, and the blocks sharing an SM belong to other experts), so the kernel
// ran at the latency of its longest chain, not at the copy rate. H200, 26B-A4B
// shapes, 512 routed rows (DISABLED_MoeThroughput): gate_up 179 -> 169 us, down
// Q8_0 140 -> 90 us; 64 sequences 3,630 -> 3,910 tokens/s (docs/performance.md).
//
// The fragments: lane (g, t) (g = lane / 4, t = lane % 4) gives the weight rows g
// and g + 8 and the activation row g. Its k slots 4t .. 4t+3 and 16+4t .. 16+4t+3
// hold values 8t .. 8t+7 of the block (the same permutation of k in both operands,
// so the sums are unchanged): its activations are one 8-byte load, its weights one
// 8-byte piece per row. The int32 sums start at the bits of 1.5·2^23, so they come
// out as floats without conversions (the trick of dequant.cuh's small_int).
//
// Paired passes (Q4_K): an expert has about 4 routed rows at 64 sequences, so a pass
// of 8 columns would leave half of every lane's sums, and the scaling spent on them,
// empty. A pass of at most 4 rows puts a unit's two sub-blocks side by side in the 8
// columns instead (PairUnit), so each lane decodes and scales 4 real sums of one
// sub-block. The kernel spends its time issuing instructions (ncu, session 19: 70-83 %
// of issue slots busy, the integer pipe the busiest), so the per-block work is what
// counts, not the bytes. H200, 512 routed rows: gate_up 165 -> 137 us; 64 sequences
// 3,980 / 3,947 -> 4,230 / 4,219 tokens/s (docs/performance.md, session 19). Passes
// of 5-8 rows (FullUnitQ4K) get the same hoisting; session 20 measured pairing the
// 32-value formats' units u and u + 4 the same way and it lost (down Q5_0 106.6 ->
// 109.3 us, Q8_0 84.4 -> 89.2 us), so they keep full passes.
//
// Results: the same integer sums per block as the dp4a kernel, scaled and added in
// another order (within float rounding of it; tests/cuda/cuda_ops_test.cpp).
#include <algorithm>
#include <type_traits>

#include "backends/cuda/byte_lanes.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/gemv_mma.h"
#include "backends/cuda/gemv_mma_switches.h"
#include "backends/cuda/grouping.cuh"
#include "backends/cuda/mma.cuh"

// 1 (default): the grouped launches of Q4_K, Q5_0 and Q8_0 weights take this kernel;
// 0: the dp4a kernel, for A/Bs.
#ifndef HF2Q_GEMV_MMA
#define HF2Q_GEMV_MMA 1
#endif

namespace hf2q::cuda {
namespace {

constexpr int kRows = 16;     // weight rows of a block: the MMA's m
constexpr int kCols = 8;      // activation rows of a pass: its n
constexpr int kWarps = 4;     // split the units of the rows
constexpr int kThreads = 32 * kWarps;
constexpr int kBias = 0x4B400000;  // 1.5·2^23 as float bits: sums of |s| < 2^22 stay exact
constexpr size_t kReduceBytes = sizeof(float) * 4 * 32 * kWarps;
// 1 (default): launches that cover every expert stage their weights before the
// lookup (gemv_mma_kernel's direct); 0: never, for A/Bs. H200, 26B-A4B: 64 sequences
// 3,843 / 3,855 -> 3,959 / 3,990 tokens/s, 32 sequences 2,424 -> 2,483.
#ifndef HF2Q_GEMV_MMA_DIRECT
#define HF2Q_GEMV_MMA_DIRECT 1
#endif
constexpr bool kDirect = HF2Q_GEMV_MMA_DIRECT != 0;
// 1 (default): Q4_K passes of at most 4 activation rows are paired (PairUnit); 0:
// every pass is full, for A/Bs.
#ifndef HF2Q_GEMV_MMA_PAIRED
#define HF2Q_GEMV_MMA_PAIRED 1
#endif
constexpr bool kPaired = HF2Q_GEMV_MMA_PAIRED != 0;
// 16-row tiles a Q4_K block takes in turn where the launch averages at most 8 routed
// rows an expert (one pass each, mostly): 4 (default), 2, 8, or 1 (never). With more
// than one, a block's fixed work (its start, the lookup of the offsets, and for an
// expert of one pass the staged activation rows) serves several tiles, for the price
// of waiting for each next tile's weights (the other blocks of the SM fill that
// wait). H200, session 20: gate_up at 512 routed rows 131.5 -> 124.2 us (4: 121.9);
// 64 sequences 4,353 / 4,355 -> 4,453 / 4,461 tokens/s (4: 4,440 / 4,451). At 4,096
// routed rows (32 an expert, four passes) it lost, 599.8 -> 629.8 us, hence the
// bound (docs/performance.md). Session 36, with the next tile asked of L2
// (HF2Q_GEMV_MMA_L2_NEXT): 4 tiles 114.8 us, 2 tiles 118.4, 8 tiles 125.6.
#ifndef HF2Q_GEMV_MMA_Q4K_TILES
#define HF2Q_GEMV_MMA_Q4K_TILES 4
#endif
static_assert(HF2Q_GEMV_MMA_Q4K_TILES == 1 || HF2Q_GEMV_MMA_Q4K_TILES == 2 || HF2Q_GEMV_MMA_Q4K_TILES == 4 ||
                  HF2Q_GEMV_MMA_Q4K_TILES == 8,
              "HF2Q_GEMV_MMA_Q4K_TILES: 1, 2, 4 or 8");
// The same for the 32-value formats' 64-row blocks (HF2Q_GEMV_MMA_SPLIT32 = 1): 64-row
// tiles a block takes in turn where the launch averages at most kSeqTilesMaxRows
// routed rows an expert (the experts' down products in batched decode): 2 (default),
// 4, or 1 (never). With more than one, a block's fixed cost (its lookup, its staged activation
// rows, which serve every tile of a one-pass expert) is shared, and the next tile is
// asked of L2 while one is computed (HF2Q_GEMV_MMA_L2_NEXT).
#ifndef HF2Q_GEMV_MMA_SEQ32
#define HF2Q_GEMV_MMA_SEQ32 2
#endif
static_assert(HF2Q_GEMV_MMA_SEQ32 == 1 || HF2Q_GEMV_MMA_SEQ32 == 2 || HF2Q_GEMV_MMA_SEQ32 == 4,
              "HF2Q_GEMV_MMA_SEQ32: 1, 2 or 4");
constexpr int64_t kSeqTilesMaxRows = 8;  // routed rows an expert, on average, for HF2Q_GEMV_MMA_Q4K_TILES
// Warps that share a 16-row tile of Q5_0 / Q8_0 rows (each takes every kSplit-th
// unit; their sums meet in shared memory): 1 (default) or 4, so a block holds 64 or
// 16 rows. The down products' rows are 22 units long, so with 4 a warp did 5.5
// units a pass and the block's fixed work (staging, waiting, reducing) rivalled its
// MMAs; with 1 a warp takes a whole tile and writes its sums from its registers, and
// a block stages the activation rows once for 64 rows. Where a block of the wider
// shape does not fit the shared-memory bound, the launch takes 4. H200, session 20,
// 512 routed rows: down Q5_0 105.4 -> 86.9 us, Q8_0 84.0 -> 86.1 us (at 4,096 rows
// 406.7 -> 334.1 and 279.0 -> 239.4 us); 64 sequences 4,270 / 4,237 -> 4,343 / 4,346
// tokens/s; 2 warps a tile measured in between and was dropped (docs/performance.md).
#ifndef HF2Q_GEMV_MMA_SPLIT32
#define HF2Q_GEMV_MMA_SPLIT32 1
#endif
static_assert(HF2Q_GEMV_MMA_SPLIT32 == 4 || HF2Q_GEMV_MMA_SPLIT32 == 1, "HF2Q_GEMV_MMA_SPLIT32: 4 or 1");
// 1 (default): Q5_0 tiles of one warp (HF2Q_GEMV_MMA_SPLIT32 = 1) take their units
// two at a time (MmaPair<Q5_0>); 0: one at a time through MmaUnit<Q5_0>, for A/Bs. SASS
// (sm_90a): 95 -> 67.5 instructions a unit. H200, session 35, 512 routed rows
// (DISABLED_MoeThroughput, T = 64): down Q5_0 81.8 -> 69.7 us.
#ifndef HF2Q_GEMV_MMA_Q50_PAIRS
#define HF2Q_GEMV_MMA_Q50_PAIRS 1
#endif
// 1 (default): the same for Q8_0 (MmaPair<Q8_0>); 0: one unit at a time, for A/Bs.
#ifndef HF2Q_GEMV_MMA_Q80_PAIRS
#define HF2Q_GEMV_MMA_Q80_PAIRS 1
#endif
// 1 (default): a block of several Q4_K tiles (HF2Q_GEMV_MMA_Q4K_TILES) asks L2 for
// its next tile while it computes the current one (prefetch_l2), so staging that tile
// reads L2, not DRAM; 0: not, for A/Bs. H200, session 35 (DISABLED_MoeThroughput,
// 512 routed rows): gate_up with 2 tiles a block 118.5 -> 119.4 us, with 4 tiles
// 114.8 us (without it, 4 tiles: 118.9). Session 36, with HF2Q_GEMV_MMA_SEQ32 2 and
// Q8_0 pairs: 64 sequences 5,010 / 5,016 -> 5,061 / 5,053 tokens/s, 32 sequences
// 3,263 -> 3,325.
#ifndef HF2Q_GEMV_MMA_L2_NEXT
#define HF2Q_GEMV_MMA_L2_NEXT 1
#endif
// 1 (default): Q4_K weights with a scaled copy (GemvArgs::w_copy, made at load by
// repack_q4k_scaled) are read from it; 0: from their blocks as stored, for the A/B.
// Why: sessions 19-37 read the kernel as bound by issuing instructions, and a paired
// unit spent about a quarter of its 70.5-82.5 (SASS) decoding the 6-bit scales and
// mins of the 12-byte header and converting and multiplying them. The copy keeps
// every sub-block's d·scale and dmin·min as one half2, so a lane loads 4 bytes a row
// and converts two halves. Its 160-byte blocks are 11 % more bytes than Q4_K's 144.
// SASS of the GEGLU launch's unit loops: paired passes 70.5 / 82.5 -> 55.5 instructions
// a unit, full passes 101.5 / 125.5 -> 75. H100, session 53 (DISABLED_MoeThroughput):
// geglu at 512 routed rows 130.8 -> 126.8 us (so the instruction count does not bound
// that shape there), at 4,096 610.2 -> 558.9 us; 64 sequences int8 +0.2 %, f16 -0.2 %,
// 32 sequences int8 -1.1 %: the H100 reads these experts near its copy rate. The H200
// (43 % more bandwidth, the same SMs) runs the kernel at the SMs' rate, and there it
// pays (session 54, same binary, --no-expert-copy for the A/B): geglu at 512 routed
// rows 126.8 -> 110.2 us, gate_up 114.2 -> 102.7; 64 sequences int8 6,021 -> 6,225
// tokens/s (+3.4 %), fp8 +3.5 %, f16 +2.8 %, 32 sequences int8 +2.8 %, 17 +1.2 %
// (docs/performance.md).
#ifndef HF2Q_GEMV_MMA_Q4K_SCALED
#define HF2Q_GEMV_MMA_Q4K_SCALED 1
#endif
// 1 (default): the staged (d, d·Σq) pairs of a pass's activation rows sit an odd
// number of pairs apart (Smem::ds_stride = n_in / 32 rounded up to odd); 0: n_in / 32
// apart, for the A/B. Why: a Q4_K unit's lanes t = 0..3 read the pairs of rows 2t
// (full passes) or 2t % 4 (paired passes) in the same column, and at the 26B-A4B's
// n_in = 2,816 rows are 88 pairs (704 bytes, 176 words) apart, so those rows start on
// the same bank: ncu (H100, session 55, the GEGLU launch at 512 routed rows) counted
// 4-way conflicts on the full pass's eight pair loads a unit and 2-way on the paired
// pass's four, 7.0 M of the launch's 17.8 M shared wavefronts excessive (39 %). With
// an odd stride s, rows 2t start 4st words apart, distinct banks for t < 4 (and the
// paired pass's second column, 2 words on, stays clear of them). H100, session 55:
// excessive wavefronts 7.0 M -> 1.0 M, L1 throughput 72.6 -> 51.1 %, the launch 133.1 ->
// 127.1 us (ncu's clocks); 64 sequences int8 5,201 / 5,206 -> 5,248 / 5,252 tokens/s,
// fp8 +0.9 %, f16 +0.7 %, 32 sequences int8 +0.4 % (docs/performance.md).
#ifndef HF2Q_GEMV_MMA_DS_ODD
#define HF2Q_GEMV_MMA_DS_ODD 1
#endif
// HF2Q_GEMV_MMA_Q50_LANES (Q5_0's lane copy): gemv_mma_switches.h, which the tests read too.
// At most this much dynamic shared memory a block: four blocks an SM.
constexpr size_t kMaxSmem = 56 * 1024;
constexpr size_t kPad = 16;  // lds8_a2 may read up to 4 bytes past a row's end

// 8 (4) bytes at a 2-byte aligned address of shared memory: aligned words joined by
// funnel shifts (a shift of 0 takes the first word whole). Unlike dequant.cuh's
// load8_a2, which must not read past a global row and so loads the third word only
// when the address is misaligned, these always load it (the tile's kPad bytes allow
// it): measured on the H200 in this form, and load8_a2's select costs the Q8_0
// kernel 8 more registers (48 -> 56, one block an SM fewer).
//
// They take the 32-bit shared-window address: the aligned address rebuilt from the
// integer value of a generic pointer loses its address space, and the loads became
// generic (PTX ld.u32 with 64-bit address arithmetic, about ten more instructions a
// row and unit). H200, session 19, 512 routed rows: down Q5_0 114 -> 105 us, Q8_0
// 87 -> 84 us (with min_blocks).
__device__ __forceinline__ uint2 lds8_a2(uint32_t a) {
    uint32_t w0, w1, w2;
    asm volatile("ld.shared.u32 %0, [%3];\n\tld.shared.u32 %1, [%3+4];\n\tld.shared.u32 %2, [%3+8];\n"
                 : "=r"(w0), "=r"(w1), "=r"(w2)
                 : "r"(a & ~3u));
    const uint32_t sh = (a & 3) * 8;
    return make_uint2(__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh));
}
__device__ __forceinline__ uint32_t lds4_a2(uint32_t a) {
    uint32_t w0, w1;
    asm volatile("ld.shared.u32 %0, [%2];\n\tld.shared.u32 %1, [%2+4];\n" : "=r"(w0), "=r"(w1) : "r"(a & ~3u));
    return __funnelshift_r(w0, w1, (a & 3) * 8);
}

// 4 bytes at an aligned 32-bit shared address.
__device__ __forceinline__ uint32_t lds4(uint32_t a) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(a));
    return v;
}

// 16 (8) bytes at an aligned 32-bit shared address.
__device__ __forceinline__ uint4 lds16(uint32_t a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}
__device__ __forceinline__ uint2 lds8(uint32_t a) {
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(a));
    return v;
}

// A unit of the weight rows g and g + 8 as MMA operands (the 32-value formats): a[s]
// is the A fragment of its s-th 32-value block, d[s][r] (m[s][r]) the scale (min) of
// that block in row g + 8r. block(u, s): index of that block among the row's 32-value
// blocks. Q4_K's units are PairUnit and FullUnitQ4K; MmaUnit<Q4_K> holds what they share.
template <GgmlType T>
struct MmaUnit;

// Q4_K (144-byte blocks of 256 values): unit u is chunk c = u % 4 of block u / 4,
// quant bytes 32c .. 32c + 31, whose low nibbles are sub-block 2c and high nibbles
// sub-block 2c + 1.
template <>
struct MmaUnit<GgmlType::Q4_K> {
    static constexpr int kVals = 64;
    // Row r's 8 quant bytes as the A fragments of both sub-blocks.
    __device__ static void quants(uint32_t (&a)[2][4], int r, uint2 q) {
        a[0][r] = q.x & 0x0F0F0F0Fu;
        a[0][2 + r] = q.y & 0x0F0F0F0Fu;
        a[1][r] = (q.x >> 4) & 0x0F0F0F0Fu;
        a[1][2 + r] = (q.y >> 4) & 0x0F0F0F0Fu;
    }
};

// The (scale, min) pair j of a Q4_K block header hd, with j < 4 (kLow) or not known
// at compile time: sel = j (kLow) or j - 4. The same values as dequant.cuh's
// kscale_header_select without its select between the two encodings.
template <bool kLow>
__device__ __forceinline__ void kscale_pair(const uint4& hd, uint32_t sel, uint32_t& sc, uint32_t& mn) {
    if constexpr (kLow) {  // scales[j] and scales[j + 4], 6 bits each
        sc = __byte_perm(hd.y, 0, sel) & 63;
        mn = __byte_perm(hd.z, 0, sel) & 63;
    } else {  // nibbles of scales[j + 4], top bits of scales[j - 4] and scales[j]
        const uint32_t lo = __byte_perm(hd.w, 0, sel);
        sc = (lo & 15) | ((__byte_perm(hd.y, 0, sel) >> 2) & 0x30);
        mn = ((lo >> 4) & 15) | ((__byte_perm(hd.z, 0, sel) >> 2) & 0x30);
    }
}

// A paired pass's unit of Q4_K (at most 4 activation rows): its two sub-blocks side by
// side. Two chained MMAs put sub-block s0's products with activation row n in column
// n and s1's in column n + 4: k < 16 of MMA h holds values 8t + 4h .. 8t + 4h + 3 of
// s0 (the low nibbles of the lane's quant bytes), k >= 16 the same values of s1 (the
// high nibbles), and B column g carries activation row g % 4 of s0 (g < 4) or of s1,
// zeros elsewhere. So every lane's four sums are real, and each lane decodes and
// scales only its own sub-block (s0 for t < 2, s1 otherwise). a[h]: MMA h's A
// fragment; d[r] (m[r]): the scale (min) of row g + 8r in the lane's sub-block.
//
// A warp's units all have chunk c = warp (kWarps == 4), so the lane's sub-block 2c +
// t / 2 is fixed: kLow (c < 2) picks the branch of the scale decoding at compile
// time, and sel is the byte of the header that holds the pair.
template <bool kLow, bool kScaled>
struct PairUnit {
    uint32_t a[2][4];
    float d[2], m[2];
    // row: the 32-bit shared addresses of rows g and g + 8; off: the block's offset in
    // them; qoff: the lane's 8 quant bytes in the block; sel: where the lane's scale
    // and min are (the header's byte, or with kScaled the half2's offset).
    __device__ void load(const uint32_t (&row)[2], uint32_t off, uint32_t qoff, uint32_t sel) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            uint2 q;
            if constexpr (kScaled) {
                const uint32_t dm = lds4(row[r] + off + sel);
                q = lds8(row[r] + off + qoff);
                d[r] = half_bits(dm);
                m[r] = half_bits(dm >> 16);
            } else {
                const uint4 hd = lds16(row[r] + off);
                q = lds8(row[r] + off + qoff);
                uint32_t sc, mn;
                kscale_pair<kLow>(hd, sel, sc, mn);
                d[r] = half_bits(hd.x) * static_cast<float>(sc);
                m[r] = half_bits(hd.x >> 16) * static_cast<float>(mn);
            }
            a[0][r] = q.x & 0x0F0F0F0Fu;
            a[0][2 + r] = (q.x >> 4) & 0x0F0F0F0Fu;
            a[1][r] = q.y & 0x0F0F0F0Fu;
            a[1][2 + r] = (q.y >> 4) & 0x0F0F0F0Fu;
        }
    }
};

// A full pass's unit of Q4_K (5 to 8 activation rows) in the same form as PairUnit:
// both sub-blocks' pairs, decoded with the branch fixed per warp, from 32-bit shared
// addresses. Session 19's generic form (the header decoded with dequant.cuh's
// kscale_header_select from generic addresses) gave the same values, so the same sums
// to the bit; this one's unit loop has 132 / 164 PTX lines instead of 195. H200,
// session 20, 512 routed rows: gate_up 137.0 -> 132.3 us; 64 sequences 4,284 / 4,284
// -> 4,316 / 4,322 tokens/s (docs/performance.md).
template <bool kLow, bool kScaled>
struct FullUnitQ4K {
    uint32_t a[2][4];
    float d[2][2], m[2][2];
    // sel: the header's byte of the first pair, or with kScaled the offset of the
    // first of the two half2.
    __device__ void load(const uint32_t (&row)[2], uint32_t off, uint32_t qoff, uint32_t sel) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            uint2 q;
            if constexpr (kScaled) {
                const uint2 dm = lds8(row[r] + off + sel);
                q = lds8(row[r] + off + qoff);
                d[0][r] = half_bits(dm.x);
                m[0][r] = half_bits(dm.x >> 16);
                d[1][r] = half_bits(dm.y);
                m[1][r] = half_bits(dm.y >> 16);
            } else {
                const uint4 hd = lds16(row[r] + off);
                q = lds8(row[r] + off + qoff);
                const float dd = half_bits(hd.x), dmin = half_bits(hd.x >> 16);
#pragma unroll
                for (int s = 0; s < 2; ++s) {
                    uint32_t sc, mn;
                    kscale_pair<kLow>(hd, sel + static_cast<uint32_t>(s), sc, mn);
                    d[s][r] = dd * static_cast<float>(sc);
                    m[s][r] = dmin * static_cast<float>(mn);
                }
            }
            MmaUnit<GgmlType::Q4_K>::quants(a, r, q);
        }
    }
};

// What the 32-value formats share: a unit is one block with one scale, no min.
struct BlockMmaUnit {
    static constexpr int kVals = 32, kSub = 1;
    static constexpr bool kMin = false;
    uint32_t a[kSub][4];
    float d[kSub][2], m[kSub][2];
    __device__ static uint32_t block(uint32_t u, int) { return u; }
};

// Q8_0 (34-byte blocks: d, 32 signed quants; 2-byte aligned). frag: lane t's values
// 8t .. 8t + 7 of the block at shared address at, as signed bytes.
template <>
struct MmaUnit<GgmlType::Q8_0> : BlockMmaUnit {
    static constexpr uint32_t kBytes = 34;
    __device__ static uint2 frag(uint32_t at, int t) { return lds8_a2(at + 2 + 8 * t); }
    __device__ void load(const uint8_t* const (&row)[2], uint32_t u, int t) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const uint8_t* blk = row[r] + u * kBytes;
            const uint2 q = frag(smem_u32(blk), t);
            d[0][r] = half_bits(half_at(blk));
            m[0][r] = 0.0f;
            a[0][r] = q.x;
            a[0][2 + r] = q.y;
        }
    }
};

// Q5_0 (22-byte blocks: d, 32 fifth bits, 16 quant bytes; 2-byte aligned): value
// v < 16 is the low nibble of quant byte v, value 16 + v its high nibble, each with
// fifth bit v (16 + v) of qh, minus 16. Lane t's values 8t .. 8t + 7 are the low
// (t < 2) or high nibbles of bytes 8(t % 2) .. + 7 and qh byte t.
//
// Lane t's A fragment words of row g + 8r of one block, offset-binary: qh the
// block's fifth bits, qx / qy its quant bytes 8(t % 2) .. + 3 and + 4 .. + 7, shift 4
// for the high nibbles (t >= 2).
__device__ __forceinline__ void q50_quants(uint32_t (&a)[4], int r, uint32_t qh, uint32_t qx, uint32_t qy,
                                           uint32_t shift, int t) {
    qh >>= 8 * t;
    a[r] = ((qx >> shift) & 0x0F0F0F0Fu) | bit4_of_bytes(qh);
    a[2 + r] = ((qy >> shift) & 0x0F0F0F0Fu) | bit4_of_bytes_hi(qh);
}

template <>
struct MmaUnit<GgmlType::Q5_0> : BlockMmaUnit {
    static constexpr uint32_t kBytes = 22;
    // The A fragments keep the offset-binary quants (0-31, which int8 holds) and the
    // block's -16·d_w·d_x·Σq_x comes in as a min term (the activations' d·Σq pair, as
    // Q4_K's mins do): two sub_small_bytes (three operations each) fewer a row and
    // unit, one more fma a sum. The integer sums stay exact; the float result moves
    // by rounding (two larger terms that cancel). H200, session 21, 512 routed rows:
    // down Q5_0 85.0 -> 82.2 us; 64 sequences 4,467 / 4,460 -> 4,476 / 4,458 tokens/s.
    static constexpr bool kMin = true;  // (hides BlockMmaUnit's)
    __device__ void load(const uint8_t* const (&row)[2], uint32_t u, int t) {
        const uint32_t shift = 4 * static_cast<uint32_t>(t / 2);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const uint8_t* blk = row[r] + u * kBytes;
            const uint32_t at = smem_u32(blk);
            const uint2 q = lds8_a2(at + 6 + 8 * (t % 2));
            d[0][r] = half_bits(half_at(blk));
            m[0][r] = 16.0f * d[0][r];
            q50_quants(a[0], r, lds4_a2(at + 2), q.x, q.y, shift, t);
        }
    }
};

// Units 2p and 2p + 1 of Q5_0 rows g and g + 8 (a warp's whole tile, kSplit == 1).
// Why: a 22-byte block starts 2 bytes off a word every other unit, and
// MmaUnit<Q5_0>::load finds its pieces with lds4_a2 / lds8_a2, whose word address
// and funnel shift are computed from the address at run time (about a third of the
// loop's 95 instructions a unit). A pair is 44 bytes: with the row on a 4-byte
// boundary (gemv_mma_supported) every piece of it sits at a fixed offset from an
// aligned word, so the loads take immediate offsets from one base, the first
// block's misaligned scale bits and quants come out of one PRMT each, and the
// second block's are whole words. The same fragments and scales as MmaUnit<Q5_0>,
// so the same sums.
//
// Pair layout (bytes): d0 0-1, qh0 2-5, qs0 6-21, d1 22-23, qh1 24-27, qs1 28-43.
// Lane t's quant bytes are 8(t % 2) .. + 7 of a block's qs (qoff = 4 + 8(t % 2) is
// the word before them in block 0, and 24 + qoff their first word in block 1).
// (Each specialization is compiled only where its switch is on: nvcc rejects a member
// function that is never called.)
template <GgmlType T>
struct MmaPair;

#if HF2Q_GEMV_MMA_Q50_PAIRS
template <>
struct MmaPair<GgmlType::Q5_0> {
    uint32_t a[2][4];
    float d[2][2], m[2][2];
    __device__ void load(const uint32_t (&row)[2], uint32_t p, int t) {
        const uint32_t shift = 4 * static_cast<uint32_t>(t / 2);
        const uint32_t qoff = 4 + 8 * static_cast<uint32_t>(t % 2);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const uint32_t at = row[r] + 44 * p;
            const uint32_t w0 = lds4(at), w1 = lds4(at + 4), w5 = lds4(at + 20), qh1 = lds4(at + 24);
            const uint32_t q0 = lds4(at + qoff), q1 = lds4(at + qoff + 4), q2 = lds4(at + qoff + 8);
            const uint32_t r0 = lds4(at + 24 + qoff), r1 = lds4(at + 28 + qoff);
            d[0][r] = half_bits(w0);
            d[1][r] = half_bits(w5 >> 16);
            m[0][r] = 16.0f * d[0][r];
            m[1][r] = 16.0f * d[1][r];
            q50_quants(a[0], r, __byte_perm(w0, w1, 0x5432), __byte_perm(q0, q1, 0x5432),
                       __byte_perm(q1, q2, 0x5432), shift, t);
            q50_quants(a[1], r, qh1, r0, r1, shift, t);
        }
    }
};
#endif

// Units 2p and 2p + 1 of Q5_0 rows g and g + 8 from the lane copy (gemv_mma.h): the same
// fragments and scales as MmaPair<Q5_0>, so the same sums. Pair layout (bytes): d0 0-1,
// d1 2-3, qh0' 4-7, qh1' 8-11, qs0 12-27, qs1 28-43, where qh' is the block's qh with
// bit 8t + j at 8j + 4 + t and bit 8t + 4 + j at 8j + t (t, j < 4; q50_lanes_of): so
// lane t's h = qh' >> t has the fifth bits of its values 8t .. 8t + 3 at bit 4 of
// each byte and those of 8t + 4 .. 8t + 7 at bit 0 (q50_quants takes them from byte
// t of qh with a multiply each). (Defined only where its switch is on, as MmaPair's.)
struct MmaPairLanes;
#if HF2Q_GEMV_MMA_Q50_LANES
struct MmaPairLanes {
    uint32_t a[2][4];
    float d[2][2], m[2][2];
    __device__ void load(const uint32_t (&row)[2], uint32_t p, int t) {
        const uint32_t shift = 4 * static_cast<uint32_t>(t / 2);
        const uint32_t qoff = 8 * static_cast<uint32_t>(t % 2);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const uint32_t at = row[r] + kQ50LanePair * p;
            const uint32_t dd = lds4(at);
#pragma unroll
            for (int b = 0; b < 2; ++b) {
                const uint32_t h = lds4(at + 4 + 4 * b) >> t;
                const uint32_t qx = lds4(at + 12 + 16 * b + qoff), qy = lds4(at + 16 + 16 * b + qoff);
                d[b][r] = half_bits(dd >> (16 * b));
                m[b][r] = 16.0f * d[b][r];
                a[b][r] = ((qx >> shift) & 0x0F0F0F0Fu) | (h & 0x10101010u);
                a[b][2 + r] = ((qy >> shift) & 0x0F0F0F0Fu) | ((h << 4) & 0x10101010u);
            }
        }
    }
};
#endif

// Units 2p and 2p + 1 of Q8_0 rows g and g + 8, as MmaPair<Q5_0> does for Q5_0: two 34-byte
// blocks are 68 bytes, so on a 4-byte aligned row every piece of the pair sits at a
// fixed offset. Pair layout (bytes): d0 0-1, qs0 2-33, d1 34-35, qs1 36-67. Lane t's
// quants are bytes 8t .. 8t + 7 of a block's qs: in block 0 the words at 8t, 8t + 4
// and 8t + 8 hold them 2 bytes in (one PRMT each half), in block 1 the words at 36 +
// 8t and 40 + 8t hold them whole. The same fragments and scales as MmaUnit<Q8_0>.
#if HF2Q_GEMV_MMA_Q80_PAIRS
template <>
struct MmaPair<GgmlType::Q8_0> {
    uint32_t a[2][4];
    float d[2][2], m[2][2];
    __device__ void load(const uint32_t (&row)[2], uint32_t p, int t) {
        const uint32_t q0 = 8 * static_cast<uint32_t>(t);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const uint32_t at = row[r] + 68 * p;
            const uint32_t w0 = lds4(at), w8 = lds4(at + 32);  // d0 in w0's low half, d1 in w8's high one
            const uint32_t x0 = lds4(at + q0), x1 = lds4(at + q0 + 4), x2 = lds4(at + q0 + 8);
            d[0][r] = half_bits(w0);
            d[1][r] = half_bits(w8 >> 16);
            m[0][r] = m[1][r] = 0.0f;
            a[0][r] = __byte_perm(x0, x1, 0x5432);
            a[0][2 + r] = __byte_perm(x1, x2, 0x5432);
            a[1][r] = lds4(at + 36 + q0);
            a[1][2 + r] = lds4(at + 40 + q0);
        }
    }
};
#endif

// Copies `bytes` (a multiple of 4) from src (4-byte aligned) to dst, which has src's
// alignment modulo 16: 4-byte pieces up to src's first 16-byte boundary and after
// its last, 16-byte pieces between (past L1: the weights are read once).
__device__ __forceinline__ void stage(uint8_t* dst, const uint8_t* src, uint32_t bytes) {
    const uint32_t mis = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(src) % 16);
    const uint32_t head = min((16 - mis) % 16, bytes);
    const uint32_t body = (bytes - head) / 16 * 16, tail = bytes - head - body;
    for (uint32_t i = 4 * threadIdx.x; i < head; i += 4 * kThreads) cp_async4(dst + i, src + i);
    for (uint32_t i = 16 * threadIdx.x; i < body; i += 16 * kThreads)
        cp_async16(dst + head + i, src + head + i, 16);
    for (uint32_t i = 4 * threadIdx.x; i < tail; i += 4 * kThreads)
        cp_async4(dst + head + body + i, src + head + body + i);
    cp_async_commit();
}

// Where a block's pieces sit in its dynamic shared memory: the weight tile (with
// the source's alignment modulo 16 and kPad bytes after it), the activation rows
// of a pass (each row padded by 32 bytes, so the 8 rows of a fragment load fall on
// distinct banks), their (d, d·Σq) pairs, and the warps' partial sums (where a
// tile's warps split its units: split > 1). A block holds block_rows weight rows.
//
// scaled (Q4_K's scaled copy, 16-byte aligned rows of whole 16-byte pieces): the
// tile needs neither the alignment slack nor kPad, and the partial sums take the
// pairs' place where it is large enough (red == ds), so a 16-row tile of the
// 26B-A4B's 2,816-value rows (27.5 KB against Q4_K's 24.8) still leaves four blocks
// an SM (55.3 KB a block). The kernel then waits for every warp's units before the
// sums are written there, and stages the pairs again for each tile.
struct Smem {
    uint32_t x = 0, ds = 0, red = 0, total = 0;
    uint32_t x_stride = 0;   // bytes between staged activation rows
    uint32_t ds_stride = 0;  // (d, d·Σq) pairs between their rows (HF2Q_GEMV_MMA_DS_ODD)
    __host__ __device__ explicit Smem(const GemvArgs& a, int split = kWarps, bool scaled = false) {
        const uint64_t block_rows = static_cast<uint64_t>(kRows * (kWarps / split));
        const uint64_t tile = scaled ? (block_rows * a.row_bytes + 15) / 16 * 16
                                     : (16 + block_rows * a.row_bytes + kPad + 15) / 16 * 16;
        const uint64_t n_in = static_cast<uint64_t>(a.n_in);
        x_stride = static_cast<uint32_t>(n_in + 32);
        ds_stride = static_cast<uint32_t>(HF2Q_GEMV_MMA_DS_ODD ? (n_in / 32) | 1 : n_in / 32);
        const uint64_t xs = kCols * (n_in + 32), dss = kCols * uint64_t{ds_stride} * 8;
        const bool red_in_ds = scaled && split > 1 && dss >= kReduceBytes;
        const uint64_t t = tile + xs + dss + (split > 1 && !red_in_ds ? kReduceBytes : 0);
        if (t > kMaxSmem) return;  // total stays 0: not supported
        x = static_cast<uint32_t>(tile);
        ds = static_cast<uint32_t>(tile + xs);
        red = static_cast<uint32_t>(red_in_ds ? tile + xs : tile + xs + dss);
        total = static_cast<uint32_t>(t);
    }
};

// The (d, d·Σq) pairs of the activation rows c0 .. c0 + nt of a pass into shared memory.
__device__ __forceinline__ void stage_ds(uint8_t* smem, const Smem& L, Q8View xq, int64_t c0, int nt, uint32_t n_in) {
    const uint32_t nb = n_in / 32;
    const float2* ds = xq.ds + c0 * static_cast<int64_t>(nb);
    for (uint32_t i = threadIdx.x; i < nt * nb; i += kThreads) {
        const uint32_t r = i / nb, k = i % nb;
        cp_async8(smem + L.ds + 8 * (r * L.ds_stride + k), ds + i);
    }
}

// The activation rows c0 .. c0 + nt of a pass and their scales into shared memory.
__device__ __forceinline__ void stage_x(uint8_t* smem, const Smem& L, Q8View xq, int64_t c0, int nt, uint32_t n_in) {
    const uint32_t per_row = n_in / 16;
    const int8_t* src = xq.q + c0 * static_cast<int64_t>(n_in);
    for (uint32_t i = threadIdx.x; i < nt * per_row; i += kThreads) {
        const uint32_t r = i / per_row, k = i % per_row;
        cp_async16(smem + L.x + r * L.x_stride + 16 * k, src + r * n_in + 16 * k, 16);
    }
    stage_ds(smem, L, xq, c0, nt, n_in);
}

// The tile of rows o0 .. o0 + rows of expert e: where it starts in global memory.
__device__ __forceinline__ const uint8_t* tile_src(const GemvArgs& a, int e, int64_t o0) {
    return a.w + static_cast<uint64_t>(e) * a.expert_bytes + static_cast<uint64_t>(o0) * a.row_bytes;
}

// One 16 × 8 tile of biased int32 sums (sum[i]: weight row g + 8(i / 2), column
// 2t + i % 2) scaled into acc: dw (mw) the scales (mins) of rows g and g + 8, x0 and
// x1 the (d, d·Σq) pairs of the columns' activation rows.
template <bool kMin>
__device__ __forceinline__ void scale_into(float (&acc)[4], const int (&sum)[4], const float (&dw)[2],
                                           const float (&mw)[2], float2 x0, float2 x1) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 xs = i % 2 ? x1 : x0;
        const float p = __int_as_float(sum[i]) - 12582912.0f;  // the exact integer sum
        acc[i] = fmaf(dw[i / 2] * xs.x, p, acc[i]);
        if constexpr (kMin) acc[i] = fmaf(-mw[i / 2], xs.y, acc[i]);
    }
}

// A paired pass of Q4_K rows (at most 4 activation rows; PairUnit says how): acc[i]
// gets column 2t + i % 2, activation row (2t + i % 2) % 4 in sub-block t / 2 of each
// unit. kLow: warp < 2.
template <bool kLow, bool kScaled>
__device__ __forceinline__ void paired_pass(const uint8_t* const (&row)[2], uint32_t units, const uint8_t* smem,
                                            const Smem& L, const float2* ds_base, int warp, int g,
                                            int t, float (&acc)[4]) {
    static_assert(kWarps == 4, "a warp's units share their chunk c = warp");
    constexpr uint32_t kBlock = kScaled ? kQ4kScaledBlock : 144, kQuants = kScaled ? 32 : 16;
    const uint32_t c = static_cast<uint32_t>(warp), j = 2 * c + static_cast<uint32_t>(t / 2);
    const uint32_t rs[2] = {smem_u32(row[0]), smem_u32(row[1])};
    const uint32_t qoff = kQuants + 32 * c + 8 * static_cast<uint32_t>(t);
    const uint32_t sel = kScaled ? 4 * j : kLow ? j : j - 4;
    const int hi = g / 4;  // B column g: activation row g % 4 of sub-block hi
    // The activation rows' block pair of a unit: 8b + 2c (s0) and + 1 (s1).
    const uint32_t xrow = smem_u32(smem + L.x) + (g % 4) * L.x_stride + 8 * t + 32 * (2 * c + hi);
    const float2* ds0 = ds_base + (2 * t % 4) * L.ds_stride + j;
    const float2* ds1 = ds0 + L.ds_stride;
    // Unrolled by 2, the loop takes its loads at immediate offsets and its counters
    // half as often; ptxas did so by itself for kLow only. SASS, both passes: kLow
    // 70.5 / 111 -> 70.5 / 101.5 instructions a unit, !kLow 92 / 135 -> 82.5 / 125.5.
    // H200, session 35, 512 routed rows: gate_up 124.1 -> 119.3 us.
#pragma unroll 2
    for (uint32_t b = 0, u = c; u < units; ++b, u += kWarps) {
        PairUnit<kLow, kScaled> w;
        w.load(rs, b * kBlock, qoff, sel);
        const uint2 xv = lds8(xrow + 256 * b);
        int sum[4];
        mma_s8(sum, w.a[0], hi ? 0u : xv.x, hi ? xv.x : 0u, kBias);
        mma_s8_acc(sum, w.a[1], hi ? 0u : xv.y, hi ? xv.y : 0u);
        scale_into<true>(acc, sum, w.d, w.m, ds0[8 * b], ds1[8 * b]);
    }
}

// A full pass of Q4_K rows (5 to 8 activation rows, or any number with
// HF2Q_GEMV_MMA_PAIRED=0): the units and order of the 32-value formats' loop, with
// FullUnitQ4K. kLow: warp < 2.
template <bool kLow, bool kScaled>
__device__ __forceinline__ void full_pass_q4k(const uint8_t* const (&row)[2], uint32_t units, const uint8_t* smem,
                                              const Smem& L, const float2* ds_base, int warp,
                                              int g, int t, float (&acc)[4]) {
    static_assert(kWarps == 4, "a warp's units share their chunk c = warp");
    constexpr uint32_t kBlock = kScaled ? kQ4kScaledBlock : 144, kQuants = kScaled ? 32 : 16;
    const uint32_t c = static_cast<uint32_t>(warp);
    const uint32_t rs[2] = {smem_u32(row[0]), smem_u32(row[1])};
    const uint32_t qoff = kQuants + 32 * c + 8 * static_cast<uint32_t>(t);
    const uint32_t sel = kScaled ? 8 * c : kLow ? 2 * c : 2 * c - 4;
    const uint32_t xrow = smem_u32(smem + L.x) + g * L.x_stride + 8 * t + 64 * c;  // block 8b + 2c
    const float2* ds0 = ds_base + 2 * t * L.ds_stride + 2 * c;
    const float2* ds1 = ds0 + L.ds_stride;
#pragma unroll 2  // (as paired_pass's loop)
    for (uint32_t b = 0, u = c; u < units; ++b, u += kWarps) {
        FullUnitQ4K<kLow, kScaled> w;
        w.load(rs, b * kBlock, qoff, sel);
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            const uint2 xv = lds8(xrow + 256 * b + 32 * s);
            int sum[4];
            mma_s8(sum, w.a[s], xv.x, xv.y, kBias);
            scale_into<true>(acc, sum, w.d[s], w.m[s], ds0[8 * b + s], ds1[8 * b + s]);
        }
    }
}

// Blocks an SM should hold: the down products' tiles (32-value formats, 8-12 KB)
// fit 10 by shared memory, so their registers are held to 48 (ptxas unrolls their
// unit loop and took 56-64 otherwise). Q4_K's 55 KB allow 4 whatever its registers;
// 0 leaves ptxas its own choice there (56; a minimum of 1 or 4 let it take 71-75).
// With one warp a tile, their blocks are 4 times larger and an SM holds 4-5 of
// them: no bound.
constexpr int min_blocks(GgmlType t, int split) { return t == GgmlType::Q4_K || split < kWarps ? 0 : 10; }

// direct: block row y works on expert y (the grid covers every expert; those
// without rows leave), so the block knows its weights before the grouping exists
// and stages them before it waits for the kernel before it (weights are the bytes
// pdl_begin may be preceded by reads of, common.cuh), overlapping that kernel's
// end and its own lookup of the offsets. Otherwise (fewer routed rows than
// experts) block row y works on the y-th expert with rows, found first.
//
// kSplit: warps a 16-row tile (HF2Q_GEMV_MMA_SPLIT32: 1 or kWarps); a block holds
// kWarps / kSplit tiles, warp w works on tile w / kSplit and takes its units w %
// kSplit, w % kSplit + kSplit, ...
//
// kSeq: tiles a block takes in turn (HF2Q_GEMV_MMA_Q4K_TILES, HF2Q_GEMV_MMA_SEQ32).
//
// kGlu: the GEGLU epilogue (GemvArgs::glu, launch_gemv_q8_geglu). Block x's four
// tiles are the gate rows 32x .. 32x + 31, then their up rows glu + 32x ..: the
// gate tiles' sums go to y (the output's own rows, as scratch), and each up sum u
// replaces its gate sum g there with gelu_tanh(g)·u, read back by the thread that
// wrote it. After each pass of the last tile the block holds 32 whole output values
// of each of the pass's rows, one 32-value block of the prepared form: written to
// y_prep as geglu_q8_kernel writes it. So the product's 2·glu values a row never
// reach memory, and the GEGLU's launch goes (a decode step at 64 sequences: 30 of
// them).
template <int kSeq, int kBlockRows, bool kGlu>
__device__ __forceinline__ int64_t tile_origin(const GemvArgs& a, int it) {
    if constexpr (kGlu) return (it >= 2 ? a.glu : 0) + 32 * static_cast<int64_t>(blockIdx.x) + 16 * (it % 2);
    return (static_cast<int64_t>(blockIdx.x) * kSeq + it) * kBlockRows;
}

// The prepared form of the 32 GEGLU values x .. x + 31 (x = 32·blockIdx.x) of the
// pass's rows c0 .. c0 + nt − 1, from y (every thread's writes to them done): 8 lanes
// a row, 4 values each (quantize_q8_values), warps 0 and 1.
__device__ __forceinline__ void glu_prepare(const GemvArgs& a, int64_t c0, int nt) {
    if (threadIdx.x >= 64) return;  // whole warps
    const int col = static_cast<int>(threadIdx.x) / 8;
    const int64_t c = 8 * static_cast<int64_t>(blockIdx.x) + threadIdx.x % 8;  // 4-value group in the row
    const bool in = col < nt;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (in) {
        const float* y = a.y + (c0 + col) * a.y_stride + 4 * c;
#pragma unroll
        for (int k = 0; k < 4; ++k) v[k] = y[k];
    }
    quantize_q8_values(v, in, q8_view(a.y_prep, a.n_rows, a.glu), c0 + col, a.glu, c);
}

template <GgmlType T, int kSplit, int kSeq, bool kGlu = false, bool kScaled = false>
__global__ void __launch_bounds__(kThreads, min_blocks(T, kSplit))
    gemv_mma_kernel(GemvArgs a, Q8View xq, Smem L, bool direct) {
    static_assert(T != GgmlType::Q4_K || kSplit == kWarps, "Q4_K's passes give warp w the chunk c = w");
    // kScaled: read the expert copy (gemv_mma.h): Q4_K's scaled copy, or Q5_0's lane
    // copy through the pairs of a warp's own tile.
    static_assert(!kScaled || T == GgmlType::Q4_K || (T == GgmlType::Q5_0 && kSplit == 1),
                  "the copies: Q4_K's scaled one, Q5_0's lanes for a warp a tile");
    constexpr bool kQ4kScaled = kScaled && T == GgmlType::Q4_K;
    static_assert(kSplit == 1 || kSplit == kWarps, "a warp a tile, or all of them");
    static_assert(!kGlu || (kSeq == 4 && kSplit == kWarps), "the GEGLU's block: 2 gate and 2 up 16-row tiles");
    using U = MmaUnit<T>;
    constexpr int kBlockRows = kRows * (kWarps / kSplit);
    extern __shared__ __align__(16) uint8_t smem[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    // The warp's tile and its share of the units (spelled out for kSplit == kWarps,
    // where the compiler cannot know that warp < kWarps).
    const int tw = kSplit == kWarps ? 0 : warp / kSplit, part = kSplit == kWarps ? warp : warp % kSplit;
    int e = 0;  // the block's expert: blockIdx.y, or found by the lookup
    int64_t r0 = 0, r1 = 0;
    for (int it = 0; it < kSeq; ++it) {
        const int64_t o0 = tile_origin<kSeq, kBlockRows, kGlu>(a, it);
        if (kSeq > 1 && o0 >= a.n_out) break;  // the same for the whole block
        const int rows = static_cast<int>(a.n_out - o0 < kBlockRows ? a.n_out - o0 : kBlockRows);
        const uint32_t tile_bytes = static_cast<uint32_t>(rows) * static_cast<uint32_t>(a.row_bytes);
        // Rows past n_out are not staged: their sums are garbage and never written.
        // The tile keeps its source's alignment modulo 16 (which differs between
        // experts where expert_bytes is not a multiple of 16).
        auto tile_at = [&] { return smem + reinterpret_cast<uintptr_t>(tile_src(a, e, o0)) % 16; };
        if (it == 0) {
            e = static_cast<int>(blockIdx.y);
            if (direct) stage(tile_at(), tile_src(a, e, o0), tile_bytes);
            pdl_begin();
            if (!direct) {
                e = active_expert<4>(a.offsets, a.n_experts, e);
                if (e < 0) return;  // the same expert for every warp: the whole block leaves
                stage(tile_at(), tile_src(a, e, o0), tile_bytes);
            }
            r0 = a.offsets[e];
            r1 = a.offsets[e + 1];
            if (r0 == r1) {  // direct only: an expert without rows
                cp_async_wait<0>();  // no copy outlives the block
                return;
            }
        } else {
            stage(tile_at(), tile_src(a, e, o0), tile_bytes);  // the previous tile's last barrier freed it
        }
        // The next tile into L2 while this one is computed.
        const int64_t o1 = kGlu ? tile_origin<kSeq, kBlockRows, kGlu>(a, it + 1) : o0 + kBlockRows;
        if (kSeq > 1 && HF2Q_GEMV_MMA_L2_NEXT && threadIdx.x == 0 && it + 1 < kSeq && o1 < a.n_out) {
            const int64_t rows1 = a.n_out - o1 < kBlockRows ? a.n_out - o1 : kBlockRows;
            prefetch_l2(tile_src(a, e, o1), static_cast<uint32_t>(rows1 * static_cast<int64_t>(a.row_bytes)));
        }
        const uint8_t* tile = tile_at();
        const uint32_t n_in = static_cast<uint32_t>(a.n_in);

        const uint32_t row_bytes = static_cast<uint32_t>(a.row_bytes);  // a tile fits in shared memory
        const uint8_t* const row[2] = {tile + (kRows * tw + g) * row_bytes, tile + (kRows * tw + g + 8) * row_bytes};
        const uint32_t units = n_in / U::kVals;
        float* red = reinterpret_cast<float*>(smem + L.red);
        for (int64_t c0 = r0; c0 < r1; c0 += kCols) {
            // Passes of 8 rows while more than 4 are left, then one paired pass (Q4_K).
            // Columns past nt read whatever their staged rows hold; their sums are not
            // written.
            const int nt = static_cast<int>(r1 - c0 < kCols ? r1 - c0 : kCols);
            const bool paired = T == GgmlType::Q4_K && kPaired && nt <= kCols / 2;
            // An expert of one pass keeps the first tile's staged rows for the others.
            if (kSeq == 1 || it == 0 || r1 - r0 > kCols)
                stage_x(smem, L, xq, c0, nt, n_in);
            else if (kQ4kScaled && L.red == L.ds)  // the last tile's sums took the pairs' place
                stage_ds(smem, L, xq, c0, nt, n_in);
            cp_async_commit();
            const float2* ds_base = reinterpret_cast<const float2*>(smem + L.ds);
            cp_async_wait<0>();
            __syncthreads();
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if constexpr (kQ4kScaled) {  // no scale decoding: one form for every warp
                if (paired)
                    paired_pass<true, true>(row, units, smem, L, ds_base, warp, g, t, acc);
                else
                    full_pass_q4k<true, true>(row, units, smem, L, ds_base, warp, g, t, acc);
            } else if constexpr (T == GgmlType::Q4_K) {
                // The branch of the scale decoding is fixed per warp (c = warp).
                if (paired && warp < 2)
                    paired_pass<true, false>(row, units, smem, L, ds_base, warp, g, t, acc);
                else if (paired)
                    paired_pass<false, false>(row, units, smem, L, ds_base, warp, g, t, acc);
                if (!paired && warp < 2)  // (not an else-chain: this form's PTX is the measured one)
                    full_pass_q4k<true, false>(row, units, smem, L, ds_base, warp, g, t, acc);
                else if (!paired)
                    full_pass_q4k<false, false>(row, units, smem, L, ds_base, warp, g, t, acc);
            } else {
                const int8_t* xrow = reinterpret_cast<const int8_t*>(smem + L.x) + g * L.x_stride + 8 * t;
                const float2* ds0 = ds_base + 2 * t * L.ds_stride;
                const float2* ds1 = ds0 + L.ds_stride;
                uint32_t u0 = part;
                constexpr bool kPairs = kSplit == 1 && ((T == GgmlType::Q5_0 && HF2Q_GEMV_MMA_Q50_PAIRS) ||
                                                        (T == GgmlType::Q8_0 && HF2Q_GEMV_MMA_Q80_PAIRS));
                if constexpr (kPairs) {
                    const uint32_t rs[2] = {smem_u32(row[0]), smem_u32(row[1])};
                    using Pair = std::conditional_t<kScaled, MmaPairLanes, MmaPair<T>>;
                    for (; u0 + 1 < units; u0 += 2) {
                        Pair w;
                        w.load(rs, u0 / 2, t);
#pragma unroll
                        for (int s = 0; s < 2; ++s) {
                            const uint32_t j = u0 + static_cast<uint32_t>(s);
                            const int2 xv = *reinterpret_cast<const int2*>(xrow + 32 * j);
                            int sum[4];
                            mma_s8(sum, w.a[s], static_cast<uint32_t>(xv.x), static_cast<uint32_t>(xv.y), kBias);
                            scale_into<U::kMin>(acc, sum, w.d[s], w.m[s], ds0[j], ds1[j]);
                        }
                    }
                }
                // An odd unit left after the pairs, read from the blocks as stored (the lane
                // copy's rows are whole pairs, lanes_args, and MmaUnit cannot read them).
                if constexpr (!kScaled) {
                    for (uint32_t u = u0; u < units; u += kSplit) {
                        U w;
                        w.load(row, u, t);
#pragma unroll
                        for (int s = 0; s < U::kSub; ++s) {
                            const uint32_t j = U::block(u, s);
                            const int2 xv = *reinterpret_cast<const int2*>(xrow + 32 * j);
                            int sum[4];
                            mma_s8(sum, w.a[s], static_cast<uint32_t>(xv.x), static_cast<uint32_t>(xv.y), kBias);
                            scale_into<U::kMin>(acc, sum, w.d[s], w.m[s], ds0[j], ds1[j]);
                        }
                    }
                }
            }
            if constexpr (kSplit == 1) {
                // The warp's sums are its tile's: sum i is row g + 8(i / 2), column 2t + i % 2.
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int r = kRows * tw + g + 8 * (i / 2), col = 2 * t + i % 2;
                    if (col < nt && r < rows) a.y[(c0 + col) * a.y_stride + o0 + r] = acc[i];
                }
            } else {
                // The four warps' partial sums, added in warp order (in a paired pass, each
                // warp's columns n and n + 4: lanes l and l + 2). Where they take the
                // pairs' place, every warp's units first.
                if (kQ4kScaled && L.red == L.ds) __syncthreads();
                reinterpret_cast<float4*>(red)[warp * 32 + lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
                __syncthreads();
                const int r = threadIdx.x / kCols, col = threadIdx.x % kCols;  // 128 threads: 16 × 8 sums
                const int l = 4 * (r % 8) + col / 2, i = 2 * (r / 8) + col % 2;
                float v = 0.0f;
#pragma unroll
                for (int k = 0; k < kWarps; ++k) v += red[(k * 32 + l) * 4 + i];
                if (paired && col < kCols / 2) {
#pragma unroll
                    for (int k = 0; k < kWarps; ++k) v += red[(k * 32 + l + 2) * 4 + i];
                }
                if (col < nt && r < rows) {
                    float* y = a.y + (c0 + col) * a.y_stride + o0 + r;
                    if (kGlu && it >= 2) {  // the up rows: y holds this thread's gate sum
                        y -= a.glu;
                        v = gelu_tanh(*y) * v;
                    }
                    *y = v;
                }
            }
            __syncthreads();  // red (and the staged rows) are written again by the next pass
            if (kGlu && it == kSeq - 1 && a.y_prep != nullptr) glu_prepare(a, c0, nt);
        }
    }
}

template <GgmlType T, int kSplit, int kSeq = 1, bool kGlu = false, bool kScaled = false>
void launch_split(const GemvArgs& a, const Q8View& xq, const Smem& L, int64_t max_active_experts, cudaStream_t s) {
    constexpr int64_t kBlockRows = kRows * (kWarps / kSplit) * kSeq;  // over all its tiles
    const dim3 grid(static_cast<unsigned>((a.n_out + kBlockRows - 1) / kBlockRows),
                    static_cast<unsigned>(max_active_experts));
    HF2Q_ASSERT(grid.y <= 65535 && L.total > 0);
    allow_smem<gemv_mma_kernel<T, kSplit, kSeq, kGlu, kScaled>>(kMaxSmem, 100);
    const bool direct = kDirect && max_active_experts == a.n_experts;
    launch(gemv_mma_kernel<T, kSplit, kSeq, kGlu, kScaled>, grid, kThreads, L.total, s, a, xq, L, direct);
    HF2Q_CUDA_LAUNCH_CHECK();
}

// 1 (default): the experts' gate_up products with a GEGLU run it as gemv_mma_kernel's
// epilogue (kGlu), on the tiles-in-turn launch of Q4_K rows (experts averaging at most
// kSeqTilesMaxRows routed rows) it is built on; 0: the product into the scratch, then
// the GEGLU op, for the A/B (out/s50a.sh). H100, session 50, against 0 in the same call
// (int8 cache, tokens/s): 17 sequences 1,992 -> 2,021, 32 sequences 3,167 -> 3,180, 64
// sequences 5,270 / 5,273 -> 5,274 / 5,271 (f16 4,430 / 4,426 -> 4,432 / 4,434). At 64
// the GEGLU's share of the step's critical path fell 339 -> 195 us (its dense-MLP half
// is left) while the cuBLAS products beside the experts took most of it (CUPTI).
#ifndef HF2Q_GEMV_MMA_GEGLU
#define HF2Q_GEMV_MMA_GEGLU 1
#endif
constexpr bool kGluTiles = HF2Q_GEMV_MMA_GEGLU && HF2Q_GEMV_MMA_Q4K_TILES == 4;
bool q4k_tiles_in_turn(const GemvArgs& a) {
    return HF2Q_GEMV_MMA_Q4K_TILES > 1 && a.n_rows <= kSeqTilesMaxRows * a.n_experts;
}

// a's arguments read from its scaled copy (w, row and expert strides), or w null
// where there is none or the kernel cannot take it.
GemvArgs scaled_args(const GemvArgs& a) {
    GemvArgs b = a;
    b.w = nullptr;
    if (!HF2Q_GEMV_MMA_Q4K_SCALED || a.w_copy == nullptr || a.type != GgmlType::Q4_K || a.n_in % 256 != 0 ||
        reinterpret_cast<uintptr_t>(a.w_copy) % 16 != 0)
        return b;
    b.row_bytes = q4k_scaled_row_bytes(a.n_in);
    b.expert_bytes = b.row_bytes * static_cast<uint64_t>(a.n_out);
    if (Smem(b, kWarps, true).total > 0) b.w = a.w_copy;
    return b;
}

// The same for Q5_0's lane copy (the rows as long as the blocks', experts back to
// back), read by the pairs of a warp's own tile.
constexpr bool kQ50Lanes = HF2Q_GEMV_MMA_Q50_LANES && HF2Q_GEMV_MMA_Q50_PAIRS && HF2Q_GEMV_MMA_SPLIT32 == 1;
GemvArgs lanes_args(const GemvArgs& a) {
    GemvArgs b = a;
    b.w = nullptr;
    if (!kQ50Lanes || a.w_copy == nullptr || a.type != GgmlType::Q5_0 || a.n_in % 64 != 0 ||
        reinterpret_cast<uintptr_t>(a.w_copy) % 4 != 0)
        return b;
    b.expert_bytes = a.row_bytes * static_cast<uint64_t>(a.n_out);
    b.w = a.w_copy;
    return b;
}

// Q4_K's launches, from its blocks as stored or (kScaled) from a's scaled copy.
template <bool kScaled>
void launch_q4k(const GemvArgs& a, const Q8View& xq, int64_t max_active_experts, cudaStream_t s) {
    constexpr GgmlType T = GgmlType::Q4_K;
    const Smem L(a, kWarps, kScaled);
    if constexpr (HF2Q_GEMV_MMA_Q4K_TILES > 1) {
        if constexpr (kGluTiles) {
            if (a.glu > 0) return launch_split<T, kWarps, 4, true, kScaled>(a, xq, L, max_active_experts, s);
        }
        if (q4k_tiles_in_turn(a))
            return launch_split<T, kWarps, HF2Q_GEMV_MMA_Q4K_TILES, false, kScaled>(a, xq, L, max_active_experts, s);
    }
    launch_split<T, kWarps, 1, false, kScaled>(a, xq, L, max_active_experts, s);
}

template <GgmlType T>
void launch_type(const GemvArgs& a, const Q8View& xq, int64_t max_active_experts, cudaStream_t s) {
    if constexpr (T == GgmlType::Q4_K) {
        if constexpr (HF2Q_GEMV_MMA_Q4K_SCALED) {
            const GemvArgs b = scaled_args(a);
            if (b.w != nullptr) return launch_q4k<true>(b, xq, max_active_experts, s);
        }
        launch_q4k<false>(a, xq, max_active_experts, s);
    } else {
        constexpr int kSplit = HF2Q_GEMV_MMA_SPLIT32;
        if constexpr (kSplit != kWarps) {
            const Smem wide(a, kSplit);
            const bool seq = HF2Q_GEMV_MMA_SEQ32 > 1 && a.n_rows <= kSeqTilesMaxRows * a.n_experts;
            if constexpr (T == GgmlType::Q5_0 && kQ50Lanes) {
                const GemvArgs b = lanes_args(a);
                if (b.w != nullptr && wide.total > 0) {
                    if (seq) return launch_split<T, kSplit, HF2Q_GEMV_MMA_SEQ32, false, true>(b, xq, wide,
                                                                                          max_active_experts, s);
                    return launch_split<T, kSplit, 1, false, true>(b, xq, wide, max_active_experts, s);
                }
            }
            if (seq && wide.total > 0)
                return launch_split<T, kSplit, HF2Q_GEMV_MMA_SEQ32>(a, xq, wide, max_active_experts, s);
            if (wide.total > 0) return launch_split<T, kSplit>(a, xq, wide, max_active_experts, s);
        }
        launch_split<T, kWarps>(a, xq, Smem(a), max_active_experts, s);
    }
}

// Piece i (in order: expert, row, piece) of an expert tensor at src whose rows hold
// `pieces` pieces of piece_bytes: where it starts. The repack kernels' thread i writes
// the copy's piece i, which lies back to back in the same order.
__device__ __forceinline__ const uint8_t* expert_piece(const uint8_t* src, int64_t i, int64_t pieces,
                                                       uint64_t piece_bytes, int64_t rows, uint64_t row_bytes,
                                                       uint64_t expert_bytes) {
    const int64_t b = i % pieces, r = i / pieces % rows, e = i / pieces / rows;
    return src + static_cast<uint64_t>(e) * expert_bytes + static_cast<uint64_t>(r) * row_bytes +
           static_cast<uint64_t>(b) * piece_bytes;
}

// One 144-byte block of Q4_K a thread: its scaled form (kQ4kScaledBlock bytes).
__global__ void repack_q4k_scaled_kernel(const uint8_t* src, uint64_t row_bytes, uint64_t expert_bytes, int64_t rows,
                                         int64_t blocks, int64_t n, uint8_t* dst, unsigned* overflow) {
    pdl_begin();  // (launch's programmatic serialization: the flag's reset runs first)
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const uint8_t* blk = expert_piece(src, i, blocks, 144, rows, row_bytes, expert_bytes);
        uint8_t* out = dst + static_cast<uint64_t>(i) * kQ4kScaledBlock;
        const uint4* q = reinterpret_cast<const uint4*>(blk);
        const uint4 hd = q[0];  // d, dmin, then the 12 bytes of 6-bit scales and mins
        const float d = half_bits(hd.x), dmin = half_bits(hd.x >> 16);
        uint32_t pairs[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            uint32_t sc, mn;
            if (j < 4)
                kscale_pair<true>(hd, static_cast<uint32_t>(j), sc, mn);
            else
                kscale_pair<false>(hd, static_cast<uint32_t>(j - 4), sc, mn);
            const float ds = d * static_cast<float>(sc), dm = dmin * static_cast<float>(mn);  // exact
            const __half hs = __float2half_rn(ds), hm = __float2half_rn(dm);
            if ((isfinite(ds) && __hisinf(hs)) || (isfinite(dm) && __hisinf(hm))) atomicOr(overflow, 1u);
            pairs[j] = static_cast<uint32_t>(__half_as_ushort(hs)) | static_cast<uint32_t>(__half_as_ushort(hm)) << 16;
        }
        uint4* o = reinterpret_cast<uint4*>(out);
        o[0] = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
        o[1] = make_uint4(pairs[4], pairs[5], pairs[6], pairs[7]);
#pragma unroll
        for (int k = 0; k < 8; ++k) o[2 + k] = q[1 + k];
    }
}

// Block qh's fifth bits in the lane copy's order (MmaPairLanes): bit 8t + j at 8j + 4 + t
// and bit 8t + 4 + j at 8j + t, for t, j < 4.
__device__ uint32_t q50_lanes_of(uint32_t qh) {
    uint32_t out = 0;
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            out |= ((qh >> (8 * t + j)) & 1u) << (8 * j + 4 + t);
            out |= ((qh >> (8 * t + 4 + j)) & 1u) << (8 * j + t);
        }
    return out;
}

// One pair of 22-byte Q5_0 blocks a thread (4-byte aligned at the source, q50_lanes_supported): its lane
// copy, kQ50LanePair bytes at a 4-byte aligned destination.
__global__ void repack_q50_lanes_kernel(const uint8_t* src, uint64_t row_bytes, uint64_t expert_bytes, int64_t rows,
                                        int64_t pairs, int64_t n, uint8_t* dst) {
    pdl_begin();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const uint16_t* in =
            reinterpret_cast<const uint16_t*>(expert_piece(src, i, pairs, kQ50LanePair, rows, row_bytes, expert_bytes));
        uint32_t* out = reinterpret_cast<uint32_t*>(dst + static_cast<uint64_t>(i) * kQ50LanePair);
        // Block b's halfwords start at in + 11b: d, qh (2), qs (8).
        out[0] = static_cast<uint32_t>(in[0]) | static_cast<uint32_t>(in[11]) << 16;
#pragma unroll
        for (int b = 0; b < 2; ++b) {
            const uint16_t* blk = in + 11 * b;
            out[1 + b] = q50_lanes_of(static_cast<uint32_t>(blk[1]) | static_cast<uint32_t>(blk[2]) << 16);
#pragma unroll
            for (int k = 0; k < 4; ++k)
                out[3 + 4 * b + k] =
                    static_cast<uint32_t>(blk[3 + 2 * k]) | static_cast<uint32_t>(blk[4 + 2 * k]) << 16;
        }
    }
}

// The repack kernels' grid for n pieces (a thread a piece, grid-stride past 65,535 blocks).
unsigned repack_grid(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535)); }

// Whether the kernel that reads an expert copy of w (rows of copy_row_bytes; split and
// scaled as launch_type launches it) fits w's rows in its shared memory. Where it does
// not, the launch reads the blocks as stored, and no copy is worth its memory.
bool copy_kernel_fits(const ops::WeightView& w, uint64_t copy_row_bytes, int split, bool scaled) {
    GemvArgs a;
    a.type = w.type;
    a.n_in = w.n_in;
    a.row_bytes = copy_row_bytes;
    return Smem(a, split, scaled).total > 0;
}

}  // namespace

bool q50_lanes_supported(const ops::WeightView& w, uint64_t expert_bytes, int64_t n_expert) {
    const uint64_t need = w.row_bytes * static_cast<uint64_t>(w.n_out);
    // 4-byte alignment as the kernel asks of the blocks as stored (gemv_mma_supported):
    // where they lack it, the kernel never runs, and no copy is worth its memory. The
    // same for rows too long for the warp-a-tile kernel (the experts' down rows, 704
    // values, fit; 2,816 do not).
    return HF2Q_GEMV_MMA && kQ50Lanes && w.type == GgmlType::Q5_0 && !w.empty() && w.n_in > 0 && w.n_in % 64 == 0 &&
           w.n_out > 0 && n_expert > 0 && w.row_bytes == static_cast<uint64_t>(w.n_in / 32) * 22 &&
           (reinterpret_cast<uintptr_t>(w.data) | expert_bytes) % 4 == 0 && (n_expert == 1 || expert_bytes >= need) &&
           copy_kernel_fits(w, w.row_bytes, HF2Q_GEMV_MMA_SPLIT32, false);
}

void repack_q50_lanes(const ops::WeightView& w, uint64_t expert_bytes, int64_t n_expert, uint8_t* dst,
                      cudaStream_t s) {
    HF2Q_ASSERT(q50_lanes_supported(w, expert_bytes, n_expert) && reinterpret_cast<uintptr_t>(dst) % 4 == 0);
    const int64_t pairs = w.n_in / 64, n = n_expert * w.n_out * pairs;
    launch(repack_q50_lanes_kernel, repack_grid(n), 256, 0, s, static_cast<const uint8_t*>(w.data),
           w.row_bytes, expert_bytes, w.n_out, pairs, n, dst);
    HF2Q_CUDA_LAUNCH_CHECK();
    HF2Q_CUDA_CHECK(cudaStreamSynchronize(s));
}

uint64_t q4k_scaled_row_bytes(int64_t n_in) {
    return static_cast<uint64_t>(n_in / 256) * kQ4kScaledBlock;
}

bool q4k_scaled_supported(const ops::WeightView& w, uint64_t expert_bytes, int64_t n_expert) {
    const uint64_t need = w.row_bytes * static_cast<uint64_t>(w.n_out);
    return HF2Q_GEMV_MMA && HF2Q_GEMV_MMA_Q4K_SCALED && w.type == GgmlType::Q4_K && !w.empty() && w.n_in > 0 &&
           w.n_in % 256 == 0 && w.n_out > 0 && n_expert > 0 &&
           w.row_bytes == static_cast<uint64_t>(w.n_in / 256) * 144 &&
           (reinterpret_cast<uintptr_t>(w.data) | w.row_bytes | expert_bytes) % 16 == 0 &&
           (n_expert == 1 || expert_bytes >= need) && copy_kernel_fits(w, q4k_scaled_row_bytes(w.n_in), kWarps, true);
}

bool repack_q4k_scaled(const ops::WeightView& w, uint64_t expert_bytes, int64_t n_expert, uint8_t* dst,
                       cudaStream_t s) {
    HF2Q_ASSERT(q4k_scaled_supported(w, expert_bytes, n_expert) && reinterpret_cast<uintptr_t>(dst) % 16 == 0);
    unsigned* overflow = nullptr;
    HF2Q_CUDA_CHECK(cudaMalloc(&overflow, sizeof(unsigned)));
    HF2Q_CUDA_CHECK(cudaMemsetAsync(overflow, 0, sizeof(unsigned), s));
    const int64_t blocks = w.n_in / 256, n = n_expert * w.n_out * blocks;
    launch(repack_q4k_scaled_kernel, repack_grid(n), 256, 0, s, static_cast<const uint8_t*>(w.data),
           w.row_bytes, expert_bytes, w.n_out, blocks, n, dst, overflow);
    HF2Q_CUDA_LAUNCH_CHECK();
    unsigned flag = 0;
    HF2Q_CUDA_CHECK(cudaMemcpyAsync(&flag, overflow, sizeof(unsigned), cudaMemcpyDeviceToHost, s));
    HF2Q_CUDA_CHECK(cudaStreamSynchronize(s));
    HF2Q_CUDA_CHECK(cudaFree(overflow));
    return flag == 0;
}

bool gemv_mma_supported(const GemvArgs& a) {
    if (!HF2Q_GEMV_MMA || a.offsets == nullptr) return false;
    if (a.type != GgmlType::Q4_K && a.type != GgmlType::Q5_0 && a.type != GgmlType::Q8_0) return false;
    const uint64_t unit = a.type == GgmlType::Q4_K ? 64 : 32;
    // The staging copies 4-byte pieces; rows, experts and the first row start on
    // 4-byte boundaries (Q4_K's headers and quants are read as 16- and 8-byte words:
    // 16, which gemv_q8_supported asks of Q4_K already).
    const uint64_t align = a.type == GgmlType::Q4_K ? 16 : 4;
    return a.n_in > 0 && static_cast<uint64_t>(a.n_in) % unit == 0 && a.n_out > 0 && a.row_bytes % align == 0 &&
           a.expert_bytes % align == 0 && reinterpret_cast<uintptr_t>(a.w) % align == 0 &&
           Smem(a).total > 0;
}

bool gemv_mma_geglu_supported(const GemvArgs& a) {
    return kGluTiles && a.type == GgmlType::Q4_K && gemv_mma_supported(a) && q4k_tiles_in_turn(a) && a.glu > 0 &&
           a.glu % 32 == 0 && a.n_out == 2 * a.glu && a.y_stride >= a.glu;
}

void launch_gemv_mma(const GemvArgs& a, const Q8View& xq, int64_t max_active_experts, cudaStream_t s) {
    HF2Q_ASSERT(gemv_mma_supported(a) && (a.glu == 0 || gemv_mma_geglu_supported(a)));
    if (a.n_out <= 0 || a.n_rows <= 0 || max_active_experts <= 0) return;
    switch (a.type) {
        case GgmlType::Q4_K: launch_type<GgmlType::Q4_K>(a, xq, max_active_experts, s); return;
        case GgmlType::Q5_0: launch_type<GgmlType::Q5_0>(a, xq, max_active_experts, s); return;
        case GgmlType::Q8_0: launch_type<GgmlType::Q8_0>(a, xq, max_active_experts, s); return;
        default: HF2Q_ASSERT(false);
    }
}

}  // namespace hf2q::cuda

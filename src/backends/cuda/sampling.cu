// Sampling ops (ops/sampling.h): the index of each row's largest logit, so a greedy
// decode step copies one int per output row to the host instead of n_vocab floats,
// and each row's k largest logits with their indices (topk_rows, at the end), so a
// top-k sampled step copies k pairs.
//
// argmax_rows_kernel: one block per row (blocks stride over rows past the grid);
// argmax_split_kernel: several blocks per row, for a few long rows (below).
// Each thread scans its share of the row in increasing index order: a scalar head up
// to the row's first 16-byte boundary (row starts need not be aligned: any stride is
// allowed), the aligned body as float4 loads with four in flight per thread, then a
// scalar tail. Because a thread meets its indices in increasing order, a strict `>`
// keeps the first of equal maxima; warps and then the block combine (value, index)
// pairs by larger value, then lower index, so the row's result is the lowest index of
// its maximum, as runtime::argmax picks it. NaN loses every comparison, so it is
// tracked by a flag OR-ed over the block; +inf wins and is reported after the reduction.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace hf2q::cuda {
namespace {

constexpr int kMaxThreads = 1024;
constexpr int64_t kMaxBlocks = 65535;  // rows beyond this are strided over
constexpr int32_t kNone = INT32_MAX;   // no value above -inf seen yet
// The split kernel: blocks of kSplitThreads threads, a block for every kSplitValues
// values (16 a thread: four float4 loads in flight), at most kSplitThreads blocks a
// row (longer rows give each block more); rows up to kSplitMaxRows (more rows fill
// the GPU with one block each). Gemma 4's 262,144 logits: 64 blocks.
constexpr int kSplitThreads = 256;
constexpr int32_t kSplitValues = 16 * kSplitThreads;
constexpr int64_t kSplitMaxRows = 32;

struct Best {
    float v;
    int32_t i;
};

// Scan step: indices arrive in increasing order within a thread.
__device__ __forceinline__ void take(Best& b, float v, int32_t i, bool& nan) {
    if (v > b.v) {
        b.v = v;
        b.i = i;
    } else if (isnan(v)) {
        nan = true;
    }
}

__device__ __forceinline__ void take4(Best& b, float4 a, int32_t i, bool& nan) {
    take(b, a.x, i, nan);
    take(b, a.y, i + 1, nan);
    take(b, a.z, i + 2, nan);
    take(b, a.w, i + 3, nan);
}

// Reduction step: indices from anywhere in the row.
__device__ __forceinline__ void combine(Best& b, float ov, int32_t oi) {
    if (ov > b.v || (ov == b.v && oi < b.i)) {
        b.v = ov;
        b.i = oi;
    }
}

__device__ Best warp_best(Best b) {
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, b.v, off);
        const int32_t oi = __shfl_xor_sync(0xffffffffu, b.i, off);
        combine(b, ov, oi);
    }
    return b;
}

// This thread's best of x[0..n).
__device__ Best scan_row(const float* x, int32_t n, bool& nan) {
    Best b{-INFINITY, kNone};
    const int32_t T = static_cast<int32_t>(blockDim.x), t = static_cast<int32_t>(threadIdx.x);
    // Floats before the first 16-byte boundary (float pointers are 4-byte aligned).
    const auto misalign = static_cast<int32_t>(reinterpret_cast<uintptr_t>(x) & 15u);
    const int32_t head = min(n, ((16 - misalign) & 15) / 4);
    if (t < head) take(b, x[t], t, nan);
    const float4* v4 = reinterpret_cast<const float4*>(x + head);
    const int32_t nv = (n - head) / 4;
    int32_t j = t;
    for (; j + 3 * T < nv; j += 4 * T) {
        float4 a[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) a[u] = __ldg(v4 + j + u * T);
#pragma unroll
        for (int u = 0; u < 4; ++u) take4(b, a[u], head + 4 * (j + u * T), nan);
    }
    for (; j < nv; j += T) take4(b, __ldg(v4 + j), head + 4 * j, nan);
    for (int32_t i = head + 4 * nv + t; i < n; i += T) take(b, x[i], i, nan);
    return b;
}

// The block's best of its threads' (b, nan), in every thread; uses the block's
// shared arrays, so the caller synchronises before the next call.
struct BlockBest {
    Best b;
    bool nan;
};
__device__ BlockBest block_best(Best b, bool nan) {
    __shared__ float best_v[kMaxThreads / 32];
    __shared__ int32_t best_i[kMaxThreads / 32];
    __shared__ Best all;
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
    const int n_warps = static_cast<int>(blockDim.x / 32);
    b = warp_best(b);
    if (lane == 0) {
        best_v[warp] = b.v;
        best_i[warp] = b.i;
    }
    const bool any_nan = __syncthreads_or(nan) != 0;  // also publishes best_v / best_i
    if (warp == 0) {
        b = lane < n_warps ? Best{best_v[lane], best_i[lane]} : Best{-INFINITY, kNone};
        b = warp_best(b);
        if (lane == 0) all = b;
    }
    __syncthreads();
    return {all, any_nan};
}

// A row's result from its best value and index: an index or an ops::kArgmax* code.
__device__ int32_t result_of(const BlockBest& r) {
    if (r.nan) return ops::kArgmaxNaN;
    if (r.b.v == INFINITY) return ops::kArgmaxPosInf;
    if (r.b.i == kNone) return ops::kArgmaxAllNegInf;
    return r.b.i;
}

// host_out is mapped host memory: the store crosses PCIe once, after the device copy.
__device__ __forceinline__ void write_result(const ops::ArgmaxRowsParams& p, int64_t r, int32_t id) {
    p.out[r] = id;
    if (p.host_out) p.host_out[r] = id;
}

__global__ void __launch_bounds__(kMaxThreads)
    argmax_rows_kernel(ops::ArgmaxRowsParams p, int64_t stride) {
    pdl_begin();
    for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
        bool nan = false;
        const BlockBest best = block_best(scan_row(p.x + r * stride, static_cast<int32_t>(p.n), nan), nan);
        if (threadIdx.x == 0) write_result(p, r, result_of(best));
        __syncthreads();  // the next row rewrites block_best's arrays
    }
}

// Few long rows (a decode step's logits, one row a sequence): a row's values split
// over gridDim.x blocks of `seg` values (whole float4s); each block writes its best
// (value, index, NaN flag) to part, and the row's last block to finish, counted on
// arrived[row] (last_block_to_arrive, common.cuh), reduces them. The
// reduction picks the larger value, then the lower index, as the one-block kernel
// does, so both give the same result. The last block resets the counter.
__global__ void __launch_bounds__(kSplitThreads)
    argmax_split_kernel(ops::ArgmaxRowsParams p, int64_t stride, int32_t seg, ArgmaxWorkspace ws) {
    pdl_begin();
    const int64_t r = blockIdx.y;
    const int32_t begin = static_cast<int32_t>(blockIdx.x) * seg;
    const int32_t n = min(seg, static_cast<int32_t>(p.n) - begin);
    bool nan = false;
    Best b = n > 0 ? scan_row(p.x + r * stride + begin, n, nan) : Best{-INFINITY, kNone};
    if (b.i != kNone) b.i += begin;
    const BlockBest best = block_best(b, nan);
    uint32_t* part = ws.part + 4 * (r * gridDim.x);
    if (threadIdx.x == 0) {
        part[4 * blockIdx.x] = __float_as_uint(best.b.v);
        part[4 * blockIdx.x + 1] = static_cast<uint32_t>(best.b.i);
        part[4 * blockIdx.x + 2] = best.nan ? 1u : 0u;
    }
    if (!last_block_to_arrive(ws.arrived + r)) return;
    // gridDim.x <= kSplitThreads: a thread per partial, read past L1.
    Best mine{-INFINITY, kNone};
    bool mine_nan = false;
    if (threadIdx.x < gridDim.x) {
        mine.v = __uint_as_float(__ldcg(part + 4 * threadIdx.x));
        mine.i = static_cast<int32_t>(__ldcg(part + 4 * threadIdx.x + 1));
        mine_nan = __ldcg(part + 4 * threadIdx.x + 2) != 0;
    }
    const BlockBest row = block_best(mine, mine_nan);
    if (threadIdx.x == 0) write_result(p, r, result_of(row));
}

// About 16 values per thread, whole warps, at most kMaxThreads.
int threads_for(int64_t n) {
    const int64_t want = (n + 15) / 16;
    return static_cast<int>(std::clamp<int64_t>((want + 31) / 32 * 32, 32, kMaxThreads));
}

// ---- topk_rows ------------------------------------------------------------------------
// Every value becomes a 64-bit key that orders (value descending, index ascending) as
// one unsigned integer: the value's bits mapped to an order-preserving uint32 (-0.0 as
// +0.0, so the two tie as floats do) above 2^32 - 1 - index. NaN and padding are key
// 0, below every real value (-inf's key is 0x007FFFFF'xxxxxxxx). Real keys are unique,
// so the k largest are one set whatever the order of work, and sorting them gives the
// host sampler's order exactly.
//
// topk_select_kernel: block (group, row) holds up to 8,192 keys in registers (32 a
// thread), finds its k-th largest key by a radix select (a byte at a time from the top,
// a 256-bin shared histogram a pass, stopping as soon as the chosen bin holds exactly
// the keys still wanted: two to four passes on logits) and keeps the keys at or above
// it. Level 0 reads a segment of the row's values; every later level reads the lists
// of the level below, 8,192 / k of them a block. The block of a level with one group
// sorts its k keys (bitonic, 256 entries) and writes ids, values and status. Gemma 4's
// 262,144 logits: 32 segments, then one block a row; two launches for any k. Session
// 39's first version sorted every 2,048-value segment whole and merged lists in seven
// more launches: 68 µs for one row, 890 µs for 64 (the H200, k 64); this one 28.5 and 218.
// Flags (bit 0: a NaN, bit 1: +inf) are OR-ed from level to level. Deterministic: a
// fixed grouping; the atomics only count (histograms, list slots), and the set a block
// keeps does not depend on the order of its slots.
constexpr int kTopkThreads = 256;  // = the histogram's bins: one bin a thread
constexpr int kTopkPer = 32;       // keys a thread holds
constexpr int kTopkKeys = kTopkThreads * kTopkPer;
static_assert(ops::kTopkMax == kTopkThreads, "the final sort holds kTopkMax keys, one a thread");
// Radix passes over the keys at or above block_floor only; 0 for the A/B.
#ifndef HF2Q_TOPK_FLOOR
#define HF2Q_TOPK_FLOOR 1
#endif

__device__ __forceinline__ uint64_t topk_key(float v, int32_t i) {
    uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (static_cast<uint64_t>(u) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
}
constexpr uint32_t kNegInfOrd = 0x007FFFFFu;  // topk_key's high word of -inf

// The OR of the block's flag words (bits 0 and 1), in every thread.
__device__ __forceinline__ uint32_t block_flags(uint32_t f) {
    const uint32_t nan = __syncthreads_or(static_cast<int>(f & 1u)) ? 1u : 0u;
    return nan | (__syncthreads_or(static_cast<int>(f & 2u)) ? 2u : 0u);
}

struct TopkShared {
    uint32_t hist[kTopkThreads];
    uint64_t top[ops::kTopkMax];  // the block's k largest keys, then zeros
    uint32_t warp_sums[kTopkThreads / 32];
    uint64_t warp_floor[kTopkThreads / 32];
    uint32_t digit, need, bin;
    int32_t count;
};

// Inclusive sum of v over the block's threads in thread order, in every thread.
__device__ __forceinline__ uint32_t block_inclusive_sum(uint32_t v, TopkShared& sh) {
    const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
    for (int off = 1; off < 32; off <<= 1) {
        const uint32_t o = __shfl_up_sync(0xffffffffu, v, off);
        if (lane >= off) v += o;
    }
    if (lane == 31) sh.warp_sums[warp] = v;
    __syncthreads();
    for (int w = 0; w < warp; ++w) v += sh.warp_sums[w];
    return v;
}

// The 32 lanes' v in descending order: lane i gets the i-th largest (bitonic).
__device__ __forceinline__ uint64_t warp_sort_desc(uint64_t v) {
    const int lane = static_cast<int>(threadIdx.x) & 31;
#pragma unroll
    for (int size = 2; size <= 32; size <<= 1) {
#pragma unroll
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            const uint64_t o = __shfl_xor_sync(0xffffffffu, v, stride);
            // A descending run keeps the larger key in its lower lane.
            const bool keep_max = ((lane & stride) == 0) == ((lane & size) == 0);
            v = keep_max ? (v > o ? v : o) : (v < o ? v : o);
        }
    }
    return v;
}

// A key at most the block's k-th largest, so that the radix passes need only count the
// keys at or above it. Why: the first pass counted all 8,192 keys of a block, crowded
// into a few top-byte bins, and at 64 rows the kernel was bound by those instructions
// (218 µs, against 20 µs to read the 64 MiB). Each warp sorts its lanes' maxima and
// offers its q-th largest, q = ceil(k / 8); the floor is the least offer. Every warp
// has q maxima at or above its offer, so at least 8q >= k distinct keys lie at or above
// the floor, and the k-th largest does too. On logits about 1-2 % of a block's keys are
// left. 0 (no floor) where a warp's offer is padding (a row's last, short segment).
__device__ uint64_t block_floor(const uint64_t (&key)[kTopkPer], int32_t k, TopkShared& sh) {
    static_assert(kTopkThreads == 256, "8 warps of 32 maxima cover k <= kTopkMax = 256");
    uint64_t m = key[0];
#pragma unroll
    for (int j = 1; j < kTopkPer; ++j) m = key[j] > m ? key[j] : m;
    m = warp_sort_desc(m);
    const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
    if (lane == (k + 7) / 8 - 1) sh.warp_floor[warp] = m;
    __syncthreads();
    uint64_t f = sh.warp_floor[0];
#pragma unroll
    for (int w = 1; w < kTopkThreads / 32; ++w) f = sh.warp_floor[w] < f ? sh.warp_floor[w] : f;
    return f;
}

// Leaves the block's k largest keys in sh.top[0, k) (in no order) and zeros in
// sh.top[k, kTopkMax). Every block holds kTopkKeys >= k keys (padding is key 0), so
// the k-th largest exists; only key 0 repeats, and repeats of it are interchangeable.
// Keys below `floor` (block_floor: at most the k-th largest) are neither counted nor
// kept.
__device__ void select_top(const uint64_t (&key)[kTopkPer], int32_t k, uint64_t floor, TopkShared& sh) {
    const int t = static_cast<int>(threadIdx.x);
    uint64_t prefix = 0, mask = 0;
    uint32_t need = static_cast<uint32_t>(k);
    for (int shift = 56; shift >= 0; shift -= 8) {
        sh.hist[t] = 0;
        __syncthreads();
#pragma unroll
        for (int j = 0; j < kTopkPer; ++j) {
            const bool in = key[j] >= floor && (key[j] & mask) == prefix;
            if (!__any_sync(0xffffffffu, in)) continue;
            // Lanes of one digit add once: logits crowd a few top-byte bins.
            const uint32_t d = static_cast<uint32_t>(key[j] >> shift) & 0xFFu;
            const uint32_t peers = __match_any_sync(0xffffffffu, in ? d : 0x100u);
            if (in && (peers & lanemask_lt()) == 0) atomicAdd(&sh.hist[d], __popc(peers));
        }
        __syncthreads();
        // Thread t reads bin 255 - t; ge counts the keys in that bin and above it.
        const uint32_t here = sh.hist[255 - t], ge = block_inclusive_sum(here, sh);
        if (ge >= need && ge - here < need) {
            sh.digit = static_cast<uint32_t>(255 - t);
            sh.need = need - (ge - here);
            sh.bin = here;
        }
        __syncthreads();
        prefix |= static_cast<uint64_t>(sh.digit) << shift;
        mask |= 0xFFull << shift;
        need = sh.need;
        // Every key with this prefix is wanted: the keys >= prefix are the k largest.
        // (The next pass writes sh.digit only after two more barriers.)
        if (sh.bin == need) break;
    }
    // Keys above prefix, then keys equal to it (repeats only of key 0) in what is left.
    if (t == 0) sh.count = 0;
    sh.top[t] = 0;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kTopkPer; ++j)
        if (key[j] >= floor && key[j] > prefix) sh.top[atomicAdd(&sh.count, 1)] = key[j];
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kTopkPer; ++j)
        if (key[j] >= floor && key[j] == prefix) {
            const int slot = atomicAdd(&sh.count, 1);
            if (slot < k) sh.top[slot] = key[j];
        }
    __syncthreads();
}

// Sorts sh.top into descending order, one entry a thread.
__device__ void bitonic_desc(uint64_t* s) {
    const int t = static_cast<int>(threadIdx.x);
    for (int size = 2; size <= kTopkThreads; size <<= 1) {
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            if (t < kTopkThreads / 2) {
                const int i = 2 * t - (t & (stride - 1)), j = i + stride;
                const bool desc = (i & size) == 0;
                const uint64_t a = s[i], b = s[j];
                if ((a < b) == desc) {
                    s[i] = b;
                    s[j] = a;
                }
            }
            __syncthreads();
        }
    }
}

// One level's lists: [rows][lists][k] keys, then [rows][lists] flag words.
struct TopkLevel {
    uint64_t* keys;
    uint32_t* flags;
};

// What a level reads: the row's values (level 0) or the lists of the level below.
struct TopkSource {
    const float* x;
    int64_t stride;
    int32_t n;
    TopkLevel lists;
    int32_t n_lists;
};

template <bool kFromValues>
__global__ void __launch_bounds__(kTopkThreads)
    topk_select_kernel(TopkSource src, int32_t k, TopkLevel out, ops::TopkRowsParams p) {
    __shared__ TopkShared sh;
    pdl_begin();
    const int64_t r = blockIdx.y;
    const int32_t group = static_cast<int32_t>(blockIdx.x), t = static_cast<int32_t>(threadIdx.x);
    uint64_t key[kTopkPer];
    uint32_t flags = 0;
    if constexpr (kFromValues) {
        const float* row = src.x + r * src.stride;
        const int32_t base = group * kTopkKeys + t;  // < n <= 2^31 - 1: no overflow below
#pragma unroll
        for (int j = 0; j < kTopkPer; ++j) {
            const int64_t i = static_cast<int64_t>(base) + j * kTopkThreads;
            const float v = i < src.n ? __ldg(row + i) : 0.0f;
            const bool nan = isnan(v);
            flags |= (nan ? 1u : 0u) | (v == INFINITY ? 2u : 0u);
            key[j] = i < src.n && !nan ? topk_key(v, static_cast<int32_t>(i)) : 0;
        }
    } else {
        const int32_t per = kTopkKeys / k, first = group * per, lists = min(per, src.n_lists - first);
        const uint64_t* keys = src.lists.keys + (r * src.n_lists + first) * k;
#pragma unroll
        for (int j = 0; j < kTopkPer; ++j) {
            const int32_t i = t + j * kTopkThreads;
            key[j] = i < lists * k ? keys[i] : 0;
        }
        for (int32_t i = t; i < lists; i += kTopkThreads) flags |= src.lists.flags[r * src.n_lists + first + i];
    }
    flags = block_flags(flags);
    select_top(key, k, HF2Q_TOPK_FLOOR ? block_floor(key, k, sh) : 0, sh);
    if (gridDim.x > 1) {  // another level follows
        uint64_t* dst = out.keys + (r * gridDim.x + group) * k;
        if (t < k) dst[t] = sh.top[t];
        if (t == 0) out.flags[r * gridDim.x + group] = flags;
        return;
    }
    bitonic_desc(sh.top);
    // The real keys come first; the block counts them.
    const bool real = t < k && static_cast<uint32_t>(sh.top[t] >> 32) > kNegInfOrd;
    if (t < k) {
        const uint64_t kk = sh.top[t];
        const int32_t id = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(kk));
        p.ids[r * k + t] = real ? id : -1;
        // The value as stored (the key holds -0.0 as +0.0).
        p.values[r * k + t] = real ? __ldg(src.x + r * src.stride + id) : -INFINITY;
    }
    const int valid = __syncthreads_count(real);
    if (t == 0)
        p.status[r] = (flags & 1u)   ? ops::kArgmaxNaN
                      : (flags & 2u) ? ops::kArgmaxPosInf
                      : valid == 0   ? ops::kArgmaxAllNegInf
                                     : valid;
}

// Lists of level 0 (segments of kTopkKeys values) and the lists the next level can
// hold at most (a block of it takes at least kTopkKeys / kTopkMax lists).
int64_t topk_segments(int64_t n) { return (n + kTopkKeys - 1) / kTopkKeys; }
int64_t topk_merged_lists(int64_t lists) {
    constexpr int64_t kMinPer = kTopkKeys / ops::kTopkMax;
    return (lists + kMinPer - 1) / kMinPer;
}
size_t topk_level_bytes(int64_t rows, int64_t lists) {
    return static_cast<size_t>(rows * lists) * (sizeof(uint64_t) * ops::kTopkMax + sizeof(uint32_t));
}
TopkLevel topk_level(uint8_t* base, int64_t rows, int64_t lists, int32_t k) {
    auto* keys = reinterpret_cast<uint64_t*>(base);
    return {keys, reinterpret_cast<uint32_t*>(keys + rows * lists * k)};
}

}  // namespace

void launch_argmax_rows(const ops::ArgmaxRowsParams& p, const ArgmaxWorkspace& ws, cudaStream_t s) {
    if (!ops::check_argmax_rows(p)) return;
    const int64_t splits = std::min<int64_t>(kSplitThreads, (p.n + kSplitValues - 1) / kSplitValues);
    if (splits > 1 && p.rows <= kSplitMaxRows && p.rows <= ws.n_arrived && p.rows * splits <= ws.n_part) {
        const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(p.rows));
        const int64_t seg = ((p.n + splits - 1) / splits + 3) / 4 * 4;  // <= kSplitValues up to 1 M values
        launch(argmax_split_kernel, grid, kSplitThreads, 0, s, p, ops::argmax_stride(p), static_cast<int32_t>(seg),
               ws);
        HF2Q_CUDA_LAUNCH_CHECK();
        return;
    }
    const auto blocks = static_cast<unsigned>(std::min(p.rows, kMaxBlocks));
    launch(argmax_rows_kernel, blocks, threads_for(p.n), 0, s, p, ops::argmax_stride(p));
    HF2Q_CUDA_LAUNCH_CHECK();
}

size_t topk_rows_scratch_bytes(int64_t rows, int64_t n) {
    const int64_t lists = topk_segments(n);
    if (lists == 1) return 0;  // one launch: no lists
    return topk_level_bytes(rows, lists) + topk_level_bytes(rows, topk_merged_lists(lists)) + 16;
}

// Level buffers alternate between the scratch's two halves: level 0's lists in A, level
// 1's in B (at most topk_merged_lists of them), level 2's in A, and so on.
void launch_topk_rows(const ops::TopkRowsParams& p, cudaStream_t s) {
    if (!ops::check_topk_rows(p)) return;
    HF2Q_ASSERT(p.rows <= 65535);
    int64_t lists = topk_segments(p.n);
    HF2Q_ASSERT(lists == 1 || p.scratch != nullptr);
    auto* a = static_cast<uint8_t*>(p.scratch);
    uint8_t* b = lists == 1 ? nullptr : a + (topk_level_bytes(p.rows, lists) + 15) / 16 * 16;
    TopkSource src{p.x, p.stride != 0 ? p.stride : p.n, static_cast<int32_t>(p.n), {}, 0};
    TopkLevel out = lists == 1 ? TopkLevel{} : topk_level(a, p.rows, lists, p.k);
    launch(topk_select_kernel<true>, dim3(static_cast<unsigned>(lists), static_cast<unsigned>(p.rows)), kTopkThreads,
           0, s, src, p.k, out, p);
    HF2Q_CUDA_LAUNCH_CHECK();
    const int64_t per = kTopkKeys / p.k;
    for (bool to_b = true; lists > 1; to_b = !to_b) {
        const int64_t groups = (lists + per - 1) / per;
        src.lists = out;
        src.n_lists = static_cast<int32_t>(lists);
        out = topk_level(to_b ? b : a, p.rows, groups, p.k);
        launch(topk_select_kernel<false>, dim3(static_cast<unsigned>(groups), static_cast<unsigned>(p.rows)),
               kTopkThreads, 0, s, src, p.k, out, p);
        HF2Q_CUDA_LAUNCH_CHECK();
        lists = groups;
    }
}

}  // namespace hf2q::cuda

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
// arrived[row] (the router kernel's arrival pattern, moe.cu), reduces them. The
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
    __shared__ bool last;
    if (threadIdx.x == 0) {
        part[4 * blockIdx.x] = __float_as_uint(best.b.v);
        part[4 * blockIdx.x + 1] = static_cast<uint32_t>(best.b.i);
        part[4 * blockIdx.x + 2] = best.nan ? 1u : 0u;
        __threadfence();  // the partial before the count
        last = atomicAdd(ws.arrived + r, 1u) == gridDim.x - 1;
        if (last) {
            __threadfence();  // every block's partial is counted: read them after this
            ws.arrived[r] = 0;
        }
    }
    __syncthreads();
    if (!last) return;
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
// 0, below every real value (-inf's key is 0x007FFFFF'xxxxxxxx). Keys are unique, so
// the k largest are one set whatever the order of work, and sorting them gives the
// host sampler's order exactly.
//
// topk_segments_kernel: block (segment, row) sorts the 2,048 keys of its segment
// (bitonic, in shared memory) and writes its k largest as a list, with a flag word
// (bit 0: a NaN, bit 1: +inf). topk_merge_kernel: block (group, row) sorts the keys
// of up to 2,048 / k lists of the level below and writes the group's k largest as one
// list, its flags OR-ed, until one list a row is left; that last launch writes the
// ids, values (read back from the row) and status. Deterministic: every level a fixed
// grouping, no atomics but the count of the final list's real keys.
constexpr int kTopkThreads = 256;
constexpr int kTopkKeys = 2048;  // keys a block sorts

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

// Sorts the block's kTopkKeys keys in s into descending order.
__device__ void bitonic_desc(uint64_t* s) {
    for (int size = 2; size <= kTopkKeys; size <<= 1) {
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            __syncthreads();
            for (int t = static_cast<int>(threadIdx.x); t < kTopkKeys / 2; t += kTopkThreads) {
                const int i = 2 * t - (t & (stride - 1)), j = i + stride;
                const bool desc = (i & size) == 0;
                const uint64_t a = s[i], b = s[j];
                if ((a < b) == desc) {
                    s[i] = b;
                    s[j] = a;
                }
            }
        }
    }
    __syncthreads();
}

// One level's lists: [rows][lists][k] keys, then [rows][lists] flag words.
struct TopkLevel {
    uint64_t* keys;
    uint32_t* flags;
};

__global__ void __launch_bounds__(kTopkThreads)
    topk_segments_kernel(const float* x, int64_t stride, int32_t n, int32_t k, TopkLevel out) {
    __shared__ uint64_t s[kTopkKeys];
    pdl_begin();
    const int64_t r = blockIdx.y;
    const int32_t seg = static_cast<int32_t>(blockIdx.x), lists = static_cast<int32_t>(gridDim.x);
    const float* row = x + r * stride;
    uint32_t flags = 0;
    for (int t = static_cast<int>(threadIdx.x); t < kTopkKeys; t += kTopkThreads) {
        const int32_t i = seg * kTopkKeys + t;
        uint64_t key = 0;
        if (i < n) {
            const float v = __ldg(row + i);
            if (isnan(v)) {
                flags |= 1u;
            } else {
                flags |= v == INFINITY ? 2u : 0u;
                key = topk_key(v, i);
            }
        }
        s[t] = key;
    }
    flags = block_flags(flags);
    bitonic_desc(s);
    uint64_t* dst = out.keys + (r * lists + seg) * k;
    for (int t = static_cast<int>(threadIdx.x); t < k; t += kTopkThreads) dst[t] = s[t];
    if (threadIdx.x == 0) out.flags[r * lists + seg] = flags;
}

__global__ void __launch_bounds__(kTopkThreads)
    topk_merge_kernel(TopkLevel in, int32_t in_lists, int32_t k, TopkLevel out, ops::TopkRowsParams p) {
    __shared__ uint64_t s[kTopkKeys];
    pdl_begin();
    const int64_t r = blockIdx.y;
    const int32_t group = static_cast<int32_t>(blockIdx.x), per = kTopkKeys / k;
    const int32_t first = group * per, n_lists = min(per, in_lists - first);
    const uint64_t* src = in.keys + (r * in_lists + first) * k;
    for (int t = static_cast<int>(threadIdx.x); t < kTopkKeys; t += kTopkThreads)
        s[t] = t < n_lists * k ? src[t] : 0;
    uint32_t flags = 0;
    for (int t = static_cast<int>(threadIdx.x); t < n_lists; t += kTopkThreads)
        flags |= in.flags[r * in_lists + first + t];
    flags = block_flags(flags);
    bitonic_desc(s);
    if (gridDim.x > 1) {  // another level follows
        uint64_t* dst = out.keys + (r * gridDim.x + group) * k;
        for (int t = static_cast<int>(threadIdx.x); t < k; t += kTopkThreads) dst[t] = s[t];
        if (threadIdx.x == 0) out.flags[r * gridDim.x + group] = flags;
        return;
    }
    __shared__ int32_t valid;
    if (threadIdx.x == 0) valid = 0;
    __syncthreads();
    for (int t = static_cast<int>(threadIdx.x); t < k; t += kTopkThreads) {
        const uint64_t key = s[t];
        const bool real = static_cast<uint32_t>(key >> 32) > kNegInfOrd;
        const int32_t id = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key));
        p.ids[r * k + t] = real ? id : -1;
        // The value as stored (the key holds -0.0 as +0.0).
        p.values[r * k + t] = real ? __ldg(p.x + r * (p.stride != 0 ? p.stride : p.n) + id) : -INFINITY;
        if (real) atomicMax(&valid, t + 1);  // the real keys come first: their count
    }
    __syncthreads();
    if (threadIdx.x == 0)
        p.status[r] = (flags & 1u)   ? ops::kArgmaxNaN
                      : (flags & 2u) ? ops::kArgmaxPosInf
                      : valid == 0   ? ops::kArgmaxAllNegInf
                                     : valid;
}

// Lists of the first level (segments of kTopkKeys values) and the lists the next
// level can hold at most (the merge takes at least kTopkKeys / kTopkMax of them).
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
    return topk_level_bytes(rows, lists) + topk_level_bytes(rows, topk_merged_lists(lists)) + 16;
}

// Level buffers alternate between the scratch's two halves: the first level in A,
// the first merge's lists in B (at most topk_merged_lists of them), the next in A.
void launch_topk_rows(const ops::TopkRowsParams& p, cudaStream_t s) {
    if (!ops::check_topk_rows(p)) return;
    HF2Q_ASSERT(p.scratch != nullptr && p.rows <= 65535);
    const int64_t stride = p.stride != 0 ? p.stride : p.n;
    int64_t lists = topk_segments(p.n);
    auto* a = static_cast<uint8_t*>(p.scratch);
    uint8_t* b = a + (topk_level_bytes(p.rows, lists) + 15) / 16 * 16;
    TopkLevel in = topk_level(a, p.rows, lists, p.k);
    launch(topk_segments_kernel, dim3(static_cast<unsigned>(lists), static_cast<unsigned>(p.rows)), kTopkThreads, 0, s,
           p.x, stride, static_cast<int32_t>(p.n), p.k, in);
    HF2Q_CUDA_LAUNCH_CHECK();
    const int64_t per = kTopkKeys / p.k;
    for (bool to_b = true;; to_b = !to_b) {
        const int64_t groups = (lists + per - 1) / per;
        const TopkLevel out = topk_level(to_b ? b : a, p.rows, groups, p.k);
        launch(topk_merge_kernel, dim3(static_cast<unsigned>(groups), static_cast<unsigned>(p.rows)), kTopkThreads, 0,
               s, in, static_cast<int32_t>(lists), p.k, out, p);
        HF2Q_CUDA_LAUNCH_CHECK();
        if (groups == 1) return;
        in = out;
        lists = groups;
    }
}

}  // namespace hf2q::cuda

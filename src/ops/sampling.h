// Sampling ops over rows of logits in backend memory, so a sampled step copies token
// ids to the host instead of whole rows of n_vocab floats.
//
// argmax_rows: out[r] = the index of the largest of x[r][0..n), the lowest index on
// ties, exactly as runtime::argmax (src/runtime/sampling.h) picks greedy tokens. Where
// runtime::argmax throws, the op cannot (it runs on a device, inside CUDA graphs), so it
// writes a negative code instead, with runtime::argmax's priority: a NaN anywhere in
// the row first, then +inf, then a row with no value above -inf (every token banned).
// -0.0 and +0.0 compare equal (a tie).
//
// topk_rows: the k largest values of each row with their indices, largest first and
// the lower index first among equal values: exactly the candidates the host sampler's
// top-k stage keeps (runtime::init_candidates_top_k), so a top-k sampled step copies
// k (id, value) pairs per row instead of n_vocab floats and the host draws the same
// token from them.
#pragma once

#include <cstdint>
#include <limits>

#include "core/error.h"

namespace hf2q::ops {

// Results of argmax_rows that are not an index.
inline constexpr int32_t kArgmaxAllNegInf = -1;  // every value is -inf
inline constexpr int32_t kArgmaxNaN = -2;        // the row holds a NaN
inline constexpr int32_t kArgmaxPosInf = -3;     // the row holds +inf (and no NaN)

struct ArgmaxRowsParams {
    const float* x = nullptr;  // [rows][stride]; the first n values of each row are read
    int64_t stride = 0;        // floats between row starts; 0 means n (rows packed)
    int32_t* out = nullptr;    // [rows]
    // [rows] or null: the ids written here as well, in host memory from the backend's
    // alloc_host. A device backend writes them through its mapping of that memory, so
    // no copy on the stream stands between this step and the next (a greedy step's
    // ids: runtime/context_impl.h); the host reads them after Backend::wait_fence.
    int32_t* host_out = nullptr;
    int64_t rows = 0;
    int64_t n = 0;  // values per row, in [1, 2^31 - 1] (indices are int32)
};

// The row stride argmax_rows uses (0 stands for n).
inline int64_t argmax_stride(const ArgmaxRowsParams& p) {
    return p.stride != 0 ? p.stride : p.n;
}

// Every backend calls this first. Throws hf2q::Error naming the bad field; returns
// false when there is nothing to do (rows == 0; then the pointers are not used).
inline bool check_argmax_rows(const ArgmaxRowsParams& p) {
    if (p.rows < 0) fail("argmax_rows: rows ", p.rows, " is negative");
    if (p.rows == 0) return false;
    if (p.n < 1 || p.n > std::numeric_limits<int32_t>::max())
        fail("argmax_rows: n ", p.n, " is out of range [1, 2^31 - 1]");
    const int64_t stride = argmax_stride(p);
    if (stride < p.n)
        fail("argmax_rows: row stride ", stride, " is smaller than the row length ", p.n);
    if ((p.rows - 1) > (std::numeric_limits<int64_t>::max() - p.n) / stride)
        fail("argmax_rows: ", p.rows, " rows of stride ", stride, " overflow the index range");
    if (p.x == nullptr || p.out == nullptr) fail("argmax_rows: null input or output pointer");
    if (reinterpret_cast<uintptr_t>(p.x) % alignof(float) != 0 ||
        reinterpret_cast<uintptr_t>(p.out) % alignof(int32_t) != 0)
        fail("argmax_rows: misaligned input or output pointer");
    return true;
}

// topk_rows takes k in [1, kTopkMax].
inline constexpr int32_t kTopkMax = 256;

struct TopkRowsParams {
    const float* x = nullptr;  // [rows][stride]; the first n values of each row are read
    int64_t stride = 0;        // floats between row starts; 0 means n (rows packed)
    int64_t rows = 0;
    int64_t n = 0;             // values per row, in [1, 2^31 - 1]
    int32_t k = 0;             // entries per row, in [1, kTopkMax]
    // Row r's entries at r·k: ids[] its indices and values[] its values, in the order
    // above. Values above -inf come first; where a row has fewer than k of them, the
    // rest are id -1 and value -inf.
    int32_t* ids = nullptr;
    float* values = nullptr;
    // [rows]: the number of entries above -inf (1 .. k), or argmax_rows' codes, with its
    // priority: kArgmaxNaN (a NaN anywhere), kArgmaxPosInf, kArgmaxAllNegInf. A row with
    // a code has unspecified entries.
    int32_t* status = nullptr;
    // Backend scratch of Backend::topk_rows_scratch_bytes(rows, n) bytes (null where
    // that is 0).
    void* scratch = nullptr;
};

// Every backend calls this first. Throws hf2q::Error naming the bad field; returns
// false when there is nothing to do (rows == 0; then the pointers are not used).
inline bool check_topk_rows(const TopkRowsParams& p) {
    if (p.rows < 0) fail("topk_rows: rows ", p.rows, " is negative");
    if (p.rows == 0) return false;
    if (p.n < 1 || p.n > std::numeric_limits<int32_t>::max())
        fail("topk_rows: n ", p.n, " is out of range [1, 2^31 - 1]");
    if (p.k < 1 || p.k > kTopkMax) fail("topk_rows: k ", p.k, " is out of range [1, ", kTopkMax, "]");
    const int64_t stride = p.stride != 0 ? p.stride : p.n;
    if (stride < p.n) fail("topk_rows: row stride ", stride, " is smaller than the row length ", p.n);
    if ((p.rows - 1) > (std::numeric_limits<int64_t>::max() - p.n) / stride)
        fail("topk_rows: ", p.rows, " rows of stride ", stride, " overflow the index range");
    if (p.x == nullptr || p.ids == nullptr || p.values == nullptr || p.status == nullptr)
        fail("topk_rows: null input or output pointer");
    return true;
}

}  // namespace hf2q::ops

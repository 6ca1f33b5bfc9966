// Rows for the argmax_rows tests (CPU in tests/ops, CUDA in tests/cuda): every kind of
// row the op must get right, and the documented answer (ops/sampling.h) computed
// independently of any backend.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "ops/sampling.h"

namespace hf2q::ops_test {

enum class RowKind {
    random,           // distinct values: one maximum
    ties,             // the maximum at several positions (first, a middle one, the last)
    constant,         // every value equal: index 0
    some_neg_inf,     // -inf at most positions, finite elsewhere
    all_neg_inf,      // every token banned: kArgmaxAllNegInf
    nan,              // one NaN: kArgmaxNaN
    pos_inf,          // +inf at two positions: kArgmaxPosInf
    nan_and_inf,      // +inf before a NaN: the NaN wins (kArgmaxNaN)
    signed_zero_tie,  // -0.0 and +0.0 as the maximum compare equal: the first one
    max_first,
    max_last,
    small_ints,  // values in {0, 1, 2, 3}: many ties of 3
    denormals,   // the maximum among subnormal values (fails under flush-to-zero)
    strided_top,  // the largest values at every 256th index from 5: in one thread of each of
                  // the CUDA top-k kernel's blocks, whose floor then comes from few threads
    count,
};

// Deterministic and fast (a 64 × 262,144 grid is filled in milliseconds): splitmix64.
struct Fill {
    uint64_t state;
    uint64_t next() {
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    float uniform(float lo, float hi) {  // [lo, hi)
        return lo + (hi - lo) * static_cast<float>(next() >> 40) * 0x1.0p-24f;
    }
    int64_t index(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
};

inline void fill_row(float* x, int64_t n, RowKind kind, uint64_t seed) {
    constexpr float kInf = std::numeric_limits<float>::infinity();
    Fill f{seed};
    for (int64_t i = 0; i < n; ++i) x[i] = f.uniform(-10.0f, 10.0f);
    switch (kind) {
        case RowKind::random:
        case RowKind::count:
            break;
        case RowKind::ties: {
            const int64_t a = f.index(n);
            x[a] = x[a / 2] = x[n - 1] = 20.0f;
            break;
        }
        case RowKind::constant:
            std::fill(x, x + n, 1.5f);
            break;
        case RowKind::some_neg_inf:
            for (int64_t i = 0; i < n; ++i)
                if (i % 5 != 3) x[i] = -kInf;
            break;
        case RowKind::all_neg_inf:
            std::fill(x, x + n, -kInf);
            break;
        case RowKind::nan:
            x[f.index(n)] = std::numeric_limits<float>::quiet_NaN();
            break;
        case RowKind::pos_inf:
            x[f.index(n)] = kInf;
            x[f.index(n)] = kInf;
            break;
        case RowKind::nan_and_inf: {
            const int64_t a = f.index(n);
            x[a / 2] = kInf;
            x[a] = std::numeric_limits<float>::quiet_NaN();  // a == a / 2 when n == 1: NaN alone
            break;
        }
        case RowKind::signed_zero_tie:
            for (int64_t i = 0; i < n; ++i) x[i] = -1.0f - std::fabs(x[i]);
            x[n - 1] = 0.0f;
            x[f.index(n)] = -0.0f;
            break;
        case RowKind::max_first:
            x[0] = 100.0f;
            break;
        case RowKind::max_last:
            x[n - 1] = 100.0f;
            break;
        case RowKind::small_ints:
            for (int64_t i = 0; i < n; ++i) x[i] = std::floor(f.uniform(0.0f, 4.0f));
            break;
        case RowKind::denormals:
            for (int64_t i = 0; i < n; ++i)
                x[i] = static_cast<float>(f.next() % 7) * std::numeric_limits<float>::denorm_min();
            break;
        case RowKind::strided_top:
            for (int64_t i = 5; i < n; i += 256) x[i] = f.uniform(20.0f, 30.0f);
            break;
    }
}

// The contract of ops::argmax_rows, written independently of the backends: a NaN
// anywhere, else +inf as the maximum, else a maximum of -inf, else the first maximum
// (std::max_element keeps the first of equal elements).
inline int32_t expected_argmax(const float* x, int64_t n) {
    if (std::any_of(x, x + n, [](float v) { return std::isnan(v); })) return ops::kArgmaxNaN;
    const float* m = std::max_element(x, x + n);
    if (*m == std::numeric_limits<float>::infinity()) return ops::kArgmaxPosInf;
    if (*m == -std::numeric_limits<float>::infinity()) return ops::kArgmaxAllNegInf;
    return static_cast<int32_t>(m - x);
}

}  // namespace hf2q::ops_test

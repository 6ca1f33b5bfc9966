// The answer of ops::topk_rows (CPU tests in tests/ops, CUDA in tests/cuda), written
// independently of the backends: a full sort of the row's values above -inf by
// (value descending, index ascending), -0.0 equal to +0.0; the status codes of
// argmax_rows where the row holds a NaN, +inf or nothing above -inf. Rows come from
// argmax_rows_util.h's kinds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "ops/sampling.h"

namespace hf2q::ops_test {

struct TopkRow {
    std::vector<int32_t> ids;   // k entries, -1 past the real ones
    std::vector<float> values;  // k entries, -inf past the real ones
    int32_t status = 0;
};

inline TopkRow expected_topk(const float* x, int64_t n, int32_t k) {
    constexpr float kInf = std::numeric_limits<float>::infinity();
    TopkRow r;
    std::vector<int32_t> idx;
    bool nan = false, pos_inf = false;
    for (int64_t i = 0; i < n; ++i) {
        if (std::isnan(x[i])) nan = true;
        else if (x[i] > -kInf) idx.push_back(static_cast<int32_t>(i));
        if (x[i] == kInf) pos_inf = true;
    }
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
    const size_t real = std::min(idx.size(), static_cast<size_t>(k));
    for (int32_t t = 0; t < k; ++t) {
        const bool ok = static_cast<size_t>(t) < real;
        r.ids.push_back(ok ? idx[static_cast<size_t>(t)] : -1);
        r.values.push_back(ok ? x[idx[static_cast<size_t>(t)]] : -kInf);
    }
    r.status = nan ? ops::kArgmaxNaN : pos_inf ? ops::kArgmaxPosInf : real == 0 ? ops::kArgmaxAllNegInf
                                                                                 : static_cast<int32_t>(real);
    return r;
}

// Whether a backend's row equals the expected one: everything where the status is a
// count, the status alone where it is a code (the entries are unspecified then).
// Values compare by bits (a -0.0 must stay -0.0).
inline bool same_topk(const TopkRow& want, const int32_t* ids, const float* values, int32_t status, int32_t k) {
    if (status != want.status) return false;
    if (status < 0) return true;
    for (int32_t t = 0; t < k; ++t) {
        if (ids[t] != want.ids[static_cast<size_t>(t)]) return false;
        const float a = values[t], b = want.values[static_cast<size_t>(t)];
        if (std::signbit(a) != std::signbit(b) || !(a == b)) return false;
    }
    return true;
}

}  // namespace hf2q::ops_test

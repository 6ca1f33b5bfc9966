// Shared helpers for the op tests: random data, error metrics, and running one op on
// two CPU backends (1 and 3 threads) whose outputs must agree bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"

namespace hf2q::ops_test {

inline std::vector<float> randn(size_t n, uint32_t seed, float sigma = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

// max_i |got_i − ref_i| / max(max_i |ref_i|, floor): error relative to the vector's
// scale (element-wise relative error is meaningless where the reference cancels to ~0).
inline double rel_err(const float* got, const double* ref, size_t n, double floor = 1e-30) {
    double err = 0.0, mag = floor;
    for (size_t i = 0; i < n; ++i) {
        err = std::max(err, std::abs(static_cast<double>(got[i]) - ref[i]));
        mag = std::max(mag, std::abs(ref[i]));
        if (std::isnan(got[i]) != std::isnan(ref[i])) return INFINITY;
    }
    return err / mag;
}

// rel_err applied row by row of `row` elements; returns the worst row.
inline double rel_err_rows(const std::vector<float>& got, const std::vector<double>& ref,
                           size_t row) {
    EXPECT_EQ(got.size(), ref.size());
    double worst = 0.0;
    for (size_t r = 0; r + row <= got.size(); r += row)
        worst = std::max(worst, rel_err(got.data() + r, ref.data() + r, row));
    return worst;
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() &&
           (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// A 1-thread and a 3-thread backend, made once per test binary.
struct Backends {
    std::unique_ptr<ops::Backend> one = cpu::make_backend(1);
    std::unique_ptr<ops::Backend> three = cpu::make_backend(3);
};

inline Backends& backends() {
    static Backends b;
    return b;
}

// Runs `op` with the 1-thread backend on a copy of `buf`, then with the 3-thread
// backend on another copy; expects bitwise equal results and returns the first.
// `op` must write only through the buffer it is given.
inline std::vector<float> run_both(const std::vector<float>& buf,
                                   const std::function<void(ops::Backend&, float*)>& op) {
    std::vector<float> a = buf, b = buf;
    op(*backends().one, a.data());
    op(*backends().three, b.data());
    EXPECT_TRUE(bitwise_equal(a, b)) << "1-thread and 3-thread results differ";
    return a;
}

}  // namespace hf2q::ops_test

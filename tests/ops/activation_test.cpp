// GeGLU and the element-wise helpers against double-precision references.
#include <cmath>
#include <vector>

#include "ops_test_util.h"

namespace hf2q::ops_test {
namespace {

double ref_gelu_tanh(double u) {
    const double k = std::sqrt(2.0 / M_PI);
    return 0.5 * u * (1.0 + std::tanh(k * (u + 0.044715 * u * u * u)));
}

TEST(Geglu, FusedGateUpLayoutInPlace) {
    // gate and up interleaved per row as a fused [gate | up] projection output
    // [rows][2n]; out written over the gate half (stride 2n).
    for (int64_t n : {1, 5, 704, 2112}) {
        const int64_t rows = 9;
        const auto gu = randn(size_t(rows * 2 * n), uint32_t(n), 2.5f);
        auto got = run_both(gu, [&](ops::Backend& be, float* buf) {
            ops::GegluParams p;
            p.gate = buf;
            p.up = buf + n;
            p.out = buf;
            p.rows = rows;
            p.n = n;
            p.gate_stride = p.up_stride = p.out_stride = 2 * n;
            be.geglu(p);
        });
        std::vector<float> out;
        std::vector<double> ref;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = 0; i < n; ++i) {
                const size_t g = size_t(r * 2 * n + i);
                out.push_back(got[g]);
                ref.push_back(ref_gelu_tanh(gu[g]) * gu[g + size_t(n)]);
                EXPECT_EQ(got[g + size_t(n)], gu[g + size_t(n)]);  // up half untouched
            }
        EXPECT_LT(rel_err_rows(out, ref, out.size()), 1e-6) << "n=" << n;
    }
}

TEST(Geglu, GateOnlyAndKnownValues) {
    std::vector<float> g = {-6.0f, -1.0f, -1e-3f, 0.0f, 1e-3f, 0.5f, 1.0f, 3.0f, 10.0f};
    auto got = run_both(std::vector<float>(g.size(), 0.0f), [&](ops::Backend& be, float* out) {
        ops::GegluParams p;
        p.gate = g.data();
        p.out = out;
        p.rows = 1;
        p.n = int64_t(g.size());
        be.geglu(p);
    });
    for (size_t i = 0; i < g.size(); ++i)
        EXPECT_NEAR(got[i], ref_gelu_tanh(g[i]), 1e-6 * std::max(1.0, std::abs(double(g[i]))))
            << "u=" << g[i];
    EXPECT_EQ(got[3], 0.0f);
    EXPECT_NEAR(got[6], 0.8411919906, 1e-6);  // PyTorch gelu(1.0, approximate="tanh")
}

TEST(Elementwise, AddMulScaleAreExactlyRounded) {
    for (int64_t n : {0, 1, 17, 100003}) {
        const auto a = randn(size_t(n), 1), b = randn(size_t(n), 2);
        auto sum = run_both(std::vector<float>(size_t(n)),
                            [&](ops::Backend& be, float* y) { be.add(a.data(), b.data(), y, n); });
        auto prod = run_both(std::vector<float>(size_t(n)),
                             [&](ops::Backend& be, float* y) { be.mul(a.data(), b.data(), y, n); });
        auto scaled = run_both(a, [&](ops::Backend& be, float* x) { be.scale(x, 0.37f, n); });
        for (size_t i = 0; i < size_t(n); ++i) {
            // Sums and products of two floats are exact in double: rounding them once
            // to float is the correctly rounded f32 result.
            ASSERT_EQ(sum[i], float(double(a[i]) + double(b[i])));
            ASSERT_EQ(prod[i], float(double(a[i]) * double(b[i])));
            ASSERT_EQ(scaled[i], float(double(a[i]) * double(0.37f)));
        }
    }
}

TEST(Elementwise, SoftcapMatchesReference) {
    for (int64_t n : {0, 1, 262147}) {
        const auto x = randn(size_t(n), 3, 40.0f);
        auto got = run_both(x, [&](ops::Backend& be, float* buf) { be.softcap(buf, 30.0f, n); });
        for (size_t i = 0; i < size_t(n); ++i) {
            const double ref = 30.0 * std::tanh(double(x[i]) / 30.0);
            ASSERT_NEAR(got[i], ref, 2e-6 * 30.0) << "x=" << x[i];
            ASSERT_LE(std::abs(got[i]), 30.0f);
        }
    }
}

}  // namespace
}  // namespace hf2q::ops_test

// The CPU backend compiles its hot loops for AVX2 and for the x86-64 baseline
// (HF2Q_CPU_CLONES) and promises the same bits from both. This compiles the shared
// kernels both ways in one binary and compares them.
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "ops_test_util.h"

namespace hf2q::ops_test {
namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

__attribute__((target("avx2"))) float dot_avx2(const float* a, const float* b, int64_t n) {
    return cpu::dot_f32(a, b, n);
}
float dot_base(const float* a, const float* b, int64_t n) {
    return cpu::dot_f32(a, b, n);
}

__attribute__((target("avx2"))) void axpy_avx2(float* y, float a, const float* x, int64_t n) {
    cpu::axpy_f32(y, a, x, n);
}
void axpy_base(float* y, float a, const float* x, int64_t n) {
    cpu::axpy_f32(y, a, x, n);
}

TEST(Simd, Avx2AndBaselineClonesAgreeBitwise) {
    if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2 on this machine";
    const auto a = randn(4096, 1, 3.0f), b = randn(4096, 2, 0.01f);
    for (int64_t n : {0, 1, 7, 8, 31, 32, 33, 255, 256, 1000, 4096}) {
        const float x = dot_avx2(a.data(), b.data(), n), y = dot_base(a.data(), b.data(), n);
        EXPECT_EQ(0, std::memcmp(&x, &y, sizeof x)) << "n=" << n << " " << x << " vs " << y;
        std::vector<float> u = a, v = a;
        axpy_avx2(u.data(), 0.37f, b.data(), n);
        axpy_base(v.data(), 0.37f, b.data(), n);
        EXPECT_TRUE(bitwise_equal(u, v)) << "n=" << n;
    }
}

#endif

}  // namespace
}  // namespace hf2q::ops_test

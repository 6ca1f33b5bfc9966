// The CPU backend compiles its hot loops for AVX2 and for the x86-64 baseline
// (HF2Q_CPU_CLONES) and promises the same bits from both. This compiles the shared
// kernels both ways in one binary and compares them.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "ops_test_util.h"
#include "quant/quant.h"

namespace hf2q::ops_test {
namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

// B: float, or uint16_t (f16 bits, the KV cache's operand).
template <class B>
__attribute__((target("avx2"))) float dot_avx2(const float* a, const B* b, int64_t n) {
    return cpu::dot_f32(a, b, n);
}
template <class B>
float dot_base(const float* a, const B* b, int64_t n) {
    return cpu::dot_f32(a, b, n);
}

template <class B>
__attribute__((target("avx2"))) void axpy_avx2(float* y, float a, const B* x, int64_t n) {
    cpu::axpy_f32(y, a, x, n);
}
template <class B>
void axpy_base(float* y, float a, const B* x, int64_t n) {
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

TEST(Simd, F16OperandsGiveTheRoundedF32ResultAcrossClones) {
    if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2 on this machine";
    const auto a = randn(4096, 3, 3.0f), b = randn(4096, 4, 0.01f);
    std::vector<uint16_t> b16(b.size());
    std::vector<float> br(b.size());  // b rounded to f16, as f32
    for (size_t i = 0; i < b.size(); ++i) {
        b16[i] = quant::fp32_to_fp16(b[i]);
        br[i] = quant::fp16_to_fp32(b16[i]);
    }
    for (int64_t n : {0, 1, 7, 8, 31, 32, 33, 255, 256, 1000, 4096}) {
        const float x = dot_avx2(a.data(), b16.data(), n), y = dot_base(a.data(), b16.data(), n),
                    z = dot_base(a.data(), br.data(), n);
        EXPECT_EQ(0, std::memcmp(&x, &y, sizeof x)) << "n=" << n;
        EXPECT_EQ(0, std::memcmp(&x, &z, sizeof x)) << "n=" << n << ": f16 operand differs from its rounded f32 values";
        std::vector<float> u = a, v = a;
        axpy_avx2(u.data(), 0.37f, b16.data(), n);
        axpy_base(v.data(), 0.37f, br.data(), n);
        EXPECT_TRUE(bitwise_equal(u, v)) << "n=" << n;
    }
}

#endif

// Every one of the 65,536 f16 values converts as quant::fp16_to_fp32 (zeros,
// subnormals, normals, infinities; NaN stays NaN), scalar and eight at a time.
TEST(Simd, HalfToFloatIsExactForEveryValue) {
    for (uint32_t h0 = 0; h0 < 65536; h0 += 8) {
        uint16_t h[8];
        for (uint32_t k = 0; k < 8; ++k) h[k] = static_cast<uint16_t>(h0 + k);
        cpu::F8 v;
        cpu::half8_to_f8(h, v);
        for (int k = 0; k < 8; ++k) {
            const float want = quant::fp16_to_fp32(h[k]), scalar = cpu::half_to_f32(h[k]), lane = v[k];
            if (std::isnan(want)) {
                ASSERT_TRUE(std::isnan(scalar) && std::isnan(lane)) << "h=" << h[k];
            } else {
                ASSERT_EQ(0, std::memcmp(&want, &scalar, 4)) << "h=" << h[k];
                ASSERT_EQ(0, std::memcmp(&want, &lane, 4)) << "h=" << h[k];
            }
        }
    }
}

}  // namespace
}  // namespace hf2q::ops_test

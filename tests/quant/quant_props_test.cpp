// Properties of src/quant that need no reference file: FP16/BF16 conversion edge cases,
// argument checks, round-trip error bounds on gaussian data and vec_dot on odd row lengths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ggml_type.h"
#include "quant/quant.h"
#include "quant/quant_impl.h"

namespace hf2q::quant {
namespace {

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// ---- FP16 ---------------------------------------------------------------------------------

TEST(Fp16, SpecialValues) {
    EXPECT_EQ(fp32_to_fp16(0.0f), 0x0000);
    EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
    EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
    EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000);
    EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
    EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::infinity()), 0x7C00);
    EXPECT_EQ(fp32_to_fp16(-std::numeric_limits<float>::infinity()), 0xFC00);
    EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::quiet_NaN()), 0x7E00);
    EXPECT_EQ(fp32_to_fp16(from_bits(0xFF800001u)), 0xFE00);  // signalling NaN, sign kept
    EXPECT_EQ(fp32_to_fp16(1e6f), 0x7C00);                    // overflow
    EXPECT_EQ(fp32_to_fp16(0x1p-24f), 0x0001);                // smallest subnormal
    EXPECT_EQ(fp32_to_fp16(-0x1p-24f), 0x8001);
    EXPECT_EQ(fp32_to_fp16(0x1p-14f), 0x0400);  // smallest normal
    EXPECT_EQ(fp32_to_fp16(0x1p-14f - 0x1p-24f), 0x03FF);
    EXPECT_EQ(fp32_to_fp16(1e-30f), 0x0000);
    EXPECT_EQ(fp32_to_fp16(-1e-30f), 0x8000);
}

TEST(Fp16, RoundsToNearestEven) {
    // Ties between normals: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
    EXPECT_EQ(fp32_to_fp16(1.0f + 0x1p-11f), 0x3C00);             // tie -> even (down)
    EXPECT_EQ(fp32_to_fp16(1.0f + 0x1p-10f + 0x1p-11f), 0x3C02);  // tie -> even (up)
    EXPECT_EQ(fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);  // just above the tie
    EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7BFF);                    // below the overflow tie
    EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);                    // tie -> even = inf
    // Ties between subnormals (unit 2^-24).
    EXPECT_EQ(fp32_to_fp16(0x1p-25f), 0x0000);         // 0.5 ulp -> 0 (even)
    EXPECT_EQ(fp32_to_fp16(0x1p-25f * 3.0f), 0x0002);  // 1.5 ulp -> 2
    EXPECT_EQ(fp32_to_fp16(0x1p-25f * 5.0f), 0x0002);  // 2.5 ulp -> 2
    EXPECT_EQ(fp32_to_fp16(0x1p-25f + 0x1p-40f), 0x0001);
    // Carry from the largest subnormal into the smallest normal.
    EXPECT_EQ(fp32_to_fp16(0x1p-14f - 0x1p-25f), 0x0400);
}

TEST(Fp16, EveryHalfRoundTrips) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const float f = fp16_to_fp32(static_cast<uint16_t>(h));
        const bool nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
        if (nan) {
            EXPECT_TRUE(std::isnan(f)) << std::hex << h;
            EXPECT_EQ(fp32_to_fp16(f), (h & 0x8000) | 0x7E00) << std::hex << h;
        } else {
            ASSERT_EQ(fp32_to_fp16(f), h) << std::hex << h;
        }
    }
    EXPECT_EQ(fp16_to_fp32(0x0001), 0x1p-24f);
    EXPECT_EQ(bits(fp16_to_fp32(0x8000)), 0x80000000u);
    EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.0f);
}

// ---- FP8 E4M3 (the KV cache's e4m3 pools) ---------------------------------------------------

TEST(E4m3, SpecialValues) {
    EXPECT_EQ(fp32_to_e4m3(0.0f), 0x00);
    EXPECT_EQ(fp32_to_e4m3(-0.0f), 0x80);
    EXPECT_EQ(fp32_to_e4m3(1.0f), 0x38);   // exponent 7 (bias 7), mantissa 0
    EXPECT_EQ(fp32_to_e4m3(-2.0f), 0xC0);
    EXPECT_EQ(fp32_to_e4m3(448.0f), 0x7E);  // the largest finite
    EXPECT_EQ(fp32_to_e4m3(1e6f), 0x7E);    // saturates (__NV_SATFINITE), never NaN
    EXPECT_EQ(fp32_to_e4m3(-500.0f), 0xFE);
    EXPECT_EQ(fp32_to_e4m3(std::numeric_limits<float>::infinity()), 0x7E);
    EXPECT_EQ(fp32_to_e4m3(-std::numeric_limits<float>::infinity()), 0xFE);
    EXPECT_EQ(fp32_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
    EXPECT_EQ(fp32_to_e4m3(from_bits(0xFFC00000u)), 0xFF);  // NaN, sign kept
    EXPECT_EQ(fp32_to_e4m3(0x1p-9f), 0x01);                // smallest subnormal
    EXPECT_EQ(fp32_to_e4m3(-0x1p-9f), 0x81);
    EXPECT_EQ(fp32_to_e4m3(0x1p-6f), 0x08);  // smallest normal
    EXPECT_EQ(fp32_to_e4m3(7.0f * 0x1p-9f), 0x07);  // largest subnormal
    EXPECT_EQ(fp32_to_e4m3(1e-30f), 0x00);
    EXPECT_EQ(fp32_to_e4m3(-1e-30f), 0x80);
    EXPECT_TRUE(std::isnan(e4m3_to_fp32(0x7F)));
    EXPECT_TRUE(std::isnan(e4m3_to_fp32(0xFF)));
    EXPECT_EQ(e4m3_to_fp32(0x7E), 448.0f);
    EXPECT_EQ(e4m3_to_fp32(0x01), 0x1p-9f);
    EXPECT_EQ(bits(e4m3_to_fp32(0x80)), 0x80000000u);
}

TEST(E4m3, RoundsToNearestEven) {
    // Between 1 (0x38) and 1.125 (0x39): 1.0625 is the tie.
    EXPECT_EQ(fp32_to_e4m3(1.0625f), 0x38);                  // tie -> even (down)
    EXPECT_EQ(fp32_to_e4m3(1.125f + 0.0625f), 0x3A);         // tie -> even (up)
    EXPECT_EQ(fp32_to_e4m3(1.0625f + 0x1p-20f), 0x39);       // just above the tie
    EXPECT_EQ(fp32_to_e4m3(1.0625f - 0x1p-20f), 0x38);       // just below
    EXPECT_EQ(fp32_to_e4m3(1.9375f), 0x40);                  // tie of 1.875 and 2: carry into the exponent
    EXPECT_EQ(fp32_to_e4m3(447.0f), 0x7E);
    EXPECT_EQ(fp32_to_e4m3(440.0f), 0x7E);                   // nearer 448 than 416
    EXPECT_EQ(fp32_to_e4m3(432.0f), 0x7E);                   // tie of 416 (0x7D) and 448: even is 448
    EXPECT_EQ(fp32_to_e4m3(424.0f), 0x7D);                   // nearer 416
    // Subnormals: steps of 2^-9.
    EXPECT_EQ(fp32_to_e4m3(0x1p-10f), 0x00);                 // 0.5 step -> 0 (even)
    EXPECT_EQ(fp32_to_e4m3(3.0f * 0x1p-10f), 0x02);          // 1.5 steps -> 2
    EXPECT_EQ(fp32_to_e4m3(5.0f * 0x1p-10f), 0x02);          // 2.5 steps -> 2
    EXPECT_EQ(fp32_to_e4m3(15.0f * 0x1p-10f), 0x08);         // 7.5 steps -> 8: the smallest normal
}

// Every code decodes to a value that encodes back to it (NaN aside), and every value
// between two neighbouring codes goes to the nearer one.
TEST(E4m3, EveryCodeRoundTripsAndNeighboursSplitAtTheMidpoint) {
    for (uint32_t c = 0; c < 256; ++c) {
        if ((c & 0x7F) == 0x7F) continue;
        const float f = e4m3_to_fp32(static_cast<uint8_t>(c));
        EXPECT_EQ(fp32_to_e4m3(f), c) << c;
    }
    for (uint32_t c = 0; c < 0x7E; ++c) {
        const float a = e4m3_to_fp32(static_cast<uint8_t>(c)), b = e4m3_to_fp32(static_cast<uint8_t>(c + 1));
        const float mid = 0.5f * (a + b);  // exact: neighbours differ in one step
        EXPECT_EQ(fp32_to_e4m3(std::nextafter(mid, a)), c) << c;
        EXPECT_EQ(fp32_to_e4m3(std::nextafter(mid, b)), c + 1) << c;
        EXPECT_EQ(fp32_to_e4m3(mid), (c % 2 == 0) ? c : c + 1) << c;
    }
}

// ---- int8 rows with a scale (the KV cache's i8 pools) ----------------------------------------

// A row whose largest magnitude is 127 has d = 1 and id = 1 exactly, so the codes
// are the values rounded to nearest even.
TEST(I8Row, ScaleOneRoundsToNearestEven) {
    const float x[] = {127.0f, 2.5f, -3.5f, 0.5f, -0.5f, 1.49f, -126.6f, 0.0f};
    int8_t c[8];
    EXPECT_EQ(quantize_row_i8(x, c, 8), 1.0f);
    const int8_t want[] = {127, 2, -4, 0, 0, 1, -127, 0};
    for (int i = 0; i < 8; ++i) EXPECT_EQ(c[i], want[i]) << i;
}

// On random rows of every scale: d = max|x| / 127, the largest value gets ±127, and
// every code is a nearest step: |c·d − x| ≤ d / 2 (up to the rounding of d and 1/d).
TEST(I8Row, CodesAreNearestSteps) {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int trial = 0; trial < 200; ++trial) {
        const int n = 1 + trial % 300;
        const float mag = std::ldexp(1.0f, trial % 40 - 20);
        std::vector<float> x(static_cast<size_t>(n));
        for (float& v : x) v = nd(rng) * mag;
        std::vector<int8_t> c(x.size());
        const float d = quantize_row_i8(x.data(), c.data(), n);
        float amax = 0.0f;
        size_t at = 0;
        for (size_t i = 0; i < x.size(); ++i)
            if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), at = i;
        EXPECT_EQ(d, amax / 127.0f);
        EXPECT_EQ(std::abs(int{c[at]}), 127) << trial;
        for (size_t i = 0; i < x.size(); ++i) {
            EXPECT_LE(std::abs(int{c[i]}), 127);
            EXPECT_LE(std::fabs(static_cast<float>(c[i]) * d - x[i]), 0.5f * d * (1.0f + 1e-5f)) << trial << " " << i;
        }
    }
}

// A zero row has d = 0 and zero codes; NaN values get code 0 without changing d.
TEST(I8Row, ZeroRowsAndNaN) {
    const float z[4] = {0.0f, -0.0f, 0.0f, 0.0f};
    int8_t c[4] = {1, 1, 1, 1};
    EXPECT_EQ(quantize_row_i8(z, c, 4), 0.0f);
    for (int8_t v : c) EXPECT_EQ(v, 0);
    const float x[3] = {std::numeric_limits<float>::quiet_NaN(), 127.0f, -1.0f};
    EXPECT_EQ(quantize_row_i8(x, c, 3), 1.0f);
    EXPECT_EQ(c[0], 0);
    EXPECT_EQ(c[1], 127);
    EXPECT_EQ(c[2], -1);
}

// quantize_rows_i8 is quantize_row_i8 on each contiguous row (a zero row included).
TEST(I8Row, RowsAreEachRow) {
    std::mt19937 rng(12);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int64_t rows = 5, n = 37;
    std::vector<float> x(size_t(rows * n));
    for (float& v : x) v = nd(rng);
    std::fill_n(x.begin() + 2 * n, n, 0.0f);
    std::vector<int8_t> c(x.size()), want(x.size());
    std::vector<float> d(size_t(rows), -1.0f);
    quantize_rows_i8(x.data(), c.data(), d.data(), rows, n);
    for (int64_t r = 0; r < rows; ++r) {
        EXPECT_EQ(d[size_t(r)], quantize_row_i8(x.data() + r * n, want.data() + r * n, n)) << r;
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(c[size_t(r * n + i)], want[size_t(r * n + i)]) << r << " " << i;
    }
}

// Independent check of the rounding: the result is a nearest half, and on a tie the even one.
TEST(Fp16, RandomFloatsRoundToNearest) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<uint32_t> exp(100, 143);  // 2^-27 .. 2^16
    std::uniform_int_distribution<uint32_t> man(0, 0x7FFFFF);
    for (int i = 0; i < 200000; ++i) {
        const uint32_t u = (exp(rng) << 23) | man(rng) | (i % 2 ? 0x80000000u : 0u);
        const float f = from_bits(u);
        const uint16_t h = fp32_to_fp16(f);
        if ((h & 0x7FFF) == 0x7C00) {
            ASSERT_GE(std::fabs(f), 65520.0f) << f;
            continue;
        }
        const double err = std::fabs(static_cast<double>(fp16_to_fp32(h)) - f);
        for (int step : {-1, 1}) {
            const auto nb = static_cast<uint16_t>(h + step);
            if ((nb & 0x7FFF) >= 0x7C00 || ((nb ^ h) & 0x8000)) continue;
            const double nerr = std::fabs(static_cast<double>(fp16_to_fp32(nb)) - f);
            ASSERT_LE(err, nerr) << "f=" << f << " h=" << h;
            if (err == nerr) {
                ASSERT_EQ(h & 1, 0) << "tie not to even: f=" << f;
            }
        }
    }
}

// ---- BF16 ---------------------------------------------------------------------------------

TEST(Bf16, EdgeCases) {
    EXPECT_EQ(fp32_to_bf16(0.0f), 0x0000);
    EXPECT_EQ(fp32_to_bf16(-0.0f), 0x8000);
    EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
    EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
    EXPECT_EQ(fp32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
    EXPECT_EQ(fp32_to_bf16(from_bits(0x7F800001u)), 0x7FC0);  // signalling NaN made quiet
    EXPECT_EQ(fp32_to_bf16(from_bits(0xFFC12345u)), 0xFFC1);  // NaN: no rounding
    EXPECT_EQ(fp32_to_bf16(from_bits(0x3F808000u)), 0x3F80);  // tie -> even (down)
    EXPECT_EQ(fp32_to_bf16(from_bits(0x3F818000u)), 0x3F82);  // tie -> even (up)
    EXPECT_EQ(fp32_to_bf16(from_bits(0x3F808001u)), 0x3F81);  // above the tie
    EXPECT_EQ(fp32_to_bf16(from_bits(0x7F7FFFFFu)), 0x7F80);  // FLT_MAX rounds to inf
    EXPECT_EQ(fp32_to_bf16(from_bits(0x00012345u)), 0x0001);  // subnormals are kept
    EXPECT_EQ(fp32_to_bf16(from_bits(0x80008000u)), 0x8000);  // subnormal tie -> even
    EXPECT_EQ(bits(bf16_to_fp32(0x8001)), 0x80010000u);
    for (uint32_t h = 0; h < 0x10000; ++h) {
        if ((h & 0x7F80) == 0x7F80 && (h & 0x7F)) continue;  // NaN
        ASSERT_EQ(fp32_to_bf16(bf16_to_fp32(static_cast<uint16_t>(h))), h);
    }
}

// ---- argument checks ------------------------------------------------------------------------

TEST(QuantArgs, UnsupportedTypesThrow) {
    float x[256] = {};
    uint8_t buf[1024] = {};
    for (GgmlType t :
         {GgmlType::Q8_1, GgmlType::Q8_K, GgmlType::IQ2_XXS, GgmlType::IQ3_S, GgmlType::TQ1_0,
          GgmlType::I8, GgmlType::F64, GgmlType::NVFP4, GgmlType::Q1_0}) {
        EXPECT_FALSE(is_supported(t)) << ggml_type_name(t);
        EXPECT_THROW(quantize(t, x, buf, 1, 256, nullptr), Error) << ggml_type_name(t);
        EXPECT_THROW(dequantize_row(t, buf, x, 256), Error) << ggml_type_name(t);
        EXPECT_THROW(vec_dot_f32(t, buf, x, 256), Error) << ggml_type_name(t);
    }
    EXPECT_FALSE(is_supported(static_cast<GgmlType>(4)));  // removed Q4_2
    EXPECT_THROW(dequantize_row(static_cast<GgmlType>(4), buf, x, 32), Error);
    try {
        quantize(GgmlType::IQ2_XXS, x, buf, 1, 256, nullptr);
        FAIL() << "no throw";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("iq2_xxs"), std::string::npos) << e.what();
    }
}

TEST(QuantArgs, BadRowLengthsThrow) {
    float x[512] = {};
    uint8_t buf[2048] = {};
    EXPECT_THROW(quantize(GgmlType::Q4_0, x, buf, 1, 48, nullptr), Error);
    EXPECT_THROW(quantize(GgmlType::Q4_K, x, buf, 1, 288, nullptr), Error);
    EXPECT_THROW(quantize(GgmlType::Q8_0, x, buf, 1, -32, nullptr), Error);
    EXPECT_THROW(quantize(GgmlType::Q8_0, x, buf, -1, 32, nullptr), Error);
    EXPECT_THROW(dequantize_row(GgmlType::IQ4_XS, buf, x, 100), Error);
    EXPECT_THROW(dequantize_row(GgmlType::MXFP4, buf, x, 33), Error);
    EXPECT_THROW(vec_dot_f32(GgmlType::Q6_K, buf, x, 128), Error);
    EXPECT_THROW(vec_dot_f32(GgmlType::F16, buf, x, -1), Error);
    try {
        dequantize_row(GgmlType::Q5_K, buf, x, 300);
        FAIL() << "no throw";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("300"), std::string::npos) << msg;
        EXPECT_NE(msg.find("q5_K"), std::string::npos) << msg;
    }
    // Zero rows / zero-length rows are valid and write nothing.
    EXPECT_EQ(quantize(GgmlType::Q4_K, x, buf, 0, 256, nullptr), 0u);
    EXPECT_EQ(quantize(GgmlType::Q4_K, x, buf, 3, 0, nullptr), 0u);
    EXPECT_EQ(vec_dot_f32(GgmlType::Q8_0, buf, x, 0), 0.0f);
}

// ---- round trip on gaussian data --------------------------------------------------------------

struct Bound {
    GgmlType type;
    double max_rel_rms;
};

// Relative RMS error of quantize -> dequantize, measured with this data (see docs/formats.md);
// bounds leave ~1.5x headroom.
const Bound kBounds[] = {
    {GgmlType::F32, 0.0},    {GgmlType::F16, 5e-4},    {GgmlType::BF16, 4e-3},
    {GgmlType::Q8_0, 0.01},  {GgmlType::Q4_0, 0.15},   {GgmlType::Q4_1, 0.12},
    {GgmlType::Q5_0, 0.075}, {GgmlType::Q5_1, 0.06},   {GgmlType::Q2_K, 0.45},
    {GgmlType::Q3_K, 0.25},  {GgmlType::Q4_K, 0.1},    {GgmlType::Q5_K, 0.05},
    {GgmlType::Q6_K, 0.025}, {GgmlType::IQ4_NL, 0.12}, {GgmlType::IQ4_XS, 0.12},
    {GgmlType::MXFP4, 0.2},
};

class RoundTrip : public ::testing::TestWithParam<Bound> {};

TEST_P(RoundTrip, ErrorWithinBound) {
    const GgmlType t = GetParam().type;
    constexpr int64_t kRows = 4;
    constexpr int64_t kN = 2048;
    std::mt19937 rng(42);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    std::vector<float> x(kRows * kN);
    for (auto& v : x) v = gauss(rng);
    std::vector<float> imat(kN);
    for (auto& v : imat) v = 0.1f + std::fabs(gauss(rng));
    for (const float* qw :
         {static_cast<const float*>(nullptr), static_cast<const float*>(imat.data())}) {
        const size_t row_bytes = *ggml_row_size(t, kN);
        std::vector<uint8_t> q(row_bytes * kRows);
        ASSERT_EQ(quantize(t, x.data(), q.data(), kRows, kN, qw), q.size());
        std::vector<float> y(kN);
        double err = 0.0;
        double ref = 0.0;
        for (int64_t r = 0; r < kRows; ++r) {
            dequantize_row(t, q.data() + r * row_bytes, y.data(), kN);
            for (int64_t i = 0; i < kN; ++i) {
                const double d = static_cast<double>(y[i]) - x[r * kN + i];
                err += d * d;
                ref += static_cast<double>(x[r * kN + i]) * x[r * kN + i];
            }
        }
        const double rel = std::sqrt(err / ref);
        EXPECT_LE(rel, GetParam().max_rel_rms) << ggml_type_name(t) << (qw ? " (imatrix)" : "");
        std::printf("[ measure  ] %-7s%s rel RMS %.5f\n", std::string(ggml_type_name(t)).c_str(),
                    qw ? " imatrix" : "        ", rel);
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, RoundTrip, ::testing::ValuesIn(kBounds),
                         [](const auto& p) { return std::string(ggml_type_name(p.param.type)); });

// vec_dot on row lengths that leave a partial 256-element chunk, and on unaligned rows.
TEST_P(RoundTrip, VecDotOddLengths) {
    const GgmlType t = GetParam().type;
    const int64_t bs = ggml_traits(t).block_size;
    std::mt19937 rng(5);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    const std::vector<int64_t> lengths = {bs, 9 * bs, 256 * 3 + (bs == 1 ? 7 : 0),
                                          bs == 256 ? 1280 : 32 * 41};
    for (int64_t n : lengths) {
        std::vector<float> w(static_cast<size_t>(n));
        std::vector<float> x(static_cast<size_t>(n));
        for (auto& v : w) v = gauss(rng);
        for (auto& v : x) v = gauss(rng);
        const size_t row_bytes = *ggml_row_size(t, static_cast<uint64_t>(n));
        std::vector<uint8_t> q(row_bytes + 1);
        quantize(t, w.data(), q.data() + 1, 1, n, nullptr);
        std::vector<float> y(static_cast<size_t>(n));
        dequantize_row(t, q.data() + 1, y.data(), n);
        double ref = 0.0;
        double mag = 0.0;
        for (size_t i = 0; i < y.size(); ++i) {
            ref += static_cast<double>(y[i]) * x[i];
            mag += std::fabs(static_cast<double>(y[i]) * x[i]);
        }
        const float got = vec_dot_f32(t, q.data() + 1, x.data(), n);
        EXPECT_LE(std::fabs(got - ref), 1e-5 * mag) << ggml_type_name(t) << " n=" << n;
    }
}

// Non-finite and extreme inputs (NaN, ±inf, ±FLT_MAX, subnormals) give garbage blocks, as in
// ggml, but must not trip the sanitizers and must be deterministic.
TEST_P(RoundTrip, ExtremeInputsAreSafe) {
    const GgmlType t = GetParam().type;
    constexpr int64_t kN = 512;
    const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::max(),
                              -std::numeric_limits<float>::max(),
                              std::numeric_limits<float>::denorm_min(),
                              -1e-40f,
                              0.0f,
                              -0.0f,
                              1.0f};
    std::vector<float> x(3 * kN);
    for (int64_t i = 0; i < kN; ++i) {
        x[static_cast<size_t>(i)] = specials[(i * 7) % 10];                    // mixed
        x[static_cast<size_t>(kN + i)] = static_cast<float>(i % 13) * 1e-41f;  // subnormal
        x[static_cast<size_t>(2 * kN + i)] = (i % 2 ? -3e38f : 2e38f) * (i % 3 ? 1 : 0.5f);  // huge
    }
    std::vector<float> imat(kN, 1.0f);
    imat[5] = 0.0f;
    const size_t row_bytes = *ggml_row_size(t, kN);
    for (const float* qw :
         {static_cast<const float*>(nullptr), static_cast<const float*>(imat.data())}) {
        std::vector<uint8_t> a(3 * row_bytes);
        std::vector<uint8_t> b(3 * row_bytes);
        quantize(t, x.data(), a.data(), 3, kN, qw);
        quantize(t, x.data(), b.data(), 3, kN, qw);
        EXPECT_EQ(a, b) << ggml_type_name(t);
        std::vector<float> y(kN);
        for (int r = 0; r < 3; ++r) {
            dequantize_row(t, a.data() + r * row_bytes, y.data(), kN);
            (void)vec_dot_f32(t, a.data() + r * row_bytes, x.data() + kN, kN);
        }
    }
}

// Arbitrary bytes (as a corrupt file would hold) decode without tripping the sanitizers, and
// vec_dot agrees with dequantize + dot wherever the decoded row is finite.
TEST_P(RoundTrip, RandomBytesDecode) {
    const GgmlType t = GetParam().type;
    constexpr int64_t kN = 1024;
    const size_t row_bytes = *ggml_row_size(t, kN);
    std::mt19937 rng(11);
    std::vector<uint8_t> q(row_bytes);
    std::vector<float> x(kN, 0.5f);
    std::vector<float> y(kN);
    for (int rep = 0; rep < 8; ++rep) {
        for (auto& b : q) b = static_cast<uint8_t>(rng());
        dequantize_row(t, q.data(), y.data(), kN);
        double ref = 0.0;
        double mag = 0.0;
        for (float v : y) {
            ref += 0.5 * v;
            mag += std::fabs(0.5 * v);
        }
        const float got = vec_dot_f32(t, q.data(), x.data(), kN);
        if (std::isfinite(mag) && mag < 1e30) {
            EXPECT_LE(std::fabs(got - ref), 1e-5 * mag) << ggml_type_name(t);
        }
    }
}

// Q8_1 (activation helper): same d and quants as Q8_0, plus s = f16(d · Σq).
TEST(Q8_1, MatchesQ8_0PlusSum) {
    std::mt19937 rng(3);
    std::normal_distribution<float> gauss(0.0f, 2.0f);
    std::vector<float> x(64);
    for (auto& v : x) v = gauss(rng);
    for (int j = 32; j < 64; ++j) x[static_cast<size_t>(j)] = 0.0f;  // second block all zero
    uint8_t q8_0[68];
    uint8_t q8_1[72];
    quantize(GgmlType::Q8_0, x.data(), q8_0, 1, 64, nullptr);
    detail::quantize_row_q8_1(x.data(), q8_1, 64);
    for (int b = 0; b < 2; ++b) {
        const uint8_t* a = q8_0 + 34 * b;
        const uint8_t* c = q8_1 + 36 * b;
        EXPECT_EQ(std::memcmp(a, c, 2), 0) << "d of block " << b;
        EXPECT_EQ(std::memcmp(a + 2, c + 4, 32), 0) << "quants of block " << b;
        int sum = 0;
        for (int j = 0; j < 32; ++j) sum += static_cast<int8_t>(a[2 + j]);
        EXPECT_NE(sum == 0, b == 0);
        const float d32 = [&] {
            float amax = 0.0f;
            for (int j = 0; j < 32; ++j)
                amax = std::fmax(amax, std::fabs(x[static_cast<size_t>(32 * b + j)]));
            return amax / 127.0f;
        }();
        EXPECT_EQ(c[2] | (c[3] << 8), fp32_to_fp16(static_cast<float>(sum) * d32))
            << "s of block " << b;
    }
}

}  // namespace
}  // namespace hf2q::quant

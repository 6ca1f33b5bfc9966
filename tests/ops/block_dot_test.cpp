// block_dot (backends/cpu/block_dot.h), matmul's path for a few tokens, promises
// dot_f32(dequantize_row(row), x) bit for bit for every format it decodes, in both SIMD
// clones. Rows here are random bytes (every code, every packed scale) with finite random
// f16 scales, zeros, negative zeros and subnormals among them.
#include "backends/cpu/block_dot.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/ggml_type.h"
#include "ops_test_util.h"
#include "quant/quant.h"

namespace hf2q::ops_test {
namespace {

using cpu::BlockDotArgs;

const GgmlType kFormats[] = {GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                             GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K,
                             GgmlType::Q5_K, GgmlType::Q6_K};

// A finite f16 with a random sign: ±0 and subnormals one time in four, else exponents
// 2^-14 .. 2^2.
uint16_t random_half(std::mt19937& rng) {
    const uint32_t r = rng();
    const uint16_t sign = static_cast<uint16_t>((r & 1u) << 15);
    if ((r >> 1) % 4 == 0) {  // zero or a subnormal
        const uint32_t mantissa = (r >> 13) % 2 ? (r >> 3) % 1024u : 0u;
        return static_cast<uint16_t>(sign | mantissa);
    }
    const uint16_t exp = static_cast<uint16_t>(1 + (r >> 3) % 17);
    return static_cast<uint16_t>(sign | (exp << 10) | ((r >> 8) & 0x3FFu));
}

void put_half(uint8_t* p, uint16_t h) {
    p[0] = static_cast<uint8_t>(h & 0xFF);
    p[1] = static_cast<uint8_t>(h >> 8);
}

// n_rows rows of n_in values of type t: random bytes, then every f16 field (the block
// scales; every value of F16 rows) made a finite random half. BF16 rows: random finite
// values (exponent byte below 0x90).
std::vector<uint8_t> random_rows(GgmlType t, int64_t n_rows, int64_t n_in, uint32_t seed) {
    const uint64_t rb = *ggml_row_size(t, static_cast<uint64_t>(n_in));
    std::vector<uint8_t> b(static_cast<size_t>(rb * static_cast<uint64_t>(n_rows)));
    std::mt19937 rng(seed);
    for (auto& v : b) v = static_cast<uint8_t>(rng());
    const uint32_t ts = ggml_traits(t).type_size;
    for (size_t off = 0; off < b.size(); off += ts) {
        uint8_t* blk = b.data() + off;
        switch (t) {
            case GgmlType::F16:
                put_half(blk, random_half(rng));
                break;
            case GgmlType::BF16:
                blk[1] = static_cast<uint8_t>((blk[1] & 0x80) | (blk[1] % 0x48));
                break;
            case GgmlType::Q4_1:
            case GgmlType::Q5_1:
            case GgmlType::Q4_K:
            case GgmlType::Q5_K:  // d and m / dmin, the first two halves
                put_half(blk, random_half(rng));
                put_half(blk + 2, random_half(rng));
                break;
            case GgmlType::Q6_K:
                put_half(blk + ts - 2, random_half(rng));
                break;  // d, last
            default:
                put_half(blk, random_half(rng));
                break;  // d, first
        }
    }
    return b;
}

// The definition: each row decoded by quant::dequantize_row, then dot_f32.
std::vector<float> reference(GgmlType t, const std::vector<uint8_t>& w, const BlockDotArgs& a) {
    std::vector<float> y(static_cast<size_t>(a.n_tok * a.ys), -7.0f),
        row(static_cast<size_t>(a.n_in));
    for (int64_t r = 0; r < a.n_rows; ++r) {
        quant::dequantize_row(t, w.data() + static_cast<uint64_t>(r) * a.row_bytes, row.data(),
                              a.n_in);
        for (int64_t k = 0; k < a.n_tok; ++k)
            y[static_cast<size_t>(k * a.ys + r)] = cpu::dot_f32(row.data(), a.x + k * a.xs, a.n_in);
    }
    return y;
}

// The products (and, with `decode` set, block_decode's rows into decode), inlined into
// a function compiled for AVX2 and into one for the baseline.
template <class Fmt>
[[gnu::always_inline]] inline void run(const BlockDotArgs& a, float* decode) {
    if (decode == nullptr) return cpu::block_dot_detail::rows<Fmt>(a);
    for (int64_t r = 0; r < a.n_rows; ++r)
        cpu::block_dot_detail::decode_row<Fmt>(a.w + uint64_t(r) * a.row_bytes, a.n_in,
                                               decode + r * a.n_in);
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
template <class Fmt>
__attribute__((target("avx2"))) void run_avx2(const BlockDotArgs& a, float* decode) {
    run<Fmt>(a, decode);
}
#else
template <class Fmt>
void run_avx2(const BlockDotArgs&, float*) {}
#endif
template <class Fmt>
void run_base(const BlockDotArgs& a, float* decode) {
    run<Fmt>(a, decode);
}
// For block_dot_detail::visit: the format's run in one clone.
template <bool kAvx2>
struct Clone {
    const BlockDotArgs& a;
    float* decode = nullptr;
    template <class Fmt>
    void operator()() const {
        if constexpr (kAvx2)
            run_avx2<Fmt>(a, decode);
        else
            run_base<Fmt>(a, decode);
    }
};
using Avx2 = Clone<true>;
using Base = Clone<false>;
bool has_avx2() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    return __builtin_cpu_supports("avx2");
#else
    return false;
#endif
}

TEST(BlockDot, EqualsDotF32OfTheDecodedRowInBothClones) {
    uint32_t seed = 1;
    for (GgmlType t : kFormats) {
        const auto name = std::string(ggml_type_name(t));
        const int64_t bs = ggml_traits(t).block_size;
        for (int64_t n_in : {32, 64, 256, 512, 2816}) {
            if (n_in % bs != 0) continue;
            for (int64_t n_rows : {1, 5}) {
                const auto w = random_rows(t, n_rows, n_in, ++seed);
                for (int64_t n_tok : {1, 2, 3, 4, 5, 9}) {
                    const int64_t xs = n_in + 8, ys = n_rows + 3;
                    const auto x = randn(static_cast<size_t>(n_tok * xs), ++seed, 2.0f);
                    std::vector<float> y(static_cast<size_t>(n_tok * ys), -7.0f);
                    const BlockDotArgs a{w.data(), *ggml_row_size(t, static_cast<uint64_t>(n_in)),
                                         n_rows,   n_in,
                                         x.data(), xs,
                                         n_tok,    y.data(),
                                         ys};
                    const auto want = reference(t, w, a);
                    const std::string at = name + " n_in=" + std::to_string(n_in) +
                                           " rows=" + std::to_string(n_rows) +
                                           " tokens=" + std::to_string(n_tok);
                    cpu::block_dot(t, a);  // the dispatcher, this machine's clone
                    EXPECT_TRUE(bitwise_equal(y, want)) << at << " (dispatch)";
                    std::fill(y.begin(), y.end(), -7.0f);
                    ASSERT_TRUE(cpu::block_dot_detail::visit(t, Base{a}));
                    EXPECT_TRUE(bitwise_equal(y, want)) << at << " (baseline)";
                    if (has_avx2()) {
                        std::fill(y.begin(), y.end(), -7.0f);
                        ASSERT_TRUE(cpu::block_dot_detail::visit(t, Avx2{a}));
                        EXPECT_TRUE(bitwise_equal(y, want)) << at << " (avx2)";
                    }
                }
            }
        }
    }
}

TEST(BlockDot, DecodeEqualsDequantizeRowInBothClones) {
    uint32_t seed = 100;
    for (GgmlType t : kFormats) {
        for (int64_t n_in : {32, 256, 2816}) {
            if (n_in % ggml_traits(t).block_size != 0) continue;
            const int64_t n_rows = 3;
            const auto w = random_rows(t, n_rows, n_in, ++seed);
            const uint64_t rb = *ggml_row_size(t, static_cast<uint64_t>(n_in));
            std::vector<float> want(static_cast<size_t>(n_rows * n_in)), got(want.size());
            for (int64_t r = 0; r < n_rows; ++r)
                quant::dequantize_row(t, w.data() + r * rb, want.data() + r * n_in, n_in);
            const BlockDotArgs a{w.data(), rb, n_rows, n_in, nullptr, 0, 0, nullptr, 0};
            const auto at = std::string(ggml_type_name(t)) + " n_in=" + std::to_string(n_in);
            cpu::block_decode(t, w.data(), rb, n_rows, n_in, got.data());
            EXPECT_TRUE(bitwise_equal(got, want)) << at << " (dispatch)";
            std::fill(got.begin(), got.end(), -7.0f);
            ASSERT_TRUE(cpu::block_dot_detail::visit(t, Base{a, got.data()}));
            EXPECT_TRUE(bitwise_equal(got, want)) << at << " (baseline)";
            if (has_avx2()) {
                std::fill(got.begin(), got.end(), -7.0f);
                ASSERT_TRUE(cpu::block_dot_detail::visit(t, Avx2{a, got.data()}));
                EXPECT_TRUE(bitwise_equal(got, want)) << at << " (avx2)";
            }
        }
    }
}

TEST(BlockDot, CoversTheModelFormatsOnly) {
    for (GgmlType t : kFormats) {
        EXPECT_TRUE(cpu::has_block_dot(t, 256)) << ggml_type_name(t);
        EXPECT_FALSE(cpu::has_block_dot(t, 0)) << ggml_type_name(t);
        EXPECT_FALSE(cpu::has_block_dot(t, 16)) << ggml_type_name(t);
    }
    EXPECT_TRUE(cpu::has_block_decode(GgmlType::Q6_K, 256));
    EXPECT_FALSE(cpu::has_block_decode(GgmlType::Q6_K, 32));
    EXPECT_FALSE(cpu::has_block_decode(GgmlType::Q4_K, 256));  // quant's loop is as fast
    EXPECT_FALSE(cpu::has_block_decode(GgmlType::Q2_K, 256));
    EXPECT_TRUE(cpu::has_block_dot(GgmlType::F16, 96));
    EXPECT_FALSE(cpu::has_block_dot(GgmlType::F16, 48));    // not whole groups of 32
    EXPECT_FALSE(cpu::has_block_dot(GgmlType::Q4_K, 32));   // not whole blocks
    EXPECT_FALSE(cpu::has_block_dot(GgmlType::F32, 256));   // read in place
    EXPECT_FALSE(cpu::has_block_dot(GgmlType::Q2_K, 256));  // decoded into tiles
    EXPECT_FALSE(cpu::has_block_dot(GgmlType::IQ4_NL, 256));
    EXPECT_FALSE(cpu::has_block_dot(GgmlType::MXFP4, 256));
}

}  // namespace
}  // namespace hf2q::ops_test

// matmul and get_rows on every weight storage type the model uses, against
// dequantize_row + a naive double triple loop.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ggml_type.h"
#include "ops_test_util.h"
#include "quant/quant.h"

namespace hf2q::ops_test {
namespace {

// A quantized random weight and its decoded f32 values (what the kernel must use).
struct Weight {
    std::vector<uint8_t> bytes;
    std::vector<float> deq;  // [n_out][n_in]
    ops::WeightView view;
};

Weight make_weight(GgmlType type, int64_t n_out, int64_t n_in, uint32_t seed) {
    Weight w;
    const auto src = randn(size_t(n_out * n_in), seed, 0.5f);
    const uint64_t rb = *ggml_row_size(type, uint64_t(n_in));
    w.bytes.resize(size_t(rb * uint64_t(n_out)));
    const size_t written = quant::quantize(type, src.data(), w.bytes.data(), n_out, n_in, nullptr);
    EXPECT_EQ(written, w.bytes.size());
    w.deq.resize(src.size());
    for (int64_t r = 0; r < n_out; ++r)
        quant::dequantize_row(type, w.bytes.data() + size_t(rb) * size_t(r),
                              w.deq.data() + r * n_in, n_in);
    w.view = ops::WeightView{type, n_in, n_out, rb, w.bytes.data()};
    return w;
}

class MatmulTypes : public ::testing::TestWithParam<GgmlType> {};

TEST_P(MatmulTypes, MatchesNaiveDoubleReference) {
    const GgmlType type = GetParam();
    double worst = 0.0;
    for (int64_t n_in : {256, 512}) {
        for (int64_t n_out : {7, 150}) {
            const Weight w = make_weight(type, n_out, n_in, uint32_t(n_in + n_out));
            for (int64_t n_tok : {1, 3, 17}) {
                // Strided x and y (as when reading a fused projection's slice).
                const int64_t xs = n_in + 3, ys = n_out + 5;
                const auto x = randn(size_t(n_tok * xs), uint32_t(n_tok));
                auto y = run_both(std::vector<float>(size_t(n_tok * ys), -7.0f),
                                  [&](ops::Backend& be, float* out) {
                                      ops::MatmulParams p;
                                      p.w = w.view;
                                      p.x = x.data();
                                      p.y = out;
                                      p.n_tokens = n_tok;
                                      p.x_stride = xs;
                                      p.y_stride = ys;
                                      be.matmul(p);
                                  });
                std::vector<float> got;
                std::vector<double> ref;
                for (int64_t t = 0; t < n_tok; ++t) {
                    for (int64_t o = 0; o < n_out; ++o) {
                        double s = 0.0;
                        for (int64_t i = 0; i < n_in; ++i)
                            s += double(w.deq[size_t(o * n_in + i)]) * x[size_t(t * xs + i)];
                        ref.push_back(s);
                        got.push_back(y[size_t(t * ys + o)]);
                    }
                    for (int64_t o = n_out; o < ys; ++o) EXPECT_EQ(y[size_t(t * ys + o)], -7.0f);
                }
                const double err = rel_err_rows(got, ref, size_t(n_out));
                worst = std::max(worst, err);
                EXPECT_LT(err, 1e-5) << ggml_type_name(type) << " n_in=" << n_in
                                     << " n_out=" << n_out << " T=" << n_tok;
            }
        }
    }
    std::printf("%s: worst relative error vs double: %.3g\n",
                std::string(ggml_type_name(type)).c_str(), worst);
}

TEST_P(MatmulTypes, TokenResultDoesNotDependOnBatch) {
    const GgmlType type = GetParam();
    const int64_t n_in = 256, n_out = 33, n_tok = 9;
    const Weight w = make_weight(type, n_out, n_in, 99);
    const auto x = randn(size_t(n_tok * n_in), 5);
    std::vector<float> batch(size_t(n_tok * n_out)), single(static_cast<size_t>(n_out));
    ops::MatmulParams p;
    p.w = w.view;
    p.x = x.data();
    p.y = batch.data();
    p.n_tokens = n_tok;
    backends().three->matmul(p);
    for (int64_t t = 0; t < n_tok; ++t) {
        p.x = x.data() + t * n_in;
        p.y = single.data();
        p.n_tokens = 1;
        backends().one->matmul(p);
        EXPECT_EQ(0, std::memcmp(single.data(), batch.data() + t * n_out, single.size() * 4)) << t;
    }
}

TEST_P(MatmulTypes, GetRowsDequantizesAndScales) {
    const GgmlType type = GetParam();
    const int64_t n_in = 512, n_vocab = 40;
    const Weight w = make_weight(type, n_vocab, n_in, 3);
    const std::vector<int32_t> ids = {39, 0, 7, 7, 21};
    const float scale = 39.25f;
    auto got =
        run_both(std::vector<float>(ids.size() * size_t(n_in)), [&](ops::Backend& be, float* out) {
            ops::GetRowsParams p;
            p.w = w.view;
            p.ids = ids.data();
            p.out = out;
            p.n_tokens = int64_t(ids.size());
            p.scale = scale;
            be.get_rows(p);
        });
    for (size_t t = 0; t < ids.size(); ++t)
        for (int64_t i = 0; i < n_in; ++i)
            ASSERT_EQ(got[t * size_t(n_in) + size_t(i)], w.deq[size_t(ids[t] * n_in + i)] * scale);
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulTypes,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16,
                                           GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                                           GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K,
                                           GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q2_K),
                         [](const auto& type_info) {
                             return std::string(ggml_type_name(type_info.param));
                         });

TEST(Matmul, LargeShapeAgreesAcrossThreads) {
    // Enough rows for several tiles per thread and a ragged last tile; 2 tokens decode
    // rows in registers, 5 decode tiles (matmul.cpp).
    const Weight w = make_weight(GgmlType::Q4_K, 1001, 1024, 11);
    for (int64_t n_tok : {2, 5}) {
        const auto x = randn(size_t(n_tok * 1024), 12);
        auto y = run_both(std::vector<float>(size_t(n_tok * 1001)), [&](ops::Backend& be, float* out) {
            ops::MatmulParams p;
            p.w = w.view;
            p.x = x.data();
            p.y = out;
            p.n_tokens = n_tok;
            be.matmul(p);
        });
        std::vector<double> ref;
        for (int64_t t = 0; t < n_tok; ++t)
            for (int64_t o = 0; o < 1001; ++o) {
                double s = 0.0;
                for (int64_t i = 0; i < 1024; ++i)
                    s += double(w.deq[size_t(o * 1024 + i)]) * x[size_t(t * 1024 + i)];
                ref.push_back(s);
            }
        EXPECT_LT(rel_err_rows(y, ref, 1001), 1e-5) << n_tok << " tokens";
    }
}

TEST(Matmul, ZeroTokensIsNoopAndBadWeightsThrow) {
    const Weight w = make_weight(GgmlType::Q8_0, 4, 64, 1);
    std::vector<float> y(4, 1.0f);
    ops::MatmulParams p;
    p.w = w.view;
    p.y = y.data();
    backends().three->matmul(p);  // n_tokens = 0, x = nullptr
    for (float v : y) EXPECT_EQ(v, 1.0f);

    const auto x = randn(64, 2);
    p.x = x.data();
    p.n_tokens = 1;
    p.w.row_bytes += 1;
    EXPECT_THROW(backends().one->matmul(p), Error);
    p.w = w.view;
    p.w.type = GgmlType::I32;
    EXPECT_THROW(backends().one->matmul(p), Error);
}

// The default matmul_multi (the CPU reference): one matmul per weight, bit for bit,
// and a clear error for weights of different input widths or a bad count.
TEST(Matmul, MultiEqualsSeparateMatmuls) {
    const Weight a = make_weight(GgmlType::Q4_K, 9, 256, 1), b = make_weight(GgmlType::Q8_0, 5, 256, 2),
                 c = make_weight(GgmlType::F16, 4, 256, 3);
    const auto x = randn(size_t(3 * 256), 4);
    ops::Backend& be = *backends().three;
    ops::MultiMatmulParams m;
    m.x = x.data();
    m.n_tokens = 3;
    std::vector<std::vector<float>> multi, separate;
    for (const Weight* w : {&a, &b, &c}) {
        multi.emplace_back(size_t(3 * w->view.n_out));
        separate.emplace_back(size_t(3 * w->view.n_out));
        be.matmul({w->view, x.data(), separate.back().data(), 3, 0, 0});
        m.w[m.n] = w->view;
        m.y[m.n] = multi.back().data();
        ++m.n;
    }
    be.matmul_multi(m);
    for (size_t i = 0; i < multi.size(); ++i) EXPECT_TRUE(bitwise_equal(multi[i], separate[i])) << "weight " << i;
    const Weight wide = make_weight(GgmlType::Q8_0, 5, 512, 5);
    m.w[1] = wide.view;
    EXPECT_THROW(be.matmul_multi(m), Error);
    m.n = 4;
    EXPECT_THROW(be.matmul_multi(m), Error);
}

// ops::back_to_back_batch_layouts: true only for two or more copies that follow one
// another in order with one input width (what lets a matmul_multi run as one product);
// the CPU backend makes no copies, so its default batch_layouts leaves every view
// without one. Side-by-side outputs with row strides give the same values as packed
// ones (the layout the forward uses for joint products).
TEST(Matmul, BackToBackBatchLayoutsAndStridedOutputs) {
    std::vector<uint16_t> joint(size_t(20 * 64));
    ops::WeightView a{GgmlType::Q8_0, 64, 12, 68, nullptr}, b{GgmlType::Q8_0, 64, 8, 68, nullptr};
    a.batch_layout = joint.data();
    b.batch_layout = joint.data() + 12 * 64;
    const ops::WeightView* ab[2] = {&a, &b};
    const ops::WeightView* ba[2] = {&b, &a};
    EXPECT_TRUE(ops::back_to_back_batch_layouts(ab, 2));
    EXPECT_FALSE(ops::back_to_back_batch_layouts(ba, 2));  // out of order
    EXPECT_FALSE(ops::back_to_back_batch_layouts(ab, 1));  // one weight: nothing to join
    b.batch_layout = joint.data() + 13 * 64;               // a gap
    EXPECT_FALSE(ops::back_to_back_batch_layouts(ab, 2));
    b.batch_layout = joint.data() + 12 * 64;
    b.n_in = 32;  // another input width
    EXPECT_FALSE(ops::back_to_back_batch_layouts(ab, 2));
    b.n_in = 64;
    a.batch_layout = nullptr;
    EXPECT_FALSE(ops::back_to_back_batch_layouts(ab, 2));

    const Weight q = make_weight(GgmlType::Q4_K, 9, 256, 11), k = make_weight(GgmlType::Q6_K, 5, 256, 12);
    ops::WeightView views[2] = {q.view, k.view};
    ops::WeightView* group[2] = {&views[0], &views[1]};
    backends().one->batch_layouts(group);
    EXPECT_EQ(views[0].batch_layout, nullptr);
    EXPECT_EQ(views[1].batch_layout, nullptr);
    const auto x = randn(size_t(3 * 256), 13);
    const int64_t S = 9 + 5 + 2;
    std::vector<float> side(size_t(3 * S), 7.0f), pq(size_t(3 * 9)), pk(size_t(3 * 5));
    ops::MultiMatmulParams m;
    m.x = x.data();
    m.n_tokens = 3;
    m.n = 2;
    m.w[0] = q.view;
    m.w[1] = k.view;
    m.y[0] = side.data();
    m.y[1] = side.data() + 9;
    m.y_stride[0] = m.y_stride[1] = S;
    backends().three->matmul_multi(m);
    backends().three->matmul({q.view, x.data(), pq.data(), 3, 0, 0});
    backends().three->matmul({k.view, x.data(), pk.data(), 3, 0, 0});
    for (int64_t t = 0; t < 3; ++t) {
        for (int64_t o = 0; o < 9; ++o) EXPECT_EQ(side[size_t(t * S + o)], pq[size_t(t * 9 + o)]);
        for (int64_t o = 0; o < 5; ++o) EXPECT_EQ(side[size_t(t * S + 9 + o)], pk[size_t(t * 5 + o)]);
        EXPECT_EQ(side[size_t(t * S + 14)], 7.0f);
        EXPECT_EQ(side[size_t(t * S + 15)], 7.0f);
    }
}

TEST(GetRows, OutOfRangeIdThrows) {
    const Weight w = make_weight(GgmlType::F16, 4, 64, 1);
    std::vector<float> out(64);
    for (int32_t bad : {-1, 4}) {
        ops::GetRowsParams p;
        p.w = w.view;
        p.ids = &bad;
        p.out = out.data();
        p.n_tokens = 1;
        EXPECT_THROW(backends().three->get_rows(p), Error);
    }
}

}  // namespace
}  // namespace hf2q::ops_test

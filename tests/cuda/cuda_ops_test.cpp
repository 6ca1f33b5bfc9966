// Every CUDA op against the CPU reference backend over a grid of shapes, weight
// types and edge cases. Tests report SKIPPED where no CUDA device is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "quant/quant.h"
#include "runtime/backend_factory.h"

using namespace hf2q;

namespace {

class CudaOps : public ::testing::Test {
protected:
    void SetUp() override {
        if (!runtime::cuda_available()) GTEST_SKIP() << "no CUDA device";
        gpu = runtime::make_backend(BackendKind::cuda, 0);
        cpu = cpu::make_backend(2);
    }

    // Copies host data into a new device buffer.
    template <class T>
    T* dev(const std::vector<T>& v) {
        T* d = gpu->alloc_array<T>(v.size());
        gpu->upload(d, v.data(), v.size() * sizeof(T));
        return d;
    }
    template <class T>
    std::vector<T> host(const T* d, size_t n) {
        std::vector<T> v(n);
        gpu->download(v.data(), d, n * sizeof(T));
        return v;
    }
    std::vector<float> randn(size_t n, float sd = 1.0f) {
        std::normal_distribution<float> g(0.0f, sd);
        std::vector<float> v(n);
        for (auto& x : v) x = g(rng);
        return v;
    }

    std::unique_ptr<ops::Backend> gpu, cpu;
    std::mt19937 rng{1234};
};

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(a[i])) return INFINITY;
        num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
        den += static_cast<double>(b[i]) * b[i];
    }
    return std::sqrt(num / (den > 0 ? den : 1));
}

}  // namespace

TEST_F(CudaOps, RmsNormWithWeightAndResidual) {
    for (int64_t n : {1, 64, 257, 512, 2816}) {
        const int64_t rows = 5;
        auto x = randn(static_cast<size_t>(rows * n)), w = randn(static_cast<size_t>(n)),
             r = randn(static_cast<size_t>(rows * n));
        std::vector<float> ref(x.size());
        ops::RmsNormParams p{x.data(), w.data(), ref.data(), rows, n, 1e-6f, r.data()};
        cpu->rms_norm(p);
        float* dy = gpu->alloc_array<float>(x.size());
        ops::RmsNormParams q{dev(x), dev(w), dy, rows, n, 1e-6f, dev(r)};
        gpu->rms_norm(q);
        EXPECT_LT(rel_err(host(dy, x.size()), ref), 1e-6) << "n=" << n;
    }
}

TEST_F(CudaOps, RopeMatchesReference) {
    for (int64_t hd : {64, 256, 512}) {
        const int64_t T = 7, H = 3;
        auto x = randn(static_cast<size_t>(T * H * hd));
        std::vector<int32_t> pos = {0, 1, 5, 100, 1000, 4095, 70000};
        std::vector<float> inv(static_cast<size_t>(hd / 2));
        for (int64_t i = 0; i < hd / 2; ++i) inv[static_cast<size_t>(i)] = i < hd / 8 ? std::pow(1e6f, -2.0f * i / hd) : 0.0f;
        auto ref = x;
        cpu->rope({ref.data(), pos.data(), inv.data(), T, H, hd});
        float* dx = dev(x);
        gpu->rope({dx, dev(pos), dev(inv), T, H, hd});
        EXPECT_LT(rel_err(host(dx, x.size()), ref), 1e-5) << "hd=" << hd;
    }
}

TEST_F(CudaOps, MatmulAndGetRowsEveryWeightType) {
    const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0,   GgmlType::Q4_1,
                              GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K,   GgmlType::Q3_K,
                              GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
                              GgmlType::MXFP4};
    const int64_t K = 512, N = 67;
    for (GgmlType t : types) {
        auto wf = randn(static_cast<size_t>(N * K), 0.05f);
        const uint64_t row_bytes = *ggml_row_size(t, static_cast<uint64_t>(K));
        std::vector<uint8_t> wq(row_bytes * static_cast<size_t>(N));
        quant::quantize(t, wf.data(), wq.data(), N, K, nullptr);
        ops::WeightView w{t, K, N, row_bytes, wq.data()};
        ops::WeightView dw = w;
        dw.data = dev(wq);
        for (int64_t T : {1, 3, 8, 9, 33}) {
            auto x = randn(static_cast<size_t>(T * K));
            std::vector<float> ref(static_cast<size_t>(T * N));
            cpu->matmul({w, x.data(), ref.data(), T, 0, 0});
            float* dy = gpu->alloc_array<float>(ref.size());
            gpu->matmul({dw, dev(x), dy, T, 0, 0});
            EXPECT_LT(rel_err(host(dy, ref.size()), ref), 1e-5) << ggml_type_name(t) << " T=" << T;
        }
        std::vector<int32_t> ids = {0, 66, 5, 5};
        std::vector<float> ref(ids.size() * static_cast<size_t>(K));
        cpu->get_rows({w, ids.data(), ref.data(), 4, 2.0f});
        float* dout = gpu->alloc_array<float>(ref.size());
        gpu->get_rows({dw, dev(ids), dout, 4, 2.0f});
        EXPECT_EQ(host(dout, ref.size()), ref) << ggml_type_name(t) << ": decoding must be bit-exact";
    }
}

// Two sequences with different block tables in one call; sliding and full
// windows; GQA 1, 2, 8; head sizes 256 and 512.
TEST_F(CudaOps, PagedAttentionMatchesReference) {
    const int64_t B = 4, n_blocks = 40;
    for (int64_t hd : {64, 256, 512})
        for (int64_t gqa : {1, 2, 8})
            for (int32_t window : {0, 5, 1000}) {
                const int64_t nkv = 2, nh = nkv * gqa, row = nkv * hd;
                auto kp = randn(static_cast<size_t>(n_blocks * B * row), 0.3f);
                auto vp = randn(kp.size());
                // seq 0 owns blocks 0..9 (positions 0..39), seq 1 blocks 39 down to 30.
                std::vector<int32_t> t0(10), t1(10);
                for (int i = 0; i < 10; ++i) {
                    t0[static_cast<size_t>(i)] = i;
                    t1[static_cast<size_t>(i)] = 39 - i;
                }
                std::vector<int32_t> pos = {0, 17, 39, 3, 38};
                std::vector<int> which = {0, 0, 0, 1, 1};
                const int64_t T = static_cast<int64_t>(pos.size());
                auto q = randn(static_cast<size_t>(T * nh * hd), 0.3f);
                std::vector<const int32_t*> tabs, dtabs;
                std::vector<int32_t> lens(static_cast<size_t>(T), 10);
                int32_t *d0 = dev(t0), *d1 = dev(t1);
                for (int s : which) {
                    tabs.push_back(s ? t1.data() : t0.data());
                    dtabs.push_back(s ? d1 : d0);
                }
                std::vector<float> ref(q.size());
                ops::AttentionParams p{q.data(), ref.data(), T, nh, nkv, hd, kp.data(), vp.data(), B,
                                       pos.data(), tabs.data(), lens.data(), window, 1.0f};
                cpu->attention(p);
                float* dout = gpu->alloc_array<float>(q.size());
                ops::AttentionParams g{dev(q), dout, T, nh, nkv, hd, dev(kp), dev(vp), B,
                                       dev(pos), dev(dtabs), dev(lens), window, 1.0f};
                gpu->attention(g);
                EXPECT_LT(rel_err(host(dout, q.size()), ref), 1e-5) << "hd " << hd << " gqa " << gqa << " w " << window;
            }
}

TEST_F(CudaOps, MoeRoutingGatherScatter) {
    const int64_t T = 9, E = 16, K = 4, H = 33;
    auto logits = randn(static_cast<size_t>(T * E), 2.0f);
    auto scale = randn(static_cast<size_t>(E));
    std::vector<int32_t> ids(static_cast<size_t>(T * K));
    std::vector<float> w(ids.size());
    cpu->moe_route({logits.data(), scale.data(), ids.data(), w.data(), T, E, K});
    int32_t* dids = gpu->alloc_array<int32_t>(ids.size());
    float* dw = gpu->alloc_array<float>(w.size());
    gpu->moe_route({dev(logits), dev(scale), dids, dw, T, E, K});
    EXPECT_EQ(host(dids, ids.size()), ids);
    EXPECT_LT(rel_err(host(dw, w.size()), w), 1e-6);

    auto src = randn(static_cast<size_t>(T * H));
    std::vector<int32_t> rows = {3, 0, 3, 8, 8, 1};
    auto wts = randn(rows.size());
    std::vector<float> gref(rows.size() * static_cast<size_t>(H)), dst = randn(static_cast<size_t>(T * H));
    cpu->gather_rows({src.data(), H, gref.data(), H, rows.data(), 6, H});
    float* dg = gpu->alloc_array<float>(gref.size());
    gpu->gather_rows({dev(src), H, dg, H, dev(rows), 6, H});
    EXPECT_EQ(host(dg, gref.size()), gref);
    auto sref = dst;
    cpu->scatter_add({gref.data(), H, sref.data(), H, rows.data(), wts.data(), 6, H});
    float* ddst = dev(dst);
    gpu->scatter_add({dg, H, ddst, H, dev(rows), dev(wts), 6, H});
    EXPECT_LT(rel_err(host(ddst, dst.size()), sref), 1e-6);
}

TEST_F(CudaOps, ElementwiseOpsAndEmptyCalls) {
    const int64_t n = 1000;
    auto a = randn(n), b = randn(n);
    std::vector<float> ref(n);
    cpu->add(a.data(), b.data(), ref.data(), n);
    float* dy = gpu->alloc_array<float>(n);
    gpu->add(dev(a), dev(b), dy, n);
    EXPECT_EQ(host(dy, n), ref);
    auto c = a;
    cpu->softcap(c.data(), 3.0f, n);
    float* dc = dev(a);
    gpu->softcap(dc, 3.0f, n);
    EXPECT_LT(rel_err(host(dc, n), c), 1e-6);
    auto g = a;
    std::vector<float> gout(n);
    cpu->geglu({a.data(), b.data(), gout.data(), 10, 100, 0, 0, 0});
    float* dgo = gpu->alloc_array<float>(n);
    gpu->geglu({dev(a), dev(b), dgo, 10, 100, 0, 0, 0});
    EXPECT_LT(rel_err(host(dgo, n), gout), 1e-6);
    // Zero-sized work is a no-op.
    gpu->add(dev(a), dev(b), dy, 0);
    gpu->rms_norm({dy, nullptr, dy, 0, 64, 1e-6f, nullptr});
    gpu->synchronize();
}

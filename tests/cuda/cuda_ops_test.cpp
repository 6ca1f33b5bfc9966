// Every CUDA op against the CPU reference backend over a grid of shapes, weight
// types and edge cases. Tests report SKIPPED where no CUDA device is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/gemv_mma_switches.h"
#include "quant/quant.h"
#include "quant/quant_impl.h"
#include "runtime/backend_factory.h"

using namespace hf2q;

namespace {

class CudaOps : public ::testing::Test {
protected:
    void SetUp() override {
        if (!runtime::cuda_available()) GTEST_SKIP() << "no CUDA device";
        gpu = runtime::make_backend(BackendKind::cuda, 0);
        gpu32 = runtime::make_backend(BackendKind::cuda, 0, /*f32_matmul=*/true);
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

    // The experts' gate_up product with its GEGLU (scratch and outputs left to the
    // caller) over T tokens of random activations routed by ids (K experts a token, E
    // experts), grouped on the host and read through device offsets as the forward
    // passes them in batched decode. w: the E experts' 2F × H rows.
    ops::MoeMatmulParams routed_gate_up(const std::vector<int32_t>& ids, int64_t T, int64_t K, int64_t E,
                                        const ops::WeightView& w) {
        const size_t n = static_cast<size_t>(T * K);
        std::vector<int32_t> off(static_cast<size_t>(E + 1)), rows(n), slot(n);
        cpu->moe_group({ids.data(), T, K, E, off.data(), rows.data(), slot.data()});
        ops::MoeMatmulParams g;
        g.w = w;
        g.expert_bytes = w.row_bytes * static_cast<uint64_t>(w.n_out);
        g.n_experts = E;
        g.offsets = dev(off);
        g.x_rows = dev(rows);
        g.x_n_rows = T;
        g.x = dev(randn(static_cast<size_t>(T * w.n_in)));
        g.n_rows = T * K;
        g.geglu = true;
        return g;
    }

    // residual_norms over T random rows of n values that start `shift` floats into
    // their buffers (1: misaligned, so the fallback runs), with two outputs of the same
    // norm, y[0] and y[1], for the caller to give y[1] a prepared or BF16 buffer.
    ops::ResidualNormsParams two_output_norms(int64_t T, int64_t n, int64_t shift) {
        const size_t rn = static_cast<size_t>(T * n);
        ops::ResidualNormsParams r;
        r.x = dev(randn(rn + 1)) + shift;
        r.rows = T;
        r.n = n;
        r.b[0] = dev(randn(rn + 1, 3.0f)) + shift;
        r.w[0] = dev(randn(static_cast<size_t>(n)));
        r.n_out = 2;
        for (int j = 0; j < 2; ++j) {
            r.y[j] = gpu->alloc_array<float>(rn + 1) + shift;
            r.out_w[j] = r.w[0];
        }
        return r;
    }

    // matmul(a) and matmul_multi(a, b) of T rows of x, plain and with `with` applied
    // to their params (it gives them a prepared or BF16 input, ops/prepared.h): the
    // same results, and the multi's first product equal to the plain matmul. Returns
    // the matmul's params with `with` applied (their y its second output).
    template <class With>
    ops::MatmulParams expect_same_products(const ops::WeightView& a, const ops::WeightView& b, const float* x,
                                           int64_t T, With with, const std::string& what) {
        const size_t na = static_cast<size_t>(T * a.n_out), nb = static_cast<size_t>(T * b.n_out);
        std::vector<float*> y(4);
        for (auto& p : y) p = gpu->alloc_array<float>(na);
        ops::MatmulParams m{a, x, y[0], T};
        gpu->matmul(m);
        m.y = y[1];
        with(m);
        gpu->matmul(m);
        EXPECT_EQ(host(y[0], na), host(y[1], na)) << what;
        ops::MultiMatmulParams mm;
        mm.x = x;
        mm.n_tokens = T;
        mm.n = 2;
        mm.w[0] = a;
        mm.w[1] = b;
        mm.y[0] = y[2];
        mm.y[1] = gpu->alloc_array<float>(nb);
        gpu->matmul_multi(mm);
        const auto plain_b = host(mm.y[1], nb);
        with(mm);
        mm.y[0] = y[3];
        gpu->matmul_multi(mm);
        EXPECT_EQ(host(y[2], na), host(y[3], na)) << what;
        EXPECT_EQ(host(mm.y[1], nb), plain_b) << what;
        EXPECT_EQ(host(y[0], na), host(y[2], na)) << what;
        return m;
    }

    // rows × n_in normal(0, sd) values quantized to t, in host memory.
    struct Quantized {
        std::vector<uint8_t> bytes;
        uint64_t row_bytes = 0;
    };
    Quantized random_quantized(GgmlType t, int64_t rows, int64_t n_in, float sd) {
        const auto wf = randn(static_cast<size_t>(rows * n_in), sd);
        Quantized q;
        q.row_bytes = *ggml_row_size(t, static_cast<uint64_t>(n_in));
        q.bytes.resize(q.row_bytes * static_cast<size_t>(rows));
        quant::quantize(t, wf.data(), q.bytes.data(), rows, n_in, nullptr);
        return q;
    }

    // E experts of F random rows of H values of type t (sd 0.05) in host memory, gap
    // zero bytes after each expert's rows: experts expert_bytes apart, as a 3-D expert
    // tensor may lay them out.
    struct Experts {
        std::vector<uint8_t> bytes;
        uint64_t row_bytes = 0, expert_bytes = 0;
    };
    Experts experts_apart(GgmlType t, int64_t E, int64_t F, int64_t H, uint64_t gap) {
        const auto [wq, row_bytes] = random_quantized(t, E * F, H, 0.05f);
        Experts x;
        x.row_bytes = row_bytes;
        x.expert_bytes = row_bytes * static_cast<uint64_t>(F) + gap;
        x.bytes.assign(x.expert_bytes * static_cast<uint64_t>(E), 0);
        for (int64_t e = 0; e < E; ++e)
            std::memcpy(x.bytes.data() + e * x.expert_bytes, wq.data() + e * F * row_bytes, row_bytes * F);
        return x;
    }

    // Runs m on the GPU into a new y of n rows × ys values whose columns F .. ys − 1
    // hold a sentinel; returns columns 0 .. F − 1 of every row, and in pad_kept
    // whether every sentinel survived (nothing written outside the outputs).
    std::vector<float> moe_matmul_padded(ops::MoeMatmulParams m, size_t n, int64_t F, int64_t ys, bool& pad_kept) {
        const size_t f = static_cast<size_t>(F), s = static_cast<size_t>(ys);
        m.y_stride = ys;
        m.y = dev(std::vector<float>(n * s, 7.0f));
        gpu->moe_matmul(m);
        const auto out = host(m.y, n * s);
        std::vector<float> got(n * f);
        pad_kept = true;
        for (size_t r = 0; r < n; ++r) {
            for (size_t j = 0; j < f; ++j) got[r * f + j] = out[r * s + j];
            for (size_t c = f; c < s; ++c) pad_kept = pad_kept && out[r * s + c] == 7.0f;
        }
        return got;
    }

    // The grouped expert matmul of routing ids (T tokens, top-K, E experts of F rows
    // of H values of type t) on activations on the integer GEMV's grid (defined with
    // its tests): the grouping (off), the CPU reference and the GPU result, one row of
    // F values per routed row in grouped order.
    struct GroupedRun {
        std::vector<int32_t> off;
        std::vector<float> ref, got;
    };
    GroupedRun grouped_integer_run(GgmlType t, int64_t E, int64_t F, int64_t H, const std::vector<int32_t>& ids,
                                   int64_t T, int64_t K);

    std::unique_ptr<ops::Backend> gpu, gpu32, cpu;
    std::mt19937 rng{1234};
};

std::vector<uint32_t> float_bits(const std::vector<float>& v) {
    std::vector<uint32_t> u(v.size());
    std::memcpy(u.data(), v.data(), v.size() * sizeof(float));
    return u;
}

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

// Rows of a multiple of 4 up to 8192 values take the register-resident kernel (one
// row: the decode case), others the loop kernel; with and without weight/residual,
// in place.
TEST_F(CudaOps, RmsNormWithWeightAndResidual) {
    for (int64_t n : {1, 64, 257, 512, 2816, 8192, 8196}) {
        for (int64_t rows : {1, 5}) {
            auto x = randn(static_cast<size_t>(rows * n)), r = randn(static_cast<size_t>(rows * n));
            std::vector<float> ref(x.size());
            cpu->rms_norm({x.data(), nullptr, ref.data(), rows, n, 1e-6f, nullptr, 0.5f});
            float* dx = dev(x);
            gpu->rms_norm({dx, nullptr, dx, rows, n, 1e-6f, nullptr, 0.5f});  // in place
            EXPECT_LT(rel_err(host(dx, x.size()), ref), 1e-6) << "n=" << n << " rows=" << rows << " no weight";
        }
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

// residual_norms on the device (one kernel for rows of a multiple of 4 up to 8192
// values on 16-byte boundaries, else the rms_norm sequence) against the CPU's
// sequence: one and two branches, 0 or 3 outputs (one without weight, one scaled),
// the layer scalar, and a misaligned case. 256 and 2,816 values fill every thread's
// slots (the kernel without slot checks); 2,880 leaves the last threads' second slot
// empty (384 threads for 720 value groups).
TEST_F(CudaOps, ResidualNormsMatchCpu) {
    for (int64_t n : {6, 256, 2816, 2880, 8192, 8196}) {
        for (int64_t rows : {1, 3, 64, 65}) {
            for (int branches = 1; branches <= 2; ++branches) {
                for (int n_out : {0, 1, 3}) {
                    for (int64_t shift : {0, 1}) {  // shift 1: rows off 16-byte boundaries
                        if (shift == 1 && (n != 2816 || rows != 3)) continue;
                        const size_t rn = static_cast<size_t>(rows * n);
                        const auto x = randn(rn + 1, 2.0f), b0 = randn(rn + 1, 5.0f), b1 = randn(rn + 1, 0.5f);
                        const auto w0 = randn(static_cast<size_t>(n)), w1 = randn(static_cast<size_t>(n)),
                                   ws = randn(static_cast<size_t>(n)), wy = randn(static_cast<size_t>(n));
                        ops::ResidualNormsParams p;
                        p.rows = rows;
                        p.n = n;
                        p.n_branch = branches;
                        p.scale = 0.75f;
                        p.n_out = n_out;
                        for (int j = 0; j < n_out; ++j) p.out_scale[j] = j == 2 ? 0.125f : 1.0f;
                        // CPU reference.
                        std::vector<float> cx = x, cb0 = b0, cb1 = b1;
                        std::vector<std::vector<float>> cy(3, std::vector<float>(rn + 1));
                        ops::ResidualNormsParams c = p;
                        c.x = cx.data() + shift;
                        c.b[0] = cb0.data() + shift;
                        c.w[0] = w0.data();
                        if (branches == 2) {
                            c.b[1] = cb1.data() + shift;
                            c.w[1] = w1.data();
                            c.sum_w = ws.data();
                        }
                        for (int j = 0; j < n_out; ++j) {
                            c.y[j] = cy[static_cast<size_t>(j)].data() + shift;
                            c.out_w[j] = j == 1 ? nullptr : wy.data();
                        }
                        cpu->residual_norms(c);
                        // Device.
                        float* dx = dev(x);
                        ops::ResidualNormsParams g = p;
                        g.x = dx + shift;
                        g.b[0] = dev(b0) + shift;
                        g.w[0] = dev(w0);
                        if (branches == 2) {
                            g.b[1] = dev(b1) + shift;
                            g.w[1] = dev(w1);
                            g.sum_w = dev(ws);
                        }
                        const float* dwy = dev(wy);
                        std::vector<float*> dy(3);
                        for (int j = 0; j < n_out; ++j) {
                            dy[static_cast<size_t>(j)] = gpu->alloc_array<float>(rn + 1);
                            g.y[j] = dy[static_cast<size_t>(j)] + shift;
                            g.out_w[j] = j == 1 ? nullptr : dwy;
                        }
                        gpu->residual_norms(g);
                        const std::string what = "n=" + std::to_string(n) + " rows=" + std::to_string(rows) +
                                                 " branches=" + std::to_string(branches) +
                                                 " outputs=" + std::to_string(n_out) + " shift=" + std::to_string(shift);
                        EXPECT_LT(rel_err(host(dx, rn + 1), cx), 1e-6) << what << " (x)";
                        for (int j = 0; j < n_out; ++j)
                            EXPECT_LT(rel_err(host(dy[static_cast<size_t>(j)], rn + 1), cy[static_cast<size_t>(j)]), 1e-6)
                                << what << " (output " << j << ")";
                    }
                }
            }
        }
    }
}

// residual_norms with the experts' combine as its second branch (MoE layers), on
// the device (fused; its combine loads the experts in chunks of 8 or 2: K = 11
// crosses chunks, rows above 64 and n = 8192 take the kernel without early weights;
// 2,880 values leave some threads' second slot empty) and through the CPU's op
// sequence (n = 8196).
TEST_F(CudaOps, ResidualNormsWithCombineMatchCpu) {
    for (int64_t K : {1, 4, 8, 11}) {
        for (int64_t n : {256, 2816, 2880, 8192, 8196}) {
            for (int64_t rows : {1, 5, 64, 65}) {
                const size_t rn = static_cast<size_t>(rows * n);
                const auto x = randn(rn, 2.0f), b0 = randn(rn, 5.0f), y = randn(rn * K);
                const auto w0 = randn(static_cast<size_t>(n)), w1 = randn(static_cast<size_t>(n)),
                           ws = randn(static_cast<size_t>(n)), wy = randn(static_cast<size_t>(n)),
                           cw = randn(static_cast<size_t>(rows * K), 0.3f);
                std::vector<int32_t> slot(static_cast<size_t>(rows * K));
                for (size_t i = 0; i < slot.size(); ++i) slot[i] = static_cast<int32_t>((i * 7 + 3) % slot.size());
                auto params = [&](float* px, float* pb0, float* pb1, const float* pw0, const float* pw1, const float* pws,
                                  float* py, const float* pwy, ops::MoeCombineParams& cb) {
                    cb.y = nullptr;
                    ops::ResidualNormsParams p;
                    p.x = px;
                    p.rows = rows;
                    p.n = n;
                    p.n_branch = 2;
                    p.b[0] = pb0;
                    p.b[1] = pb1;
                    p.w[0] = pw0;
                    p.w[1] = pw1;
                    p.sum_w = pws;
                    p.scale = 0.5f;
                    p.n_out = 1;
                    p.y[0] = py;
                    p.out_w[0] = pwy;
                    cb.y_stride = n;
                    cb.out = pb1;
                    cb.out_stride = n;
                    cb.n_tokens = rows;
                    cb.k = K;
                    cb.n = n;
                    p.combine = &cb;
                    return p;
                };
                std::vector<float> cx = x, cb0 = b0, cb1(rn), cy(rn);
                ops::MoeCombineParams ccb;
                ops::ResidualNormsParams c = params(cx.data(), cb0.data(), cb1.data(), w0.data(), w1.data(), ws.data(),
                                                    cy.data(), wy.data(), ccb);
                ccb.y = y.data();
                ccb.slot_of = slot.data();
                ccb.weights = cw.data();
                cpu->residual_norms(c);
                float *dx = dev(x), *dy = gpu->alloc_array<float>(rn);
                ops::MoeCombineParams gcb;
                ops::ResidualNormsParams g = params(dx, dev(b0), gpu->alloc_array<float>(rn), dev(w0), dev(w1), dev(ws), dy,
                                                    dev(wy), gcb);
                gcb.y = dev(y);
                gcb.slot_of = dev(slot);
                gcb.weights = dev(cw);
                gpu->residual_norms(g);
                EXPECT_LT(rel_err(host(dx, rn), cx), 1e-6) << "K=" << K << " n=" << n << " rows=" << rows << " (x)";
                EXPECT_LT(rel_err(host(dy, rn), cy), 1e-6) << "K=" << K << " n=" << n << " rows=" << rows << " (y)";
            }
        }
    }
}

// The device's E4M3 stores (kv_store; the hardware's satfinite conversion) give the
// CPU reference's codes (quant::fp32_to_e4m3) for every input class: each midpoint
// between neighbouring codes and the floats either side of it, the codes themselves,
// saturation, ±inf, signed zeros and subnormals, and random magnitudes over the
// whole range. NaN is left out: only its class is specified (and K / V never hold it).
TEST_F(CudaOps, KvStoreE4m3MatchesCpuRounding) {
    std::vector<float> x = {0.0f, -0.0f, 448.0f, 449.0f, 1e30f, -1e30f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 1e-30f, -1e-30f, 0x1p-10f, 0x1p-149f};
    for (uint32_t c = 0; c < 0x7E; ++c) {
        const float a = quant::e4m3_to_fp32(static_cast<uint8_t>(c)), b = quant::e4m3_to_fp32(static_cast<uint8_t>(c + 1));
        const float mid = 0.5f * (a + b);
        for (float v : {a, mid, std::nextafter(mid, a), std::nextafter(mid, b)}) {
            x.push_back(v);
            x.push_back(-v);
        }
    }
    std::mt19937 gen(5);
    std::uniform_real_distribution<float> expo(-12.0f, 10.0f);
    while (x.size() % 64 != 0 || x.size() < 4096) x.push_back((gen() & 1 ? 1.0f : -1.0f) * std::exp2(expo(gen)));
    const int64_t row = 64, n = static_cast<int64_t>(x.size()) / row, bs = 1;
    std::vector<int32_t> table(static_cast<size_t>(n)), pos(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) table[static_cast<size_t>(t)] = pos[static_cast<size_t>(t)] = static_cast<int32_t>(t);
    const int32_t* dtable = dev(table);
    ops::KvStoreParams p;
    p.k = dev(x);
    p.v = p.k;
    uint8_t* dk = dev(std::vector<uint8_t>(x.size(), 0xAA));
    p.k_pool = dk;
    p.v_pool = dev(std::vector<uint8_t>(x.size(), 0xAA));
    p.kv_type = ops::KvType::e4m3;
    p.row = row;
    p.head_dim = row;
    p.block_size = bs;
    p.pos = dev(pos);
    p.tables = dev(std::vector<const int32_t*>(static_cast<size_t>(n), dtable));
    p.n_tokens = n;
    gpu->kv_store(p);
    const auto got = host(dk, x.size());
    for (size_t i = 0; i < x.size(); ++i)
        ASSERT_EQ(got[i], quant::fp32_to_e4m3(x[i])) << "value " << x[i] << " (index " << i << ")";
}

// The device's i8 stores (kv_store) give the CPU reference's codes and scales
// (quant::quantize_row_i8) bit for bit: rows of two heads with random magnitudes
// over a wide range, rows holding ties (x / d halfway between codes), zero heads and
// heads whose largest value is negative.
TEST_F(CudaOps, KvStoreI8MatchesCpuRounding) {
    const int64_t hd = 256, heads = 2, row = hd * heads, n = 40;
    std::mt19937 gen(6);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> expo(-20.0f, 20.0f);
    std::vector<float> x(static_cast<size_t>(n * row));
    for (int64_t r = 0; r < n * heads; ++r) {
        float* h = x.data() + r * hd;
        const float mag = std::exp2(expo(gen));
        for (int64_t i = 0; i < hd; ++i) h[i] = nd(gen) * mag;
        if (r % 5 == 1) {  // d = 1: halves are ties
            for (int64_t i = 0; i < hd; ++i) h[i] = static_cast<float>(static_cast<int>(i % 200) - 100) + 0.5f;
            h[0] = -127.0f;
        }
        if (r % 7 == 3) std::fill(h, h + hd, 0.0f);
    }
    std::vector<int32_t> table(static_cast<size_t>(n)), pos(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) table[static_cast<size_t>(t)] = pos[static_cast<size_t>(t)] = static_cast<int32_t>(n - 1 - t);
    const int32_t* dtable = dev(table);
    const std::vector<float> y = randn(x.size());
    ops::KvStoreParams p;
    p.k = dev(x);
    p.v = dev(y);
    int8_t* dk = dev(std::vector<int8_t>(x.size(), 99));
    int8_t* dv = dev(std::vector<int8_t>(x.size(), 99));
    float* dks = dev(std::vector<float>(static_cast<size_t>(n * heads), -1.0f));
    float* dvs = dev(std::vector<float>(static_cast<size_t>(n * heads), -1.0f));
    p.k_pool = dk;
    p.v_pool = dv;
    p.kv_type = ops::KvType::i8;
    p.row = row;
    p.block_size = 1;
    p.pos = dev(pos);
    p.tables = dev(std::vector<const int32_t*>(static_cast<size_t>(n), dtable));
    p.n_tokens = n;
    p.head_dim = hd;
    p.k_scale = dks;
    p.v_scale = dvs;
    gpu->kv_store(p);
    const auto gk = host(dk, x.size()), gv = host(dv, x.size());
    const auto gks = host(dks, static_cast<size_t>(n * heads)), gvs = host(dvs, static_cast<size_t>(n * heads));
    for (int64_t t = 0; t < n; ++t)
        for (int64_t h = 0; h < heads; ++h) {
            const size_t slot = static_cast<size_t>(table[static_cast<size_t>(pos[static_cast<size_t>(t)])]);
            const size_t r = slot * heads + static_cast<size_t>(h);
            for (int kv = 0; kv < 2; ++kv) {
                int8_t want[hd];
                const float d = quant::quantize_row_i8((kv ? y : x).data() + t * row + h * hd, want, hd);
                ASSERT_EQ((kv ? gvs : gks)[r], d) << "token " << t << " head " << h << (kv ? " (v)" : " (k)");
                for (int64_t i = 0; i < hd; ++i)
                    ASSERT_EQ((kv ? gv : gk)[r * hd + static_cast<size_t>(i)], want[i])
                        << "token " << t << " head " << h << " value " << i << (kv ? " (v)" : " (k)");
            }
        }
}

// attention_inputs on the device (one kernel for head dims of a multiple of 128,
// else the op sequence) against the CPU's sequence: q in place, k̂/v̂ in the pools
// at each token's slot, with and without a cache, V from its own projection or from
// the raw K (K=V layers), GQA ratios 2 and 8, f32, f16, e4m3 and i8 pools.
TEST_F(CudaOps, AttentionInputsMatchCpu) {
    // A pool of n values of type t, every value 7, and its values as floats.
    auto pool_of = [](size_t n, ops::KvType t) {
        std::vector<uint8_t> b(n * static_cast<size_t>(ops::kv_type_bytes(t)));
        for (size_t i = 0; i < n; ++i) {
            if (t == ops::KvType::f16) {
                const uint16_t h = quant::fp32_to_fp16(7.0f);
                std::memcpy(b.data() + 2 * i, &h, 2);
            } else if (t == ops::KvType::e4m3) {
                b[i] = quant::fp32_to_e4m3(7.0f);
            } else if (t == ops::KvType::i8) {
                b[i] = 7;  // with scales of 1
            } else {
                const float f = 7.0f;
                std::memcpy(b.data() + 4 * i, &f, 4);
            }
        }
        return b;
    };
    // i8: code · scale of its row of D values.
    auto values = [](const std::vector<uint8_t>& b, ops::KvType t, const std::vector<float>& scale, int64_t D) {
        std::vector<float> v(b.size() / static_cast<size_t>(ops::kv_type_bytes(t)));
        for (size_t i = 0; i < v.size(); ++i) {
            if (t == ops::KvType::i8) {
                v[i] = static_cast<float>(static_cast<int8_t>(b[i])) * scale[i / static_cast<size_t>(D)];
            } else if (t == ops::KvType::f16) {
                uint16_t h;
                std::memcpy(&h, b.data() + 2 * i, 2);
                v[i] = quant::fp16_to_fp32(h);
            } else if (t == ops::KvType::e4m3) {
                v[i] = quant::e4m3_to_fp32(b[i]);
            } else {
                std::memcpy(&v[i], b.data() + 4 * i, 4);
            }
        }
        return v;
    };
    const int64_t bs = 4, n_blocks = 8;
    const std::vector<int32_t> table = {5, 2, 7, 0, 1, 3, 4, 6};
    for (int64_t D : {64, 128, 256, 512}) {
        for (auto [nh, nkv] : {std::pair<int64_t, int64_t>{4, 2}, {8, 1}}) {
            for (int64_t T : {1, 5}) {
                // 0: q only, 1: store, 2: store with V = K; 3, 4: f16 pools; 5, 6: e4m3
                // pools; 7, 8: i8 pools
                for (int mode = 0; mode < 9; ++mode) {
                    const ops::KvType kt = mode >= 7   ? ops::KvType::i8
                                           : mode >= 5 ? ops::KvType::e4m3
                                           : mode >= 3 ? ops::KvType::f16
                                                       : ops::KvType::f32;
                    const std::string what = "D=" + std::to_string(D) + " nh=" + std::to_string(nh) +
                                             " T=" + std::to_string(T) + " mode=" + std::to_string(mode);
                    std::vector<int32_t> pos(static_cast<size_t>(T));
                    for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(3 + 5 * t);
                    std::vector<float> f(static_cast<size_t>(D / 2));
                    for (int64_t k = 0; k < D / 2; ++k)
                        f[static_cast<size_t>(k)] = k % 4 == 3 ? 0.0f : std::pow(1e4f, -2.0f * k / D);
                    const auto q = randn(static_cast<size_t>(T * nh * D), 2.0f), k = randn(static_cast<size_t>(T * nkv * D)),
                               v = randn(static_cast<size_t>(T * nkv * D), 0.5f), qw = randn(static_cast<size_t>(D)),
                               kw = randn(static_cast<size_t>(D));
                    const size_t pool = static_cast<size_t>(n_blocks * bs * nkv * D);
                    // CPU.
                    std::vector<float> cq = q, ck = k, cv = v;
                    std::vector<uint8_t> ckp = pool_of(pool, kt), cvp = ckp;
                    std::vector<float> cks(pool / static_cast<size_t>(D), 1.0f), cvs = cks;
                    std::vector<const int32_t*> ctab(static_cast<size_t>(T), table.data());
                    ops::AttentionInputsParams c;
                    c.q = cq.data();
                    c.q_w = qw.data();
                    c.n_heads = nh;
                    c.n_tokens = T;
                    c.head_dim = D;
                    c.rope_inv_freq = f.data();
                    c.pos = pos.data();
                    ops::AttentionInputsParams g = c;
                    if (mode > 0) {
                        c.store = true;
                        c.k = ck.data();
                        c.k_w = kw.data();
                        c.v = cv.data();
                        c.v_from_k = mode % 2 == 0;
                        c.n_kv_heads = nkv;
                        c.k_pool = ckp.data();
                        c.v_pool = cvp.data();
                        c.kv_type = kt;
                        c.block_size = bs;
                        c.tables = ctab.data();
                        c.k_scale = cks.data();
                        c.v_scale = cvs.data();
                    }
                    cpu->attention_inputs(c);
                    // Device.
                    float* dq = dev(q);
                    uint8_t *dkp = dev(pool_of(pool, kt)), *dvp = dev(pool_of(pool, kt));
                    float *dks = dev(std::vector<float>(cks.size(), 1.0f)), *dvs = dev(std::vector<float>(cvs.size(), 1.0f));
                    const int32_t* dtable = dev(table);
                    g.q = dq;
                    g.q_w = dev(qw);
                    g.rope_inv_freq = dev(f);
                    g.pos = dev(pos);
                    if (mode > 0) {
                        g.store = true;
                        g.k = dev(k);
                        g.k_w = dev(kw);
                        g.v = dev(v);
                        g.v_from_k = mode % 2 == 0;
                        g.n_kv_heads = nkv;
                        g.k_pool = dkp;
                        g.v_pool = dvp;
                        g.kv_type = kt;
                        g.block_size = bs;
                        g.tables = dev(std::vector<const int32_t*>(static_cast<size_t>(T), dtable));
                        g.k_scale = dks;
                        g.v_scale = dvs;
                    }
                    gpu->attention_inputs(g);
                    EXPECT_LT(rel_err(host(dq, q.size()), cq), 1e-6) << what << " (q)";
                    // f16 / e4m3 / i8: the values agree to 1e-6 before rounding, so at most
                    // a few round to neighbouring codes (a step of 2^-3 relative for e4m3,
                    // 1/127 of the row's largest value for i8).
                    const double tol = kt == ops::KvType::e4m3 ? 1e-2 : kt == ops::KvType::i8 ? 2e-3 : kt == ops::KvType::f16 ? 1e-4 : 1e-6;
                    const auto gks = host(dks, cks.size()), gvs = host(dvs, cvs.size());
                    EXPECT_LT(rel_err(values(host(dkp, ckp.size()), kt, gks, D), values(ckp, kt, cks, D)), tol) << what << " (k pool)";
                    EXPECT_LT(rel_err(values(host(dvp, cvp.size()), kt, gvs, D), values(cvp, kt, cvs, D)), tol) << what << " (v pool)";
                    if (kt == ops::KvType::i8) {
                        EXPECT_LT(rel_err(gks, cks), 1e-5) << what << " (k scales)";
                        EXPECT_LT(rel_err(gvs, cvs), 1e-5) << what << " (v scales)";
                    }

                    // The same projections side by side in rows of S floats (q, k, v and
                    // a gap), as one product over q/k/v's joint weights writes them: on
                    // the CPU (Backend's default, one token at a time) the same values
                    // bit for bit, on the device as above.
                    const int64_t S = (nh + 2 * nkv) * D + 6;
                    std::vector<float> src(static_cast<size_t>(T * S), -9.0f);
                    for (int64_t t = 0; t < T; ++t) {
                        auto put = [&](const std::vector<float>& from, int64_t width, int64_t at) {
                            std::copy_n(from.begin() + t * width, width, src.begin() + t * S + at);
                        };
                        put(q, nh * D, 0);
                        put(k, nkv * D, nh * D);
                        put(v, nkv * D, (nh + nkv) * D);
                    }
                    auto with_sources = [&](ops::AttentionInputsParams a, const float* base, float* qo, float* ko,
                                            float* vo, void* kp, void* vp, float* ks, float* vs) {
                        a.q = qo;
                        a.q_src = base;
                        a.src_stride = S;
                        if (mode > 0) {
                            a.k = ko;
                            a.v = vo;
                            a.k_src = base + nh * D;
                            a.v_src = a.v_from_k ? nullptr : base + (nh + nkv) * D;
                            a.k_pool = kp;
                            a.v_pool = vp;
                            a.k_scale = ks;
                            a.v_scale = vs;
                        }
                        return a;
                    };
                    std::vector<float> sq(q.size()), sk(k.size()), sv(v.size());
                    std::vector<uint8_t> skp = pool_of(pool, kt), svp = skp;
                    std::vector<float> sks(cks.size(), 1.0f), svs = sks;
                    cpu->attention_inputs(with_sources(c, src.data(), sq.data(), sk.data(), sv.data(), skp.data(),
                                                       svp.data(), sks.data(), svs.data()));
                    EXPECT_EQ(sq, cq) << what << " (q from sources, CPU)";
                    EXPECT_EQ(skp, ckp) << what << " (k pool from sources, CPU)";
                    EXPECT_EQ(svp, cvp) << what << " (v pool from sources, CPU)";
                    float* dsq = dev(std::vector<float>(q.size(), 0.0f));
                    uint8_t *dskp = dev(pool_of(pool, kt)), *dsvp = dev(pool_of(pool, kt));
                    float* dsks = dev(std::vector<float>(cks.size(), 1.0f));
                    float* dsvs = dev(std::vector<float>(cvs.size(), 1.0f));
                    gpu->attention_inputs(with_sources(g, dev(src), dsq, dev(std::vector<float>(k.size())),
                                                       dev(std::vector<float>(v.size())), dskp, dsvp, dsks, dsvs));
                    EXPECT_LT(rel_err(host(dsq, q.size()), cq), 1e-6) << what << " (q from sources)";
                    const auto sgks = host(dsks, cks.size()), sgvs = host(dsvs, cvs.size());
                    EXPECT_LT(rel_err(values(host(dskp, ckp.size()), kt, sgks, D), values(ckp, kt, cks, D)), tol)
                        << what << " (k pool from sources)";
                    EXPECT_LT(rel_err(values(host(dsvp, cvp.size()), kt, sgvs, D), values(cvp, kt, cvs, D)), tol)
                        << what << " (v pool from sources)";
                }
            }
        }
    }
}

// A captured graph with a side chain (begin_side .. join_side): the side chain's
// first kernel must see what the main chain wrote before the fork, and the kernel
// after the join what both chains wrote, in every replay (the decode graphs of MoE
// layers run the experts this way). The side chain is long (eight passes over 64
// MiB), so a join that did not wait for it would leave values half scaled.
TEST_F(CudaOps, GraphSideChainForkAndJoinOrder) {
    const int64_t n = int64_t{1} << 24;
    float *a = gpu->alloc_array<float>(static_cast<size_t>(n)), *b = gpu->alloc_array<float>(static_cast<size_t>(n)),
          *c = gpu->alloc_array<float>(static_cast<size_t>(n));
    auto graph = gpu->capture([&] {
        gpu->scale(a, 0.5f, n);  // main, before the fork
        gpu->begin_side();
        for (int i = 0; i < 8; ++i) gpu->scale(a, 2.0f, n);  // the side chain: long
        gpu->end_side();
        gpu->scale(b, 3.0f, n);  // main, beside it
        gpu->join_side();
        gpu->add(a, b, c, n);  // both chains' results
    });
    for (int replay = 0; replay < 5; ++replay) {
        gpu->upload(a, std::vector<float>(static_cast<size_t>(n), 1.0f + replay).data(), static_cast<size_t>(n) * 4);
        gpu->upload(b, std::vector<float>(static_cast<size_t>(n), 3.0f).data(), static_cast<size_t>(n) * 4);
        graph->launch();
        const auto got = host(c, static_cast<size_t>(n));
        const float want = (1.0f + replay) * 0.5f * 256.0f + 9.0f;
        const auto bad = std::count_if(got.begin(), got.end(), [&](float v) { return v != want; });
        EXPECT_EQ(bad, 0) << "replay " << replay << ": values other than " << want;
    }
}

// upload_async (a decode step's inputs): the rows' first `width` bytes land at the
// pitch and nothing between them, the copy is ordered before the work queued after it
// (the host does not wait), and after wait_uploads the source may change.
TEST_F(CudaOps, UploadAsyncCopiesRowsInStreamOrder) {
    constexpr size_t kRows = 3, kPitch = 16, kWidth = 10;  // in floats
    auto* h = static_cast<float*>(gpu->alloc_host(kRows * kPitch * sizeof(float)));
    for (size_t i = 0; i < kRows * kPitch; ++i) h[i] = static_cast<float>(i + 1);
    float* d = gpu->alloc_array<float>(kRows * kPitch);  // zeroed
    gpu->upload_async(d, h, kWidth * sizeof(float), kRows, kPitch * sizeof(float));
    gpu->scale(d, 2.0f, static_cast<int64_t>(kRows * kPitch));  // queued after the copy
    gpu->wait_uploads();
    for (size_t i = 0; i < kRows * kPitch; ++i) h[i] = -1.0f;  // the copy has read it
    auto got = host(d, kRows * kPitch);
    for (size_t r = 0; r < kRows; ++r)
        for (size_t c = 0; c < kPitch; ++c) {
            const size_t i = r * kPitch + c;
            EXPECT_EQ(got[i], c < kWidth ? 2.0f * static_cast<float>(i + 1) : 0.0f) << "row " << r << " col " << c;
        }
    h[0] = 5.0f;
    gpu->upload_async(d, h, sizeof(float), 1, 0);  // one row: pitch unused
    gpu->wait_uploads();
    got = host(d, 2);
    EXPECT_EQ(got[0], 5.0f);
    EXPECT_EQ(got[1], 4.0f);
    gpu->free_host(h);
}

// argmax_rows writes host_out (alloc_host memory) through the mapping, and a fence's
// ticket waits for the work queued before it, not after: the ids of step i are read
// while later steps (which negate x, flipping argmax and argmin) are still queued;
// more tickets than the backend has events; both argmax kernels (2 rows of 2^18
// values split across blocks, 3 rows of 1,000 one block each).
TEST_F(CudaOps, ArgmaxHostOutAndFenceTickets) {
    constexpr size_t kSteps = 9;
    for (const auto& [rows, n] : {std::pair<int64_t, int64_t>{2, 1 << 18}, {3, 1000}}) {
        const auto x0 = randn(static_cast<size_t>(rows * n));
        std::vector<int32_t> want[2];  // argmax of x0, of -x0
        for (int64_t r = 0; r < rows; ++r) {
            const auto row = x0.begin() + r * n;
            want[0].push_back(static_cast<int32_t>(std::max_element(row, row + n) - row));
            want[1].push_back(static_cast<int32_t>(std::min_element(row, row + n) - row));
        }
        float* x = dev(x0);
        int32_t* d_ids = gpu->alloc_array<int32_t>(static_cast<size_t>(rows));
        auto* h = static_cast<int32_t*>(gpu->alloc_host(kSteps * static_cast<size_t>(rows) * sizeof(int32_t)));
        std::fill(h, h + kSteps * static_cast<size_t>(rows), -7);
        std::vector<uint64_t> tickets;
        for (size_t i = 0; i < kSteps; ++i) {
            ops::ArgmaxRowsParams p;
            p.x = x;
            p.out = d_ids;
            p.host_out = h + i * static_cast<size_t>(rows);
            p.rows = rows;
            p.n = n;
            gpu->argmax_rows(p);
            tickets.push_back(gpu->fence());
            gpu->scale(x, -1.0f, rows * n);
        }
        for (size_t i = 1; i < kSteps; ++i) EXPECT_GT(tickets[i], tickets[i - 1]);
        for (size_t i : {size_t{8}, size_t{3}, size_t{0}, size_t{5}}) {
            gpu->wait_fence(tickets[i]);
            const std::vector<int32_t> got(h + i * static_cast<size_t>(rows), h + (i + 1) * static_cast<size_t>(rows));
            EXPECT_EQ(got, want[i % 2]) << rows << " rows, step " << i;
        }
        gpu->synchronize();
        EXPECT_EQ(host(d_ids, static_cast<size_t>(rows)), want[(kSteps - 1) % 2]);
        gpu->free_host(h);
    }
    std::vector<int32_t> pageable(1);
    ops::ArgmaxRowsParams p;
    p.x = dev(std::vector<float>{1.0f, 2.0f});
    p.out = gpu->alloc_array<int32_t>(1);
    p.host_out = pageable.data();
    p.rows = 1;
    p.n = 2;
    EXPECT_THROW(gpu->argmax_rows(p), Error) << "host_out must come from alloc_host";
    gpu->wait_fence(0);  // ticket 0: nothing to wait for
}

// feed_tokens against the CPU: host ids kept, fed ones taken from `ids`, ids outside
// the vocabulary (argmax error codes, too large) replaced by 0; 1 .. 600 tokens.
TEST_F(CudaOps, FeedTokensMatchCpu) {
    constexpr int64_t kVocab = 1000;
    for (int64_t n : {1, 7, 256, 600}) {
        std::uniform_int_distribution<int32_t> tok(0, kVocab - 1), row(-1, static_cast<int32_t>(n - 1));
        std::vector<int32_t> tokens(static_cast<size_t>(n)), from(static_cast<size_t>(n)), ids(static_cast<size_t>(n));
        for (int64_t t = 0; t < n; ++t) {
            tokens[static_cast<size_t>(t)] = tok(rng);
            from[static_cast<size_t>(t)] = row(rng);
            ids[static_cast<size_t>(t)] = t % 5 == 1 ? -3 : t % 7 == 2 ? static_cast<int32_t>(kVocab) : tok(rng);
        }
        from[0] = 0;
        std::vector<int32_t> want(static_cast<size_t>(n));
        cpu->feed_tokens({tokens.data(), from.data(), ids.data(), want.data(), n, kVocab});
        int32_t* out = dev(std::vector<int32_t>(static_cast<size_t>(n), -7));
        gpu->feed_tokens({dev(tokens), dev(from), dev(ids), out, n, kVocab});
        EXPECT_EQ(host(out, static_cast<size_t>(n)), want) << n << " tokens";
        for (int32_t v : want) EXPECT_TRUE(v >= 0 && v < kVocab);
    }
}

// The fused head norm + RoPE and the output scale, against the CPU's fused ops.
TEST_F(CudaOps, RmsNormFusedScaleAndRope) {
    const int64_t T = 3, heads = 4;
    std::vector<int32_t> pos = {0, 9, 4000};
    for (int64_t d : {64, 256, 512}) {
        auto x = randn(static_cast<size_t>(T * heads * d)), w = randn(static_cast<size_t>(d));
        std::vector<float> f(static_cast<size_t>(d / 2));
        for (int64_t k = 0; k < d / 2; ++k) f[static_cast<size_t>(k)] = std::pow(1e4f, -2.0f * k / d);
        std::vector<float> ref = x;
        ops::RmsNormParams p{ref.data(), w.data(), ref.data(), T * heads, d, 1e-6f};
        p.rope_inv_freq = f.data();
        p.rope_pos = pos.data();
        p.rope_heads = heads;
        cpu->rms_norm(p);
        float* dx = dev(x);
        ops::RmsNormParams q{dx, dev(w), dx, T * heads, d, 1e-6f};
        q.rope_inv_freq = dev(f);
        q.rope_pos = dev(pos);
        q.rope_heads = heads;
        gpu->rms_norm(q);
        EXPECT_LT(rel_err(host(dx, x.size()), ref), 1e-6) << "d=" << d;
    }
    auto x = randn(1000), r = randn(1000);
    std::vector<float> ref(1000);
    ops::RmsNormParams p{x.data(), nullptr, ref.data(), 4, 250, 1e-6f, r.data()};
    p.out_scale = 0.5f;
    cpu->rms_norm(p);
    float* dy = gpu->alloc_array<float>(1000);
    ops::RmsNormParams q{dev(x), nullptr, dy, 4, 250, 1e-6f, dev(r)};
    q.out_scale = 0.5f;
    gpu->rms_norm(q);
    EXPECT_LT(rel_err(host(dy, 1000), ref), 1e-6);
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

// Types the default precision multiplies with the integer GEMV (8-bit activations):
// relative error ~5e-3 on random activations instead of ~1e-7.
bool q8_gemv_type(GgmlType t) {
    return t == GgmlType::Q4_0 || t == GgmlType::Q5_0 || t == GgmlType::Q8_0 || t == GgmlType::Q4_K ||
           t == GgmlType::Q5_K || t == GgmlType::Q6_K;
}
double gemv_tolerance(GgmlType t) { return q8_gemv_type(t) ? 1.5e-2 : 1e-5; }

const GgmlType kAllTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0,   GgmlType::Q4_1,
                              GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K,   GgmlType::Q3_K,
                              GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
                              GgmlType::MXFP4};

// Up to 16 tokens the GEMV path (f32 arithmetic) runs; above, the tensor-core path
// (BF16 operands: relative error ~2^-8 per product, ~3e-3 over a 512-long dot) or,
// on the reference-precision backend, SGEMM.
TEST_F(CudaOps, MatmulAndGetRowsEveryWeightType) {
    const int64_t K = 512, N = 67;
    for (GgmlType t : kAllTypes) {
        const auto [wq, row_bytes] = random_quantized(t, N, K, 0.05f);
        ops::WeightView w{t, K, N, row_bytes, wq.data()};
        ops::WeightView dw = w;
        dw.data = dev(wq);
        for (int64_t T : {1, 3, 8, 9, 16, 17, 33, 64, 130}) {
            auto x = randn(static_cast<size_t>(T * K));
            std::vector<float> ref(static_cast<size_t>(T * N));
            cpu->matmul({w, x.data(), ref.data(), T, 0, 0});
            float* dy = gpu->alloc_array<float>(ref.size());
            gpu->matmul({dw, dev(x), dy, T, 0, 0});
            EXPECT_LT(rel_err(host(dy, ref.size()), ref), T <= 16 ? gemv_tolerance(t) : 1e-2)
                << ggml_type_name(t) << " T=" << T;
            float* dy32 = gpu32->alloc_array<float>(ref.size());
            float* dx32 = gpu32->alloc_array<float>(x.size());
            gpu32->upload(dx32, x.data(), x.size() * sizeof(float));
            ops::WeightView w32 = w;
            w32.data = gpu32->alloc(wq.size());
            gpu32->upload(const_cast<void*>(w32.data), wq.data(), wq.size());
            gpu32->matmul({w32, dx32, dy32, T, 0, 0});
            std::vector<float> got32(ref.size());
            gpu32->download(got32.data(), dy32, got32.size() * sizeof(float));
            EXPECT_LT(rel_err(got32, ref), 1e-5) << ggml_type_name(t) << " T=" << T << " (f32)";
        }
        std::vector<int32_t> ids = {0, 66, 5, 5};
        std::vector<float> ref(ids.size() * static_cast<size_t>(K));
        cpu->get_rows({w, ids.data(), ref.data(), 4, 2.0f});
        float* dout = gpu->alloc_array<float>(ref.size());
        gpu->get_rows({dw, dev(ids), dout, 4, 2.0f});
        EXPECT_EQ(host(dout, ref.size()), ref) << ggml_type_name(t) << ": decoding must be bit-exact";
    }
}

// Strided inputs and outputs, and a row length that is not a multiple of 8 (F32,
// F16: the GEMV's element-wise tail).
TEST_F(CudaOps, MatmulStridesAndOddRows) {
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0}) {
        const int64_t K = t == GgmlType::Q8_0 ? 96 : 37, N = 5, xs = K + 3, ys = N + 2;
        const auto [wq, row_bytes] = random_quantized(t, N, K, 0.1f);
        ops::WeightView w{t, K, N, row_bytes, wq.data()};
        ops::WeightView dw = w;
        dw.data = dev(wq);
        for (int64_t T : {1, 5, 20}) {
            auto x = randn(static_cast<size_t>(T * xs));
            std::vector<float> ref(static_cast<size_t>(T * ys), 7.0f);
            cpu->matmul({w, x.data(), ref.data(), T, xs, ys});
            float* dy = dev(std::vector<float>(ref.size(), 7.0f));
            gpu->matmul({dw, dev(x), dy, T, xs, ys});
            EXPECT_LT(rel_err(host(dy, ref.size()), ref), T <= 16 ? gemv_tolerance(t) : 1e-2)
                << ggml_type_name(t) << " T=" << T;
        }
    }
}

// T tokens routed to K distinct experts each, drawn from 0 .. n_pick − 1.
std::vector<int32_t> random_routing(std::mt19937& rng, int64_t T, int64_t K, int64_t n_pick) {
    std::vector<int32_t> ids(static_cast<size_t>(T * K));
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(n_pick - 1));
    for (int64_t t = 0; t < T; ++t) {
        std::vector<int32_t> chosen;
        while (static_cast<int64_t>(chosen.size()) < K) {
            const int32_t e = pick(rng);
            if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
        }
        std::copy(chosen.begin(), chosen.end(), ids.begin() + t * K);
    }
    return ids;
}

// Activations on the integer GEMV's grid: every 32-value block holds multiples of
// 2^-6 up to ±127·2^-6 and reaches that bound, so quantizing them to 8 bits is exact
// and the integer GEMV must agree with the f32 reference to rounding. Any unit,
// nibble or scale decoded at the wrong place shows up as an O(1) error.
std::vector<float> q8_grid_activations(std::mt19937& rng, int64_t rows, int64_t n) {
    std::uniform_int_distribution<int> k(-127, 127);
    std::vector<float> x(static_cast<size_t>(rows * n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(static_cast<float>(k(rng)), -6);
    for (size_t b = 0; b < x.size(); b += 32) x[b + (b / 32) % 32] = std::ldexp(b % 64 ? 127.0f : -127.0f, -6);
    return x;
}

TEST_F(CudaOps, IntegerGemvExactOnItsGrid) {
    for (GgmlType t : kAllTypes) {
        if (!q8_gemv_type(t)) continue;
        const bool kquant = t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
        // One block (fewer units than lanes), a 26B-A4B row (several units per lane),
        // and a long row (many passes of the lanes).
        for (int64_t K : kquant ? std::vector<int64_t>{256, 2816, 16640} : std::vector<int64_t>{96, 2112, 16416}) {
            const int64_t N = 67;  // odd: the last warp of two rows has one
            const auto [wq, row_bytes] = random_quantized(t, N, K, 0.05f);
            ops::WeightView w{t, K, N, row_bytes, wq.data()};
            ops::WeightView dw = w;
            dw.data = dev(wq);
            for (int64_t T : {1, 2, 8, 9, 16}) {
                auto x = q8_grid_activations(rng, T, K);
                std::vector<float> ref(static_cast<size_t>(T * N));
                cpu->matmul({w, x.data(), ref.data(), T, 0, 0});
                float* dy = gpu->alloc_array<float>(ref.size());
                gpu->matmul({dw, dev(x), dy, T, 0, 0});
                EXPECT_LT(rel_err(host(dy, ref.size()), ref), 2e-6) << ggml_type_name(t) << " K=" << K << " T=" << T;
            }
            // Off the grid the activations are rounded: the default precision must
            // differ from the reference (else the integer path did not run) by no
            // more than the rounding bound Σ|w|·amax/254 per output.
            auto x = randn(static_cast<size_t>(3 * K));
            std::vector<float> ref(static_cast<size_t>(3 * N)), wd(static_cast<size_t>(N * K));
            cpu->matmul({w, x.data(), ref.data(), 3, 0, 0});
            std::vector<int32_t> all(static_cast<size_t>(N));
            for (int32_t i = 0; i < N; ++i) all[static_cast<size_t>(i)] = i;
            cpu->get_rows({w, all.data(), wd.data(), N, 1.0f});
            float* dy = gpu->alloc_array<float>(ref.size());
            gpu->matmul({dw, dev(x), dy, 3, 0, 0});
            const auto got = host(dy, ref.size());
            EXPECT_GT(rel_err(got, ref), 1e-4) << ggml_type_name(t) << ": the integer GEMV did not run";
            for (int64_t r = 0; r < 3; ++r)
                for (int64_t o = 0; o < N; ++o) {
                    double bound = 0.0, mag = 0.0;
                    for (int64_t b = 0; b < K; b += 32) {
                        float amax = 0.0f;
                        for (int64_t j = b; j < b + 32; ++j) amax = std::max(amax, std::fabs(x[r * K + j]));
                        for (int64_t j = b; j < b + 32; ++j) {
                            bound += std::fabs(wd[o * K + j]) * amax / 254.0;
                            mag += std::fabs(wd[o * K + j] * x[r * K + j]);
                        }
                    }
                    EXPECT_LE(std::fabs(got[r * N + o] - ref[r * N + o]), bound * 1.01 + 1e-5 * mag)
                        << ggml_type_name(t) << " K=" << K << " row " << r << " out " << o;
                }
        }
    }
}

// Runs the grouped expert matmul on the CPU (experts of F rows of H values in wq,
// x rows gathered by `rows`, grouping `off`, n routed rows) into ref, and returns
// its params, still pointing at host memory, for the device run to repoint.
ops::MoeMatmulParams cpu_moe_reference(ops::Backend& cpu, GgmlType t, const std::vector<uint8_t>& wq,
                                       uint64_t row_bytes, int64_t E, int64_t F, int64_t H,
                                       const std::vector<int32_t>& off, const std::vector<int32_t>& rows,
                                       const std::vector<float>& x, size_t n, std::vector<float>& ref) {
    ops::MoeMatmulParams m;
    m.w = {t, H, F, row_bytes, wq.data()};
    m.expert_bytes = row_bytes * static_cast<uint64_t>(F);
    m.n_experts = E;
    m.offsets = off.data();
    m.host_offsets = off.data();
    m.x_rows = rows.data();
    m.x = x.data();
    m.n_rows = static_cast<int64_t>(n);
    m.y = ref.data();
    cpu.moe_matmul(m);
    return m;
}

CudaOps::GroupedRun CudaOps::grouped_integer_run(GgmlType t, int64_t E, int64_t F, int64_t H,
                                                 const std::vector<int32_t>& ids, int64_t T, int64_t K) {
    const size_t n = ids.size();
    GroupedRun r;
    r.off.resize(static_cast<size_t>(E + 1));
    std::vector<int32_t> rows(n), slot(n);
    cpu->moe_group({ids.data(), T, K, E, r.off.data(), rows.data(), slot.data()});
    const auto [wq, row_bytes] = random_quantized(t, E * F, H, 0.05f);
    auto x = q8_grid_activations(rng, T, H);
    r.ref.resize(n * static_cast<size_t>(F));
    ops::MoeMatmulParams m = cpu_moe_reference(*cpu, t, wq, row_bytes, E, F, H, r.off, rows, x, n, r.ref);
    m.w.data = dev(wq);
    m.offsets = dev(r.off);
    m.host_offsets = nullptr;
    m.x_rows = dev(rows);
    m.x = dev(x);
    float* dy = gpu->alloc_array<float>(r.ref.size());
    m.y = dy;
    gpu->moe_matmul(m);
    r.got = host(dy, r.ref.size());
    return r;
}

// The grouped integer GEMV: experts with one routed row (one activation row per
// pass) and with many (eight per pass, two weight rows per warp), on the grid.
TEST_F(CudaOps, GroupedIntegerGemvExactOnItsGrid) {
    const int64_t E = 16, K = 4, F = 37;
    for (GgmlType t : kAllTypes) {
        if (!q8_gemv_type(t)) continue;
        // 256: one pass of a warp's lanes per row; 2816: the decode width (three
        // passes); 704: the experts' down rows, whose 37-row experts of the 32-value
        // formats start at every 4-byte offset modulo 16 (the tensor-core kernel
        // stages them in 4- and 16-byte pieces).
        const bool kquant = t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
        for (const int64_t H : kquant ? std::vector<int64_t>{256, 2816} : std::vector<int64_t>{256, 704, 2816})
        for (int64_t T : {1, 3, 5, 16, 40}) {
            const auto ids = random_routing(rng, T, K, 12);  // experts 12..15 stay idle
            const GroupedRun r = grouped_integer_run(t, E, F, H, ids, T, K);
            EXPECT_LT(rel_err(r.got, r.ref), 2e-6) << ggml_type_name(t) << " H=" << H << " T=" << T;
        }
    }
}

// Batches of a few tokens multiply each routed row as one token alone would: the
// grouped one-row GEMVs give every routed row the result of a dense one-token matmul
// of its expert on its token. For the 32-value formats' short rows (704 values, the
// experts' down: gemv_q8_routed_kernel with 8 routed rows a warp) the same bits; for
// the K-quants (and Q4_K's wide rows from 16 routed rows on, the same kernel with 4)
// the same sums up to the compiler's contraction of the scaling into FMAs. Chunks of
// routed rows that end inside (4, 12 rows), fill (16) and span idle experts are covered,
// and the odd expert height (37 rows) leaves a partial block.
TEST_F(CudaOps, GroupedOneRowGemvEqualsOneTokenMatmuls) {
    const int64_t E = 16, F = 37;
    for (GgmlType t : kAllTypes) {
        if (!q8_gemv_type(t)) continue;
        const bool kquant = t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
        const bool exact = !kquant;
        for (const int64_t H : kquant ? std::vector<int64_t>{256, 2048, 2816} : std::vector<int64_t>{256, 704, 2048})
            for (const auto& [T, K] : {std::pair<int64_t, int64_t>{1, 4}, {3, 4}, {2, 8}}) {
                const auto ids = random_routing(rng, T, K, 14);  // experts 14, 15 idle
                const size_t n = ids.size();
                std::vector<int32_t> off(static_cast<size_t>(E + 1)), rows(n), slot(n);
                cpu->moe_group({ids.data(), T, K, E, off.data(), rows.data(), slot.data()});
                const auto [wq, row_bytes] = random_quantized(t, E * F, H, 0.05f);
                const auto x = q8_grid_activations(rng, T, H);
                const uint8_t* dw = static_cast<const uint8_t*>(dev(wq));
                const float* dx = dev(x);
                ops::MoeMatmulParams m;
                m.w = {t, H, F, row_bytes, dw};
                m.expert_bytes = row_bytes * static_cast<uint64_t>(F);
                m.n_experts = E;
                m.offsets = dev(off);
                m.x_rows = dev(rows);
                m.x = dx;
                m.n_rows = static_cast<int64_t>(n);
                float* dy = gpu->alloc_array<float>(n * static_cast<size_t>(F));
                m.y = dy;
                gpu->moe_matmul(m);
                const auto got = host(dy, n * static_cast<size_t>(F));
                float* d1 = gpu->alloc_array<float>(static_cast<size_t>(F));
                for (int64_t e = 0; e < E; ++e)
                    for (int32_t r = off[static_cast<size_t>(e)]; r < off[static_cast<size_t>(e) + 1]; ++r) {
                        const ops::WeightView we{t, H, F, row_bytes, dw + static_cast<uint64_t>(e) * m.expert_bytes};
                        gpu->matmul({we, dx + static_cast<int64_t>(rows[static_cast<size_t>(r)]) * H, d1, 1, 0, 0});
                        const auto want = host(d1, static_cast<size_t>(F));
                        const auto b = got.begin() + static_cast<int64_t>(r) * F;
                        const std::vector<float> row(b, b + F);
                        if (exact)
                            EXPECT_EQ(row, want) << ggml_type_name(t) << " H=" << H << " T=" << T << " K=" << K
                                                 << " routed row " << r << " (expert " << e << ")";
                        else
                            EXPECT_LT(rel_err(row, want), 1e-6) << ggml_type_name(t) << " H=" << H << " T=" << T
                                                                << " K=" << K << " routed row " << r;
                    }
            }
    }
}

// One token's grouped product with its combine (MoeMatmulParams::combine): y and the
// combined row bit for bit those of the product followed by moe_combine. Rows of at
// most two rounds of a warp's units in the 32-value formats (704 values: a decode step's
// down product; 2,048 in Q4_0 and Q5_0) take the routed kernel with the combine folded
// in; Q8_0's 2,048-value rows (four rounds) and Q4_K the product, then the combine.
// K = 8 and K = 3 (fewer routed rows than a warp's 8), sentinel-filled outputs.
TEST_F(CudaOps, MoeCombineWithOneTokenProduct) {
    const int64_t E = 16, F = 37;
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_0, GgmlType::Q4_K})
        for (const int64_t H : t == GgmlType::Q4_K ? std::vector<int64_t>{512} : std::vector<int64_t>{704, 2048})
            for (const int64_t K : {8, 3}) {
                const std::string what = std::string(ggml_type_name(t)) + " H=" + std::to_string(H) + " K=" +
                                         std::to_string(K);
                const auto ids = random_routing(rng, 1, K, 14);
                const size_t n = ids.size();
                std::vector<int32_t> off(static_cast<size_t>(E + 1)), rows(n), slot(n);
                cpu->moe_group({ids.data(), 1, K, E, off.data(), rows.data(), slot.data()});
                const auto [wq, row_bytes] = random_quantized(t, E * F, H, 0.05f);
                const auto x = q8_grid_activations(rng, static_cast<int64_t>(n), H);  // the grouped rows
                const auto w = randn(n);
                ops::MoeMatmulParams m;
                m.w = {t, H, F, row_bytes, dev(wq)};
                m.expert_bytes = row_bytes * static_cast<uint64_t>(F);
                m.n_experts = E;
                m.offsets = dev(off);
                m.x = dev(x);
                m.n_rows = static_cast<int64_t>(n);
                const std::vector<float> sentinel(n * static_cast<size_t>(F), -7.0f);
                ops::MoeCombineParams cb;
                cb.y_stride = F;
                cb.slot_of = dev(slot);
                cb.weights = dev(w);
                cb.out_stride = F;
                cb.n_tokens = 1;
                cb.k = K;
                cb.n = F;
                // The product, then the combine.
                m.y = dev(sentinel);
                cb.y = m.y;
                cb.out = dev(std::vector<float>(static_cast<size_t>(F), -7.0f));
                gpu->moe_matmul(m);
                gpu->moe_combine(cb);
                const auto y_ref = host(m.y, sentinel.size()), out_ref = host(cb.out, static_cast<size_t>(F));
                // The product with the combine.
                m.y = dev(sentinel);
                cb.y = m.y;
                cb.out = dev(std::vector<float>(static_cast<size_t>(F), -7.0f));
                m.combine = &cb;
                gpu->moe_matmul(m);
                EXPECT_EQ(float_bits(host(m.y, sentinel.size())), float_bits(y_ref)) << what;
                EXPECT_EQ(float_bits(host(cb.out, static_cast<size_t>(F))), float_bits(out_ref)) << what;
                EXPECT_TRUE(std::none_of(out_ref.begin(), out_ref.end(), [](float v) { return v == -7.0f; })) << what;
            }
}

namespace {

// Top-1 routing with counts[e] rows for expert e, tokens interleaved (round by round)
// so that each expert's gathered rows are scattered, and the counts used below: kFewRows
// (1-4 rows a paired pass, 5-8 a full one, more in several; 102 rows for 16 experts,
// tiles in turn) and kManyRows (187 rows: one tile a block).
std::vector<int32_t> ids_with_counts(const std::vector<int>& counts) {
    std::vector<int32_t> ids;
    const int most = *std::max_element(counts.begin(), counts.end());
    for (int round = 0; round < most; ++round)
        for (size_t e = 0; e < counts.size(); ++e)
            if (round < counts[e]) ids.push_back(static_cast<int32_t>(e));
    return ids;
}
const std::vector<int> kFewRows = {0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 17, 0, 1, 4};
const std::vector<int> kManyRows = {9, 10, 11, 12, 13, 14, 15, 16, 17, 9, 10, 11, 12, 13, 14, 1};

}  // namespace

// The tensor-core expert GEMV's pass boundaries (gemv_mma.cu): experts with 1-4 routed
// rows take one paired pass, 5-8 one full pass, 9-12 a full pass and a paired one,
// and so on. Routing with fixed counts per expert (top-1, tokens interleaved so the
// gathered rows are scattered) checks each expert's rows on its own, so an error in
// one kind of pass names its expert and count. Widths of 96 values (three 32-value
// units) give Q5_0's unit pairs an odd unit after them. 100 outputs are 7 Q4_K tiles
// of 16 rows (two blocks of 4, HF2Q_GEMV_MMA_Q4K_TILES) and two 64-row tiles of the
// 32-value formats (one block, HF2Q_GEMV_MMA_SEQ32), the last tile partial.
TEST_F(CudaOps, GroupedIntegerGemvPassBoundaries) {
    const std::vector<int>& counts = kFewRows;
    const int64_t E = static_cast<int64_t>(counts.size());
    const std::vector<int32_t> ids = ids_with_counts(counts);
    const int64_t T = static_cast<int64_t>(ids.size());  // 102 routed rows > 16 experts
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_0, GgmlType::Q8_0}) {
        const std::vector<int64_t> widths =
            t == GgmlType::Q4_K ? std::vector<int64_t>{256, 2816} : std::vector<int64_t>{96, 256, 704};
        for (const int64_t F : {37, 100})
        for (const int64_t H : widths) {
            const GroupedRun run = grouped_integer_run(t, E, F, H, ids, T, 1);
            const auto& off = run.off;
            const auto& got = run.got;
            const auto& ref = run.ref;
            for (int64_t e = 0; e < E; ++e) ASSERT_EQ(off[e + 1] - off[e], counts[static_cast<size_t>(e)]);
            for (int64_t e = 0; e < E; ++e) {
                if (off[e] == off[e + 1]) continue;
                const auto a = static_cast<size_t>(off[e]) * F, b = static_cast<size_t>(off[e + 1]) * F;
                EXPECT_LT(rel_err(std::vector<float>(got.begin() + a, got.begin() + b),
                                  std::vector<float>(ref.begin() + a, ref.begin() + b)),
                          2e-6)
                    << ggml_type_name(t) << " F=" << F << " H=" << H << " expert " << e << " with "
                    << counts[static_cast<size_t>(e)] << " rows";
            }
        }
    }
}

namespace {

// An expert copy made on the host (the references of the backend's repacks): E experts
// of F rows (expert_bytes apart in wq) of `pieces` pieces of in_bytes each, every piece
// rewritten by piece(src, dst) into out_bytes, experts and rows back to back.
template <class Piece>
std::vector<uint8_t> expert_copy_reference(const std::vector<uint8_t>& wq, uint64_t row_bytes, uint64_t expert_bytes,
                                           int64_t E, int64_t F, int64_t pieces, uint64_t in_bytes,
                                           uint64_t out_bytes, Piece piece) {
    std::vector<uint8_t> out(static_cast<size_t>(E * F * pieces) * out_bytes);
    for (int64_t e = 0; e < E; ++e)
        for (int64_t r = 0; r < F; ++r)
            for (int64_t b = 0; b < pieces; ++b)
                piece(wq.data() + static_cast<uint64_t>(e) * expert_bytes + static_cast<uint64_t>(r) * row_bytes +
                          static_cast<uint64_t>(b) * in_bytes,
                      out.data() + static_cast<size_t>((e * F + r) * pieces + b) * out_bytes);
    return out;
}

// Q4_K's scaled copy as gemv_mma.h describes it, made on the host from the blocks of
// E experts of F rows of H values (expert_bytes apart): the reference the device's
// repack must equal byte for byte (the scales as the CPU's Q4_K decoding reads them).
std::vector<uint8_t> q4k_scaled_reference(const std::vector<uint8_t>& wq, uint64_t row_bytes, uint64_t expert_bytes,
                                          int64_t E, int64_t F, int64_t H) {
    return expert_copy_reference(
        wq, row_bytes, expert_bytes, E, F, H / 256, 144, 160, [](const uint8_t* src, uint8_t* dst) {
            uint16_t dh = 0, mh = 0;
            std::memcpy(&dh, src, 2);
            std::memcpy(&mh, src + 2, 2);
            const float d = quant::fp16_to_fp32(dh), dmin = quant::fp16_to_fp32(mh);
            for (int j = 0; j < 8; ++j) {
                int sc = 0, mn = 0;
                quant::detail::get_scale_min_k4(j, src + 4, &sc, &mn);
                const uint16_t hs = quant::fp32_to_fp16(d * static_cast<float>(sc));
                const uint16_t hm = quant::fp32_to_fp16(dmin * static_cast<float>(mn));
                std::memcpy(dst + 4 * j, &hs, 2);
                std::memcpy(dst + 4 * j + 2, &hm, 2);
            }
            std::memcpy(dst + 32, src + 16, 128);
        });
}

// The grouped product of routed rows (grouping off, x rows gathered by rows) with the
// weights as the scaled copy holds them (scaled: E experts of F rows of H values), in
// double: each 32-value sub-block's d·scale · Σ q·x − dmin·min · Σ x.
std::vector<float> q4k_scaled_product(const std::vector<uint8_t>& scaled, int64_t E, int64_t F, int64_t H,
                                      const std::vector<int32_t>& off, const std::vector<int32_t>& rows,
                                      const std::vector<float>& x) {
    const int64_t nb = H / 256;
    std::vector<float> y(rows.size() * static_cast<size_t>(F));
    for (int64_t e = 0; e < E; ++e)
        for (int32_t r = off[static_cast<size_t>(e)]; r < off[static_cast<size_t>(e) + 1]; ++r) {
            const float* xr = x.data() + static_cast<int64_t>(rows[static_cast<size_t>(r)]) * H;
            for (int64_t o = 0; o < F; ++o) {
                double acc = 0;
                for (int64_t b = 0; b < nb; ++b) {
                    const uint8_t* blk = scaled.data() + static_cast<size_t>((e * F + o) * nb + b) * 160;
                    for (int j = 0; j < 8; ++j) {
                        uint16_t hs = 0, hm = 0;
                        std::memcpy(&hs, blk + 4 * j, 2);
                        std::memcpy(&hm, blk + 4 * j + 2, 2);
                        double qx = 0, sx = 0;
                        for (int k = 0; k < 32; ++k) {
                            const int q = (blk[32 + 32 * (j / 2) + k] >> (4 * (j % 2))) & 15;
                            const double v = xr[b * 256 + 32 * j + k];
                            qx += q * v;
                            sx += v;
                        }
                        acc += quant::fp16_to_fp32(hs) * qx - quant::fp16_to_fp32(hm) * sx;
                    }
                }
                y[static_cast<size_t>(r) * static_cast<size_t>(F) + static_cast<size_t>(o)] = static_cast<float>(acc);
            }
        }
    return y;
}

}  // namespace

// ops::Backend::expert_layout: Q4_K experts get the scaled copy (gemv_mma.h), byte for
// byte the host's (scales decoded, multiplied out and rounded to f16 once; quants as
// stored), experts apart by more than their rows (a gap of 16 bytes) included. None
// for other types, rows of a partial block, rows too long for the shared memory of the
// kernel that reads the copy, the CPU backend, or a scale past f16's range (the
// experts' blocks then serve).
TEST_F(CudaOps, ExpertScaledLayoutRepacksTheScales) {
    const int64_t E = 3, F = 37;
    for (const int64_t H : {256, 2816, 4096}) {
        const auto [wq, row_bytes, expert_bytes] = experts_apart(GgmlType::Q4_K, E, F, H, 16);
        const ops::WeightView w{GgmlType::Q4_K, H, F, row_bytes, dev(wq)};
        const void* layout = gpu->expert_layout(w, expert_bytes, E);
        if (H > 2816) {  // the 26B-A4B's gate_up rows (2,816 values) are the longest that fit
            EXPECT_EQ(layout, nullptr) << "H=" << H << ": a copy no kernel reads";
            continue;
        }
        ASSERT_NE(layout, nullptr) << "H=" << H;
        const size_t bytes = static_cast<size_t>(E * F * (H / 256)) * 160;
        const auto want = q4k_scaled_reference(wq, row_bytes, expert_bytes, E, F, H);
        ASSERT_EQ(want.size(), bytes);
        EXPECT_EQ(host(static_cast<const uint8_t*>(layout), bytes), want) << "H=" << H;
        EXPECT_EQ(cpu->expert_layout({GgmlType::Q4_K, H, F, row_bytes, wq.data()}, expert_bytes, E), nullptr);
    }
    // A block whose d·scale is finite in f32 but past f16's range: no copy.
    auto [wq, row_bytes] = random_quantized(GgmlType::Q4_K, 2 * F, 256, 0.05f);
    const uint16_t big = quant::fp32_to_fp16(60000.0f);
    std::memcpy(wq.data() + F * row_bytes + 144 * 0, &big, 2);  // expert 1, row 0: d
    wq[F * row_bytes + 4] |= 63;                                 // its sub-block 0's scale: 63
    EXPECT_EQ(gpu->expert_layout({GgmlType::Q4_K, 256, F, row_bytes, dev(wq)}, row_bytes * F, 2), nullptr);
    // Q5_0 rows of an odd number of blocks have no lane copy (ExpertLaneLayout* for the rest).
    const auto [w5, rb5] = random_quantized(GgmlType::Q5_0, 2 * F, 96, 0.05f);
    EXPECT_EQ(gpu->expert_layout({GgmlType::Q5_0, 96, F, rb5, dev(w5)}, rb5 * F, 2), nullptr);
    const auto [w8, rb8] = random_quantized(GgmlType::Q8_0, 2 * F, 256, 0.05f);
    EXPECT_EQ(gpu->expert_layout({GgmlType::Q8_0, 256, F, rb8, dev(w8)}, rb8 * F, 2), nullptr);
    EXPECT_EQ(gpu->expert_layout({GgmlType::Q4_K, 256, F, row_bytes, nullptr}, row_bytes * F, 2), nullptr);
}

// The tensor-core expert GEMV reading the scaled copy: every routed row the double
// product of the weights the copy holds (f16 scales), on the integer GEMV's grid, for
// the pass kinds of GroupedIntegerGemvPassBoundaries (1-4 rows a paired pass, 5-8 a
// full one, more in several), tiles in turn (up to 8 rows an expert on average) and
// one tile a block (more), partial tiles; and within f16 rounding of the scales of the
// product from the blocks as stored.
TEST_F(CudaOps, ExpertScaledLayoutMatchesItsReference) {
    for (const auto* counts : {&kFewRows, &kManyRows}) {
        const int64_t E = static_cast<int64_t>(counts->size());
        const std::vector<int32_t> ids = ids_with_counts(*counts);
        const int64_t T = static_cast<int64_t>(ids.size());
        for (const int64_t F : {37, 100})
            for (const int64_t H : {256, 2816}) {
                const std::string what = "T=" + std::to_string(T) + " F=" + std::to_string(F) + " H=" +
                                         std::to_string(H);
                const size_t n = ids.size();
                std::vector<int32_t> off(static_cast<size_t>(E + 1)), rows(n), slot(n);
                cpu->moe_group({ids.data(), T, 1, E, off.data(), rows.data(), slot.data()});
                const auto [wq, row_bytes] = random_quantized(GgmlType::Q4_K, E * F, H, 0.05f);
                const auto x = q8_grid_activations(rng, T, H);
                ops::MoeMatmulParams m;
                m.w = {GgmlType::Q4_K, H, F, row_bytes, dev(wq)};
                m.expert_bytes = row_bytes * static_cast<uint64_t>(F);
                m.n_experts = E;
                m.offsets = dev(off);
                m.x_rows = dev(rows);
                m.x = dev(x);
                m.n_rows = static_cast<int64_t>(n);
                m.y = gpu->alloc_array<float>(n * static_cast<size_t>(F));
                gpu->moe_matmul(m);
                const auto plain = host(m.y, n * static_cast<size_t>(F));
                m.w.expert_layout = gpu->expert_layout(m.w, m.expert_bytes, E);
                ASSERT_NE(m.w.expert_layout, nullptr) << what;
                m.y = gpu->alloc_array<float>(n * static_cast<size_t>(F));
                gpu->moe_matmul(m);
                const auto got = host(m.y, n * static_cast<size_t>(F));
                const auto scaled = q4k_scaled_reference(wq, row_bytes, m.expert_bytes, E, F, H);
                EXPECT_LT(rel_err(got, q4k_scaled_product(scaled, E, F, H, off, rows, x)), 2e-6) << what;
                const double moved = rel_err(got, plain);
                EXPECT_LT(moved, 1e-3) << what;
                EXPECT_GT(moved, 0.0) << what << ": the copy was not read";
            }
    }
}

namespace {

// Q5_0's lane copy as gemv_mma.h describes it, made on the host from E experts of F
// rows of H values (expert_bytes apart): per pair of blocks both d, both blocks' qh
// with bit 8t + j moved to 8j + 4 + t and bit 8t + 4 + j to 8j + t, then both qs.
std::vector<uint8_t> q50_lanes_reference(const std::vector<uint8_t>& wq, uint64_t row_bytes, uint64_t expert_bytes,
                                         int64_t E, int64_t F, int64_t H) {
    return expert_copy_reference(
        wq, row_bytes, expert_bytes, E, F, H / 64, 44, 44, [](const uint8_t* src, uint8_t* dst) {
            for (int b = 0; b < 2; ++b) {
                const uint8_t* blk = src + 22 * b;
                std::memcpy(dst + 2 * b, blk, 2);
                uint32_t qh = 0, moved = 0;
                std::memcpy(&qh, blk + 2, 4);
                for (int t = 0; t < 4; ++t)
                    for (int j = 0; j < 4; ++j) {
                        if (qh >> (8 * t + j) & 1u) moved |= 1u << (8 * j + 4 + t);
                        if (qh >> (8 * t + 4 + j) & 1u) moved |= 1u << (8 * j + t);
                    }
                std::memcpy(dst + 4 + 4 * b, &moved, 4);
                std::memcpy(dst + 12 + 16 * b, blk + 6, 16);
            }
        });
}

}  // namespace

// ops::Backend::expert_layout: Q5_0 experts of an even number of blocks a row get the
// lane copy (gemv_mma.h) in a build with HF2Q_GEMV_MMA_Q50_LANES, byte for byte the
// host's, experts apart by more than their rows (a gap of 4 bytes) included; none for
// rows too long for the kernel that reads it, none without it; the CPU backend has none.
TEST_F(CudaOps, ExpertLaneLayoutReordersQ50Blocks) {
    const int64_t E = 3, F = 37;
    for (const int64_t H : {64, 704, 2816}) {
        const auto [wq, row_bytes, expert_bytes] = experts_apart(GgmlType::Q5_0, E, F, H, 4);
        const ops::WeightView w{GgmlType::Q5_0, H, F, row_bytes, dev(wq)};
        const void* layout = gpu->expert_layout(w, expert_bytes, E);
        if (!HF2Q_GEMV_MMA_Q50_LANES) {
            EXPECT_EQ(layout, nullptr) << "H=" << H << ": a copy in a build without it";
            continue;
        }
        if (H > 704) {  // rows longer than the shared memory of the kernel that reads the copy holds
            EXPECT_EQ(layout, nullptr) << "H=" << H << ": a copy no kernel reads";
            continue;
        }
        ASSERT_NE(layout, nullptr) << "H=" << H;
        const auto want = q50_lanes_reference(wq, row_bytes, expert_bytes, E, F, H);
        ASSERT_EQ(want.size(), static_cast<size_t>(E * F) * row_bytes);
        EXPECT_EQ(host(static_cast<const uint8_t*>(layout), want.size()), want) << "H=" << H;
        EXPECT_EQ(cpu->expert_layout({GgmlType::Q5_0, H, F, row_bytes, wq.data()}, expert_bytes, E), nullptr);
    }
}

// The tensor-core expert GEMV reading Q5_0's lane copy gives the blocks' sums to the bit
// (the same fragments and scales in the same order), for experts of 1-4, 5-8 and more
// rows (one pass, several), tiles in turn (up to 8 rows an expert on average) and one
// tile a block (more), partial tiles, rows gathered or in the grouping's order (the
// down product's form), rows of 64 and 704 values (the experts' down rows; longer ones
// get no copy: ExpertLaneLayoutReordersQ50Blocks). After the copy is made the blocks
// are zeroed, so a result that still matches was read from the copy.
TEST_F(CudaOps, ExpertLaneLayoutGivesTheBlocksSums) {
    if (!HF2Q_GEMV_MMA_Q50_LANES) GTEST_SKIP() << "Q5_0's lane copy is off in this build (HF2Q_GEMV_MMA_Q50_LANES)";
    for (const auto* counts : {&kFewRows, &kManyRows}) {
        const int64_t E = static_cast<int64_t>(counts->size());
        const std::vector<int32_t> ids = ids_with_counts(*counts);
        const int64_t T = static_cast<int64_t>(ids.size());
        for (const int64_t F : {37, 100})
            for (const int64_t H : {64, 704})
                for (const bool gathered : {false, true}) {
                    const std::string what = "T=" + std::to_string(T) + " F=" + std::to_string(F) +
                                             " H=" + std::to_string(H) + (gathered ? " gathered" : " grouped");
                    const size_t n = ids.size();
                    std::vector<int32_t> off(static_cast<size_t>(E + 1)), rows(n), slot(n);
                    cpu->moe_group({ids.data(), T, 1, E, off.data(), rows.data(), slot.data()});
                    const auto [wq, row_bytes] = random_quantized(GgmlType::Q5_0, E * F, H, 0.05f);
                    const auto x = q8_grid_activations(rng, gathered ? T : static_cast<int64_t>(n), H);
                    ops::MoeMatmulParams m;
                    void* blocks = dev(wq);
                    m.w = {GgmlType::Q5_0, H, F, row_bytes, blocks};
                    m.expert_bytes = row_bytes * static_cast<uint64_t>(F);
                    m.n_experts = E;
                    m.offsets = dev(off);
                    m.x_rows = gathered ? dev(rows) : nullptr;
                    m.x = dev(x);
                    m.n_rows = static_cast<int64_t>(n);
                    m.y = gpu->alloc_array<float>(n * static_cast<size_t>(F));
                    gpu->moe_matmul(m);
                    const auto plain = host(m.y, n * static_cast<size_t>(F));
                    m.w.expert_layout = gpu->expert_layout(m.w, m.expert_bytes, E);
                    ASSERT_NE(m.w.expert_layout, nullptr) << what;
                    gpu->upload(blocks, std::vector<uint8_t>(wq.size(), 0).data(), wq.size());
                    m.y = gpu->alloc_array<float>(n * static_cast<size_t>(F));
                    gpu->moe_matmul(m);
                    EXPECT_EQ(host(m.y, n * static_cast<size_t>(F)), plain) << what;
                }
    }
}

// Several weights on one input (q/k/v, gate/up): the same results as one matmul per
// weight, to the bit (the activations are quantized once and each row is computed
// as in its own launch), with types that share a launch, a type of its own launch,
// a type without the integer path, strided outputs, the batched path, and one token
// of two types in one launch.
TEST_F(CudaOps, MatmulMultiEqualsSeparateMatmuls) {
    // 512: one pass of a warp's lanes per row; 2816: the decode width (three passes).
    for (const int64_t K : {512, 2816}) {
        struct W {
            GgmlType type;
            int64_t n_out;
            int64_t y_stride;
        };
        const std::vector<std::vector<W>> sets = {
            {{GgmlType::Q4_K, 67, 0}, {GgmlType::Q4_K, 32, 40}, {GgmlType::Q6_K, 33, 0}},
            {{GgmlType::Q8_0, 64, 0}, {GgmlType::F16, 48, 50}},
            {{GgmlType::Q5_0, 9, 0}},
            // One token of two types is one mixed launch (gemv_q8_mixed_kernel): the
            // other pairs and orders, types interleaved; three types are not.
            {{GgmlType::Q6_K, 40, 0}, {GgmlType::Q5_K, 33, 40}},
            {{GgmlType::Q4_K, 16, 0}, {GgmlType::Q5_K, 20, 0}, {GgmlType::Q4_K, 9, 0}},
            {{GgmlType::Q4_K, 12, 0}, {GgmlType::Q6_K, 5, 0}, {GgmlType::Q8_0, 7, 0}}};
        for (const auto& set : sets) {
            std::vector<ops::WeightView> dw;
            for (const W& w : set) {
                const auto [wq, row_bytes] = random_quantized(w.type, w.n_out, K, 0.05f);
                dw.push_back({w.type, K, w.n_out, row_bytes, dev(wq)});
            }
            for (int64_t T : {1, 5, 16, 17}) {
                float* x = dev(randn(static_cast<size_t>(T * K)));
                ops::MultiMatmulParams m;
                m.x = x;
                m.n_tokens = T;
                std::vector<float*> separate;
                for (size_t i = 0; i < set.size(); ++i) {
                    const int64_t ys = set[i].y_stride ? set[i].y_stride : set[i].n_out;
                    const size_t n = static_cast<size_t>(T * ys);
                    separate.push_back(dev(std::vector<float>(n, 3.0f)));
                    gpu->matmul({dw[i], x, separate.back(), T, 0, set[i].y_stride});
                    m.w[m.n] = dw[i];
                    m.y[m.n] = dev(std::vector<float>(n, 3.0f));
                    m.y_stride[m.n] = set[i].y_stride;
                    ++m.n;
                }
                gpu->matmul_multi(m);
                for (size_t i = 0; i < set.size(); ++i) {
                    const int64_t ys = set[i].y_stride ? set[i].y_stride : set[i].n_out;
                    const size_t n = static_cast<size_t>(T * ys);
                    EXPECT_EQ(host(m.y[i], n), host(separate[i], n))
                        << "weight " << i << " (" << ggml_type_name(set[i].type) << ") K=" << K << " T=" << T;
                }
            }
        }
    }
    ops::MultiMatmulParams bad;
    bad.n = 2;
    bad.w[0].n_in = 512;
    bad.w[1].n_in = 256;
    EXPECT_THROW(gpu->matmul_multi(bad), Error);
    bad.n = 0;
    EXPECT_THROW(gpu->matmul_multi(bad), Error);
}

// The 8-bit form of tiny values (q8.cuh): blocks whose scale amax / 127 would be
// denormal (its reciprocal overflows) or underflow to zero still give |q| <= 127 and
// q·d within half a step of each value; only all-zero blocks get d = 0. Before the
// FLT_MIN floor the 1e-44 block failed here (d = 0 for nonzero values; H200, session
// 27). The output weights scale each 32-value block of residual_norms' output from
// about 1 down to denormals. The layout read back is the CUDA backend's (q8.cuh):
// rows·n int8 values, then from the next multiple of 256 bytes a (d, d·Σq) float
// pair per 32 values.
TEST_F(CudaOps, PreparedFormOfTinyBlocks) {
    const int64_t n = 256;
    const float scales[8] = {1.0f, 1e-30f, 1e-37f, 3e-39f, 1e-40f, 1e-44f, 0.0f, 0.5f};
    std::vector<float> w(static_cast<size_t>(n));
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    for (int64_t i = 0; i < n; ++i) w[static_cast<size_t>(i)] = scales[i / 32] * u(rng);
    const auto x = randn(static_cast<size_t>(n)), b = randn(static_cast<size_t>(n));
    const auto ones = std::vector<float>(static_cast<size_t>(n), 1.0f);
    const size_t bytes = gpu->prepared_bytes(1, n);
    ASSERT_EQ(bytes, 256u + 8u * sizeof(float) * 2);
    void* yp = gpu->alloc(bytes);
    ops::ResidualNormsParams p;
    p.x = dev(x);
    p.rows = 1;
    p.n = n;
    p.b[0] = dev(b);
    p.w[0] = dev(ones);
    p.n_out = 1;
    p.y[0] = gpu->alloc_array<float>(static_cast<size_t>(n));
    p.out_w[0] = dev(w);
    p.y_prep[0] = yp;
    gpu->residual_norms(p);
    const auto y = host(p.y[0], static_cast<size_t>(n));
    std::vector<uint8_t> raw(bytes);
    gpu->download(raw.data(), yp, bytes);
    std::vector<float> ds(16);
    std::memcpy(ds.data(), raw.data() + 256, ds.size() * sizeof(float));
    for (int64_t blk = 0; blk < n / 32; ++blk) {
        const float d = ds[static_cast<size_t>(2 * blk)];
        ASSERT_TRUE(std::isfinite(d) && d >= 0.0f) << "block " << blk << " d=" << d;
        const auto first = y.begin() + 32 * blk;
        const bool zeros = std::all_of(first, first + 32, [](float v) { return v == 0.0f; });
        EXPECT_EQ(d == 0.0f, zeros) << "block " << blk;
        EXPECT_TRUE(zeros || scales[blk] != 0.0f) << "block " << blk << ": zero weights, nonzero outputs";
        for (int64_t i = 32 * blk; i < 32 * blk + 32; ++i) {
            const int q = static_cast<int8_t>(raw[static_cast<size_t>(i)]);
            const double yi = y[static_cast<size_t>(i)];
            EXPECT_LE(std::abs(q), 127) << "value " << i;
            EXPECT_LE(std::abs(q * static_cast<double>(d) - yi), 0.5 * d * (1 + 1e-5) + 1e-45)
                << "value " << i << " y=" << yi << " q=" << q << " d=" << d;
        }
    }
}

// Prepared matmul inputs (ops/prepared.h): residual_norms and GEGLU write the 8-bit
// form of their outputs, and matmuls (plain, multi, grouped by expert) given it
// return exactly what they return when they quantize the rows themselves. The
// producers' f32 outputs do not change either. Producers run their fused kernels
// and (misaligned rows) the fallbacks.
TEST_F(CudaOps, PreparedInputsGiveBitEqualResults) {
    ASSERT_EQ(gpu->prepared_tokens(), 16);
    EXPECT_EQ(gpu32->prepared_tokens(), 0);  // the f32 precision has no integer GEMV
    EXPECT_EQ(gpu->prepared_bytes(4, 100), 0u);  // widths of a multiple of 32 only
    EXPECT_EQ(cpu->prepared_tokens(), 0);
    const int64_t H = 2816, F = 704, E = 8, K = 4;
    const auto [wq, wrb] = random_quantized(GgmlType::Q4_K, 96, H, 0.05f);
    const auto [w6, w6rb] = random_quantized(GgmlType::Q6_K, 40, H, 0.05f);
    const auto [wd, wdrb] = random_quantized(GgmlType::Q5_0, E * 64, F, 0.05f);
    const ops::WeightView q4{GgmlType::Q4_K, H, 96, wrb, dev(wq)}, q6{GgmlType::Q6_K, H, 40, w6rb, dev(w6)};
    const ops::WeightView down{GgmlType::Q5_0, F, 64, wdrb, dev(wd)};
    // The gathered gate_up: 64 experts, so every batch here routes at most one row per
    // expert on average and takes the one-row kernel, which reads the prepared rows
    // (the eight-row kernel ignores them, as the contract allows).
    const int64_t GE = 64;
    const auto [wgu, gurb] = random_quantized(GgmlType::Q4_K, GE * 64, H, 0.05f);
    const ops::WeightView gate_up{GgmlType::Q4_K, H, 64, gurb, dev(wgu)};
    for (int64_t T : {1, 3, 16}) {
        for (int64_t shift : {0, 1}) {
            const std::string what = "T=" + std::to_string(T) + " shift=" + std::to_string(shift);
            const size_t rn = static_cast<size_t>(T * H);
            // residual_norms -> y (plain and prepared) -> matmul and matmul_multi.
            void* yp = gpu->alloc(gpu->prepared_bytes(T, H));
            ops::ResidualNormsParams r = two_output_norms(T, H, shift);
            r.y_prep[1] = yp;
            gpu->residual_norms(r);
            float* const dy = r.y[0];
            ASSERT_EQ(host(dy, rn), host(r.y[1], rn)) << what;
            ops::MatmulParams m = expect_same_products(q4, q6, dy, T, [&](auto& p) { p.x_prep = yp; }, what);
            // The experts' gate_up reads the T prepared rows through the grouping's gather
            // (x_rows, x_n_rows = T), plain and with the GEGLU epilogue.
            const auto gids = random_routing(rng, T, K, GE);
            const int64_t gn = T * K;
            std::vector<int32_t> goff(GE + 1), grows(static_cast<size_t>(gn)), gslot(static_cast<size_t>(gn));
            cpu->moe_group({gids.data(), T, K, GE, goff.data(), grows.data(), gslot.data()});
            ops::MoeMatmulParams eg;
            eg.w = gate_up;
            eg.expert_bytes = gurb * 64;
            eg.n_experts = GE;
            eg.offsets = dev(goff);
            eg.x_rows = dev(grows);
            eg.x_n_rows = T;
            eg.x = dy;
            eg.n_rows = gn;
            const size_t gu_out = static_cast<size_t>(gn * 64);
            std::vector<std::vector<float>> gathered[2];  // [geglu][prepared]
            for (int geglu = 0; geglu < 2; ++geglu) {
                eg.geglu = geglu == 1;
                eg.geglu_scratch = eg.geglu ? gpu->alloc_array<float>(gu_out) : nullptr;
                for (int prepared = 0; prepared < 2; ++prepared) {
                    eg.x_prep = prepared == 1 ? yp : nullptr;
                    eg.y = gpu->alloc_array<float>(gu_out);
                    gpu->moe_matmul(eg);
                    gathered[geglu].push_back(host(eg.y, eg.geglu ? gu_out / 2 : gu_out));
                }
                EXPECT_EQ(gathered[geglu][0], gathered[geglu][1]) << what << " gathered, geglu " << geglu;
            }
            // The matmuls really read the prepared rows: zeroed, they give zeros.
            gpu->fill_zero(yp, gpu->prepared_bytes(T, H));
            gpu->matmul(m);
            EXPECT_EQ(host(m.y, static_cast<size_t>(T * 96)), std::vector<float>(static_cast<size_t>(T * 96), 0.0f));
            eg.geglu = false;
            eg.geglu_scratch = nullptr;
            gpu->moe_matmul(eg);
            EXPECT_EQ(host(eg.y, gu_out), std::vector<float>(gu_out, 0.0f)) << what << " gathered";

            // GEGLU over the experts' gate_up rows -> grouped down projection.
            if (shift == 1) continue;
            const auto ids = random_routing(rng, T, K, E);
            const int64_t n = T * K;
            std::vector<int32_t> off(E + 1), rows(static_cast<size_t>(n)), slot(static_cast<size_t>(n));
            cpu->moe_group({ids.data(), T, K, E, off.data(), rows.data(), slot.data()});
            const auto gu = randn(static_cast<size_t>(n * 2 * F));
            ops::GegluParams g = ops::gate_up_geglu(dev(gu), gpu->alloc_array<float>(static_cast<size_t>(n * F)), n, F);
            gpu->geglu(g);
            const auto plain_g = host(g.out, static_cast<size_t>(n * F));
            void* gp = gpu->alloc(gpu->prepared_bytes(n, F));
            g.out_prep = gp;
            gpu->geglu(g);
            EXPECT_EQ(host(g.out, static_cast<size_t>(n * F)), plain_g) << what;
            ops::MoeMatmulParams e;
            e.w = down;
            e.expert_bytes = wdrb * 64;
            e.n_experts = E;
            e.offsets = dev(off);
            e.x = g.out;
            e.n_rows = n;
            e.y = gpu->alloc_array<float>(static_cast<size_t>(n * 64));
            gpu->moe_matmul(e);
            const auto plain_e = host(e.y, static_cast<size_t>(n * 64));
            e.x_prep = gp;
            gpu->moe_matmul(e);
            EXPECT_EQ(host(e.y, static_cast<size_t>(n * 64)), plain_e) << what;
            gpu->fill_zero(gp, gpu->prepared_bytes(n, F));
            gpu->moe_matmul(e);
            EXPECT_EQ(host(e.y, static_cast<size_t>(n * 64)), std::vector<float>(static_cast<size_t>(n * 64), 0.0f));
        }
    }
}

// The experts' down input prepared by the GEGLU in batched decode
// (Backend::prepared_expert_down_tokens: up to 64 tokens). The gate_up product with its
// GEGLU epilogue, on device offsets as the forward runs it, writes the 8-bit form of its
// output without changing the f32 one; the grouped down product given it returns exactly
// what it returns quantizing the rows itself (Q5_0 and Q8_0 down weights, 17-64 tokens,
// 8 experts a token). Zeroed prepared rows give zeros, so the product really reads them.
TEST_F(CudaOps, PreparedExpertDownInputsInBatchedDecode) {
    EXPECT_EQ(gpu->prepared_expert_down_tokens(), 64);
    EXPECT_EQ(gpu32->prepared_expert_down_tokens(), 0);
    EXPECT_EQ(cpu->prepared_expert_down_tokens(), 0);
    const int64_t H = 512, F = 256, E = 64, K = 8;
    const auto [wgu, gurb] = random_quantized(GgmlType::Q4_K, E * 2 * F, H, 0.05f);
    const ops::WeightView gate_up{GgmlType::Q4_K, H, 2 * F, gurb, dev(wgu)};
    for (GgmlType dt : {GgmlType::Q5_0, GgmlType::Q8_0}) {
        const auto [wd, wdrb] = random_quantized(dt, E * H, F, 0.05f);
        const ops::WeightView down{dt, F, H, wdrb, dev(wd)};
        for (int64_t T : {17, 40, 64}) {
            const std::string what = "type " + std::to_string(static_cast<int>(dt)) + " T=" + std::to_string(T);
            const int64_t n = T * K;
            const size_t ge_n = static_cast<size_t>(n * F), y_n = static_cast<size_t>(n * H);
            ops::MoeMatmulParams g = routed_gate_up(random_routing(rng, T, K, E), T, K, E, gate_up);
            g.geglu_scratch = gpu->alloc_array<float>(2 * ge_n);
            g.y = gpu->alloc_array<float>(ge_n);
            gpu->moe_matmul(g);
            const auto plain_ge = host(g.y, ge_n);
            void* gp = gpu->alloc(gpu->prepared_bytes(n, F));
            g.y_prep = gp;
            gpu->moe_matmul(g);
            EXPECT_EQ(host(g.y, ge_n), plain_ge) << what;
            ops::MoeMatmulParams d;
            d.w = down;
            d.expert_bytes = wdrb * H;
            d.n_experts = E;
            d.offsets = g.offsets;
            d.x = g.y;
            d.n_rows = n;
            d.y = gpu->alloc_array<float>(y_n);
            gpu->moe_matmul(d);
            const auto plain_d = host(d.y, y_n);
            d.x_prep = gp;
            gpu->moe_matmul(d);
            EXPECT_EQ(host(d.y, y_n), plain_d) << what;
            gpu->fill_zero(gp, gpu->prepared_bytes(n, F));
            gpu->moe_matmul(d);
            EXPECT_EQ(host(d.y, y_n), std::vector<float>(y_n, 0.0f)) << what;
        }
    }
}

// The GEGLU as the grouped tensor-core GEMV's epilogue (launch_gemv_q8_geglu: Q4_K
// gate_up rows, device offsets, experts averaging at most 8 routed rows, F a multiple
// of 32): the same bits as the two ops it stands for, the plain product into the
// scratch and then the GEGLU op, in the f32 output and in its prepared form. Routings:
// random (1-8 rows an expert: paired and full passes, or 16 on average: two passes),
// one expert given every token (up to 8 passes) and experts without rows; F = 32 (one
// block of 32 gate rows) and 704 (the 26B-A4B's), H = 256 and 2816; a padded output
// stride whose padding keeps its sentinel. The fused launch leaves the scratch
// untouched, so the test knows it ran. Both with the experts' blocks as stored and
// with their scaled copy (ops::Backend::expert_layout), which both runs then read.
TEST_F(CudaOps, ExpertGegluEpilogueMatchesTheTwoOps) {
    const float kSentinel = -7.25f;
    const int64_t E = 64, K = 8;
    const std::pair<int64_t, int64_t> shapes[] = {{256, 32}, {256, 704}, {2816, 32}};  // H, F
    for (const auto& [H, F] : shapes) {
        const auto [wgu, gurb] = random_quantized(GgmlType::Q4_K, E * 2 * F, H, 0.05f);
        const ops::WeightView plain{GgmlType::Q4_K, H, 2 * F, gurb, dev(wgu)};
        ops::WeightView scaled = plain;  // the scaled copy (gemv_mma.h) in both runs
        scaled.expert_layout = gpu->expert_layout(plain, gurb * static_cast<uint64_t>(2 * F), E);
        ASSERT_NE(scaled.expert_layout, nullptr);
        for (const ops::WeightView& gate_up : {plain, scaled})
        for (int64_t T : {9, 40, 64}) {
            for (bool skewed : {false, true}) {
                auto ids = random_routing(rng, T, K, E / 2);  // experts 32..63 stay idle
                if (skewed)  // expert 40 (never drawn) in every token's last slot
                    for (int64_t t = 0; t < T; ++t) ids[static_cast<size_t>(t * K + K - 1)] = 40;
                const int64_t n = T * K, ys = F + 32;
                const std::string what = "H=" + std::to_string(H) + " F=" + std::to_string(F) +
                                         " T=" + std::to_string(T) + (skewed ? " skewed" : "") +
                                         (gate_up.expert_layout ? " scaled" : "");
                ops::MoeMatmulParams g = routed_gate_up(ids, T, K, E, gate_up);
                g.y_stride = ys;
                const size_t sn = static_cast<size_t>(n * 2 * F), yn = static_cast<size_t>(n * ys);
                const size_t pn = gpu->prepared_bytes(n, F);
                ops::MoeMatmulParams r = g;  // the two ops
                g.geglu_scratch = dev(std::vector<float>(sn, kSentinel));
                g.y = dev(std::vector<float>(yn, kSentinel));
                g.y_prep = dev(std::vector<uint8_t>(pn, 0));
                gpu->moe_matmul(g);
                r.geglu_scratch = gpu->alloc_array<float>(sn);
                r.y = dev(std::vector<float>(yn, kSentinel));
                r.y_prep = dev(std::vector<uint8_t>(pn, 0));
                gpu->moe_matmul(ops::geglu_product(r));
                gpu->geglu(ops::geglu_of_product(r));
                EXPECT_EQ(host(g.geglu_scratch, sn), std::vector<float>(sn, kSentinel)) << what << ": not fused";
                const auto y = host(g.y, yn);
                EXPECT_EQ(float_bits(y), float_bits(host(r.y, yn))) << what;
                EXPECT_EQ(host(static_cast<const uint8_t*>(g.y_prep), pn),
                          host(static_cast<const uint8_t*>(r.y_prep), pn))
                    << what;
                bool pad_kept = true, written = true;
                for (int64_t i = 0; i < n; ++i)
                    for (int64_t j = 0; j < ys; ++j) {
                        const float v = y[static_cast<size_t>(i * ys + j)];
                        if (j >= F && v != kSentinel) pad_kept = false;
                        if (j < F && (!std::isfinite(v) || v == kSentinel)) written = false;
                    }
                EXPECT_TRUE(pad_kept) << what << ": wrote outside its output columns";
                EXPECT_TRUE(written) << what << ": an output value not written";
            }
        }
    }
}

// BF16 rows (ops/prepared.h): in batches past the GEMV (17+ tokens) residual_norms and
// GEGLU also write their outputs rounded to BF16, and matmul, matmul_multi (forked
// over streams and one after the other) and the router product given those rows
// return exactly what they return converting x themselves. The producers' f32
// outputs do not change, and their BF16 rows are the f32 values rounded to nearest
// even. Misaligned rows (shift 1) take the producers' fallbacks.
TEST_F(CudaOps, Bf16RowsGiveBitEqualResults) {
    EXPECT_FALSE(gpu->reads_bf16_rows(16));  // the GEMV's batches read the 8-bit form
    EXPECT_TRUE(gpu->reads_bf16_rows(17));
    EXPECT_FALSE(gpu32->reads_bf16_rows(64));  // the f32 precision converts nothing
    EXPECT_FALSE(cpu->reads_bf16_rows(64));
    const int64_t H = 2816, F = 704, E = 16;
    const auto [wq, wrb] = random_quantized(GgmlType::Q4_K, 96, H, 0.05f);
    const auto [w6, w6rb] = random_quantized(GgmlType::Q6_K, 40, H, 0.05f);
    const auto [wd, wdrb] = random_quantized(GgmlType::Q5_0, 64, F, 0.05f);
    const ops::WeightView q4{GgmlType::Q4_K, H, 96, wrb, dev(wq)}, q6{GgmlType::Q6_K, H, 40, w6rb, dev(w6)};
    const ops::WeightView down{GgmlType::Q5_0, F, 64, wdrb, dev(wd)};
    // With the BF16 batch copies the model loads too: then matmul_multi forks its
    // products over streams (up to 128 tokens).
    ops::WeightView q4c = q4, q6c = q6;
    q4c.batch_layout = gpu->batch_layout(q4);
    q6c.batch_layout = gpu->batch_layout(q6);
    EXPECT_NE(q4c.batch_layout, nullptr);
    const auto wr = randn(static_cast<size_t>(E * H), 0.05f);
    const ops::WeightView router{GgmlType::F32, H, E, static_cast<uint64_t>(H) * 4, dev(wr)};
    auto rounded = [](const std::vector<float>& v) {
        std::vector<uint16_t> b(v.size());
        for (size_t i = 0; i < v.size(); ++i) b[i] = quant::fp32_to_bf16(v[i]);
        return b;
    };
    for (int64_t T : {17, 64, 200}) {
        for (int64_t shift : {0, 1}) {
            const std::string what = "T=" + std::to_string(T) + " shift=" + std::to_string(shift);
            const size_t rn = static_cast<size_t>(T * H);
            auto* yb = gpu->alloc_array<uint16_t>(rn);
            ops::ResidualNormsParams r = two_output_norms(T, H, shift);
            r.y_bf16[1] = yb;
            gpu->residual_norms(r);
            float *const dy = r.y[0], *const dy2 = r.y[1];
            ASSERT_EQ(host(dy, rn), host(dy2, rn)) << what;
            EXPECT_EQ(host(yb, rn), rounded(host(dy2, rn))) << what;

            for (bool copies : {false, true})
                expect_same_products(copies ? q4c : q4, copies ? q6c : q6, dy, T, [&](auto& p) { p.x_bf16 = yb; },
                                     what + (copies ? " batch copies" : " block formats"));

            // The router product inside moe_route_group: the same logits.
            ops::MoeRouteParams rp;
            rp.n_tokens = T;
            rp.n_experts = E;
            rp.k = 4;
            rp.router_x = dy2;
            rp.router_x_stride = H;
            rp.router_w = router;
            ops::MoeGroupParams g;
            g.n_tokens = T;
            g.k = 4;
            g.n_experts = E;
            std::vector<float> logits[2];
            for (int with_rows = 0; with_rows < 2; ++with_rows) {
                rp.logits = gpu->alloc_array<float>(static_cast<size_t>(T * E));
                rp.ids = gpu->alloc_array<int32_t>(static_cast<size_t>(T * 4));
                rp.weights = gpu->alloc_array<float>(static_cast<size_t>(T * 4));
                rp.router_x_bf16 = with_rows ? yb : nullptr;
                g.ids = rp.ids;
                g.offsets = gpu->alloc_array<int32_t>(E + 1);
                g.rows = gpu->alloc_array<int32_t>(static_cast<size_t>(T * 4));
                g.slot_of = gpu->alloc_array<int32_t>(static_cast<size_t>(T * 4));
                gpu->moe_route_group(rp, g);
                logits[with_rows] = host(rp.logits, static_cast<size_t>(T * E));
            }
            EXPECT_EQ(logits[0], logits[1]) << what << " router";

            // The matmuls really read the BF16 rows: zeroed, they give zeros.
            gpu->fill_zero(yb, rn * 2);
            ops::MatmulParams mz{q4, dy, gpu->alloc_array<float>(static_cast<size_t>(T * 96)), T};
            mz.x_bf16 = yb;
            gpu->matmul(mz);
            EXPECT_EQ(host(mz.y, static_cast<size_t>(T * 96)), std::vector<float>(static_cast<size_t>(T * 96), 0.0f))
                << what;

            // GEGLU -> the dense down projection.
            const size_t fn = static_cast<size_t>(T * F);
            const auto gu = randn(2 * fn + 1);
            ops::GegluParams ge = ops::gate_up_geglu(dev(gu) + shift, gpu->alloc_array<float>(fn), T, F);
            gpu->geglu(ge);
            const auto plain_g = host(ge.out, fn);
            auto* gb = gpu->alloc_array<uint16_t>(fn);
            ge.out_bf16 = gb;
            gpu->geglu(ge);
            EXPECT_EQ(host(ge.out, fn), plain_g) << what;
            EXPECT_EQ(host(gb, fn), rounded(plain_g)) << what;
            ops::MatmulParams md{down, ge.out, gpu->alloc_array<float>(static_cast<size_t>(T * 64)), T};
            gpu->matmul(md);
            const auto plain_d = host(md.y, static_cast<size_t>(T * 64));
            md.x_bf16 = gb;
            gpu->matmul(md);
            EXPECT_EQ(host(md.y, static_cast<size_t>(T * 64)), plain_d) << what;
        }
    }
}

// Grouping, grouped expert matmuls (device-only GEMV path, and the tensor-core
// path with host offsets) and the combine, against the CPU reference.
TEST_F(CudaOps, MoeGroupMatmulCombine) {
    const int64_t E = 16, K = 4, H = 256, F = 96;
    for (int64_t T : {0, 1, 5, 40, 300}) {
        for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::MXFP4, GgmlType::F16}) {
            if (T != 40 && t != GgmlType::Q4_K) continue;  // every type at one batch size
            std::vector<int32_t> ids(static_cast<size_t>(T * K));
            std::uniform_int_distribution<int32_t> pick(0, 5);  // experts 6..15 stay idle
            for (int64_t i = 0; i < T; ++i) {
                std::vector<int32_t> chosen;
                while (static_cast<int64_t>(chosen.size()) < K) {
                    int32_t e = pick(rng) * 2 + static_cast<int32_t>(chosen.size() % 2);
                    if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
                }
                std::copy(chosen.begin(), chosen.end(), ids.begin() + i * K);
            }
            const size_t n = ids.size();
            std::vector<int32_t> off(E + 1), rows(n), slot(n);
            cpu->moe_group({ids.data(), T, K, E, off.data(), rows.data(), slot.data()});
            int32_t *doff = gpu->alloc_array<int32_t>(E + 1), *drows = gpu->alloc_array<int32_t>(n + 1),
                    *dslot = gpu->alloc_array<int32_t>(n + 1);
            gpu->moe_group({dev(ids.empty() ? std::vector<int32_t>{0} : ids), T, K, E, doff, drows, dslot});
            EXPECT_EQ(host(doff, E + 1), off) << "T=" << T;
            if (n > 0) {
                EXPECT_EQ(host(drows, n), rows) << "T=" << T;
                EXPECT_EQ(host(dslot, n), slot) << "T=" << T;
            }

            const auto [wq, row_bytes] = random_quantized(t, E * F, H, 0.05f);
            auto x = randn(static_cast<size_t>(std::max<int64_t>(T, 1) * H));
            std::vector<float> ref(std::max<size_t>(n, 1) * F);
            ops::MoeMatmulParams m = cpu_moe_reference(*cpu, t, wq, row_bytes, E, F, H, off, rows, x, n, ref);
            m.w.data = dev(wq);
            m.offsets = doff;
            m.x_rows = drows;
            m.x = dev(x);
            for (bool with_host : {false, true}) {
                m.host_offsets = with_host ? off.data() : nullptr;
                float* dy = gpu->alloc_array<float>(ref.size());
                m.y = dy;
                gpu->moe_matmul(m);
                if (n > 0) {
                    EXPECT_LT(rel_err(host(dy, n * F), std::vector<float>(ref.begin(), ref.begin() + n * F)),
                              with_host ? 1e-2 : gemv_tolerance(t))
                        << ggml_type_name(t) << " T=" << T << (with_host ? " tensor cores" : " gemv");
                }
            }

            auto y = randn(std::max<size_t>(n, 1) * H);
            auto wts = randn(std::max<size_t>(n, 1));
            std::vector<float> cref(static_cast<size_t>(std::max<int64_t>(T, 1) * H));
            cpu->moe_combine({y.data(), H, slot.data(), wts.data(), cref.data(), H, T, K, H});
            float* dc = gpu->alloc_array<float>(cref.size());
            gpu->moe_combine({dev(y), H, dslot, dev(wts), dc, H, T, K, H});
            if (T > 0) {
                EXPECT_LT(rel_err(host(dc, static_cast<size_t>(T * H)),
                                  std::vector<float>(cref.begin(), cref.begin() + T * H)),
                          1e-6);
            }
        }
    }
}

// x rounded to the nearest BF16 (ties to even), as the tensor-core operands are.
float bf16_round(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    std::memcpy(&x, &u, sizeof x);
    return x;
}

// A row of Q4_K, Q5_0 or Q8_0 weights as the register-decoding grouped GEMM
// (gemm_grouped_reg.cu) forms them: the scales (d·sc and dmin·m, or d) rounded to
// BF16 first, then q·scale (− min) rounded to BF16 once (BF16x2 fma / mul).
std::vector<float> reg_decoded_row(GgmlType t, const uint8_t* row, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    auto f16 = [](const uint8_t* p) { return quant::fp16_to_fp32(static_cast<uint16_t>(p[0] | (p[1] << 8))); };
    auto fma_bf16 = [](double q, float s, float m) { return bf16_round(static_cast<float>(q * s - m)); };
    if (t == GgmlType::Q4_K) {
        for (int64_t b = 0; b < n / 256; ++b) {
            const uint8_t* blk = row + b * 144;
            const uint8_t* sc = blk + 4;
            for (int j = 0; j < 8; ++j) {
                const int s = j < 4 ? sc[j] & 63 : (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
                const int m = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
                const float d1 = bf16_round(f16(blk) * static_cast<float>(s));
                const float m1 = bf16_round(f16(blk + 2) * static_cast<float>(m));
                for (int i = 0; i < 32; ++i) {
                    const int q = (blk[16 + 32 * (j / 2) + i] >> (4 * (j % 2))) & 15;
                    v[static_cast<size_t>(b * 256 + 32 * j + i)] = fma_bf16(q, d1, m1);
                }
            }
        }
    } else {
        const bool q5 = t == GgmlType::Q5_0;
        for (int64_t b = 0; b < n / 32; ++b) {
            const uint8_t* blk = row + b * (q5 ? 22 : 34);
            const float d = bf16_round(f16(blk));
            for (int i = 0; i < 32; ++i) {
                int q;
                if (q5) {
                    const uint32_t qh = blk[2] | (blk[3] << 8) | (blk[4] << 16) | (static_cast<uint32_t>(blk[5]) << 24);
                    q = (((blk[6 + i % 16] >> (4 * (i / 16))) & 15) | (((qh >> i) & 1) << 4)) - 16;
                } else {
                    q = static_cast<int8_t>(blk[2 + i]);
                }
                v[static_cast<size_t>(b * 32 + i)] = fma_bf16(q, d, 0.0f);
            }
        }
    }
    return v;
}

// The prefill MoE product (host offsets given, default precision) on the grouped
// tile kernel (gemm_grouped.cu): every type it decodes, reductions with and without
// a partial 64-value stage, outputs around the 128-row tile, experts with 0, 1,
// 31-33 and 65 rows (the tile kernel) and 127-129 and 300 (about 137 per expert:
// the expansion + cuBLAS path, held to the same bound), gathered activation
// rows with repeats, and a padded output stride. Its operands are the weights and
// activations rounded to BF16 with f32 sums (the Q4_K, Q5_0 and Q8_0 rows of the
// register decoder as that decoder rounds them), so the reference is the CPU
// product of exactly those rounded values: 1e-4 leaves room only for the order of the sums,
// while a misplaced value, scale, tile or row shows as an O(1) error. The padding
// columns must keep their sentinel.
TEST_F(CudaOps, GroupedTileGemmMatchesBf16Reference) {
    const std::vector<std::vector<int32_t>> scenarios = {
        {0, 1, 31, 32, 33, 65, 0, 5},        // about 28 rows per active expert: the tile kernel
        {0, 1, 127, 128, 129, 300, 0},       // about 137: 128-token tiles
    };
    const int64_t T = 50;  // tokens the routed rows gather from
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K,
                       GgmlType::Q6_K}) {
        const bool kquant = t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
        for (int64_t H : kquant ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{96, 704}) {
            for (int64_t F : {1, 130, 256}) {
                for (const auto& counts : scenarios) {
                    const int64_t E = static_cast<int64_t>(counts.size()), ys = F + 3;
                    std::vector<int32_t> off(static_cast<size_t>(E + 1), 0);
                    for (int64_t e = 0; e < E; ++e) off[static_cast<size_t>(e + 1)] = off[static_cast<size_t>(e)] + counts[static_cast<size_t>(e)];
                    const size_t n = static_cast<size_t>(off.back());
                    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(T - 1));
                    std::vector<int32_t> rows(n);
                    for (auto& r : rows) r = tok(rng);
                    const auto [wq, row_bytes] = random_quantized(t, E * F, H, 0.05f);
                    auto x = randn(static_cast<size_t>(T * H));

                    // The reference: the same weights and activations rounded to BF16, as F32.
                    // Q4_K, Q5_0 and Q8_0 rows of whole 64-value stages take the register
                    // decoder and its rounding (reg_decoded_row).
                    const bool reg = (t == GgmlType::Q4_K || t == GgmlType::Q5_0 || t == GgmlType::Q8_0) && H % 64 == 0;
                    std::vector<float> wr(static_cast<size_t>(E * F * H));
                    for (int64_t r = 0; r < E * F; ++r) {
                        const uint8_t* src = wq.data() + static_cast<size_t>(r) * row_bytes;
                        if (reg) {
                            const auto row = reg_decoded_row(t, src, H);
                            std::copy(row.begin(), row.end(), wr.begin() + r * H);
                        } else {
                            quant::dequantize_row(t, src, wr.data() + r * H, H);
                            for (int64_t i = 0; i < H; ++i) wr[static_cast<size_t>(r * H + i)] = bf16_round(wr[static_cast<size_t>(r * H + i)]);
                        }
                    }
                    std::vector<float> xr = x;
                    for (auto& v : xr) v = bf16_round(v);
                    std::vector<uint8_t> wr_bytes(wr.size() * sizeof(float));
                    std::memcpy(wr_bytes.data(), wr.data(), wr_bytes.size());
                    std::vector<float> ref(n * static_cast<size_t>(F));
                    cpu_moe_reference(*cpu, GgmlType::F32, wr_bytes, static_cast<uint64_t>(H) * sizeof(float), E, F,
                                      H, off, rows, xr, n, ref);

                    ops::MoeMatmulParams m;
                    m.w = {t, H, F, row_bytes, dev(wq)};
                    m.expert_bytes = row_bytes * static_cast<uint64_t>(F);
                    m.n_experts = E;
                    m.offsets = dev(off);
                    m.host_offsets = off.data();
                    m.x_rows = dev(rows);
                    m.x_n_rows = T;  // the register kernels then gather the rows themselves
                    m.x = dev(x);
                    m.n_rows = static_cast<int64_t>(n);
                    bool pad_kept = false;
                    const std::vector<float> got = moe_matmul_padded(m, n, F, ys, pad_kept);
                    const std::string what = std::string(ggml_type_name(t)) + " H=" + std::to_string(H) +
                                             " F=" + std::to_string(F) + " rows=" + std::to_string(n);
                    EXPECT_LT(rel_err(got, ref), 1e-4) << what;
                    EXPECT_TRUE(pad_kept) << what << ": wrote outside its output columns";
                }
            }
        }
    }
}

// Dense products of 17-128 tokens (batched decode, short prompts) on Q4_K, Q5_0
// and Q8_0 weights: the BF16 expansion and cuBLAS. The reference is the CPU product
// of the activations and of each dequantized weight rounded to BF16 once, so 1e-4
// leaves room only for the order of the sums; a misplaced value, scale or tile
// shows as an O(1) error. The shapes put outputs around cuBLAS's tiles and the
// reductions at 1-44 blocks of 64 values; the padded output stride must keep its
// sentinel. Two runs must agree bit for bit, and matmul_multi (the activations
// converted once for all its weights) must give what the separate matmul gives.
TEST_F(CudaOps, DenseBatchMatmulMatchesBf16Reference) {
    struct Shape {
        GgmlType type;
        int64_t n_out, n_in;
    };
    const std::vector<Shape> shapes = {
        {GgmlType::Q4_K, 200, 2816}, {GgmlType::Q4_K, 1000, 2304}, {GgmlType::Q4_K, 67, 256},
        {GgmlType::Q4_K, 4100, 512}, {GgmlType::Q5_0, 200, 2112},  {GgmlType::Q5_0, 1000, 2112},
        {GgmlType::Q5_0, 67, 64},    {GgmlType::Q8_0, 129, 2112},  {GgmlType::Q8_0, 1000, 2112},
        {GgmlType::Q8_0, 4100, 512}};
    for (const Shape& sh : shapes) {
        const int64_t N = sh.n_out, K = sh.n_in, xs = K + 4, ys = N + 3;
        const auto [wq, row_bytes] = random_quantized(sh.type, N, K, 0.05f);
        std::vector<float> we(static_cast<size_t>(N * K));
        for (int64_t r = 0; r < N; ++r)
            quant::dequantize_row(sh.type, wq.data() + static_cast<size_t>(r) * row_bytes, we.data() + r * K, K);
        for (auto& v : we) v = bf16_round(v);
        const ops::WeightView wfe{GgmlType::F32, K, N, static_cast<uint64_t>(K) * sizeof(float), we.data()};
        const ops::WeightView dw{sh.type, K, N, row_bytes, dev(wq)};
        for (int64_t T : {17, 31, 64, 65, 100, 128}) {
            const std::string what = std::string(ggml_type_name(sh.type)) + " N=" + std::to_string(N) +
                                     " K=" + std::to_string(K) + " T=" + std::to_string(T);
            auto x = randn(static_cast<size_t>(T * xs));
            std::vector<float> xr = x;
            for (auto& v : xr) v = bf16_round(v);
            std::vector<float> ref(static_cast<size_t>(T * ys), 7.0f);
            cpu->matmul({wfe, xr.data(), ref.data(), T, xs, ys});
            float* dx = dev(x);
            std::vector<float> runs[2];
            for (auto& got : runs) {
                float* dy = dev(std::vector<float>(ref.size(), 7.0f));
                gpu->matmul({dw, dx, dy, T, xs, ys});
                got = host(dy, ref.size());
            }
            EXPECT_LT(rel_err(runs[0], ref), 1e-4) << what;
            EXPECT_EQ(runs[0], runs[1]) << what << ": two runs differ";
            bool pad_kept = true;
            for (int64_t t = 0; t < T; ++t)
                for (int64_t c = N; c < ys; ++c) pad_kept = pad_kept && runs[0][static_cast<size_t>(t * ys + c)] == 7.0f;
            EXPECT_TRUE(pad_kept) << what << ": wrote outside its output columns";

            ops::MultiMatmulParams m;  // this weight twice, the second time unpadded
            m.n = 2;
            m.w[0] = m.w[1] = dw;
            m.x = dx;
            m.x_stride = xs;
            m.n_tokens = T;
            m.y[0] = dev(std::vector<float>(ref.size(), 7.0f));
            m.y_stride[0] = ys;
            m.y[1] = gpu->alloc_array<float>(static_cast<size_t>(T * N));
            gpu->matmul_multi(m);
            EXPECT_EQ(host(m.y[0], ref.size()), runs[0]) << what << " (matmul_multi)";
            // Unpadded (cuBLAS may take another algorithm for another stride, so the
            // bound, not bit equality).
            const auto second = host(m.y[1], static_cast<size_t>(T * N));
            std::vector<float> unpadded(second.size());
            for (int64_t t = 0; t < T; ++t)
                for (int64_t c = 0; c < N; ++c)
                    unpadded[static_cast<size_t>(t * N + c)] = ref[static_cast<size_t>(t * ys + c)];
            EXPECT_LT(rel_err(second, unpadded), 1e-4) << what << " (matmul_multi, second weight)";
        }
    }
}

// A CUDA backend that takes the tile GEMM up to the kernel's 64 tokens (CudaOptions::
// tile_gemm_max_tokens; the default backend's stops at 32); null in a build without CUDA.
std::unique_ptr<ops::Backend> tile_gemm_backend() {
#ifdef HF2Q_HAVE_CUDA
    cuda::CudaOptions o;
    o.tile_gemm_max_tokens = 64;
    return cuda::make_backend(o);
#else
    return nullptr;
#endif
}

// Batched decode's dense products of 17-64 tokens on Q4_K rows and Q6_K planes
// (decode_layout), which cuBLAS multiplies after expanding them to BF16 (session 42's
// block-format kernel, gemm_small.cu, ran these until session 61 removed it; the tile
// GEMM's tests below derive from this fixture). The reference is the CPU product
// of the BF16-rounded activations and weights (each dequantized value rounded once,
// exactly as the kernel and the BF16 copies decode it), so the two differ only in the
// order of the f32 sums. Per value the bound is 5e-5 of Σ|x|·|w| over the row (f32
// sums of K ≤ 16384 terms in any order: about sqrt(K)·2^-24 of it, 1e-5 at most in
// practice; one misplaced or misdecoded value of a K-term row is about 1/K of it,
// above the bound up to K ~ 20,000), and over all values the relative error of the
// existing dense test (1e-4).
class CudaSmallGemm : public CudaOps {
protected:
    struct Weight {
        ops::WeightView w;
        std::vector<float> values;  // dequantized, rounded to BF16, n_out × n_in
    };
    Weight weight(GgmlType t, int64_t N, int64_t K) {
        const auto [wq, row_bytes] = random_quantized(t, N, K, 0.05f);
        Weight r;
        r.w = {t, K, N, row_bytes, dev(wq)};
        if (t == GgmlType::Q6_K) {
            r.w.decode_layout = gpu->decode_layout(r.w);
            EXPECT_NE(r.w.decode_layout, nullptr);
        }
        r.values.resize(static_cast<size_t>(N * K));
        for (int64_t i = 0; i < N; ++i) {
            const uint8_t* row = wq.data() + static_cast<size_t>(i) * row_bytes;
            float* out = r.values.data() + i * K;
            if (t == GgmlType::Q4_K)
                q4k_as_expanded(row, out, K);
            else
                quant::dequantize_row(t, row, out, K);
        }
        for (auto& v : r.values) v = bf16_round(v);
        return r;
    }
    // A Q4_K row as the device's expansion and the kernel decode it (dequant.cuh,
    // Piece<Q4_K>): d·sc and dmin·m rounded, then one fma. The CPU dequantizer rounds
    // q·d·sc before subtracting, which after the BF16 rounding differs in about one
    // value in 2^16 by one BF16 step: too much for the bound on short rows.
    static void q4k_as_expanded(const uint8_t* row, float* out, int64_t n) {
        auto f16 = [](const uint8_t* p) { return quant::fp16_to_fp32(static_cast<uint16_t>(p[0] | (p[1] << 8))); };
        for (int64_t b = 0; b < n / 256; ++b) {
            const uint8_t* blk = row + b * 144;
            const uint8_t* sc = blk + 4;
            for (int j = 0; j < 8; ++j) {
                const int s = j < 4 ? sc[j] & 63 : (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
                const int m = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
                const float d1 = f16(blk) * static_cast<float>(s), m1 = f16(blk + 2) * static_cast<float>(m);
                for (int i = 0; i < 32; ++i) {
                    const int q = (blk[16 + 32 * (j / 2) + i] >> (4 * (j % 2))) & 15;
                    out[b * 256 + 32 * j + i] = std::fma(d1, static_cast<float>(q), -m1);
                }
            }
        }
    }
    // The reference of T tokens of x (row stride xs) into rows of stride ys, and the
    // per-value bound: 5e-5 · Σ|x|·|w|.
    void reference(const Weight& w, const std::vector<float>& x, int64_t T, int64_t xs, int64_t ys,
                   std::vector<float>& ref, std::vector<float>& bound) {
        const int64_t N = w.w.n_out, K = w.w.n_in;
        std::vector<float> xr = x, xa(x.size()), wa(w.values.size());
        for (auto& v : xr) v = bf16_round(v);
        for (size_t i = 0; i < xr.size(); ++i) xa[i] = std::fabs(xr[i]);
        for (size_t i = 0; i < wa.size(); ++i) wa[i] = std::fabs(w.values[i]);
        const uint64_t rb = static_cast<uint64_t>(K) * sizeof(float);
        ref.assign(static_cast<size_t>(T * ys), 7.0f);
        bound.assign(ref.size(), 0.0f);
        cpu->matmul({{GgmlType::F32, K, N, rb, w.values.data()}, xr.data(), ref.data(), T, xs, ys});
        cpu->matmul({{GgmlType::F32, K, N, rb, wa.data()}, xa.data(), bound.data(), T, xs, ys});
        for (auto& b : bound) b *= 5e-5f;
    }
    // The producer's BF16 rows of x (ops/prepared.h): T rows of K values.
    uint16_t* bf16_rows(const std::vector<float>& x, int64_t T, int64_t K, int64_t xs) {
        std::vector<uint16_t> b(static_cast<size_t>(T * K));
        for (int64_t t = 0; t < T; ++t)
            for (int64_t i = 0; i < K; ++i) b[static_cast<size_t>(t * K + i)] = quant::fp32_to_bf16(x[t * xs + i]);
        return dev(b);
    }
    // matmul of w on x into a fresh y of T × ys values (7 everywhere first; ys 0: rows of
    // n_out, as the op reads a stride of 0).
    std::vector<float> run(const ops::WeightView& w, const float* dx, const void* xb, int64_t T, int64_t xs,
                           int64_t ys) {
        const int64_t rows = ys != 0 ? ys : w.n_out;
        float* dy = dev(std::vector<float>(static_cast<size_t>(T * rows), 7.0f));
        ops::MatmulParams m{w, dx, dy, T, xs, ys};
        m.x_bf16 = xb;
        gpu->matmul(m);
        return host(dy, static_cast<size_t>(T * rows));
    }
    // got against the reference: the bound per value, the relative error overall,
    // the padding columns (N .. ys − 1) untouched.
    void expect_close(const std::vector<float>& got, const std::vector<float>& ref, const std::vector<float>& bound,
                      int64_t T, int64_t N, int64_t ys, const std::string& what) {
        int64_t bad = 0, first = -1;
        bool pad_kept = true;
        std::vector<float> g, r;
        for (int64_t t = 0; t < T; ++t)
            for (int64_t c = 0; c < ys; ++c) {
                const size_t i = static_cast<size_t>(t * ys + c);
                if (c >= N) {
                    pad_kept = pad_kept && got[i] == 7.0f;
                    continue;
                }
                g.push_back(got[i]);
                r.push_back(ref[i]);
                if (!(std::fabs(got[i] - ref[i]) <= bound[i])) {
                    if (first < 0) first = static_cast<int64_t>(i);
                    ++bad;
                }
            }
        EXPECT_EQ(bad, 0) << what << ": first at token " << first / ys << " row " << first % ys << " got "
                          << (first >= 0 ? got[static_cast<size_t>(first)] : 0.0f) << " want "
                          << (first >= 0 ? ref[static_cast<size_t>(first)] : 0.0f);
        EXPECT_LT(rel_err(g, r), 1e-4) << what;
        EXPECT_TRUE(pad_kept) << what << ": wrote outside its output columns";
    }
    // One shape at T tokens: the bound, two runs bit for bit, x_bf16 bit for bit.
    void check_shape(const Weight& w, int64_t T, const std::string& name) {
        const int64_t N = w.w.n_out, K = w.w.n_in, xs = K + 8, ys = N + 3;
        const std::string what = name + " N=" + std::to_string(N) + " K=" + std::to_string(K) + " T=" +
                                 std::to_string(T);
        const auto x = randn(static_cast<size_t>(T * xs));
        std::vector<float> ref, bound;
        reference(w, x, T, xs, ys, ref, bound);
        float* dx = dev(x);
        const auto got = run(w.w, dx, nullptr, T, xs, ys);
        expect_close(got, ref, bound, T, N, ys, what);
        EXPECT_EQ(float_bits(run(w.w, dx, nullptr, T, xs, ys)), float_bits(got)) << what << ": two runs differ";
        EXPECT_EQ(float_bits(run(w.w, dx, bf16_rows(x, T, K, xs), T, xs, ys)), float_bits(got))
            << what << ": with the producer's BF16 rows";
    }
    // matmul_multi of the three weights w (one n_in) on T tokens: each output, bit for
    // bit, what its product gives alone (output strides n_out + i, input stride n_in + 4).
    // ref: the weights each product alone is held to (default w).
    void expect_multi_equals_separate(const ops::WeightView* const (&w)[3], int64_t T, bool with_bf16,
                                      const std::string& what, const ops::WeightView* const* ref = nullptr) {
        if (ref == nullptr) ref = w;
        const int64_t K = w[0]->n_in, xs = K + 4;
        const auto x = randn(static_cast<size_t>(T * xs));
        float* dx = dev(x);
        const void* xb = with_bf16 ? bf16_rows(x, T, K, xs) : nullptr;
        ops::MultiMatmulParams m;
        m.n = 3;
        m.x = dx;
        m.x_stride = xs;
        m.n_tokens = T;
        m.x_bf16 = xb;
        for (int i = 0; i < 3; ++i) {
            m.w[i] = *w[i];
            m.y_stride[i] = w[i]->n_out + i;
            m.y[i] = dev(std::vector<float>(static_cast<size_t>(T * m.y_stride[i]), 7.0f));
        }
        gpu->matmul_multi(m);
        for (int i = 0; i < 3; ++i) {
            const size_t n = static_cast<size_t>(T * m.y_stride[i]);
            EXPECT_EQ(float_bits(host(m.y[i], n)), float_bits(run(*ref[i], dx, xb, T, xs, m.y_stride[i])))
                << what << " product " << i;
        }
    }
    // matmul_multi of a and b (n_in 512) on 20 tokens, unpadded: each output, bit for
    // bit, what its product gives alone (the sanitizer tests' multi-product launch).
    void expect_pair_equals_separate(const ops::WeightView& a, const ops::WeightView& b) {
        const int64_t T = 20, K = 512;
        float* dx = dev(randn(static_cast<size_t>(T * K)));
        ops::MultiMatmulParams m;
        m.n = 2;
        m.x = dx;
        m.n_tokens = T;
        m.w[0] = a;
        m.w[1] = b;
        m.y[0] = gpu->alloc_array<float>(static_cast<size_t>(T * a.n_out));
        m.y[1] = gpu->alloc_array<float>(static_cast<size_t>(T * b.n_out));
        gpu->matmul_multi(m);
        EXPECT_EQ(float_bits(host(m.y[0], static_cast<size_t>(T * a.n_out))), float_bits(run(a, dx, nullptr, T, 0, 0)));
        EXPECT_EQ(float_bits(host(m.y[1], static_cast<size_t>(T * b.n_out))), float_bits(run(b, dx, nullptr, T, 0, 0)));
    }
};

// Row counts around the 128-row tiles (1, 100, 128, 130, 1000, 4168), K of one block,
// two and the model's hidden size (2816), token counts at both tile sizes' edges
// (17, 32, 33, 64), padded input and output strides, with and without x_bf16, and a
// Q5_0 weight of 2112 values (not whole 256-value blocks).
TEST_F(CudaSmallGemm, SmallBatchMatmulMatchesBf16Reference) {
    struct Shape {
        GgmlType type;
        int64_t n_out, n_in;
    };
    const std::vector<Shape> shapes = {
        {GgmlType::Q4_K, 1, 256},     {GgmlType::Q4_K, 100, 512},   {GgmlType::Q4_K, 128, 256},
        {GgmlType::Q4_K, 130, 2816},  {GgmlType::Q4_K, 1000, 2816}, {GgmlType::Q4_K, 4168, 2816},
        {GgmlType::Q6_K, 1, 512},     {GgmlType::Q6_K, 100, 256},   {GgmlType::Q6_K, 128, 2816},
        {GgmlType::Q6_K, 130, 512},   {GgmlType::Q6_K, 1000, 2816}, {GgmlType::Q6_K, 4168, 2816},
        {GgmlType::Q5_0, 130, 2112}};
    for (const Shape& sh : shapes) {
        const Weight w = weight(sh.type, sh.n_out, sh.n_in);
        for (int64_t T : {17, 32, 33, 64}) check_shape(w, T, std::string(ggml_type_name(sh.type)));
    }
}

// Long rows (K = 16,384, written for gemm_small.cu's 32 splits a tile): the same
// bits on a second run.
TEST_F(CudaSmallGemm, SmallBatchMatmulManySplits) {
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K})
        for (int64_t N : {100, 130}) {
            const Weight w = weight(t, N, 16384);
            for (int64_t T : {20, 64}) check_shape(w, T, std::string(ggml_type_name(t)) + " many splits");
        }
}

// matmul_multi of two Q4_K products and a Q6_K one, with and without its planes
// (decode_layout): each output, bit for bit, what the product gives alone, whatever its
// output stride.
TEST_F(CudaSmallGemm, SmallBatchMatmulMultiEqualsSeparateProducts) {
    const int64_t K = 2816;
    const Weight a = weight(GgmlType::Q4_K, 4096, K), b = weight(GgmlType::Q4_K, 1000, K);
    const Weight c = weight(GgmlType::Q6_K, 130, K);
    ops::WeightView c_plain = c.w;
    c_plain.decode_layout = nullptr;
    const ops::WeightView* const thirds[2] = {&c.w, &c_plain};
    for (int64_t T : {17, 33, 64})
        for (bool with_bf16 : {false, true})
            for (const ops::WeightView* third : thirds)
                expect_multi_equals_separate({&a.w, &b.w, third}, T, with_bf16,
                                             "T=" + std::to_string(T) + (with_bf16 ? " x_bf16" : "") +
                                                 (third == &c_plain ? " third without planes" : ""));
}

// Cheap enough for compute-sanitizer (memcheck, racecheck, initcheck): each type, a
// partial 128-row tile, a long row, a matmul_multi.
TEST_F(CudaSmallGemm, SmallBatchMatmulSmallShapes) {
    const Weight a = weight(GgmlType::Q4_K, 130, 512), b = weight(GgmlType::Q6_K, 40, 1024);
    check_shape(a, 17, "Q4_K");
    check_shape(b, 33, "Q6_K");
    const Weight l = weight(GgmlType::Q4_K, 3, 4096);
    check_shape(l, 64, "Q4_K split");
    expect_pair_equals_separate(a.w, weight(GgmlType::Q4_K, 7, 512).w);
}

// Batched decode's dense products from the tile copy of Q4_K weights (gemm_tile.cu,
// ops::Backend::tile_layout) at 17-64 tokens. Its weights are the register decoder's
// (reg_decoded_row: d·sc and dmin·m rounded to BF16, then q·scale − min rounded once),
// so the reference is the CPU product of exactly those values and the BF16-rounded
// activations, held to CudaSmallGemm's bounds (the order of the f32 sums only).
// gpu takes the tile GEMM up to the kernel's 64 tokens (CudaOptions::tile_gemm_max_tokens;
// the default backend's 32 stays in gpu_default).
class CudaTileGemm : public CudaSmallGemm {
protected:
    void SetUp() override {
        CudaSmallGemm::SetUp();
        if (IsSkipped()) return;
        auto tile = tile_gemm_backend();
        if (!tile) GTEST_SKIP() << "built without CUDA";
        gpu_default = std::move(gpu);
        gpu = std::move(tile);
    }
    std::unique_ptr<ops::Backend> gpu_default;
    Weight tile_weight(int64_t N, int64_t K) {
        const auto [wq, row_bytes] = random_quantized(GgmlType::Q4_K, N, K, 0.05f);
        Weight r;
        r.w = {GgmlType::Q4_K, K, N, row_bytes, dev(wq)};
        r.w.tile_layout = gpu->tile_layout(r.w);
        EXPECT_NE(r.w.tile_layout, nullptr) << "N=" << N << " K=" << K;
        r.values.resize(static_cast<size_t>(N * K));
        for (int64_t i = 0; i < N; ++i) {
            const auto v = reg_decoded_row(GgmlType::Q4_K, wq.data() + static_cast<size_t>(i) * row_bytes, K);
            std::copy(v.begin(), v.end(), r.values.begin() + i * K);
        }
        return r;
    }
};

// Rows around the 16-row groups and 128-row tiles (1, 15, 100, 128, 129, 257, 1000,
// 4168), K of one block, two, four and the model's sizes (2,816: 4 splits in a cluster;
// 4,096: 8; 512 and 256: none), token counts at both token tiles' edges (17, 32, 33,
// 64), padded strides, with and without the producer's BF16 rows; each twice, bit for bit.
TEST_F(CudaTileGemm, MatchesItsReference) {
    const std::pair<int64_t, int64_t> shapes[] = {{1, 256},     {15, 512},    {100, 1024},  {128, 256}, {129, 768},
                                                  {257, 2816}, {1000, 2816}, {4168, 2816}, {130, 4096}};
    for (const auto& [N, K] : shapes) {
        const Weight w = tile_weight(N, K);
        for (int64_t T : {17, 32, 33, 64}) check_shape(w, T, "tile");
    }
}

// A long row: 8 splits of 16 chunks (K = 8,192, the full layers' o), the cluster's
// sums over distributed shared memory in split order.
TEST_F(CudaTileGemm, LongRowsInEightSplits) {
    const Weight w = tile_weight(300, 8192);
    for (int64_t T : {20, 64}) check_shape(w, T, "tile, 8 splits");
}

// matmul_multi: three products with the copy in one launch (q, k and v), each output
// bit for bit what the product gives alone, whatever its stride. Where one has no copy
// (a Q6_K v), none takes the tile GEMM: each output is what its product gives alone
// without the copy.
TEST_F(CudaTileGemm, MultiEqualsSeparateProducts) {
    const int64_t K = 2816;
    const Weight a = tile_weight(4096, K), b = tile_weight(1000, K), v = tile_weight(130, K);
    const Weight c = weight(GgmlType::Q6_K, 130, K);
    ops::WeightView a_plain = a.w, b_plain = b.w;
    a_plain.tile_layout = b_plain.tile_layout = nullptr;
    const ops::WeightView* plain[3] = {&a_plain, &b_plain, &c.w};
    for (int64_t T : {17, 64})
        for (bool with_bf16 : {false, true}) {
            const std::string what = "T=" + std::to_string(T) + (with_bf16 ? " x_bf16" : "");
            expect_multi_equals_separate({&a.w, &b.w, &v.w}, T, with_bf16, what);
            expect_multi_equals_separate({&a.w, &b.w, &c.w}, T, with_bf16, what + ", a Q6_K v", plain);
        }
}

// The copy's bytes: its size (rows padded to whole tiles of 128), none for other
// types, and zeros past the last row (padded rows multiply to nothing).
TEST_F(CudaTileGemm, LayoutSizeAndPadding) {
    const Weight w = tile_weight(20, 512);
    // Rows padded to whole tiles (the kernel's block rows: 128 at 8 warps, 256 at 16),
    // groups of 16 units of 320 bytes.
    const uint64_t group_bytes = (512 / 32) * 320, bytes = gpu->tile_layout_bytes(w.w);
    ASSERT_GE(bytes, 8 * group_bytes);
    ASSERT_EQ(bytes % (8 * group_bytes), 0u);
    const auto copy = host(static_cast<const uint8_t*>(w.w.tile_layout), bytes);
    // Groups 2 and later (rows 32 ..) are padding.
    const size_t pad0 = static_cast<size_t>(2 * (512 / 32) * 320);
    EXPECT_TRUE(std::all_of(copy.begin() + static_cast<std::ptrdiff_t>(pad0), copy.end(), [](uint8_t v) { return v == 0; }));
    // Group 1 holds rows 16 .. 19 only: the scale pairs of rows 20 .. 23 (bytes 0-3 at
    // 8g, g = 4 .. 7) and 24 .. 31 (bytes 4-7 at every 8g) are zero, in every unit.
    for (int u = 0; u < 512 / 32; ++u) {
        const uint8_t* unit = copy.data() + (512 / 32 + u) * 320;
        for (int g = 0; g < 8; ++g)
            for (int b = 0; b < 8; ++b)
                if (g >= 4 || b >= 4) {
                    EXPECT_EQ(unit[256 + 8 * g + b], 0) << "unit " << u << ", g " << g << ", b " << b;
                }
    }
    const auto [q6, rb] = random_quantized(GgmlType::Q6_K, 16, 256, 0.05f);
    EXPECT_EQ(gpu->tile_layout({GgmlType::Q6_K, 256, 16, rb, dev(q6)}), nullptr);
}

// Cheap enough for compute-sanitizer (memcheck, racecheck, initcheck): one tile, a
// partial tile, a cluster of 8 splits, a matmul_multi.
TEST_F(CudaTileGemm, SmallShapes) {
    const Weight a = tile_weight(130, 512), l = tile_weight(3, 4096);
    check_shape(a, 17, "tile");
    check_shape(l, 64, "tile, 8 splits");
    expect_pair_equals_separate(a.w, tile_weight(7, 512).w);
}

// The default backend takes the tile GEMM up to 32 tokens (CudaOptions::
// tile_gemm_max_tokens): at 32 its product is the 64-token backend's to the bit; at 33
// it is cuBLAS's on the weights expanded to BF16 (other roundings of the same values:
// close, not the same bits).
TEST_F(CudaTileGemm, DefaultBackendStopsAt32Tokens) {
    const Weight w = tile_weight(256, 512);
    const int64_t K = w.w.n_in, N = w.w.n_out;
    for (int64_t T : {32, 33}) {
        const auto x = randn(static_cast<size_t>(T * K));
        float* dx = dev(x);
        std::vector<float> got[2];
        ops::Backend* be[2] = {gpu.get(), gpu_default.get()};
        for (int i = 0; i < 2; ++i) {
            float* dy = gpu->alloc_array<float>(static_cast<size_t>(T * N));
            be[i]->matmul({w.w, dx, dy, T, K, N});
            be[i]->synchronize();
            got[i] = host(dy, static_cast<size_t>(T * N));
        }
        if (T == 32)
            EXPECT_EQ(float_bits(got[1]), float_bits(got[0])) << "T=32: not the tile GEMM";
        else
            EXPECT_NE(float_bits(got[1]), float_bits(got[0])) << "T=33: the tile GEMM";
        EXPECT_LT(rel_err(got[1], got[0]), 1e-2) << "T=" << T;
    }
}

// gelu_tanh(g) · u as the CPU reference computes it (ops/activation.h).
float host_geglu(float g, float u) {
    const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
    return 0.5f * g * (1.0f + std::tanh(inner)) * u;
}

// The GEGLU epilogue of the grouped product (ops/moe.h: geglu). The register
// kernels fuse it: Q4_K, Q5_0 and Q8_0 (Q8_0 rows of 748 bytes, so every 16-byte
// alignment of a stage), 32- and 128-token tiles, F around the 64-output tile, a
// padded output stride. Q6_K (no register kernel) and device-only offsets (the
// grouped GEMV) run the product into the scratch, then the GEGLU op. Each is held
// to the plain product of the same path, gelu'd on the host: the same f32 sums, so
// only the device's and the host's tanh differ (1e-5), while a gate or up row
// swapped for another or a misplaced output is an O(1) error. The padding columns
// keep their sentinel. Then the prepared output (decode: y_prep) feeds the down
// product bit for bit as the unprepared one does.
TEST_F(CudaOps, GroupedGegluEpilogue) {
    const std::vector<std::vector<int32_t>> scenarios = {
        {0, 1, 31, 32, 33, 65, 0, 5},   // 32-token tiles
        {0, 1, 127, 128, 129, 300, 0},  // 128-token tiles
        {0, 2, 1, 0, 3},                // few rows: device offsets below
    };
    const int64_t T = 50;
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q6_K}) {
        const int64_t H = t == GgmlType::Q4_K || t == GgmlType::Q6_K ? 256 : 704;
        for (int64_t F : {1, 70, 130}) {
            for (size_t sc = 0; sc < scenarios.size(); ++sc) {
                const auto& counts = scenarios[sc];
                const bool device_only = sc == 2;
                const int64_t E = static_cast<int64_t>(counts.size()), ys = F + 3;
                std::vector<int32_t> off(static_cast<size_t>(E + 1), 0);
                for (int64_t e = 0; e < E; ++e) off[static_cast<size_t>(e + 1)] = off[static_cast<size_t>(e)] + counts[static_cast<size_t>(e)];
                const size_t n = static_cast<size_t>(off.back()), f = static_cast<size_t>(F);
                std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(T - 1));
                std::vector<int32_t> rows(n);
                for (auto& r : rows) r = tok(rng);
                const auto [wq, row_bytes] = random_quantized(t, E * 2 * F, H, 0.05f);

                ops::MoeMatmulParams m;
                m.w = {t, H, 2 * F, row_bytes, dev(wq)};
                m.expert_bytes = row_bytes * static_cast<uint64_t>(2 * F);
                m.n_experts = E;
                m.offsets = dev(off);
                m.host_offsets = device_only ? nullptr : off.data();
                m.x_rows = dev(rows);
                m.x_n_rows = T;
                m.x = dev(randn(static_cast<size_t>(T * H)));
                m.n_rows = static_cast<int64_t>(n);
                m.y = gpu->alloc_array<float>(n * 2 * f);
                gpu->moe_matmul(m);
                const auto prod = host(m.y, n * 2 * f);
                std::vector<float> ref(n * f);
                for (size_t r = 0; r < n; ++r)
                    for (size_t j = 0; j < f; ++j) ref[r * f + j] = host_geglu(prod[r * 2 * f + j], prod[r * 2 * f + f + j]);

                m.geglu = true;
                m.geglu_scratch = gpu->alloc_array<float>(n * 2 * f);
                bool pad_kept = false;
                const std::vector<float> got = moe_matmul_padded(m, n, F, ys, pad_kept);
                const std::string what = std::string(ggml_type_name(t)) + " F=" + std::to_string(F) +
                                         " rows=" + std::to_string(n) + (device_only ? " device offsets" : "");
                EXPECT_LT(rel_err(got, ref), 1e-5) << what;
                EXPECT_TRUE(pad_kept) << what << ": wrote outside its output columns";
            }
        }
    }

    // Decode: device offsets, a prepared output, then the down product with and
    // without it (the prepared contract: the same bits).
    const int64_t E = 8, K = 4, H = 256, F = 64;
    for (int64_t T2 : {1, 3}) {
        const auto ids = random_routing(rng, T2, K, E);
        const size_t n = ids.size();
        std::vector<int32_t> off(E + 1), rows(n), slot(n);
        cpu->moe_group({ids.data(), T2, K, E, off.data(), rows.data(), slot.data()});
        const auto [wq, row_bytes] = random_quantized(GgmlType::Q4_K, E * 2 * F, H, 0.05f);
        const auto [wd, wd_bytes] = random_quantized(GgmlType::Q5_0, E * H, F, 0.05f);
        ops::MoeMatmulParams m;
        m.w = {GgmlType::Q4_K, H, 2 * F, row_bytes, dev(wq)};
        m.expert_bytes = row_bytes * static_cast<uint64_t>(2 * F);
        m.n_experts = E;
        m.offsets = dev(off);
        m.x_rows = dev(rows);
        m.x = dev(randn(static_cast<size_t>(T2 * H)));
        m.n_rows = static_cast<int64_t>(n);
        m.geglu = true;
        m.geglu_scratch = gpu->alloc_array<float>(n * 2 * F);
        m.y = gpu->alloc_array<float>(n * F);
        m.y_prep = gpu->alloc(gpu->prepared_bytes(static_cast<int64_t>(n), F));
        gpu->moe_matmul(m);
        ops::MoeMatmulParams d;
        d.w = {GgmlType::Q5_0, F, H, wd_bytes, dev(wd)};
        d.expert_bytes = wd_bytes * static_cast<uint64_t>(H);
        d.n_experts = E;
        d.offsets = m.offsets;
        d.x = m.y;
        d.n_rows = m.n_rows;
        float *y0 = gpu->alloc_array<float>(n * H), *y1 = gpu->alloc_array<float>(n * H);
        d.y = y0;
        gpu->moe_matmul(d);
        d.y = y1;
        d.x_prep = m.y_prep;
        gpu->moe_matmul(d);
        EXPECT_EQ(host(y0, n * H), host(y1, n * H)) << "T=" << T2;
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


// moe_route_group: one fused kernel up to 32 tokens and 512 pairs, the two ops above.
// Against the CPU's moe_route + moe_group: ids, offsets, rows and slot_of exact, the
// weights to the softmax's summation order (the CPU sums in expert order, the device
// over lanes); and bit-equal to the device's own moe_route + moe_group. Logits on a
// 1/64 grid (distinct values stay distinct probabilities, so both backends rank alike;
// some equal), or from 3 values (mostly ties: lower expert first).
TEST_F(CudaOps, MoeRouteGroupMatchesSeparateOps) {
    const int64_t max_t = 200, max_e = 256, max_k = 8, max_n = max_t * max_k;
    // Outputs start as a sentinel (-7), so a value the kernel never writes shows.
    const auto reset = [&](auto* d, size_t n) {
        gpu->upload(d, std::vector<std::remove_pointer_t<decltype(d)>>(n, -7).data(), n * sizeof(*d));
    };
    int32_t *dids = gpu->alloc_array<int32_t>(max_n), *dids2 = gpu->alloc_array<int32_t>(max_n);
    float *dw = gpu->alloc_array<float>(max_n), *dw2 = gpu->alloc_array<float>(max_n);
    int32_t *doff = gpu->alloc_array<int32_t>(max_e + 1), *doff2 = gpu->alloc_array<int32_t>(max_e + 1);
    int32_t *drows = gpu->alloc_array<int32_t>(max_n), *drows2 = gpu->alloc_array<int32_t>(max_n);
    int32_t *dslot = gpu->alloc_array<int32_t>(max_n), *dslot2 = gpu->alloc_array<int32_t>(max_n);
    float* dlogits = gpu->alloc_array<float>(max_t * max_e);
    float* dscale = gpu->alloc_array<float>(max_e);
    for (int64_t T : {0, 1, 2, 7, 32, 33, 64, 200})
        for (int64_t E : {8, 128, 256})
            for (int64_t K : {1, 2, 8})
                for (bool scaled : {false, true})
                    for (bool ties : {false, true}) {
                        const std::string what = "T=" + std::to_string(T) + " E=" + std::to_string(E) + " K=" +
                                                 std::to_string(K) + (scaled ? " scaled" : "") +
                                                 (ties ? " ties" : "");
                        const size_t n = static_cast<size_t>(T * K), ne = static_cast<size_t>(E);
                        std::uniform_int_distribution<int> grid(ties ? 0 : -384, ties ? 2 : 384);
                        std::vector<float> logits(static_cast<size_t>(T * E));
                        for (auto& x : logits) x = static_cast<float>(grid(rng)) * (ties ? 0.5f : 1.0f / 64);
                        const auto scale = randn(ne);

                        std::vector<int32_t> ids(n), off(ne + 1), rows(n), slot(n);
                        std::vector<float> w(n);
                        cpu->moe_route({logits.data(), scaled ? scale.data() : nullptr, ids.data(), w.data(), T, E, K});
                        cpu->moe_group({ids.data(), T, K, E, off.data(), rows.data(), slot.data()});

                        gpu->upload(dlogits, logits.data(), logits.size() * sizeof(float));
                        gpu->upload(dscale, scale.data(), ne * sizeof(float));
                        for (int32_t* d : {dids, dids2, drows, drows2, dslot, dslot2}) reset(d, n);
                        for (float* d : {dw, dw2}) reset(d, n);
                        for (int32_t* d : {doff, doff2}) reset(d, ne + 1);
                        const ops::MoeRouteParams r{dlogits, scaled ? dscale : nullptr, dids, dw, T, E, K};
                        gpu->moe_route_group(r, {dids, T, K, E, doff, drows, dslot});
                        ops::MoeRouteParams r2 = r;
                        r2.ids = dids2;
                        r2.weights = dw2;
                        gpu->moe_route(r2);
                        gpu->moe_group({dids2, T, K, E, doff2, drows2, dslot2});

                        EXPECT_EQ(host(doff, ne + 1), off) << what;
                        EXPECT_EQ(host(doff2, ne + 1), off) << what;
                        if (n == 0) continue;
                        const auto got_w = host(dw, n);
                        EXPECT_EQ(host(dids, n), ids) << what;
                        EXPECT_LT(rel_err(got_w, w), 1e-6) << what;
                        EXPECT_EQ(host(drows, n), rows) << what;
                        EXPECT_EQ(host(dslot, n), slot) << what;
                        EXPECT_EQ(host(dids2, n), ids) << what;
                        EXPECT_EQ(float_bits(got_w), float_bits(host(dw2, n))) << what;
                        EXPECT_EQ(host(drows2, n), rows) << what;
                        EXPECT_EQ(host(dslot2, n), slot) << what;
                    }
}

// Logits of which fewer than k are finite (the rest -inf) route like the CPU's
// (the finite ones by value, then the -inf ones by index, weight 0), on the routing
// kernel and on the fused kernels; NaN logits take the experts in index order as on the CPU.
// E = 8 leaves lanes without experts, whose sentinel an -inf logit must beat.
TEST_F(CudaOps, MoeRouteNonFiniteLogits) {
    const int64_t K = 8;
    for (int64_t E : {8, 128})
    for (int64_t T : {1, 3}) {
        const size_t n = static_cast<size_t>(T * K), ne = static_cast<size_t>(E);
        std::vector<float> logits(static_cast<size_t>(T) * ne, -INFINITY);
        for (int64_t t = 0; t < T; ++t)
            for (int64_t e : {5, 77, 100})
                if (e < E) logits[static_cast<size_t>(t * E + e)] = static_cast<float>(e) * 0.01f;
        std::vector<int32_t> ids(n), off(ne + 1), rows(n), slot(n);
        std::vector<float> w(n);
        cpu->moe_route({logits.data(), nullptr, ids.data(), w.data(), T, E, K});
        int32_t *dids = gpu->alloc_array<int32_t>(n), *doff = gpu->alloc_array<int32_t>(ne + 1);
        int32_t *drows = gpu->alloc_array<int32_t>(n), *dslot = gpu->alloc_array<int32_t>(n);
        float* dw = gpu->alloc_array<float>(n);
        const ops::MoeRouteParams r{dev(logits), nullptr, dids, dw, T, E, K};
        gpu->moe_route(r);
        EXPECT_EQ(host(dids, n), ids) << "E=" << E << " T=" << T;
        EXPECT_LT(rel_err(host(dw, n), w), 1e-6) << "E=" << E << " T=" << T;
        gpu->moe_route_group(r, {dids, T, K, E, doff, drows, dslot});
        EXPECT_EQ(host(dids, n), ids) << "E=" << E << " T=" << T << " fused";
        // NaN logits (one, or all): every probability is NaN and the CPU takes the
        // experts in index order; the device must agree, never select a non-expert.
        for (bool all_nan : {false, true}) {
            std::vector<float> nan_logits = logits;
            for (size_t i = 0; i < nan_logits.size(); ++i)
                if (all_nan || i % ne == 1) nan_logits[i] = NAN;
            cpu->moe_route({nan_logits.data(), nullptr, ids.data(), w.data(), T, E, K});
            const ops::MoeRouteParams rn{dev(nan_logits), nullptr, dids, dw, T, E, K};
            gpu->moe_route(rn);
            EXPECT_EQ(host(dids, n), ids) << "E=" << E << " T=" << T << " NaN logits, all " << all_nan;
            gpu->moe_route_group(rn, {dids, T, K, E, doff, drows, dslot});
            EXPECT_EQ(host(dids, n), ids) << "E=" << E << " T=" << T << " NaN logits, all " << all_nan << ", fused";
            EXPECT_EQ(host(doff, ne + 1)[ne], static_cast<int32_t>(n));
        }
    }
}

namespace {

// The outputs of one moe_route_group call (device buffers of the largest case) and
// their host copies.
struct RouteGroupOut {
    std::vector<float> logits, weights;
    std::vector<int32_t> ids, offsets, rows, slot_of;
};

}  // namespace

// moe_route_group with the router product (ops/moe.h): fused into one kernel up to 4
// tokens and 128 pairs for an F32 router with n_in % 4 == 0 and 16-byte aligned rows,
// and from 17 to 32 tokens where there are 128 experts and n_in % 256 == 0 (the
// clusters' kernel, in the default precision), otherwise the router matmul then the
// routing ops; both precisions. Inputs and
// weights on a 1/8 grid of small integers, so every product and partial sum is exact
// in f32 (and in BF16): the logits equal the CPU's bit for bit whatever the summation
// order, lie on a 1/64 grid (distinct values rank alike on both backends, equal ones
// take the lower expert), and everything is compared with the CPU's matmul,
// moe_route and moe_group as MoeRouteGroupMatchesSeparateOps does. Outputs start as a
// sentinel (-7).
TEST_F(CudaOps, MoeRouterRouteGroupMatchesCpu) {
    const int64_t max_t = 64, max_e = 256, max_k = 8, max_in = 4160, max_n = max_t * max_k;
    const int64_t max_xs = max_in + 8;
    std::uniform_int_distribution<int> grid(-4, 4);
    const auto on_grid = [&](size_t n) {
        std::vector<float> v(n);
        for (auto& x : v) x = static_cast<float>(grid(rng)) * 0.125f;
        return v;
    };
    int case_no = 0;
    for (ops::Backend* be : {gpu.get(), gpu32.get()}) {
        // Each backend's own buffers: its ops run on its own stream.
        const auto up = [&](auto* d, const auto& v) { be->upload(d, v.data(), v.size() * sizeof(v[0])); };
        const auto down = [&](const auto* d, size_t n) {
            std::vector<std::remove_const_t<std::remove_pointer_t<decltype(d)>>> v(n);
            be->download(v.data(), d, n * sizeof(v[0]));
            return v;
        };
        float* dx = be->alloc_array<float>(max_t * max_xs + 1);
        float* dwt = be->alloc_array<float>(max_e * max_in);
        float* dscale = be->alloc_array<float>(max_e);
        float* dlogits = be->alloc_array<float>(max_t * max_e);
        int32_t* dids = be->alloc_array<int32_t>(max_n);
        float* dw = be->alloc_array<float>(max_n);
        int32_t* doff = be->alloc_array<int32_t>(max_e + 1);
        int32_t* drows = be->alloc_array<int32_t>(max_n);
        int32_t* dslot = be->alloc_array<int32_t>(max_n);
        for (int64_t n_in : {64, 2816, 4160, 66})  // 4160: rows past the registers' 3,072 values
            for (int64_t T : {0, 1, 2, 4, 5, 16, 17, 32, 33, 64})
                for (int64_t E : {8, 128, 256})
                    for (int64_t K : {1, 2, 8}) {
                        // Layouts of x: dense; strided (aligned, still fused); one float
                        // past an aligned address (not 16-byte aligned: unfused).
                        const int layout = case_no % 3;
                        const bool scaled = case_no % 2 == 1;
                        ++case_no;
                        const int64_t xs = layout == 1 ? n_in + 8 : n_in, x_off = layout == 2 ? 1 : 0;
                        const std::string what = std::string(be == gpu.get() ? "bf16" : "f32") +
                                                 " n_in=" + std::to_string(n_in) + " T=" + std::to_string(T) +
                                                 " E=" + std::to_string(E) + " K=" + std::to_string(K) +
                                                 " layout=" + std::to_string(layout) + (scaled ? " scaled" : "");
                        const size_t n = static_cast<size_t>(T * K), ne = static_cast<size_t>(E);
                        const size_t nl = static_cast<size_t>(T * E);
                        const auto x = on_grid(static_cast<size_t>(T * xs));
                        const auto wt = on_grid(static_cast<size_t>(E * n_in));
                        const auto scale = randn(ne);
                        const ops::WeightView hw{GgmlType::F32, n_in, E, static_cast<uint64_t>(n_in) * 4, wt.data()};

                        RouteGroupOut ref{std::vector<float>(nl),         std::vector<float>(n),
                                          std::vector<int32_t>(n),        std::vector<int32_t>(ne + 1),
                                          std::vector<int32_t>(n),        std::vector<int32_t>(n)};
                        ops::MatmulParams m;
                        m.w = hw;
                        m.x = x.data();
                        m.x_stride = xs;
                        m.y = ref.logits.data();
                        m.n_tokens = T;
                        cpu->matmul(m);
                        cpu->moe_route({ref.logits.data(), scaled ? scale.data() : nullptr, ref.ids.data(),
                                        ref.weights.data(), T, E, K});
                        cpu->moe_group({ref.ids.data(), T, K, E, ref.offsets.data(), ref.rows.data(),
                                        ref.slot_of.data()});

                        up(dx + x_off, x);
                        up(dwt, wt);
                        up(dscale, scale);
                        up(dlogits, std::vector<float>(nl, -7.0f));
                        up(dw, std::vector<float>(n, -7.0f));
                        for (int32_t* d : {dids, drows, dslot}) up(d, std::vector<int32_t>(n, -7));
                        up(doff, std::vector<int32_t>(ne + 1, -7));
                        ops::MoeRouteParams r{dlogits, scaled ? dscale : nullptr, dids, dw, T, E, K};
                        r.router_x = dx + x_off;
                        r.router_x_stride = xs;
                        r.router_w = hw;
                        r.router_w.data = dwt;
                        be->moe_route_group(r, {dids, T, K, E, doff, drows, dslot});

                        EXPECT_EQ(down(doff, ne + 1), ref.offsets) << what;
                        if (T == 0) continue;
                        EXPECT_EQ(float_bits(down(dlogits, nl)), float_bits(ref.logits)) << what;
                        EXPECT_EQ(down(dids, n), ref.ids) << what;
                        EXPECT_LT(rel_err(down(dw, n), ref.weights), 1e-6) << what;
                        EXPECT_EQ(down(drows, n), ref.rows) << what;
                        EXPECT_EQ(down(dslot, n), ref.slot_of) << what;
                    }
    }
}

// The fused router kernels on random data (decode and batched decode shapes of the
// 26B-A4B router: 128 experts of 2816 values, top-8; 1 and 4 tokens the small kernel,
// 17 and 32 the clusters'): logits within 1e-5 of the row's largest CPU logit,
// and the routing bit-equal to the device's own moe_route + moe_group over those
// logits. Its block counter must return to zero after every launch: the op runs
// twice in a row, once on the side chain (its own counter), and inside a graph
// captured once and replayed three times with new inputs; every run starts from
// sentinel outputs and must give the eager result bit for bit.
TEST_F(CudaOps, MoeRouterRouteGroupReplays) {
    const int64_t E = 128, K = 8, n_in = 2816;
    for (int64_t T : {1, 4, 17, 32}) {
        const size_t n = static_cast<size_t>(T * K), ne = static_cast<size_t>(E), nl = static_cast<size_t>(T * E);
        const auto wt = randn(static_cast<size_t>(E * n_in), 0.02f);
        const auto scale = randn(ne);
        float* dx = gpu->alloc_array<float>(static_cast<size_t>(T * n_in));
        float* dlogits = gpu->alloc_array<float>(nl);
        int32_t* dids = gpu->alloc_array<int32_t>(n);
        float* dw = gpu->alloc_array<float>(n);
        int32_t* doff = gpu->alloc_array<int32_t>(ne + 1);
        int32_t* drows = gpu->alloc_array<int32_t>(n);
        int32_t* dslot = gpu->alloc_array<int32_t>(n);
        ops::MoeRouteParams r{dlogits, dev(scale), dids, dw, T, E, K};
        r.router_x = dx;
        r.router_w = {GgmlType::F32, n_in, E, static_cast<uint64_t>(n_in) * 4, dev(wt)};
        const ops::MoeGroupParams g{dids, T, K, E, doff, drows, dslot};
        const auto reset = [&] {
            gpu->upload(dlogits, std::vector<float>(nl, -7.0f).data(), nl * sizeof(float));
            gpu->upload(dw, std::vector<float>(n, -7.0f).data(), n * sizeof(float));
            for (int32_t* d : {dids, drows, dslot}) gpu->upload(d, std::vector<int32_t>(n, -7).data(), n * 4);
            gpu->upload(doff, std::vector<int32_t>(ne + 1, -7).data(), (ne + 1) * 4);
        };
        const auto outputs = [&] {
            return RouteGroupOut{host(dlogits, nl), host(dw, n),    host(dids, n),
                                 host(doff, ne + 1), host(drows, n), host(dslot, n)};
        };
        const auto same = [&](const RouteGroupOut& a, const RouteGroupOut& b, const std::string& what) {
            EXPECT_EQ(float_bits(a.logits), float_bits(b.logits)) << what;
            EXPECT_EQ(float_bits(a.weights), float_bits(b.weights)) << what;
            EXPECT_EQ(a.ids, b.ids) << what;
            EXPECT_EQ(a.offsets, b.offsets) << what;
            EXPECT_EQ(a.rows, b.rows) << what;
            EXPECT_EQ(a.slot_of, b.slot_of) << what;
        };
        // The eager fused op on x, checked against the CPU's logits and the device's
        // separate routing ops over the same logits.
        const auto eager = [&](const std::vector<float>& x, const std::string& what) {
            gpu->upload(dx, x.data(), x.size() * sizeof(float));
            reset();
            gpu->moe_route_group(r, g);
            RouteGroupOut got = outputs();
            std::vector<float> ref(nl);
            ops::MatmulParams m;
            m.w = r.router_w;
            m.w.data = wt.data();
            m.x = x.data();
            m.y = ref.data();
            m.n_tokens = T;
            cpu->matmul(m);
            for (size_t t = 0; t < static_cast<size_t>(T); ++t) {
                double err = 0, mag = 0;
                for (size_t e = 0; e < ne; ++e) {
                    err = std::max(err, std::abs(static_cast<double>(got.logits[t * ne + e]) - ref[t * ne + e]));
                    mag = std::max(mag, std::abs(static_cast<double>(ref[t * ne + e])));
                }
                EXPECT_LE(err, 1e-5 * mag) << what << " token " << t;
            }
            reset();
            gpu->upload(dlogits, got.logits.data(), nl * sizeof(float));
            ops::MoeRouteParams rr = ops::routing_of(r);
            gpu->moe_route(rr);
            gpu->moe_group(g);
            RouteGroupOut sep = outputs();
            same(got, sep, what + " vs moe_route + moe_group");
            EXPECT_EQ(got.offsets[ne], static_cast<int32_t>(n)) << what;
            return got;
        };
        const std::string tn = "T=" + std::to_string(T);
        const auto x0 = randn(static_cast<size_t>(T * n_in));
        const RouteGroupOut first = eager(x0, tn + " first");
        same(eager(x0, tn + " second"), first, tn + " second call");

        gpu->upload(dx, x0.data(), x0.size() * sizeof(float));
        reset();
        gpu->begin_side();
        gpu->moe_route_group(r, g);
        gpu->end_side();
        gpu->join_side();
        same(outputs(), first, tn + " side chain");

        auto graph = gpu->capture([&] { gpu->moe_route_group(r, g); });
        ASSERT_NE(graph, nullptr);
        for (int rep = 0; rep < 3; ++rep) {
            const auto x = randn(static_cast<size_t>(T * n_in));
            const RouteGroupOut want = eager(x, tn + " replay " + std::to_string(rep) + " eager");
            gpu->upload(dx, x.data(), x.size() * sizeof(float));
            reset();
            graph->launch();
            same(outputs(), want, tn + " replay " + std::to_string(rep));
        }
    }
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

namespace {

// Seconds per call of f (after one warm-up call), timed over `reps` calls.
template <class F>
double time_calls(ops::Backend& be, int reps, F&& f) {
    f();
    be.synchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    be.synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

}  // namespace

// Throughput of the matmul paths on 26B-A4B shapes, with the BF16 batch copies the
// model makes by default (run with --gtest_also_run_disabled_tests; figures in
// docs/performance.md). GB/s counts the block format's bytes.
TEST_F(CudaOps, DISABLED_MatmulThroughput) {
    // The tile GEMM at every token count it takes (the default backend's stops at 32).
    const std::unique_ptr<ops::Backend> tile_gpu = tile_gemm_backend();
    struct Shape {
        const char* name;
        GgmlType type;
        int64_t n_in, n_out;
    };
    const Shape shapes[] = {{"attn_q 2816->4096 q4_k", GgmlType::Q4_K, 2816, 4096},
                            {"attn_k 2816->2048 q4_k", GgmlType::Q4_K, 2816, 2048},
                            {"attn_o 4096->2816 q4_k", GgmlType::Q4_K, 4096, 2816},
                            {"full attn_q 2816->8192 q4_k", GgmlType::Q4_K, 2816, 8192},
                            {"ffn_down 2112->2816 q8_0", GgmlType::Q8_0, 2112, 2816},
                            {"lm_head 2816->262144 q6_k", GgmlType::Q6_K, 2816, 262144},
                            {"ffn_up 2816->2112 q4_k", GgmlType::Q4_K, 2816, 2112},
                            {"moe down 2112->2816 q5_0", GgmlType::Q5_0, 2112, 2816}};
    for (const Shape& sh : shapes) {
        const uint64_t row_bytes = *ggml_row_size(sh.type, static_cast<uint64_t>(sh.n_in));
        std::vector<uint8_t> wq(row_bytes * static_cast<size_t>(sh.n_out));
        std::vector<float> wf(static_cast<size_t>(sh.n_in));
        std::vector<uint8_t> row(row_bytes);
        for (int64_t r = 0; r < std::min<int64_t>(sh.n_out, 64); ++r) {  // 64 distinct rows, repeated
            wf = randn(wf.size(), 0.05f);
            quant::quantize(sh.type, wf.data(), row.data(), 1, sh.n_in, nullptr);
            for (int64_t o = r; o < sh.n_out; o += 64) std::copy(row.begin(), row.end(), wq.begin() + o * row_bytes);
        }
        ops::WeightView w{sh.type, sh.n_in, sh.n_out, row_bytes, dev(wq)};
        ops::WeightView w32 = w;
        w.batch_layout = gpu->batch_layout(w);  // as the model loads it (batch copies `auto`)
        w.decode_layout = gpu->decode_layout(w);  // and its decode layout (the LM head's Q6_K planes)
        w32.data = gpu32->alloc(wq.size());
        gpu32->upload(const_cast<void*>(w32.data), wq.data(), wq.size());
        // The BF16 copy as a weight of its own: cuBLAS as the copy path runs it, beside
        // the block formats' path (cuBLAS on the rows expanded per call) at 17-64.
        const ops::WeightView copy{GgmlType::BF16, sh.n_in, sh.n_out, 2 * static_cast<uint64_t>(sh.n_in),
                                   w.batch_layout};
        ops::WeightView tiled = w;  // the tile copy (Q4_K), which the model makes with HF2Q_TILE_COPY
        tiled.tile_layout = tile_gpu ? gpu->tile_layout(w) : nullptr;
        for (int64_t T : {1, 8, 17, 32, 64, 128, 512, 4096}) {
            float* x = dev(randn(static_cast<size_t>(T * sh.n_in)));
            float* y = gpu->alloc_array<float>(static_cast<size_t>(T * sh.n_out));
            const double s = time_calls(*gpu, T >= 512 ? 5 : 50, [&] { gpu->matmul({w, x, y, T, 0, 0}); });
            std::printf("[ perf ] %-28s T=%5ld %9.1f us %8.1f GB/s (weights) %8.1f TFLOP/s\n", sh.name,
                        static_cast<long>(T), s * 1e6, static_cast<double>(wq.size()) / s / 1e9,
                        2.0 * static_cast<double>(T * sh.n_in * sh.n_out) / s / 1e12);
            if (T > 16 && T <= 64 && copy.data != nullptr) {
                const double sc = time_calls(*gpu, 50, [&] { gpu->matmul({copy, x, y, T, 0, 0}); });
                std::printf("[ perf ] %-28s T=%5ld %9.1f us %8.1f GB/s (the BF16 copy, cuBLAS)\n", sh.name,
                            static_cast<long>(T), sc * 1e6, 2.0 * static_cast<double>(sh.n_in * sh.n_out) / sc / 1e9);
            }
            if (T > 16 && T <= 64 && tiled.tile_layout != nullptr) {
                const double st = time_calls(*tile_gpu, 50, [&] { tile_gpu->matmul({tiled, x, y, T, 0, 0}); });
                std::printf("[ perf ] %-28s T=%5ld %9.1f us %8.1f GB/s (the tile copy, gemm_tile.cu)\n", sh.name,
                            static_cast<long>(T), st * 1e6, static_cast<double>(gpu->tile_layout_bytes(w)) / st / 1e9);
            }
            if (T <= 8) {  // the f32 GEMV of the reference precision, for comparison
                float* x32 = gpu32->alloc_array<float>(static_cast<size_t>(T * sh.n_in));
                float* y32 = gpu32->alloc_array<float>(static_cast<size_t>(T * sh.n_out));
                const double s32 = time_calls(*gpu32, 20, [&] { gpu32->matmul({w32, x32, y32, T, 0, 0}); });
                std::printf("[ perf ] %-28s T=%5ld %9.1f us %8.1f GB/s (f32 GEMV)\n", sh.name, static_cast<long>(T),
                            s32 * 1e6, static_cast<double>(wq.size()) / s32 / 1e9);
            }
        }
    }
}

// The routed experts of one 26B-A4B layer: 128 experts, top-8, gate_up 2816->1408
// Q4_K and down 704->2816 Q5_0, at decode and prefill batch sizes, sized on the
// device only (batched decode: the grouped GEMV up to HF2Q_MOE_TILE_MIN_ROWS routed
// rows, the tile GEMM from there) and with host offsets (prefill: the tile GEMM).
TEST_F(CudaOps, DISABLED_MoeThroughput) {
    const int64_t E = 128, K = 8;
    struct Shape {
        const char* name;
        GgmlType type;
        int64_t n_in, n_out;
        bool scaled = false;  // from the expert copy (ops::Backend::expert_layout; GB/s: of the blocks)
    };
    for (const Shape& sh : {Shape{"gate_up", GgmlType::Q4_K, 2816, 1408}, Shape{"geglu", GgmlType::Q4_K, 2816, 1408},
                            Shape{"gate_up/s", GgmlType::Q4_K, 2816, 1408, true},
                            Shape{"geglu/s", GgmlType::Q4_K, 2816, 1408, true},
                            Shape{"down", GgmlType::Q5_0, 704, 2816},
                            Shape{"down/s", GgmlType::Q5_0, 704, 2816, true},
                            Shape{"down8", GgmlType::Q8_0, 704, 2816}}) {
        const bool glu = std::string(sh.name).rfind("geglu", 0) == 0;  // gate_up with the GEGLU epilogue
        const int64_t H = sh.n_in, F2 = sh.n_out;
        const uint64_t row_bytes = *ggml_row_size(sh.type, static_cast<uint64_t>(H));
        std::vector<uint8_t> wq(row_bytes * static_cast<size_t>(E * F2));
        {
            std::vector<uint8_t> row(row_bytes);
            for (int r = 0; r < 64; ++r) {
                auto wf = randn(static_cast<size_t>(H), 0.05f);
                quant::quantize(sh.type, wf.data(), row.data(), 1, H, nullptr);
                for (int64_t o = r; o < E * F2; o += 64) std::copy(row.begin(), row.end(), wq.begin() + o * row_bytes);
            }
        }
        const void* dw = dev(wq);
        const void* layout =
            sh.scaled ? gpu->expert_layout({sh.type, H, F2, row_bytes, dw}, row_bytes * F2, E) : nullptr;
        if (sh.scaled && sh.type == GgmlType::Q5_0 && !HF2Q_GEMV_MMA_Q50_LANES) continue;  // no copy in this build
        if (sh.scaled) {
            EXPECT_NE(layout, nullptr) << sh.name;
        }
        for (int64_t T : {1, 8, 64, 512, 4096}) {
            // The same routing for every shape at a token count, so their rows compare.
            std::mt19937 route_rng(static_cast<uint32_t>(T));
            const auto ids = random_routing(route_rng, T, K, E);
            const size_t n = ids.size();
            std::vector<int32_t> off(E + 1), rows(n), slot(n);
            cpu->moe_group({ids.data(), T, K, E, off.data(), rows.data(), slot.data()});
            int32_t *doff = gpu->alloc_array<int32_t>(E + 1), *drows = gpu->alloc_array<int32_t>(n),
                    *dslot = gpu->alloc_array<int32_t>(n);
            int32_t* dids = dev(ids);
            const double sg = time_calls(*gpu, 20, [&] { gpu->moe_group({dids, T, K, E, doff, drows, dslot}); });
            ops::MoeMatmulParams m;
            m.w = {sh.type, H, F2, row_bytes, dw};
            m.expert_bytes = row_bytes * F2;
            m.w.expert_layout = layout;
            m.n_experts = E;
            m.offsets = doff;
            m.x_rows = drows;
            m.x_n_rows = sh.n_in == 2816 ? T : 0;  // as the model passes them (gate_up gathers)
            m.x = dev(randn(static_cast<size_t>(T * H)));
            m.y = gpu->alloc_array<float>(n * F2);
            m.n_rows = static_cast<int64_t>(n);
            m.geglu = glu;
            if (glu) m.geglu_scratch = gpu->alloc_array<float>(n * F2);
            int64_t active = 0;
            for (int64_t e = 0; e < E; ++e) active += off[e + 1] > off[e];
            const double bytes = static_cast<double>(active) * static_cast<double>(row_bytes * F2);
            const double flops = 2.0 * static_cast<double>(n) * H * F2;
            for (bool with_host : {false, true}) {
                if (!with_host && T > 512) continue;
                m.host_offsets = with_host ? off.data() : nullptr;
                const double s = time_calls(*gpu, 5, [&] { gpu->moe_matmul(m); });
                std::printf("[ perf ] moe %-9s T=%5ld %-12s %9.1f us %8.1f GB/s %8.1f TFLOP/s (group %.1f us)\n",
                            sh.name, static_cast<long>(T), with_host ? "host offsets" : "device only", s * 1e6,
                            bytes / s / 1e9, flops / s / 1e12, sg * 1e6);
            }
        }
    }
}

namespace {

// A Q6_K matmul of one token, plain and through the backend's decode layout of the
// same weights (ops::Backend::decode_layout): both results, and seconds per call
// when timed.
struct DecodeLayoutRun {
    std::vector<float> plain, planes;
    double plain_s = 0.0, planes_s = 0.0;
};

}  // namespace

class CudaDecodeLayout : public CudaOps {
protected:
    DecodeLayoutRun run(int64_t K, int64_t N, int64_t T, const std::vector<uint8_t>& wq, uint64_t row_bytes,
                        int reps) {
        const ops::WeightView w{GgmlType::Q6_K, K, N, row_bytes, dev(wq)};
        ops::WeightView wl = w;
        wl.decode_layout = gpu->decode_layout(w);
        EXPECT_NE(wl.decode_layout, nullptr) << "K=" << K;
        float* x = dev(randn(static_cast<size_t>(K * T)));
        float* y0 = gpu->alloc_array<float>(static_cast<size_t>(N * T));
        float* y1 = gpu->alloc_array<float>(static_cast<size_t>(N * T));
        auto plain = [&] { gpu->matmul({w, x, y0, T, 0, 0}); };
        auto planes = [&] { gpu->matmul({wl, x, y1, T, 0, 0}); };
        DecodeLayoutRun r;
        plain();
        planes();
        if (reps > 0) {
            auto time = [&](auto&& f) {
                gpu->synchronize();
                const auto t0 = std::chrono::steady_clock::now();
                for (int i = 0; i < reps; ++i) f();
                gpu->synchronize();
                return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
            };
            r.plain_s = time(plain);
            r.planes_s = time(planes);
        }
        r.plain = host(y0, static_cast<size_t>(N * T));
        r.planes = host(y1, static_cast<size_t>(N * T));
        return r;
    }
};

// The planes GEMV decodes the same units into the same sums: bit for bit the plain
// kernel's output (one block and the 26B-A4B's width: activations in registers; the
// 31B's width and a long row: the one-row kernel; an odd row count), for one token
// (the planes) and for three (the layout ignored).
TEST_F(CudaDecodeLayout, Q6kPlanesGiveTheSameBits) {
    for (int64_t K : {256, 2816, 5376, 16640})
        for (int64_t T : {1, 3}) {
            const int64_t N = 67;
            const auto [wq, row_bytes] = random_quantized(GgmlType::Q6_K, N, K, 0.05f);
            const DecodeLayoutRun r = run(K, N, T, wq, row_bytes, 0);
            EXPECT_TRUE(r.plain == r.planes) << "K=" << K << " T=" << T;
            EXPECT_GT(std::fabs(r.plain[0]) + std::fabs(r.plain[1]), 0.0f) << "K=" << K;
        }
}

// Only Q6_K rows of whole 256-value blocks get a layout; the CPU backend has none.
// ops::Backend::batch_layout: the BF16 copy that matmuls of many tokens read instead of
// expanding the rows per call gives the same bits as the expansion, for the file
// types' matrix types, a few rows and many, and a padded output; one-token matmuls
// ignore it. The CPU backend, empty views and BF16 rows (read as stored) have none.
TEST_F(CudaDecodeLayout, BatchLayoutGivesTheSameBits) {
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::F16, GgmlType::F32}) {
        const bool kquant = t == GgmlType::Q4_K || t == GgmlType::Q6_K;
        const int64_t K = kquant ? 512 : 96;
        for (int64_t N : {67, 5000}) {
            const auto [wq, row_bytes] = random_quantized(t, N, K, 0.05f);
            ops::WeightView w{t, K, N, row_bytes, dev(wq)};
            ops::WeightView wl = w;
            EXPECT_EQ(gpu->batch_layout_bytes(w), static_cast<uint64_t>(2 * K * N)) << ggml_type_name(t);
            wl.batch_layout = gpu->batch_layout(w);
            ASSERT_NE(wl.batch_layout, nullptr) << ggml_type_name(t);
            for (int64_t T : {1, 20, 100}) {
                const int64_t ys = N + 2;
                float* x = dev(randn(static_cast<size_t>(T * K)));
                float* y0 = dev(std::vector<float>(static_cast<size_t>(T * ys), 4.0f));
                float* y1 = dev(std::vector<float>(static_cast<size_t>(T * ys), 4.0f));
                gpu->matmul({w, x, y0, T, 0, ys});
                gpu->matmul({wl, x, y1, T, 0, ys});
                const size_t n = static_cast<size_t>(T * ys);
                EXPECT_EQ(float_bits(host(y1, n)), float_bits(host(y0, n)))
                    << ggml_type_name(t) << " N=" << N << " T=" << T;
            }
        }
    }
    const auto [w6, rb6] = random_quantized(GgmlType::Q6_K, 8, 512, 0.05f);
    EXPECT_EQ(cpu->batch_layout({GgmlType::Q6_K, 512, 8, rb6, w6.data()}), nullptr);
    EXPECT_EQ(cpu->batch_layout_bytes({GgmlType::Q6_K, 512, 8, rb6, w6.data()}), 0u);
    EXPECT_EQ(gpu->batch_layout({GgmlType::Q6_K, 512, 8, rb6, nullptr}), nullptr);
    // BF16 rows are multiplied as stored (MatmulAndGetRowsEveryWeightType checks the
    // results): no copy.
    const auto [wb, rbb] = random_quantized(GgmlType::BF16, 8, 96, 0.05f);
    const ops::WeightView bf16{GgmlType::BF16, 96, 8, rbb, dev(wb)};
    EXPECT_EQ(gpu->batch_layout_bytes(bf16), 0u);
    EXPECT_EQ(gpu->batch_layout(bf16), nullptr);
}

// ops::Backend::batch_layouts: q, k and v's copies back to back, which matmul_multi
// multiplies as one matrix where the outputs' columns lie back to back too (the
// forward's qkv_ rows): the same values as one matmul per weight (cuBLAS may pick
// another algorithm for the joint shape: within float rounding), at every batch size
// (GEMV and GEMM ranges), nothing written in the rows' gap. A group with a weight
// that has no copy (BF16 rows) gets one copy each where it can.
TEST_F(CudaDecodeLayout, JointBatchLayoutsMultiplyAsOneMatrix) {
    const int64_t K = 512;
    const auto [q, rq] = random_quantized(GgmlType::Q4_K, 96, K, 0.05f);
    const auto [k, rk] = random_quantized(GgmlType::Q4_K, 40, K, 0.05f);
    const auto [v, rv] = random_quantized(GgmlType::Q6_K, 40, K, 0.05f);
    ops::WeightView w[3] = {{GgmlType::Q4_K, K, 96, rq, dev(q)}, {GgmlType::Q4_K, K, 40, rk, dev(k)},
                            {GgmlType::Q6_K, K, 40, rv, dev(v)}};
    ops::WeightView* group[3] = {&w[0], &w[1], &w[2]};
    gpu->batch_layouts(group);
    const auto* base = static_cast<const uint16_t*>(w[0].batch_layout);
    ASSERT_NE(base, nullptr);
    EXPECT_EQ(w[1].batch_layout, base + 96 * K);
    EXPECT_EQ(w[2].batch_layout, base + 136 * K);
    const int64_t S = 176 + 3;
    for (int64_t T : {1, 5, 20, 64, 100}) {
        const std::string what = "T=" + std::to_string(T);
        float* x = dev(randn(static_cast<size_t>(T * K)));
        float* y = dev(std::vector<float>(static_cast<size_t>(T * S), 4.0f));
        ops::MultiMatmulParams m;
        m.x = x;
        m.n_tokens = T;
        m.n = 3;
        for (int i = 0, at = 0; i < 3; at += static_cast<int>(w[i].n_out), ++i) {
            m.w[i] = w[i];
            m.y[i] = y + at;
            m.y_stride[i] = S;
        }
        gpu->matmul_multi(m);
        const auto got = host(y, static_cast<size_t>(T * S));
        for (int64_t t = 0; t < T; ++t)
            for (int64_t c = 176; c < S; ++c) EXPECT_EQ(got[static_cast<size_t>(t * S + c)], 4.0f) << what;
        for (int i = 0, at = 0; i < 3; at += static_cast<int>(w[i].n_out), ++i) {
            const int64_t n = w[i].n_out;
            float* yi = dev(std::vector<float>(static_cast<size_t>(T * n)));
            gpu->matmul({w[i], x, yi, T});
            const auto want = host(yi, static_cast<size_t>(T * n));
            std::vector<float> part(want.size());
            for (int64_t t = 0; t < T; ++t)
                std::copy_n(got.begin() + t * S + at, n, part.begin() + t * n);
            EXPECT_LT(rel_err(part, want), 1e-5) << what << " weight " << i;
        }
    }
    const auto [b, rb] = random_quantized(GgmlType::BF16, 8, K, 0.05f);
    ops::WeightView mixed[2] = {{GgmlType::Q4_K, K, 40, rk, dev(k)}, {GgmlType::BF16, K, 8, rb, dev(b)}};
    ops::WeightView* pair[2] = {&mixed[0], &mixed[1]};
    gpu->batch_layouts(pair);
    EXPECT_NE(mixed[0].batch_layout, nullptr);
    EXPECT_EQ(mixed[1].batch_layout, nullptr);
}

TEST_F(CudaDecodeLayout, NoneForOtherTypes) {
    const auto [wq, row_bytes] = random_quantized(GgmlType::Q4_K, 8, 512, 0.05f);
    EXPECT_EQ(gpu->decode_layout({GgmlType::Q4_K, 512, 8, row_bytes, dev(wq)}), nullptr);
    const auto [w6, rb6] = random_quantized(GgmlType::Q6_K, 8, 512, 0.05f);
    EXPECT_EQ(cpu->decode_layout({GgmlType::Q6_K, 512, 8, rb6, w6.data()}), nullptr);
    EXPECT_EQ(gpu->decode_layout({GgmlType::Q6_K, 512, 8, rb6, nullptr}), nullptr);
}

// The LM heads' shapes (262,144 rows of 2,816 values: the 26B-A4B; 5,376: the 31B):
// plain layout against planes, one token (--gtest_also_run_disabled_tests).
TEST_F(CudaDecodeLayout, DISABLED_Throughput) {
    for (const int64_t K : {2816, 5376}) {
        const int64_t N = 262144;
        const uint64_t row_bytes = *ggml_row_size(GgmlType::Q6_K, static_cast<uint64_t>(K));
        std::vector<uint8_t> wq(row_bytes * static_cast<size_t>(N));
        std::vector<uint8_t> row(row_bytes);
        for (int64_t r = 0; r < 64; ++r) {  // 64 distinct rows, repeated
            const auto wf = randn(static_cast<size_t>(K), 0.05f);
            quant::quantize(GgmlType::Q6_K, wf.data(), row.data(), 1, K, nullptr);
            for (int64_t o = r; o < N; o += 64) std::copy(row.begin(), row.end(), wq.begin() + o * row_bytes);
        }
        const DecodeLayoutRun r = run(K, N, 1, wq, row_bytes, 20);
        EXPECT_TRUE(r.plain == r.planes);
        const double bytes = static_cast<double>(wq.size());
        std::printf("[ perf ] lm_head K=%lld q6_k plain  %8.1f us %8.1f GB/s\n", static_cast<long long>(K),
                    r.plain_s * 1e6, bytes / r.plain_s / 1e9);
        std::printf("[ perf ] lm_head K=%lld q6_k planes %8.1f us %8.1f GB/s\n", static_cast<long long>(K),
                    r.planes_s * 1e6, bytes / r.planes_s / 1e9);
    }
}

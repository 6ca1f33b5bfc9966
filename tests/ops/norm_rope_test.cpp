// RMSNorm and RoPE against double-precision references.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "ops_test_util.h"

namespace hf2q::ops_test {
namespace {

// y = [add +] x / sqrt(mean(x²) + eps) [· w], all in double.
std::vector<double> ref_rms_norm(const std::vector<float>& x, const float* w, const float* add,
                                 int64_t rows, int64_t n, double eps) {
    std::vector<double> y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
        double ss = 0.0;
        for (int64_t i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i];
        const double inv = 1.0 / std::sqrt(ss / double(n) + eps);
        for (int64_t i = 0; i < n; ++i) {
            double v = x[r * n + i] * inv * (w ? double(w[i]) : 1.0);
            y[r * n + i] = add ? add[r * n + i] + v : v;
        }
    }
    return y;
}

TEST(RmsNorm, MatchesReferenceAllVariants) {
    for (int64_t n : {1, 7, 256, 2816}) {
        for (int64_t rows : {1, 5, 64}) {
            const auto x = randn(size_t(rows * n), uint32_t(n + rows), 3.0f);
            const auto w = randn(size_t(n), 7);
            const auto res = randn(size_t(rows * n), 8);
            for (int variant = 0; variant < 4; ++variant) {
                const bool use_w = variant & 1, use_add = variant & 2;
                // y aliases x (or add_to when fused): the documented in-place uses.
                std::vector<float> buf = use_add ? res : x;
                auto got = run_both(buf, [&](ops::Backend& be, float* y) {
                    ops::RmsNormParams p;
                    p.x = use_add ? x.data() : y;
                    p.w = use_w ? w.data() : nullptr;
                    p.add_to = use_add ? y : nullptr;
                    p.y = y;
                    p.rows = rows;
                    p.n = n;
                    be.rms_norm(p);
                });
                auto ref = ref_rms_norm(x, use_w ? w.data() : nullptr,
                                        use_add ? res.data() : nullptr, rows, n, 1e-6);
                // Whole-buffer scale: with n = 1 a fused residual add can cancel.
                EXPECT_LT(rel_err_rows(got, ref, got.size()), 1e-6)
                    << "n=" << n << " rows=" << rows << " variant=" << variant;
            }
        }
    }
}

// ops::ResidualNormsParams in double: h from the branch(es), x = (x + h)·scale,
// y[j] = rmsnorm(x; w_j)·s_j. Returns x followed by the outputs.
std::vector<double> ref_residual_norms(const ops::ResidualNormsParams& p, const std::vector<float>& x0,
                                       const std::vector<float>& b0, const std::vector<float>& b1) {
    const int64_t n = p.n;
    std::vector<double> out(size_t((1 + p.n_out) * p.rows * n));
    auto inv_rms = [&](const double* v) {
        double ss = 0.0;
        for (int64_t i = 0; i < n; ++i) ss += v[i] * v[i];
        return 1.0 / std::sqrt(ss / double(n) + double(p.eps));
    };
    std::vector<double> h(static_cast<size_t>(n)), t(static_cast<size_t>(n)), x(static_cast<size_t>(n));
    for (int64_t r = 0; r < p.rows; ++r) {
        for (int64_t i = 0; i < n; ++i) t[i] = b0[r * n + i];
        double inv = inv_rms(t.data());
        for (int64_t i = 0; i < n; ++i) h[i] = t[i] * inv * p.w[0][i];
        if (p.n_branch == 2) {
            for (int64_t i = 0; i < n; ++i) t[i] = b1[r * n + i];
            inv = inv_rms(t.data());
            for (int64_t i = 0; i < n; ++i) h[i] += t[i] * inv * p.w[1][i];
            inv = inv_rms(h.data());
            for (int64_t i = 0; i < n; ++i) h[i] = h[i] * inv * p.sum_w[i];
        }
        for (int64_t i = 0; i < n; ++i) x[i] = (x0[r * n + i] + h[i]) * p.scale;
        for (int64_t i = 0; i < n; ++i) out[r * n + i] = x[i];
        inv = inv_rms(x.data());
        for (int j = 0; j < p.n_out; ++j)
            for (int64_t i = 0; i < n; ++i)
                out[((1 + j) * p.rows + r) * n + i] =
                    x[i] * inv * (p.out_w[j] ? double(p.out_w[j][i]) : 1.0) * p.out_scale[j];
    }
    return out;
}

// The default residual_norms (the rms_norm sequence) against the double reference:
// one and two branches, 0-3 outputs with and without weights, a layer scalar.
TEST(ResidualNorms, DefaultMatchesReference) {
    for (int64_t n : {7, 256, 2816}) {
        for (int64_t rows : {1, 5}) {
            for (int branches = 1; branches <= 2; ++branches) {
                for (int n_out = 0; n_out <= ops::ResidualNormsParams::kMaxOut; ++n_out) {
                    const uint32_t seed = uint32_t(n * 31 + rows * 7 + branches * 3 + n_out);
                    const auto x0 = randn(size_t(rows * n), seed, 2.0f), b0 = randn(size_t(rows * n), seed + 1, 5.0f),
                               b1 = randn(size_t(rows * n), seed + 2, 0.5f);
                    const auto w0 = randn(size_t(n), seed + 3), w1 = randn(size_t(n), seed + 4),
                               ws = randn(size_t(n), seed + 5), wy = randn(size_t(n), seed + 6);
                    // One buffer: x, the outputs, then the two branches (b0 is scratch).
                    const size_t rn = size_t(rows * n);
                    std::vector<float> buf((3 + n_out) * rn, 0.0f);
                    std::copy(x0.begin(), x0.end(), buf.begin());
                    std::copy(b0.begin(), b0.end(), buf.begin() + long((1 + n_out) * rn));
                    std::copy(b1.begin(), b1.end(), buf.begin() + long((2 + n_out) * rn));
                    ops::ResidualNormsParams p;
                    p.rows = rows;
                    p.n = n;
                    p.n_branch = branches;
                    p.w[0] = w0.data();
                    p.w[1] = branches == 2 ? w1.data() : nullptr;
                    p.sum_w = branches == 2 ? ws.data() : nullptr;
                    p.scale = 0.75f;
                    p.n_out = n_out;
                    for (int j = 0; j < n_out; ++j) {
                        p.out_w[j] = j == 1 ? nullptr : wy.data();  // output 1: no weight
                        p.out_scale[j] = j == 2 ? 0.125f : 1.0f;
                    }
                    auto got = run_both(buf, [&](ops::Backend& be, float* y) {
                        ops::ResidualNormsParams q = p;
                        q.x = y;
                        for (int j = 0; j < n_out; ++j) q.y[j] = y + (1 + j) * rn;
                        q.b[0] = y + (1 + n_out) * rn;
                        q.b[1] = branches == 2 ? y + (2 + n_out) * rn : nullptr;
                        be.residual_norms(q);
                    });
                    const auto ref = ref_residual_norms(p, x0, b0, b1);
                    got.resize(ref.size());  // x and the outputs
                    EXPECT_LT(rel_err_rows(got, ref, size_t(n)), 2e-6)
                        << "n=" << n << " rows=" << rows << " branches=" << branches << " outputs=" << n_out;
                }
            }
        }
    }
}

// The fused ops refuse parameters that break their contracts (an output aliasing
// the residual, too many outputs, a combine that does not write the second branch,
// a store without pools) instead of writing out of bounds.
TEST(ResidualNorms, ContractViolationsThrow) {
    std::vector<float> x(64), b0(64), b1(64), y(64), w(64, 1.0f);
    ops::ResidualNormsParams p;
    p.x = x.data();
    p.rows = 1;
    p.n = 64;
    p.b[0] = b0.data();
    p.w[0] = w.data();
    p.n_out = 1;
    p.y[0] = y.data();
    EXPECT_NO_THROW(backends().one->residual_norms(p));
    auto bad = [&](auto&& mutate) {
        ops::ResidualNormsParams q = p;
        mutate(q);
        EXPECT_THROW(backends().one->residual_norms(q), Error);
    };
    bad([&](ops::ResidualNormsParams& q) { q.y[0] = x.data(); });                         // y aliases x
    bad([&](ops::ResidualNormsParams& q) { q.n_out = ops::ResidualNormsParams::kMaxOut + 1; });
    bad([&](ops::ResidualNormsParams& q) { q.n_branch = 2; });                             // no b1, no sum_w
    bad([&](ops::ResidualNormsParams& q) { q.n_branch = 3; });
    ops::MoeCombineParams cb;
    cb.n = 64;
    cb.n_tokens = 1;
    cb.k = 1;
    cb.out = y.data();  // not b[1]
    cb.out_stride = 64;
    bad([&](ops::ResidualNormsParams& q) {
        q.n_branch = 2;
        q.b[1] = b1.data();
        q.w[1] = w.data();
        q.sum_w = w.data();
        q.combine = &cb;
    });

    ops::AttentionInputsParams a;
    std::vector<float> qv(64);
    std::vector<float> f(32, 0.0f);
    std::vector<int32_t> pos = {0};
    a.q = qv.data();
    a.n_heads = 1;
    a.n_tokens = 1;
    a.head_dim = 64;
    a.rope_inv_freq = f.data();
    a.pos = pos.data();
    EXPECT_NO_THROW(backends().one->attention_inputs(a));
    a.store = true;  // no k, v, pools or tables
    EXPECT_THROW(backends().one->attention_inputs(a), Error);
    a.store = false;
    a.head_dim = 63;  // RoPE pairs need an even head dim
    EXPECT_THROW(backends().one->attention_inputs(a), Error);
}

TEST(RmsNorm, EpsMattersAndZeroRowsIsNoop) {
    std::vector<float> x(16, 0.0f), y(16, 5.0f);
    ops::RmsNormParams p;
    p.x = x.data();
    p.y = y.data();
    p.rows = 1;
    p.n = 16;
    backends().three->rms_norm(p);
    for (float v : y) EXPECT_EQ(v, 0.0f);  // zero row stays zero thanks to eps
    x.assign(16, 1e-4f);
    p.eps = 1e-6f;
    backends().one->rms_norm(p);
    // 1e-4 / sqrt(1e-8 + 1e-6) = 0.0995...
    EXPECT_NEAR(y[0], 1e-4 / std::sqrt(1e-8 + 1e-6), 1e-6);
    std::vector<float> untouched(16, 3.0f);
    p.y = untouched.data();
    p.rows = 0;
    backends().three->rms_norm(p);
    for (float v : untouched) EXPECT_EQ(v, 3.0f);
}

// Gemma 4 style inverse frequencies: θ^(−2i/d) for the first `rotating` pairs, 0 after.
std::vector<float> inv_freqs(int64_t d, double theta, int64_t rotating) {
    std::vector<float> f(size_t(d / 2), 0.0f);
    for (int64_t i = 0; i < rotating; ++i) f[size_t(i)] = float(std::pow(theta, -2.0 * i / d));
    return f;
}

TEST(Rope, NeoxPairsAndProportionalPassThrough) {
    struct Case {
        int64_t d;
        double theta;
        int64_t rotating;
    };
    for (Case cs : {Case{64, 1e4, 32}, Case{256, 1e4, 128}, Case{512, 1e6, 64}}) {
        for (int64_t n_tokens : {1, 3, 33}) {
            const int64_t n_heads = 3, d = cs.d, half = d / 2;
            const auto x = randn(size_t(n_tokens * n_heads * d), uint32_t(d + n_tokens));
            const auto f = inv_freqs(d, cs.theta, cs.rotating);
            std::vector<int32_t> pos(static_cast<size_t>(n_tokens));
            for (int64_t t = 0; t < n_tokens; ++t) pos[size_t(t)] = int32_t(t * 7919 % 131072);
            auto got = run_both(x, [&](ops::Backend& be, float* buf) {
                ops::RopeParams p;
                p.x = buf;
                p.pos = pos.data();
                p.inv_freq = f.data();
                p.n_tokens = n_tokens;
                p.n_heads = n_heads;
                p.head_dim = d;
                be.rope(p);
            });
            std::vector<double> ref(x.size());
            for (int64_t t = 0; t < n_tokens; ++t)
                for (int64_t h = 0; h < n_heads; ++h)
                    for (int64_t k = 0; k < half; ++k) {
                        const size_t i = size_t((t * n_heads + h) * d + k);
                        // The angle is defined in f32; cos/sin of that f32 angle in double.
                        const double a = float(pos[size_t(t)]) * f[size_t(k)];
                        ref[i] = x[i] * std::cos(a) - x[i + size_t(half)] * std::sin(a);
                        ref[i + size_t(half)] =
                            x[i + size_t(half)] * std::cos(a) + x[i] * std::sin(a);
                    }
            EXPECT_LT(rel_err_rows(got, ref, size_t(d)), 1e-6) << "d=" << d << " T=" << n_tokens;
            // Non-rotating pairs (inv_freq 0) are copied exactly.
            for (int64_t t = 0; t < n_tokens; ++t)
                for (int64_t k = cs.rotating; k < half; ++k) {
                    const size_t i = size_t(t * n_heads * d + k);
                    EXPECT_EQ(got[i], x[i]);
                    EXPECT_EQ(got[i + size_t(half)], x[i + size_t(half)]);
                }
        }
    }
}

TEST(Rope, ZeroTokensIsNoop) {
    std::vector<float> x(64, 1.0f);
    const auto f = inv_freqs(64, 1e4, 32);
    ops::RopeParams p;
    p.x = x.data();
    p.inv_freq = f.data();
    p.n_heads = 1;
    p.head_dim = 64;
    backends().three->rope(p);
    for (float v : x) EXPECT_EQ(v, 1.0f);
}

// The fused variants equal the separate ops bit for bit: out_scale equals a scale
// after the norm, rope_* equals a RoPE call after the head norm (q/k of a layer).
TEST(RmsNorm, FusedScaleAndRopeEqualSeparateOps) {
    const int64_t T = 3, heads = 4, d = 64, n = heads * d;
    std::mt19937 rng(7);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(T * n)), w(static_cast<size_t>(d)), add(x.size());
    for (auto& v : x) v = g(rng);
    for (auto& v : w) v = g(rng);
    for (auto& v : add) v = g(rng);
    const auto f = inv_freqs(d, 1e4, d / 2);
    std::vector<int32_t> pos = {0, 17, 4095};
    auto& be = *backends().three;

    // norm + residual, then scale
    std::vector<float> sep(x.size()), fused(x.size());
    std::vector<float> wn(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) wn[static_cast<size_t>(i)] = w[static_cast<size_t>(i % d)];
    ops::RmsNormParams p{x.data(), wn.data(), sep.data(), T, n, 1e-6f, add.data()};
    be.rms_norm(p);
    be.scale(sep.data(), 0.37f, T * n);
    p.y = fused.data();
    p.out_scale = 0.37f;
    be.rms_norm(p);
    EXPECT_EQ(fused, sep);

    // head norm, then RoPE
    std::vector<float> a = x, b = x;
    ops::RmsNormParams h{a.data(), w.data(), a.data(), T * heads, d, 1e-6f};
    be.rms_norm(h);
    ops::RopeParams r;
    r.x = a.data();
    r.pos = pos.data();
    r.inv_freq = f.data();
    r.n_tokens = T;
    r.n_heads = heads;
    r.head_dim = d;
    be.rope(r);
    h.x = b.data();
    h.y = b.data();
    h.rope_inv_freq = f.data();
    h.rope_pos = pos.data();
    h.rope_heads = heads;
    be.rms_norm(h);
    EXPECT_EQ(b, a);
}

// attention_inputs from q/k/v side by side in rows of src_stride floats (q_src, k_src,
// v_src: one product over the joint weights writes them so) gives bit for bit what it
// gives from packed buffers in place: q̂ out of place, the same pool rows, the sources
// untouched. With V from its own projection and from the raw K (K=V layers).
TEST(AttentionInputs, SourcesSideBySideEqualPackedInPlace) {
    const int64_t T = 5, nh = 4, nkv = 2, d = 64, bs = 4, S = (nh + 2 * nkv) * d + 6;
    const auto q = randn(size_t(T * nh * d), 11), k = randn(size_t(T * nkv * d), 12);
    const auto v = randn(size_t(T * nkv * d), 13);
    const auto qw = randn(size_t(d), 14), kw = randn(size_t(d), 15);
    const auto f = inv_freqs(d, 1e4, d / 2);
    const std::vector<int32_t> pos = {0, 3, 9, 10, 33}, table = {6, 1, 3, 0, 2, 5, 4, 7, 8, 9};
    const std::vector<const int32_t*> tables(size_t(T), table.data());
    std::vector<float> src(size_t(T * S), -9.0f);
    for (int64_t t = 0; t < T; ++t) {
        std::copy_n(q.begin() + t * nh * d, nh * d, src.begin() + t * S);
        std::copy_n(k.begin() + t * nkv * d, nkv * d, src.begin() + t * S + nh * d);
        std::copy_n(v.begin() + t * nkv * d, nkv * d, src.begin() + t * S + (nh + nkv) * d);
    }
    for (bool v_from_k : {false, true}) {
        for (ops::Backend* be : {backends().one.get(), backends().three.get()}) {
            const size_t pool = size_t(10 * bs * nkv * d);
            auto run = [&](bool sources, std::vector<float>& qo, std::vector<float>& kp, std::vector<float>& vp) {
                std::vector<float> ko = k, vo = v;
                qo = q;
                kp.assign(pool, 0.0f);
                vp.assign(pool, 0.0f);
                ops::AttentionInputsParams a;
                a.q = qo.data();
                a.q_w = qw.data();
                a.n_heads = nh;
                a.n_tokens = T;
                a.head_dim = d;
                a.rope_inv_freq = f.data();
                a.pos = pos.data();
                a.store = true;
                a.k = ko.data();
                a.k_w = kw.data();
                a.v = vo.data();
                a.v_from_k = v_from_k;
                a.n_kv_heads = nkv;
                a.k_pool = kp.data();
                a.v_pool = vp.data();
                a.kv_type = ops::KvType::f32;
                a.block_size = bs;
                a.tables = tables.data();
                if (sources) {
                    std::fill(qo.begin(), qo.end(), 0.0f);  // an output only
                    a.q_src = src.data();
                    a.k_src = src.data() + nh * d;
                    a.v_src = v_from_k ? nullptr : src.data() + (nh + nkv) * d;
                    a.src_stride = S;
                }
                be->attention_inputs(a);
            };
            std::vector<float> q0, k0, v0, q1, k1, v1;
            const auto src_before = src;
            run(false, q0, k0, v0);
            run(true, q1, k1, v1);
            EXPECT_EQ(q1, q0) << "v_from_k=" << v_from_k;
            EXPECT_EQ(k1, k0) << "v_from_k=" << v_from_k;
            EXPECT_EQ(v1, v0) << "v_from_k=" << v_from_k;
            EXPECT_NE(q0, q);  // normed and rotated
            EXPECT_EQ(src, src_before);
        }
    }
    ops::AttentionInputsParams a;
    std::vector<float> qv(size_t(nh * d));
    a.q = qv.data();
    a.n_heads = nh;
    a.n_tokens = 1;
    a.head_dim = d;
    a.rope_inv_freq = f.data();
    a.pos = pos.data();
    a.q_src = src.data();
    a.src_stride = nh * d - 1;  // rows shorter than q's heads
    EXPECT_THROW(backends().one->attention_inputs(a), Error);
}

}  // namespace
}  // namespace hf2q::ops_test

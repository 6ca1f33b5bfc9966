// Paged attention against a double reference that gathers each token's keys through
// its block table, builds the full masked score row and applies a plain softmax.
//
// Unused pool blocks and released (−1) blocks are filled with NaN, so reading any key
// outside a token's [lo, p] range, or another sequence's block, shows up as NaN or as
// a mismatch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "core/error.h"
#include "ops_test_util.h"
#include "quant/quant.h"

namespace hf2q::ops_test {
namespace {

struct Seq {
    int64_t len;      // cached positions 0 .. len−1
    int64_t queries;  // query tokens at positions len−queries .. len−1
};

struct Scenario {
    int64_t n_heads, n_kv_heads, head_dim, block_size;
    int32_t window;
    std::vector<Seq> seqs;
    float scale = 1.0f;
};

int64_t lo_of(int64_t p, int32_t window) {
    return window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
}

// A filled KV pool, per-sequence block tables and an interleaved batch of queries.
struct KvSetup {
    int64_t n_blocks = 0, kv_row = 0;
    std::vector<float> k_pool, v_pool, q;
    std::vector<std::vector<int32_t>> tables;  // per sequence
    std::vector<int32_t> pos, table_len;
    std::vector<const int32_t*> token_tables;
    std::vector<size_t> token_seq;

    ops::AttentionParams params(const Scenario& s, float* out) const {
        ops::AttentionParams p;
        p.q = q.data();
        p.out = out;
        p.n_tokens = int64_t(pos.size());
        p.n_heads = s.n_heads;
        p.n_kv_heads = s.n_kv_heads;
        p.head_dim = s.head_dim;
        p.k_pool = k_pool.data();
        p.v_pool = v_pool.data();
        p.block_size = s.block_size;
        p.pos = pos.data();
        p.tables = token_tables.data();
        p.table_len = table_len.data();
        p.window = s.window;
        p.scale = s.scale;
        p.n_blocks = n_blocks;
        return p;
    }
};

KvSetup build(const Scenario& s, uint32_t seed) {
    KvSetup u;
    const int64_t bs = s.block_size;
    u.kv_row = s.n_kv_heads * s.head_dim;
    for (const Seq& q : s.seqs) u.n_blocks += (q.len + bs - 1) / bs;
    u.n_blocks += 3;  // spare blocks never referenced
    std::vector<int32_t> phys(size_t(u.n_blocks));
    std::iota(phys.begin(), phys.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(phys.begin(), phys.end(), rng);
    const size_t pool_floats = size_t(u.n_blocks * bs * u.kv_row);
    u.k_pool.assign(pool_floats, std::numeric_limits<float>::quiet_NaN());
    u.v_pool = u.k_pool;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    size_t next = 0;
    for (const Seq& q : s.seqs) {
        std::vector<int32_t> table(size_t((q.len + bs - 1) / bs));
        for (auto& id : table) id = phys[next++];
        const int64_t d = s.head_dim;
        for (int64_t j = 0; j < q.len; ++j) {
            for (int64_t i = 0; i < u.kv_row; ++i) {
                const size_t at = size_t(ops::kv_value_index(table[size_t(j / bs)], j % bs, i, bs, u.kv_row, d));
                u.k_pool[at] = nd(rng);
                u.v_pool[at] = nd(rng);
            }
        }
        // Sliding layers release blocks wholly below every query's window: poison them
        // (the physical block may be reused) and mark them −1.
        const int64_t lo_min = lo_of(q.len - q.queries, s.window);
        for (int64_t b = 0; (b + 1) * bs <= lo_min; ++b) {
            const size_t first = size_t(table[size_t(b)] * bs * u.kv_row);
            std::fill_n(u.k_pool.begin() + long(first), bs * u.kv_row,
                        std::numeric_limits<float>::quiet_NaN());
            std::fill_n(u.v_pool.begin() + long(first), bs * u.kv_row,
                        std::numeric_limits<float>::quiet_NaN());
            table[size_t(b)] = -1;
        }
        u.tables.push_back(std::move(table));
    }
    // Interleave the sequences' query tokens round-robin.
    int64_t max_q = 0;
    for (const Seq& q : s.seqs) max_q = std::max(max_q, q.queries);
    for (int64_t i = 0; i < max_q; ++i)
        for (size_t si = 0; si < s.seqs.size(); ++si) {
            if (i >= s.seqs[si].queries) continue;
            u.pos.push_back(int32_t(s.seqs[si].len - s.seqs[si].queries + i));
            u.token_tables.push_back(u.tables[si].data());
            u.table_len.push_back(int32_t(u.tables[si].size()));
            u.token_seq.push_back(si);
        }
    // q scaled so scores have a spread of a few units, like QK-normed Gemma heads.
    u.q = randn(u.pos.size() * size_t(s.n_heads * s.head_dim), seed + 1,
                2.0f / std::sqrt(float(s.head_dim)));
    return u;
}

std::vector<double> reference(const Scenario& s, const KvSetup& u) {
    const int64_t d = s.head_dim, group = s.n_heads / s.n_kv_heads;
    std::vector<double> out(u.q.size());
    for (size_t t = 0; t < u.pos.size(); ++t) {
        const int64_t p = u.pos[t];
        const auto& table = u.tables[u.token_seq[t]];
        for (int64_t h = 0; h < s.n_heads; ++h) {
            const float* q = u.q.data() + (int64_t(t) * s.n_heads + h) * d;
            auto key_row = [&](int64_t j) {
                return size_t(ops::kv_pool_index(table[size_t(j / s.block_size)], j % s.block_size,
                                                 h / group, s.block_size, u.kv_row, d));
            };
            // Full score row over 0..p with the mask applied as −inf.
            std::vector<double> sc(size_t(p + 1), -INFINITY);
            double mx = -INFINITY;
            for (int64_t j = lo_of(p, s.window); j <= p; ++j) {
                const float* k = u.k_pool.data() + key_row(j);
                double dot = 0.0;
                for (int64_t i = 0; i < d; ++i) dot += double(q[i]) * k[i];
                sc[size_t(j)] = s.scale * dot;
                mx = std::max(mx, sc[size_t(j)]);
            }
            double sum = 0.0;
            for (auto& v : sc) sum += (v = std::exp(v - mx));
            double* o = out.data() + (int64_t(t) * s.n_heads + h) * d;
            for (int64_t j = 0; j <= p; ++j) {
                if (sc[size_t(j)] == 0.0) continue;  // masked
                const float* v = u.v_pool.data() + key_row(j);
                for (int64_t i = 0; i < d; ++i) o[i] += sc[size_t(j)] / sum * v[i];
            }
        }
    }
    return out;
}

double worst_attention_err = 0.0;

void run_and_check(const Scenario& s, uint32_t seed) {
    const KvSetup u = build(s, seed);
    auto got = run_both(std::vector<float>(u.q.size(), 0.0f),
                        [&](ops::Backend& be, float* out) { be.attention(u.params(s, out)); });
    const double err = rel_err_rows(got, reference(s, u), size_t(s.head_dim));
    worst_attention_err = std::max(worst_attention_err, err);
    EXPECT_LT(err, 1e-5) << "d=" << s.head_dim << " heads=" << s.n_heads << "/" << s.n_kv_heads
                         << " bs=" << s.block_size << " window=" << s.window;
}

TEST(Attention, GridOverHeadDimGqaWindowBlockSize) {
    const std::vector<Seq> batch = {{37, 5}, {1, 1}, {20, 20}, {33, 2}};
    uint32_t seed = 1;
    for (int64_t d : {64, 256, 512})
        for (int64_t group : {1, 2, 8})
            for (int64_t bs : {1, 16})
                for (int32_t window : {0, 5, 16, 1000}) {
                    const int64_t n_kv = group == 8 ? 1 : 2;
                    run_and_check(Scenario{n_kv * group, n_kv, d, bs, window, batch}, seed++);
                }
    std::printf("worst relative error vs double: %.3g\n", worst_attention_err);
}

TEST(Attention, SingleTokenDecode) {
    for (int32_t window : {0, 7})
        for (int64_t bs : {1, 16}) run_and_check(Scenario{8, 2, 256, bs, window, {{61, 1}}}, 5);
}

TEST(Attention, NonUnitScale) {
    run_and_check(Scenario{4, 4, 64, 16, 0, {{40, 3}, {9, 2}}, 0.125f}, 6);
}

TEST(Attention, OutMayAliasQ) {
    const Scenario s{8, 2, 128, 16, 0, {{30, 4}, {17, 3}}};
    KvSetup u = build(s, 10);
    std::vector<float> out(u.q.size());
    backends().three->attention(u.params(s, out.data()));
    std::vector<float> in_place = u.q;
    ops::AttentionParams p = u.params(s, in_place.data());
    p.q = in_place.data();
    backends().three->attention(p);
    EXPECT_TRUE(bitwise_equal(in_place, out));
}

// The scenario's attention (run_both) over u's pools stored as codes of type C
// (round, then read back by `back`): u's pools become the rounded f32 values, and the
// result is {attention over those f32 pools, attention over the coded pools of type kv}.
template <class C, class Round, class Back>
std::pair<std::vector<float>, std::vector<float>> rounded_pool_runs(const Scenario& s, KvSetup& u, ops::KvType kv,
                                                                    Round round, Back back) {
    std::vector<C> kc, vc;
    for (float& x : u.k_pool) x = back(kc.emplace_back(round(x)));
    for (float& x : u.v_pool) x = back(vc.emplace_back(round(x)));
    auto rounded = run_both(std::vector<float>(u.q.size(), 0.0f),
                            [&](ops::Backend& be, float* out) { be.attention(u.params(s, out)); });
    auto coded = run_both(std::vector<float>(u.q.size(), 0.0f), [&](ops::Backend& be, float* out) {
        ops::AttentionParams p = u.params(s, out);
        p.k_pool = kc.data();
        p.v_pool = vc.data();
        p.kv_type = kv;
        be.attention(p);
    });
    return {std::move(rounded), std::move(coded)};
}

// An f16 cache computes exactly as an f32 cache holding the rounded values (the
// conversion back is exact and the arithmetic the same): bit for bit, on one and
// three threads (run_both), and against the double reference of the rounded pools.
TEST(Attention, F16CacheIsTheRoundedF32Cache) {
    for (int32_t window : {0, 9}) {
        const Scenario s{8, 2, 256, 16, window, {{45, 6}, {3, 1}, {30, 30}}};
        KvSetup u = build(s, 21);
        const auto [rounded, f16] =
            rounded_pool_runs<uint16_t>(s, u, ops::KvType::f16, quant::fp32_to_fp16, quant::fp16_to_fp32);
        EXPECT_TRUE(bitwise_equal(f16, rounded)) << "window " << window;
        EXPECT_LT(rel_err_rows(f16, reference(s, u), size_t(s.head_dim)), 1e-5) << "window " << window;
    }
}

// The same for an e4m3 cache (quant::fp32_to_e4m3 once, decoded exactly). Against the
// double reference of the unrounded pools the error is that of 3 mantissa bits in K:
// with unit-size random q and k at head size 256 (scores of about ±16, unscaled as in
// Gemma 4) a score moves by about 0.6, so this sharp softmax shifts by 12-17 %.
TEST(Attention, E4m3CacheIsTheRoundedF32Cache) {
    for (int32_t window : {0, 9}) {
        const Scenario s{8, 2, 256, 16, window, {{45, 6}, {3, 1}, {30, 30}}};
        KvSetup u = build(s, 22);
        const KvSetup exact = u;
        const auto [rounded, e4m3] =
            rounded_pool_runs<uint8_t>(s, u, ops::KvType::e4m3, quant::fp32_to_e4m3, quant::e4m3_to_fp32);
        EXPECT_TRUE(bitwise_equal(e4m3, rounded)) << "window " << window;
        EXPECT_LT(rel_err_rows(e4m3, reference(s, u), size_t(s.head_dim)), 1e-5) << "window " << window;
        const double err = rel_err_rows(e4m3, reference(s, exact), size_t(s.head_dim));
        EXPECT_GT(err, 1e-4) << "window " << window << ": the pools were not rounded";
        EXPECT_LT(err, 0.3) << "window " << window;
    }
}

// An i8 cache (quant::quantize_row_i8 per (slot, KV head) row): against an f32 cache
// holding codes · scale it differs only in where the scale is applied (to the score
// and the softmax weight), so to rounding; against the unrounded pools its error is
// a fraction of e4m3's (steps of 1/127 of each row's largest value instead of 2^-4 of
// each value): about 0.028 here, against e4m3's 0.12-0.17 above.
TEST(Attention, I8CacheIsTheRoundedF32CacheToRounding) {
    for (int32_t window : {0, 9}) {
        const Scenario s{8, 2, 256, 16, window, {{45, 6}, {3, 1}, {30, 30}}};
        KvSetup u = build(s, 23);
        const KvSetup exact = u;
        const size_t hd = size_t(s.head_dim), rows = u.k_pool.size() / hd;
        std::vector<int8_t> kc(u.k_pool.size()), vc(u.v_pool.size());
        std::vector<float> ks(rows), vs(rows);
        quant::quantize_rows_i8(u.k_pool.data(), kc.data(), ks.data(), int64_t(rows), s.head_dim);
        quant::quantize_rows_i8(u.v_pool.data(), vc.data(), vs.data(), int64_t(rows), s.head_dim);
        for (size_t r = 0; r < rows; ++r)
            for (size_t i = 0; i < hd; ++i) {
                u.k_pool[r * hd + i] = static_cast<float>(kc[r * hd + i]) * ks[r];
                u.v_pool[r * hd + i] = static_cast<float>(vc[r * hd + i]) * vs[r];
            }
        const auto rounded = run_both(std::vector<float>(u.q.size(), 0.0f),
                                      [&](ops::Backend& be, float* out) { be.attention(u.params(s, out)); });
        const auto coded = run_both(std::vector<float>(u.q.size(), 0.0f), [&](ops::Backend& be, float* out) {
            ops::AttentionParams p = u.params(s, out);
            p.k_pool = kc.data();
            p.v_pool = vc.data();
            p.kv_type = ops::KvType::i8;
            p.k_scale = ks.data();
            p.v_scale = vs.data();
            be.attention(p);
        });
        EXPECT_LT(rel_err_rows(coded, std::vector<double>(rounded.begin(), rounded.end()), hd), 1e-5) << "window " << window;
        EXPECT_LT(rel_err_rows(coded, reference(s, u), hd), 1e-5) << "window " << window;
        const double err = rel_err_rows(coded, reference(s, exact), hd);
        EXPECT_GT(err, 1e-4) << "window " << window << ": the pools were not rounded";
        EXPECT_LT(err, 0.05) << "window " << window;
    }
}

// The pool index: block b's rows fill exactly [b·block_size·kv_row, (b + 1)·block_size·kv_row),
// each value once, and a row's scale index is its first value's index over head_dim (what the
// CUDA kernels compute); a head's next slot is kv_row values on, its scale n_kv_heads on (what
// the CPU kernel steps by).
TEST(Attention, PoolIndexCoversEachBlockOnce) {
    const int64_t bs = 4, nkv = 3, d = 8, row = nkv * d;
    for (int64_t b : {0, 1, 5}) {
        std::vector<int> seen(size_t(bs * row), 0);
        for (int64_t s = 0; s < bs; ++s)
            for (int64_t h = 0; h < nkv; ++h) {
                const int64_t at = ops::kv_pool_index(b, s, h, bs, row, d);
                EXPECT_EQ(at % d, 0);
                EXPECT_EQ(ops::kv_scale_index(b, s, h, bs, nkv), at / d);
                for (int64_t i = 0; i < d; ++i) {
                    const int64_t k = at + i - b * bs * row;
                    ASSERT_TRUE(k >= 0 && k < bs * row) << b << " " << s << " " << h;
                    ++seen[size_t(k)];
                }
                if (s + 1 < bs) {  // the next slot of the same head
                    EXPECT_EQ(ops::kv_pool_index(b, s + 1, h, bs, row, d) - at, row);
                    EXPECT_EQ(ops::kv_scale_index(b, s + 1, h, bs, nkv) - ops::kv_scale_index(b, s, h, bs, nkv),
                              nkv);
                }
            }
        for (int c : seen) ASSERT_EQ(c, 1);
    }
}

TEST(Attention, ZeroTokensIsNoop) {
    std::vector<float> out(8, 2.0f);
    ops::AttentionParams p;
    p.out = out.data();
    p.n_heads = 1;
    p.n_kv_heads = 1;
    p.head_dim = 8;
    p.block_size = 16;
    backends().three->attention(p);
    for (float v : out) EXPECT_EQ(v, 2.0f);
}

TEST(Attention, MissingBlocksAreErrors) {
    const Scenario s{2, 1, 64, 4, 6, {{23, 2}}};
    KvSetup u = build(s, 9);
    std::vector<float> out(u.q.size());
    auto& table = u.tables[0];
    EXPECT_EQ(table[3], -1);  // released below both windows: fine
    EXPECT_NO_THROW(backends().one->attention(u.params(s, out.data())));
    // A released block inside the window.
    const int32_t saved = table[4];
    table[4] = -1;
    EXPECT_THROW(backends().three->attention(u.params(s, out.data())), Error);
    table[4] = saved;
    // A table too short for the query position.
    u.table_len[1] = 5;
    EXPECT_THROW(backends().three->attention(u.params(s, out.data())), Error);
    u.table_len[1] = int32_t(table.size());
    // A physical id beyond the pool.
    table[5] = int32_t(u.n_blocks);
    EXPECT_THROW(backends().three->attention(u.params(s, out.data())), Error);
}

}  // namespace
}  // namespace hf2q::ops_test

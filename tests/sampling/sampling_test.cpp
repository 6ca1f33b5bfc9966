// Tests for runtime/sampling: every stage against an independent computation, the
// sampled distribution against the softmax, determinism and the large-vocab paths.
#include "runtime/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <set>
#include <utility>
#include <vector>

#include "core/error.h"

namespace hf2q::runtime {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<double> softmax(const std::vector<float>& logits, double t = 1.0) {
    const double mx = *std::max_element(logits.begin(), logits.end());
    std::vector<double> p(logits.size());
    double sum = 0;
    for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp((logits[i] - mx) / t);
    for (double& x : p) x /= sum;
    return p;
}

// Pseudo-random logits in [-scale, scale] from a fixed LCG, independent of the sampler's PRNG.
std::vector<float> make_logits(size_t n, uint64_t seed, float scale) {
    std::vector<float> v(n);
    uint64_t x = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    for (float& f : v) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        f = scale * (static_cast<float>(x >> 40) / static_cast<float>(1ULL << 24) * 2.0f - 1.0f);
    }
    return v;
}

std::vector<int> draw_counts(Sampler& s, const std::vector<float>& logits, int n_draws) {
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < n_draws; ++i)
        ++counts[static_cast<size_t>(s.sample(logits.data(), static_cast<int64_t>(logits.size())))];
    return counts;
}

double chi_square(const std::vector<int>& counts, const std::vector<double>& p, int n) {
    double chi = 0;
    for (size_t i = 0; i < p.size(); ++i) {
        const double e = p[i] * n;
        if (e == 0) {
            EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
            continue;
        }
        chi += (counts[i] - e) * (counts[i] - e) / e;
    }
    return chi;
}

TEST(Rng, MatchesReferenceXoshiro256StarStar) {
    // Reference values from an independent implementation of splitmix64 + xoshiro256**.
    Rng r0(0);
    EXPECT_EQ(r0.next_u64(), 0x99ec5f36cb75f2b4ULL);
    EXPECT_EQ(r0.next_u64(), 0xbf6e1f784956452aULL);
    EXPECT_EQ(r0.next_u64(), 0x1a5f849d4933e6e0ULL);
    Rng r42(42);
    EXPECT_EQ(r42.next_u64(), 0x15780b2e0c2ec716ULL);
    double sum = 0;
    for (int i = 0; i < 10000; ++i) {
        const double u = r42.next_double();
        ASSERT_GE(u, 0.0);
        ASSERT_LT(u, 1.0);
        sum += u;
    }
    EXPECT_NEAR(sum / 10000, 0.5, 0.01);
}

TEST(Sampling, GreedyPicksArgmaxLowestIdOnTies) {
    SamplerParams p;
    p.temperature = 0;
    Sampler s(p);
    std::vector<float> l = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f};
    EXPECT_EQ(s.sample(l.data(), 5), 1);
    l[4] = 3.5f;
    EXPECT_EQ(s.sample(l.data(), 5), 4);
    std::vector<float> all_neg = {-kInf, -5.0f, -kInf};
    EXPECT_EQ(s.sample(all_neg.data(), 3), 1);
    const auto big = make_logits(262144, 7, 10.0f);
    const auto expect = std::max_element(big.begin(), big.end()) - big.begin();
    EXPECT_EQ(s.sample(big.data(), static_cast<int64_t>(big.size())), expect);
}

// is_greedy holds exactly for the settings whose sample() is the plain argmax, so the
// argmax computed on the device can replace the sampler.
TEST(Sampling, IsGreedyOnlyWhenSamplingIsTheArgmax) {
    SamplerParams p;
    EXPECT_FALSE(is_greedy(p)) << "defaults sample at temperature 1";
    p.temperature = 0;
    EXPECT_TRUE(is_greedy(p));
    p.temperature = 0.7f;
    EXPECT_FALSE(is_greedy(p));
    p.top_k = 1;
    p.top_p = 0.5f;
    p.min_p = 0.9f;
    EXPECT_TRUE(is_greedy(p)) << "top-k 1 keeps only the argmax; top-p and min-p keep the best";
    p.top_k = 2;
    EXPECT_FALSE(is_greedy(p));
    p.top_k = 0;
    p.temperature = 0;
    p.repeat_penalty = 1.1f;
    EXPECT_FALSE(is_greedy(p));
    p.penalty_last_n = 0;  // no window: penalties off
    EXPECT_TRUE(is_greedy(p));
    p.penalty_last_n = 64;
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.5f;
    EXPECT_FALSE(is_greedy(p));
    p.presence_penalty = 0.0f;
    p.frequency_penalty = -0.5f;
    EXPECT_FALSE(is_greedy(p));
    p.frequency_penalty = 0.0f;
    p.logit_bias[3] = 0.0f;
    EXPECT_FALSE(is_greedy(p));

    // Every greedy setting samples the argmax (ties included), after any history.
    std::vector<float> l = make_logits(5000, 11, 4.0f);
    l[4000] = l[17] = l[2500] = 9.0f;
    const std::vector<int32_t> history = {17, 4000, 2500, 17};
    for (const auto& [temp, k] : std::vector<std::pair<float, int32_t>>{{0.0f, 0}, {0.0f, 5}, {1.5f, 1}}) {
        SamplerParams g;
        g.temperature = temp;
        g.top_k = k;
        g.top_p = 0.3f;
        g.seed = 5;
        ASSERT_TRUE(is_greedy(g));
        Sampler s(g);
        for (int32_t t : history) s.accept(t);
        for (int i = 0; i < 3; ++i) EXPECT_EQ(s.sample(l.data(), 5000), 17) << "temperature " << temp << " top_k " << k;
    }
}

TEST(Sampling, GreedyIgnoresSeed) {
    const auto l = make_logits(1000, 3, 5.0f);
    SamplerParams p;
    p.temperature = 0;
    p.seed = 1;
    Sampler a(p);
    p.seed = 2;
    Sampler b(p);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(a.sample(l.data(), 1000), b.sample(l.data(), 1000));
}

TEST(Sampling, TemperatureOneMatchesSoftmax) {
    const std::vector<float> l = {1.0f, 0.5f, -0.3f, 2.0f, 0.0f, -1.5f, 1.2f, 0.7f};
    SamplerParams p;
    p.seed = 1234;
    Sampler s(p);
    const int n = 20000;
    const auto counts = draw_counts(s, l, n);
    // 7 degrees of freedom: P(chi2 > 29.88) = 1e-4.
    EXPECT_LT(chi_square(counts, softmax(l), n), 29.88);
    // The same counts are far from a flattened distribution, so the bound can fail.
    EXPECT_GT(chi_square(counts, softmax(l, 2.0), n), 100.0);
}

TEST(Sampling, TemperatureScalesDistribution) {
    const std::vector<float> l = {1.0f, 0.5f, -0.3f, 2.0f, 0.0f, -1.5f, 1.2f, 0.7f};
    for (float t : {0.5f, 1.7f}) {
        SamplerParams p;
        p.temperature = t;
        p.seed = 99;
        Sampler s(p);
        const int n = 20000;
        const auto counts = draw_counts(s, l, n);
        EXPECT_LT(chi_square(counts, softmax(l, t), n), 29.88) << "temperature " << t;
    }
}

TEST(Sampling, TopKNeverLeavesItsSet) {
    const auto l = make_logits(32, 11, 3.0f);
    SamplerParams p;
    p.top_k = 3;
    p.seed = 5;
    Sampler s(p);
    std::vector<int> order(32);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return l[static_cast<size_t>(a)] > l[static_cast<size_t>(b)]; });
    const std::set<int> allowed(order.begin(), order.begin() + 3);
    const auto counts = draw_counts(s, l, 5000);
    std::vector<double> expect(32, 0.0);
    double z = 0;
    for (int id : allowed)
        z += expect[static_cast<size_t>(id)] = std::exp(l[static_cast<size_t>(id)]);
    for (double& e : expect) e /= z;
    for (int id = 0; id < 32; ++id) {
        if (allowed.count(id)) {
            EXPECT_GT(counts[static_cast<size_t>(id)], 0)
                << "top-k member " << id << " never drawn";
        } else {
            EXPECT_EQ(counts[static_cast<size_t>(id)], 0) << "token " << id << " outside top-k";
        }
    }
    EXPECT_LT(chi_square(counts, expect, 5000), 18.42);  // 2 dof, p = 1e-4
}

TEST(Sampling, HeapTopKEqualsFilterTopK) {
    // Coarse values so many logits tie; some tokens banned.
    auto l = make_logits(1000, 4, 3.0f);
    for (size_t i = 0; i < l.size(); ++i) {
        l[i] = std::round(l[i] * 2.0f) / 2.0f;
        if (i % 7 == 3) l[i] = -kInf;
    }
    for (int32_t k : {1, 5, 37, 856, 857, 1000, 5000}) {
        Candidates a, b;
        init_candidates(l.data(), 1000, a);
        top_k(a, k);
        init_candidates_top_k(l.data(), 1000, k, b);
        ASSERT_EQ(a.data.size(), b.data.size()) << "k=" << k;
        EXPECT_EQ(a.data.size(), std::min<size_t>(static_cast<size_t>(k), 857));
        for (size_t i = 0; i < a.data.size(); ++i) {
            ASSERT_EQ(a.data[i].id, b.data[i].id) << "k=" << k << " rank " << i;
            ASSERT_EQ(a.data[i].logit, b.data[i].logit);
        }
        EXPECT_TRUE(a.sorted && b.sorted);
        for (size_t i = 1; i < b.data.size(); ++i) {
            ASSERT_TRUE(
                b.data[i - 1].logit > b.data[i].logit ||
                (b.data[i - 1].logit == b.data[i].logit && b.data[i - 1].id < b.data[i].id));
        }
    }
}

TEST(Sampling, TopPNeverLeavesNucleus) {
    // probabilities proportional to 8,4,2,1,1 (sum 16): nucleus for p=0.7 is {0,1}
    // (0.5, 0.75), for p=0.8 it is {0,1,2} (0.875).
    const std::vector<float> l = {std::log(8.f), std::log(4.f), std::log(2.f), 0.0f, 0.0f};
    for (auto [top_p, size] : {std::pair{0.7f, 2}, std::pair{0.8f, 3}, std::pair{0.5f, 1}}) {
        SamplerParams p;
        p.top_p = top_p;
        p.seed = 77;
        Sampler s(p);
        const auto counts = draw_counts(s, l, 4000);
        for (int id = 0; id < 5; ++id) {
            if (id < size) {
                EXPECT_GT(counts[static_cast<size_t>(id)], 0) << "top_p " << top_p << " id " << id;
            } else {
                EXPECT_EQ(counts[static_cast<size_t>(id)], 0) << "top_p " << top_p << " id " << id;
            }
        }
    }
}

TEST(Sampling, MinPNeverBelowThreshold) {
    // p_max = 8/16; min_p 0.2 keeps p >= 0.1 -> {0,1,2} (2/16 = 0.125), drops 1/16 tokens.
    const std::vector<float> l = {std::log(8.f), std::log(4.f), std::log(2.f), 0.0f, 0.0f};
    SamplerParams p;
    p.min_p = 0.2f;
    p.seed = 8;
    Sampler s(p);
    const auto counts = draw_counts(s, l, 4000);
    EXPECT_GT(counts[2], 0);
    EXPECT_EQ(counts[3], 0);
    EXPECT_EQ(counts[4], 0);
    Candidates c;
    init_candidates(l.data(), 5, c);
    min_p(c, 0.3f);  // keeps p >= 0.15 -> {0,1}
    ASSERT_EQ(c.data.size(), 2u);
    EXPECT_EQ(c.data[0].id, 0);
    EXPECT_EQ(c.data[1].id, 1);
}

TEST(Sampling, SameSeedSameSequenceDifferentSeedDiffers) {
    const auto l = make_logits(500, 21, 2.0f);
    SamplerParams p;
    p.seed = 42;
    p.top_k = 100;
    Sampler a(p), b(p);
    p.seed = 43;
    Sampler c(p);
    std::vector<int32_t> sa, sb, sc;
    for (int i = 0; i < 200; ++i) {
        sa.push_back(a.sample(l.data(), 500));
        sb.push_back(b.sample(l.data(), 500));
        sc.push_back(c.sample(l.data(), 500));
    }
    EXPECT_EQ(sa, sb);
    EXPECT_NE(sa, sc);
    a.reset();
    for (int i = 0; i < 200; ++i) ASSERT_EQ(a.sample(l.data(), 500), sa[static_cast<size_t>(i)]);
}

TEST(Sampling, PenaltiesChangeExactlyTheIntendedLogits) {
    std::vector<float> l = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f, 0.0f};
    const std::vector<float> orig = l;
    SamplerParams p;
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 0.25f;
    p.presence_penalty = 0.5f;
    const std::vector<int32_t> window = {0, 1, 0, 3, 5};
    std::vector<int32_t> scratch;
    apply_penalties(l.data(), 6, window, p, scratch);
    EXPECT_FLOAT_EQ(l[0], 2.0f / 2 - 2 * 0.25f - 0.5f);
    EXPECT_FLOAT_EQ(l[1], -2.0f * 2 - 0.25f - 0.5f);
    EXPECT_EQ(l[2], orig[2]);
    EXPECT_FLOAT_EQ(l[3], 0.5f / 2 - 0.25f - 0.5f);
    EXPECT_EQ(l[4], orig[4]);
    EXPECT_FLOAT_EQ(l[5], 0.0f - 0.25f - 0.5f);
    std::vector<int32_t> bad = {6};
    EXPECT_THROW(apply_penalties(l.data(), 6, bad, p, scratch), Error);
}

TEST(Sampling, PenaltyWindowIsTheLastNAccepted) {
    SamplerParams p;
    p.temperature = 0;
    p.repeat_penalty = 100.0f;
    p.penalty_last_n = 2;
    Sampler s(p);
    const std::vector<float> l = {5.0f, 4.0f, 3.0f, 1.0f};
    EXPECT_EQ(s.sample(l.data(), 4), 0);
    s.accept(0);
    EXPECT_EQ(s.sample(l.data(), 4), 1);
    s.accept(1);
    EXPECT_EQ(s.sample(l.data(), 4), 2);
    s.accept(2);  // window {1, 2}: token 0 is free again
    EXPECT_EQ(s.sample(l.data(), 4), 0);
    for (int i = 0; i < 10; ++i) s.accept(3);
    ASSERT_EQ(s.history().size(), 2u);
    EXPECT_EQ(s.history()[0], 3);
    SamplerParams all = p;
    all.penalty_last_n = -1;
    Sampler u(all);
    for (int i = 0; i < 100; ++i) u.accept(i % 4);
    EXPECT_EQ(u.history().size(), 100u);
}

TEST(Sampling, LogitBiasBansAndShifts) {
    const std::vector<float> l = {1.0f, 5.0f, 2.0f, 0.0f};
    SamplerParams p;
    p.temperature = 0;
    p.logit_bias = {{1, -kInf}};
    Sampler g(p);
    EXPECT_EQ(g.sample(l.data(), 4), 2);
    p.logit_bias = {{3, 10.0f}};
    Sampler g2(p);
    EXPECT_EQ(g2.sample(l.data(), 4), 3);

    p.temperature = 1.0f;
    p.logit_bias = {{1, -kInf}, {2, -kInf}};
    Sampler s(p);
    const auto counts = draw_counts(s, l, 3000);
    EXPECT_EQ(counts[1], 0);
    EXPECT_EQ(counts[2], 0);
    EXPECT_GT(counts[0], 0);
    EXPECT_GT(counts[3], 0);

    p.logit_bias = {{0, -kInf}, {1, -kInf}, {2, -kInf}, {3, -kInf}};
    Sampler none(p);
    EXPECT_THROW(none.sample(l.data(), 4), Error);
    p.logit_bias = {{4, 1.0f}};
    Sampler out_of_range(p);
    EXPECT_THROW(out_of_range.sample(l.data(), 4), Error);
}

TEST(Sampling, ValidateRejectsBadParams) {
    auto bad = [](auto mutate) {
        SamplerParams p;
        mutate(p);
        EXPECT_THROW(Sampler{p}, Error);
    };
    bad([](SamplerParams& p) { p.temperature = -0.1f; });
    bad([](SamplerParams& p) { p.temperature = std::nanf(""); });
    bad([](SamplerParams& p) { p.top_k = -1; });
    bad([](SamplerParams& p) { p.top_p = 0.0f; });
    bad([](SamplerParams& p) { p.top_p = 1.5f; });
    bad([](SamplerParams& p) { p.min_p = -0.1f; });
    bad([](SamplerParams& p) { p.repeat_penalty = 0.0f; });
    bad([](SamplerParams& p) { p.penalty_last_n = -2; });
    bad([](SamplerParams& p) { p.logit_bias[-1] = 0.0f; });
    bad([](SamplerParams& p) { p.logit_bias[0] = kInf; });
    EXPECT_NO_THROW(Sampler{SamplerParams{}});
}

TEST(Sampling, RejectsNanAndBadVocab) {
    std::vector<float> l = {1.0f, std::nanf(""), 0.0f};
    Sampler s(SamplerParams{});
    EXPECT_THROW(s.sample(l.data(), 3), Error);
    SamplerParams g;
    g.temperature = 0;
    Sampler greedy(g);
    EXPECT_THROW(greedy.sample(l.data(), 3), Error);
    EXPECT_THROW(s.sample(l.data(), 0), Error);
}

// Reference: full sort, then the same stages and draw written out plainly.
int32_t reference_sample(const std::vector<float>& l, const SamplerParams& p, Rng& rng) {
    std::vector<TokenLogit> c;
    for (size_t i = 0; i < l.size(); ++i) c.push_back({static_cast<int32_t>(i), l[i]});
    // top-k and top-p leave the list sorted; min-p alone keeps id order.
    if (p.top_k > 0 || p.top_p < 1.0f) {
        std::sort(c.begin(), c.end(), [](auto& a, auto& b) {
            return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
        });
    }
    const float mx = std::max_element(c.begin(), c.end(), [](auto& a, auto& b) {
                         return a.logit < b.logit;
                     })->logit;
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < c.size())
        c.resize(static_cast<size_t>(p.top_k));
    if (p.top_p < 1.0f) {
        double total = 0;
        for (auto& t : c) total += static_cast<double>(std::exp(t.logit - c[0].logit));
        double cum = 0;
        for (size_t i = 0; i < c.size(); ++i) {
            cum += static_cast<double>(std::exp(c[i].logit - c[0].logit));
            if (cum >= p.top_p * total) {
                c.resize(i + 1);
                break;
            }
        }
    }
    const float thr = mx + std::log(p.min_p);
    if (p.min_p > 0) std::erase_if(c, [&](auto& t) { return t.logit < thr; });
    Candidates cc{c, p.top_k > 0 || p.top_p < 1.0f};
    apply_temperature(cc, p.temperature);
    std::vector<double> w;
    return sample_softmax(cc, rng, w);
}

TEST(Sampling, LargeVocabMatchesFullSortReference) {
    const int64_t n = 262144;
    const auto l = make_logits(static_cast<size_t>(n), 5, 12.0f);
    struct Cfg {
        int32_t k;
        float p;
        float m;
        float t;
    };
    for (const Cfg cfg : {Cfg{40, 0.95f, 0.05f, 0.8f}, Cfg{0, 0.9f, 0.0f, 1.0f},
                          Cfg{64, 1.0f, 0.0f, 1.0f}, Cfg{0, 1.0f, 0.1f, 0.7f}}) {
        SamplerParams p;
        p.top_k = cfg.k;
        p.top_p = cfg.p;
        p.min_p = cfg.m;
        p.temperature = cfg.t;
        p.seed = 1000 + static_cast<uint64_t>(cfg.k);
        Sampler s(p);
        Rng ref_rng(p.seed);
        for (int i = 0; i < 3; ++i) {
            EXPECT_EQ(s.sample(l.data(), n), reference_sample(l, p, ref_rng))
                << "k=" << cfg.k << " p=" << cfg.p << " min_p=" << cfg.m << " draw " << i;
        }
    }
}

TEST(Sampling, TimingLargeVocab) {
    // Reports time per call at Gemma 4's vocabulary size; not a pass/fail criterion.
    const int64_t n = 262144;
    const auto l = make_logits(static_cast<size_t>(n), 9, 12.0f);
    struct Cfg {
        const char* name;
        SamplerParams p;
    };
    SamplerParams greedy;
    greedy.temperature = 0;
    SamplerParams topk;
    topk.top_k = 64;
    topk.top_p = 0.95f;
    SamplerParams topp;
    topp.top_p = 0.95f;
    SamplerParams plain;
    SamplerParams pen = topk;
    pen.repeat_penalty = 1.1f;
    pen.logit_bias = {{5, -kInf}};
    for (const Cfg& cfg :
         {Cfg{"greedy", greedy}, Cfg{"top_k=64,top_p=0.95", topk}, Cfg{"top_p=0.95", topp},
          Cfg{"plain t=1", plain}, Cfg{"top_k+penalties+bias", pen}}) {
        Sampler s(cfg.p);
        for (int i = 0; i < 64; ++i) s.accept(i);
        s.sample(l.data(), n);  // first call sizes the scratch
        const int iters = 10;
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) s.sample(l.data(), n);
        const std::chrono::duration<double, std::micro> dt = std::chrono::steady_clock::now() - t0;
        std::printf("  sample() n_vocab=262144 %-22s %9.1f us/call\n", cfg.name,
                    dt.count() / iters);
    }
}

// device_top_k: exactly the samplers whose sample() reads only a row's top-k candidates.
TEST(Sampling, DeviceTopKOnlyForTopKSamplersWithoutPenaltiesOrBias) {
    SamplerParams p;
    p.top_k = 64;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    EXPECT_EQ(device_top_k(p), 64);
    p.top_k = kMaxTopK;
    EXPECT_EQ(device_top_k(p), kMaxTopK);
    p.top_k = kMaxTopK + 1;
    EXPECT_EQ(device_top_k(p), 0) << "more candidates than a decode returns";
    p.top_k = 0;
    EXPECT_EQ(device_top_k(p), 0) << "no top-k: every logit is read";
    p.top_k = 40;
    p.temperature = 0.0f;
    EXPECT_EQ(device_top_k(p), 0) << "greedy: the argmax path";
    p.temperature = 0.8f;
    p.repeat_penalty = 1.1f;
    EXPECT_EQ(device_top_k(p), 0) << "penalties change logits before top-k";
    p.penalty_last_n = 0;
    EXPECT_EQ(device_top_k(p), 40) << "a window of 0 switches the penalties off";
    p.logit_bias[3] = 1.0f;
    EXPECT_EQ(device_top_k(p), 0) << "a bias changes logits before top-k";
}

// sample_top on a row's top-k candidates (the sampler's own top-k stage computed
// apart, as a device returns them) draws the token sample() draws from the whole
// row, draw after draw (the PRNG advances alike), over top-p, min-p and temperature
// settings, and with fewer candidates than k (most logits -inf).
TEST(Sampling, SampleTopEqualsSampleOnTheWholeRow) {
    struct Case {
        int32_t k;
        float t, top_p, min_p;
    };
    const Case cases[] = {{40, 0.7f, 0.9f, 0.0f}, {64, 1.0f, 0.95f, 0.05f}, {256, 1.5f, 1.0f, 0.0f},
                          {2, 1.0f, 1.0f, 0.0f},  {17, 0.3f, 0.5f, 0.2f},   {64, 4.0f, 0.99f, 0.0f}};
    for (const Case& c : cases) {
        for (uint64_t seed : {1u, 2u, 3u}) {
            std::vector<float> logits = make_logits(5000, seed, 8.0f);
            for (size_t i = 0; i < logits.size(); i += 7) logits[i] = std::round(logits[i]);  // ties
            if (seed == 3)
                for (size_t i = 0; i < logits.size(); ++i)
                    if (i % 400 != 0) logits[i] = -kInf;  // 13 finite logits
            SamplerParams p;
            p.top_k = c.k;
            p.temperature = c.t;
            p.top_p = c.top_p;
            p.min_p = c.min_p;
            p.seed = seed * 11;
            ASSERT_EQ(device_top_k(p), c.k);
            Candidates top;
            init_candidates_top_k(logits.data(), static_cast<int64_t>(logits.size()), c.k, top);
            std::vector<TopLogit> list;
            for (const TokenLogit& t : top.data) list.push_back({t.id, t.logit});
            Sampler whole(p), from_top(p);
            for (int draw = 0; draw < 200; ++draw)
                ASSERT_EQ(from_top.sample_top(list), whole.sample(logits.data(), static_cast<int64_t>(logits.size())))
                    << "k " << c.k << " seed " << seed << " draw " << draw;
        }
    }
}

TEST(Sampling, SampleTopRejectsOtherSamplersAndLists) {
    SamplerParams p;
    p.top_k = 4;
    Sampler s(p);
    const std::vector<TopLogit> five = {{1, 5.0f}, {2, 4.0f}, {3, 3.0f}, {4, 2.0f}, {5, 1.0f}};
    EXPECT_THROW(s.sample_top(five), Error) << "more candidates than top_k";
    EXPECT_THROW(s.sample_top({}), Error) << "no candidate";
    EXPECT_NO_THROW(s.sample_top(std::span(five).first(4)));
    p.top_k = 0;
    Sampler whole_row(p);
    EXPECT_THROW(whole_row.sample_top(std::span(five).first(1)), Error) << "a sampler that reads every logit";
}

}  // namespace
}  // namespace hf2q::runtime

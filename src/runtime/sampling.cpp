#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace hf2q::runtime {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Total order used by every sorting stage: logit descending, then id ascending, so the
// kept set and its order never depend on the sort algorithm.
bool higher(const TokenLogit& a, const TokenLogit& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Whether the penalty settings change any logit they are applied to; penalties_active:
// and a window of tokens is kept for them.
bool penalties_change_logits(const SamplerParams& p) {
    return p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}
bool penalties_active(const SamplerParams& p) {
    return p.penalty_last_n != 0 && penalties_change_logits(p);
}

void check_logit(float v, int64_t id) {
    if (std::isnan(v)) fail("sampler: logit of token ", id, " is NaN");
    if (v == std::numeric_limits<float>::infinity())
        fail("sampler: logit of token ", id, " is +inf");
}

void check_vocab(int64_t n_vocab) {
    if (n_vocab <= 0 || n_vocab > std::numeric_limits<int32_t>::max()) {
        fail("sampler: n_vocab ", n_vocab, " is out of range [1, 2^31)");
    }
}

float max_logit(const Candidates& c) {
    if (c.sorted) return c.data.front().logit;
    float m = kNegInf;
    for (const TokenLogit& t : c.data) m = std::max(m, t.logit);
    return m;
}

// Softmax numerator. Single-precision exp is plenty for sampling weights and several
// times cheaper over 262k entries; sums are accumulated in double.
double weight(float logit, float max) {
    return static_cast<double>(std::exp(logit - max));
}

uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

}  // namespace

void validate(const SamplerParams& p) {
    if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
        fail("sampling: temperature ", p.temperature, " must be finite and >= 0");
    }
    if (p.top_k < 0) fail("sampling: top_k ", p.top_k, " must be >= 0 (0 = off)");
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
        fail("sampling: top_p ", p.top_p, " must be in (0, 1]");
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
        fail("sampling: min_p ", p.min_p, " must be in [0, 1]");
    if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty)) {
        fail("sampling: repeat_penalty ", p.repeat_penalty, " must be finite and > 0");
    }
    if (!std::isfinite(p.presence_penalty)) fail("sampling: presence_penalty must be finite");
    if (!std::isfinite(p.frequency_penalty)) fail("sampling: frequency_penalty must be finite");
    if (p.penalty_last_n < -1) {
        fail("sampling: penalty_last_n ", p.penalty_last_n, " must be >= -1 (-1 = all tokens)");
    }
    for (const auto& [id, bias] : p.logit_bias) {
        if (id < 0) fail("sampling: logit_bias token id ", id, " is negative");
        if (std::isnan(bias) || bias == std::numeric_limits<float>::infinity()) {
            fail("sampling: logit_bias for token ", id, " must be finite or -inf, got ", bias);
        }
    }
}

// top_k 1 with temperature > 0 keeps only the argmax candidate (top-p and min-p always
// keep the best one) and draws it with probability 1; only the PRNG state differs,
// which no later greedy step reads.
bool is_greedy(const SamplerParams& p) {
    return (p.temperature == 0.0f || p.top_k == 1) && !penalties_active(p) && p.logit_bias.empty();
}

int32_t device_top_k(const SamplerParams& p) {
    const bool top_k_only = p.temperature > 0.0f && p.top_k >= 1 && p.top_k <= kMaxTopK;
    return top_k_only && !penalties_active(p) && p.logit_bias.empty() ? p.top_k : 0;
}

void Rng::reseed(uint64_t seed) {
    // splitmix64 expands one word into a well-mixed, never all-zero state.
    uint64_t x = seed;
    for (uint64_t& w : s_) {
        x += 0x9e3779b97f4a7c15ULL;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        w = z ^ (z >> 31);
    }
}

uint64_t Rng::next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
}

void apply_penalties(float* logits, int64_t n_vocab, std::span<const int32_t> window,
                     const SamplerParams& p, std::vector<int32_t>& scratch) {
    if (!penalties_change_logits(p) || window.empty()) return;
    scratch.assign(window.begin(), window.end());
    std::sort(scratch.begin(), scratch.end());
    for (size_t i = 0; i < scratch.size();) {
        const int32_t id = scratch[i];
        size_t j = i;
        while (j < scratch.size() && scratch[j] == id) ++j;
        const auto count = static_cast<float>(j - i);
        i = j;
        if (id < 0 || id >= n_vocab) {
            fail("sampler: penalty history holds token ", id, ", outside n_vocab ", n_vocab);
        }
        float& l = logits[id];
        if (p.repeat_penalty != 1.0f) l = l <= 0.0f ? l * p.repeat_penalty : l / p.repeat_penalty;
        l -= count * p.frequency_penalty + p.presence_penalty;
    }
}

void apply_logit_bias(float* logits, int64_t n_vocab, const std::map<int32_t, float>& bias) {
    for (const auto& [id, b] : bias) {
        if (id < 0 || id >= n_vocab) {
            fail("sampler: logit_bias token ", id, " is outside n_vocab ", n_vocab);
        }
        logits[id] += b;
    }
}

int32_t argmax(const float* logits, int64_t n_vocab) {
    check_vocab(n_vocab);
    float best = kNegInf;
    int64_t best_id = -1;
    for (int64_t i = 0; i < n_vocab; ++i) {
        const float v = logits[i];
        if (v > best) {
            best = v;
            best_id = i;
        } else if (std::isnan(v)) {
            check_logit(v, i);
        }
    }
    if (best_id < 0) fail("sampler: every token has logit -inf (all banned)");
    check_logit(best, best_id);
    return static_cast<int32_t>(best_id);
}

void init_candidates(const float* logits, int64_t n_vocab, Candidates& out) {
    check_vocab(n_vocab);
    out.data.clear();
    out.data.reserve(static_cast<size_t>(n_vocab));
    out.sorted = false;
    for (int64_t i = 0; i < n_vocab; ++i) {
        const float v = logits[i];
        if (!(v > kNegInf)) {
            if (std::isnan(v)) check_logit(v, i);
            continue;
        }
        check_logit(v, i);
        out.data.push_back({static_cast<int32_t>(i), v});
    }
    if (out.data.empty()) fail("sampler: every token has logit -inf (all banned)");
}

void init_candidates_top_k(const float* logits, int64_t n_vocab, int32_t k, Candidates& out) {
    check_vocab(n_vocab);
    HF2Q_ASSERT(k > 0);
    auto& heap = out.data;  // heap ordered by higher(): front is the weakest kept entry
    heap.clear();
    heap.reserve(static_cast<size_t>(k));
    for (int64_t i = 0; i < n_vocab; ++i) {
        const float v = logits[i];
        if (!(v > kNegInf)) {
            if (std::isnan(v)) check_logit(v, i);
            continue;
        }
        const TokenLogit t{static_cast<int32_t>(i), v};
        if (heap.size() < static_cast<size_t>(k)) {
            check_logit(v, i);
            heap.push_back(t);
            std::push_heap(heap.begin(), heap.end(), higher);
        } else if (higher(t, heap.front())) {
            check_logit(v, i);
            std::pop_heap(heap.begin(), heap.end(), higher);
            heap.back() = t;
            std::push_heap(heap.begin(), heap.end(), higher);
        }
    }
    if (heap.empty()) fail("sampler: every token has logit -inf (all banned)");
    std::sort_heap(heap.begin(), heap.end(), higher);
    out.sorted = true;
}

void top_k(Candidates& c, int32_t k) {
    if (k <= 0) return;
    auto& d = c.data;
    const auto kk = static_cast<size_t>(k);
    if (kk < d.size()) {
        if (!c.sorted) {
            std::nth_element(d.begin(), d.begin() + static_cast<ptrdiff_t>(kk), d.end(), higher);
        }
        d.resize(kk);
    }
    if (!c.sorted) std::sort(d.begin(), d.end(), higher);
    c.sorted = true;
}

void top_p(Candidates& c, float p) {
    if (p >= 1.0f) return;
    auto& d = c.data;
    const size_t n = d.size();
    const float mx = max_logit(c);
    double total = 0.0;
    for (const TokenLogit& t : d) total += weight(t.logit, mx);
    const double target = static_cast<double>(p) * total;
    // Sort only as far as needed: the nucleus is usually a tiny fraction of a 262k vocab,
    // so order growing chunks of the best remaining candidates until the mass is reached.
    double cum = 0.0;
    size_t done = 0;
    while (done < n) {
        const size_t end = std::min(n, done == 0 ? size_t{256} : done * 4);
        if (!c.sorted) {
            if (end < n) {
                std::nth_element(d.begin() + static_cast<ptrdiff_t>(done),
                                 d.begin() + static_cast<ptrdiff_t>(end), d.end(), higher);
            }
            std::sort(d.begin() + static_cast<ptrdiff_t>(done),
                      d.begin() + static_cast<ptrdiff_t>(end), higher);
        }
        for (size_t i = done; i < end; ++i) {
            cum += weight(d[i].logit, mx);
            if (cum >= target) {
                d.resize(i + 1);
                c.sorted = true;
                return;
            }
        }
        done = end;
    }
    c.sorted = true;  // rounding kept everything
}

void min_p(Candidates& c, float p) {
    if (p <= 0.0f) return;
    const float threshold = max_logit(c) + std::log(p);
    std::erase_if(c.data, [threshold](const TokenLogit& t) { return t.logit < threshold; });
}

void apply_temperature(Candidates& c, float t) {
    HF2Q_ASSERT(t > 0.0f);
    // Shifting by the max first leaves the softmax unchanged and keeps a tiny t from
    // turning large logits into +inf (inf - inf would be NaN in the softmax).
    const float mx = max_logit(c);
    for (TokenLogit& x : c.data) x.logit = (x.logit - mx) / t;
}

int32_t sample_softmax(const Candidates& c, Rng& rng, std::vector<double>& weights) {
    HF2Q_ASSERT(!c.data.empty());
    const float mx = max_logit(c);
    weights.resize(c.data.size());
    double total = 0.0;
    for (size_t i = 0; i < c.data.size(); ++i) {
        weights[i] = weight(c.data[i].logit, mx);
        total += weights[i];
    }
    const double u = rng.next_double() * total;
    double cum = 0.0;
    size_t last_positive = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
        if (weights[i] <= 0.0) continue;
        cum += weights[i];
        last_positive = i;
        if (cum > u) return c.data[i].id;
    }
    return c.data[last_positive].id;  // u * total rounded up to the final sum
}

Sampler::Sampler(SamplerParams params) : params_(std::move(params)), rng_(params_.seed) {
    validate(params_);
}

void Sampler::accept(int32_t token) {
    if (token < 0) fail("sampler: accepted token id ", token, " is negative");
    if (params_.penalty_last_n == 0) return;
    history_.push_back(token);
    const auto n = static_cast<size_t>(params_.penalty_last_n);
    if (params_.penalty_last_n > 0 && history_.size() >= 2 * n) {
        history_.erase(history_.begin(), history_.end() - static_cast<ptrdiff_t>(n));
    }
}

std::span<const int32_t> Sampler::history() const {
    std::span<const int32_t> all(history_);
    if (params_.penalty_last_n < 0) return all;
    const auto n = std::min(all.size(), static_cast<size_t>(params_.penalty_last_n));
    return all.last(n);
}

void Sampler::reset() {
    history_.clear();
    rng_.reseed(params_.seed);
}

int32_t Sampler::sample(const float* logits, int64_t n_vocab) {
    check_vocab(n_vocab);
    const std::span<const int32_t> window = history();
    const bool penalise = !window.empty() && penalties_change_logits(params_);
    const float* src = logits;
    if (penalise || !params_.logit_bias.empty()) {
        work_.assign(logits, logits + n_vocab);  // reuses capacity after the first call
        apply_penalties(work_.data(), n_vocab, window, params_, count_scratch_);
        apply_logit_bias(work_.data(), n_vocab, params_.logit_bias);
        src = work_.data();
    }
    if (params_.temperature == 0.0f) return argmax(src, n_vocab);
    if (params_.top_k > 0) {
        init_candidates_top_k(src, n_vocab, params_.top_k, candidates_);
    } else {
        init_candidates(src, n_vocab, candidates_);
    }
    top_p(candidates_, params_.top_p);
    min_p(candidates_, params_.min_p);
    apply_temperature(candidates_, params_.temperature);
    return sample_softmax(candidates_, rng_, weights_);
}

// sample() without penalties and bias (device_top_k) runs init_candidates_top_k and
// then these stages: the candidates are that stage's output, computed elsewhere.
int32_t Sampler::sample_top(std::span<const TopLogit> top) {
    const int32_t k = device_top_k(params_);
    if (k == 0) fail("sampler: sample_top needs a top-k sampler without penalties or bias (device_top_k)");
    if (top.empty() || top.size() > static_cast<size_t>(k))
        fail("sampler: sample_top got ", top.size(), " candidates for top_k ", k);
    candidates_.data.clear();
    for (const TopLogit& t : top) candidates_.data.push_back({t.id, t.logit});
    candidates_.sorted = true;
    top_p(candidates_, params_.top_p);
    min_p(candidates_, params_.min_p);
    apply_temperature(candidates_, params_.temperature);
    return sample_softmax(candidates_, rng_, weights_);
}

}  // namespace hf2q::runtime

// Token sampling on the CPU from one row of logits (float[n_vocab], any backend).
//
// Stage order (as llama.cpp's default chain, see docs/sampling.md):
//   repetition/presence/frequency penalties -> logit bias -> top-k -> top-p -> min-p
//   -> temperature -> draw from the softmax.
// temperature == 0 stops after logit bias and returns the argmax (lowest id on ties);
// top-k/top-p/min-p cannot change the argmax, so they are skipped.
//
// Each stage is also a pure function below, so a device-side sampler can be checked
// against them stage by stage. SamplerParams is plain data a device sampler can take as is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "hf2q/engine.h"

namespace hf2q::runtime {

// Request-level sampling parameters. Defaults switch every stage off except
// temperature 1 (plain sampling from the softmax), as the OpenAI API does.
struct SamplerParams {
    float temperature = 1.0f;             // 0 = greedy argmax; must be >= 0 and finite
    int32_t top_k = 0;                    // keep the k highest logits; 0 = off
    float top_p = 1.0f;                   // nucleus mass in (0, 1]; 1 = off
    float min_p = 0.0f;                   // keep p >= min_p * p_max, in [0, 1]; 0 = off
    float repeat_penalty = 1.0f;          // > 0; 1 = off; logit > 0 divided, <= 0 multiplied
    float presence_penalty = 0.0f;        // subtracted once from every token seen in the window
    float frequency_penalty = 0.0f;       // subtracted once per occurrence in the window
    int32_t penalty_last_n = 64;          // window of accepted tokens for all penalties; -1 = all
    std::map<int32_t, float> logit_bias;  // token id -> added bias; -inf bans the token
    uint64_t seed = 0;                    // PRNG seed (xoshiro256**, seeded by splitmix64)
};

// Throws hf2q::Error naming the first invalid field.
void validate(const SamplerParams& params);

// True when Sampler::sample() always returns the plain argmax of the logits (lowest id
// on ties) and fails exactly where argmax() does: temperature 0 or top_k 1, with no
// stage that changes logits first (no active penalty, no logit bias). Such a sampler
// may be replaced by the argmax computed on the device (DecodeOutputs::argmax).
bool is_greedy(const SamplerParams& params);

// The k for which a row's top-k candidates (DecodeOutputs::top_k, computed on the
// device) are all Sampler::sample() reads of that row, or 0 where it needs the whole
// row: temperature above 0, top_k in [1, kMaxTopK], no active penalty and no logit
// bias (the stages that change logits before top-k). Then Sampler::sample_top() on
// those candidates returns what sample() returns on the logits.
int32_t device_top_k(const SamplerParams& params);

// One candidate token of the distribution being filtered.
struct TokenLogit {
    int32_t id;
    float logit;
};

// Candidate list shared by the filtering stages. `sorted` is true once the
// entries are ordered by logit descending, then id ascending.
struct Candidates {
    std::vector<TokenLogit> data;
    bool sorted = false;
};

// xoshiro256** (Blackman & Vigna), state expanded from the seed with splitmix64.
// Fixed algorithm so the same seed gives the same tokens on every platform.
class Rng {
  public:
    explicit Rng(uint64_t seed = 0) { reseed(seed); }
    void reseed(uint64_t seed);
    uint64_t next_u64();
    // Uniform in [0, 1) from the top 53 bits.
    double next_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  private:
    uint64_t s_[4];
};

// ---- stages (pure functions) ---------------------------------------------------------
// Penalties over `window` (the most recent accepted tokens, any order). For each distinct
// id with count c: repeat penalty first (llama.cpp), then
// logit -= c * frequency_penalty + (c > 0) * presence_penalty (OpenAI).
// `scratch` is reused to count ids. Ids outside [0, n_vocab) throw hf2q::Error.
void apply_penalties(float* logits, int64_t n_vocab, std::span<const int32_t> window,
                     const SamplerParams& params, std::vector<int32_t>& scratch);

// Adds each bias; ids outside [0, n_vocab) throw hf2q::Error.
void apply_logit_bias(float* logits, int64_t n_vocab, const std::map<int32_t, float>& bias);

// Index of the largest logit, lowest id on ties. Throws on NaN, on n_vocab <= 0, and
// when every logit is -inf (every token banned).
int32_t argmax(const float* logits, int64_t n_vocab);

// Fills `out` with every token whose logit is not -inf, in id order (unsorted).
// Throws on NaN and when no token is left.
void init_candidates(const float* logits, int64_t n_vocab, Candidates& out);

// init_candidates() followed by top_k(k) in one pass with a k-entry heap: O(n_vocab)
// comparisons, no n_vocab-sized candidate list. k must be > 0.
void init_candidates_top_k(const float* logits, int64_t n_vocab, int32_t k, Candidates& out);

// Keeps the k highest (ties: lower id first); result is sorted. k <= 0 or
// k >= size is a no-op except for sorting when k > 0.
void top_k(Candidates& c, int32_t k);

// Keeps the smallest prefix (by logit descending) whose softmax mass reaches p;
// always at least one token; result is sorted. p >= 1 is a no-op.
void top_p(Candidates& c, float p);

// Keeps tokens with softmax probability >= p * max probability, i.e.
// logit >= max_logit + log(p). Keeps order. p <= 0 is a no-op.
void min_p(Candidates& c, float p);

// Divides every logit by t (t > 0).
void apply_temperature(Candidates& c, float t);

// Draws one id from the softmax of the candidates' logits with one uniform draw u:
// the first candidate (in list order) whose cumulative weight exceeds u * total.
// `weights` is scratch ([c.data.size()] softmax numerators, reused between calls).
int32_t sample_softmax(const Candidates& c, Rng& rng, std::vector<double>& weights);

// ---- stateful sampler -------------------------------------------------------------------
// Keeps the penalty history and all scratch buffers: after the first call with a given
// n_vocab, sample() does not allocate. Not thread-safe; use one Sampler per sequence.
class Sampler {
  public:
    explicit Sampler(SamplerParams params);  // validates

    // Picks the next token from logits[0..n_vocab). Does not record it: call accept().
    int32_t sample(const float* logits, int64_t n_vocab);
    // The same pick from a row's top-k candidates, as Context::top_k returns them for
    // k = device_top_k(params()) (non-zero): the k largest logits above -inf, largest
    // first, the lower id first among equal logits (the row's error cases are
    // Context::top_k's to report). Runs top-p, min-p, temperature and the draw on them.
    int32_t sample_top(std::span<const TopLogit> top);

    // Records a token (prompt or generated) in the penalty history.
    void accept(int32_t token);

    // Clears the history and restarts the PRNG from params().seed.
    void reset();

    const SamplerParams& params() const { return params_; }

    // Penalty window: the last min(penalty_last_n, accepted) tokens, oldest first.
    std::span<const int32_t> history() const;

  private:
    SamplerParams params_;
    Rng rng_;
    // Accepted tokens, oldest first. With a finite window it is trimmed to the last
    // penalty_last_n entries once it reaches twice that, so accept() is amortised O(1)
    // and the window is always one contiguous span.
    std::vector<int32_t> history_;
    std::vector<int32_t> count_scratch_;
    std::vector<float> work_;  // penalised/biased copy of the logits, [n_vocab]
    Candidates candidates_;
    std::vector<double> weights_;
};

}  // namespace hf2q::runtime

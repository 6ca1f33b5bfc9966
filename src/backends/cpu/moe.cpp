// MoE routing per token (Gemma 4 router after its projection):
//   probs = softmax(logits) in f32 (max-subtracted, sum accumulated in expert order)
//   top-k by repeated selection: largest prob first, lower expert index on ties
//   w_i = probs[id_i] / Σ_selected probs (summed in selection order), × expert_scale[id_i]
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_ops.h"
#include "core/error.h"

namespace hf2q::cpu {
namespace {

// probs: [n_experts] scratch, consumed (selected entries are overwritten).
void route_token(const ops::MoeRouteParams& p, int64_t t, float* probs) {
    const int64_t ne = p.n_experts;
    const float* x = p.logits + t * ne;
    float mx = x[0];
    for (int64_t e = 1; e < ne; ++e) mx = std::max(mx, x[e]);
    float sum = 0.0f;
    for (int64_t e = 0; e < ne; ++e) {
        probs[e] = std::exp(x[e] - mx);
        sum += probs[e];
    }
    for (int64_t e = 0; e < ne; ++e) probs[e] /= sum;

    // Taken entries become −inf; probabilities are ≥ 0 (or NaN), so never chosen again.
    constexpr float kTaken = -std::numeric_limits<float>::infinity();
    int32_t* ids = p.ids + t * p.k;
    float* w = p.weights + t * p.k;
    float wsum = 0.0f;
    for (int64_t i = 0; i < p.k; ++i) {
        int64_t best = -1;
        for (int64_t e = 0; e < ne; ++e) {
            if (probs[e] == kTaken) continue;
            if (best < 0 || probs[e] > probs[best]) best = e;
        }
        ids[i] = static_cast<int32_t>(best);
        w[i] = probs[best];
        wsum += w[i];
        probs[best] = kTaken;
    }
    for (int64_t i = 0; i < p.k; ++i) {
        w[i] /= wsum;
        if (p.expert_scale != nullptr) w[i] *= p.expert_scale[ids[i]];
    }
}

}  // namespace

void moe_route(Context& c, const ops::MoeRouteParams& p) {
    if (p.n_tokens == 0) return;
    HF2Q_ASSERT(p.n_tokens > 0 && p.n_experts > 0 && p.k > 0 && p.k <= p.n_experts);
    HF2Q_ASSERT(p.n_experts <= std::numeric_limits<int32_t>::max());
    HF2Q_ASSERT(p.logits != nullptr && p.ids != nullptr && p.weights != nullptr);
    c.scratch.reserve(p.n_experts);
    c.pool.parallel_for(p.n_tokens, 1, [&](int64_t t0, int64_t t1, int th) {
        for (int64_t t = t0; t < t1; ++t) route_token(p, t, c.scratch.get(th));
    });
}

}  // namespace hf2q::cpu

// MoE routing per token (Gemma 4 router after its projection):
//   probs = softmax(logits) in f32 (max-subtracted, sum accumulated in expert order)
//   top-k by repeated selection: largest prob first, lower expert index on ties
//   w_i = probs[id_i] / Σ_selected probs (summed in selection order), × expert_scale[id_i]
#include <algorithm>
#include <cmath>
#include <cstring>
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
    if (p.router_x != nullptr) fail("moe_route: a router input is taken by moe_route_group only (ops/moe.h)");
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

namespace hf2q::cpu {

// Stable counting sort of the (token, slot) pairs by expert.
void moe_group(Context&, const ops::MoeGroupParams& p) {
    const int64_t n = p.n_tokens * p.k, ne = p.n_experts;
    HF2Q_ASSERT(p.n_tokens >= 0 && p.k > 0 && ne > 0 && p.offsets != nullptr);
    HF2Q_ASSERT(n <= std::numeric_limits<int32_t>::max());
    std::fill(p.offsets, p.offsets + ne + 1, 0);
    for (int64_t i = 0; i < n; ++i) {
        const int32_t e = p.ids[i];
        HF2Q_ASSERT(e >= 0 && e < ne);
        ++p.offsets[e + 1];
    }
    for (int64_t e = 0; e < ne; ++e) p.offsets[e + 1] += p.offsets[e];
    std::vector<int32_t> fill(p.offsets, p.offsets + ne);
    for (int64_t i = 0; i < n; ++i) {
        const int32_t r = fill[static_cast<size_t>(p.ids[i])]++;
        p.rows[r] = static_cast<int32_t>(i / p.k);
        p.slot_of[i] = r;
    }
}

// Each expert runs the dense matmul on its rows (gathered into the backend's buffer
// when x_rows is given), so the numerics are the matmul's.
void moe_matmul(Context& c, const ops::MoeMatmulParams& p) {
    if (p.combine != nullptr) {  // the product, then the combine (ops/moe.h)
        moe_matmul(c, ops::combine_product(p));
        moe_combine(c, *p.combine);
        return;
    }
    if (p.geglu) {  // the product into the scratch, then the GEGLU op (ops/moe.h)
        HF2Q_ASSERT(p.w.n_out % 2 == 0 && p.geglu_scratch != nullptr && p.y_prep == nullptr);
        moe_matmul(c, ops::geglu_product(p));
        geglu(c, ops::geglu_of_product(p));
        return;
    }
    const int64_t n_in = p.w.n_in, xs = p.x_stride ? p.x_stride : n_in;
    const int64_t ys = p.y_stride ? p.y_stride : p.w.n_out;
    HF2Q_ASSERT(p.n_experts > 0 && p.offsets != nullptr && p.offsets[p.n_experts] == p.n_rows);
    for (int64_t e = 0; e < p.n_experts; ++e) {
        const int64_t r0 = p.offsets[e], n = p.offsets[e + 1] - r0;
        if (n == 0) continue;
        HF2Q_ASSERT(n > 0 && r0 >= 0 && r0 + n <= p.n_rows);
        ops::MatmulParams m;
        m.w = p.w;
        m.w.data = static_cast<const uint8_t*>(p.w.data) + static_cast<uint64_t>(e) * p.expert_bytes;
        m.y = p.y + r0 * ys;
        m.y_stride = ys;
        m.n_tokens = n;
        if (p.x_rows != nullptr) {
            c.rows.resize(static_cast<size_t>(n * n_in));
            for (int64_t r = 0; r < n; ++r)
                std::memcpy(c.rows.data() + r * n_in, p.x + static_cast<int64_t>(p.x_rows[r0 + r]) * xs,
                            static_cast<size_t>(n_in) * sizeof(float));
            m.x = c.rows.data();
            m.x_stride = n_in;
        } else {
            m.x = p.x + r0 * xs;
            m.x_stride = xs;
        }
        matmul(c, m);
    }
}

void moe_combine(Context& c, const ops::MoeCombineParams& p) {
    if (p.n_tokens == 0) return;
    HF2Q_ASSERT(p.n_tokens > 0 && p.k > 0 && p.n > 0);
    c.pool.parallel_for(p.n_tokens, 1, [&](int64_t t0, int64_t t1, int) {
        for (int64_t t = t0; t < t1; ++t) {
            float* out = p.out + t * p.out_stride;
            std::fill(out, out + p.n, 0.0f);
            for (int64_t j = 0; j < p.k; ++j) {
                const int64_t i = t * p.k + j;
                axpy_f32(out, p.weights[i], p.y + static_cast<int64_t>(p.slot_of[i]) * p.y_stride, p.n);
            }
        }
    });
}

}  // namespace hf2q::cpu

#include "models/gemma4/forward.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hf2q::gemma4 {
namespace {
size_t sz(int64_t n) { return static_cast<size_t>(n); }
}  // namespace

Forward::Forward(const Config& c, const Weights& w, ops::Backend& be, int64_t max_tokens)
    : c_(c), w_(w), be_(be), max_tokens_(max_tokens) {
    const int64_t T = max_tokens, H = c.n_embd;
    int64_t q_width = 0, kv_width = 0, ff = 0;
    for (int64_t il = 0; il < c.n_layer; ++il) {
        q_width = std::max(q_width, c.n_head * c.head_dim(il));
        kv_width = std::max(kv_width, c.kv_heads(il) * c.head_dim(il));
        ff = std::max(ff, c.n_ff[sz(il)]);
    }
    x_.resize(sz(T * H));
    cur_.resize(sz(T * H));
    tmp_.resize(sz(T * H));
    tmp2_.resize(sz(T * H));
    q_.resize(sz(T * q_width));
    attn_.resize(sz(T * q_width));
    k_.resize(sz(T * kv_width));
    v_.resize(sz(T * kv_width));
    gate_.resize(sz(T * ff));
    up_.resize(sz(T * ff));
    if (c.has_ple()) {
        pl_.resize(sz(T * c.n_layer * c.n_embd_per_layer));
        pl_tok_.resize(pl_.size());
        pl_gate_.resize(sz(T * c.n_embd_per_layer));
    }
    if (c.is_moe()) {
        router_logits_.resize(sz(T * c.n_expert));
        route_w_.resize(sz(T * c.n_expert_used));
        route_ids_.resize(sz(T * c.n_expert_used));
        xe_.resize(sz(T * H));
        gu_.resize(sz(T * 2 * c.n_ff_exp));
        ge_.resize(sz(T * c.n_ff_exp));
        ye_.resize(sz(T * H));
        expert_rows_.resize(sz(T));
        expert_w_.resize(sz(T));
    }
    out_rows_.resize(sz(T * H));
}

// x = embed_tokens[id] · √H (transformers casts √H to the weight dtype; with f32
// reference weights that is exact).
void Forward::embed(const BatchView& b) {
    ops::GetRowsParams p;
    p.w = w_.token_embd;
    p.ids = b.tokens;
    p.out = x_.data();
    p.n_tokens = b.n_tokens;
    p.scale = std::sqrt(static_cast<float>(c_.n_embd));
    be_.get_rows(p);
}

// Per-layer inputs, [T][L][P] layer-major:
//   pl = (rmsnorm(x·W_projᵀ / √H; proj_norm) + embed_per_layer[id] · √P) / √2
void Forward::per_layer_inputs(const BatchView& b) {
    const int64_t T = b.n_tokens, P = c_.n_embd_per_layer, LP = c_.n_layer * P;
    ops::GetRowsParams g;
    g.w = w_.per_layer_token_embd;
    g.ids = b.tokens;
    g.out = pl_tok_.data();
    g.n_tokens = T;
    g.scale = std::sqrt(static_cast<float>(P));
    be_.get_rows(g);

    ops::MatmulParams m;
    m.w = w_.per_layer_model_proj;
    m.x = x_.data();
    m.y = pl_.data();
    m.n_tokens = T;
    be_.matmul(m);
    be_.scale(pl_.data(), 1.0f / std::sqrt(static_cast<float>(c_.n_embd)), T * LP);

    ops::RmsNormParams n;
    n.x = pl_.data();
    n.y = pl_.data();
    n.w = w_.per_layer_proj_norm;
    n.rows = T * c_.n_layer;
    n.n = P;
    n.eps = c_.rms_eps;
    be_.rms_norm(n);
    be_.add(pl_.data(), pl_tok_.data(), pl_.data(), T * LP);
    be_.scale(pl_.data(), 1.0f / std::sqrt(2.0f), T * LP);
}

void Forward::run(const BatchView& b, const std::vector<LayerKv>& kv, float* logits) {
    HF2Q_ASSERT(b.n_tokens > 0 && b.n_tokens <= max_tokens_);
    embed(b);
    if (c_.has_ple()) per_layer_inputs(b);
    for (int64_t il = 0; il < c_.n_layer; ++il) {
        const LayerWeights& l = w_.layers[sz(il)];
        attention(il, b, kv);
        feed_forward(il, b.n_tokens);
        if (c_.has_ple()) ple(il, b.n_tokens);
        if (l.output_scale != 1.0f) be_.scale(x_.data(), l.output_scale, b.n_tokens * c_.n_embd);
    }
    head(b, logits);
}

}  // namespace hf2q::gemma4

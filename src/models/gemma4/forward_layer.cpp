// The per-layer blocks of the Gemma 4 forward pass (see forward.h). Shapes: T
// tokens, H = n_embd, nh query heads and nkv KV heads of size hd on this layer.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/gemma4/forward.h"

namespace hf2q::gemma4 {
namespace {

size_t sz(int64_t n) { return static_cast<size_t>(n); }

ops::RmsNormParams norm(const float* x, float* y, const float* w, int64_t rows, int64_t n, float eps,
                        const float* add_to = nullptr) {
    ops::RmsNormParams p;
    p.x = x;
    p.y = y;
    p.w = w;
    p.rows = rows;
    p.n = n;
    p.eps = eps;
    p.add_to = add_to;
    return p;
}

ops::MatmulParams linear(const ops::WeightView& w, const float* x, float* y, int64_t T,
                         int64_t y_stride = 0) {
    ops::MatmulParams p;
    p.w = w;
    p.x = x;
    p.y = y;
    p.n_tokens = T;
    p.y_stride = y_stride;
    return p;
}

}  // namespace

// x += rmsnorm(o_proj(attn(q, K, V)); post_attention_norm), with
// q = rope(rmsnorm_h(a·Wqᵀ; q_norm)), k = rope(rmsnorm_h(a·Wkᵀ; k_norm)),
// v = rmsnorm_h(a·Wvᵀ) (no weight; V = raw K projection on K=V layers), a = rmsnorm(x).
void Forward::attention(int64_t il, const BatchView& b, const std::vector<LayerKv>& kv) {
    const LayerWeights& l = w_.layers[sz(il)];
    const int64_t T = b.n_tokens, H = c_.n_embd, hd = c_.head_dim(il);
    const int64_t nh = c_.n_head, nkv = c_.kv_heads(il);
    const int group = c_.is_sliding(il) ? kSlidingGroup : kFullGroup;
    const float* inv_freq = c_.is_sliding(il) ? w_.inv_freq_swa.data() : w_.inv_freq_full.data();
    const float eps = c_.rms_eps;

    be_.rms_norm(norm(x_.data(), cur_.data(), l.attn_norm, T, H, eps));
    be_.matmul(linear(l.attn_q, cur_.data(), q_.data(), T));
    be_.rms_norm(norm(q_.data(), q_.data(), l.attn_q_norm, T * nh, hd, eps));
    ops::RopeParams r;
    r.pos = b.pos;
    r.inv_freq = inv_freq;
    r.n_tokens = T;
    r.head_dim = hd;
    r.x = q_.data();
    r.n_heads = nh;
    be_.rope(r);

    if (c_.has_kv(il)) {
        be_.matmul(linear(l.attn_k, cur_.data(), k_.data(), T));
        if (!l.attn_v.empty()) {
            be_.matmul(linear(l.attn_v, cur_.data(), v_.data(), T));
            be_.rms_norm(norm(v_.data(), v_.data(), nullptr, T * nkv, hd, eps));
        } else {
            be_.rms_norm(norm(k_.data(), v_.data(), nullptr, T * nkv, hd, eps));
        }
        be_.rms_norm(norm(k_.data(), k_.data(), l.attn_k_norm, T * nkv, hd, eps));
        r.x = k_.data();
        r.n_heads = nkv;
        be_.rope(r);
        ops::KvStoreParams s;
        s.k = k_.data();
        s.v = v_.data();
        s.k_pool = kv[sz(il)].k;
        s.v_pool = kv[sz(il)].v;
        s.row = nkv * hd;
        s.block_size = b.block_size;
        s.pos = b.pos;
        s.tables = b.tables[group];
        s.n_tokens = T;
        be_.kv_store(s);
    }

    const LayerKv& src = kv[sz(c_.kv_source[sz(il)])];
    ops::AttentionParams a;
    a.q = q_.data();
    a.out = attn_.data();
    a.n_tokens = T;
    a.n_heads = nh;
    a.n_kv_heads = nkv;
    a.head_dim = hd;
    a.k_pool = src.k;
    a.v_pool = src.v;
    a.block_size = b.block_size;
    a.pos = b.pos;
    a.tables = b.tables[group];
    a.table_len = b.table_len[group];
    a.window = static_cast<int32_t>(c_.window(il));
    a.scale = 1.0f;  // QK-norm replaces 1/√d
    be_.attention(a);

    be_.matmul(linear(l.attn_output, attn_.data(), tmp_.data(), T));
    be_.rms_norm(norm(tmp_.data(), x_.data(), l.post_attention_norm, T, H, eps, x_.data()));
}

// out = down(gelu_tanh(gate(a)) ⊙ up(a)), a = rmsnorm(x; ffn_norm).
void Forward::dense_mlp(const LayerWeights& l, int64_t il, int64_t T, float* out) {
    const int64_t H = c_.n_embd, F = c_.n_ff[sz(il)];
    be_.rms_norm(norm(x_.data(), cur_.data(), l.ffn_norm, T, H, c_.rms_eps));
    be_.matmul(linear(l.ffn_gate, cur_.data(), gate_.data(), T));
    be_.matmul(linear(l.ffn_up, cur_.data(), up_.data(), T));
    ops::GegluParams g;
    g.gate = gate_.data();
    g.up = up_.data();
    g.out = gate_.data();
    g.rows = T;
    g.n = F;
    be_.geglu(g);
    be_.matmul(linear(l.ffn_down, gate_.data(), out, T));
}

// Routed experts: router on the un-normed residual x (rmsnorm without weight,
// ⊙ router scale, / √H), softmax top-k with per-expert scales; each expert runs on
// the rows routed to it (input rmsnorm(x; pre_ffw_norm_2)), outputs weighted and
// summed in expert order.
void Forward::moe(const LayerWeights& l, int64_t T, float* out) {
    const int64_t H = c_.n_embd, E = c_.n_expert, K = c_.n_expert_used, Fe = c_.n_ff_exp;
    be_.rms_norm(norm(x_.data(), cur_.data(), l.ffn_gate_inp_scale, T, H, c_.rms_eps));
    be_.scale(cur_.data(), 1.0f / std::sqrt(static_cast<float>(H)), T * H);
    be_.matmul(linear(l.ffn_gate_inp, cur_.data(), router_logits_.data(), T));
    ops::MoeRouteParams rp;
    rp.logits = router_logits_.data();
    rp.expert_scale = l.down_exps_scale;
    rp.ids = route_ids_.data();
    rp.weights = route_w_.data();
    rp.n_tokens = T;
    rp.n_experts = E;
    rp.k = K;
    be_.moe_route(rp);

    be_.rms_norm(norm(x_.data(), cur_.data(), l.pre_ffw_norm_2, T, H, c_.rms_eps));
    // The CPU backend's buffers are host memory: routing is read here to group rows.
    std::fill(out, out + T * H, 0.0f);
    for (int64_t e = 0; e < E; ++e) {
        int64_t n = 0;
        for (int64_t t = 0; t < T; ++t)
            for (int64_t j = 0; j < K; ++j)
                if (route_ids_[sz(t * K + j)] == e) {
                    expert_rows_[sz(n)] = static_cast<int32_t>(t);
                    expert_w_[sz(n)] = route_w_[sz(t * K + j)];
                    ++n;
                }
        if (n == 0) continue;
        ops::GatherRowsParams g;
        g.src = cur_.data();
        g.src_stride = H;
        g.dst = xe_.data();
        g.dst_stride = H;
        g.rows = expert_rows_.data();
        g.n_rows = n;
        g.n = H;
        be_.gather_rows(g);
        if (!l.gate_up_exps.empty()) {
            be_.matmul(linear(l.gate_up_exps.expert(e), xe_.data(), gu_.data(), n));
        } else {
            be_.matmul(linear(l.gate_exps.expert(e), xe_.data(), gu_.data(), n, 2 * Fe));
            be_.matmul(linear(l.up_exps.expert(e), xe_.data(), gu_.data() + Fe, n, 2 * Fe));
        }
        ops::GegluParams gg;
        gg.gate = gu_.data();
        gg.up = gu_.data() + Fe;
        gg.out = ge_.data();
        gg.rows = n;
        gg.n = Fe;
        gg.gate_stride = 2 * Fe;
        gg.up_stride = 2 * Fe;
        gg.out_stride = Fe;
        be_.geglu(gg);
        be_.matmul(linear(l.down_exps.expert(e), ge_.data(), ye_.data(), n));
        ops::ScatterAddParams s;
        s.src = ye_.data();
        s.src_stride = H;
        s.dst = out;
        s.dst_stride = H;
        s.rows = expert_rows_.data();
        s.weights = expert_w_.data();
        s.n_rows = n;
        s.n = H;
        be_.scatter_add(s);
    }
}

// Dense: x += rmsnorm(mlp; post_ffw_norm).
// MoE:   x += rmsnorm(rmsnorm(mlp; post_ffw_norm_1) + rmsnorm(experts; post_ffw_norm_2); post_ffw_norm).
void Forward::feed_forward(int64_t il, int64_t T) {
    const LayerWeights& l = w_.layers[sz(il)];
    const int64_t H = c_.n_embd;
    const float eps = c_.rms_eps;
    dense_mlp(l, il, T, tmp_.data());
    if (c_.is_moe()) {
        be_.rms_norm(norm(tmp_.data(), tmp_.data(), l.post_ffw_norm_1, T, H, eps));
        moe(l, T, tmp2_.data());
        be_.rms_norm(norm(tmp2_.data(), tmp2_.data(), l.post_ffw_norm_2, T, H, eps));
        be_.add(tmp_.data(), tmp2_.data(), tmp_.data(), T * H);
    }
    be_.rms_norm(norm(tmp_.data(), x_.data(), l.post_ffw_norm, T, H, eps, x_.data()));
}

// x += rmsnorm(proj(gelu_tanh(x·W_gateᵀ) ⊙ pl[:, il, :]); post_norm).
void Forward::ple(int64_t il, int64_t T) {
    const LayerWeights& l = w_.layers[sz(il)];
    const int64_t P = c_.n_embd_per_layer, H = c_.n_embd;
    be_.matmul(linear(l.inp_gate, x_.data(), pl_gate_.data(), T));
    ops::GegluParams g;
    g.gate = pl_gate_.data();
    g.up = pl_.data() + il * P;
    g.out = pl_gate_.data();
    g.rows = T;
    g.n = P;
    g.up_stride = c_.n_layer * P;
    be_.geglu(g);
    be_.matmul(linear(l.proj, pl_gate_.data(), tmp_.data(), T));
    be_.rms_norm(norm(tmp_.data(), x_.data(), l.post_norm, T, H, c_.rms_eps, x_.data()));
}

// logits = softcap(rmsnorm(x[out_rows]; output_norm) · Eᵀ), E the tied embedding.
void Forward::head(const BatchView& b, float* logits) {
    if (b.n_out == 0) return;
    const int64_t H = c_.n_embd;
    ops::GatherRowsParams g;
    g.src = x_.data();
    g.src_stride = H;
    g.dst = out_rows_.data();
    g.dst_stride = H;
    g.rows = b.out_rows;
    g.n_rows = b.n_out;
    g.n = H;
    be_.gather_rows(g);
    be_.rms_norm(norm(out_rows_.data(), out_rows_.data(), w_.output_norm, b.n_out, H, c_.rms_eps));
    const ops::WeightView& lm = w_.output.empty() ? w_.token_embd : w_.output;
    be_.matmul(linear(lm, out_rows_.data(), logits, b.n_out));
    if (c_.softcap > 0.0f) be_.softcap(logits, c_.softcap, b.n_out * c_.n_vocab);
}

}  // namespace hf2q::gemma4

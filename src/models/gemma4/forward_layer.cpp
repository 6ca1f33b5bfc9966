// The per-layer blocks of the Gemma 4 forward pass (see forward.h). Shapes: T
// tokens, H = n_embd, nh query heads and nkv KV heads of size hd on this layer.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "models/gemma4/forward.h"

namespace hf2q::gemma4 {
namespace {

size_t sz(int64_t n) { return static_cast<size_t>(n); }

// The packed top-k results of n rows at k (Forward::topk_out_'s layout): ids, values,
// statuses, 4 bytes each.
struct TopkParts {
    void* ids;
    void* values;
    void* status;
};
TopkParts topk_parts(void* base, int64_t n, int32_t k) {
    auto* w = static_cast<uint32_t*>(base);
    const size_t entries = sz(n * k);
    return {w, w + entries, w + 2 * entries};
}

ops::RmsNormParams norm(const float* x, float* y, const float* w, int64_t rows, int64_t n, float eps) {
    ops::RmsNormParams p;
    p.x = x;
    p.y = y;
    p.w = w;
    p.rows = rows;
    p.n = n;
    p.eps = eps;
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

void Forward::project(const ops::WeightView& w, const char* name, int64_t il, int32_t expert, const float* x,
                      float* y, int64_t T, int64_t y_stride, const void* x_prep, const void* x_bf16) {
    if (observer_) {
        const std::string full = il < 0 ? std::string(name) : "blk." + std::to_string(il) + "." + name;
        const float* host = x;
        if (!be_.host_memory()) {
            observed_.resize(sz(T * w.n_in));
            be_.download(observed_.data(), x, observed_.size() * sizeof(float));
            host = observed_.data();
        }
        observer_(full, expert, host, T, w.n_in);
    }
    ops::MatmulParams p = linear(w, x, y, T, y_stride);
    p.x_prep = x_prep;
    p.x_bf16 = x_bf16;
    be_.matmul(p);
}

void Forward::project_multi(std::initializer_list<Projection> list, int64_t il, const float* x, int64_t T,
                            const void* x_prep, const void* x_bf16) {
    if (observer_ || list.size() == 1) {
        for (const Projection& p : list) project(p.w, p.name, il, -1, x, p.y, T, p.y_stride, x_prep, x_bf16);
        return;
    }
    ops::MultiMatmulParams m;
    m.x = x;
    m.n_tokens = T;
    m.x_prep = x_prep;
    m.x_bf16 = x_bf16;
    for (const Projection& p : list) {
        HF2Q_ASSERT(m.n < ops::MultiMatmulParams::kMax);
        m.w[m.n] = p.w;
        m.y[m.n] = p.y;
        m.y_stride[m.n] = p.y_stride;
        ++m.n;
    }
    be_.matmul_multi(m);
}

// cur = rmsnorm(x; attn_norm) of layer 0. Every later layer's input norm rides on
// the previous layer's last residual update (add_next_input).
void Forward::first_layer_input(int64_t T) {
    be_.rms_norm(norm(x_, cur_, w_.layers[0].attn_norm, T, c_.n_embd, c_.rms_eps));
}

// Whether layer il's q/k/v (those it has, at least two) have BF16 copies back to
// back (ops::Backend::batch_layouts), so one product covers them (attention()).
bool Forward::qkv_side_by_side(int64_t il) const {
    const LayerWeights& l = w_.layers[sz(il)];
    const ops::WeightView* w[3] = {&l.attn_q, &l.attn_k, &l.attn_v};
    const int n = !c_.has_kv(il) ? 1 : l.attn_v.empty() ? 2 : 3;
    return ops::back_to_back_batch_layouts(w, n);
}

// The same for the dense MLP's gate and up (dense_mlp()).
bool Forward::gate_up_side_by_side(int64_t il) const {
    const LayerWeights& l = w_.layers[sz(il)];
    const ops::WeightView* w[2] = {&l.ffn_gate, &l.ffn_up};
    return ops::back_to_back_batch_layouts(w, 2);
}

// Whether a batch of T tokens puts projections side by side where their copies allow
// (kJointTokens, and only where the backend's matmuls of T tokens read the copies).
bool Forward::joint_products(int64_t T) const {
    return joint_ != nullptr && T <= kJointTokens && be_.reads_bf16_rows(T);
}

// tmp = o_proj(attn(q, K, V)), with q = rope(rmsnorm_h(a·Wqᵀ; q_norm)),
// k = rope(rmsnorm_h(a·Wkᵀ; k_norm)), v = rmsnorm_h(a·Wvᵀ) (no weight; V = raw K
// projection on K=V layers), a = cur = rmsnorm(x; attn_norm) (computed by the
// previous residual update). mlp_inputs() adds tmp to the residual.
void Forward::attention(int64_t il, const BatchView& b, const std::vector<LayerKv>& kv) {
    const LayerWeights& l = w_.layers[sz(il)];
    const int64_t T = b.n_tokens, hd = c_.head_dim(il);
    const int64_t nh = c_.n_head, nkv = c_.kv_heads(il);
    const int group = c_.is_sliding(il) ? kSlidingGroup : kFullGroup;
    const float* inv_freq = c_.is_sliding(il) ? inv_freq_swa_ : inv_freq_full_;
    // Where the backend put the weights' BF16 copies back to back and the batch takes
    // joint products, the raw projections go side by side into joint_, which one
    // product over the joint rows writes, and attention_inputs reads them there; else
    // each goes into its own packed buffer (one-token decode: the GEMV covers all three
    // in one launch anyway, and tg128 measured 502.1 -> 500.3 tokens/s side by side).
    const bool side_by_side = joint_products(T) && qkv_side_by_side(il);
    const int64_t S = side_by_side ? joint_width_ : 0;
    float* const yq = side_by_side ? joint_ : q_;
    float* const yk = side_by_side ? yq + nh * hd : k_;
    float* const yv = side_by_side ? yk + nkv * hd : v_;
    const Projection pq{l.attn_q, "attn_q.weight", yq, S}, pk{l.attn_k, "attn_k.weight", yk, S},
        pv{l.attn_v, "attn_v.weight", yv, S};
    // cur_prep_ (cur_bf16_) is cur_ prepared (in BF16) by the previous layer's last
    // residual update.
    const void* xp = il > 0 ? prep(cur_prep_, T, c_.n_embd) : nullptr;
    const void* xb = il > 0 ? bf16(cur_bf16_, T) : nullptr;
    if (!c_.has_kv(il))
        project_multi({pq}, il, cur_, T, xp, xb);
    else if (l.attn_v.empty())
        project_multi({pq, pk}, il, cur_, T, xp, xb);
    else
        project_multi({pq, pk, pv}, il, cur_, T, xp, xb);
    // Head norms, RoPE and (cache-owning layers) the KV store: one op.
    ops::AttentionInputsParams in;
    in.q = q_;
    if (side_by_side) {
        in.q_src = yq;
        in.src_stride = S;
    }
    in.q_w = l.attn_q_norm;
    in.n_heads = nh;
    in.n_tokens = T;
    in.head_dim = hd;
    in.eps = c_.rms_eps;
    in.rope_inv_freq = inv_freq;
    in.pos = b.pos;
    if (c_.has_kv(il)) {
        in.store = true;
        in.k = k_;
        in.k_w = l.attn_k_norm;
        in.v = v_;
        if (side_by_side) {
            in.k_src = yk;
            in.v_src = l.attn_v.empty() ? nullptr : yv;
        }
        in.v_from_k = l.attn_v.empty();
        in.n_kv_heads = nkv;
        in.k_pool = kv[sz(il)].k;
        in.v_pool = kv[sz(il)].v;
        in.kv_type = kv[sz(il)].type;
        in.k_scale = kv[sz(il)].k_scale;
        in.v_scale = kv[sz(il)].v_scale;
        in.block_size = b.block_size;
        in.tables = b.tables[group];
    }
    be_.attention_inputs(in);

    const LayerKv& src = kv[sz(c_.kv_source[sz(il)])];
    ops::AttentionParams a;
    a.q = q_;
    a.out = attn_;
    a.n_tokens = T;
    a.n_heads = nh;
    a.n_kv_heads = nkv;
    a.head_dim = hd;
    a.k_pool = src.k;
    a.v_pool = src.v;
    a.kv_type = src.type;
    a.k_scale = src.k_scale;
    a.v_scale = src.v_scale;
    a.block_size = b.block_size;
    a.n_blocks = src.n_blocks;
    a.pos = b.pos;
    a.tables = b.tables[group];
    a.table_len = b.table_len[group];
    a.window = static_cast<int32_t>(c_.window(il));
    a.scale = 1.0f;  // QK-norm replaces 1/√d
    a.max_keys = b.max_keys;
    a.earlier_keys_stored = b.one_token_per_sequence;
    a.out_prep = prep(attn_prep_, T, nh * hd);  // the output projection's input
    a.out_bf16 = bf16(attn_bf16_, T);
    be_.attention(a);

    project(l.attn_output, "attn_output.weight", il, -1, attn_, tmp_, T, 0, a.out_prep, a.out_bf16);
}

// x += rmsnorm(tmp; post_attention_norm), then the inputs of the MLP blocks from
// the updated x, in one residual_norms op: cur = rmsnorm(x; ffn_norm) and, on MoE
// layers, the router's rmsnorm(x) ⊙ router scale / √H and the experts'
// rmsnorm(x; pre_ffw_norm_2) (prepared once per token: the experts' gate_up reads
// it through the grouping's gather).
void Forward::mlp_inputs(const LayerWeights& l, int64_t T) {
    const int64_t H = c_.n_embd;
    ops::ResidualNormsParams r = residual(tmp_, l.post_attention_norm, T);
    r.y[0] = cur_;
    r.out_w[0] = l.ffn_norm;
    r.y_prep[0] = prep(cur_prep_, T, c_.n_embd);
    r.y_bf16[0] = dense_mlp_bf16(T);
    r.n_out = 1;
    if (c_.is_moe()) {
        r.y[1] = router_in_;
        r.y_bf16[1] = bf16(router_bf16_, T);
        r.out_w[1] = l.ffn_gate_inp_scale;
        r.out_scale[1] = 1.0f / std::sqrt(static_cast<float>(H));
        r.y[2] = moe_in_;
        r.out_w[2] = l.pre_ffw_norm_2;
        r.y_prep[2] = prep(moe_in_prep_, T, H);
        r.n_out = 3;
    }
    be_.residual_norms(r);
}

// The dense MLP input's BF16 rows (cur_bf16_), on layers without experts only. Why:
// on MoE layers the dense MLP's chain runs beside the experts' (feed_forward), and
// without its conversion kernel its GEMMs started while the router chain ran and
// delayed it: the experts' gate_up began about 14 µs later a layer (CUPTI trace).
// H200, 26B-A4B, against no BF16 rows: 64 sequences −0.9 % with them here, +0.4 %
// without; 32 sequences +3.6 % / +2.0 % (docs/performance.md, session 34).
void* Forward::dense_mlp_bf16(int64_t T) const { return c_.is_moe() ? nullptr : bf16(cur_bf16_, T); }

// The residual update x += rmsnorm(branch; w) of T rows, without outputs.
ops::ResidualNormsParams Forward::residual(float* branch, const float* w, int64_t T) const {
    ops::ResidualNormsParams r;
    r.x = x_;
    r.rows = T;
    r.n = c_.n_embd;
    r.eps = c_.rms_eps;
    r.b[0] = branch;
    r.w[0] = w;
    return r;
}

// Adds the next layer's input cur = rmsnorm(x; next_norm), prepared for its q/k/v
// matmuls, as r's output when next_norm is given (not after the last layer).
void Forward::add_next_input(ops::ResidualNormsParams& r, const float* next_norm, int64_t T) const {
    if (!next_norm) return;
    r.y[r.n_out] = cur_;
    r.out_w[r.n_out] = next_norm;
    r.y_prep[r.n_out] = prep(cur_prep_, T, c_.n_embd);
    r.y_bf16[r.n_out] = bf16(cur_bf16_, T);
    ++r.n_out;
}

// x = (x + rmsnorm(branch; w)) · out_scale, then cur = rmsnorm(x; next_norm) (the
// next layer's input) when next_norm is given.
void Forward::residual_update(float* branch, const float* w, float out_scale, const float* next_norm, int64_t T) {
    ops::ResidualNormsParams r = residual(branch, w, T);
    r.scale = out_scale;
    add_next_input(r, next_norm, T);
    be_.residual_norms(r);
}

// out = down(gelu_tanh(gate(a)) ⊙ up(a)), a = cur = rmsnorm(x; ffn_norm) (mlp_inputs).
// Where gate and up have joint copies (gate_up_side_by_side), batches of up to
// kJointTokens multiply them as one product into joint_ rows [gate | up] (without it
// the two products were split-K GEMMs whose reductions waited for SMs behind the
// experts' gate_up on MoE layers).
void Forward::dense_mlp(const LayerWeights& l, int64_t il, int64_t T, float* out) {
    const int64_t F = c_.n_ff[sz(il)];
    const bool side_by_side = joint_products(T) && gate_up_side_by_side(il);
    float* const yg = side_by_side ? joint_ : gate_;
    float* const yu = side_by_side ? joint_ + F : up_;
    const int64_t S = side_by_side ? 2 * F : 0;
    project_multi({{l.ffn_gate, "ffn_gate.weight", yg, S}, {l.ffn_up, "ffn_up.weight", yu, S}}, il, cur_, T,
                  prep(cur_prep_, T, c_.n_embd), dense_mlp_bf16(T));
    ops::GegluParams g;
    g.gate = yg;
    g.up = yu;
    g.gate_stride = g.up_stride = S;
    g.out = gate_;
    g.rows = T;
    g.n = F;
    g.out_prep = prep(gate_prep_, T, F);
    g.out_bf16 = bf16(gate_bf16_, T);
    be_.geglu(g);
    project(l.ffn_down, "ffn_down.weight", il, -1, gate_, out, T, 0, g.out_prep, g.out_bf16);
}

// Routed experts: router on the un-normed residual x (rmsnorm without weight,
// ⊙ router scale, / √H: router_in), softmax top-k with per-expert scales; each
// expert runs on the rows routed to it (input moe_in = rmsnorm(x; pre_ffw_norm_2),
// both from mlp_inputs), and every token sums its k weighted expert outputs in
// slot order (the returned combine, run by feed_forward's residual_norms; for one
// token the down product's combine epilogue writes `out` and nothing is returned). The
// grouping by expert stays in backend memory; only large batches on a device backend
// read the group offsets on the host (one synchronisation per layer) to size
// tensor-core launches.
std::optional<ops::MoeCombineParams> Forward::moe(const LayerWeights& l, int64_t il, int64_t T, float* out) {
    const int64_t H = c_.n_embd, E = c_.n_expert, K = c_.n_expert_used, Fe = c_.n_ff_exp;
    ops::MoeRouteParams rp;
    rp.logits = router_logits_;
    rp.expert_scale = l.down_exps_scale;
    rp.ids = route_ids_;
    rp.weights = route_w_;
    rp.n_tokens = T;
    rp.n_experts = E;
    rp.k = K;
    if (observer_) {  // the router through project(), so the observer sees its input
        project(l.ffn_gate_inp, "ffn_gate_inp.weight", il, -1, router_in_, router_logits_, T);
        be_.moe_route(rp);
        moe_per_expert(l, il, T, out);
        return std::nullopt;
    }

    ops::MoeGroupParams g;
    g.ids = route_ids_;
    g.n_tokens = T;
    g.k = K;
    g.n_experts = E;
    g.offsets = moe_offsets_;
    g.rows = expert_rows_;
    g.slot_of = slot_of_;
    // The router product router_logits = router_in · ffn_gate_inpᵀ as part of the
    // routing op (a device backend runs all three in one kernel in decode).
    rp.router_x = router_in_;
    rp.router_x_stride = H;
    rp.router_w = l.ffn_gate_inp;
    rp.router_x_bf16 = bf16(router_bf16_, T);
    be_.moe_route_group(rp, g);
    const int32_t* host_offsets = nullptr;
    if (be_.host_memory()) {
        host_offsets = moe_offsets_;
    } else if (T > kMoeDeviceTokens) {
        be_.download(moe_offsets_host_.data(), moe_offsets_, sz(E + 1) * sizeof(int32_t));
        host_offsets = moe_offsets_host_.data();
    }
    auto params = [&](const ExpertWeights& w, const int32_t* x_rows, const float* x, float* y, int64_t ys,
                      const void* x_prep = nullptr) {
        ops::MoeMatmulParams m;
        m.w = w.first;
        m.expert_bytes = w.expert_bytes;
        m.n_experts = E;
        m.offsets = moe_offsets_;
        m.host_offsets = host_offsets;
        m.x_rows = x_rows;
        m.x_n_rows = x_rows ? T : 0;
        m.x = x;
        m.y = y;
        m.y_stride = ys;
        m.n_rows = T * K;
        m.x_prep = x_prep;
        return m;
    };
    // ge_ = gelu_tanh(gate) ⊙ up of the routed rows: one op with the GEGLU epilogue
    // for a merged gate_up tensor (gu_ its scratch: a backend may never write it).
    void* const ge_prep = prep(ge_prep_, T, Fe, down_prep_tokens_);
    const void* const in_prep = prep(moe_in_prep_, T, H);  // moe_in_'s T rows, gathered
    if (!l.gate_up_exps.empty()) {
        ops::MoeMatmulParams m = params(l.gate_up_exps, expert_rows_, moe_in_, ge_, Fe, in_prep);
        m.geglu = true;
        m.geglu_scratch = gu_;
        m.y_prep = ge_prep;
        be_.moe_matmul(m);
    } else {
        be_.moe_matmul(params(l.gate_exps, expert_rows_, moe_in_, gu_, 2 * Fe, in_prep));
        be_.moe_matmul(params(l.up_exps, expert_rows_, moe_in_, gu_ + Fe, 2 * Fe, in_prep));
        ops::GegluParams eg = ops::gate_up_geglu(gu_, ge_, T * K, Fe);
        eg.out_prep = ge_prep;
        be_.geglu(eg);
    }
    ops::MoeCombineParams cb;
    cb.y = ye_;
    cb.y_stride = H;
    cb.slot_of = slot_of_;
    cb.weights = route_w_;
    cb.out = out;
    cb.out_stride = H;
    cb.n_tokens = T;
    cb.k = K;
    cb.n = H;
    ops::MoeMatmulParams down = params(l.down_exps, nullptr, ge_, ye_, H, ge_prep);
    if (T == 1) {
        // One token: the combine goes with the down product (a device backend folds it
        // in), so residual_norms reads the combined row instead of gathering K rows.
        down.combine = &cb;
        be_.moe_matmul(down);
        return std::nullopt;
    }
    be_.moe_matmul(down);
    return cb;
}

// The same experts one at a time with the grouping on the host, so an observer
// (imatrix collection) sees each expert's input rows as one matrix.
void Forward::moe_per_expert(const LayerWeights& l, int64_t il, int64_t T, float* out) {
    const int64_t H = c_.n_embd, E = c_.n_expert, K = c_.n_expert_used, Fe = c_.n_ff_exp;
    // Group the (token, slot) pairs by expert on the host (counting sort, token
    // order kept inside an expert), then upload the grouped rows once.
    be_.download(route_ids_host_.data(), route_ids_, sz(T * K) * sizeof(int32_t));
    be_.download(route_w_host_.data(), route_w_, sz(T * K) * sizeof(float));
    expert_offsets_.assign(sz(E + 1), 0);
    for (int64_t i = 0; i < T * K; ++i) {
        int32_t e = route_ids_host_[sz(i)];
        HF2Q_ASSERT(e >= 0 && e < E);
        ++expert_offsets_[sz(e + 1)];
    }
    for (int64_t e = 0; e < E; ++e) expert_offsets_[sz(e + 1)] += expert_offsets_[sz(e)];
    std::vector<int64_t> fill(expert_offsets_.begin(), expert_offsets_.end() - 1);
    for (int64_t i = 0; i < T * K; ++i) {
        int64_t slot = fill[sz(route_ids_host_[sz(i)])]++;
        expert_rows_host_[sz(slot)] = static_cast<int32_t>(i / K);
        expert_w_host_[sz(slot)] = route_w_host_[sz(i)];
    }
    be_.upload(expert_rows_, expert_rows_host_.data(), sz(T * K) * sizeof(int32_t));
    be_.upload(expert_w_, expert_w_host_.data(), sz(T * K) * sizeof(float));
    be_.fill_zero(out, sz(T * H) * sizeof(float));
    for (int64_t e = 0; e < E; ++e) {
        const int64_t off = expert_offsets_[sz(e)], n = expert_offsets_[sz(e + 1)] - off;
        if (n == 0) continue;
        const int32_t ie = static_cast<int32_t>(e);
        ops::GatherRowsParams g;
        g.src = moe_in_;
        g.src_stride = H;
        g.dst = xe_;
        g.dst_stride = H;
        g.rows = expert_rows_ + off;
        g.n_rows = n;
        g.n = H;
        be_.gather_rows(g);
        if (!l.gate_up_exps.empty()) {
            project(l.gate_up_exps.expert(e), "ffn_gate_up_exps.weight", il, ie, xe_, gu_, n);
        } else {
            project(l.gate_exps.expert(e), "ffn_gate_exps.weight", il, ie, xe_, gu_, n, 2 * Fe);
            project(l.up_exps.expert(e), "ffn_up_exps.weight", il, ie, xe_, gu_ + Fe, n, 2 * Fe);
        }
        be_.geglu(ops::gate_up_geglu(gu_, ge_, n, Fe));
        project(l.down_exps.expert(e), "ffn_down_exps.weight", il, ie, ge_, ye_, n);
        ops::ScatterAddParams s;
        s.src = ye_;
        s.src_stride = H;
        s.dst = out;
        s.dst_stride = H;
        s.rows = expert_rows_ + off;
        s.weights = expert_w_ + off;
        s.n_rows = n;
        s.n = H;
        be_.scatter_add(s);
    }
}

// Dense: x += rmsnorm(mlp; post_ffw_norm).
// MoE:   x += rmsnorm(rmsnorm(mlp; post_ffw_norm_1) + rmsnorm(experts; post_ffw_norm_2); post_ffw_norm).
// Then x ·= out_scale (the layer scalar) and cur = rmsnorm(x; next_norm), all in one
// residual_norms op.
// On MoE layers the routed experts are the backend's side chain (ops::Backend::
// begin_side), concurrent with the dense MLP where the backend can: in decode both
// are chains of small, latency-bound kernels. Only in batches that keep the MoE on
// the device (no host read of the grouping) and without an observer (which
// downloads every expert's input); the two touch disjoint buffers.
void Forward::feed_forward(int64_t il, int64_t T, float out_scale, const float* next_norm) {
    const LayerWeights& l = w_.layers[sz(il)];
    if (!c_.is_moe()) {
        dense_mlp(l, il, T, tmp_);
        residual_update(tmp_, l.post_ffw_norm, out_scale, next_norm, T);
        return;
    }
    std::optional<ops::MoeCombineParams> combine;
    if (T <= kMoeDeviceTokens && !observer_) {
        be_.begin_side();
        combine = moe(l, il, T, tmp2_);
        be_.end_side();
        dense_mlp(l, il, T, tmp_);
        be_.join_side();
    } else {  // the dense MLP first: it runs while the host reads the expert grouping
        dense_mlp(l, il, T, tmp_);
        combine = moe(l, il, T, tmp2_);
    }
    ops::ResidualNormsParams r = residual(tmp_, l.post_ffw_norm_1, T);
    if (combine) r.combine = &*combine;
    r.n_branch = 2;
    r.b[1] = tmp2_;
    r.w[1] = l.post_ffw_norm_2;
    r.sum_w = l.post_ffw_norm;
    r.scale = out_scale;
    add_next_input(r, next_norm, T);
    be_.residual_norms(r);
}

// x += rmsnorm(proj(gelu_tanh(x·W_gateᵀ) ⊙ pl[:, il, :]); post_norm), then x ·= out_scale
// and cur = rmsnorm(x; next_norm).
void Forward::ple(int64_t il, int64_t T, float out_scale, const float* next_norm) {
    const LayerWeights& l = w_.layers[sz(il)];
    const int64_t P = c_.n_embd_per_layer;
    project(l.inp_gate, "inp_gate.weight", il, -1, x_, pl_gate_, T);
    ops::GegluParams g;
    g.gate = pl_gate_;
    g.up = pl_ + il * P;
    g.out = pl_gate_;
    g.rows = T;
    g.n = P;
    g.up_stride = c_.n_layer * P;
    be_.geglu(g);
    project(l.proj, "proj.weight", il, -1, pl_gate_, tmp_, T);
    residual_update(tmp_, l.post_norm, out_scale, next_norm, T);
}

// logits = softcap(rmsnorm(x[out_rows]; output_norm) · Eᵀ), E the tied embedding,
// in chunks of kHeadChunk rows so the logits buffer stays small at 262k vocab.
void Forward::head(const BatchView& b, const HeadOutput& out) {
    for (int64_t r0 = 0; r0 < b.n_out; r0 += kHeadChunk) {
        const int64_t n = std::min(kHeadChunk, b.n_out - r0);
        head_rows(b, r0, n, out);
        download_outputs(out, r0, n);
    }
}

// The results of output rows r0 .. r0+n (n <= kHeadChunk) on the backend: their
// logits in logits_ and, for argmax, each row's argmax in argmax_ids_[r0 ..] and,
// written by the backend into host memory, out.ids[r0 ..]; for top_k, each row's k
// largest logits packed in topk_out_ (rows from 0; topk_parts).
// The softcap is increasing, so the raw logits have the capped ones' argmax and top-k
// candidates (but where the cap's rounding makes two of them equal): argmax and top_k
// leave the V logits of a row raw and cap only the k values top_k returns, the same
// operation on the same floats as capping every logit (a 64-sequence decode step's
// cap read and wrote 134 MB: 82.6 us of a 12.3 ms step on an H100, session 52's trace).
// HF2Q_CAP_EVERY_LOGIT=1 caps every logit in every mode again, for the A/B.
#ifndef HF2Q_CAP_EVERY_LOGIT
#define HF2Q_CAP_EVERY_LOGIT 0
#endif
void Forward::head_rows(const BatchView& b, int64_t r0, int64_t n, const HeadOutput& out) {
    const DecodeOutputs mode = out.mode;
    if (n <= 0) return;
    const bool cap_all = HF2Q_CAP_EVERY_LOGIT || mode == DecodeOutputs::logits;
    head_logits(b, r0, n, cap_all);
    switch (mode) {
        case DecodeOutputs::logits:
            return;
        case DecodeOutputs::argmax: {
            ops::ArgmaxRowsParams p;
            p.x = logits_;
            p.out = argmax_ids_ + r0;
            p.host_out = out.ids + r0;
            p.rows = n;
            p.n = c_.n_vocab;
            be_.argmax_rows(p);
            return;
        }
        case DecodeOutputs::top_k: {
            ops::TopkRowsParams p;
            p.x = logits_;
            p.rows = n;
            p.n = c_.n_vocab;
            p.k = out.k;
            const TopkParts parts = topk_parts(topk_out_, n, out.k);
            p.ids = static_cast<int32_t*>(parts.ids);
            p.values = static_cast<float*>(parts.values);
            p.status = static_cast<int32_t*>(parts.status);
            p.scratch = topk_scratch_;
            be_.topk_rows(p);
            if (!cap_all && c_.softcap > 0.0f) be_.softcap(p.values, c_.softcap, n * out.k);
            return;
        }
    }
}

// Copies the logits (or top-k entries) head_rows computed for rows r0 .. r0+n into
// `out` (host memory); argmax ids are on their way there already: a fence to wait on.
void Forward::download_outputs(const HeadOutput& out, int64_t r0, int64_t n) {
    if (n <= 0) return;
    switch (out.mode) {
        case DecodeOutputs::logits:
            be_.download(out.logits + r0 * c_.n_vocab, logits_, sz(n * c_.n_vocab) * sizeof(float));
            return;
        case DecodeOutputs::argmax:  // the caller waits for ids_fence_
            ids_fence_ = be_.fence();
            return;
        case DecodeOutputs::top_k: {
            const size_t entries = sz(n * out.k);
            be_.download(topk_host_.data(), topk_out_, (2 * entries + sz(n)) * sizeof(uint32_t));
            const TopkParts parts = topk_parts(topk_host_.data(), n, out.k);
            std::memcpy(out.ids + r0 * out.k, parts.ids, entries * sizeof(int32_t));
            std::memcpy(out.values + r0 * out.k, parts.values, entries * sizeof(float));
            std::memcpy(out.status + r0, parts.status, sz(n) * sizeof(int32_t));
            return;
        }
    }
}

// Logits of output rows r0 .. r0+n (n <= kHeadChunk) into logits_, softcapped if capped.
void Forward::head_logits(const BatchView& b, int64_t r0, int64_t n, bool capped) {
    if (n <= 0) return;
    const int64_t H = c_.n_embd, V = c_.n_vocab;
    const ops::WeightView& lm = w_.output.empty() ? w_.token_embd : w_.output;
    ops::GatherRowsParams g;
    g.src = x_;
    g.src_stride = H;
    g.dst = out_rows_;
    g.dst_stride = H;
    g.rows = b.out_rows + r0;
    g.n_rows = n;
    g.n = H;
    be_.gather_rows(g);
    be_.rms_norm(norm(out_rows_, out_rows_, w_.output_norm, n, H, c_.rms_eps));
    be_.matmul(linear(lm, out_rows_, logits_, n));
    if (capped && c_.softcap > 0.0f) be_.softcap(logits_, c_.softcap, n * V);
}

}  // namespace hf2q::gemma4

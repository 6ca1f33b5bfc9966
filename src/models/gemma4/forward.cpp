#include "models/gemma4/forward.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"

namespace hf2q::gemma4 {
namespace {
size_t sz(int64_t n) { return static_cast<size_t>(n); }
}  // namespace

Forward::Forward(const Config& c, const Weights& w, ops::Backend& be, int64_t max_tokens, MatmulObserver observer)
    : c_(c), w_(w), be_(be), max_tokens_(max_tokens), observer_(std::move(observer)) {
    const int64_t T = max_tokens, H = c.n_embd;
    int64_t q_width = 0, kv_width = 0, ff = 0;
    for (int64_t il = 0; il < c.n_layer; ++il) {
        q_width = std::max(q_width, c.n_head * c.head_dim(il));
        kv_width = std::max(kv_width, c.kv_heads(il) * c.head_dim(il));
        ff = std::max(ff, c.n_ff[sz(il)]);
        if (!be.reads_bf16_rows(std::min(T, kJointTokens))) continue;
        if (qkv_side_by_side(il))
            joint_width_ = std::max(joint_width_, (c.n_head + 2 * c.kv_heads(il)) * c.head_dim(il));
        if (gate_up_side_by_side(il)) joint_width_ = std::max(joint_width_, 2 * c.n_ff[sz(il)]);
    }
    x_ = buf(T * H);
    cur_ = buf(T * H);
    tmp_ = buf(T * H);
    tmp2_ = buf(T * H);
    q_ = buf(T * q_width);
    attn_ = buf(T * q_width);
    k_ = buf(T * kv_width);
    v_ = buf(T * kv_width);
    if (joint_width_ > 0) joint_ = buf(std::min(T, kJointTokens) * joint_width_);
    gate_ = buf(T * ff);
    up_ = buf(T * ff);
    if (c.has_ple()) {
        pl_ = buf(T * c.n_layer * c.n_embd_per_layer);
        pl_tok_ = buf(T * c.n_layer * c.n_embd_per_layer);
        pl_gate_ = buf(T * c.n_embd_per_layer);
    }
    if (c.is_moe()) {
        const int64_t K = c.n_expert_used;
        router_logits_ = buf(T * c.n_expert);
        router_in_ = buf(T * H);
        moe_in_ = buf(T * H);
        route_w_ = buf(T * K);
        route_ids_ = be.alloc_array<int32_t>(sz(T * K));
        xe_ = buf(T * H);
        gu_ = buf(T * K * 2 * c.n_ff_exp);
        ge_ = buf(T * K * c.n_ff_exp);
        ye_ = buf(T * K * H);
        expert_rows_ = be.alloc_array<int32_t>(sz(T * K));
        slot_of_ = be.alloc_array<int32_t>(sz(T * K));
        moe_offsets_ = be.alloc_array<int32_t>(sz(c.n_expert + 1));
        moe_offsets_host_.resize(sz(c.n_expert + 1));
        expert_w_ = buf(T * K);
        route_ids_host_.resize(sz(T * K));
        route_w_host_.resize(sz(T * K));
        expert_rows_host_.resize(sz(T * K));
        expert_w_host_.resize(sz(T * K));
    }
    auto prepared = [&](int64_t rows, int64_t n) {
        const size_t bytes = be.prepared_bytes(rows, n);
        return bytes > 0 ? be.alloc(bytes) : nullptr;
    };
    prep_tokens_ = std::min(T, be.prepared_tokens());
    if (prep_tokens_ > 0) {
        cur_prep_ = prepared(prep_tokens_, H);
        gate_prep_ = prepared(prep_tokens_, ff);
        attn_prep_ = prepared(prep_tokens_, q_width);
        if (c.is_moe()) moe_in_prep_ = prepared(prep_tokens_, H);
    }
    // The experts' down input (ge_) may be prepared at larger batches than the rest
    // (Backend::prepared_expert_down_tokens is never below prepared_tokens).
    down_prep_tokens_ = c.is_moe() ? std::min(T, be.prepared_expert_down_tokens()) : 0;
    if (down_prep_tokens_ > 0) ge_prep_ = prepared(down_prep_tokens_ * c.n_expert_used, c.n_ff_exp);
    if (be.reads_bf16_rows(T)) {
        auto bf16_rows = [&](int64_t n) { return be.alloc(sz(T * n) * 2); };
        cur_bf16_ = bf16_rows(H);
        gate_bf16_ = bf16_rows(ff);
        attn_bf16_ = bf16_rows(q_width);
        if (c.is_moe()) router_bf16_ = bf16_rows(H);
    }
    out_rows_ = buf(kHeadChunk * H);
    logits_ = buf(kHeadChunk * c.n_vocab);
    argmax_ids_ = be.alloc_array<int32_t>(sz(T));
    topk_out_ = be.alloc(sz(kTopkOutWords) * sizeof(uint32_t));
    topk_host_.resize(sz(kTopkOutWords));
    if (const size_t bytes = be.topk_rows_scratch_bytes(kHeadChunk, c.n_vocab); bytes > 0)
        topk_scratch_ = be.alloc(bytes);
    fed_tokens_ = be.alloc_array<int32_t>(sz(T));
    auto place = [&](const std::vector<float>& v) {
        if (v.empty()) return static_cast<float*>(nullptr);
        float* d = buf(static_cast<int64_t>(v.size()));
        be.upload(d, v.data(), v.size() * sizeof(float));
        return d;
    };
    // Largest matmul input: T rows of the widest activation, or T·k expert rows.
    int64_t widest = std::max({H, q_width, ff, c.n_embd_per_layer});
    int64_t inputs = T * widest;
    if (c.is_moe()) inputs = std::max(inputs, T * c.n_expert_used * std::max(H, c.n_ff_exp));
    be.reserve_matmul_inputs(inputs);
    inv_freq_full_ = place(w.inv_freq_full);
    inv_freq_swa_ = place(w.inv_freq_swa);
}

// x = embed_tokens[id] · √H (transformers casts √H to the weight dtype; with f32
// reference weights that is exact).
void Forward::embed(const BatchView& b) {
    ops::GetRowsParams p;
    p.w = w_.token_embd;
    p.ids = b.tokens;
    p.out = x_;
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
    g.out = pl_tok_;
    g.n_tokens = T;
    g.scale = std::sqrt(static_cast<float>(P));
    be_.get_rows(g);

    project(w_.per_layer_model_proj, "per_layer_model_proj.weight", -1, -1, x_, pl_, T);
    be_.scale(pl_, 1.0f / std::sqrt(static_cast<float>(c_.n_embd)), T * LP);

    ops::RmsNormParams n;
    n.x = pl_;
    n.y = pl_;
    n.w = w_.per_layer_proj_norm;
    n.rows = T * c_.n_layer;
    n.n = P;
    n.eps = c_.rms_eps;
    be_.rms_norm(n);
    be_.add(pl_, pl_tok_, pl_, T * LP);
    be_.scale(pl_, 1.0f / std::sqrt(2.0f), T * LP);
}

// The key bound a replayed batch runs with: max_keys rounded up to a power of two,
// at least 256. A graph recorded with a bucket's bound stays valid (the bound covers
// every position) for every later batch of the bucket, and a growing context records
// again only when it doubles, while attention gets a bound within 2x of the truth.
// Below 256 keys a head's keys are a few chunks whatever the split, and finer buckets
// would only add recordings (one eager step and one capture each) at the start of
// every sequence. Past 16384 keys the bound no longer changes the work (the CUDA split
// kernel's most splits, 128 of ≥ 2 chunks of ≤ 64 keys, are all filled), so longer
// batches share one bucket, 2^31, above every position: at most 8 graphs per batch
// shape whatever the context size. 0 (unknown) stays 0.
int64_t Forward::key_bucket(int64_t max_keys) {
    constexpr int64_t kMinKeyBucket = 256, kMaxKeyBucket = 16384;
    if (max_keys <= 0) return 0;
    if (max_keys > kMaxKeyBucket) return int64_t{1} << 31;  // above every int32 position
    int64_t bucket = kMinKeyBucket;
    while (bucket < max_keys) bucket *= 2;
    return bucket;
}

// Decode-sized batches (no host synchronisation inside: MoE grouping on the device,
// one LM-head chunk) replay a graph per (tokens, output rows, output kind, key bucket,
// fed or not, for argmax the host buffer the ids go to: the context alternates
// two, so a step's ids are never overwritten by the step queued after it; for top_k
// its k):
// the first batch of a key runs eagerly (workspaces reach their size), the second
// records the graph, later ones only launch it. Batch contents live in the same
// buffers every step, so the recorded pointers stay valid; every run of a key uses
// the bucket as its key bound, so the eager, recorded and replayed steps split
// attention alike.
uint64_t Forward::run(const BatchView& batch, const std::vector<LayerKv>& kv, const HeadOutput& out) {
    HF2Q_ASSERT(batch.n_tokens > 0 && batch.n_tokens <= max_tokens_);
    HF2Q_ASSERT(batch.n_out >= 0 && batch.n_out <= batch.n_tokens);
    HF2Q_ASSERT(batch.n_out == 0 || (out.mode == DecodeOutputs::logits   ? out.logits != nullptr
                                     : out.mode == DecodeOutputs::argmax ? out.ids != nullptr
                                                                         : out.ids && out.values && out.status &&
                                                                               out.k >= 1 && out.k <= ops::kTopkMax));
    const bool replayable = graphs_ && !observer_ && batch.n_tokens <= kMoeDeviceTokens &&
                            batch.n_out <= kHeadChunk && !be_.host_memory();
    ids_fence_ = 0;
    if (!replayable) {
        layers(batch, kv);
        head(batch, out);
        return ids_fence_;
    }
    BatchView b = batch;
    b.max_keys = key_bucket(batch.max_keys);
    const GraphKey key{b.n_tokens,
                       b.n_out,
                       out.mode,
                       b.max_keys,
                       b.one_token_per_sequence,
                       b.feed != nullptr,
                       reinterpret_cast<uintptr_t>(out.mode == DecodeOutputs::argmax ? out.ids : nullptr),
                       out.mode == DecodeOutputs::top_k ? out.k : 0};
    auto it = graphs_by_shape_.find(key);
    if (it == graphs_by_shape_.end()) {
        graphs_by_shape_[key] = nullptr;  // seen once: eager
        layers(b, kv);
        head(b, out);
        return ids_fence_;
    }
    if (!it->second) {
        it->second = be_.capture([&] {
            layers(b, kv);
            head_rows(b, 0, b.n_out, out);
        });
        if (!it->second) {  // the backend has no graphs
            graphs_ = false;
            layers(b, kv);
            head(b, out);
            return ids_fence_;
        }
    }
    it->second->launch();
    download_outputs(out, 0, b.n_out);
    return ids_fence_;
}

// The ids of a fed batch: the host's, with the fed tokens' taken from the previous
// run's argmax_ids_ (its results stay there until this run's head writes them).
const int32_t* Forward::feed_tokens(const BatchView& b) {
    ops::FeedTokensParams p;
    p.tokens = b.tokens;
    p.from = b.feed;
    p.ids = argmax_ids_;
    p.out = fed_tokens_;
    p.n = b.n_tokens;
    p.n_vocab = c_.n_vocab;
    be_.feed_tokens(p);
    return fed_tokens_;
}

void Forward::layers(const BatchView& batch, const std::vector<LayerKv>& kv) {
    BatchView b = batch;
    if (b.feed) b.tokens = feed_tokens(b);
    embed(b);
    if (c_.has_ple()) per_layer_inputs(b);
    const int64_t T = b.n_tokens;
    first_layer_input(T);
    for (int64_t il = 0; il < c_.n_layer; ++il) {
        const LayerWeights& l = w_.layers[sz(il)];
        const float* next_norm = il + 1 < c_.n_layer ? w_.layers[sz(il + 1)].attn_norm : nullptr;
        attention(il, b, kv);
        mlp_inputs(l, T);
        // The layer scalar rides on the last residual update of the layer.
        if (c_.has_ple()) {
            feed_forward(il, T, 1.0f, nullptr);
            ple(il, T, l.output_scale, next_norm);
        } else {
            feed_forward(il, T, l.output_scale, next_norm);
        }
    }
}

}  // namespace hf2q::gemma4

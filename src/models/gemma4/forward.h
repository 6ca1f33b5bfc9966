// The Gemma 4 forward pass over one flat micro-batch of tokens from any number of
// sequences, written against ops::Backend. Reads like transformers'
// Gemma4TextModel: embeddings (+ per-layer embeddings), then per layer attention,
// feed-forward (dense, or dense + MoE), PLE injection and the layer scalar; final
// norm, tied LM head and logit soft-capping on the requested rows only, and, for
// greedy steps, the argmax of those logits on the backend.
#pragma once

#include <compare>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hf2q/engine.h"

#include "models/gemma4/config.h"
#include "models/gemma4/weights.h"
#include "ops/backend.h"

namespace hf2q::gemma4 {

// KV pools of one cache-owning layer (layout in ops/attention.h).
struct LayerKv {
    void* k = nullptr;
    void* v = nullptr;
    ops::KvType type = ops::KvType::f32;
    int64_t n_blocks = 0;  // blocks in each pool (attention checks table entries)
    float* k_scale = nullptr;  // i8 pools: a scale per (slot, KV head) row
    float* v_scale = nullptr;
};

// Attention groups: every sliding layer shares group kSlidingGroup's block tables,
// every full layer kFullGroup's.
inline constexpr int kFullGroup = 0;
inline constexpr int kSlidingGroup = 1;

struct BatchView {
    int64_t n_tokens = 0;
    const int32_t* tokens = nullptr;  // [n_tokens]
    const int32_t* pos = nullptr;     // [n_tokens]
    // Per group, per token: the block table of the token's sequence and its length.
    const int32_t* const* tables[2] = {nullptr, nullptr};
    const int32_t* table_len[2] = {nullptr, nullptr};
    int64_t block_size = 0;
    const int32_t* out_rows = nullptr;  // [n_out] token indices whose logits are wanted
    int64_t n_out = 0;
    // Host-side bound: every pos[t] < max_keys (0: unknown). See ops::AttentionParams.
    int64_t max_keys = 0;
    // Every sequence has one token in the batch (decode): its earlier keys were stored
    // by earlier batches (ops::AttentionParams::earlier_keys_stored).
    bool one_token_per_sequence = false;
    // [n_tokens] or null: token t embeds the previous run's argmax of output row
    // feed[t] where feed[t] >= 0 (ops::FeedTokensParams; hf2q::kPreviousArgmax).
    const int32_t* feed = nullptr;
};

// Where run() puts the results of the output rows, in host memory: with
// DecodeOutputs::logits their logits, with DecodeOutputs::argmax only the index of
// each row's largest logit (ops::argmax_rows, computed on the backend; a negative
// code where the row holds NaN or +inf or only -inf, see ops/sampling.h), with
// DecodeOutputs::top_k each row's k largest logits and their ids (ops::topk_rows).
struct HeadOutput {
    DecodeOutputs mode = DecodeOutputs::logits;
    float* logits = nullptr;  // [n_out][n_vocab] (mode logits)
    int32_t* ids = nullptr;   // [n_out] (mode argmax); [n_out][k] (mode top_k)
    int32_t k = 0;            // mode top_k: entries a row, in [1, ops::kTopkMax]
    float* values = nullptr;  // [n_out][k] (mode top_k)
    int32_t* status = nullptr;  // [n_out] (mode top_k): ops::TopkRowsParams::status
};

class Forward {
public:
    // Preallocates every activation buffer for up to max_tokens tokens per call.
    Forward(const Config& c, const Weights& w, ops::Backend& be, int64_t max_tokens,
            MatmulObserver observer = {});

    // Runs the batch. Every pointer in `b` and `kv` is in the backend's memory; KV
    // rows of cache-owning layers are written into kv[il] before attention reads
    // them. The output rows' results go to `out` (host memory): logits are there on
    // return; argmax ids once the backend's wait_fence(returned ticket) returns,
    // so the host may queue the next batch first (0: they are there already).
    uint64_t run(const BatchView& b, const std::vector<LayerKv>& kv, const HeadOutput& out);

    // Replay decode-sized batches as graphs where the backend has them (default on).
    void enable_graphs(bool on) { graphs_ = on; }
    // The key bound a replayed batch whose positions are below max_keys runs and is
    // recorded with (BatchView::max_keys): a power of two ≥ max_keys, at least 256,
    // one bucket for everything past 16384 (see forward.cpp); 0 (unknown) stays 0.
    static int64_t key_bucket(int64_t max_keys);

    // Rows of logits computed per LM-head call (bounds the logits buffer).
    static constexpr int64_t kHeadChunk = 64;
    // Up to this many tokens a device backend groups MoE rows without reading the
    // grouping on the host (decode stays free of synchronisation).
    static constexpr int64_t kMoeDeviceTokens = 64;
    // Up to this many tokens q/k/v, and a dense MLP's gate/up, go side by side for one
    // joint product where the backend allows it (attention(), dense_mlp()): batched
    // decode, where each product alone leaves most of a GPU idle. Prompts keep their
    // packed buffers (H200, pp4096 of the 26B-A4B measured 42,636 / 42,837 -> 42,376 /
    // 42,707 tokens/s with q/k/v side by side).
    static constexpr int64_t kJointTokens = 128;

private:
    void embed(const BatchView& b);
    void per_layer_inputs(const BatchView& b);
    void first_layer_input(int64_t T);
    void attention(int64_t il, const BatchView& b, const std::vector<LayerKv>& kv);
    void mlp_inputs(const LayerWeights& l, int64_t T);
    void residual_update(float* branch, const float* w, float out_scale, const float* next_norm, int64_t T);
    ops::ResidualNormsParams residual(float* branch, const float* w, int64_t T) const;
    void add_next_input(ops::ResidualNormsParams& r, const float* next_norm, int64_t T) const;
    void dense_mlp(const LayerWeights& l, int64_t il, int64_t T, float* out);
    // The experts' outputs: written to out (per-expert path), or left for the
    // returned combine into out, which the caller fuses with its norms.
    std::optional<ops::MoeCombineParams> moe(const LayerWeights& l, int64_t il, int64_t T, float* out);
    void moe_per_expert(const LayerWeights& l, int64_t il, int64_t T, float* out);
    void feed_forward(int64_t il, int64_t T, float out_scale, const float* next_norm);
    void ple(int64_t il, int64_t T, float out_scale, const float* next_norm);
    void head(const BatchView& b, const HeadOutput& out);
    void head_rows(const BatchView& b, int64_t r0, int64_t n, const HeadOutput& out);
    void head_logits(const BatchView& b, int64_t r0, int64_t n, bool capped);
    void download_outputs(const HeadOutput& out, int64_t r0, int64_t n);
    void layers(const BatchView& b, const std::vector<LayerKv>& kv);
    const int32_t* feed_tokens(const BatchView& b);
    // y = x · Wᵀ for T rows; reports x to the observer first. `name` is the GGUF
    // tensor name without "blk.N." (layer il < 0: a global tensor).
    // x_prep: x in the backend's prepared form, x_bf16: x's BF16 rows, or nullptr
    // (ops/prepared.h).
    void project(const ops::WeightView& w, const char* name, int64_t il, int32_t expert, const float* x, float* y,
                 int64_t T, int64_t y_stride = 0, const void* x_prep = nullptr, const void* x_bf16 = nullptr);
    // Several projections of the same x (q/k/v, gate/up) as one backend call, which
    // prepares x once (quantized or converted on a device); with an observer, one
    // project() each so it sees every weight's input.
    struct Projection {
        const ops::WeightView& w;
        const char* name;
        float* y;
        int64_t y_stride = 0;  // 0: the weight's n_out
    };
    void project_multi(std::initializer_list<Projection> list, int64_t il, const float* x, int64_t T,
                       const void* x_prep = nullptr, const void* x_bf16 = nullptr);
    // The prepared-form buffer `buf` for rows of n values in a batch of T tokens, or
    // nullptr where the backend prepares no such inputs.
    void* prep(void* buf, int64_t T, int64_t n, int64_t max_tokens) const {
        return buf != nullptr && T <= max_tokens && be_.prepared_bytes(T, n) > 0 ? buf : nullptr;
    }
    void* prep(void* buf, int64_t T, int64_t n) const { return prep(buf, T, n, prep_tokens_); }
    // The BF16 rows buffer `buf` in a batch of T tokens, or nullptr where the
    // backend's matmuls of T tokens do not read them (ops/prepared.h).
    void* bf16(void* buf, int64_t T) const { return buf != nullptr && be_.reads_bf16_rows(T) ? buf : nullptr; }
    void* dense_mlp_bf16(int64_t T) const;
    bool qkv_side_by_side(int64_t il) const;
    bool gate_up_side_by_side(int64_t il) const;
    bool joint_products(int64_t T) const;
    float* buf(int64_t n) { return be_.alloc_array<float>(static_cast<size_t>(n)); }

    const Config& c_;
    const Weights& w_;
    ops::Backend& be_;
    int64_t max_tokens_;
    MatmulObserver observer_;
    bool graphs_ = true;
    // A recorded graph replays one batch shape and one kind of output, for batches
    // whose positions lie below one key bound (key_bucket): attention sizes its work
    // by that bound when the graph is recorded.
    struct GraphKey {
        int64_t tokens = 0;
        int64_t outputs = 0;
        DecodeOutputs mode = DecodeOutputs::logits;
        int64_t max_keys = 0;  // key_bucket of the batch's max_keys
        bool one_token_per_sequence = false;  // recorded into the attention launches
        bool fed = false;                     // BatchView::feed: a feed_tokens launch first
        uintptr_t ids = 0;                    // HeadOutput::ids, written by the recorded argmax
        int32_t k = 0;                        // HeadOutput::k of a top_k head
        auto operator<=>(const GraphKey&) const = default;
    };
    // Recorded graphs by key; nullptr: shape seen once, not recorded.
    std::map<GraphKey, std::unique_ptr<ops::Graph>> graphs_by_shape_;
    std::vector<float> observed_;  // host copy of observed rows (device backends)
    // Activations in backend memory, row-major [tokens][width].
    float *x_, *cur_, *tmp_, *tmp2_;          // [T][H]
    float *q_, *k_, *v_, *attn_;              // [T][heads·head_dim]
    // Projections side by side, as one product over their joint weights writes them:
    // q, k and v (q at 0, k after q, v after k; rows of joint_width_), and a dense
    // MLP's gate and up (rows of 2·n_ff). For batches of up to kJointTokens on layers
    // whose copies the backend put back to back; else none. attention() and
    // dense_mlp() use it in turn (each consumes its rows before the next writes).
    float* joint_ = nullptr;
    int64_t joint_width_ = 0;
    float *gate_, *up_;                       // [T][max n_ff]
    float *pl_ = nullptr, *pl_tok_ = nullptr, *pl_gate_ = nullptr;  // PLE [T][L·P], [T][L·P], [T][P]
    float *router_logits_ = nullptr, *route_w_ = nullptr;  // [T][E], [T][k]
    float *router_in_ = nullptr, *moe_in_ = nullptr;       // [T][H] normed router / expert inputs
    // Prepared forms (ops/prepared.h) of cur_, gate_, moe_in_ and attn_, for batches of
    // up to prep_tokens_ tokens (0: the backend prepares none), and of ge_ (the experts'
    // down input) up to down_prep_tokens_ (Backend::prepared_expert_down_tokens).
    int64_t prep_tokens_ = 0, down_prep_tokens_ = 0;
    void *cur_prep_ = nullptr, *gate_prep_ = nullptr, *ge_prep_ = nullptr, *moe_in_prep_ = nullptr;
    void* attn_prep_ = nullptr;
    // BF16 rows (ops/prepared.h) of cur_, router_in_, gate_ and attn_, written by their
    // producers where the backend reads them at the largest batch (else nullptr).
    void *cur_bf16_ = nullptr, *router_bf16_ = nullptr, *gate_bf16_ = nullptr, *attn_bf16_ = nullptr;
    int32_t* route_ids_ = nullptr;            // [T][k]
    float *xe_ = nullptr, *gu_ = nullptr, *ge_ = nullptr, *ye_ = nullptr;  // [T·k] grouped expert rows
    int32_t* expert_rows_ = nullptr;          // [T·k] token rows grouped by expert
    int32_t* slot_of_ = nullptr;              // [T·k] grouped row of each (token, slot)
    int32_t* moe_offsets_ = nullptr;          // [E + 1] grouped rows of each expert
    std::vector<int32_t> moe_offsets_host_;   // host copy (large batches on devices)
    float* expert_w_ = nullptr;               // [T·k] their routing weights
    float* out_rows_;                         // [kHeadChunk][H]
    float* logits_;                           // [kHeadChunk][n_vocab]
    int32_t* argmax_ids_;                     // [T] argmax of every output row (T ≥ n_out)
    // topk_rows of a head chunk of n rows at k: n·k ids, then n·k values, then n
    // statuses, packed (at most kTopkOutWords 4-byte words), so one download carries a
    // step's results (three cost two more round trips to the device); topk_host_ takes
    // them on the host. The backend's scratch for it (null where it needs none).
    static constexpr int64_t kTopkOutWords = kHeadChunk * (2 * ops::kTopkMax + 1);
    void* topk_out_;
    std::vector<uint32_t> topk_host_;
    void* topk_scratch_ = nullptr;
    int32_t* fed_tokens_;                     // [T] the ids a fed batch embeds
    uint64_t ids_fence_ = 0;                  // the fence after the last argmax (Backend::fence)
    float *inv_freq_full_ = nullptr, *inv_freq_swa_ = nullptr;  // [head_dim / 2]
    // Host mirrors for grouping tokens by expert.
    std::vector<int32_t> route_ids_host_, expert_rows_host_;
    std::vector<float> route_w_host_, expert_w_host_;
    std::vector<int64_t> expert_offsets_;     // [E + 1] start of each expert's rows
};

}  // namespace hf2q::gemma4

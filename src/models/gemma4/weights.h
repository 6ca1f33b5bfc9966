// Gemma 4 weight table: every tensor the forward pass reads, looked up by its
// llama.cpp name and checked against the config (presence, shape, type). Matrices
// stay in the file's block format (views into the mapping); 1-D tensors (norms,
// scales) are decoded to f32 once.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hf2q/engine.h"
#include "models/gemma4/config.h"
#include "ops/backend.h"
#include "ops/types.h"

namespace hf2q::gguf {
class File;
}

namespace hf2q::gemma4 {

// Stacked expert matrices (GGUF ne = [n_in, n_out, n_expert]).
struct ExpertWeights {
    ops::WeightView first;        // expert 0
    uint64_t expert_bytes = 0;    // bytes between experts
    int64_t n_expert = 0;

    bool empty() const { return first.empty(); }
    ops::WeightView expert(int64_t e) const {
        ops::WeightView v = first;
        v.data = static_cast<const uint8_t*>(first.data) + static_cast<uint64_t>(e) * expert_bytes;
        v.expert_layout = nullptr;  // (the copy of all experts hangs on `first` only)
        return v;
    }
};

struct LayerWeights {
    // Attention. attn_k / attn_v are empty on KV-shared layers; attn_v is empty on
    // K=V full layers (V is the raw K projection).
    const float* attn_norm = nullptr;
    ops::WeightView attn_q, attn_k, attn_v, attn_output;
    const float* attn_q_norm = nullptr;
    const float* attn_k_norm = nullptr;
    const float* post_attention_norm = nullptr;
    // Dense MLP (the always-on branch on MoE models).
    const float* ffn_norm = nullptr;
    ops::WeightView ffn_gate, ffn_up, ffn_down;
    const float* post_ffw_norm = nullptr;
    // MoE (empty on dense models).
    ops::WeightView ffn_gate_inp;                 // router [n_embd → n_expert]
    const float* ffn_gate_inp_scale = nullptr;    // [n_embd]
    const float* pre_ffw_norm_2 = nullptr;
    const float* post_ffw_norm_1 = nullptr;
    const float* post_ffw_norm_2 = nullptr;
    ExpertWeights gate_up_exps;                   // [n_embd → 2·n_ff_exp], gate rows first
    ExpertWeights gate_exps, up_exps;             // alternative split form
    ExpertWeights down_exps;                      // [n_ff_exp → n_embd]
    const float* down_exps_scale = nullptr;       // [n_expert] per-expert output scale
    // Per-layer embeddings (PLE models).
    ops::WeightView inp_gate, proj;
    const float* post_norm = nullptr;
    float output_scale = 1.0f;                    // layer_scalar
};

struct Weights {
    ops::WeightView token_embd;      // [n_embd] × n_vocab rows; also the tied LM head
    ops::WeightView output;          // empty when tied
    const float* output_norm = nullptr;
    ops::WeightView per_layer_token_embd;   // rows of n_layer·P (PLE)
    ops::WeightView per_layer_model_proj;   // [n_embd → n_layer·P]
    const float* per_layer_proj_norm = nullptr;
    std::vector<LayerWeights> layers;
    // RoPE inverse frequencies, [head_dim / 2] per attention kind; full layers fold
    // in rope_freqs (proportional RoPE).
    std::vector<float> inv_freq_full, inv_freq_swa;
    uint64_t n_bytes = 0;
    int64_t n_params = 0;
    // Device memory the backend's copies (decode and batch layouts) took
    // (ops::Backend::allocated_bytes); 0 on host backends.
    uint64_t copy_bytes = 0;

    struct OwnedVector {
        std::unique_ptr<float[]> data;
        int64_t n = 0;
    };
    std::vector<OwnedVector> owned;  // decoded 1-D tensors (host)
};

// Throws hf2q::Error naming the tensor that is missing, misshapen, of an
// unsupported type, or unexpected.
Weights load_weights(const gguf::File& f, const Config& c);

// A copy of the table whose pointers are in `be`'s memory: every matrix and vector is
// uploaded once (device backends). For host-memory backends the views are shared.
// The returned table must not outlive `be` or `host`.
struct PlaceOptions {
    // The LM head also gets the backend's copy for one-token matmuls
    // (ops::Backend::decode_layout): it is the largest matrix a decode step reads.
    bool decode_layouts = true;
    // Every dense 2-D matrix (not the experts, not the router) gets the backend's BF16
    // copy for matmuls of many tokens (ops::Backend::batch_layout): always, never, or
    // where auto_batch_copy says.
    BatchCopy batch_copy = BatchCopy::off;
    // The experts get the backend's copy for batched decode (ops::Backend::
    // expert_layout) where it leaves room, after the batch copies.
    bool expert_layouts = true;
};
Weights place_weights(const Weights& host, ops::Backend& be, const PlaceOptions& o = {});

// BatchCopy::automatic: whether copies of `copy_bytes` in all are made with
// `free_bytes` of device memory free after the weights (0 on host backends).
bool auto_batch_copy(uint64_t copy_bytes, uint64_t free_bytes);

}  // namespace hf2q::gemma4

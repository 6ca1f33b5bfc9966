// Gemma 4 text configuration read from a Hugging Face config.json.
//
// Accepts the multimodal release form (text fields under "text_config") and the
// text-only form (fields at the top level), and both ways of stating the full-attention
// geometry: the released fields global_head_dim / num_global_key_value_heads /
// attention_k_eq_v, and the later transformers "per_layer_config" mapping (layer index ->
// {head_dim, num_key_value_heads, num_attention_heads} overrides). Defaults are those of
// transformers' Gemma4TextConfig; every field is type- and range-checked, and a bad
// value throws hf2q::Error naming the file and the field.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace hf2q::convert {

struct RopeParams {
    std::string rope_type;  // "default" or "proportional"
    float theta = 0.0f;
    float partial_rotary_factor = 1.0f;
};

struct Gemma4HfConfig {
    uint32_t vocab_size = 262144;
    uint32_t hidden_size = 0;        // H
    uint32_t intermediate_size = 0;  // I (dense MLP width before double-wide)
    uint32_t num_hidden_layers = 0;  // L
    uint32_t num_attention_heads = 0;
    uint32_t num_key_value_heads = 0;  // sliding layers (and full ones unless overridden)
    uint32_t head_dim = 0;             // sliding layers
    uint32_t global_head_dim = 0;      // full layers (resolved from either config form)
    uint32_t max_position_embeddings = 131072;
    float rms_norm_eps = 1e-6f;
    uint32_t sliding_window = 512;
    std::optional<float> final_logit_softcapping;         // null / absent -> no capping
    std::optional<uint32_t> hidden_size_per_layer_input;  // P; absent -> from checkpoint
    uint32_t vocab_size_per_layer_input = 262144;
    uint32_t num_kv_shared_layers = 0;
    bool attention_k_eq_v = false;
    bool use_double_wide_mlp = false;
    bool enable_moe_block = false;
    std::optional<uint32_t> num_experts, top_k_experts, moe_intermediate_size;
    // True when the file gives full layers their own KV-head count (released
    // num_global_key_value_heads non-null, or a per_layer_config num_key_value_heads);
    // the GGUF then carries head_count_kv as a per-layer array.
    bool per_layer_kv_heads = false;
    bool used_per_layer_config = false;

    RopeParams rope_sliding{"default", 10000.0f, 1.0f};
    RopeParams rope_full{"proportional", 1000000.0f, 0.25f};

    // Per-layer values, size L.
    std::vector<bool> is_sliding;
    std::vector<uint32_t> layer_head_dim;  // hd(l)
    std::vector<uint32_t> layer_kv_heads;  // nkv(l)
    std::vector<uint32_t> layer_ffn;       // MLP width of layer l
    std::vector<bool> layer_k_eq_v;        // full layer without v_proj

    uint32_t first_kv_shared() const { return num_hidden_layers - num_kv_shared_layers; }
    bool is_kv_shared(uint32_t il) const { return il >= first_kv_shared(); }
    bool double_wide() const;  // some layer has MLP width != I
    bool any_full() const;
};

// Parses a config.json document; `name` is used in error messages.
Gemma4HfConfig parse_hf_config(const nlohmann::json& j, const std::string& name);
// Reads and parses <dir>/config.json.
Gemma4HfConfig load_hf_config(const std::string& dir);

}  // namespace hf2q::convert

// Gemma 4 text-model configuration, read once from GGUF metadata as llama.cpp's
// converter writes it (docs: ../shared/spec/gguf-gemma4.md §2.2), validated, then
// immutable. Per-layer variation is arrays with accessors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hf2q::gguf {
class File;
}

namespace hf2q::gemma4 {

enum class AttnKind { sliding, full };

struct Config {
    std::string name;
    int64_t n_vocab = 0;
    int64_t n_embd = 0;       // H
    int64_t n_layer = 0;      // L
    int64_t n_head = 0;       // query heads (every layer)
    int64_t n_ctx_train = 0;
    int64_t n_embd_per_layer = 0;  // PLE width P (0: off)
    int64_t sliding_window = 0;
    int64_t n_kv_shared = 0;       // the last n layers reuse earlier K/V
    int64_t n_expert = 0;
    int64_t n_expert_used = 0;
    int64_t n_ff_exp = 0;
    float rms_eps = 1e-6f;
    float rope_base_full = 1e6f;
    float rope_base_swa = 1e4f;
    int64_t n_rot_full = 0;
    int64_t n_rot_swa = 0;
    float softcap = 30.0f;          // 0: off

    std::vector<AttnKind> kind;      // [L]
    std::vector<int64_t> n_head_kv;  // [L]
    std::vector<int64_t> head_dim_;  // [L]
    std::vector<int64_t> n_ff;       // [L] dense MLP width
    std::vector<int64_t> kv_source;  // [L] layer whose KV cache this layer reads

    bool is_sliding(int64_t il) const { return kind[static_cast<size_t>(il)] == AttnKind::sliding; }
    int64_t head_dim(int64_t il) const { return head_dim_[static_cast<size_t>(il)]; }
    int64_t kv_heads(int64_t il) const { return n_head_kv[static_cast<size_t>(il)]; }
    bool has_kv(int64_t il) const { return kv_source[static_cast<size_t>(il)] == il; }
    bool is_moe() const { return n_expert > 0; }
    bool has_ple() const { return n_embd_per_layer > 0; }
    int64_t window(int64_t il) const { return is_sliding(il) ? sliding_window : 0; }
};

// Reads and validates the config; n_vocab comes from token_embd.weight's shape.
// Throws hf2q::Error naming the key that is missing, mistyped or inconsistent.
Config config_from_gguf(const gguf::File& f);

}  // namespace hf2q::gemma4

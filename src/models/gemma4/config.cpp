#include "models/gemma4/config.h"

#include "core/error.h"
#include "gguf/gguf.h"

namespace hf2q::gemma4 {
namespace {

constexpr const char* kArch = "gemma4";

std::string key(const char* suffix) { return str_cat(kArch, ".", suffix); }

void require_positive(int64_t v, const std::string& what) {
    if (v <= 0) fail("model metadata: ", what, " must be positive, got ", v);
}

// The layer each KV-shared layer reads: the last non-shared layer of the same
// attention kind (transformers' rule; for the released E2B/E4B it equals
// llama.cpp's fixed n_kv_from_start-1 / -2 choice).
void assign_kv_sources(Config& c) {
    int64_t first_shared = c.n_layer - c.n_kv_shared;
    c.kv_source.resize(static_cast<size_t>(c.n_layer));
    for (int64_t il = 0; il < c.n_layer; ++il) {
        if (il < first_shared) {
            c.kv_source[static_cast<size_t>(il)] = il;
            continue;
        }
        int64_t src = -1;
        for (int64_t j = first_shared - 1; j >= 0; --j)
            if (c.kind[static_cast<size_t>(j)] == c.kind[static_cast<size_t>(il)]) {
                src = j;
                break;
            }
        if (src < 0)
            fail("model metadata: KV-shared layer ", il, " has no earlier non-shared layer of the same kind");
        c.kv_source[static_cast<size_t>(il)] = src;
    }
}

void read_layer_arrays(const gguf::File& f, Config& c) {
    const size_t L = static_cast<size_t>(c.n_layer);
    auto pattern = f.at(key("attention.sliding_window_pattern")).as_bool_array(key("attention.sliding_window_pattern"));
    if (pattern.size() != L)
        fail("model metadata: ", key("attention.sliding_window_pattern"), " has ", pattern.size(),
             " entries, expected ", L, " (one per layer)");
    c.kind.resize(L);
    for (size_t i = 0; i < L; ++i) c.kind[i] = pattern[i] ? AttnKind::sliding : AttnKind::full;

    int64_t hd_full = f.get_u32_or(key("attention.key_length"), 0);
    int64_t hd_swa = f.get_u32(key("attention.key_length_swa"));
    int64_t vd_swa = f.get_u32(key("attention.value_length_swa"));
    if (hd_full == 0) hd_full = hd_swa;
    int64_t vd_full = f.get_u32_or(key("attention.value_length"), static_cast<uint32_t>(hd_full));
    if (hd_full != vd_full || hd_swa != vd_swa)
        fail("model metadata: key and value head sizes differ (", hd_full, "/", vd_full, ", swa ", hd_swa,
             "/", vd_swa, "); Gemma 4 requires them equal");
    require_positive(hd_swa, key("attention.key_length_swa"));

    std::vector<int64_t> kv = f.has(key("attention.head_count_kv"))
                                  ? f.get_per_layer(key("attention.head_count_kv"), L)
                                  : std::vector<int64_t>(L, c.n_head);
    c.n_ff = f.get_per_layer(key("feed_forward_length"), L);
    c.n_head_kv = kv;
    c.head_dim_.resize(L);
    for (size_t i = 0; i < L; ++i) {
        c.head_dim_[i] = c.kind[i] == AttnKind::sliding ? hd_swa : hd_full;
        if (c.head_dim_[i] % 2 != 0) fail("model metadata: head size ", c.head_dim_[i], " must be even");
        if (kv[i] <= 0 || c.n_head % kv[i] != 0)
            fail("model metadata: layer ", i, " has ", kv[i], " KV heads, which does not divide ", c.n_head,
                 " query heads");
        require_positive(c.n_ff[i], str_cat(key("feed_forward_length"), "[", i, "]"));
    }
    c.n_rot_full = f.get_u32_or(key("rope.dimension_count"), static_cast<uint32_t>(hd_full));
    c.n_rot_swa = f.get_u32_or(key("rope.dimension_count_swa"), static_cast<uint32_t>(hd_swa));
    if (c.n_rot_full != hd_full || c.n_rot_swa != hd_swa)
        fail("model metadata: partial rotary dimensions (", c.n_rot_full, ", swa ", c.n_rot_swa,
             ") are not supported; Gemma 4 rotates the full head (proportional RoPE uses rope_freqs)");
}

}  // namespace

Config config_from_gguf(const gguf::File& f) {
    const std::string arch = f.get_string("general.architecture");
    if (arch != kArch)
        fail("unsupported model architecture '", arch, "': hf2q runs Gemma 4 ('gemma4') models");
    Config c;
    c.name = f.get_string_or("general.name", "");
    c.n_embd = f.get_u32(key("embedding_length"));
    c.n_layer = f.get_u32(key("block_count"));
    c.n_head = f.get_u32(key("attention.head_count"));
    c.n_ctx_train = f.get_u32(key("context_length"));
    c.n_embd_per_layer = f.get_u32_or(key("embedding_length_per_layer_input"), 0);
    c.sliding_window = f.get_u32(key("attention.sliding_window"));
    c.n_kv_shared = f.get_u32_or(key("attention.shared_kv_layers"), 0);
    c.n_expert = f.get_u32_or(key("expert_count"), 0);
    c.n_expert_used = f.get_u32_or(key("expert_used_count"), 0);
    c.n_ff_exp = f.get_u32_or(key("expert_feed_forward_length"), 0);
    c.rms_eps = f.get_f32(key("attention.layer_norm_rms_epsilon"));
    c.rope_base_full = f.get_f32_or(key("rope.freq_base"), 10000.0f);
    c.rope_base_swa = f.get_f32_or(key("rope.freq_base_swa"), 10000.0f);
    c.softcap = f.get_f32_or(key("final_logit_softcapping"), 30.0f);

    require_positive(c.n_embd, key("embedding_length"));
    require_positive(c.n_layer, key("block_count"));
    require_positive(c.n_head, key("attention.head_count"));
    require_positive(c.sliding_window, key("attention.sliding_window"));
    if (c.n_layer > 4096) fail("model metadata: block_count ", c.n_layer, " is implausibly large");
    if (c.n_kv_shared >= c.n_layer)
        fail("model metadata: shared_kv_layers ", c.n_kv_shared, " must be below block_count ", c.n_layer);
    if (c.n_expert > 0) {
        require_positive(c.n_expert_used, key("expert_used_count"));
        require_positive(c.n_ff_exp, key("expert_feed_forward_length"));
        if (c.n_expert_used > c.n_expert)
            fail("model metadata: expert_used_count ", c.n_expert_used, " exceeds expert_count ", c.n_expert);
    }
    if (!(c.rms_eps > 0.0f)) fail("model metadata: layer_norm_rms_epsilon must be positive");
    if (c.softcap < 0.0f) fail("model metadata: final_logit_softcapping must not be negative");

    read_layer_arrays(f, c);
    assign_kv_sources(c);

    const auto* embd = f.find_tensor("token_embd.weight");
    if (!embd) fail("model is missing tensor 'token_embd.weight'");
    c.n_vocab = embd->ne[1];
    return c;
}

}  // namespace hf2q::gemma4

#include "convert/gemma4_convert.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "gguf/gguf.h"

namespace hf2q::convert {
namespace {

// Expected checkpoint (PyTorch-order) shape of a table entry.
enum class Shape {
    H,             // [H]
    Embed,         // [V, H]
    PleEmbed,      // [V_ple, L*P]
    PleModelProj,  // [L*P, H]
    P,             // [P]
    Q,             // [n_h*hd, H]
    KV,            // [n_kv*hd, H]
    O,             // [H, n_h*hd]
    HeadDim,       // [hd]
    FfnIn,         // [F, H]   gate / up
    FfnOut,        // [H, F]   down
    Scalar,        // [1] (or a 0-d scalar)
    InpGate,       // [P, H]
    Proj,          // [H, P]
    Router,        // [E, H]
    PerExpert,     // [E]
    GateUpExps,    // [E, 2*F_e, H]
    DownExps,      // [E, H, F_e]
};

// When a table entry must (or may) be present.
enum class Need { Always, Optional, NonShared, V, Ple, Moe, MoeOptional };

struct NameEntry {
    std::string_view hf;    // suffix after "model." (global) or "model.layers.N." (per layer)
    std::string_view gguf;  // after "blk.N." for per-layer entries
    bool per_layer;
    Shape shape;
    Need need;
};

// The one HF -> GGUF name table (spec gguf-gemma4.md §3.3).
constexpr NameEntry kNames[] = {
    {"embed_tokens.weight", "token_embd.weight", false, Shape::Embed, Need::Always},
    {"norm.weight", "output_norm.weight", false, Shape::H, Need::Always},
    {"embed_tokens_per_layer.weight", "per_layer_token_embd.weight", false, Shape::PleEmbed,
     Need::Ple},
    {"per_layer_model_projection.weight", "per_layer_model_proj.weight", false, Shape::PleModelProj,
     Need::Ple},
    {"per_layer_projection_norm.weight", "per_layer_proj_norm.weight", false, Shape::P, Need::Ple},
    {"input_layernorm.weight", "attn_norm.weight", true, Shape::H, Need::Always},
    {"self_attn.q_proj.weight", "attn_q.weight", true, Shape::Q, Need::Always},
    {"self_attn.k_proj.weight", "attn_k.weight", true, Shape::KV, Need::NonShared},
    {"self_attn.v_proj.weight", "attn_v.weight", true, Shape::KV, Need::V},
    {"self_attn.o_proj.weight", "attn_output.weight", true, Shape::O, Need::Always},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", true, Shape::HeadDim, Need::Always},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", true, Shape::HeadDim, Need::NonShared},
    {"post_attention_layernorm.weight", "post_attention_norm.weight", true, Shape::H, Need::Always},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight", true, Shape::H, Need::Always},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight", true, Shape::H, Need::Always},
    {"mlp.gate_proj.weight", "ffn_gate.weight", true, Shape::FfnIn, Need::Always},
    {"mlp.up_proj.weight", "ffn_up.weight", true, Shape::FfnIn, Need::Always},
    {"mlp.down_proj.weight", "ffn_down.weight", true, Shape::FfnOut, Need::Always},
    {"layer_scalar", "layer_output_scale.weight", true, Shape::Scalar, Need::Optional},
    {"per_layer_input_gate.weight", "inp_gate.weight", true, Shape::InpGate, Need::Ple},
    {"per_layer_projection.weight", "proj.weight", true, Shape::Proj, Need::Ple},
    {"post_per_layer_input_norm.weight", "post_norm.weight", true, Shape::H, Need::Ple},
    {"pre_feedforward_layernorm_2.weight", "pre_ffw_norm_2.weight", true, Shape::H, Need::Moe},
    {"post_feedforward_layernorm_1.weight", "post_ffw_norm_1.weight", true, Shape::H, Need::Moe},
    {"post_feedforward_layernorm_2.weight", "post_ffw_norm_2.weight", true, Shape::H, Need::Moe},
    {"router.proj.weight", "ffn_gate_inp.weight", true, Shape::Router, Need::Moe},
    {"router.scale", "ffn_gate_inp.scale", true, Shape::H, Need::Moe},
    {"router.per_expert_scale", "ffn_down_exps.scale", true, Shape::PerExpert, Need::MoeOptional},
    {"experts.gate_up_proj", "ffn_gate_up_exps.weight", true, Shape::GateUpExps, Need::Moe},
    {"experts.down_proj", "ffn_down_exps.weight", true, Shape::DownExps, Need::Moe},
};
constexpr int kNumNames = static_cast<int>(sizeof(kNames) / sizeof(kNames[0]));

bool starts_with(std::string_view s, std::string_view p) {
    return s.substr(0, p.size()) == p;
}

// Parses "N." at the start of s; returns the index and advances s, or -1.
int64_t take_layer_index(std::string_view& s) {
    size_t i = 0;
    int64_t v = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9' && i < 6) v = v * 10 + (s[i++] - '0');
    if (i == 0 || i >= s.size() || s[i] != '.' || (i > 1 && s[0] == '0')) return -1;
    s.remove_prefix(i + 1);
    return v;
}

std::vector<int64_t> expected_shape(const NameEntry& e, const Gemma4HfConfig& c, uint32_t P,
                                    int il) {
    const int64_t H = c.hidden_size, L = c.num_hidden_layers;
    const int64_t hd = il >= 0 ? c.layer_head_dim[il] : 0, nkv = il >= 0 ? c.layer_kv_heads[il] : 0;
    const int64_t nh = c.num_attention_heads, F = il >= 0 ? c.layer_ffn[il] : 0;
    const int64_t E = c.num_experts.value_or(0), Fe = c.moe_intermediate_size.value_or(0);
    switch (e.shape) {
        case Shape::H:
            return {H};
        case Shape::Embed:
            return {c.vocab_size, H};
        case Shape::PleEmbed:
            return {c.vocab_size_per_layer_input, L * P};
        case Shape::PleModelProj:
            return {L * P, H};
        case Shape::P:
            return {P};
        case Shape::Q:
            return {nh * hd, H};
        case Shape::KV:
            return {nkv * hd, H};
        case Shape::O:
            return {H, nh * hd};
        case Shape::HeadDim:
            return {hd};
        case Shape::FfnIn:
            return {F, H};
        case Shape::FfnOut:
            return {H, F};
        case Shape::Scalar:
            return {1};
        case Shape::InpGate:
            return {P, H};
        case Shape::Proj:
            return {H, P};
        case Shape::Router:
            return {E, H};
        case Shape::PerExpert:
            return {E};
        case Shape::GateUpExps:
            return {E, 2 * Fe, H};
        case Shape::DownExps:
            return {E, H, Fe};
    }
    return {};
}

std::string shape_str(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

// Whether entry e must be present / may be present on layer il.
bool required(const NameEntry& e, const Gemma4HfConfig& c, uint32_t P, int il) {
    switch (e.need) {
        case Need::Always:
            return true;
        case Need::Optional:
            return false;
        case Need::NonShared:
            return !c.is_kv_shared(il);
        case Need::V:
            return !c.is_kv_shared(il) && !c.layer_k_eq_v[il];
        case Need::Ple:
            return P > 0;
        case Need::Moe:
            return c.enable_moe_block;
        case Need::MoeOptional:
            return false;
    }
    return false;
}

void check_allowed(const NameEntry& e, const Gemma4HfConfig& c, uint32_t P, int il,
                   const std::string& hf) {
    if ((e.need == Need::Ple) && P == 0)
        fail("tensor '", hf,
             "' is a per-layer-embedding weight but hidden_size_per_layer_input is 0");
    if ((e.need == Need::Moe || e.need == Need::MoeOptional) && !c.enable_moe_block)
        fail("tensor '", hf, "' is an MoE weight but enable_moe_block is false");
    if (e.need == Need::V && c.layer_k_eq_v[il] && !c.is_kv_shared(il))
        fail("tensor '", hf, "': layer ", il,
             " is a K=V full-attention layer (attention_k_eq_v) and must not have v_proj");
}

void check_shape(const NameEntry& e, const StTensor& t, const Gemma4HfConfig& c, uint32_t P,
                 int il) {
    auto want = expected_shape(e, c, P, il);
    auto have = t.shape;
    if (e.shape == Shape::Scalar && have.empty()) have = {1};
    if (have != want)
        fail("tensor '", t.name, "' has shape ", shape_str(t.shape), ", expected ", shape_str(want),
             " from config.json");
}

}  // namespace

MappedName map_gemma4_tensor_name(const std::string& hf_name) {
    std::string_view s = hf_name;
    MappedName m;
    if (s == "lm_head.weight") return m;  // tied to embed_tokens
    if (starts_with(s, "model.language_model."))
        s.remove_prefix(21);
    else if (starts_with(s, "model."))
        s.remove_prefix(6);
    else
        fail("cannot map tensor '", hf_name,
             "': expected a 'model.' or 'model.language_model.' prefix");
    for (std::string_view mm : {"vision_tower.", "audio_tower.", "embed_vision.", "embed_audio.",
                                "multi_modal_projector.", "vision_model.", "audio_model."})
        if (starts_with(s, mm)) return m;
    int64_t layer = -1;
    if (starts_with(s, "layers.")) {
        s.remove_prefix(7);
        layer = take_layer_index(s);
        if (layer < 0) fail("cannot map tensor '", hf_name, "': bad layer index");
    }
    for (int i = 0; i < kNumNames; ++i) {
        const auto& e = kNames[i];
        if (e.per_layer != (layer >= 0) || e.hf != s) continue;
        m.kind = MappedName::Kind::Tensor;
        m.gguf_name = e.per_layer ? str_cat("blk.", layer, ".", e.gguf) : std::string(e.gguf);
        m.layer = static_cast<int>(layer);
        m.entry = i;
        return m;
    }
    fail("cannot map tensor '", hf_name, "': not a known Gemma 4 text-model weight");
}

uint32_t resolve_ple_width(const Checkpoint& ck, const Gemma4HfConfig& cfg) {
    if (cfg.hidden_size_per_layer_input) return *cfg.hidden_size_per_layer_input;
    for (const auto& e : ck.tensors()) {
        const auto& n = e.tensor->name;
        if (n.size() >= 32 &&
            n.compare(n.size() - 32, 32, "per_layer_projection_norm.weight") == 0 &&
            e.tensor->shape.size() == 1)
            return static_cast<uint32_t>(e.tensor->shape[0]);
    }
    return 0;
}

std::vector<float> gemma4_rope_freqs(const Gemma4HfConfig& cfg) {
    const uint32_t half = cfg.global_head_dim / 2;
    float pf =
        cfg.rope_full.rope_type == "proportional" ? cfg.rope_full.partial_rotary_factor : 1.0f;
    // int() of a double product, as the reference converter computes it.
    auto n_rot = static_cast<uint32_t>(static_cast<double>(cfg.global_head_dim) *
                                       static_cast<double>(pf) / 2.0);
    n_rot = std::min(n_rot, half);
    std::vector<float> v(half, 1e30f);
    std::fill(v.begin(), v.begin() + n_rot, 1.0f);
    return v;
}

std::vector<PlannedTensor> plan_gemma4_tensors(const Checkpoint& ck, const Gemma4HfConfig& cfg,
                                               uint32_t P) {
    std::vector<PlannedTensor> out;
    if (cfg.any_full()) {
        PlannedTensor rf;
        rf.name = "rope_freqs.weight";
        rf.generated = gemma4_rope_freqs(cfg);
        rf.ne = {static_cast<int64_t>(rf.generated.size())};
        out.push_back(std::move(rf));
    }
    const uint32_t L = cfg.num_hidden_layers;
    // found[layer + 1][entry]: layer -1 (globals) is row 0.
    std::vector<std::vector<bool>> found(L + 1, std::vector<bool>(kNumNames, false));
    std::unordered_map<std::string, std::string> by_gguf;  // gguf name -> hf name
    for (const auto& ent : ck.tensors()) {
        const StTensor& t = *ent.tensor;
        MappedName m = map_gemma4_tensor_name(t.name);
        if (m.kind == MappedName::Kind::Ignored) continue;
        if (m.layer >= static_cast<int>(L))
            fail("tensor '", t.name, "' names layer ", m.layer, " but num_hidden_layers is ", L);
        const NameEntry& e = kNames[m.entry];
        check_allowed(e, cfg, P, m.layer, t.name);
        check_shape(e, t, cfg, P, m.layer);
        auto [it, fresh] = by_gguf.emplace(m.gguf_name, t.name);
        if (!fresh) fail("tensors '", it->second, "' and '", t.name, "' both map to ", m.gguf_name);
        found[m.layer + 1][m.entry] = true;
        PlannedTensor pt;
        pt.name = m.gguf_name;
        pt.src = &t;
        auto shape = t.shape.empty() ? std::vector<int64_t>{1} : t.shape;
        if (shape.size() > 4)
            fail("tensor '", t.name, "' has ", shape.size(), " dimensions; GGUF allows 4");
        pt.ne.assign(shape.rbegin(), shape.rend());
        out.push_back(std::move(pt));
    }
    for (int i = 0; i < kNumNames; ++i) {
        const auto& e = kNames[i];
        for (int il = e.per_layer ? 0 : -1; il < (e.per_layer ? static_cast<int>(L) : 0); ++il)
            if (!found[il + 1][i] && required(e, cfg, P, il))
                fail("checkpoint is missing ",
                     e.per_layer ? str_cat("layer ", il, " tensor ") : "tensor ", "'", e.hf,
                     "' (GGUF ",
                     e.per_layer ? str_cat("blk.", il, ".", e.gguf) : std::string(e.gguf), ")");
    }
    return out;
}

void add_gemma4_metadata(gguf::Writer& w, const Gemma4HfConfig& c, uint32_t P) {
    using gguf::Value;
    const uint32_t L = c.num_hidden_layers;
    w.set("gemma4.context_length", Value::u32(c.max_position_embeddings));
    w.set("gemma4.embedding_length", Value::u32(c.hidden_size));
    w.set("gemma4.block_count", Value::u32(L));
    if (c.double_wide()) {
        std::vector<int32_t> ff(c.layer_ffn.begin(), c.layer_ffn.end());
        w.set("gemma4.feed_forward_length", Value::i32_array(ff));
    } else {
        w.set("gemma4.feed_forward_length", Value::u32(c.intermediate_size));
    }
    w.set("gemma4.attention.head_count", Value::u32(c.num_attention_heads));
    if (c.per_layer_kv_heads) {
        std::vector<int32_t> kv(c.layer_kv_heads.begin(), c.layer_kv_heads.end());
        w.set("gemma4.attention.head_count_kv", Value::i32_array(kv));
    } else {
        w.set("gemma4.attention.head_count_kv", Value::u32(c.num_key_value_heads));
    }
    w.set("gemma4.attention.key_length", Value::u32(c.global_head_dim));
    w.set("gemma4.attention.value_length", Value::u32(c.global_head_dim));
    w.set("gemma4.attention.key_length_swa", Value::u32(c.head_dim));
    w.set("gemma4.attention.value_length_swa", Value::u32(c.head_dim));
    w.set("gemma4.attention.layer_norm_rms_epsilon", Value::f32(c.rms_norm_eps));
    w.set("gemma4.attention.sliding_window", Value::u32(c.sliding_window));
    w.set("gemma4.attention.sliding_window_pattern", Value::bool_array(c.is_sliding));
    w.set("gemma4.attention.shared_kv_layers", Value::u32(c.num_kv_shared_layers));
    w.set("gemma4.embedding_length_per_layer_input", Value::u32(P));
    w.set("gemma4.rope.freq_base", Value::f32(c.rope_full.theta));
    w.set("gemma4.rope.freq_base_swa", Value::f32(c.rope_sliding.theta));
    w.set("gemma4.rope.dimension_count", Value::u32(c.global_head_dim));
    auto n_rot_swa =
        static_cast<uint32_t>(static_cast<double>(c.head_dim) *
                              static_cast<double>(c.rope_sliding.partial_rotary_factor));
    w.set("gemma4.rope.dimension_count_swa", Value::u32(n_rot_swa));
    // Written even when the model has no capping: llama.cpp's default is 30.
    w.set("gemma4.final_logit_softcapping", Value::f32(c.final_logit_softcapping.value_or(0.0f)));
    if (c.enable_moe_block) {
        w.set("gemma4.expert_count", Value::u32(*c.num_experts));
        w.set("gemma4.expert_used_count", Value::u32(*c.top_k_experts));
        w.set("gemma4.expert_feed_forward_length", Value::u32(*c.moe_intermediate_size));
    }
}

}  // namespace hf2q::convert

#include "convert/tiny_model.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "quant/quant.h"

namespace hf2q::test {

namespace fs = std::filesystem;

std::vector<uint8_t> safetensors_image(const std::vector<StEntry>& entries) {
    nlohmann::ordered_json h;
    h["__metadata__"] = {{"format", "pt"}};
    uint64_t off = 0;
    for (const auto& e : entries) {
        h[e.name] = {
            {"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {off, off + e.bytes.size()}}};
        off += e.bytes.size();
    }
    std::string js = h.dump();
    while (js.size() % 8) js += ' ';
    // Sized once and filled with memcpy: GCC 12's -O3 warns (falsely) about
    // vector::insert of a few bytes at the end.
    size_t total = 8 + js.size();
    for (const auto& e : entries) total += e.bytes.size();
    std::vector<uint8_t> out(total);
    uint64_t n = js.size();
    for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
    std::memcpy(out.data() + 8, js.data(), js.size());
    size_t at = 8 + js.size();
    for (const auto& e : entries) {
        if (!e.bytes.empty()) std::memcpy(out.data() + at, e.bytes.data(), e.bytes.size());
        at += e.bytes.size();
    }
    return out;
}

void write_file(const fs::path& p, const std::vector<uint8_t>& bytes) {
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
    if (!f) throw std::runtime_error("cannot write " + p.string());
}

void write_text(const fs::path& p, const std::string& s) {
    write_file(p, std::vector<uint8_t>(s.begin(), s.end()));
}

StEntry make_entry_values(const std::string& name, const std::string& dtype,
                          std::vector<int64_t> shape, std::vector<float> values) {
    StEntry e{name, dtype, std::move(shape), {}, std::move(values)};
    for (float v : e.values) {
        uint8_t b[4];
        size_t n = 4;
        if (dtype == "F32") {
            std::memcpy(b, &v, 4);
        } else {
            uint16_t h = dtype == "F16" ? quant::fp32_to_fp16(v) : quant::fp32_to_bf16(v);
            std::memcpy(b, &h, 2);
            n = 2;
        }
        e.bytes.resize(e.bytes.size() + n);
        std::memcpy(e.bytes.data() + e.bytes.size() - n, b, n);
    }
    return e;
}

StEntry make_entry(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                   uint32_t seed) {
    uint64_t n = 1;
    for (auto d : shape) n *= static_cast<uint64_t>(d);
    std::vector<float> v(n);
    uint32_t x = seed * 2654435761u + 12345u;
    for (auto& f : v) {
        x = x * 1664525u + 1013904223u;
        f = static_cast<float>(static_cast<int32_t>(x >> 8) - (1 << 23)) /
            static_cast<float>(1 << 23);
    }
    return make_entry_values(name, dtype, std::move(shape), std::move(v));
}

namespace {

std::vector<std::string> layer_types(const TinySpec& s) {
    if (!s.layer_types.empty()) return s.layer_types;
    std::vector<std::string> t(s.L, "sliding_attention");
    t.back() = "full_attention";
    return t;
}

}  // namespace

nlohmann::json tiny_config(const TinySpec& s) {
    nlohmann::json t;
    t["model_type"] = "gemma4_text";
    t["hidden_size"] = s.H;
    t["intermediate_size"] = s.I;
    t["num_hidden_layers"] = s.L;
    t["num_attention_heads"] = s.nh;
    t["num_key_value_heads"] = s.nkv;
    t["head_dim"] = s.hd;
    t["vocab_size"] = s.V;
    t["vocab_size_per_layer_input"] = s.V;
    t["max_position_embeddings"] = 4096;
    t["rms_norm_eps"] = 1e-6;
    t["sliding_window"] = s.window;
    t["layer_types"] = layer_types(s);
    t["final_logit_softcapping"] = s.softcap;
    t["hidden_size_per_layer_input"] = s.P;
    t["num_kv_shared_layers"] = s.shared;
    t["use_double_wide_mlp"] = s.double_wide;
    t["attention_k_eq_v"] = s.k_eq_v;
    t["enable_moe_block"] = s.moe;
    if (s.moe) {
        t["num_experts"] = s.E;
        t["top_k_experts"] = s.top_k;
        t["moe_intermediate_size"] = s.Fe;
    }
    t["rope_parameters"] = {
        {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
        {"full_attention",
         {{"rope_type", "proportional"},
          {"partial_rotary_factor", 0.25},
          {"rope_theta", 1000000.0}}}};
    auto lt = layer_types(s);
    if (s.per_layer_config) {
        nlohmann::json plc = nlohmann::json::object();
        for (int i = 0; i < s.L; ++i) {
            if (lt[i] != "full_attention") continue;
            nlohmann::json o = {{"head_dim", s.ghd}};
            if (s.global_kv && s.k_eq_v) o["num_key_value_heads"] = s.global_kv;
            plc[std::to_string(i)] = o;
        }
        t["per_layer_config"] = plc;
    } else {
        t["global_head_dim"] = s.ghd;
        t["num_global_key_value_heads"] =
            s.global_kv ? nlohmann::json(s.global_kv) : nlohmann::json(nullptr);
    }
    if (!s.text_config) return t;
    nlohmann::json root;
    root["model_type"] = "gemma4";
    root["architectures"] = {"Gemma4ForConditionalGeneration"};
    root["text_config"] = t;
    root["vision_config"] = {{"hidden_size", 16}};
    return root;
}

std::vector<StEntry> tiny_tensors(const TinySpec& s) {
    std::vector<StEntry> out;
    uint32_t seed = 1;
    auto add = [&](const std::string& n, std::vector<int64_t> shape) {
        out.push_back(make_entry(s.prefix + n, s.dtype, std::move(shape), seed++));
    };
    auto lt = layer_types(s);
    const int64_t H = s.H;
    add("embed_tokens.weight", {s.V, H});
    add("norm.weight", {H});
    if (s.P) {
        add("embed_tokens_per_layer.weight", {s.V, int64_t{s.L} * s.P});
        add("per_layer_model_projection.weight", {int64_t{s.L} * s.P, H});
        add("per_layer_projection_norm.weight", {s.P});
    }
    for (int il = 0; il < s.L; ++il) {
        const bool full = lt[il] == "full_attention";
        const int64_t hd = full ? s.ghd : s.hd;
        const bool kv_eq = s.k_eq_v && full;
        const int64_t nkv = kv_eq && s.global_kv ? s.global_kv : s.nkv;
        const int64_t F = s.double_wide && il >= s.L - s.shared ? 2 * s.I : s.I;
        std::string p = "layers." + std::to_string(il) + ".";
        for (const char* n :
             {"input_layernorm.weight", "post_attention_layernorm.weight",
              "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight"})
            add(p + n, {H});
        add(p + "self_attn.q_proj.weight", {s.nh * hd, H});
        add(p + "self_attn.k_proj.weight", {nkv * hd, H});  // KV-shared layers keep them too
        if (!kv_eq) add(p + "self_attn.v_proj.weight", {nkv * hd, H});
        add(p + "self_attn.o_proj.weight", {H, s.nh * hd});
        add(p + "self_attn.q_norm.weight", {hd});
        add(p + "self_attn.k_norm.weight", {hd});
        add(p + "mlp.gate_proj.weight", {F, H});
        add(p + "mlp.up_proj.weight", {F, H});
        add(p + "mlp.down_proj.weight", {H, F});
        add(p + "layer_scalar", {1});
        if (s.P) {
            add(p + "per_layer_input_gate.weight", {s.P, H});
            add(p + "per_layer_projection.weight", {H, s.P});
            add(p + "post_per_layer_input_norm.weight", {H});
        }
        if (s.moe) {
            for (const char* n :
                 {"pre_feedforward_layernorm_2.weight", "post_feedforward_layernorm_1.weight",
                  "post_feedforward_layernorm_2.weight", "router.scale"})
                add(p + n, {H});
            add(p + "router.proj.weight", {s.E, H});
            add(p + "router.per_expert_scale", {s.E});
            add(p + "experts.gate_up_proj", {s.E, 2 * s.Fe, H});
            add(p + "experts.down_proj", {s.E, H, s.Fe});
        }
    }
    if (s.with_vision) {
        out.push_back(make_entry("model.vision_tower.encoder.layers.0.mlp.up_proj.weight", s.dtype,
                                 {8, 4}, 999));
        out.push_back(
            make_entry("model.embed_vision.embedding_projection.weight", s.dtype, {H, 4}, 998));
        out.push_back(make_entry("lm_head.weight", s.dtype, {s.V, H}, 997));
    }
    return out;
}

std::vector<StEntry> write_tiny_model(const fs::path& dir, const TinySpec& s) {
    write_text(dir / "config.json", tiny_config(s).dump(2));
    auto t = tiny_tensors(s);
    write_file(dir / "model.safetensors", safetensors_image(t));
    return t;
}

}  // namespace hf2q::test

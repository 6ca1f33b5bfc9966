#include "convert/hf_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hf2q::convert {
namespace {

using json = nlohmann::json;

// Field reader bound to one JSON object and the file name used in errors.
struct Fields {
    const json& j;
    const std::string& file;

    const json* get(const char* key) const {
        auto it = j.find(key);
        return it == j.end() || it->is_null() ? nullptr : &*it;
    }
    std::optional<uint32_t> opt_u32(const char* key, uint64_t lo, uint64_t hi) const {
        const json* v = get(key);
        if (!v) return std::nullopt;
        if (!v->is_number_integer()) fail(file, ": ", key, " must be an integer, got ", v->dump());
        // Parsed JSON stores non-negative integers as unsigned, built JSON may not.
        const bool neg = !v->is_number_unsigned() && v->get<int64_t>() < 0;
        const uint64_t u = neg ? 0 : v->get<uint64_t>();
        if (neg || u < lo || u > hi)
            fail(file, ": ", key, " = ", v->dump(), " is out of range [", lo, ", ", hi, "]");
        return static_cast<uint32_t>(u);
    }
    uint32_t u32(const char* key, uint64_t lo, uint64_t hi) const {
        auto v = opt_u32(key, lo, hi);
        if (!v) fail(file, ": required field ", key, " is missing");
        return *v;
    }
    uint32_t u32_or(const char* key, uint32_t def, uint64_t lo, uint64_t hi) const {
        return opt_u32(key, lo, hi).value_or(def);
    }
    std::optional<float> opt_f32(const char* key) const {
        const json* v = get(key);
        if (!v) return std::nullopt;
        if (!v->is_number()) fail(file, ": ", key, " must be a number, got ", v->dump());
        double d = v->get<double>();
        if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max())
            fail(file, ": ", key, " = ", v->dump(), " is not a finite 32-bit float");
        return static_cast<float>(d);
    }
    bool boolean(const char* key, bool def) const {
        const json* v = get(key);
        if (!v) return def;
        if (!v->is_boolean()) fail(file, ": ", key, " must be true or false, got ", v->dump());
        return v->get<bool>();
    }
};

constexpr uint64_t kMaxDim = 1u << 20;
constexpr uint64_t kMaxLayers = 4096;

RopeParams parse_rope(const json& r, const std::string& file, const char* which, RopeParams def) {
    if (r.is_null()) return def;
    if (!r.is_object()) fail(file, ": rope_parameters.", which, " is not an object");
    std::string where = std::string("rope_parameters.") + which;
    RopeParams p = def;
    if (auto t = r.find("rope_type"); t != r.end() && !t->is_null()) {
        if (!t->is_string()) fail(file, ": ", where, ".rope_type is not a string");
        p.rope_type = t->get<std::string>();
        if (p.rope_type != "default" && p.rope_type != "proportional")
            fail(file, ": ", where, ".rope_type '", p.rope_type,
                 "' is not supported (Gemma 4 uses 'default' and 'proportional')");
    }
    Fields f{r, file};
    if (auto th = f.opt_f32("rope_theta")) p.theta = *th;
    if (!(p.theta > 0.0f)) fail(file, ": ", where, ".rope_theta must be > 0");
    // An absent factor means the whole head rotates (transformers' rope utilities).
    p.partial_rotary_factor = f.opt_f32("partial_rotary_factor").value_or(1.0f);
    if (!(p.partial_rotary_factor > 0.0f && p.partial_rotary_factor <= 1.0f))
        fail(file, ": ", where, ".partial_rotary_factor must be in (0, 1]");
    if (auto fac = f.opt_f32("factor"); fac && *fac != 1.0f)
        fail(file, ": ", where, ".factor = ", *fac,
             " is not supported (llama.cpp's gemma4 ignores it)");
    return p;
}

void parse_layer_types(const Fields& f, Gemma4HfConfig& c) {
    const uint32_t L = c.num_hidden_layers;
    c.is_sliding.assign(L, true);
    if (const json* lt = f.get("layer_types")) {
        if (!lt->is_array() || lt->size() != L)
            fail(f.file, ": layer_types must be an array of num_hidden_layers (", L, ") strings");
        for (uint32_t i = 0; i < L; ++i) {
            const json& s = (*lt)[i];
            if (s == "sliding_attention")
                c.is_sliding[i] = true;
            else if (s == "full_attention")
                c.is_sliding[i] = false;
            else
                fail(f.file, ": layer_types[", i, "] = ", s.dump(),
                     " (expected \"sliding_attention\" or \"full_attention\")");
        }
    } else {
        for (uint32_t i = 0; i < L; ++i) c.is_sliding[i] = (i + 1) % 6 != 0;  // 5:1 default
    }
    c.is_sliding[L - 1] = false;  // transformers forces the last layer to full attention
}

// Overrides from the newer "per_layer_config" form: {"5": {"head_dim": 512, ...}} (or an
// array of L entries, null where nothing is overridden).
void apply_per_layer_config(const json& plc, const std::string& file, Gemma4HfConfig& c) {
    const uint32_t L = c.num_hidden_layers;
    auto apply = [&](uint64_t il, const json& o) {
        if (il >= L)
            fail(file, ": per_layer_config names layer ", il, " but there are ", L, " layers");
        if (o.is_null()) return;
        if (!o.is_object()) fail(file, ": per_layer_config[", il, "] is not an object");
        std::string where = str_cat("per_layer_config[", il, "]");
        for (auto it = o.begin(); it != o.end(); ++it) {
            const std::string& k = it.key();
            if (k != "head_dim" && k != "num_key_value_heads" && k != "num_attention_heads" &&
                k != "intermediate_size")
                fail(file, ": ", where, ".", k,
                     " is not a per-layer override the converter understands");
        }
        Fields f{o, file};
        if (auto v = f.opt_u32("head_dim", 2, kMaxDim)) c.layer_head_dim[il] = *v;
        if (auto v = f.opt_u32("num_key_value_heads", 1, kMaxDim)) {
            c.layer_kv_heads[il] = *v;
            c.per_layer_kv_heads = true;
        }
        if (auto v = f.opt_u32("num_attention_heads", 1, kMaxDim); v && *v != c.num_attention_heads)
            fail(file, ": ", where, ".num_attention_heads = ", *v,
                 " differs from num_attention_heads; GGUF has one query-head count for all layers");
        if (auto v = f.opt_u32("intermediate_size", 1, kMaxDim)) c.layer_ffn[il] = *v;
    };
    if (plc.is_object()) {
        for (auto it = plc.begin(); it != plc.end(); ++it) {
            const std::string& k = it.key();
            if (k.empty() || k.size() > 6 || k.find_first_not_of("0123456789") != std::string::npos)
                fail(file, ": per_layer_config key '", k, "' is not a layer index");
            apply(std::stoull(k), it.value());
        }
    } else if (plc.is_array()) {
        if (plc.size() != L) fail(file, ": per_layer_config array must have ", L, " entries");
        for (uint32_t i = 0; i < L; ++i) apply(i, plc[i]);
    } else {
        fail(file, ": per_layer_config must be an object or an array");
    }
}

void derive_layers(const Fields& f, const json* plc, std::optional<uint32_t> global_head_dim,
                   std::optional<uint32_t> global_kv, Gemma4HfConfig& c) {
    const uint32_t L = c.num_hidden_layers;
    c.layer_head_dim.assign(L, c.head_dim);
    c.layer_kv_heads.assign(L, c.num_key_value_heads);
    c.layer_k_eq_v.assign(L, false);
    c.layer_ffn.assign(L, c.intermediate_size);
    for (uint32_t il = 0; il < L; ++il) {
        c.layer_k_eq_v[il] = c.attention_k_eq_v && !c.is_sliding[il];
        if (c.use_double_wide_mlp && c.is_kv_shared(il)) c.layer_ffn[il] = 2 * c.intermediate_size;
    }
    if (plc) {
        c.used_per_layer_config = true;
        apply_per_layer_config(*plc, f.file, c);
    } else {
        // Released form: global_head_dim applies to full layers when truthy;
        // num_global_key_value_heads only on K=V layers (transformers' rule).
        for (uint32_t il = 0; il < L; ++il) {
            if (c.is_sliding[il]) continue;
            if (global_head_dim.value_or(0) != 0) c.layer_head_dim[il] = *global_head_dim;
            if (c.layer_k_eq_v[il] && global_kv) c.layer_kv_heads[il] = *global_kv;
        }
        c.per_layer_kv_heads = global_kv.has_value();
    }
}

void validate_layers(const std::string& file, Gemma4HfConfig& c) {
    const uint32_t L = c.num_hidden_layers;
    c.global_head_dim = 0;
    for (uint32_t il = 0; il < L; ++il) {
        const uint32_t hd = c.layer_head_dim[il], nkv = c.layer_kv_heads[il];
        if (hd % 2 != 0) fail(file, ": layer ", il, " head_dim ", hd, " is odd (RoPE needs pairs)");
        if (c.is_sliding[il] && hd != c.head_dim)
            fail(file, ": sliding layer ", il, " has head_dim ", hd,
                 " but GGUF stores one sliding head size (", c.head_dim, ")");
        if (!c.is_sliding[il]) {
            if (c.global_head_dim == 0)
                c.global_head_dim = hd;
            else if (hd != c.global_head_dim)
                fail(file, ": full-attention layers have different head sizes (", c.global_head_dim,
                     " and ", hd, " at layer ", il, "); GGUF stores one");
        }
        if (nkv > c.num_attention_heads || c.num_attention_heads % nkv != 0)
            fail(file, ": layer ", il, ": num_attention_heads ", c.num_attention_heads,
                 " is not a multiple of its ", nkv, " key/value heads");
        if (uint64_t{c.num_attention_heads} * hd > kMaxDim)
            fail(file, ": layer ", il, ": num_attention_heads x head_dim is too large");
    }
    // A KV-shared layer reads the cache of the last non-shared layer of its own type.
    for (uint32_t il = c.first_kv_shared(); il < L; ++il) {
        bool found = false;
        for (uint32_t src = 0; src < c.first_kv_shared() && !found; ++src)
            found = c.is_sliding[src] == c.is_sliding[il];
        if (!found)
            fail(file, ": KV-shared layer ", il, " has no earlier non-shared ",
                 c.is_sliding[il] ? "sliding" : "full", " layer to share K/V with");
    }
}

void parse_moe(const Fields& f, Gemma4HfConfig& c) {
    c.enable_moe_block = f.boolean("enable_moe_block", false);
    if (!c.enable_moe_block) return;
    c.num_experts = f.opt_u32("num_experts", 1, 1u << 16);
    c.top_k_experts = f.opt_u32("top_k_experts", 1, 1u << 16);
    c.moe_intermediate_size = f.opt_u32("moe_intermediate_size", 1, kMaxDim);
    if (!c.moe_intermediate_size)
        c.moe_intermediate_size = f.opt_u32("expert_intermediate_size", 1, kMaxDim);
    if (!c.num_experts || !c.top_k_experts || !c.moe_intermediate_size)
        fail(f.file,
             ": enable_moe_block is true but num_experts, top_k_experts or "
             "moe_intermediate_size (expert_intermediate_size) is missing");
    if (*c.top_k_experts > *c.num_experts)
        fail(f.file, ": top_k_experts ", *c.top_k_experts, " exceeds num_experts ", *c.num_experts);
}

void parse_ropes(const Fields& f, Gemma4HfConfig& c) {
    const json* rp = f.get("rope_parameters");
    if (!rp) return;  // transformers' defaults (see the struct)
    if (!rp->is_object()) fail(f.file, ": rope_parameters is not an object");
    auto entry = [&](const char* k) { return rp->contains(k) ? (*rp)[k] : json(); };
    c.rope_sliding =
        parse_rope(entry("sliding_attention"), f.file, "sliding_attention", c.rope_sliding);
    c.rope_full = parse_rope(entry("full_attention"), f.file, "full_attention", c.rope_full);
    // The sliding factor may also be given at the top level of rope_parameters (llama.cpp).
    if (!entry("sliding_attention").contains("partial_rotary_factor")) {
        Fields top{*rp, f.file};
        c.rope_sliding.partial_rotary_factor = top.opt_f32("partial_rotary_factor").value_or(1.0f);
        if (!(c.rope_sliding.partial_rotary_factor > 0.0f &&
              c.rope_sliding.partial_rotary_factor <= 1.0f))
            fail(f.file, ": rope_parameters.partial_rotary_factor must be in (0, 1]");
    }
    // GGUF expresses partial rotation of sliding layers as a smaller n_rot (the
    // "default" layout) and of full layers through rope_freqs (the "proportional"
    // layout); the other two combinations have no llama.cpp encoding.
    if (c.rope_sliding.rope_type == "proportional" && c.rope_sliding.partial_rotary_factor != 1.0f)
        fail(f.file,
             ": proportional RoPE with partial_rotary_factor < 1 on sliding layers is not "
             "supported");
    if (c.rope_full.rope_type == "default" && c.rope_full.partial_rotary_factor != 1.0f)
        fail(f.file,
             ": default RoPE with partial_rotary_factor < 1 on full layers is not supported");
}

}  // namespace

bool Gemma4HfConfig::double_wide() const {
    for (auto f : layer_ffn)
        if (f != intermediate_size) return true;
    return false;
}

bool Gemma4HfConfig::any_full() const {
    for (bool s : is_sliding)
        if (!s) return true;
    return false;
}

Gemma4HfConfig parse_hf_config(const json& root, const std::string& name) {
    if (!root.is_object()) fail(name, ": config is not a JSON object");
    auto check_type = [&](const json& o) {
        if (auto mt = o.find("model_type"); mt != o.end() && mt->is_string()) {
            auto s = mt->get<std::string>();
            if (s != "gemma4" && s != "gemma4_text")
                fail(name, ": model_type '", s,
                     "' is not Gemma 4 (expected gemma4 or gemma4_text)");
        }
    };
    check_type(root);
    const json& j = root.contains("text_config") && root["text_config"].is_object()
                        ? root["text_config"]
                        : root;
    if (&j != &root) check_type(j);
    Fields f{j, name};
    Gemma4HfConfig c;
    c.hidden_size = f.u32("hidden_size", 1, kMaxDim);
    c.intermediate_size = f.u32("intermediate_size", 1, kMaxDim);
    c.num_hidden_layers = f.u32("num_hidden_layers", 1, kMaxLayers);
    c.num_attention_heads = f.u32("num_attention_heads", 1, 4096);
    c.num_key_value_heads = f.u32("num_key_value_heads", 1, 4096);
    c.head_dim = f.u32("head_dim", 2, 65536);
    c.vocab_size = f.u32_or("vocab_size", 262144, 1, 1u << 26);
    c.max_position_embeddings = f.u32_or("max_position_embeddings", 131072, 1, 0xffffffffu);
    c.sliding_window = f.u32_or("sliding_window", 512, 1, 0xffffffffu);
    c.rms_norm_eps = f.opt_f32("rms_norm_eps").value_or(1e-6f);
    if (!(c.rms_norm_eps > 0.0f && c.rms_norm_eps < 1.0f))
        fail(name, ": rms_norm_eps must be in (0, 1)");
    c.final_logit_softcapping = f.opt_f32("final_logit_softcapping");
    if (c.final_logit_softcapping && *c.final_logit_softcapping < 0.0f)
        fail(name, ": final_logit_softcapping must be >= 0");
    c.hidden_size_per_layer_input = f.opt_u32("hidden_size_per_layer_input", 0, kMaxDim);
    if (f.get("hidden_size_per_layer_input") == nullptr &&
        j.contains("hidden_size_per_layer_input"))
        c.hidden_size_per_layer_input = 0;  // explicit null disables PLE
    c.vocab_size_per_layer_input =
        f.u32_or("vocab_size_per_layer_input", c.vocab_size, 1, 1u << 26);
    c.num_kv_shared_layers = f.u32_or("num_kv_shared_layers", 0, 0, c.num_hidden_layers - 1);
    c.attention_k_eq_v = f.boolean("attention_k_eq_v", false);
    c.use_double_wide_mlp = f.boolean("use_double_wide_mlp", false);
    if (const json* ba = f.get("use_bidirectional_attention"); ba && *ba != "vision")
        fail(name, ": use_bidirectional_attention = ", ba->dump(),
             " is not supported (only null or \"vision\")");
    parse_moe(f, c);
    parse_ropes(f, c);
    parse_layer_types(f, c);
    // transformers pops global_head_dim with default 512; null/0 means "use head_dim".
    std::optional<uint32_t> ghd = j.contains("global_head_dim")
                                      ? f.opt_u32("global_head_dim", 0, 65536)
                                      : std::optional<uint32_t>(512);
    auto gkv = f.opt_u32("num_global_key_value_heads", 1, 4096);
    const json* plc = f.get("per_layer_config");
    derive_layers(f, plc, ghd, gkv, c);
    validate_layers(name, c);
    return c;
}

Gemma4HfConfig load_hf_config(const std::string& dir) {
    std::string path = (std::filesystem::path(dir) / "config.json").string();
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(path, ": cannot open (is ", dir, " a Hugging Face model directory?)");
    json j;
    try {
        j = json::parse(in);
    } catch (const json::exception& e) {
        fail(path, ": not valid JSON: ", e.what());
    }
    return parse_hf_config(j, path);
}

}  // namespace hf2q::convert

// Synthetic Gemma 4 models: presets, metadata, tensor tables and the streaming writer.
#include "convert/synth.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/checked.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "quant/quant.h"

namespace hf2q::synth {
namespace {

using gguf::KeyValue;
using gguf::Value;

// Layer il is a full-attention layer every `period` layers (and always the last one).
std::vector<bool> swa_pattern(uint32_t n_layer, uint32_t period) {
    std::vector<bool> swa(n_layer);
    for (uint32_t il = 0; il < n_layer; ++il) swa[il] = (il + 1) % period != 0 && il + 1 != n_layer;
    return swa;
}

std::vector<uint32_t> per_layer(const std::vector<bool>& swa, uint32_t v_swa, uint32_t v_full) {
    std::vector<uint32_t> r;
    for (bool s : swa) r.push_back(s ? v_swa : v_full);
    return r;
}

// gemma4-architecture.md §2 (released sizes); "tiny" is ours.
Preset make_preset(std::string_view name) {
    Preset p;
    p.name = std::string(name);
    p.head_dim_swa = 256;
    p.head_dim_full = 512;
    p.n_vocab = 262144;
    if (name == "gemma4-e2b") {
        p.n_layer = 35, p.n_embd = 1536, p.n_head = 8, p.n_ctx = 131072, p.sliding_window = 512;
        p.n_embd_per_layer = 256, p.n_kv_shared = 20;
        p.swa = swa_pattern(p.n_layer, 5);
        p.n_head_kv = per_layer(p.swa, 1, 1);
        for (uint32_t il = 0; il < p.n_layer; ++il)
            p.n_ff.push_back(il < 15 ? 6144 : 12288);  // double-wide
        p.ff_array = true;
    } else if (name == "gemma4-e4b") {
        p.n_layer = 42, p.n_embd = 2560, p.n_head = 8, p.n_ctx = 131072, p.sliding_window = 512;
        p.n_embd_per_layer = 256, p.n_kv_shared = 18;
        p.swa = swa_pattern(p.n_layer, 6);
        p.n_head_kv = per_layer(p.swa, 2, 2);
        p.n_ff.assign(p.n_layer, 10240);
    } else if (name == "gemma4-26b-a4b") {
        p.n_layer = 30, p.n_embd = 2816, p.n_head = 16, p.n_ctx = 262144, p.sliding_window = 1024;
        p.n_expert = 128, p.n_expert_used = 8, p.n_ff_exp = 704;
        p.swa = swa_pattern(p.n_layer, 6);
        p.n_head_kv = per_layer(p.swa, 8, 2);
        p.head_kv_array = true, p.k_eq_v = true;
        p.n_ff.assign(p.n_layer, 2112);
    } else if (name == "gemma4-31b") {
        p.n_layer = 60, p.n_embd = 5376, p.n_head = 32, p.n_ctx = 262144, p.sliding_window = 1024;
        p.swa = swa_pattern(p.n_layer, 6);
        p.n_head_kv = per_layer(p.swa, 16, 4);
        p.head_kv_array = true, p.k_eq_v = true;
        p.n_ff.assign(p.n_layer, 21504);
    } else if (name == "tiny") {
        p.n_layer = 4, p.n_embd = 256, p.n_head = 4, p.n_ctx = 4096, p.sliding_window = 128;
        p.n_vocab = 512;
        p.n_expert = 8, p.n_expert_used = 2, p.n_ff_exp = 128;  // 128: exercises the row fallback
        p.swa = swa_pattern(p.n_layer, 6);                      // S S S F
        p.n_head_kv = per_layer(p.swa, 2, 1);
        p.head_kv_array = true, p.k_eq_v = true;
        p.n_ff.assign(p.n_layer, 512);
    } else {
        std::string known;
        for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
        fail("unknown preset '", name, "' (known: ", known, ")");
    }
    return p;
}

std::string layer_name(uint32_t il, const char* s) {
    return str_cat("blk.", il, ".", s);
}

void add_layer_tensors(const Preset& p, uint32_t il, std::vector<TensorSpec>& v) {
    const int64_t H = p.n_embd, hd = p.head_dim(il), nh = p.n_head, nkv = p.n_head_kv[il],
                  F = p.n_ff[il];
    auto add = [&](const char* s, std::vector<int64_t> ne) {
        v.push_back({layer_name(il, s), std::move(ne)});
    };
    add("attn_norm.weight", {H});
    add("attn_q.weight", {H, nh * hd});
    if (p.has_kv(il) || p.shared_layers_have_kv) {
        add("attn_k.weight", {H, nkv * hd});
        if (!(p.k_eq_v && !p.swa[il])) add("attn_v.weight", {H, nkv * hd});
        add("attn_k_norm.weight", {hd});
    }
    add("attn_output.weight", {nh * hd, H});
    add("attn_q_norm.weight", {hd});
    add("post_attention_norm.weight", {H});
    add("layer_output_scale.weight", {1});
    add("ffn_norm.weight", {H});
    add("ffn_gate.weight", {H, F});
    add("ffn_up.weight", {H, F});
    add("ffn_down.weight", {F, H});
    add("post_ffw_norm.weight", {H});
    if (p.n_expert > 0) {
        const int64_t E = p.n_expert, Fe = p.n_ff_exp;
        add("ffn_gate_inp.weight", {H, E});
        add("ffn_gate_inp.scale", {H});
        add("pre_ffw_norm_2.weight", {H});
        add("post_ffw_norm_1.weight", {H});
        add("post_ffw_norm_2.weight", {H});
        add("ffn_gate_up_exps.weight", {H, 2 * Fe, E});
        add("ffn_down_exps.weight", {Fe, H, E});
        add("ffn_down_exps.scale", {E});
    }
    if (p.n_embd_per_layer > 0) {
        const int64_t P = p.n_embd_per_layer;
        add("inp_gate.weight", {H, P});
        add("proj.weight", {P, H});
        add("post_norm.weight", {H});
    }
}

bool contains(std::string_view s, std::string_view sub) {
    return s.find(sub) != std::string_view::npos;
}

// splitmix64's output function at counter value x.
inline uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Approximately standard normal from 64 random bits: the sum of four 16-bit uniforms
// (Irwin-Hall, n = 4), centred and scaled to unit variance. Bounded by +-2*sqrt(3).
inline float gauss(uint64_t bits) {
    uint32_t s = static_cast<uint32_t>(bits & 0xFFFF) +
                 static_cast<uint32_t>((bits >> 16) & 0xFFFF) +
                 static_cast<uint32_t>((bits >> 32) & 0xFFFF) + static_cast<uint32_t>(bits >> 48);
    constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3) / 2^16
    return (static_cast<float>(s) - 2.0f * 65535.0f) * kScale;
}

// Per-tensor stream key: tensors of one seed draw from unrelated counter ranges.
inline uint64_t tensor_key(uint64_t seed, uint64_t index) {
    return mix64(seed ^ mix64(index * 0xD1B54A32D192ED03ull + 0x8CB92BA72F3D8DD7ull));
}

int64_t row_count(const TensorSpec& t) {
    int64_t nrows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) nrows *= t.ne[d];
    return nrows;
}

}  // namespace

std::vector<std::string> preset_names() {
    return {"gemma4-e2b", "gemma4-e4b", "gemma4-26b-a4b", "gemma4-31b", "tiny"};
}

Preset find_preset(std::string_view name) {
    return make_preset(name);
}

std::vector<KeyValue> preset_metadata(const Preset& p) {
    std::vector<KeyValue> kv;
    auto set = [&](std::string k, Value v) { kv.push_back({std::move(k), std::move(v)}); };
    auto i32_array = [](const std::vector<uint32_t>& v) {
        std::vector<int32_t> r(v.begin(), v.end());
        return Value::i32_array(r);
    };
    const std::string a = "gemma4.";
    set("general.architecture", Value::string("gemma4"));
    set("general.type", Value::string("model"));
    set("general.name", Value::string(p.name + " (synthetic)"));
    set(a + "block_count", Value::u32(p.n_layer));
    set(a + "context_length", Value::u32(p.n_ctx));
    set(a + "embedding_length", Value::u32(p.n_embd));
    set(a + "feed_forward_length", p.ff_array ? i32_array(p.n_ff) : Value::u32(p.n_ff[0]));
    set(a + "attention.head_count", Value::u32(p.n_head));
    set(a + "attention.head_count_kv",
        p.head_kv_array ? i32_array(p.n_head_kv) : Value::u32(p.n_head_kv[0]));
    set(a + "rope.freq_base", Value::f32(p.rope_base));
    set(a + "rope.freq_base_swa", Value::f32(p.rope_base_swa));
    set(a + "attention.layer_norm_rms_epsilon", Value::f32(p.rms_eps));
    if (p.n_expert > 0) {
        set(a + "expert_count", Value::u32(p.n_expert));
        set(a + "expert_used_count", Value::u32(p.n_expert_used));
    }
    set(a + "attention.key_length", Value::u32(p.head_dim_full));
    set(a + "attention.value_length", Value::u32(p.head_dim_full));
    set(a + "final_logit_softcapping", Value::f32(p.softcap));
    set(a + "attention.sliding_window", Value::u32(p.sliding_window));
    set(a + "attention.shared_kv_layers", Value::u32(p.n_kv_shared));
    set(a + "embedding_length_per_layer_input", Value::u32(p.n_embd_per_layer));
    set(a + "attention.sliding_window_pattern", Value::bool_array(p.swa));
    set(a + "attention.key_length_swa", Value::u32(p.head_dim_swa));
    set(a + "attention.value_length_swa", Value::u32(p.head_dim_swa));
    if (p.n_expert > 0) set(a + "expert_feed_forward_length", Value::u32(p.n_ff_exp));
    set(a + "rope.dimension_count", Value::u32(p.head_dim_full));
    set(a + "rope.dimension_count_swa", Value::u32(p.head_dim_swa));
    return kv;
}

std::vector<TensorSpec> preset_tensors(const Preset& p) {
    const int64_t H = p.n_embd, V = p.n_vocab, LP = int64_t{p.n_layer} * p.n_embd_per_layer;
    std::vector<TensorSpec> v;
    v.push_back({"token_embd.weight", {H, V}});
    v.push_back({"output_norm.weight", {H}});
    if (std::find(p.swa.begin(), p.swa.end(), false) != p.swa.end())
        v.push_back({"rope_freqs.weight", {p.head_dim_full / 2}});
    if (p.n_embd_per_layer > 0) {
        v.push_back({"per_layer_token_embd.weight", {LP, V}});
        v.push_back({"per_layer_model_proj.weight", {H, LP}});
        v.push_back({"per_layer_proj_norm.weight", {p.n_embd_per_layer}});
    }
    for (uint32_t il = 0; il < p.n_layer; ++il) add_layer_tensors(p, il, v);
    std::vector<std::string> names;
    for (const auto& t : v) names.push_back(t.name);
    std::vector<TensorSpec> ordered;
    for (size_t i : ftype::quantize_order(names)) ordered.push_back(std::move(v[i]));
    return ordered;
}

uint64_t parameter_count(const Preset& p) {
    uint64_t n = 0;
    for (const auto& t : preset_tensors(p)) {
        uint64_t e = 1;
        for (int64_t d : t.ne) e *= static_cast<uint64_t>(d);
        n += e;
    }
    return n;
}

GgmlType source_type(const TensorSpec& t, GgmlType src) {
    const std::string_view n = t.name;
    const bool dot_weight = n.size() >= 7 && n.substr(n.size() - 7) == ".weight";
    if (t.ne.size() <= 1 || !dot_weight || contains(n, "_norm.weight") ||
        contains(n, "ffn_gate_inp.weight"))
        return GgmlType::F32;
    return src;
}

bool fast_pooled(const TensorSpec& t, GgmlType type) {
    return type != GgmlType::F32 && t.ne.size() >= 2 && row_count(t) > kFastPoolRows;
}

void synth_values(const Preset& p, const TensorSpec& t, uint64_t seed, uint64_t index,
                  uint64_t first, uint64_t n, float* out) {
    const std::string_view name = t.name;
    if (name == "rope_freqs.weight") {
        // Converter values (gguf-gemma4.md §3.3 item 5): rotated pairs 1, the rest 1e30.
        const auto r = static_cast<uint64_t>(p.head_dim_full * p.partial_rotary_full / 2);
        for (uint64_t i = 0; i < n; ++i) out[i] = first + i < r ? 1.0f : 1e30f;
        return;
    }
    const uint64_t key = tensor_key(seed, index);
    // Multipliers (norm weights, layer and router scales) sit near 1; matrices have
    // std 1/sqrt(fan_in) (fan_in = ne[0]); the PLE table std 1/sqrt(P) since the
    // graph scales it by sqrt(P), like the token embeddings by sqrt(H).
    const bool multiplier =
        contains(name, "norm") || contains(name, ".scale") || contains(name, "layer_output_scale");
    float mean = 0.0f, sd = 0.0f;
    if (multiplier) {
        mean = 1.0f, sd = 0.05f;
    } else if (name == "per_layer_token_embd.weight") {
        sd = 1.0f / std::sqrt(static_cast<float>(p.n_embd_per_layer));
    } else {
        sd = 1.0f / std::sqrt(static_cast<float>(t.ne[0]));
    }
    for (uint64_t i = 0; i < n; ++i) out[i] = mean + sd * gauss(mix64(key + first + i));
}

namespace {

uint64_t row_size(const TensorSpec& t, GgmlType type) {
    const auto row_bytes = ggml_row_size(type, static_cast<uint64_t>(t.ne[0]));
    HF2Q_ASSERT(row_bytes.has_value());
    return *row_bytes;
}

// Generates and quantizes rows [r0, r0 + nr) of tensor t into out (nr rows of
// row_size(t, type) bytes) on all threads; scratch holds one f32 buffer per thread.
void quantize_rows(ThreadPool& pool, const Preset& p, const TensorSpec& t, GgmlType type,
                   uint64_t seed, uint64_t index, int64_t r0, int64_t nr, uint8_t* out,
                   std::vector<std::vector<float>>& scratch) {
    const int64_t n_per_row = t.ne[0];
    const uint64_t row_bytes = row_size(t, type);
    const int64_t grain = std::max<int64_t>(1, nr / (4 * pool.size()));
    pool.parallel_for(nr, grain, [&](int64_t b, int64_t e, int ti) {
        auto& buf = scratch[static_cast<size_t>(ti)];
        buf.resize(static_cast<size_t>((e - b) * n_per_row));
        synth_values(p, t, seed, index, static_cast<uint64_t>((r0 + b) * n_per_row),
                     static_cast<uint64_t>((e - b) * n_per_row), buf.data());
        quant::quantize(type, buf.data(), out + static_cast<size_t>(b) * row_bytes, e - b, n_per_row,
                        nullptr);
    });
}

// Streams one tensor: rows are generated and quantized in chunks by all threads,
// then written; memory stays bounded by the chunk size.
void write_tensor(gguf::Writer& w, ThreadPool& pool, const Preset& p, const TensorSpec& t,
                  GgmlType type, uint64_t seed, uint64_t index, Progress& prog) {
    const int64_t nrows = row_count(t);
    const uint64_t row_bytes = row_size(t, type);
    constexpr int64_t kChunkElems = int64_t{1} << 23;  // 32 MiB of f32 per chunk
    const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkElems / t.ne[0]);
    std::vector<uint8_t> out;
    std::vector<std::vector<float>> scratch(static_cast<size_t>(pool.size()));
    for (int64_t r0 = 0; r0 < nrows; r0 += rows_per_chunk) {
        const int64_t nr = std::min(rows_per_chunk, nrows - r0);
        out.resize(static_cast<size_t>(nr) * row_bytes);
        quantize_rows(pool, p, t, type, seed, index, r0, nr, out.data(), scratch);
        w.write_tensor_data(out.data(), out.size());
        prog.add(out.size());
    }
}

// Fast mode: the tensor's first kFastPoolRows rows, made exactly as write_tensor
// makes them, then every output row a copy of pool row mix64(key + row) mod the
// pool size. The pick depends on (seed, tensor, row) only, not on the chunking or
// the thread count.
void write_pooled_tensor(gguf::Writer& w, ThreadPool& pool, const Preset& p, const TensorSpec& t,
                         GgmlType type, uint64_t seed, uint64_t index, Progress& prog) {
    const int64_t nrows = row_count(t);
    const uint64_t row_bytes = row_size(t, type);
    std::vector<uint8_t> rows(static_cast<size_t>(kFastPoolRows * row_bytes));
    std::vector<std::vector<float>> scratch(static_cast<size_t>(pool.size()));
    quantize_rows(pool, p, t, type, seed, index, 0, kFastPoolRows, rows.data(), scratch);

    const uint64_t key = mix64(tensor_key(seed, index) ^ 0x5851F42D4C957F2Dull);
    constexpr uint64_t kChunkBytes = uint64_t{16} << 20;
    const int64_t rows_per_chunk = static_cast<int64_t>(std::max<uint64_t>(1, kChunkBytes / row_bytes));
    std::vector<uint8_t> out;
    for (int64_t r0 = 0; r0 < nrows; r0 += rows_per_chunk) {
        const int64_t nr = std::min(rows_per_chunk, nrows - r0);
        out.resize(static_cast<size_t>(nr) * row_bytes);
        const int64_t grain = std::max<int64_t>(256, nr / (4 * pool.size()));
        pool.parallel_for(nr, grain, [&](int64_t b, int64_t e, int) {
            for (int64_t i = b; i < e; ++i) {
                const uint64_t pick = mix64(key + static_cast<uint64_t>(r0 + i)) %
                                      static_cast<uint64_t>(kFastPoolRows);
                std::memcpy(out.data() + static_cast<size_t>(i) * row_bytes,
                            rows.data() + pick * row_bytes, row_bytes);
            }
        });
        w.write_tensor_data(out.data(), out.size());
        prog.add(out.size());
    }
}

}  // namespace

SynthResult synth_model(const SynthOptions& o) {
    const auto t0 = std::chrono::steady_clock::now();
    if (o.output_path.empty()) fail("synth: no output path");
    if (!o.overwrite && std::filesystem::exists(o.output_path))
        fail("'", o.output_path, "' exists (use --force to replace it)");
    Preset p = find_preset(o.preset);

    gguf::Writer w;
    for (auto& kv : preset_metadata(p)) w.set(kv.key, kv.value);
    std::unique_ptr<gguf::File> vocab;
    if (!o.vocab_from.empty()) {
        vocab = gguf::File::open(o.vocab_from);
        const auto* tokens = vocab->find("tokenizer.ggml.tokens");
        if (!tokens || !tokens->is_array() || tokens->elem_type() != gguf::ValueType::STRING)
            fail(vocab->describe_key("tokenizer.ggml.tokens"), ": missing or not a string array");
        if (tokens->array_size() == 0 || tokens->array_size() > (1u << 30))
            fail(vocab->describe_key("tokenizer.ggml.tokens"), ": bad token count ",
                 tokens->array_size());
        p.n_vocab = static_cast<uint32_t>(tokens->array_size());
        for (const auto& kv : vocab->metadata())
            if (kv.key.rfind("tokenizer.", 0) == 0) w.set(kv.key, kv.value);
    }
    w.set("general.quantization_version", Value::u32(2));
    w.set("general.file_type", Value::u32(static_cast<uint32_t>(o.ftype)));

    const auto specs = preset_tensors(p);
    const GgmlType def = ftype::default_type(o.ftype);
    const GgmlType src = ftype::is_quantized(def) ? GgmlType::F16 : def;
    std::vector<ftype::TensorDesc> descs;
    for (const auto& t : specs)
        descs.push_back(ftype::make_tensor_desc(t.name, t.ne, source_type(t, src)));
    ftype::PlanOptions po;
    po.ftype = o.ftype;
    const ftype::ModelParams mp{p.n_layer, p.n_expert, p.n_head / p.n_head_kv[0]};
    const auto types = ftype::plan_types(mp, po, descs);

    SynthResult r;
    uint64_t total = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
        w.add_tensor(specs[i].name, types[i], specs[i].ne);
        uint64_t rows = 1;
        for (size_t d = 1; d < specs[i].ne.size(); ++d)
            rows *= static_cast<uint64_t>(specs[i].ne[d]);
        total += rows * *ggml_row_size(types[i], static_cast<uint64_t>(specs[i].ne[0]));
        r.n_params += rows * static_cast<uint64_t>(specs[i].ne[0]);
    }
    w.begin(o.output_path);
    ThreadPool pool(o.threads);
    Progress prog("synth " + p.name, total, "B", o.progress);
    for (size_t i = 0; i < specs.size(); ++i) {
        if (o.fast && fast_pooled(specs[i], types[i]))
            write_pooled_tensor(w, pool, p, specs[i], types[i], o.seed, i, prog);
        else
            write_tensor(w, pool, p, specs[i], types[i], o.seed, i, prog);
    }
    w.finish();
    prog.finish();
    r.n_tensors = specs.size();
    r.data_bytes = total;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

}  // namespace hf2q::synth

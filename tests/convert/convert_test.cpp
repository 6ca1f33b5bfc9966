// End-to-end conversion of tiny HF checkpoints, read back with gguf::File.
#include "convert/convert.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "convert/gemma4_convert.h"
#include "convert/tiny_model.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

using namespace hf2q;
using namespace hf2q::convert;
using namespace hf2q::test;
namespace fs = std::filesystem;

namespace {

std::unique_ptr<gguf::File> convert_dir(const fs::path& dir, FileType ft, const fs::path& out,
                                        bool overwrite = false) {
    ConvertOptions o;
    o.input_dir = dir.string();
    o.output_path = out.string();
    o.out_type = ft;
    o.threads = 2;
    o.progress = false;
    o.overwrite = overwrite;
    convert_hf_to_gguf(o);
    return gguf::File::open(out.string());
}

std::map<std::string, const StEntry*> by_name(const std::vector<StEntry>& v) {
    std::map<std::string, const StEntry*> m;
    for (const auto& e : v) m[e.name] = &e;
    return m;
}

std::vector<int64_t> ne_of(const gguf::TensorInfo& t) {
    return std::vector<int64_t>(t.ne, t.ne + t.n_dims);
}

uint16_t rd16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
}

float rdf(const uint8_t* p) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
}

// Tensors in directory listing (excluding the temp dir itself) other than `keep`.
std::set<std::string> files_in(const fs::path& d) {
    std::set<std::string> s;
    for (const auto& e : fs::directory_iterator(d)) s.insert(e.path().filename().string());
    return s;
}

// GGUF name -> HF name of the 2-layer dense tiny model (written out by hand, not from
// the converter's table).
const std::map<std::string, std::string>& dense_names() {
    static const std::map<std::string, std::string> m = {
        {"token_embd.weight", "embed_tokens.weight"},
        {"output_norm.weight", "norm.weight"},
        {"blk.0.attn_norm.weight", "layers.0.input_layernorm.weight"},
        {"blk.0.attn_q.weight", "layers.0.self_attn.q_proj.weight"},
        {"blk.0.attn_k.weight", "layers.0.self_attn.k_proj.weight"},
        {"blk.0.attn_v.weight", "layers.0.self_attn.v_proj.weight"},
        {"blk.0.attn_output.weight", "layers.0.self_attn.o_proj.weight"},
        {"blk.0.attn_q_norm.weight", "layers.0.self_attn.q_norm.weight"},
        {"blk.0.attn_k_norm.weight", "layers.0.self_attn.k_norm.weight"},
        {"blk.0.post_attention_norm.weight", "layers.0.post_attention_layernorm.weight"},
        {"blk.0.ffn_norm.weight", "layers.0.pre_feedforward_layernorm.weight"},
        {"blk.0.post_ffw_norm.weight", "layers.0.post_feedforward_layernorm.weight"},
        {"blk.0.ffn_gate.weight", "layers.0.mlp.gate_proj.weight"},
        {"blk.0.ffn_up.weight", "layers.0.mlp.up_proj.weight"},
        {"blk.0.ffn_down.weight", "layers.0.mlp.down_proj.weight"},
        {"blk.0.layer_output_scale.weight", "layers.0.layer_scalar"},
        {"blk.1.attn_norm.weight", "layers.1.input_layernorm.weight"},
        {"blk.1.attn_q.weight", "layers.1.self_attn.q_proj.weight"},
        {"blk.1.attn_k.weight", "layers.1.self_attn.k_proj.weight"},
        {"blk.1.attn_v.weight", "layers.1.self_attn.v_proj.weight"},
        {"blk.1.attn_output.weight", "layers.1.self_attn.o_proj.weight"},
        {"blk.1.attn_q_norm.weight", "layers.1.self_attn.q_norm.weight"},
        {"blk.1.attn_k_norm.weight", "layers.1.self_attn.k_norm.weight"},
        {"blk.1.post_attention_norm.weight", "layers.1.post_attention_layernorm.weight"},
        {"blk.1.ffn_norm.weight", "layers.1.pre_feedforward_layernorm.weight"},
        {"blk.1.post_ffw_norm.weight", "layers.1.post_feedforward_layernorm.weight"},
        {"blk.1.ffn_gate.weight", "layers.1.mlp.gate_proj.weight"},
        {"blk.1.ffn_up.weight", "layers.1.mlp.up_proj.weight"},
        {"blk.1.ffn_down.weight", "layers.1.mlp.down_proj.weight"},
        {"blk.1.layer_output_scale.weight", "layers.1.layer_scalar"},
    };
    return m;
}

bool expect_f32(const std::string& n) {
    return n.find("norm.weight") != std::string::npos ||
           n.find("layer_output_scale") != std::string::npos || n == "rope_freqs.weight";
}

// Checks names, shapes, types and bytes of a converted dense tiny model.
void check_dense(const gguf::File& f, const std::vector<StEntry>& src, const std::string& prefix,
                 GgmlType big) {
    auto srcs = by_name(src);
    ASSERT_EQ(f.tensors().size(), dense_names().size() + 1);
    EXPECT_EQ(f.tensors()[0].name, "rope_freqs.weight");
    for (const auto& [gname, hname] : dense_names()) {
        const auto* t = f.find_tensor(gname);
        ASSERT_NE(t, nullptr) << gname;
        const StEntry& e = *srcs.at(prefix + hname);
        std::vector<int64_t> rev(e.shape.rbegin(), e.shape.rend());
        EXPECT_EQ(ne_of(*t), rev) << gname;
        const GgmlType want = expect_f32(gname) ? GgmlType::F32 : big;
        EXPECT_EQ(t->type, want) << gname;
        const uint64_t n = e.values.size();
        ASSERT_EQ(static_cast<uint64_t>(t->n_elements()), n);
        for (uint64_t i = 0; i < n; ++i) {
            // Source is bf16: widening is exact (bits << 16), same type is a byte copy.
            uint16_t sb = rd16(e.bytes.data() + 2 * i);
            if (want == GgmlType::BF16) {
                ASSERT_EQ(rd16(t->data + 2 * i), sb) << gname << " element " << i;
            } else if (want == GgmlType::F32) {
                uint32_t bits;
                std::memcpy(&bits, t->data + 4 * i, 4);
                ASSERT_EQ(bits, uint32_t{sb} << 16) << gname << " element " << i;
            } else {
                ASSERT_EQ(rd16(t->data + 2 * i), quant::fp32_to_fp16(quant::bf16_to_fp32(sb)))
                    << gname;
            }
        }
    }
}

}  // namespace

TEST(Convert, DenseBf16KeepsBytesAndWritesMetadata) {
    TempDir d;
    TinySpec s;
    auto src = write_tiny_model(d.path(), s);
    auto f = convert_dir(d.path(), FileType::MOSTLY_BF16, d.path() / "out.gguf");
    check_dense(*f, src, "model.", GgmlType::BF16);

    using gguf::ValueType;
    auto type_of = [&](const char* k) { return f->at(k).type(); };
    EXPECT_EQ(f->get_string("general.architecture"), "gemma4");
    EXPECT_EQ(f->get_string("general.type"), "model");
    EXPECT_EQ(f->get_string("general.name"), d.path().filename().string());
    EXPECT_EQ(f->get_u32("general.file_type"), 32u);
    EXPECT_EQ(f->get_u32("general.quantization_version"), 2u);
    const std::map<std::string, uint32_t> u32s = {{"gemma4.context_length", 4096},
                                                  {"gemma4.embedding_length", 32},
                                                  {"gemma4.block_count", 2},
                                                  {"gemma4.feed_forward_length", 64},
                                                  {"gemma4.attention.head_count", 2},
                                                  {"gemma4.attention.head_count_kv", 1},
                                                  {"gemma4.attention.key_length", 32},
                                                  {"gemma4.attention.value_length", 32},
                                                  {"gemma4.attention.key_length_swa", 16},
                                                  {"gemma4.attention.value_length_swa", 16},
                                                  {"gemma4.attention.sliding_window", 8},
                                                  {"gemma4.attention.shared_kv_layers", 0},
                                                  {"gemma4.embedding_length_per_layer_input", 0},
                                                  {"gemma4.rope.dimension_count", 32},
                                                  {"gemma4.rope.dimension_count_swa", 16}};
    for (const auto& [k, v] : u32s) {
        ASSERT_TRUE(f->has(k)) << k;
        EXPECT_EQ(type_of(k.c_str()), ValueType::UINT32) << k;
        EXPECT_EQ(f->get_u32(k), v) << k;
    }
    EXPECT_EQ(type_of("gemma4.attention.layer_norm_rms_epsilon"), ValueType::FLOAT32);
    EXPECT_FLOAT_EQ(f->get_f32("gemma4.attention.layer_norm_rms_epsilon"), 1e-6f);
    EXPECT_FLOAT_EQ(f->get_f32("gemma4.rope.freq_base"), 1e6f);
    EXPECT_FLOAT_EQ(f->get_f32("gemma4.rope.freq_base_swa"), 1e4f);
    EXPECT_FLOAT_EQ(f->get_f32("gemma4.final_logit_softcapping"), 30.0f);
    const auto& pat = f->at("gemma4.attention.sliding_window_pattern");
    ASSERT_TRUE(pat.is_array());
    EXPECT_EQ(pat.elem_type(), ValueType::BOOL);
    EXPECT_EQ(pat.as_bool_array("pattern"), (std::vector<bool>{true, false}));
    EXPECT_FALSE(f->has("gemma4.expert_count"));
    EXPECT_FALSE(f->has("tokenizer.ggml.model"));

    // rope_freqs: d_full/2 = 16 entries, int(32 * 0.25 / 2) = 4 ones then 1e30.
    const auto* rf = f->find_tensor("rope_freqs.weight");
    ASSERT_NE(rf, nullptr);
    EXPECT_EQ(rf->type, GgmlType::F32);
    ASSERT_EQ(ne_of(*rf), (std::vector<int64_t>{16}));
    for (int i = 0; i < 16; ++i) EXPECT_EQ(rdf(rf->data + 4 * i), i < 4 ? 1.0f : 1e30f) << i;
}

TEST(Convert, DenseToF32AndF16) {
    TempDir d;
    TinySpec s;
    auto src = write_tiny_model(d.path(), s);
    auto f32 = convert_dir(d.path(), FileType::ALL_F32, d.path() / "f32.gguf");
    check_dense(*f32, src, "model.", GgmlType::F32);
    EXPECT_EQ(f32->get_u32("general.file_type"), 0u);
    auto f16 = convert_dir(d.path(), FileType::MOSTLY_F16, d.path() / "f16.gguf");
    check_dense(*f16, src, "model.", GgmlType::F16);
    EXPECT_EQ(f16->get_u32("general.file_type"), 1u);
}

TEST(Convert, F32SourceRoundsToNearestEven) {
    TempDir d;
    TinySpec s;
    s.dtype = "F32";
    auto src = write_tiny_model(d.path(), s);
    // Put hand-checked rounding cases at the start of the embedding.
    const float cases[] = {1.0f,
                           1.0f + 0x1p-11f,
                           1.0f + 3 * 0x1p-11f,
                           1.0f + 0x1p-8f,
                           1.0f + 3 * 0x1p-8f,
                           -2.5f,
                           65504.0f,
                           1e-8f};
    const uint16_t want_f16[] = {0x3C00, 0x3C00, 0x3C02, 0x3C04, 0x3C0C, 0xC100, 0x7BFF, 0x0000};
    const uint16_t want_bf16[] = {0x3F80, 0x3F80, 0x3F80, 0x3F80, 0x3F82, 0xC020, 0x4780, 0x322C};
    for (auto& e : src) {
        if (e.name != "model.embed_tokens.weight") continue;
        for (int i = 0; i < 8; ++i) {
            e.values[i] = cases[i];
            std::memcpy(e.bytes.data() + 4 * i, &cases[i], 4);
        }
    }
    write_file(d.path() / "model.safetensors", safetensors_image(src));
    auto f16 = convert_dir(d.path(), FileType::MOSTLY_F16, d.path() / "f16.gguf");
    auto bf16 = convert_dir(d.path(), FileType::MOSTLY_BF16, d.path() / "bf16.gguf");
    const auto* a = f16->find_tensor("token_embd.weight");
    const auto* b = bf16->find_tensor("token_embd.weight");
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->type, GgmlType::F16);
    EXPECT_EQ(b->type, GgmlType::BF16);
    for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(rd16(a->data + 2 * i), want_f16[i]) << i;
        EXPECT_EQ(rd16(b->data + 2 * i), want_bf16[i]) << i;
    }
    // Every element agrees with ggml's scalar rounding; norms stay bit-identical f32.
    auto srcs = by_name(src);
    const auto& emb = *srcs.at("model.embed_tokens.weight");
    for (size_t i = 0; i < emb.values.size(); ++i) {
        ASSERT_EQ(rd16(a->data + 2 * i), quant::fp32_to_fp16(emb.values[i]));
        ASSERT_EQ(rd16(b->data + 2 * i), quant::fp32_to_bf16(emb.values[i]));
    }
    const auto* n = f16->find_tensor("blk.0.attn_norm.weight");
    EXPECT_EQ(n->type, GgmlType::F32);
    EXPECT_EQ(0,
              std::memcmp(n->data, srcs.at("model.layers.0.input_layernorm.weight")->bytes.data(),
                          4 * 32));
}

TEST(Convert, MultimodalPrefixIgnoresVisionAndLmHead) {
    TempDir d;
    TinySpec s;
    s.prefix = "model.language_model.";
    s.text_config = true;
    s.with_vision = true;
    auto src = write_tiny_model(d.path(), s);
    auto f = convert_dir(d.path(), FileType::MOSTLY_BF16, d.path() / "out.gguf");
    check_dense(*f, src, "model.language_model.", GgmlType::BF16);
    for (const auto& t : f->tensors()) {
        EXPECT_EQ(t.name.find("vision"), std::string::npos);
        EXPECT_NE(t.name, "output.weight");
    }
}

TEST(Convert, MoeWithKeqVFullLayer) {
    TempDir d;
    TinySpec s;
    s.moe = true;
    s.k_eq_v = true;
    s.nh = 4;
    s.nkv = 2;
    s.global_kv = 1;
    auto src = write_tiny_model(d.path(), s);
    auto f = convert_dir(d.path(), FileType::MOSTLY_BF16, d.path() / "out.gguf");
    EXPECT_EQ(f->get_u32("gemma4.expert_count"), 4u);
    EXPECT_EQ(f->get_u32("gemma4.expert_used_count"), 2u);
    EXPECT_EQ(f->get_u32("gemma4.expert_feed_forward_length"), 16u);
    const auto& kv = f->at("gemma4.attention.head_count_kv");
    ASSERT_TRUE(kv.is_array());
    EXPECT_EQ(kv.elem_type(), gguf::ValueType::INT32);
    EXPECT_EQ(kv.as_int_array("kv"), (std::vector<int64_t>{2, 1}));
    EXPECT_NE(f->find_tensor("blk.0.attn_v.weight"), nullptr);
    EXPECT_EQ(f->find_tensor("blk.1.attn_v.weight"), nullptr);  // K=V full layer
    EXPECT_EQ(ne_of(*f->find_tensor("blk.1.attn_k.weight")), (std::vector<int64_t>{32, 32}));
    const std::map<std::string, std::pair<std::vector<int64_t>, GgmlType>> want = {
        {"blk.0.ffn_gate_inp.weight", {{32, 4}, GgmlType::F32}},
        {"blk.0.ffn_gate_inp.scale", {{32}, GgmlType::F32}},
        {"blk.0.ffn_down_exps.scale", {{4}, GgmlType::F32}},
        {"blk.0.ffn_gate_up_exps.weight", {{32, 32, 4}, GgmlType::BF16}},
        {"blk.0.ffn_down_exps.weight", {{16, 32, 4}, GgmlType::BF16}},
        {"blk.1.pre_ffw_norm_2.weight", {{32}, GgmlType::F32}},
        {"blk.1.post_ffw_norm_1.weight", {{32}, GgmlType::F32}},
        {"blk.1.post_ffw_norm_2.weight", {{32}, GgmlType::F32}},
    };
    for (const auto& [n, st] : want) {
        const auto* t = f->find_tensor(n);
        ASSERT_NE(t, nullptr) << n;
        EXPECT_EQ(ne_of(*t), st.first) << n;
        EXPECT_EQ(t->type, st.second) << n;
    }
    // Experts keep their bytes: HF [E, 2F, H] is ggml ne [H, 2F, E] without moving data.
    auto srcs = by_name(src);
    const auto& gu = *srcs.at("model.layers.1.experts.gate_up_proj");
    EXPECT_EQ(0, std::memcmp(f->find_tensor("blk.1.ffn_gate_up_exps.weight")->data, gu.bytes.data(),
                             gu.bytes.size()));
    // The router becomes exact f32.
    const auto& r = *srcs.at("model.layers.0.router.proj.weight");
    const auto* rt = f->find_tensor("blk.0.ffn_gate_inp.weight");
    for (size_t i = 0; i < r.values.size(); ++i)
        ASSERT_EQ(rdf(rt->data + 4 * i), quant::bf16_to_fp32(rd16(r.bytes.data() + 2 * i)));
}

TEST(Convert, PleKvSharedDoubleWide) {
    TempDir d;
    TinySpec s;
    s.L = 4;
    s.P = 8;
    s.shared = 2;
    s.double_wide = true;
    s.layer_types = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
    auto src = write_tiny_model(d.path(), s);
    auto f = convert_dir(d.path(), FileType::MOSTLY_F16, d.path() / "out.gguf");
    EXPECT_EQ(f->get_u32("gemma4.embedding_length_per_layer_input"), 8u);
    EXPECT_EQ(f->get_u32("gemma4.attention.shared_kv_layers"), 2u);
    const auto& ff = f->at("gemma4.feed_forward_length");
    ASSERT_TRUE(ff.is_array());
    EXPECT_EQ(ff.elem_type(), gguf::ValueType::INT32);
    EXPECT_EQ(ff.as_int_array("ff"), (std::vector<int64_t>{64, 64, 128, 128}));
    EXPECT_EQ(f->at("gemma4.attention.head_count_kv").type(), gguf::ValueType::UINT32);
    EXPECT_EQ(f->at("gemma4.attention.sliding_window_pattern").as_bool_array("p"),
              (std::vector<bool>{true, false, true, false}));
    const std::map<std::string, std::pair<std::vector<int64_t>, GgmlType>> want = {
        {"per_layer_token_embd.weight", {{32, 40}, GgmlType::F16}},
        {"per_layer_model_proj.weight", {{32, 32}, GgmlType::F16}},
        {"per_layer_proj_norm.weight", {{8}, GgmlType::F32}},
        {"blk.3.inp_gate.weight", {{32, 8}, GgmlType::F16}},
        {"blk.3.proj.weight", {{8, 32}, GgmlType::F16}},
        {"blk.3.post_norm.weight", {{32}, GgmlType::F32}},
        {"blk.2.ffn_gate.weight", {{32, 128}, GgmlType::F16}},
        {"blk.1.ffn_gate.weight", {{32, 64}, GgmlType::F16}},
        // KV-shared layers keep the K/V weights the checkpoint carries (llama.cpp does too).
        {"blk.2.attn_k.weight", {{32, 16}, GgmlType::F16}},
        {"blk.3.attn_v.weight", {{32, 32}, GgmlType::F16}},
        {"blk.3.attn_k_norm.weight", {{32}, GgmlType::F32}},
    };
    for (const auto& [n, st] : want) {
        const auto* t = f->find_tensor(n);
        ASSERT_NE(t, nullptr) << n;
        EXPECT_EQ(ne_of(*t), st.first) << n;
        EXPECT_EQ(t->type, st.second) << n;
    }
}

TEST(Convert, ShardedWithIndexMatchesSingleFile) {
    TempDir single, sharded;
    TinySpec s;
    auto src = write_tiny_model(single.path(), s);
    write_text(sharded.path() / "config.json", tiny_config(s).dump());
    std::vector<StEntry> a(src.begin(), src.begin() + 10), b(src.begin() + 10, src.end());
    write_file(sharded.path() / "model-00001-of-00002.safetensors", safetensors_image(a));
    write_file(sharded.path() / "model-00002-of-00002.safetensors", safetensors_image(b));
    nlohmann::json idx;
    for (const auto& e : a) idx["weight_map"][e.name] = "model-00001-of-00002.safetensors";
    for (const auto& e : b) idx["weight_map"][e.name] = "model-00002-of-00002.safetensors";
    write_text(sharded.path() / "model.safetensors.index.json", idx.dump());
    auto f1 = convert_dir(single.path(), FileType::MOSTLY_BF16, single.path() / "o.gguf");
    auto f2 = convert_dir(sharded.path(), FileType::MOSTLY_BF16, sharded.path() / "o.gguf");
    check_dense(*f2, src, "model.", GgmlType::BF16);
    ASSERT_EQ(f1->tensors().size(), f2->tensors().size());
    for (const auto& t : f1->tensors()) {
        const auto* u = f2->find_tensor(t.name);
        ASSERT_NE(u, nullptr) << t.name;
        ASSERT_EQ(t.nbytes, u->nbytes);
        EXPECT_EQ(0, std::memcmp(t.data, u->data, t.nbytes)) << t.name;
    }
}

TEST(Convert, PerLayerConfigFormMatchesReleasedForm) {
    TempDir a, b;
    TinySpec s;
    s.L = 3;
    s.nh = 4;
    s.nkv = 2;
    s.k_eq_v = true;
    s.global_kv = 1;
    s.layer_types = {"sliding_attention", "full_attention", "full_attention"};
    write_tiny_model(a.path(), s);
    s.per_layer_config = true;
    write_tiny_model(b.path(), s);
    auto fa = convert_dir(a.path(), FileType::MOSTLY_BF16, a.path() / "o.gguf");
    auto fb = convert_dir(b.path(), FileType::MOSTLY_BF16, b.path() / "o.gguf");
    ASSERT_EQ(fa->metadata().size(), fb->metadata().size());
    for (const auto& kv : fa->metadata()) {
        if (kv.key == "general.name") continue;
        const auto* v = fb->find(kv.key);
        ASSERT_NE(v, nullptr) << kv.key;
        EXPECT_EQ(v->to_display_string(100), kv.value.to_display_string(100)) << kv.key;
        EXPECT_EQ(v->type(), kv.value.type()) << kv.key;
    }
    EXPECT_EQ(fb->at("gemma4.attention.head_count_kv").as_int_array("kv"),
              (std::vector<int64_t>{2, 1, 1}));
}

TEST(Convert, CheckpointConfigMismatchesAreErrors) {
    auto expect_fail = [](const TinySpec& s, const std::function<void(std::vector<StEntry>&)>& edit,
                          const std::string& needle) {
        TempDir d;
        auto t = write_tiny_model(d.path(), s);
        edit(t);
        write_file(d.path() / "model.safetensors", safetensors_image(t));
        try {
            convert_dir(d.path(), FileType::MOSTLY_BF16, d.path() / "out.gguf");
            ADD_FAILURE() << "converted a bad checkpoint; expected " << needle;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
        EXPECT_FALSE(fs::exists(d.path() / "out.gguf"));
    };
    TinySpec s;
    expect_fail(
        s,
        [](auto& t) {
            t[3] = make_entry(t[3].name, "BF16", {7, 3}, 5);
        },
        "expected");
    expect_fail(
        s, [](auto& t) { t.erase(t.begin() + 4); }, "missing");
    expect_fail(
        s,
        [](auto& t) { t.push_back(make_entry("model.layers.0.mystery.weight", "BF16", {2}, 1)); },
        "mystery");
    expect_fail(
        s, [](auto& t) { t.push_back(make_entry("model.layers.5.layer_scalar", "BF16", {1}, 1)); },
        "layer 5");
    expect_fail(
        s, [](auto& t) { t.push_back(make_entry("model.layers.0.router.scale", "BF16", {32}, 1)); },
        "MoE");
    expect_fail(
        s,
        [](auto& t) {
            t.push_back(make_entry("model.language_model.norm.weight", "BF16", {32}, 1));
        },
        "both map to output_norm.weight");
    TinySpec kv = s;
    kv.k_eq_v = true;
    expect_fail(
        kv,
        [](auto& t) {
            t.push_back(make_entry("model.layers.1.self_attn.v_proj.weight", "BF16", {32, 32}, 1));
        },
        "K=V");
}

TEST(Convert, NoOutputLeftOnFailureAndOverwriteRules) {
    TempDir d;
    TinySpec s;
    write_tiny_model(d.path(), s);
    auto before = files_in(d.path());
    // Corrupt shard: header length past the end.
    auto img = safetensors_image(tiny_tensors(s));
    img.resize(40);
    write_file(d.path() / "model.safetensors", img);
    EXPECT_THROW(convert_dir(d.path(), FileType::MOSTLY_BF16, d.path() / "out.gguf"), Error);
    EXPECT_EQ(files_in(d.path()), before);  // no output, no temp file

    write_tiny_model(d.path(), s);
    const fs::path out = d.path() / "out.gguf";
    write_text(out, "keep me");
    EXPECT_THROW(convert_dir(d.path(), FileType::MOSTLY_BF16, out), Error);
    EXPECT_EQ(fs::file_size(out), 7u);
    auto f = convert_dir(d.path(), FileType::MOSTLY_BF16, out, /*overwrite=*/true);
    EXPECT_EQ(f->get_string("general.architecture"), "gemma4");
    // Never overwrite an input, even with overwrite set.
    const auto shard = d.path() / "model.safetensors";
    const auto size = fs::file_size(shard);
    EXPECT_THROW(convert_dir(d.path(), FileType::MOSTLY_BF16, shard, true), Error);
    EXPECT_EQ(fs::file_size(shard), size);
}

// Without tokenizer.json the model converts without tokenizer metadata (and says
// so); a tokenizer.json that is present but broken is an error naming the file,
// and no output is left behind.
TEST(Convert, TokenizerIsOptionalButValidated) {
    TempDir d;
    TinySpec s;
    write_tiny_model(d.path(), s);
    ConvertOptions o;
    o.input_dir = d.path().string();
    o.output_path = (d.path() / "o.gguf").string();
    o.progress = false;
    std::vector<std::string> logs;
    o.log = [&](const std::string& m) { logs.push_back(m); };
    convert_hf_to_gguf(o);
    bool saw = false;
    for (const auto& m : logs) saw |= m.find("tokenizer") != std::string::npos;
    EXPECT_TRUE(saw);
    EXPECT_FALSE(gguf::File::open(o.output_path)->has("tokenizer.ggml.model"));

    write_text(d.path() / "tokenizer.json", "{}");
    o.output_path = (d.path() / "broken.gguf").string();
    try {
        convert_hf_to_gguf(o);
        ADD_FAILURE() << "a broken tokenizer.json was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(o.output_path));
}

TEST(Convert, TensorTypeRulesAndFileTypeNames) {
    EXPECT_EQ(tensor_out_type("blk.0.attn_q.weight", 2, FileType::MOSTLY_F16), GgmlType::F16);
    EXPECT_EQ(tensor_out_type("blk.0.attn_q.weight", 2, FileType::MOSTLY_BF16), GgmlType::BF16);
    EXPECT_EQ(tensor_out_type("blk.0.attn_q_norm.weight", 2, FileType::MOSTLY_F16), GgmlType::F32);
    EXPECT_EQ(tensor_out_type("blk.0.ffn_gate_inp.weight", 2, FileType::MOSTLY_F16), GgmlType::F32);
    EXPECT_EQ(tensor_out_type("blk.0.ffn_gate_inp.scale", 1, FileType::MOSTLY_F16), GgmlType::F32);
    EXPECT_EQ(tensor_out_type("blk.0.something.scale", 2, FileType::MOSTLY_F16), GgmlType::F32);
    EXPECT_EQ(tensor_out_type("token_embd.weight", 1, FileType::MOSTLY_F16), GgmlType::F32);
    EXPECT_EQ(*file_type_from_name("BF16"), FileType::MOSTLY_BF16);
    EXPECT_EQ(*file_type_from_name("f32"), FileType::ALL_F32);
    EXPECT_FALSE(file_type_from_name("q4_k_m").has_value());
    EXPECT_FALSE(file_type_from_name("q4_k").has_value());  // ftype's alias of q4_k_m
    EXPECT_FALSE(file_type_from_name("15").has_value());    // the id of q4_k_m
    EXPECT_EQ(*file_type_from_name("1"), FileType::MOSTLY_F16);
    EXPECT_EQ(file_type_name(FileType::MOSTLY_BF16), "bf16");
    EXPECT_EQ(default_tensor_type(FileType::MOSTLY_F16), GgmlType::F16);
    EXPECT_THROW(default_tensor_type(FileType::MOSTLY_Q4_K_M), Error);
    EXPECT_EQ(supported_file_type_names(), (std::vector<std::string>{"f32", "f16", "bf16"}));
}

TEST(Convert, NameMapping) {
    EXPECT_EQ(map_gemma4_tensor_name("model.language_model.layers.12.router.scale").gguf_name,
              "blk.12.ffn_gate_inp.scale");
    EXPECT_EQ(map_gemma4_tensor_name("model.layers.3.experts.down_proj").gguf_name,
              "blk.3.ffn_down_exps.weight");
    EXPECT_EQ(map_gemma4_tensor_name("model.layers.0.post_per_layer_input_norm.weight").gguf_name,
              "blk.0.post_norm.weight");
    EXPECT_EQ(map_gemma4_tensor_name("model.audio_tower.x.weight").kind, MappedName::Kind::Ignored);
    EXPECT_EQ(map_gemma4_tensor_name("lm_head.weight").kind, MappedName::Kind::Ignored);
    EXPECT_THROW(map_gemma4_tensor_name("transformer.h.0.weight"), Error);
    EXPECT_THROW(map_gemma4_tensor_name("model.layers.x.input_layernorm.weight"), Error);
    EXPECT_THROW(map_gemma4_tensor_name("model.layers.01.input_layernorm.weight"), Error);
}

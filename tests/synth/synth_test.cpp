// Synthetic Gemma 4 models: preset shapes against the spec tables, metadata against the
// real 26B-A4B file's, and the tiny preset written end to end.
#include "convert/synth.h"
#include "synth/synth_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "convert/ftype.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

namespace hf2q::synth {
namespace {

namespace fs = std::filesystem;
using synth_test::read_all;
using synth_test::TempDir;
using Shapes = std::map<std::string, std::vector<int64_t>>;

Shapes shapes(const Preset& p) {
    Shapes r;
    for (auto& t : preset_tensors(p)) r[t.name] = t.ne;
    return r;
}

std::vector<int64_t> ne(std::initializer_list<int64_t> v) {
    return v;
}

std::string vocab_path() {
    return std::string(HF2Q_TESTDATA_DIR) + "/tokenizer/ggml-vocab-gemma-4.gguf";
}

TEST(SynthPresets, E2BShapes) {
    Preset p = find_preset("gemma4-e2b");
    auto s = shapes(p);
    EXPECT_EQ(s.at("per_layer_token_embd.weight"), ne({8960, 262144}));
    EXPECT_EQ(s.at("per_layer_model_proj.weight"), ne({1536, 8960}));
    EXPECT_EQ(s.at("per_layer_proj_norm.weight"), ne({256}));
    EXPECT_EQ(s.at("token_embd.weight"), ne({1536, 262144}));
    EXPECT_EQ(s.at("rope_freqs.weight"), ne({256}));
    EXPECT_EQ(s.at("blk.0.attn_q.weight"), ne({1536, 2048}));
    EXPECT_EQ(s.at("blk.0.attn_k.weight"), ne({1536, 256}));
    EXPECT_EQ(s.at("blk.0.attn_output.weight"), ne({2048, 1536}));
    EXPECT_EQ(s.at("blk.4.attn_q.weight"), ne({1536, 4096}));  // full layer
    EXPECT_EQ(s.at("blk.4.attn_v.weight"), ne({1536, 512}));   // no K=V on E2B
    EXPECT_EQ(s.at("blk.4.attn_q_norm.weight"), ne({512}));
    EXPECT_EQ(s.at("blk.14.ffn_down.weight"), ne({6144, 1536}));
    EXPECT_EQ(s.at("blk.20.ffn_gate.weight"), ne({1536, 12288}));  // double-wide, KV-shared
    EXPECT_EQ(s.at("blk.34.inp_gate.weight"), ne({1536, 256}));
    EXPECT_EQ(s.at("blk.34.proj.weight"), ne({256, 1536}));
    EXPECT_FALSE(s.count("blk.0.ffn_gate_inp.weight"));
    for (uint32_t il = 0; il < 35; ++il) EXPECT_EQ(p.swa[il], il % 5 != 4) << il;
    const double n = static_cast<double>(parameter_count(p));
    // 4.65 B text parameters (2.35 B of them the PLE table); the advertised 5.1 B
    // also counts the vision and audio encoders, which live in a separate file.
    EXPECT_GT(n, 4.6e9);
    EXPECT_LT(n, 4.7e9);
}

TEST(SynthPresets, E4BShapes) {
    Preset p = find_preset("gemma4-e4b");
    auto s = shapes(p);
    EXPECT_EQ(s.at("per_layer_token_embd.weight"), ne({10752, 262144}));
    EXPECT_EQ(s.at("blk.0.attn_q.weight"), ne({2560, 2048}));
    EXPECT_EQ(s.at("blk.0.attn_k.weight"), ne({2560, 512}));
    EXPECT_EQ(s.at("blk.5.attn_k.weight"), ne({2560, 1024}));
    EXPECT_EQ(s.at("blk.5.attn_v.weight"), ne({2560, 1024}));
    EXPECT_EQ(s.at("blk.5.attn_output.weight"), ne({4096, 2560}));
    EXPECT_EQ(s.at("blk.41.ffn_gate.weight"), ne({2560, 10240}));
    for (uint32_t il = 0; il < 42; ++il) EXPECT_EQ(p.swa[il], il % 6 != 5) << il;
    EXPECT_EQ(p.n_kv_shared, 18u);
}

TEST(SynthPresets, Moe26BShapes) {
    Preset p = find_preset("gemma4-26b-a4b");
    auto s = shapes(p);
    EXPECT_EQ(s.at("token_embd.weight"), ne({2816, 262144}));
    EXPECT_EQ(s.at("blk.0.attn_q.weight"), ne({2816, 4096}));
    EXPECT_EQ(s.at("blk.0.attn_k.weight"), ne({2816, 2048}));
    EXPECT_EQ(s.at("blk.0.attn_v.weight"), ne({2816, 2048}));
    EXPECT_EQ(s.at("blk.0.attn_output.weight"), ne({4096, 2816}));
    EXPECT_EQ(s.at("blk.5.attn_q.weight"), ne({2816, 8192}));
    EXPECT_EQ(s.at("blk.5.attn_k.weight"), ne({2816, 1024}));
    EXPECT_FALSE(s.count("blk.5.attn_v.weight"));  // K=V full layer
    EXPECT_EQ(s.at("blk.5.attn_output.weight"), ne({8192, 2816}));
    EXPECT_EQ(s.at("blk.7.ffn_down.weight"), ne({2112, 2816}));
    EXPECT_EQ(s.at("blk.7.ffn_gate_inp.weight"), ne({2816, 128}));
    EXPECT_EQ(s.at("blk.7.ffn_gate_inp.scale"), ne({2816}));
    EXPECT_EQ(s.at("blk.7.ffn_gate_up_exps.weight"), ne({2816, 1408, 128}));
    EXPECT_EQ(s.at("blk.7.ffn_down_exps.weight"), ne({704, 2816, 128}));
    EXPECT_EQ(s.at("blk.7.ffn_down_exps.scale"), ne({128}));
    EXPECT_EQ(s.at("blk.29.post_ffw_norm_2.weight"), ne({2816}));
    EXPECT_FALSE(s.count("per_layer_token_embd.weight"));
    const double n = static_cast<double>(parameter_count(p));
    EXPECT_GT(n, 25.0e9);  // 25.2 B total
    EXPECT_LT(n, 25.5e9);
}

TEST(SynthPresets, Dense31BShapes) {
    Preset p = find_preset("gemma4-31b");
    auto s = shapes(p);
    EXPECT_EQ(s.at("blk.0.attn_q.weight"), ne({5376, 8192}));
    EXPECT_EQ(s.at("blk.0.attn_k.weight"), ne({5376, 4096}));
    EXPECT_EQ(s.at("blk.59.attn_q.weight"), ne({5376, 16384}));
    EXPECT_EQ(s.at("blk.59.attn_k.weight"), ne({5376, 2048}));
    EXPECT_FALSE(s.count("blk.59.attn_v.weight"));
    EXPECT_EQ(s.at("blk.59.attn_output.weight"), ne({16384, 5376}));
    EXPECT_EQ(s.at("blk.30.ffn_up.weight"), ne({5376, 21504}));
    const double n = static_cast<double>(parameter_count(p));
    EXPECT_GT(n, 30.0e9);  // ~30.7 B
    EXPECT_LT(n, 31.5e9);
}

// The planner over the real preset tables (no file written).
std::map<std::string, GgmlType> plan_preset(const std::string& name, ftype::FileType ft) {
    Preset p = find_preset(name);
    auto specs = preset_tensors(p);
    std::vector<ftype::TensorDesc> descs;
    for (auto& t : specs)
        descs.push_back(ftype::make_tensor_desc(t.name, t.ne, source_type(t, GgmlType::F16)));
    ftype::PlanOptions po;
    po.ftype = ft;
    auto types = ftype::plan_types({p.n_layer, p.n_expert, p.n_head / p.n_head_kv[0]}, po, descs);
    std::map<std::string, GgmlType> r;
    for (size_t i = 0; i < specs.size(); ++i) r[specs[i].name] = types[i];
    return r;
}

TEST(SynthPresets, PlannedTypesOfTheRealShapes) {
    auto e2b = plan_preset("gemma4-e2b", ftype::FileType::MOSTLY_Q4_K_M);
    const std::set<int> q6 = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 31, 32, 33, 34};
    for (int il = 0; il < 35; ++il)
        EXPECT_EQ(e2b.at("blk." + std::to_string(il) + ".ffn_down.weight"),
                  q6.count(il) ? GgmlType::Q6_K : GgmlType::Q4_K)
            << il;
    EXPECT_EQ(e2b.at("token_embd.weight"), GgmlType::Q6_K);            // tied
    EXPECT_EQ(e2b.at("per_layer_token_embd.weight"), GgmlType::Q6_K);  // tied too
    EXPECT_EQ(e2b.at("per_layer_model_proj.weight"), GgmlType::F16);   // never quantized
    EXPECT_EQ(e2b.at("blk.0.attn_v.weight"), GgmlType::Q6_K);          // n_attention_wv 35

    auto moe = plan_preset("gemma4-26b-a4b", ftype::FileType::MOSTLY_Q4_K_M);
    EXPECT_EQ(moe.at("blk.0.ffn_down.weight"), GgmlType::Q8_0);       // Q6_K, 2112 wide
    EXPECT_EQ(moe.at("blk.3.ffn_down_exps.weight"), GgmlType::Q5_0);  // Q4_K, 704 wide
    EXPECT_EQ(moe.at("blk.3.ffn_gate_up_exps.weight"), GgmlType::Q4_K);
    EXPECT_EQ(moe.at("blk.3.ffn_gate_inp.weight"), GgmlType::F32);

    auto mx = plan_preset("gemma4-26b-a4b", ftype::FileType::MOSTLY_MXFP4_MOE);
    EXPECT_EQ(mx.at("blk.3.ffn_down_exps.weight"), GgmlType::MXFP4);
    EXPECT_EQ(mx.at("blk.3.attn_q.weight"), GgmlType::Q8_0);
    EXPECT_EQ(mx.at("token_embd.weight"), GgmlType::Q8_0);

    auto e4b = plan_preset("gemma4-e4b", ftype::FileType::MOSTLY_IQ4_XS);  // n_gqa 8/2 = 4
    EXPECT_EQ(e4b.at("blk.10.attn_v.weight"), GgmlType::Q5_K);
    auto d31 = plan_preset("gemma4-31b", ftype::FileType::MOSTLY_IQ4_XS);  // n_gqa 2
    EXPECT_EQ(d31.at("blk.10.attn_v.weight"), GgmlType::IQ4_XS);
}

TEST(SynthPresets, UnknownPresetIsAnError) {
    EXPECT_THROW(find_preset("gemma4-1b"), Error);
}

TEST(SynthPresets, TensorsAreInQuantizeOrder) {
    auto t = preset_tensors(find_preset("gemma4-26b-a4b"));
    EXPECT_EQ(t.front().name, "output_norm.weight");
    EXPECT_EQ(t[1].name, "rope_freqs.weight");
    EXPECT_EQ(t[2].name, "token_embd.weight");
    EXPECT_EQ(t[3].name.rfind("blk.0.", 0), 0u);
    EXPECT_EQ(t.back().name.rfind("blk.29.", 0), 0u);
}

// The testdata vocabulary file carries the real 26B-A4B gemma4.* metadata.
TEST(SynthPresets, Metadata26BMatchesTheRealFile) {
    if (!fs::exists(vocab_path())) GTEST_SKIP() << "test data not found: " << vocab_path();
    auto f = gguf::File::open(vocab_path());
    auto kv = preset_metadata(find_preset("gemma4-26b-a4b"));
    std::vector<std::string> real_keys, ours;
    for (const auto& e : f->metadata())
        if (e.key.rfind("gemma4.", 0) == 0) real_keys.push_back(e.key);
    for (const auto& e : kv) {
        if (e.key.rfind("gemma4.", 0) != 0) continue;
        ours.push_back(e.key);
        const auto* v = f->find(e.key);
        ASSERT_NE(v, nullptr) << e.key;
        EXPECT_TRUE(*v == e.value) << e.key << ": ours " << e.value.to_display_string() << ", real "
                                   << v->to_display_string();
    }
    EXPECT_EQ(ours, real_keys);  // same keys in the same order
}

TEST(SynthValues, RopeFreqsAndRanges) {
    Preset p = find_preset("tiny");
    auto specs = preset_tensors(p);
    for (size_t i = 0; i < specs.size(); ++i) {
        const auto& t = specs[i];
        uint64_t n = 1;
        for (auto d : t.ne) n *= static_cast<uint64_t>(d);
        std::vector<float> v(n);
        synth_values(p, t, 7, i, 0, n, v.data());
        if (t.name == "rope_freqs.weight") {
            ASSERT_EQ(n, 256u);
            for (size_t j = 0; j < n; ++j) EXPECT_EQ(v[j], j < 64 ? 1.0f : 1e30f) << j;
            continue;
        }
        double sum = 0, sum2 = 0;
        for (float x : v) sum += x, sum2 += double(x) * x;
        const double mean = sum / n, sd = std::sqrt(std::max(0.0, sum2 / n - mean * mean));
        SCOPED_TRACE(t.name);
        if (t.name.find("norm") != std::string::npos || t.name.find("scale") != std::string::npos) {
            EXPECT_NEAR(mean, 1.0, 0.18);  // 1 + 0.05 * N(0,1), |N| <= 2*sqrt(3)
        } else {
            ASSERT_GE(n, 1000u);
            const double want = 1.0 / std::sqrt(double(t.ne[0]));
            EXPECT_NEAR(mean, 0.0, 0.1 * want);
            EXPECT_NEAR(sd, want, 0.05 * want);
        }
        // A slice computed on its own equals the same elements of the whole tensor.
        const uint64_t m = std::min<uint64_t>(10, n - n / 2);
        std::vector<float> part(m);
        synth_values(p, t, 7, i, n / 2, m, part.data());
        for (uint64_t j = 0; j < m; ++j) EXPECT_EQ(part[j], v[n / 2 + j]);
    }
}

SynthOptions tiny_options(const fs::path& out, uint64_t seed, int threads,
                          ftype::FileType ft = ftype::FileType::MOSTLY_Q4_K_M) {
    SynthOptions o;
    o.preset = "tiny";
    o.ftype = ft;
    o.seed = seed;
    o.output_path = out.string();
    o.threads = threads;
    o.progress = false;
    return o;
}

TEST(SynthWrite, TinyFileMatchesThePlanner) {
    TempDir d("synth");
    auto path = d.path() / "tiny.gguf";
    auto r = synth_model(tiny_options(path, 1, 2));
    auto f = gguf::File::open(path.string());

    // Metadata: the preset's keys in order, then the two keys llama-quantize appends.
    auto kv = preset_metadata(find_preset("tiny"));
    ASSERT_EQ(f->metadata().size(), kv.size() + 2);
    for (size_t i = 0; i < kv.size(); ++i) {
        EXPECT_EQ(f->metadata()[i].key, kv[i].key);
        EXPECT_TRUE(f->metadata()[i].value == kv[i].value) << kv[i].key;
    }
    EXPECT_EQ(f->metadata()[kv.size()].key, "general.quantization_version");
    EXPECT_EQ(f->get_u32("general.quantization_version"), 2u);
    EXPECT_EQ(f->metadata().back().key, "general.file_type");
    EXPECT_EQ(f->get_u32("general.file_type"), 15u);
    EXPECT_FALSE(f->has("tokenizer.ggml.tokens"));

    // Tensors: names, shapes and types as the planner decides them.
    Preset p = find_preset("tiny");
    auto specs = preset_tensors(p);
    ASSERT_EQ(f->tensors().size(), specs.size());
    EXPECT_EQ(r.n_tensors, specs.size());
    std::vector<ftype::TensorDesc> descs;
    for (auto& t : specs)
        descs.push_back(ftype::make_tensor_desc(t.name, t.ne, source_type(t, GgmlType::F16)));
    ftype::PlanOptions po;
    po.ftype = ftype::FileType::MOSTLY_Q4_K_M;
    auto types = ftype::plan_types({4, 8, 2}, po, descs);
    std::map<GgmlType, int> hist;
    for (size_t i = 0; i < specs.size(); ++i) {
        const auto& t = f->tensors()[i];
        EXPECT_EQ(t.name, specs[i].name);
        for (size_t k = 0; k < 4; ++k)
            EXPECT_EQ(t.ne[k], k < specs[i].ne.size() ? specs[i].ne[k] : 1) << t.name;
        EXPECT_EQ(t.type, types[i]) << t.name;
        ++hist[t.type];
    }
    // The mixture really is mixed: Q6_K head, Q8_0 attn_v/attn_k (8 experts), Q5_K
    // attn_output, Q5_0 fallback for the 128-wide expert rows, Q4_K elsewhere, F32 norms.
    for (auto t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q5_0,
                   GgmlType::F32})
        EXPECT_GT(hist[t], 0) << ggml_type_name(t);
    EXPECT_EQ(f->find_tensor("token_embd.weight")->type, GgmlType::Q6_K);
    EXPECT_EQ(f->find_tensor("blk.0.ffn_down_exps.weight")->type, GgmlType::Q5_0);
    EXPECT_EQ(f->find_tensor("blk.0.ffn_gate_inp.weight")->type, GgmlType::F32);

    // Stored weights decode to the intended ranges.
    const auto* q = f->find_tensor("blk.1.attn_q.weight");
    std::vector<float> row(static_cast<size_t>(q->ne[0]));
    quant::dequantize_row(q->type, q->data, row.data(), q->ne[0]);
    double s2 = 0;
    for (float x : row) s2 += double(x) * x;
    EXPECT_NEAR(std::sqrt(s2 / row.size()), 1.0 / 16.0, 0.01);
    const auto* nrm = f->find_tensor("blk.1.attn_norm.weight");
    const float* nv = reinterpret_cast<const float*>(nrm->data);
    for (int i = 0; i < 256; ++i) EXPECT_NEAR(nv[i], 1.0f, 0.25f);
}

TEST(SynthWrite, DeterministicPerSeedAndThreadCount) {
    // Q8_0 keeps this fast under sanitizers; the k-quant path is covered above.
    TempDir d("synth");
    const auto q8 = ftype::FileType::MOSTLY_Q8_0;
    synth_model(tiny_options(d.path() / "a.gguf", 42, 1, q8));
    synth_model(tiny_options(d.path() / "b.gguf", 42, 3, q8));
    synth_model(tiny_options(d.path() / "c.gguf", 43, 2, q8));
    const std::string a = read_all(d.path() / "a.gguf"), b = read_all(d.path() / "b.gguf"),
                      c = read_all(d.path() / "c.gguf");
    EXPECT_GT(a.size(), 1000000u);
    EXPECT_TRUE(a == b);
    ASSERT_EQ(a.size(), c.size());
    EXPECT_FALSE(a == c);
    // Refuses to overwrite unless asked.
    EXPECT_THROW(synth_model(tiny_options(d.path() / "a.gguf", 1, 1, q8)), Error);
    auto o = tiny_options(d.path() / "a.gguf", 43, 1, q8);
    o.overwrite = true;
    synth_model(o);
    EXPECT_TRUE(read_all(d.path() / "a.gguf") == c);
}

// --fast: the same file layout (metadata, tensor names, shapes, types, offsets) as
// the normal path; F32 and small tensors byte for byte; every row of a pooled tensor
// is one of the normal tensor's first kFastPoolRows rows, and the rows vary.
TEST(SynthFast, SameLayoutAndPooledRows) {
    TempDir d("synth");
    synth_model(tiny_options(d.path() / "normal.gguf", 3, 2));
    auto o = tiny_options(d.path() / "fast.gguf", 3, 2);
    o.fast = true;
    auto r = synth_model(o);
    auto normal = gguf::File::open((d.path() / "normal.gguf").string());
    auto fast = gguf::File::open((d.path() / "fast.gguf").string());
    EXPECT_EQ(fs::file_size(d.path() / "normal.gguf"), fs::file_size(d.path() / "fast.gguf"));
    ASSERT_EQ(fast->metadata().size(), normal->metadata().size());
    for (size_t i = 0; i < normal->metadata().size(); ++i) {
        EXPECT_EQ(fast->metadata()[i].key, normal->metadata()[i].key);
        EXPECT_TRUE(fast->metadata()[i].value == normal->metadata()[i].value) << normal->metadata()[i].key;
    }
    ASSERT_EQ(fast->tensors().size(), normal->tensors().size());
    EXPECT_EQ(r.n_tensors, normal->tensors().size());
    const auto specs = preset_tensors(find_preset("tiny"));
    size_t n_pooled = 0, n_exact = 0;
    for (size_t i = 0; i < normal->tensors().size(); ++i) {
        const auto& a = normal->tensors()[i];
        const auto& b = fast->tensors()[i];
        SCOPED_TRACE(a.name);
        ASSERT_EQ(b.name, a.name);
        EXPECT_EQ(b.type, a.type);
        for (size_t k = 0; k < 4; ++k) EXPECT_EQ(b.ne[k], a.ne[k]);
        ASSERT_EQ(b.nbytes, a.nbytes);
        EXPECT_EQ(b.offset, a.offset);
        const auto* pa = static_cast<const uint8_t*>(a.data);
        const auto* pb = static_cast<const uint8_t*>(b.data);
        if (!fast_pooled(specs[i], a.type)) {
            ++n_exact;
            EXPECT_EQ(std::memcmp(pa, pb, a.nbytes), 0);
            continue;
        }
        ++n_pooled;
        EXPECT_NE(a.type, GgmlType::F32);
        const uint64_t row = *ggml_row_size(a.type, static_cast<uint64_t>(a.ne[0]));
        const uint64_t nrows = a.nbytes / row;
        ASSERT_GT(nrows, static_cast<uint64_t>(kFastPoolRows));
        std::set<int> used;
        for (uint64_t rr = 0; rr < nrows; ++rr) {
            int found = -1;
            for (int j = 0; j < kFastPoolRows && found < 0; ++j)
                if (std::memcmp(pb + rr * row, pa + j * row, row) == 0) found = j;
            ASSERT_GE(found, 0) << "row " << rr << " is not a pool row";
            used.insert(found);
        }
        EXPECT_GT(used.size(), static_cast<size_t>(kFastPoolRows) * 3 / 4);
    }
    // Norms, scales, router and RoPE factors stay exact; every big matrix is pooled.
    EXPECT_GT(n_exact, 30u);
    EXPECT_GT(n_pooled, 30u);
    EXPECT_FALSE(fast_pooled(TensorSpec{"blk.0.ffn_gate_inp.weight", {256, 8}}, GgmlType::F32));
    EXPECT_TRUE(fast_pooled(TensorSpec{"blk.0.ffn_gate_up_exps.weight", {256, 256, 8}}, GgmlType::Q4_K));
    EXPECT_FALSE(fast_pooled(TensorSpec{"blk.0.attn_k.weight", {256, 64}}, GgmlType::Q8_0));  // no gain
}

TEST(SynthFast, DeterministicPerSeedAndThreadCount) {
    TempDir d("synth");
    auto fast = [&](const char* name, uint64_t seed, int threads) {
        auto o = tiny_options(d.path() / name, seed, threads);
        o.fast = true;
        synth_model(o);
        return read_all(d.path() / name);
    };
    const std::string a = fast("a.gguf", 42, 1), b = fast("b.gguf", 42, 3), c = fast("c.gguf", 43, 2);
    EXPECT_GT(a.size(), 1000000u);
    EXPECT_TRUE(a == b);
    ASSERT_EQ(a.size(), c.size());
    EXPECT_FALSE(a == c);
}

TEST(SynthWrite, VocabFromCopiesTokenizer) {
    if (!fs::exists(vocab_path())) GTEST_SKIP() << "test data not found: " << vocab_path();
    TempDir d("synth");
    auto o = tiny_options(d.path() / "v.gguf", 5, 2);
    o.ftype = ftype::FileType::MOSTLY_F16;  // keeps the 262144-row embedding fast to write
    o.vocab_from = vocab_path();
    synth_model(o);
    auto f = gguf::File::open(o.output_path);
    auto v = gguf::File::open(vocab_path());
    size_t n_tok_keys = 0;
    for (const auto& e : v->metadata()) {
        if (e.key.rfind("tokenizer.", 0) != 0) continue;
        ++n_tok_keys;
        const auto* got = f->find(e.key);
        ASSERT_NE(got, nullptr) << e.key;
        EXPECT_TRUE(*got == e.value) << e.key;
    }
    EXPECT_GE(n_tok_keys, 10u);
    EXPECT_EQ(f->find_tensor("token_embd.weight")->ne[1], 262144);
    EXPECT_EQ(f->find_tensor("token_embd.weight")->type, GgmlType::F16);
    EXPECT_EQ(f->get_u32("general.file_type"), 1u);
    EXPECT_EQ(f->metadata().back().key, "general.file_type");
}

}  // namespace
}  // namespace hf2q::synth

// llama_ftype names and llama-quantize's per-tensor type rules (quant-formats.md §10).
#include "convert/ftype.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"

namespace hf2q::ftype {
namespace {

using G = GgmlType;

bool more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

struct Model {
    std::vector<TensorDesc> tensors;  // in quantize_order()
    ModelParams params;

    std::map<std::string, G> plan(const PlanOptions& o) const {
        auto types = plan_types(params, o, tensors);
        std::map<std::string, G> r;
        for (size_t i = 0; i < tensors.size(); ++i) r[tensors[i].name] = types[i];
        return r;
    }
};

std::vector<TensorDesc> in_order(std::vector<TensorDesc> v) {
    std::vector<std::string> names;
    for (auto& t : v) names.push_back(t.name);
    std::vector<TensorDesc> r;
    for (size_t i : quantize_order(names)) r.push_back(v[i]);
    return r;
}

std::string blk(int il, const char* s) {
    return "blk." + std::to_string(il) + "." + s;
}

// A dense Gemma-like model: tied embeddings, every layer with q/k/v/o and gate/up/down.
Model dense_model(int n_layer, int64_t H = 512, int64_t F = 1024, bool with_output = false,
                  uint32_t n_gqa = 2) {
    std::vector<TensorDesc> v;
    v.push_back(make_tensor_desc("token_embd.weight", {H, 1000}, G::F16));
    v.push_back(make_tensor_desc("output_norm.weight", {H}, G::F32));
    if (with_output) v.push_back(make_tensor_desc("output.weight", {H, 1000}, G::F16));
    for (int il = 0; il < n_layer; ++il) {
        v.push_back(make_tensor_desc(blk(il, "attn_norm.weight"), {H}, G::F32));
        v.push_back(make_tensor_desc(blk(il, "attn_q.weight"), {H, H}, G::F16));
        v.push_back(make_tensor_desc(blk(il, "attn_k.weight"), {H, 256}, G::F16));
        v.push_back(make_tensor_desc(blk(il, "attn_v.weight"), {H, 256}, G::F16));
        v.push_back(make_tensor_desc(blk(il, "attn_output.weight"), {H, H}, G::F16));
        v.push_back(make_tensor_desc(blk(il, "ffn_gate.weight"), {H, F}, G::F16));
        v.push_back(make_tensor_desc(blk(il, "ffn_up.weight"), {H, F}, G::F16));
        v.push_back(make_tensor_desc(blk(il, "ffn_down.weight"), {F, H}, G::F16));
        v.push_back(make_tensor_desc(blk(il, "layer_output_scale.weight"), {1}, G::F32));
    }
    Model m;
    m.tensors = in_order(std::move(v));
    m.params = {static_cast<uint32_t>(n_layer), 0, n_gqa};
    return m;
}

// 26B-A4B-shaped MoE layers (H 2816, dense F 2112, experts 128 x 704).
Model moe_model(int n_layer = 30) {
    const int64_t H = 2816, F = 2112, Fe = 704, E = 128;
    std::vector<TensorDesc> v;
    v.push_back(make_tensor_desc("token_embd.weight", {H, 4096}, G::BF16));
    v.push_back(make_tensor_desc("output_norm.weight", {H}, G::F32));
    v.push_back(make_tensor_desc("rope_freqs.weight", {256}, G::F32));
    for (int il = 0; il < n_layer; ++il) {
        bool full = il % 6 == 5;
        int64_t hd = full ? 512 : 256, nkv = full ? 2 : 8;
        v.push_back(make_tensor_desc(blk(il, "attn_q.weight"), {H, 16 * hd}, G::BF16));
        v.push_back(make_tensor_desc(blk(il, "attn_k.weight"), {H, nkv * hd}, G::BF16));
        if (!full) v.push_back(make_tensor_desc(blk(il, "attn_v.weight"), {H, nkv * hd}, G::BF16));
        v.push_back(make_tensor_desc(blk(il, "attn_output.weight"), {16 * hd, H}, G::BF16));
        v.push_back(make_tensor_desc(blk(il, "attn_q_norm.weight"), {hd}, G::F32));
        v.push_back(make_tensor_desc(blk(il, "ffn_gate.weight"), {H, F}, G::BF16));
        v.push_back(make_tensor_desc(blk(il, "ffn_up.weight"), {H, F}, G::BF16));
        v.push_back(make_tensor_desc(blk(il, "ffn_down.weight"), {F, H}, G::BF16));
        v.push_back(make_tensor_desc(blk(il, "ffn_gate_inp.weight"), {H, E}, G::F32));
        v.push_back(make_tensor_desc(blk(il, "ffn_gate_inp.scale"), {H}, G::F32));
        v.push_back(make_tensor_desc(blk(il, "ffn_gate_up_exps.weight"), {H, 2 * Fe, E}, G::BF16));
        v.push_back(make_tensor_desc(blk(il, "ffn_down_exps.weight"), {Fe, H, E}, G::BF16));
        v.push_back(make_tensor_desc(blk(il, "ffn_down_exps.scale"), {E}, G::F32));
        v.push_back(make_tensor_desc(blk(il, "pre_ffw_norm_2.weight"), {H}, G::F32));
    }
    Model m;
    m.tensors = in_order(std::move(v));
    m.params = {static_cast<uint32_t>(n_layer), 128, 2};
    return m;
}

PlanOptions opts(FileType ft) {
    PlanOptions o;
    o.ftype = ft;
    return o;
}

TEST(FtypeNames, ParseAndPrint) {
    EXPECT_EQ(file_type_from_name("q4_k_m"), FileType::MOSTLY_Q4_K_M);
    EXPECT_EQ(file_type_from_name("Q4_K_M"), FileType::MOSTLY_Q4_K_M);
    EXPECT_EQ(file_type_from_name("Q4_K"), FileType::MOSTLY_Q4_K_M);
    EXPECT_EQ(file_type_from_name("q3_k"), FileType::MOSTLY_Q3_K_M);
    EXPECT_EQ(file_type_from_name("q5_K"), FileType::MOSTLY_Q5_K_M);
    EXPECT_EQ(file_type_from_name("MXFP4_MOE"), FileType::MOSTLY_MXFP4_MOE);
    EXPECT_EQ(file_type_from_name("15"), FileType::MOSTLY_Q4_K_M);
    EXPECT_EQ(file_type_from_name("bf16"), FileType::MOSTLY_BF16);
    EXPECT_FALSE(file_type_from_name("q6_k_m"));
    EXPECT_FALSE(file_type_from_name("4"));  // removed id
    EXPECT_FALSE(file_type_from_name(""));
    EXPECT_FALSE(file_type_from_name("99999999999999999999"));
    EXPECT_EQ(static_cast<uint32_t>(FileType::MOSTLY_IQ4_XS), 30u);
    EXPECT_EQ(static_cast<uint32_t>(FileType::MOSTLY_MXFP4_MOE), 38u);
    auto names = file_type_names();
    ASSERT_EQ(names.size(), 20u);
    EXPECT_EQ(names.front(), "f32");
    EXPECT_EQ(names.back(), "mxfp4_moe");
    for (const auto& n : names) EXPECT_EQ(file_type_name(*file_type_from_name(n)), n);
    EXPECT_EQ(default_type(FileType::MOSTLY_Q3_K_L), G::Q3_K);
    EXPECT_EQ(default_type(FileType::MOSTLY_MXFP4_MOE), G::MXFP4);
}

TEST(FtypeOrder, NonBlockFirstThenLayerThenBytes) {
    std::vector<std::string> n = {
        "blk.10.attn_q.weight",  "token_embd.weight", "blk.2.ffn_down_exps.weight",
        "blk.2.ffn_down.weight", "blk.2.Attn.weight", "output_norm.weight",
        "blk.0.z.weight"};
    std::vector<std::string> got;
    for (size_t i : quantize_order(n)) got.push_back(n[i]);
    std::vector<std::string> want = {"output_norm.weight",    "token_embd.weight",
                                     "blk.0.z.weight",        "blk.2.Attn.weight",
                                     "blk.2.ffn_down.weight", "blk.2.ffn_down_exps.weight",
                                     "blk.10.attn_q.weight"};
    EXPECT_EQ(got, want);
}

TEST(FtypeCandidates, NonCandidatesKeepTheirType) {
    auto d = [](const char* n, std::vector<int64_t> ne, G t) { return make_tensor_desc(n, ne, t); };
    EXPECT_FALSE(allows_quantization(d("blk.0.attn_norm.weight", {512, 1}, G::F32)));
    EXPECT_FALSE(allows_quantization(d("blk.0.attn_q_norm.weight", {256, 4}, G::F32)));  // 2D norm
    EXPECT_FALSE(allows_quantization(d("blk.0.ffn_gate_inp.weight", {2816, 128}, G::F32)));
    EXPECT_FALSE(allows_quantization(d("per_layer_model_proj.weight", {1536, 8960}, G::BF16)));
    EXPECT_FALSE(allows_quantization(d("blk.0.ffn_down_exps.scale", {128, 2}, G::F32)));
    EXPECT_FALSE(allows_quantization(d("rope_freqs.weight", {256}, G::F32)));
    EXPECT_FALSE(
        allows_quantization(d("blk.0.x.weight", {512, 1, 1, 1}, G::F16)));  // ggml_n_dims 1
    EXPECT_TRUE(
        allows_quantization(d("blk.0.ffn_gate_up_exps.weight", {2816, 1408, 128}, G::BF16)));
    EXPECT_TRUE(allows_quantization(d("output.weight", {512, 100}, G::F16)));
    EXPECT_FALSE(allows_quantization(d("output.weight", {512, 100}, G::F16), true));

    // In a planned model they come back unchanged whatever the ftype or overrides.
    Model m = moe_model(6);
    for (auto ft : {FileType::MOSTLY_Q4_K_M, FileType::MOSTLY_MXFP4_MOE, FileType::MOSTLY_F16}) {
        PlanOptions o = opts(ft);
        o.tensor_types.push_back(parse_type_override(".*=q8_0"));
        auto p = m.plan(o);
        EXPECT_EQ(p.at("blk.0.ffn_gate_inp.weight"), G::F32);
        EXPECT_EQ(p.at("blk.0.ffn_gate_inp.scale"), G::F32);
        EXPECT_EQ(p.at("blk.5.attn_q_norm.weight"), G::F32);
        EXPECT_EQ(p.at("blk.3.ffn_down_exps.scale"), G::F32);
        EXPECT_EQ(p.at("rope_freqs.weight"), G::F32);
    }
}

// §10.5 for a dense model with tied embeddings (no output.weight), checked per column.
TEST(FtypeMixture, DenseTable) {
    const int L = 24;  // n/8 = 3, n/16 = 1
    Model m = dense_model(L);
    struct Row {
        FileType ft;
        G def, head, attn_output;
    };
    const Row rows[] = {
        {FileType::MOSTLY_Q8_0, G::Q8_0, G::Q8_0, G::Q8_0},
        {FileType::MOSTLY_Q6_K, G::Q6_K, G::Q6_K, G::Q6_K},
        {FileType::MOSTLY_Q5_K_M, G::Q5_K, G::Q6_K, G::Q5_K},
        {FileType::MOSTLY_Q5_K_S, G::Q5_K, G::Q6_K, G::Q5_K},
        {FileType::MOSTLY_Q4_K_M, G::Q4_K, G::Q6_K, G::Q4_K},
        {FileType::MOSTLY_Q4_K_S, G::Q4_K, G::Q6_K, G::Q4_K},
        {FileType::MOSTLY_Q3_K_L, G::Q3_K, G::Q6_K, G::Q5_K},
        {FileType::MOSTLY_Q3_K_M, G::Q3_K, G::Q6_K, G::Q4_K},
        {FileType::MOSTLY_Q3_K_S, G::Q3_K, G::Q6_K, G::Q3_K},
        {FileType::MOSTLY_Q2_K, G::Q2_K, G::Q6_K, G::Q3_K},
        {FileType::MOSTLY_Q4_0, G::Q4_0, G::Q6_K, G::Q4_0},
        {FileType::MOSTLY_Q4_1, G::Q4_1, G::Q6_K, G::Q4_1},
        {FileType::MOSTLY_Q5_0, G::Q5_0, G::Q6_K, G::Q5_0},
        {FileType::MOSTLY_Q5_1, G::Q5_1, G::Q6_K, G::Q5_1},
        {FileType::MOSTLY_IQ4_NL, G::IQ4_NL, G::Q6_K, G::IQ4_NL},
        {FileType::MOSTLY_IQ4_XS, G::IQ4_XS, G::Q6_K, G::IQ4_XS},
    };
    for (const auto& r : rows) {
        SCOPED_TRACE(std::string(file_type_name(r.ft)));
        auto p = m.plan(opts(r.ft));
        EXPECT_EQ(p.at("token_embd.weight"), r.head);
        EXPECT_EQ(p.at("output_norm.weight"), G::F32);
        for (int il = 0; il < L; ++il) {
            SCOPED_TRACE(il);
            G v = r.def, down = r.def;
            switch (r.ft) {
                case FileType::MOSTLY_Q5_K_M:
                case FileType::MOSTLY_Q4_K_M:
                    v = more_bits(il, L) ? G::Q6_K : r.def;
                    down = more_bits(il, L) ? G::Q6_K : r.def;
                    break;
                case FileType::MOSTLY_Q5_K_S:
                    break;
                case FileType::MOSTLY_Q4_K_S:
                    v = il < 4 ? G::Q5_K : G::Q4_K;
                    down = il < L / 8 ? G::Q5_K : G::Q4_K;
                    break;
                case FileType::MOSTLY_Q3_K_L:
                    v = down = G::Q5_K;
                    break;
                case FileType::MOSTLY_Q3_K_M:
                    v = il < 2 ? G::Q5_K : G::Q4_K;
                    down = il < L / 16 ? G::Q5_K : G::Q4_K;
                    break;
                case FileType::MOSTLY_Q2_K:
                    v = G::Q3_K;  // n_gqa 2 < 4
                    down = G::Q3_K;
                    break;
                case FileType::MOSTLY_IQ4_NL:
                case FileType::MOSTLY_IQ4_XS:
                    down = il < L / 8 ? G::Q5_K : r.def;  // no imatrix; n_gqa 2 keeps attn_v
                    break;
                default:
                    break;
            }
            EXPECT_EQ(p.at(blk(il, "attn_v.weight")), v);
            EXPECT_EQ(p.at(blk(il, "ffn_down.weight")), down);
            EXPECT_EQ(p.at(blk(il, "attn_output.weight")), r.attn_output);
            for (const char* s :
                 {"attn_q.weight", "attn_k.weight", "ffn_gate.weight", "ffn_up.weight"})
                EXPECT_EQ(p.at(blk(il, s)), r.def) << s;
            EXPECT_EQ(p.at(blk(il, "attn_norm.weight")), G::F32);
            EXPECT_EQ(p.at(blk(il, "layer_output_scale.weight")), G::F32);
        }
    }
}

TEST(FtypeMixture, FloatFileTypesHaveNoMixture) {
    Model m = dense_model(8);
    for (auto [ft, t] : {std::pair{FileType::MOSTLY_F16, G::F16},
                         {FileType::MOSTLY_BF16, G::BF16},
                         {FileType::ALL_F32, G::F32}}) {
        auto p = m.plan(opts(ft));
        EXPECT_EQ(p.at("token_embd.weight"), t);
        EXPECT_EQ(p.at("blk.0.attn_v.weight"), t);
        EXPECT_EQ(p.at("blk.0.ffn_down.weight"), t);
        EXPECT_EQ(p.at("blk.0.attn_norm.weight"), G::F32);
    }
}

TEST(FtypeMixture, UntiedEmbeddingsKeepTheDefault) {
    Model m = dense_model(8, 512, 1024, /*with_output=*/true);
    auto p = m.plan(opts(FileType::MOSTLY_Q4_K_M));
    EXPECT_EQ(p.at("output.weight"), G::Q6_K);
    EXPECT_EQ(p.at("token_embd.weight"), G::Q4_K);
    PlanOptions leave = opts(FileType::MOSTLY_Q4_K_M);
    leave.leave_output_tensor = true;
    EXPECT_EQ(m.plan(leave).at("output.weight"), G::F16);
    EXPECT_EQ(m.plan(opts(FileType::MOSTLY_Q8_0)).at("output.weight"), G::Q8_0);
}

TEST(FtypeMixture, E2BFfnDownLayers) {
    // E2B: 35 dense layers; §10.6 lists the Q6_K layers for Q4_K_M.
    Model m = dense_model(35, 1536, 6144, false, 8);
    auto p = m.plan(opts(FileType::MOSTLY_Q4_K_M));
    std::set<int> q6 = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 31, 32, 33, 34};
    for (int il = 0; il < 35; ++il)
        EXPECT_EQ(p.at(blk(il, "ffn_down.weight")), q6.count(il) ? G::Q6_K : G::Q4_K) << il;
}

TEST(FtypeMixture, GqaRulesForIQ4AndQ2K) {
    for (uint32_t gqa : {1u, 2u, 4u, 8u}) {
        SCOPED_TRACE(gqa);
        Model m = dense_model(16, 512, 1024, false, gqa);
        auto p = m.plan(opts(FileType::MOSTLY_IQ4_XS));
        G v = gqa >= 4 ? G::Q5_K : G::IQ4_XS;
        for (int il = 0; il < 16; ++il) EXPECT_EQ(p.at(blk(il, "attn_v.weight")), v);
        EXPECT_EQ(p.at("blk.1.ffn_down.weight"), G::Q5_K);
        EXPECT_EQ(p.at("blk.2.ffn_down.weight"), G::IQ4_XS);
        EXPECT_EQ(m.plan(opts(FileType::MOSTLY_IQ4_NL)).at("blk.3.attn_v.weight"),
                  gqa >= 4 ? G::Q5_K : G::IQ4_NL);
        EXPECT_EQ(m.plan(opts(FileType::MOSTLY_Q2_K)).at("blk.3.attn_v.weight"),
                  gqa >= 4 ? G::Q4_K : G::Q3_K);
        // With an imatrix the early ffn_down layers are not bumped.
        PlanOptions im = opts(FileType::MOSTLY_IQ4_XS);
        im.has_imatrix = true;
        EXPECT_EQ(m.plan(im).at("blk.1.ffn_down.weight"), G::IQ4_XS);
    }
}

TEST(FtypeMixture, Legacy4And5WithImatrix) {
    Model m = dense_model(16);
    PlanOptions o = opts(FileType::MOSTLY_Q4_0);
    EXPECT_EQ(m.plan(o).at("blk.0.ffn_down.weight"), G::Q4_0);
    o.has_imatrix = true;
    auto p = m.plan(o);
    EXPECT_EQ(p.at("blk.1.ffn_down.weight"), G::Q4_1);
    EXPECT_EQ(p.at("blk.2.ffn_down.weight"), G::Q4_0);
    o.ftype = FileType::MOSTLY_Q5_0;
    EXPECT_EQ(m.plan(o).at("blk.0.ffn_down.weight"), G::Q5_1);
}

TEST(FtypeMoE, Gemma26BQ4KM) {
    Model m = moe_model();
    auto p = m.plan(opts(FileType::MOSTLY_Q4_K_M));
    EXPECT_EQ(p.at("token_embd.weight"), G::Q6_K);
    int n_v = 0;
    for (int il = 0; il < 30; ++il) {
        SCOPED_TRACE(il);
        // ne[0] 2112 and 704 are not multiples of 256: Q6_K -> Q8_0, Q4_K -> Q5_0.
        G down = more_bits(il, 30) ? G::Q8_0 : G::Q5_0;
        EXPECT_EQ(p.at(blk(il, "ffn_down.weight")), down);
        EXPECT_EQ(p.at(blk(il, "ffn_down_exps.weight")), down);
        EXPECT_EQ(p.at(blk(il, "ffn_gate_up_exps.weight")), G::Q4_K);
        EXPECT_EQ(p.at(blk(il, "ffn_gate.weight")), G::Q4_K);
        EXPECT_EQ(p.at(blk(il, "attn_k.weight")), G::Q4_K);  // expert_count 128, not 8
        EXPECT_EQ(p.at(blk(il, "attn_output.weight")), G::Q4_K);
        if (il % 6 != 5) {
            EXPECT_EQ(p.at(blk(il, "attn_v.weight")), more_bits(n_v, 25) ? G::Q6_K : G::Q4_K);
            ++n_v;
        }
    }
    EXPECT_EQ(n_v, 25);
    TypePlanner tp(m.params, opts(FileType::MOSTLY_Q4_K_M), m.tensors);
    EXPECT_EQ(tp.n_attention_wv(), 25);
    EXPECT_TRUE(tp.tied_embeddings());
}

TEST(FtypeMoE, Gemma26BFallbacks) {
    Model m = moe_model();
    struct Case {
        FileType ft;
        G down_plain;  // ffn_down of a layer without use_more_bits (layer 3)
        G down_more;   // layer 0
    };
    const Case cases[] = {
        {FileType::MOSTLY_Q5_K_M, G::Q5_1, G::Q8_0}, {FileType::MOSTLY_Q5_K_S, G::Q5_1, G::Q5_1},
        {FileType::MOSTLY_Q6_K, G::Q8_0, G::Q8_0},   {FileType::MOSTLY_Q3_K_S, G::Q4_0, G::Q4_0},
        {FileType::MOSTLY_Q2_K, G::Q4_0, G::Q4_0},   {FileType::MOSTLY_IQ4_XS, G::IQ4_NL, G::Q5_1},
        {FileType::MOSTLY_Q4_K_S, G::Q5_0, G::Q5_1}, {FileType::MOSTLY_Q8_0, G::Q8_0, G::Q8_0},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(std::string(file_type_name(c.ft)));
        auto p = m.plan(opts(c.ft));
        EXPECT_EQ(p.at("blk.3.ffn_down.weight"), c.down_plain);
        EXPECT_EQ(p.at("blk.3.ffn_down_exps.weight"), c.down_plain);
        EXPECT_EQ(p.at("blk.0.ffn_down_exps.weight"), c.down_more);
    }
    TypePlanner tp(m.params, opts(FileType::MOSTLY_Q4_K_M), m.tensors);
    for (const auto& t : m.tensors) tp.type_for(t);
    EXPECT_EQ(tp.n_fallback(), 60);  // ffn_down + ffn_down_exps on 30 layers
}

TEST(FtypeMoE, Mxfp4Moe) {
    Model m = moe_model();
    auto p = m.plan(opts(FileType::MOSTLY_MXFP4_MOE));
    EXPECT_EQ(p.at("token_embd.weight"), G::Q8_0);
    for (int il = 0; il < 30; ++il) {
        EXPECT_EQ(p.at(blk(il, "ffn_gate_up_exps.weight")), G::MXFP4);
        EXPECT_EQ(p.at(blk(il, "ffn_down_exps.weight")), G::MXFP4);
        EXPECT_EQ(p.at(blk(il, "ffn_down.weight")), G::Q8_0);
        EXPECT_EQ(p.at(blk(il, "attn_q.weight")), G::Q8_0);
        EXPECT_EQ(p.at(blk(il, "ffn_gate_inp.weight")), G::F32);
    }
}

TEST(FtypeMoE, LayerComesFromTheNameNotTheOrder) {
    Model m = moe_model(8);
    auto want = m.plan(opts(FileType::MOSTLY_Q4_K_M));
    Model r = m;
    std::reverse(r.tensors.begin(), r.tensors.end());
    auto got = r.plan(opts(FileType::MOSTLY_Q4_K_M));
    for (int il = 0; il < 8; ++il)
        EXPECT_EQ(got.at(blk(il, "ffn_down_exps.weight")),
                  want.at(blk(il, "ffn_down_exps.weight")));
    // A MoE FFN tensor without a layer number is an error, as in llama-quantize.
    Model bad = m;
    bad.tensors.push_back(make_tensor_desc("ffn_down_extra.weight", {2816, 2816}, G::F16));
    EXPECT_THROW(bad.plan(opts(FileType::MOSTLY_Q4_K_M)), Error);
}

TEST(FtypeMoE, EightExpertRules) {
    Model m = dense_model(8);
    m.params.expert_count = 8;
    auto p = m.plan(opts(FileType::MOSTLY_Q4_K_M));
    EXPECT_EQ(p.at("blk.0.attn_v.weight"), G::Q8_0);
    EXPECT_EQ(p.at("blk.0.attn_k.weight"), G::Q8_0);
    EXPECT_EQ(p.at("blk.0.attn_output.weight"), G::Q5_K);
    EXPECT_EQ(m.plan(opts(FileType::MOSTLY_Q5_K_M)).at("blk.0.attn_output.weight"), G::Q5_K);
}

TEST(FtypeOverrides, TensorTypeFirstMatchWinsAndSkipsCounters) {
    Model m = dense_model(16);
    PlanOptions o = opts(FileType::MOSTLY_Q3_K_M);
    auto base = m.plan(o);
    EXPECT_EQ(base.at("blk.0.attn_v.weight"), G::Q5_K);
    EXPECT_EQ(base.at("blk.1.attn_v.weight"), G::Q5_K);
    EXPECT_EQ(base.at("blk.2.attn_v.weight"), G::Q4_K);

    o.tensor_types = {parse_type_override("BLK\\.0\\.attn_v=q8_0"),
                      parse_type_override("attn_v=q6_k"),
                      parse_type_override("blk\\.1\\.attn_v=q2_k")};
    auto p = m.plan(o);
    EXPECT_EQ(p.at("blk.0.attn_v.weight"), G::Q8_0);  // pattern lower-cased as llama-quantize does
    EXPECT_EQ(p.at("blk.1.attn_v.weight"), G::Q6_K);  // first match wins
    EXPECT_EQ(p.at("blk.5.attn_v.weight"), G::Q6_K);

    // Overriding only layer 0 shifts the attn_v counter seen by the later layers.
    o.tensor_types = {parse_type_override("blk\\.0\\.attn_v=q8_0")};
    p = m.plan(o);
    EXPECT_EQ(p.at("blk.0.attn_v.weight"), G::Q8_0);
    EXPECT_EQ(p.at("blk.1.attn_v.weight"), G::Q5_K);
    EXPECT_EQ(p.at("blk.2.attn_v.weight"), G::Q5_K);
    EXPECT_EQ(p.at("blk.3.attn_v.weight"), G::Q4_K);

    // Same for ffn_down in a dense model (layer = counter): Q4_K_M on 16 layers bumps
    // layers 0,1,4,7,10,13,14,15; skipping layer 0 shifts every later decision.
    PlanOptions d = opts(FileType::MOSTLY_Q4_K_M);
    d.tensor_types = {parse_type_override("blk\\.0\\.ffn_down=q8_0")};
    p = m.plan(d);
    EXPECT_EQ(p.at("blk.0.ffn_down.weight"), G::Q8_0);
    EXPECT_EQ(p.at("blk.1.ffn_down.weight"), G::Q6_K);  // counter 0
    EXPECT_EQ(p.at("blk.2.ffn_down.weight"), G::Q6_K);  // counter 1
    EXPECT_EQ(p.at("blk.4.ffn_down.weight"), G::Q4_K);  // counter 3
    EXPECT_EQ(p.at("blk.5.ffn_down.weight"), G::Q6_K);  // counter 4
}

TEST(FtypeOverrides, OverridesGetTheShapeFallback) {
    Model m = moe_model(6);
    PlanOptions o = opts(FileType::MOSTLY_Q8_0);
    o.tensor_types = {parse_type_override("ffn_down=q4_k"), parse_type_override("attn_q=iq4_xs")};
    auto p = m.plan(o);
    EXPECT_EQ(p.at("blk.0.ffn_down.weight"), G::Q5_0);
    EXPECT_EQ(p.at("blk.0.ffn_down_exps.weight"), G::Q5_0);
    EXPECT_EQ(p.at("blk.0.attn_q.weight"), G::IQ4_XS);  // 2816 = 11 * 256
    EXPECT_THROW(parse_type_override("attn_q"), Error);
    EXPECT_THROW(parse_type_override("attn_q=q9_9"), Error);
    EXPECT_THROW(parse_type_override("attn_(q=q8_0"), Error);
    EXPECT_THROW(parse_type_override("attn_q=iq2_xxs"), Error);  // not a type hf2q writes
}

TEST(FtypeOverrides, OutputAndTokenEmbeddingTypes) {
    Model m = dense_model(8);
    PlanOptions o = opts(FileType::MOSTLY_Q4_K_M);
    o.output_tensor_type = G::Q8_0;  // tied: applies to token_embd through rule 1
    EXPECT_EQ(m.plan(o).at("token_embd.weight"), G::Q8_0);
    o.token_embedding_type = G::Q4_0;  // checked first for TOKEN_EMBD
    EXPECT_EQ(m.plan(o).at("token_embd.weight"), G::Q4_0);
    PlanOptions f = opts(FileType::MOSTLY_F16);
    f.token_embedding_type = G::Q8_0;  // applies even to an unquantized ftype
    EXPECT_EQ(m.plan(f).at("token_embd.weight"), G::Q8_0);
    EXPECT_EQ(m.plan(f).at("blk.0.attn_q.weight"), G::F16);
}

TEST(FtypeOverrides, Pure) {
    Model m = moe_model(6);
    PlanOptions o = opts(FileType::MOSTLY_Q4_K_M);
    o.pure = true;
    auto p = m.plan(o);
    EXPECT_EQ(p.at("token_embd.weight"), G::Q4_K);
    EXPECT_EQ(p.at("blk.0.attn_v.weight"), G::Q4_K);
    EXPECT_EQ(p.at("blk.0.ffn_down.weight"), G::Q5_0);  // shape fallback still applies
    EXPECT_EQ(p.at("blk.0.ffn_gate_inp.weight"), G::F32);
}

}  // namespace
}  // namespace hf2q::ftype

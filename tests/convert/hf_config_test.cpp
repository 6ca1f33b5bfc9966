// config.json parsing: both config forms, derived per-layer values, validation errors.
#include "convert/hf_config.h"

#include <gtest/gtest.h>

#include "convert/tiny_model.h"
#include "core/error.h"

using namespace hf2q;
using namespace hf2q::convert;
using namespace hf2q::test;
using json = nlohmann::json;

namespace {

void expect_config_error(const json& j, const std::string& needle) {
    try {
        parse_hf_config(j, "config.json");
        ADD_FAILURE() << "accepted: " << j.dump();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

}  // namespace

TEST(HfConfig, DefaultLayerPatternForcesLastLayerFull) {
    TinySpec s;
    s.L = 8;
    json j = tiny_config(s);
    j.erase("layer_types");
    auto c = parse_hf_config(j, "config.json");
    // (i+1) % 6 == 0 -> full: layer 5; layer 7 forced full.
    std::vector<bool> want = {true, true, true, true, true, false, true, false};
    EXPECT_EQ(c.is_sliding, want);
    EXPECT_EQ(c.layer_head_dim[5], 32u);
    EXPECT_EQ(c.layer_head_dim[4], 16u);
    EXPECT_EQ(c.global_head_dim, 32u);
}

TEST(HfConfig, ExplicitSlidingLastLayerIsForcedFull) {
    TinySpec s;
    s.layer_types = {"full_attention", "sliding_attention"};
    auto c = parse_hf_config(tiny_config(s), "config.json");
    EXPECT_EQ(c.is_sliding, (std::vector<bool>{false, false}));
}

TEST(HfConfig, TextConfigAndRopeDefaults) {
    TinySpec s;
    s.text_config = true;
    json j = tiny_config(s);
    j["text_config"].erase("rope_parameters");
    auto c = parse_hf_config(j, "config.json");
    EXPECT_EQ(c.hidden_size, 32u);
    EXPECT_EQ(c.rope_full.rope_type, "proportional");
    EXPECT_FLOAT_EQ(c.rope_full.theta, 1e6f);
    EXPECT_FLOAT_EQ(c.rope_full.partial_rotary_factor, 0.25f);
    EXPECT_FLOAT_EQ(c.rope_sliding.theta, 1e4f);
}

TEST(HfConfig, KeqVReleasedFormAndPerLayerFormAgree) {
    TinySpec s;
    s.L = 3;
    s.nh = 4;
    s.nkv = 2;
    s.k_eq_v = true;
    s.global_kv = 1;
    s.layer_types = {"sliding_attention", "full_attention", "full_attention"};
    auto a = parse_hf_config(tiny_config(s), "a");
    s.per_layer_config = true;
    auto b = parse_hf_config(tiny_config(s), "b");
    for (const auto* c : {&a, &b}) {
        EXPECT_EQ(c->layer_kv_heads, (std::vector<uint32_t>{2, 1, 1}));
        EXPECT_EQ(c->layer_head_dim, (std::vector<uint32_t>{16, 32, 32}));
        EXPECT_EQ(c->layer_k_eq_v, (std::vector<bool>{false, true, true}));
        EXPECT_TRUE(c->per_layer_kv_heads);
        EXPECT_EQ(c->global_head_dim, 32u);
    }
    EXPECT_TRUE(b.used_per_layer_config);
}

TEST(HfConfig, GlobalKvHeadsIgnoredWithoutKeqV) {
    // transformers only honours num_global_key_value_heads on K=V layers.
    TinySpec s;
    s.nh = 4;
    s.nkv = 2;
    s.global_kv = 1;
    auto c = parse_hf_config(tiny_config(s), "c");
    EXPECT_EQ(c.layer_kv_heads, (std::vector<uint32_t>{2, 2}));
    EXPECT_TRUE(c.per_layer_kv_heads);  // llama.cpp still writes the array
}

TEST(HfConfig, DoubleWideOnSharedLayers) {
    TinySpec s;
    s.L = 4;
    s.shared = 2;
    s.double_wide = true;
    s.layer_types = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
    auto c = parse_hf_config(tiny_config(s), "c");
    EXPECT_EQ(c.layer_ffn, (std::vector<uint32_t>{64, 64, 128, 128}));
    EXPECT_TRUE(c.double_wide());
    EXPECT_FALSE(c.is_kv_shared(1));
    EXPECT_TRUE(c.is_kv_shared(2));
}

TEST(HfConfig, MoeIntermediateSizeAlias) {
    TinySpec s;
    s.moe = true;
    json j = tiny_config(s);
    j.erase("moe_intermediate_size");
    j["expert_intermediate_size"] = 24;
    auto c = parse_hf_config(j, "c");
    EXPECT_EQ(*c.moe_intermediate_size, 24u);
    EXPECT_EQ(*c.num_experts, 4u);
}

TEST(HfConfig, ValidationErrors) {
    TinySpec s;
    json base = tiny_config(s);
    auto with = [&](const char* k, json v) {
        json j = base;
        if (v.is_discarded())
            j.erase(k);
        else
            j[k] = v;
        return j;
    };
    expect_config_error(with("hidden_size", json::value_t::discarded), "hidden_size is missing");
    expect_config_error(with("hidden_size", "32"), "hidden_size must be an integer");
    expect_config_error(with("hidden_size", -4), "hidden_size");
    expect_config_error(with("num_hidden_layers", 0), "num_hidden_layers");
    expect_config_error(with("head_dim", 15), "odd");
    expect_config_error(with("num_key_value_heads", 3), "multiple");
    expect_config_error(with("layer_types", json::array({"sliding_attention", "global"})),
                        "layer_types[1]");
    expect_config_error(with("layer_types", json::array({"full_attention"})),
                        "layer_types must be");
    expect_config_error(with("model_type", "llama"), "not Gemma 4");
    expect_config_error(with("rms_norm_eps", 0), "rms_norm_eps");
    expect_config_error(with("num_kv_shared_layers", 2), "num_kv_shared_layers");
    expect_config_error(with("attention_k_eq_v", 1), "true or false");
    expect_config_error(with("use_bidirectional_attention", "all"), "use_bidirectional_attention");
    expect_config_error(with("per_layer_config", json{{"7", {{"head_dim", 32}}}}), "layer 7");
    expect_config_error(with("per_layer_config", json{{"0", {{"head_dim", 32}}}}),
                        "sliding layer 0");
    expect_config_error(with("per_layer_config", json{{"1", {{"rope", 1}}}}), "rope");
    json moe = base;
    moe["enable_moe_block"] = true;
    expect_config_error(moe, "num_experts");
    moe["num_experts"] = 2;
    moe["top_k_experts"] = 3;
    moe["moe_intermediate_size"] = 8;
    expect_config_error(moe, "top_k_experts 3 exceeds");
    json rope = base;
    rope["rope_parameters"]["full_attention"]["rope_type"] = "yarn";
    expect_config_error(rope, "yarn");
    rope = base;
    rope["rope_parameters"]["sliding_attention"]["rope_theta"] = -1;
    expect_config_error(rope, "rope_theta");
    // A KV-shared full layer needs an earlier non-shared full layer.
    TinySpec sh;
    sh.L = 3;
    sh.shared = 1;
    sh.layer_types = {"sliding_attention", "sliding_attention", "full_attention"};
    expect_config_error(tiny_config(sh), "no earlier non-shared full");
    expect_config_error(json::array(), "not a JSON object");
}

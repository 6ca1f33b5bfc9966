// Builders for tiny Hugging Face Gemma 4 checkpoints written into a temp directory.
#pragma once

#include "support/temp_dir.h"
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hf2q::test {

// One tensor to put in a safetensors file.
struct StEntry {
    std::string name;
    std::string dtype;  // "F32", "F16", "BF16", or anything for error tests
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
    std::vector<float> values;  // the f32 values the bytes were made from (if any)
};

// Serializes a safetensors image (header padded to 8 bytes, data in entry order).
std::vector<uint8_t> safetensors_image(const std::vector<StEntry>& entries);
// Writes bytes to a file.
void write_file(const std::filesystem::path& p, const std::vector<uint8_t>& bytes);
void write_text(const std::filesystem::path& p, const std::string& s);

// Entry with deterministic pseudo-random values in [-1, 1) stored as `dtype`.
StEntry make_entry(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                   uint32_t seed);
StEntry make_entry_values(const std::string& name, const std::string& dtype,
                          std::vector<int64_t> shape, std::vector<float> values);

// Shape knobs of a tiny Gemma 4 text model.
struct TinySpec {
    int L = 2, H = 32, nh = 2, nkv = 1, hd = 16, ghd = 32, I = 64, V = 40, window = 8;
    int P = 0;       // PLE width; 0 = off
    int shared = 0;  // num_kv_shared_layers
    bool double_wide = false;
    bool moe = false;
    int E = 4, top_k = 2, Fe = 16;
    bool k_eq_v = false;
    int global_kv = 0;                     // num_global_key_value_heads; 0 = null
    std::vector<std::string> layer_types;  // empty: sliding except the last layer
    std::string prefix = "model.";         // or "model.language_model."
    bool text_config = false;              // nest fields under text_config
    bool per_layer_config = false;         // newer transformers form
    bool with_vision = false;              // add a vision tower tensor and lm_head
    std::string dtype = "BF16";
    float softcap = 30.0f;
};

nlohmann::json tiny_config(const TinySpec& s);
std::vector<StEntry> tiny_tensors(const TinySpec& s);


// Writes config.json and model.safetensors for `s` into dir; returns the entries.
std::vector<StEntry> write_tiny_model(const std::filesystem::path& dir, const TinySpec& s);

}  // namespace hf2q::test

// Synthetic Gemma 4 GGUF files: the real models' shapes and metadata with random
// weights, typed as llama-quantize would type them, for tests, benchmarks and demos
// without downloading checkpoints.
//
// Presets (gemma4-architecture.md §2): gemma4-e2b, gemma4-e4b, gemma4-26b-a4b,
// gemma4-31b, and "tiny" (a 4-layer MoE model with every Gemma 4 feature except PLE
// and KV sharing, small enough for CI).
//
// Weights are deterministic for a seed and independent of the thread count: element
// e of tensor t is a function of (seed, t, e) only (counter-based splitmix64).
//
// Fast mode (SynthOptions::fast) is for benchmarks, which need the shapes, types and
// sizes but not distinct values in every row: a pooled tensor (fast_pooled()) is
// built from its first kFastPoolRows rows, quantized as usual, and every output row
// is a copy of the pool row picked by a hash of (seed, tensor, row). Every other
// tensor (F32: norms, scales, the router) is written exactly as without fast mode.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "convert/ftype.h"
#include "core/ggml_type.h"
#include "gguf/gguf.h"

namespace hf2q::synth {

// Hyper-parameters of one model, in GGUF terms (gguf-gemma4.md §2.2).
struct Preset {
    std::string name;
    uint32_t n_layer = 0;
    uint32_t n_embd = 0;  // H
    uint32_t n_head = 0;
    uint32_t head_dim_swa = 0;   // key_length_swa
    uint32_t head_dim_full = 0;  // key_length
    uint32_t n_vocab = 0;
    uint32_t n_ctx = 0;  // context_length
    uint32_t sliding_window = 0;
    uint32_t n_embd_per_layer = 0;  // P (PLE width), 0 = no PLE
    uint32_t n_kv_shared = 0;       // last layers that reuse earlier K/V
    uint32_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
    std::vector<bool> swa;              // per layer: sliding attention
    std::vector<uint32_t> n_head_kv;    // per layer
    std::vector<uint32_t> n_ff;         // per layer: dense MLP width
    bool head_kv_array = false;         // write head_count_kv as an i32 array
    bool ff_array = false;              // write feed_forward_length as an i32 array
    bool k_eq_v = false;                // full layers have no attn_v
    bool shared_layers_have_kv = true;  // KV-shared layers still carry attn_k/attn_v/attn_k_norm
    float rope_base = 1e6f, rope_base_swa = 1e4f;
    float partial_rotary_full = 0.25f;  // fraction of d_full that rotates (rope_freqs)
    float rms_eps = 1e-6f;
    float softcap = 30.0f;

    uint32_t head_dim(uint32_t il) const { return swa[il] ? head_dim_swa : head_dim_full; }
    bool has_kv(uint32_t il) const { return il < n_layer - n_kv_shared; }
};

std::vector<std::string> preset_names();
// Throws hf2q::Error naming the known presets.
Preset find_preset(std::string_view name);

// The gemma4.* and general.* keys (without general.file_type,
// general.quantization_version and tokenizer.*), in the converter's order.
std::vector<gguf::KeyValue> preset_metadata(const Preset& p);

struct TensorSpec {
    std::string name;
    std::vector<int64_t> ne;  // ggml order
};
// Every tensor of the model in llama-quantize's order (ftype::quantize_order()).
std::vector<TensorSpec> preset_tensors(const Preset& p);
uint64_t parameter_count(const Preset& p);

// Type of a tensor in the (virtual) converted input file that llama-quantize would
// read: F32 for 1-D tensors, norms, non-".weight" names and the router; `src` else.
GgmlType source_type(const TensorSpec& t, GgmlType src);

struct SynthOptions {
    std::string preset = "tiny";
    ftype::FileType ftype = ftype::FileType::MOSTLY_Q4_K_M;
    uint64_t seed = 0;
    std::string output_path;
    std::string vocab_from;  // GGUF whose tokenizer.* keys (and vocab size) are copied
    int threads = 0;         // <= 0: all cores
    bool overwrite = false;
    bool progress = true;
    bool fast = false;       // pool the rows of big matrices (see the file comment)
};

// Distinct rows of a pooled tensor in fast mode: enough that neighbouring rows and
// experts differ, few enough that quantizing them is negligible.
inline constexpr int64_t kFastPoolRows = 64;

// Whether fast mode pools tensor `t` stored as `type`: a matrix (2-D or 3-D) in a
// type other than F32 with more rows than the pool. F32 tensors (norms, scales,
// router, RoPE factors) set the numerics, so they are always written in full.
bool fast_pooled(const TensorSpec& t, GgmlType type);

struct SynthResult {
    size_t n_tensors = 0;
    uint64_t data_bytes = 0;
    uint64_t n_params = 0;
    double seconds = 0.0;
};

// Writes the file (temp file + rename). Throws hf2q::Error on bad options.
SynthResult synth_model(const SynthOptions& o);

// Fills out[0..n) with the synthetic values of elements [first, first + n) of tensor
// `index` (its position in preset_tensors()). Exposed for tests.
void synth_values(const Preset& p, const TensorSpec& t, uint64_t seed, uint64_t index,
                  uint64_t first, uint64_t n, float* out);

}  // namespace hf2q::synth

// Gemma 4 specifics of the HF -> GGUF conversion: the tensor-name table, the expected
// checkpoint shapes, the gemma4.* metadata and the generated rope_freqs tensor
// (docs/convert.md; spec gguf-gemma4.md §2-§3).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "convert/hf_config.h"
#include "convert/safetensors.h"

namespace hf2q::gguf {
class Writer;
}

namespace hf2q::convert {

// What happens to one checkpoint tensor name.
struct MappedName {
    enum class Kind { Tensor, Ignored } kind = Kind::Ignored;
    std::string gguf_name;  // Kind::Tensor only
    int layer = -1;         // block index, -1 for global tensors
    int entry = -1;         // row of the name table (internal)
};

// Strips the language-model prefix ("model.language_model." or "model."), drops
// vision/audio towers and lm_head.weight (tied), and maps the rest with the name table.
// Throws hf2q::Error for a name the table does not know.
MappedName map_gemma4_tensor_name(const std::string& hf_name);

// One tensor of the output file, in file order.
struct PlannedTensor {
    std::string name;               // GGUF name
    const StTensor* src = nullptr;  // checkpoint tensor; nullptr for generated ones
    std::vector<float> generated;   // data of a generated F32 tensor
    std::vector<int64_t> ne;        // ggml order (ne[0] contiguous), 1..4 dims
};

// Maps, shape-checks and orders every checkpoint tensor (rope_freqs.weight first, then
// the checkpoint's order), checking the presence rules of the architecture. `ple_width`
// is the resolved per-layer-input width P.
std::vector<PlannedTensor> plan_gemma4_tensors(const Checkpoint& ck, const Gemma4HfConfig& cfg,
                                               uint32_t ple_width);

// P from the config, or (when config.json does not state it) from the checkpoint's
// per_layer_projection_norm.weight, else 0.
uint32_t resolve_ple_width(const Checkpoint& ck, const Gemma4HfConfig& cfg);

// rope_freqs.weight values: d_full/2 entries, 1.0 for the first
// int(d_full * partial_rotary_factor / 2), 1e30 after (proportional RoPE emulation).
std::vector<float> gemma4_rope_freqs(const Gemma4HfConfig& cfg);

// Writes every gemma4.* key of spec §2.2 with its exact GGUF type.
void add_gemma4_metadata(gguf::Writer& w, const Gemma4HfConfig& cfg, uint32_t ple_width);

}  // namespace hf2q::convert

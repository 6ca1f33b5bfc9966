// llama.cpp file types (llama_ftype) and the per-tensor type rules of llama-quantize
// (src/llama-quant.cpp; spec quant-formats.md §10).
//
// A file type names a mixture, not one storage type: llama-quantize picks each
// tensor's ggml type from the tensor's name, shape, position among tensors of its kind
// and a few model hyper-parameters. TypePlanner reproduces that choice exactly,
// including the running counters (i_attention_wv, i_ffn_down, ...) that make the
// answer depend on the order in which tensors are visited, so callers must present
// the tensors in llama-quantize's order (quantize_order()).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/ggml_type.h"

namespace hf2q::ftype {

// The llama_ftype ids hf2q can produce (the value of general.file_type).
enum class FileType : uint32_t {
    ALL_F32 = 0,
    MOSTLY_F16 = 1,
    MOSTLY_Q4_0 = 2,
    MOSTLY_Q4_1 = 3,
    MOSTLY_Q8_0 = 7,
    MOSTLY_Q5_0 = 8,
    MOSTLY_Q5_1 = 9,
    MOSTLY_Q2_K = 10,
    MOSTLY_Q3_K_S = 11,
    MOSTLY_Q3_K_M = 12,
    MOSTLY_Q3_K_L = 13,
    MOSTLY_Q4_K_S = 14,
    MOSTLY_Q4_K_M = 15,
    MOSTLY_Q5_K_S = 16,
    MOSTLY_Q5_K_M = 17,
    MOSTLY_Q6_K = 18,
    MOSTLY_IQ4_NL = 25,
    MOSTLY_IQ4_XS = 30,
    MOSTLY_BF16 = 32,
    MOSTLY_MXFP4_MOE = 38,
};

// Names as llama-quantize prints them, lower-cased ("q4_k_m"). Parsing is
// case-insensitive and accepts llama-quantize's aliases (q3_k -> Q3_K_M, q4_k -> Q4_K_M,
// q5_k -> Q5_K_M) and the numeric id ("15").
std::optional<FileType> file_type_from_name(std::string_view name);
std::optional<FileType> file_type_from_id(uint32_t id);
std::string_view file_type_name(FileType t);
std::vector<std::string> file_type_names();  // canonical names, in id order
// Storage type of the mixture's "ordinary" tensors (Q4_K for Q4_K_M, MXFP4 for MXFP4_MOE).
GgmlType default_type(FileType t);
// True when the default type is a block-quantized type (not F32/F16/BF16).
bool is_quantized(GgmlType t);

// Tensor categories (§10.3), from substring tests on the name.
enum class Category {
    OUTPUT,
    TOKEN_EMBD,
    ATTN_QKV,
    ATTN_KV_B,
    ATTN_V,
    ATTN_K,
    ATTN_Q,
    ATTN_OUTPUT,
    FFN_UP,
    FFN_GATE,
    FFN_DOWN,
    OTHER,
};
Category tensor_category(std::string_view name);

// One tensor as llama-quantize sees it: name, shape in ggml order, dimension count
// (ggml_n_dims: index of the last dimension > 1, plus one) and its type in the input.
struct TensorDesc {
    std::string name;
    int64_t ne[4] = {1, 1, 1, 1};
    uint32_t n_dims = 1;
    GgmlType type = GgmlType::F32;
};
TensorDesc make_tensor_desc(std::string name, const std::vector<int64_t>& ne, GgmlType type);

// §10.2: may llama-quantize change this tensor's type at all?
bool allows_quantization(const TensorDesc& t, bool leave_output_tensor = false);

// Model hyper-parameters the rules read.
struct ModelParams {
    uint32_t n_layer = 0;       // block_count
    uint32_t expert_count = 0;  // 0 or 1: dense
    uint32_t n_gqa = 1;         // head_count / head_count_kv of layer 0
};

struct TypeOverride {
    std::string pattern;  // ECMAScript regex, searched anywhere in the tensor name
    GgmlType type;
};

struct PlanOptions {
    FileType ftype = FileType::MOSTLY_Q4_K_M;
    bool has_imatrix = false;
    bool pure = false;                             // --pure: default type for every candidate
    bool leave_output_tensor = false;              // --leave-output-tensor
    std::optional<GgmlType> output_tensor_type;    // --output-tensor-type
    std::optional<GgmlType> token_embedding_type;  // --token-embedding-type
    std::vector<TypeOverride> tensor_types;        // --tensor-type, first match wins
};

// Parses "REGEX=TYPE" as llama-quantize does: split at the first '=', pattern
// lower-cased, TYPE a ggml type name such as q8_0 (case-insensitive). Throws
// hf2q::Error on a bad type or regex.
TypeOverride parse_type_override(std::string_view spec);
// Parses a ggml storage type name for --output-tensor-type and friends; only the
// types hf2q can quantize to are accepted.
GgmlType parse_storage_type(std::string_view name, std::string_view what);

// llama-quantize's tensor visiting order (gguf-gemma4.md §1.7): tensors outside
// "blk.N." first, then by layer N; byte-wise name order inside each group. Returns
// indices into `names`.
std::vector<size_t> quantize_order(const std::vector<std::string>& names);

// Chooses output types one tensor at a time. Construct with every tensor of the model
// (for n_attention_wv and the tied-embedding test), then call type_for() once per
// tensor in quantize_order(): the counters advance as llama-quantize's do.
class TypePlanner {
  public:
    TypePlanner(const ModelParams& model, PlanOptions opts, const std::vector<TensorDesc>& all);

    GgmlType type_for(const TensorDesc& t);

    bool tied_embeddings() const { return tied_; }
    int n_attention_wv() const { return n_attention_wv_; }
    int n_fallback() const { return n_fallback_; }  // tensors whose row length forced a fallback

  private:
    GgmlType rules(GgmlType def, const TensorDesc& t, Category cat);
    GgmlType attn_v_rule(GgmlType def);
    GgmlType ffn_down_rule(GgmlType def, const TensorDesc& t);
    GgmlType attn_output_rule(GgmlType def) const;
    int layer_of(int counter, const TensorDesc& t) const;
    GgmlType shape_fallback(const TensorDesc& t, GgmlType type);

    ModelParams model_;
    PlanOptions opts_;
    struct Patterns;  // compiled --tensor-type regexes (kept out of this header)
    std::shared_ptr<const Patterns> patterns_;
    bool tied_ = true;
    int n_attention_wv_ = 0;
    int i_attention_wv_ = 0, i_ffn_down_ = 0, i_ffn_gate_ = 0, i_ffn_up_ = 0;
    int n_fallback_ = 0;
};

// Types for a whole tensor list given in quantize_order() (convenience for tests/tools).
std::vector<GgmlType> plan_types(const ModelParams& model, const PlanOptions& opts,
                                 const std::vector<TensorDesc>& ordered);

}  // namespace hf2q::ftype

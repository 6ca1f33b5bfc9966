// ggml tensor element types as stored in GGUF files (enum ggml_type), with their
// block geometry. Ids and sizes are the file format's; see docs/formats.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace hf2q {

enum class GgmlType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
    NVFP4 = 40,
    Q1_0 = 41,
};

struct GgmlTypeTraits {
    std::string_view name;  // ggml's name, e.g. "q4_K"
    uint32_t block_size;    // elements per block
    uint32_t type_size;     // bytes per block
};

// Traits of a type id read from a file; nullopt for unknown or removed ids.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id);
const GgmlTypeTraits& ggml_traits(GgmlType t);  // t must be a known type

inline std::string_view ggml_type_name(GgmlType t) { return ggml_traits(t).name; }
std::optional<GgmlType> ggml_type_from_name(std::string_view name);  // case-insensitive

// Bytes of one row of n elements; nullopt if n is not a multiple of the block size.
std::optional<uint64_t> ggml_row_size(GgmlType t, uint64_t n);

}  // namespace hf2q

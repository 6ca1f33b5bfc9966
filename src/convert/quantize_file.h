// GGUF -> GGUF quantization with llama-quantize's per-tensor mixture (docs/quantize.md).
//
// Reads an F32/F16/BF16 GGUF (quantized input only with allow_requantize), keeps the
// metadata in order and appends general.quantization_version and general.file_type
// (moved to the end, as llama-quantize does), writes tensors in llama-quantize's order
// with the types ftype::TypePlanner chooses, and streams the result through a temp file
// that replaces the output only on success.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "convert/ftype.h"

namespace hf2q::quantize {

struct QuantizeOptions {
    std::string input_path;
    std::string output_path;
    // ftype, pure, --tensor-type, --output-tensor-type, --token-embedding-type,
    // --leave-output-tensor. has_imatrix is set from imatrix_path.
    ftype::PlanOptions plan;
    std::string imatrix_path;  // llama.cpp GGUF imatrix (optional)
    bool allow_requantize = false;
    bool overwrite = false;  // replace an existing output (never the input)
    int threads = 0;         // <= 0: all cores
    bool progress = true;
};

struct QuantizeResult {
    size_t n_tensors = 0;
    size_t n_requantized = 0;  // tensors whose type changed
    uint64_t in_bytes = 0, out_bytes = 0;
    double seconds = 0.0;
};

QuantizeResult quantize_gguf(const QuantizeOptions& o);

// An importance matrix as llama-quantize uses it: per weight tensor name, ne[0]*n_mat
// values (n_mat = experts, else 1), each the mean squared activation of that column.
struct Imatrix {
    std::unordered_map<std::string, std::vector<float>> entries;
    std::vector<std::string> datasets;
    uint32_t chunk_count = 0;
};
// Reads llama.cpp's GGUF imatrix format: tensors "<name>.in_sum2" (F32, ne [n, n_mat])
// and "<name>.counts" (F32, ne [1, n_mat]); value = in_sum2 / count, and a matrix with
// count 0 gets all ones. Throws hf2q::Error on a malformed file or non-finite values.
Imatrix load_imatrix(const std::string& path);

}  // namespace hf2q::quantize

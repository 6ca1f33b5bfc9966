// HF -> GGUF conversion driver: reads a Hugging Face Gemma 4 directory (config.json +
// safetensors) and streams a llama.cpp-compatible GGUF file, one tensor at a time, with
// bounded memory. The output appears only when everything succeeded (temp file +
// rename by gguf::Writer).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "convert/ftype.h"
#include "core/ggml_type.h"

namespace hf2q::convert {

// Output file type (the llama_ftype of general.file_type). The converter writes the
// unquantized ones, ALL_F32, MOSTLY_F16 and MOSTLY_BF16; quantized types are made
// from its output by quantize_file (hf2q convert chains the two).
using FileType = ftype::FileType;

// The unquantized file types by name ("f32", "f16", "bf16"; case-insensitive, or
// the numeric id as ftype parses it); nullopt for other names and quantized types.
std::optional<FileType> file_type_from_name(std::string_view name);
using ftype::file_type_name;
std::vector<std::string> supported_file_type_names();  // in id order
// Storage type of the ftype's "big" tensors (an unquantized type).
GgmlType default_tensor_type(FileType t);

// Storage type of one output tensor (spec gguf-gemma4.md §3.2): F32 for tensors of
// <= 1 dimension, names ending in "_norm.weight", names not ending in ".weight" and the
// MoE router "ffn_gate_inp.weight"; the ftype's default type otherwise.
GgmlType tensor_out_type(std::string_view gguf_name, uint32_t n_dims, FileType ft);

struct ConvertOptions {
    std::string input_dir;    // HF model directory (config.json, *.safetensors)
    std::string output_path;  // GGUF file to write
    FileType out_type = FileType::MOSTLY_F16;
    int threads = 0;         // conversion threads; <= 0: all cores
    bool overwrite = false;  // replace an existing output file
    bool progress = true;    // progress bar on stderr
    std::string model_name;  // general.name; empty: the input directory's name
    // Informational messages (skipped tensors, tokenizer status); nullptr: silent.
    std::function<void(const std::string&)> log;
};

struct ConvertResult {
    size_t n_tensors = 0;
    uint64_t data_bytes = 0;  // tensor bytes written
    double seconds = 0.0;
};

// Runs the whole conversion. Throws hf2q::Error on bad input; the output path is then
// left untouched.
ConvertResult convert_hf_to_gguf(const ConvertOptions& opts);

}  // namespace hf2q::convert

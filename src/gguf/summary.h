// Whole-file statistics of a GGUF file for `hf2q info`: parameter count, bytes and
// bits per weight per tensor type, and the llama_ftype name of general.file_type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"

namespace hf2q::gguf {

// llama_ftype name (quant-formats.md §10.1), e.g. 15 -> "MOSTLY_Q4_K_M"; the GUESSED flag
// (1024) is appended as " (guessed)". Unknown or removed ids give "unknown".
std::string llama_ftype_name(uint32_t ftype);

struct TypeTotals {
    GgmlType type;
    uint64_t n_tensors = 0;
    uint64_t n_elements = 0;
    uint64_t n_bytes = 0;
};

struct Summary {
    uint64_t n_tensors = 0;
    uint64_t n_elements = 0;  // parameter count
    uint64_t n_bytes = 0;     // tensor bytes without padding
    std::vector<TypeTotals> by_type;  // ordered by ggml type id
    double bits_per_weight() const { return n_elements ? 8.0 * double(n_bytes) / double(n_elements) : 0.0; }
};

Summary summarize(const File& f);

// 25'800'000'000 -> "25.8 B"; 1'500'000 -> "1.5 M"; 999 -> "999".
std::string human_count(uint64_t n);
// 1536 -> "1.50 KiB"; 100 -> "100 B".
std::string human_bytes(uint64_t n);

}  // namespace hf2q::gguf

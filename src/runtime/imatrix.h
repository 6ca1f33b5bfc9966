// Importance-matrix collection (llama-imatrix's statistics): for every matmul
// weight, per input column, the sum of squared activations and the number of rows
// seen; stacked expert tensors keep one vector per expert. Collected through the
// engine's typed MatmulObserver and saved in llama.cpp's GGUF imatrix format:
//   general.type = "imatrix", imatrix.datasets (string[]), imatrix.chunk_count,
//   imatrix.chunk_size (u32); per tensor "<name>.in_sum2" F32 [n_cols, n_experts] and
//   "<name>.counts" F32 [1, n_experts].
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "hf2q/engine.h"

namespace hf2q::runtime {

class ImatrixCollector {
public:
    // n_experts_of(name) gives the expert count of a stacked tensor (1 otherwise).
    explicit ImatrixCollector(int64_t n_expert = 0) : n_expert_(n_expert) {}

    // The observer to put into ContextOptions::matmul_observer. The collector must
    // outlive every context using it.
    MatmulObserver observer();

    void add(const std::string& tensor, int32_t expert, const float* x, int64_t rows, int64_t cols);

    struct Entry {
        int64_t n_cols = 0;
        int64_t n_mats = 1;
        std::vector<double> sum2;     // [n_mats][n_cols]
        std::vector<int64_t> counts;  // [n_mats]
    };
    const std::map<std::string, Entry>& entries() const { return entries_; }

    // Writes the llama.cpp imatrix GGUF (temp file + rename).
    void save(const std::string& path, const std::vector<std::string>& datasets, uint32_t chunk_count,
              uint32_t chunk_size) const;

private:
    int64_t n_expert_;
    std::map<std::string, Entry> entries_;
    std::mutex mu_;
};

}  // namespace hf2q::runtime

// Shared op types: a read-only view of a weight matrix in its stored block format.
#pragma once

#include <cstdint>

#include "core/ggml_type.h"

namespace hf2q::ops {

// A 2-D weight W with n_out rows of n_in elements, stored row-major in ggml type
// `type` (GGUF ne = [n_in, n_out]). A linear layer computes y = x · Wᵀ. A slice of a
// 3-D expert tensor is a WeightView whose data points at that expert's first row.
struct WeightView {
    GgmlType type = GgmlType::F32;
    int64_t n_in = 0;
    int64_t n_out = 0;
    uint64_t row_bytes = 0;  // bytes of one row of n_in elements
    const void* data = nullptr;
    // Optional: the same matrix again, in a layout of the backend's own that its
    // one-token matmul reads faster (Backend::decode_layout; the CUDA backend's Q6_K
    // planes). A backend may read it instead of `data` where it knows the layout; the
    // result is the same bit for bit. Every other op reads `data`.
    const void* decode_layout = nullptr;
    // Optional: the same matrix in BF16, rows of n_in values (Backend::batch_layout),
    // which a device backend's matmuls of many tokens read instead of expanding `data`
    // on every call. The result is the same bit for bit.
    const void* batch_layout = nullptr;
    // Optional, on a 3-D expert tensor's first view (expert 0): every expert again in
    // a layout of the backend's own that its batched-decode expert product reads
    // faster (Backend::expert_layout; the CUDA backend's Q4_K with its scales decoded,
    // rounded to f16: results move by rounding, about 2^-12 of a value).
    const void* expert_layout = nullptr;
    // Optional: the same matrix in the backend's tile form, which its dense products
    // of batched decode (17-64 tokens) read instead of batch_layout (Backend::
    // tile_layout; the CUDA backend's Q4_K with BF16 scales: results move by rounding,
    // about 2^-9 of a weight).
    const void* tile_layout = nullptr;

    bool empty() const { return data == nullptr; }
};

}  // namespace hf2q::ops

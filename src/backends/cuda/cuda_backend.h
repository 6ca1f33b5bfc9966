// The CUDA backend: ops::Backend on device memory, one stream per backend.
#pragma once

#include <memory>

#include "ops/backend.h"

namespace hf2q::cuda {

struct CudaOptions {
    int device = 0;
};

// Number of usable CUDA devices (0 when there is no driver or GPU).
int device_count();

// Throws hf2q::Error if no device is usable.
std::unique_ptr<ops::Backend> make_backend(const CudaOptions& opts);

}  // namespace hf2q::cuda

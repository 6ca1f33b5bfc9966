// Creates the backend a context runs on.
#pragma once

#include <memory>

#include "hf2q/engine.h"
#include "ops/backend.h"

namespace hf2q::runtime {

// Throws hf2q::Error when the kind was not built in or no device is usable.
// f32_matmul: device backends compute batched matmuls in f32 (reference precision)
// instead of BF16 on the tensor cores; the CPU backend always computes in f32.
// concurrent_branches: ContextOptions::concurrent_branches (device backends).
std::unique_ptr<ops::Backend> make_backend(BackendKind kind, int n_threads, bool f32_matmul = false,
                                           bool concurrent_branches = true);

// A backend of this kind used only to hold allocations (the model's device
// weights): no matmul or attention workspaces.
std::unique_ptr<ops::Backend> make_weight_store(BackendKind kind);

// True when this build has the CUDA backend and a CUDA device is usable.
bool cuda_available();

}  // namespace hf2q::runtime

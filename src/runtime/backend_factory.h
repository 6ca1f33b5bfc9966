// Creates the backend a context runs on.
#pragma once

#include <memory>

#include "hf2q/engine.h"
#include "ops/backend.h"

namespace hf2q::runtime {

// Throws hf2q::Error when the kind was not built in or no device is usable.
std::unique_ptr<ops::Backend> make_backend(BackendKind kind, int n_threads);

// True when this build has the CUDA backend and a CUDA device is usable.
bool cuda_available();

}  // namespace hf2q::runtime

// The CPU reference backend: clear code for every op, f32 accumulation, threaded over
// rows and heads.
#pragma once

#include <memory>

#include "ops/backend.h"

namespace hf2q::cpu {

std::unique_ptr<ops::Backend> make_backend(int n_threads);

}  // namespace hf2q::cpu

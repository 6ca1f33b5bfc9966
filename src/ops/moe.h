// Mixture-of-experts routing: per token softmax over expert logits (f32), top-k
// largest (descending, lower index first on ties), renormalised to sum 1, then
// multiplied by a per-expert scale when given.
#pragma once

#include <cstdint>

namespace hf2q::ops {

struct MoeRouteParams {
    const float* logits = nullptr;        // [n_tokens][n_experts]
    const float* expert_scale = nullptr;  // [n_experts] or nullptr
    int32_t* ids = nullptr;               // [n_tokens][k] selected experts
    float* weights = nullptr;             // [n_tokens][k] routing weights
    int64_t n_tokens = 0;
    int64_t n_experts = 0;
    int64_t k = 0;
};

}  // namespace hf2q::ops

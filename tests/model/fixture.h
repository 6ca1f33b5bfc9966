// Transformers parity fixtures (tests/fixtures/<variant>, see docs/fixtures.md):
// converted once per test binary to GGUF and loaded.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/ggml_type.h"
#include "hf2q/engine.h"

namespace hf2q::test {

struct Prompt {
    std::vector<int32_t> ids;
    std::vector<float> logits;     // [ids.size()][n_vocab]
    std::vector<int32_t> greedy;   // reference greedy continuation
    std::vector<float> margins;    // top-1 minus top-2 logit at each greedy step
};

struct Fixture {
    std::string variant;
    int64_t n_vocab = 0;
    std::vector<Prompt> prompts;
    std::unique_ptr<Model> model;
};

// Converts tests/fixtures/<variant> to GGUF of the given file type ("f32", "f16",
// "bf16") under the build folder (once) and loads it.
const Fixture* fixture(const std::string& variant, const std::string& file_type = "f32");

std::vector<std::string> variants();

// ||a − b|| / ||b||
double rel_l2(const float* a, const float* b, size_t n);
double max_abs_diff(const float* a, const float* b, size_t n);

// Runs one sequence's tokens (all positions' logits wanted) in a fresh context.
std::vector<float> run_alone(const Model& m, const std::vector<int32_t>& ids, int32_t n_ubatch = 512,
                             BackendKind backend = BackendKind::cpu,
                             DevicePrecision precision = DevicePrecision::tensor_cores,
                             KvCacheType kv = KvCacheType::f32);

// 64 positions per sequence, blocks of 4, 2 threads, an f32 KV cache.
ContextOptions small_context(int32_t n_seq = 4);

// Every prompt i of a fixture as sequence first_seq + i, the tokens interleaved
// round-robin (position 0 of each prompt, then position 1, ...), every token an
// output; order[k] = (prompt, position) of output k.
struct InterleavedBatch {
    std::vector<BatchToken> batch;
    std::vector<std::pair<size_t, size_t>> order;
};
InterleavedBatch interleave_prompts(const Fixture& fx, int32_t first_seq = 0);

}  // namespace hf2q::test

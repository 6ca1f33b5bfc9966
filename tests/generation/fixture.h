// The generation tests' fixture (test_generation): the tiny MoE parity model
// (tests/fixtures/moe, random weights, 512-token vocabulary) converted to GGUF with
// its transformers greedy references, and a hand-built 512-token vocabulary for the
// text paths.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hf2q/engine.h"
#include "runtime/generation.h"
#include "tokenizer/tokenizer.h"

namespace hf2q::runtime::test {

struct Reference {
    std::vector<int32_t> ids;
    std::vector<int32_t> greedy;
    std::vector<float> margins;
};

struct Fixture {
    std::unique_ptr<Model> model;
    std::vector<Reference> prompts;
};

// Converted once per test binary.
const Fixture& fixture();

// One sequence of n_ctx positions in blocks of 4 (the fixture's sliding window is 8,
// so truncation can be refused), 2 threads.
std::unique_ptr<Context> make_context(int32_t n_ctx = 64);

// 512 tokens as the fixture: control tokens 0..5, "a", "b", "ab", then " t<id>" words;
// `custom` replaces the text and type of chosen ids.
struct CustomToken {
    int32_t id;
    std::string text;
    tokenizer::TokenType type;
};
tokenizer::Tokenizer test_tokenizer(int32_t eos_id = 1, const std::vector<CustomToken>& custom = {});

// Greedy generation of n tokens.
GenerationParams greedy(int32_t n);

// Number of leading greedy steps whose reference margin makes the argmax unambiguous.
size_t confident_steps(const Reference& r);

}  // namespace hf2q::runtime::test

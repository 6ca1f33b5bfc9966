#include "generation/fixture.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "convert/convert.h"

namespace hf2q::runtime::test {

namespace fs = std::filesystem;
using tokenizer::TokenType;

const Fixture& fixture() {
    static const Fixture fx = [] {
        Fixture f;
        const fs::path dir = fs::path(HF2Q_SOURCE_DIR) / "tests" / "fixtures" / "moe";
        std::ifstream js(dir / "expected.json");
        const nlohmann::json j = nlohmann::json::parse(js);
        for (const auto& p : j["prompts"])
            f.prompts.push_back({p["ids"].get<std::vector<int32_t>>(),
                                 p["greedy"].get<std::vector<int32_t>>(),
                                 p["margins"].get<std::vector<float>>()});
        const fs::path out = fs::path(HF2Q_BINARY_DIR) / "test-models";
        fs::create_directories(out);
        convert::ConvertOptions o;
        o.input_dir = dir.string();
        o.output_path = (out / "generation-moe-f32.gguf").string();
        o.out_type = *convert::file_type_from_name("f32");
        o.overwrite = true;
        o.progress = false;
        o.threads = 2;
        convert::convert_hf_to_gguf(o);
        f.model = Model::load(o.output_path);
        return f;
    }();
    return fx;
}

std::unique_ptr<Context> make_context(int32_t n_ctx) {
    ContextOptions o;
    o.n_ctx = n_ctx;
    o.kv_block_size = 4;  // the fixture's sliding window is 8: truncation can be refused
    o.n_threads = 2;
    return Context::create(*fixture().model, o);
}

tokenizer::Tokenizer test_tokenizer(int32_t eos_id, const std::vector<CustomToken>& custom) {
    tokenizer::VocabData v;
    v.model = "gemma4";
    auto add = [&](const std::string& text, TokenType type) {
        v.tokens.push_back(text);
        v.token_types.push_back(static_cast<int32_t>(type));
    };
    for (const char* t : {"<pad>", "<eos>", "<bos>"}) add(t, TokenType::CONTROL);
    add("<unk>", TokenType::UNKNOWN);
    for (const char* t : {"<|turn>", "<turn|>"}) add(t, TokenType::CONTROL);
    for (const char* t : {"a", "b", "ab"}) add(t, TokenType::NORMAL);
    while (v.tokens.size() < 512)
        add("\xE2\x96\x81t" + std::to_string(v.tokens.size()), TokenType::NORMAL);
    for (const CustomToken& c : custom) {
        v.tokens[static_cast<size_t>(c.id)] = c.text;
        v.token_types[static_cast<size_t>(c.id)] = static_cast<int32_t>(c.type);
    }
    v.merges = {"a b"};
    v.pad_id = 0;
    v.eos_id = eos_id;
    v.bos_id = 2;
    v.unk_id = 3;
    v.add_bos = true;
    return tokenizer::Tokenizer(std::move(v));
}

GenerationParams greedy(int32_t n) {
    GenerationParams p;
    p.n_predict = n;
    p.sampler.temperature = 0.0f;
    return p;
}

size_t confident_steps(const Reference& r) {
    size_t n = 0;
    while (n < r.margins.size() && r.margins[n] > 1e-2f) ++n;
    return n;
}

}  // namespace hf2q::runtime::test

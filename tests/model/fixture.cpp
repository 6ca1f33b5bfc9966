#include "model/fixture.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "convert/convert.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace hf2q::test {
namespace {

std::vector<float> read_f32(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) fail("cannot read ", p.string());
    in.seekg(0, std::ios::end);
    size_t n = static_cast<size_t>(in.tellg()) / 4;
    in.seekg(0);
    std::vector<float> v(n);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 4));
    return v;
}

std::unique_ptr<Fixture> load_fixture(const std::string& variant, const std::string& file_type) {
    auto fx = std::make_unique<Fixture>();
    fx->variant = variant;
    fs::path dir = fs::path(HF2Q_SOURCE_DIR) / "tests" / "fixtures" / variant;
    std::ifstream js(dir / "expected.json");
    nlohmann::json j = nlohmann::json::parse(js);
    fx->n_vocab = j["config"]["vocab_size"].get<int64_t>();
    for (const auto& p : j["prompts"]) {
        Prompt pr;
        pr.ids = p["ids"].get<std::vector<int32_t>>();
        pr.greedy = p["greedy"].get<std::vector<int32_t>>();
        pr.margins = p["margins"].get<std::vector<float>>();
        pr.logits = read_f32(dir / p["logits"].get<std::string>());
        if (pr.logits.size() != pr.ids.size() * static_cast<size_t>(fx->n_vocab))
            fail("fixture ", variant, ": logits file has the wrong size");
        fx->prompts.push_back(std::move(pr));
    }
    fs::path out = fs::path(HF2Q_BINARY_DIR) / "test-models";
    fs::create_directories(out);
    fs::path gguf = out / (variant + "-" + file_type + ".gguf");
    convert::ConvertOptions o;
    o.input_dir = dir.string();
    o.output_path = gguf.string();
    o.out_type = *convert::file_type_from_name(file_type);
    o.overwrite = true;
    o.progress = false;
    o.threads = 2;
    convert::convert_hf_to_gguf(o);
    fx->model = Model::load(gguf.string());
    return fx;
}

}  // namespace

std::vector<std::string> variants() { return {"dense", "moe", "ple"}; }

const Fixture* fixture(const std::string& variant, const std::string& file_type) {
    static std::map<std::string, std::unique_ptr<Fixture>> cache;
    auto& slot = cache[variant + "/" + file_type];
    if (!slot) slot = load_fixture(variant, file_type);
    return slot.get();
}

double rel_l2(const float* a, const float* b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) {
        double d = static_cast<double>(a[i]) - b[i];
        num += d * d;
        den += static_cast<double>(b[i]) * b[i];
    }
    return std::sqrt(num / (den > 0 ? den : 1));
}

double max_abs_diff(const float* a, const float* b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
    return m;
}

ContextOptions small_context(int32_t n_seq) {
    ContextOptions o;
    o.n_seq_max = n_seq;
    o.n_ctx = 64;
    o.n_ubatch = 512;
    o.kv_block_size = 4;  // small blocks: every prompt spans several
    o.n_threads = 2;
    o.kv_type = KvCacheType::f32;  // transformers' f32 math; the f16 cache has its own tests
    return o;
}

InterleavedBatch interleave_prompts(const Fixture& fx, int32_t first_seq) {
    InterleavedBatch b;
    size_t longest = 0;
    for (const Prompt& p : fx.prompts) longest = std::max(longest, p.ids.size());
    for (size_t t = 0; t < longest; ++t)
        for (size_t i = 0; i < fx.prompts.size(); ++i)
            if (t < fx.prompts[i].ids.size()) {
                b.batch.push_back({fx.prompts[i].ids[t], first_seq + static_cast<int32_t>(i), static_cast<int32_t>(t), true});
                b.order.push_back({i, t});
            }
    return b;
}

std::vector<float> run_alone(const Model& m, const std::vector<int32_t>& ids, int32_t n_ubatch,
                             BackendKind backend, DevicePrecision precision, KvCacheType kv) {
    ContextOptions o = small_context(1);
    o.n_ubatch = n_ubatch;
    o.kv_type = kv;
    o.backend = backend;
    o.device_precision = precision;
    auto ctx = Context::create(m, o);
    std::vector<BatchToken> batch;
    for (size_t i = 0; i < ids.size(); ++i) batch.push_back({ids[i], 0, static_cast<int32_t>(i), true});
    ctx->decode(batch);
    const int64_t V = ctx->n_vocab();
    std::vector<float> out(ids.size() * static_cast<size_t>(V));
    for (size_t i = 0; i < ids.size(); ++i)
        std::copy(ctx->logits(static_cast<int32_t>(i)), ctx->logits(static_cast<int32_t>(i)) + V,
                  out.begin() + static_cast<std::ptrdiff_t>(i * static_cast<size_t>(V)));
    return out;
}

}  // namespace hf2q::test

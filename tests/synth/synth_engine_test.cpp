// A --fast synthetic model through the engine: it loads, decodes a batch and gives
// finite, non-degenerate logits, like the normal synthetic model.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "convert/synth.h"
#include "synth/synth_test_util.h"
#include "hf2q/engine.h"

namespace hf2q::synth {
namespace {

namespace fs = std::filesystem;
using synth_test::read_all;
using synth_test::TempDir;

// Logits of the last prompt token and of 4 greedy steps after it.
std::vector<std::vector<float>> run(const std::string& path) {
    auto model = Model::load(path);
    ContextOptions co;
    co.n_ctx = 64;
    co.n_ubatch = 8;
    co.n_threads = 2;
    auto ctx = Context::create(*model, co);
    std::vector<BatchToken> prompt;
    for (int32_t i = 0; i < 12; ++i) prompt.push_back({(i * 37 + 5) % 512, 0, i, i == 11});
    ctx->decode(prompt);
    std::vector<std::vector<float>> out;
    for (int32_t step = 0; step < 5; ++step) {
        const float* l = ctx->logits(0);
        out.emplace_back(l, l + ctx->n_vocab());
        int32_t best = 0;
        for (int32_t v = 1; v < ctx->n_vocab(); ++v)
            if (l[v] > l[best]) best = v;
        if (step < 4) ctx->decode({{best, 0, 12 + step, true}});
    }
    return out;
}

TEST(SynthFastEngine, LoadsAndDecodes) {
    TempDir d("synth_engine");
    for (bool fast : {false, true}) {
        SynthOptions o;
        o.preset = "tiny";
        o.ftype = ftype::FileType::MOSTLY_Q4_K_M;
        o.seed = 11;
        o.output_path = (d.path() / (fast ? "fast.gguf" : "normal.gguf")).string();
        o.threads = 2;
        o.progress = false;
        o.fast = fast;
        synth_model(o);
    }
    const auto normal = run((d.path() / "normal.gguf").string());
    const auto fast = run((d.path() / "fast.gguf").string());
    ASSERT_EQ(fast.size(), normal.size());
    for (size_t s = 0; s < fast.size(); ++s) {
        SCOPED_TRACE("step " + std::to_string(s));
        ASSERT_EQ(fast[s].size(), 512u);
        // Same scale as the normal model's logits: the pooled rows have the same
        // distribution, only fewer distinct values.
        double sum2_fast = 0, sum2_normal = 0, lo = fast[s][0], hi = fast[s][0];
        for (size_t v = 0; v < fast[s].size(); ++v) {
            ASSERT_TRUE(std::isfinite(fast[s][v])) << v;
            sum2_fast += double(fast[s][v]) * fast[s][v];
            sum2_normal += double(normal[s][v]) * normal[s][v];
            lo = std::min<double>(lo, fast[s][v]);
            hi = std::max<double>(hi, fast[s][v]);
        }
        EXPECT_GT(hi - lo, 1e-3);
        const double rms_fast = std::sqrt(sum2_fast / 512),
                     rms_normal = std::sqrt(sum2_normal / 512);
        EXPECT_GT(rms_fast, rms_normal / 4);
        EXPECT_LT(rms_fast, rms_normal * 4);
    }
}

}  // namespace
}  // namespace hf2q::synth

// hf2q bench: prompt-processing and generation throughput in the manner of
// llama-bench, plus batched decode of many concurrent sequences.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.h"
#include "command.h"
#include "core/error.h"
#include "core/progress.h"
#include "gguf/summary.h"
#include "hf2q/engine.h"

namespace hf2q::cli {
namespace {

// Measured ceilings of the H200 this project targets (docs/performance.md).
constexpr double kPeakBf16Tflops = 790.0;
constexpr double kPeakCopyGBs = 4300.0;

struct BenchOptions {
    std::string model, prompts = "512", gens = "128", batches = "", backend = "cpu";
    int32_t reps = 3, threads = 0, ubatch = 512, depth = 0;
    bool json = false;
};

struct Result {
    std::string test;
    int64_t tokens = 0;      // tokens per timed repetition
    int32_t batch = 1;       // tokens per decode step (generation tests)
    std::vector<double> secs;
    double mean_tps() const;
    double sd_tps() const;
};

double Result::mean_tps() const {
    double s = 0;
    for (double t : secs) s += static_cast<double>(tokens) / t;
    return s / static_cast<double>(secs.size());
}

double Result::sd_tps() const {
    if (secs.size() < 2) return 0.0;
    double m = mean_tps(), v = 0;
    for (double t : secs) v += (static_cast<double>(tokens) / t - m) * (static_cast<double>(tokens) / t - m);
    return std::sqrt(v / static_cast<double>(secs.size() - 1));
}

double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<BatchToken> random_tokens(std::mt19937& rng, int64_t n_vocab, int32_t seq, int32_t pos0, int32_t n,
                                      bool last_logits) {
    std::uniform_int_distribution<int32_t> d(3, static_cast<int32_t>(n_vocab - 1));
    std::vector<BatchToken> b;
    for (int32_t i = 0; i < n; ++i) b.push_back({d(rng), seq, pos0 + i, last_logits && i + 1 == n});
    return b;
}

ContextOptions context_for(const BenchOptions& o, int32_t n_seq, int32_t n_ctx) {
    ContextOptions c;
    c.backend = o.backend == "cuda" ? BackendKind::cuda : BackendKind::cpu;
    c.n_seq_max = n_seq;
    c.n_ctx = n_ctx;
    c.n_ubatch = o.ubatch;
    c.n_threads = o.threads;
    return c;
}

// pp<n>: one sequence, n prompt tokens in one decode call (logits of the last).
Result bench_prompt(const Model& m, const BenchOptions& o, int32_t n, std::mt19937& rng) {
    auto ctx = Context::create(m, context_for(o, 1, n + o.depth));
    Result r{"pp" + std::to_string(n), n, 1, {}};
    for (int32_t rep = -1; rep < o.reps; ++rep) {  // rep -1 warms up
        ctx->seq_remove(0);
        if (o.depth) ctx->decode(random_tokens(rng, m.info().n_vocab, 0, 0, o.depth, false));
        auto batch = random_tokens(rng, m.info().n_vocab, 0, o.depth, n, true);
        double t0 = now();
        ctx->decode(batch);
        if (rep >= 0) r.secs.push_back(now() - t0);
    }
    return r;
}

// tg<n> at b concurrent sequences: n decode steps of b tokens (one per sequence).
Result bench_generate(const Model& m, const BenchOptions& o, int32_t n, int32_t b, std::mt19937& rng) {
    auto ctx = Context::create(m, context_for(o, b, o.depth + n + 1));
    Result r{(b == 1 ? "tg" : "b" + std::to_string(b) + "-tg") + std::to_string(n), static_cast<int64_t>(n) * b, b, {}};
    for (int32_t rep = -1; rep < o.reps; ++rep) {
        for (int32_t s = 0; s < b; ++s) {
            ctx->seq_remove(s);
            ctx->decode(random_tokens(rng, m.info().n_vocab, s, 0, o.depth + 1, false));
        }
        double t0 = now();
        for (int32_t i = 0; i < n; ++i) {
            std::vector<BatchToken> step;
            for (int32_t s = 0; s < b; ++s) {
                auto t = random_tokens(rng, m.info().n_vocab, s, o.depth + 1 + i, 1, true);
                step.push_back(t[0]);
            }
            ctx->decode(step);
        }
        if (rep >= 0) r.secs.push_back(now() - t0);
    }
    return r;
}

int run_bench(const std::vector<std::string>& args) {
    BenchOptions o;
    ArgParser p("bench", "-m MODEL [options]",
                "Measure prompt processing (pp) and generation (tg) throughput, mean ± sd over\n"
                "repetitions after one warm-up, like llama-bench. Prompt tokens are random ids.");
    p.option("-m,--model", "FILE", "GGUF model", &o.model, true);
    p.option("-p,--n-prompt", "LIST", "prompt lengths, comma-separated (empty: none)", &o.prompts);
    p.option("-n,--n-gen", "LIST", "generated tokens per test, comma-separated (empty: none)", &o.gens);
    p.option("-b,--batch", "LIST", "concurrent sequences for batched decode, e.g. 1,8,64", &o.batches);
    p.option("-d,--depth", "N", "tokens already in each sequence's context before a test", &o.depth);
    p.option("-r,--repetitions", "N", "timed repetitions per test", &o.reps);
    p.option("--backend", "NAME", "cpu or cuda", &o.backend);
    p.option("-t,--threads", "N", "CPU threads (0: all)", &o.threads);
    p.option("-ub,--ubatch-size", "N", "tokens per forward micro-batch", &o.ubatch);
    p.flag("--json", "print results as JSON", &o.json);
    if (!p.parse(args)) return 0;
    if (o.backend != "cpu" && o.backend != "cuda") fail("--backend must be cpu or cuda, got '", o.backend, "'");
    if (o.reps < 1) fail("--repetitions must be at least 1");

    auto model = Model::load(o.model);
    const ModelInfo& info = model->info();
    std::mt19937 rng(42);
    std::vector<Result> results;
    for (int64_t n : parse_int_list(o.prompts, "--n-prompt")) {
        if (n < 1 || n > 1 << 20) fail("--n-prompt: ", n, " out of range");
        results.push_back(bench_prompt(*model, o, static_cast<int32_t>(n), rng));
    }
    std::vector<int64_t> batches = o.batches.empty() ? std::vector<int64_t>{1} : parse_int_list(o.batches, "--batch");
    for (int64_t n : parse_int_list(o.gens, "--n-gen"))
        for (int64_t b : batches) {
            if (n < 1 || b < 1 || b > 4096) fail("--n-gen/--batch out of range");
            results.push_back(bench_generate(*model, o, static_cast<int32_t>(n), static_cast<int32_t>(b), rng));
        }

    nlohmann::json out = nlohmann::json::array();
    if (!o.json)
        std::printf("| model | size | params | backend | test | t/s | TFLOP/s (%% of %.0f) | GB/s (%% of %.0f) |\n"
                    "| --- | --- | --- | --- | --- | --- | --- | --- |\n",
                    kPeakBf16Tflops, kPeakCopyGBs);
    for (const auto& r : results) {
        const bool prompt = r.test.rfind("pp", 0) == 0;
        const double tps = r.mean_tps();
        // Prompt: 2 FLOP per active weight per token (LM head once). Decode: the
        // active weight bytes once per step (a lower bound for batched MoE decode).
        const double tflops = 2.0 * static_cast<double>(info.n_active_params) * tps / 1e12;
        const double steps_per_s = tps / r.batch;
        const double gbs =
            prompt ? 0.0 : static_cast<double>(info.n_active_bytes + info.n_head_bytes) * steps_per_s / 1e9;
        if (o.json) {
            out.push_back({{"test", r.test}, {"tokens", r.tokens}, {"tps_mean", tps}, {"tps_sd", r.sd_tps()},
                           {"tflops", tflops}, {"gbs", gbs}, {"backend", o.backend}, {"model", info.name},
                           {"params", info.n_params}, {"bytes", info.n_bytes}});
        } else {
            std::printf("| %s | %s | %s | %s | %s | %.2f ± %.2f | %.2f (%.1f%%) | %s |\n", info.name.c_str(),
                        format_bytes(info.n_bytes).c_str(),
                        gguf::human_count(static_cast<uint64_t>(info.n_params)).c_str(),
                        o.backend.c_str(), r.test.c_str(), tps, r.sd_tps(), tflops, 100.0 * tflops / kPeakBf16Tflops,
                        prompt ? "-" : (std::to_string(static_cast<int>(gbs)) + " (" +
                                        std::to_string(static_cast<int>(100.0 * gbs / kPeakCopyGBs)) + "%)").c_str());
        }
    }
    if (o.json) std::printf("%s\n", out.dump(2).c_str());
    return 0;
}

}  // namespace

HF2Q_COMMAND(bench, "measure prompt and generation throughput", run_bench);

}  // namespace hf2q::cli

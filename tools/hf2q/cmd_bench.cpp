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
#include "device_flags.h"
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
    std::string model, prompts = "512", gens = "128", batches = "", depths = "0", backend = "cpu";
    int32_t reps = 3, threads = 0, ubatch = 512, n_ctx = 0, top_k = 0;
    bool json = false, profile = false, no_pipeline = false;
    DeviceFlags device;
};

// One test: pp<n> (one sequence, n prompt tokens in one decode call) or
// [b<batch>-]tg<n> (n decode steps of one token for each of `batch` sequences), each
// sequence first holding `depth` tokens of context, as llama-bench's -d.
struct Test {
    bool prompt = true;
    int32_t n = 0;
    int32_t batch = 1;
    int32_t depth = 0;

    std::string name() const {
        std::string s = prompt ? "pp" + std::to_string(n)
                               : (batch == 1 ? "tg" : "b" + std::to_string(batch) + "-tg") + std::to_string(n);
        return depth > 0 ? s + " @ d" + std::to_string(depth) : s;
    }
    int64_t tokens() const { return static_cast<int64_t>(n) * batch; }  // per timed repetition
    int32_t positions() const { return depth + n; }                     // per sequence
};

struct Result {
    Test spec;
    std::string test;
    int64_t tokens = 0;      // tokens per timed repetition
    int32_t batch = 1;       // tokens per decode step (generation tests)
    std::vector<double> secs;
    double mean_tps() const;
    double sd_tps() const;
    // --profile: the profiled repetition's wall time and its op times.
    double profile_secs = 0.0;
    OpProfile profile;
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

// The mean bytes of a generation test's steps (decode_step_bytes): step i of a test at
// depth d holds d + i tokens of context.
double step_bytes(const Model& m, const Test& t, KvCacheType kv) {
    double sum = 0.0;
    for (int32_t i = 0; i < t.n; ++i) sum += decode_step_bytes(m, t.batch, int64_t{t.depth} + i, kv);
    return t.n > 0 ? sum / t.n : 0.0;
}

ContextOptions context_for(const BenchOptions& o, int32_t n_seq, int32_t n_ctx, bool profile) {
    ContextOptions c;
    c.backend = parse_backend(o.backend);
    c.n_seq_max = n_seq;
    c.n_ctx = n_ctx;
    c.n_ubatch = o.ubatch;
    c.n_threads = o.threads;
    c.profile_ops = profile;
    apply_device_flags(o.device, c);
    return c;
}

// One repetition of a test: the test's sequences are filled with `depth` random
// tokens each (untimed, one decode call for all sequences), then the test itself
// is timed. With reset_profile the op profile covers the timed part only. A prompt
// test returns the logits of its last token; a generation step returns only each
// sequence's argmax (DecodeOutputs::argmax), as a server sampling greedily on the
// device would, so no step copies n_vocab logits per sequence to the host, and the
// host reads every step's ids. Steps get random ids, as llama-bench's. Pipelined (how
// hf2q generate's greedy loop runs), step i + 1 is queued before the host reads step
// i's ids; otherwise the host reads a step's ids before queuing the next. (The
// generator feeds step i's ids to step i + 1 on the device, kPreviousArgmax, at the
// same speed; a bench cannot: a greedy chain on hf2q synth's random weights repeats
// one token, and every sequence of a batch would route to the same experts.)
double run_once(Context& ctx, const Test& t, int64_t n_vocab, std::mt19937& rng, bool reset_profile, bool pipeline,
                int32_t top_k) {
    // All slots are cleared: a larger-batch test before this one in the group must
    // not leave sequences holding cache blocks.
    for (int32_t s = 0; s < ctx.options().n_seq_max; ++s) ctx.seq_remove(s);
    std::vector<BatchToken> fill;
    for (int32_t s = 0; s < t.batch; ++s) {
        auto d = random_tokens(rng, n_vocab, s, 0, t.depth, false);
        fill.insert(fill.end(), d.begin(), d.end());
    }
    if (!fill.empty()) ctx.decode(fill);
    if (reset_profile) ctx.reset_op_profile();
    const double t0 = now();
    if (t.prompt) {
        ctx.decode(random_tokens(rng, n_vocab, 0, t.depth, t.n, true));
        return now() - t0;
    }
    std::uniform_int_distribution<int32_t> d(3, static_cast<int32_t>(n_vocab - 1));
    std::vector<BatchToken> step(static_cast<size_t>(t.batch));
    int64_t check = 0;  // keeps the ids' reads
    auto read_ids = [&](int32_t decodes_back) {
        for (int32_t s = 0; s < t.batch; ++s) check += ctx.argmax(s, decodes_back);
    };
    for (int32_t i = 0; i < t.n; ++i) {
        for (int32_t s = 0; s < t.batch; ++s) step[static_cast<size_t>(s)] = {d(rng), s, t.depth + i, true};
        if (top_k > 0) {  // a top-k sampler's steps: each sequence's candidates, read before the next step
            ctx.decode(step, DecodeOutputs::top_k, top_k);
            for (int32_t s = 0; s < t.batch; ++s) check += ctx.top_k(s).front().id;
            continue;
        }
        ctx.decode(step, DecodeOutputs::argmax);
        if (!pipeline) read_ids(0);
        else if (i > 0) read_ids(1);
    }
    if (pipeline && top_k == 0) read_ids(0);
    const double secs = now() - t0;
    if (check < 0) fail("bench: a negative token id");  // never: argmax() throws first
    return secs;
}

// Runs tests that share one context (all prompt tests, or all generation tests):
// n_seq_max is their largest batch and n_ctx their longest depth + tokens, or -c.
// Creating one context per group rather than per test keeps a device backend from
// uploading the weights again for every test. With `profile` the context times
// its ops and each test gets one warm-up and one profiled repetition.
void run_group(const Model& m, const BenchOptions& o, std::vector<Result*> group, bool profile,
               std::mt19937& rng) {
    if (group.empty()) return;
    int32_t n_seq = 1;
    const Result* longest = group.front();
    for (const Result* r : group) {
        n_seq = std::max(n_seq, r->spec.batch);
        if (r->spec.positions() > longest->spec.positions()) longest = r;
    }
    const int32_t need = longest->spec.positions();
    if (o.n_ctx > 0 && o.n_ctx < need)
        fail("--ctx-size ", o.n_ctx, " is too small: test ", longest->test, " needs ", need,
             " positions per sequence (depth + tokens; 0 derives the size from the tests)");
    const int32_t n_ctx = o.n_ctx > 0 ? o.n_ctx : need;
    auto ctx = Context::create(m, context_for(o, n_seq, n_ctx, profile));
    std::fprintf(stderr, "hf2q bench: context of %d sequences x %d positions, KV cache (%s) holds %lld tokens%s\n",
                 n_seq, n_ctx, o.device.cache_type.c_str(), static_cast<long long>(ctx->kv_capacity_tokens()),
                 weight_copies_note(*ctx).c_str());
    const int64_t V = m.info().n_vocab;
    for (Result* r : group) {
        if (profile) {
            run_once(*ctx, r->spec, V, rng, false, !o.no_pipeline, o.top_k);  // warm-up
            r->profile_secs = run_once(*ctx, r->spec, V, rng, true, !o.no_pipeline, o.top_k);
            r->profile = ctx->op_profile();
            continue;
        }
        for (int32_t rep = -1; rep < o.reps; ++rep) {  // rep -1 warms up
            const double s = run_once(*ctx, r->spec, V, rng, false, !o.no_pipeline, o.top_k);
            if (rep >= 0) r->secs.push_back(s);
        }
    }
}

// Per-op shares of one test's profiled repetition; the rest of its wall time is
// host code between ops (batch set-up, MoE grouping, sampling-side copies).
void print_profile(const Result& r) {
    const double wall = r.profile_secs, in_ops = r.profile.total_seconds();
    std::printf("\n#### %s: op profile (one repetition, %.6f s, %.6f s in ops)\n\n", r.test.c_str(), wall, in_ops);
    std::printf("| op | time %% | seconds | calls |\n| --- | ---: | ---: | ---: |\n");
    int64_t calls = 0;
    for (const auto& e : r.profile.entries) {
        std::printf("| %s | %.2f | %.6f | %lld |\n", e.name.c_str(), wall > 0 ? 100.0 * e.seconds / wall : 0.0,
                    e.seconds, static_cast<long long>(e.calls));
        calls += e.calls;
    }
    const double outside = std::max(0.0, wall - in_ops);
    std::printf("| (host code between ops) | %.2f | %.6f | - |\n", wall > 0 ? 100.0 * outside / wall : 0.0, outside);
    std::printf("| total | 100.00 | %.6f | %lld |\n", wall, static_cast<long long>(calls));
}

nlohmann::json profile_json(const Result& r) {
    const double wall = r.profile_secs;
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& e : r.profile.entries)
        ops.push_back({{"name", e.name}, {"calls", e.calls}, {"seconds", e.seconds},
                       {"share", wall > 0 ? e.seconds / wall : 0.0}});
    return {{"seconds", wall},
            {"ops_seconds", r.profile.total_seconds()},
            {"outside_ops_seconds", std::max(0.0, wall - r.profile.total_seconds())},
            {"ops", ops}};
}

std::vector<int32_t> int_list(const std::string& s, const char* what, int64_t lo, int64_t hi) {
    std::vector<int32_t> r;
    for (int64_t v : parse_int_list(s, what)) {
        if (v < lo || v > hi) fail(what, ": ", v, " out of range [", lo, ", ", hi, "]");
        r.push_back(static_cast<int32_t>(v));
    }
    return r;
}

int run_bench(const std::vector<std::string>& args) {
    BenchOptions o;
    ArgParser p("bench", "-m MODEL [options]",
                "Measure prompt processing (pp) and generation (tg) throughput, mean ± sd over\n"
                "repetitions after one warm-up, like llama-bench. Tokens are random ids.\n"
                "Tests: pp<N> for each prompt length and depth; [b<B>-]tg<N> for each generation\n"
                "length, batch and depth (B sequences, one token each per step). A depth D\n"
                "(shown as '@ dD') first fills each sequence with D tokens, untimed.\n"
                "Generation steps sample greedily on the device (only each sequence's argmax\n"
                "is copied back, not its logits) and are pipelined as in hf2q generate: step\n"
                "i+1 is queued before the host reads step i's ids (--no-pipeline: each step's\n"
                "ids are read before the next is queued). Prompt tests return the last token's\n"
                "logits.");
    p.option("-m,--model", "FILE", "GGUF model", &o.model, true);
    p.option("-p,--n-prompt", "LIST", "prompt lengths, comma-separated (empty: none)", &o.prompts);
    p.option("-n,--n-gen", "LIST", "generated tokens per test, comma-separated (empty: none)", &o.gens);
    p.option("-b,--batch", "LIST", "concurrent sequences of the generation tests, e.g. 1,8,64 (empty: 1)", &o.batches);
    p.option("-d,--depth,--n-depth", "LIST",
             "context depths, comma-separated: tokens in each sequence before the timed part (as llama-bench -d)",
             &o.depths);
    p.option("-r,--repetitions", "N", "timed repetitions per test", &o.reps);
    p.option("--backend", "NAME", "cpu or cuda", &o.backend);
    add_device_flags(p, o.device);
    p.option("-t,--threads", "N", "CPU threads (0: all)", &o.threads);
    p.option("-ub,--ubatch-size,--ubatch", "N", "tokens per forward micro-batch", &o.ubatch);
    p.option("-c,--ctx-size,--n-ctx", "N", "positions per sequence (0: the longest test's depth + tokens)", &o.n_ctx);
    p.flag("--profile", "time every op in one extra run of each test and print a per-op table per test",
           &o.profile);
    p.flag("--no-pipeline",
           "generation steps one at a time: the host reads each step's ids before queuing the next",
           &o.no_pipeline);
    p.option("--top-k", "K",
             "generation steps return each sequence's K largest logits with their ids, as a top-k sampler's "
             "steps do (1-256; not pipelined), instead of its argmax (0)",
             &o.top_k);
    p.flag("--json", "print results as JSON", &o.json);
    if (!p.parse(args)) return 0;
    if (o.top_k < 0 || o.top_k > kMaxTopK) fail("--top-k ", o.top_k, " is out of range [0, ", kMaxTopK, "]");
    parse_backend(o.backend);  // fail early on a bad name or device flag
    check_device_flags(o.device);
    if (o.reps < 1) fail("--repetitions must be at least 1");
    if (o.ubatch < 1) fail("--ubatch-size must be at least 1");
    if (o.n_ctx < 0) fail("--ctx-size must be >= 0");

    const auto prompts = int_list(o.prompts, "--n-prompt", 1, 1 << 20);
    const auto gens = int_list(o.gens, "--n-gen", 1, 1 << 20);
    const auto batches = o.batches.empty() ? std::vector<int32_t>{1} : int_list(o.batches, "--batch", 1, 4096);
    const auto depths = o.depths.empty() ? std::vector<int32_t>{0} : int_list(o.depths, "--depth", 0, 1 << 20);

    // llama-bench's order: each prompt length at every depth, then each generation
    // length at every batch and depth.
    std::vector<Result> results;
    for (int32_t n : prompts)
        for (int32_t d : depths) results.push_back({Test{true, n, 1, d}, "", 0, 1, {}, 0.0, {}});
    for (int32_t n : gens)
        for (int32_t b : batches)
            for (int32_t d : depths) results.push_back({Test{false, n, b, d}, "", 0, b, {}, 0.0, {}});
    std::vector<Result*> pp_tests, tg_tests;
    for (auto& r : results) {
        r.test = r.spec.name() + (!r.spec.prompt && o.top_k > 0 ? " top-k " + std::to_string(o.top_k) : "");
        r.tokens = r.spec.tokens();
        (r.spec.prompt ? pp_tests : tg_tests).push_back(&r);
    }

    auto model = Model::load(o.model, load_options(o.device));
    const ModelInfo& info = model->info();
    // Separate streams so --profile leaves the timed tests' tokens unchanged.
    std::mt19937 rng(42), profile_rng(43);
    for (auto* group : {&pp_tests, &tg_tests}) {
        run_group(*model, o, *group, false, rng);
        if (o.profile) run_group(*model, o, *group, true, profile_rng);
    }

    nlohmann::json out = nlohmann::json::array();
    // The H200's ceilings mean nothing to another backend's figures: the CPU's rows give
    // GFLOP/s and GB/s alone.
    const bool gpu = o.backend == "cuda";
    if (!o.json) {
        char rates[96] = "GFLOP/s | GB/s";
        if (gpu)
            std::snprintf(rates, sizeof rates, "TFLOP/s (%% of %.0f) | GB/s (%% of %.0f)", kPeakBf16Tflops,
                          kPeakCopyGBs);
        std::printf("| model | size | params | backend | test | t/s | %s |\n"
                    "| --- | --- | --- | --- | --- | --- | --- | --- |\n",
                    rates);
    }
    const KvCacheType kv_type = cache_type_of(o.device);
    for (const auto& r : results) {
        const bool prompt = r.spec.prompt;
        const double tps = r.mean_tps();
        // 2 FLOP per active weight per token (the weights' work, as the ceilings
        // count it; attention's is not included).
        const double tflops = 2.0 * static_cast<double>(info.n_active_params) * tps / 1e12;
        // Generation: the bytes its steps must read (decode_step_bytes: the weights, the
        // experts its batch routes to, the KV cache at each step's context), per second.
        const double gbs = prompt ? 0.0 : step_bytes(*model, r.spec, kv_type) * (tps / r.batch) / 1e9;
        if (o.json) {
            nlohmann::json j = {{"test", r.test}, {"tokens", r.tokens}, {"depth", r.spec.depth},
                                {"tps_mean", tps}, {"tps_sd", r.sd_tps()}, {"tflops", tflops}, {"gbs", gbs},
                                {"backend", o.backend}, {"model", info.name}, {"params", info.n_params},
                                {"bytes", info.n_bytes}, {"type_k", o.device.cache_type},
                                {"type_v", o.device.cache_type}, {"n_ubatch", o.ubatch},
                                {"pipeline", !prompt && !o.no_pipeline}};
            if (o.profile) j["profile"] = profile_json(r);
            out.push_back(std::move(j));
            continue;
        }
        char flops[48], bytes[48] = "-";
        if (gpu) {
            std::snprintf(flops, sizeof flops, "%.2f (%.1f%%)", tflops, 100.0 * tflops / kPeakBf16Tflops);
            if (!prompt)
                std::snprintf(bytes, sizeof bytes, "%d (%d%%)", static_cast<int>(gbs),
                              static_cast<int>(100.0 * gbs / kPeakCopyGBs));
        } else {
            std::snprintf(flops, sizeof flops, "%.1f", 1e3 * tflops);
            if (!prompt) std::snprintf(bytes, sizeof bytes, "%.1f", gbs);
        }
        std::printf("| %s | %s | %s | %s | %s | %.2f ± %.2f | %s | %s |\n", info.name.c_str(),
                    format_bytes(info.n_bytes).c_str(), gguf::human_count(static_cast<uint64_t>(info.n_params)).c_str(),
                    o.backend.c_str(), r.test.c_str(), tps, r.sd_tps(), flops, bytes);
    }
    if (o.json) std::printf("%s\n", out.dump(2).c_str());
    else if (o.profile)
        for (const auto& r : results) print_profile(r);
    return 0;
}

}  // namespace

HF2Q_COMMAND(bench, "measure prompt and generation throughput", run_bench);

}  // namespace hf2q::cli

// hf2q generate: run a prompt through the model and continue it.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.h"
#include "command.h"
#include "core/error.h"
#include "hf2q/engine.h"

namespace hf2q::cli {
namespace {

struct GenerateOptions {
    std::string model;
    std::string token_ids;
    int32_t n_predict = 32;
    float temp = 0.0f;
    std::string dump_logits;
    bool json = false;
    int32_t threads = 0;
    int32_t ctx_size = 0;
    int32_t ubatch = 512;
    std::string backend = "cpu";
};

int32_t argmax(const float* v, int64_t n) {
    return static_cast<int32_t>(std::max_element(v, v + n) - v);
}

void dump_logits(const std::string& path, const Context& ctx, int32_t n_rows) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) fail("cannot open '", path, "' for writing");
    for (int32_t i = 0; i < n_rows; ++i)
        out.write(reinterpret_cast<const char*>(ctx.logits(i)),
                  static_cast<std::streamsize>(ctx.n_vocab() * sizeof(float)));
    if (!out) fail("failed writing logits to '", path, "'");
}

std::vector<int32_t> parse_token_ids(const std::string& s) {
    std::vector<int32_t> ids;
    for (int64_t v : parse_int_list(s, "--token-ids")) {
        if (v < 0 || v > INT32_MAX) fail("--token-ids: id ", v, " out of range");
        ids.push_back(static_cast<int32_t>(v));
    }
    if (ids.empty()) fail("--token-ids: give at least one token id");
    return ids;
}

int run_generate(const std::vector<std::string>& args) {
    GenerateOptions o;
    ArgParser p("generate", "-m MODEL --token-ids IDS [options]",
                "Run a prompt through a Gemma 4 GGUF model in one batched forward pass, then\n"
                "continue it token by token (greedy at --temp 0).");
    p.option("-m,--model", "FILE", "GGUF model to load", &o.model, true);
    p.option("--token-ids", "IDS", "prompt as comma-separated token ids, used exactly as given (no BOS added)",
             &o.token_ids, true);
    p.option("-n,--n-predict", "N", "tokens to generate", &o.n_predict);
    p.option("--temp", "T", "sampling temperature (0: greedy)", &o.temp);
    p.option("--dump-logits", "FILE",
             "write float32 logits of every prompt position, [n_prompt][n_vocab] little-endian", &o.dump_logits);
    p.flag("--json", "print one JSON object {\"prompt_tokens\": [...], \"generated_tokens\": [...]}", &o.json);
    p.option("-t,--threads", "N", "CPU threads (0: all cores)", &o.threads);
    p.option("-c,--ctx-size", "N", "context size (0: prompt + n-predict)", &o.ctx_size);
    p.option("-ub,--ubatch-size", "N", "tokens per forward micro-batch", &o.ubatch);
    p.option("--backend", "NAME", "cpu or cuda", &o.backend);
    if (!p.parse(args)) return 0;
    if (o.backend != "cpu" && o.backend != "cuda") fail("--backend must be cpu or cuda, got '", o.backend, "'");
    if (o.n_predict < 0) fail("--n-predict must not be negative");
    if (o.temp != 0.0f) fail("--temp other than 0 needs the sampler, which is not wired into generate yet");
    std::vector<int32_t> prompt = parse_token_ids(o.token_ids);

    auto model = Model::load(o.model);
    ContextOptions co;
    co.n_seq_max = 1;
    co.n_ctx = o.ctx_size > 0 ? o.ctx_size : static_cast<int32_t>(prompt.size()) + o.n_predict;
    co.n_ubatch = o.ubatch;
    co.n_threads = o.threads;
    co.backend = o.backend == "cuda" ? BackendKind::cuda : BackendKind::cpu;
    auto ctx = Context::create(*model, co);

    const bool all_logits = !o.dump_logits.empty();
    std::vector<BatchToken> batch;
    for (size_t i = 0; i < prompt.size(); ++i)
        batch.push_back({prompt[i], 0, static_cast<int32_t>(i), all_logits || i + 1 == prompt.size()});
    ctx->decode(batch);
    if (all_logits) dump_logits(o.dump_logits, *ctx, static_cast<int32_t>(prompt.size()));

    std::vector<int32_t> generated;
    const float* last = ctx->logits(ctx->n_outputs() - 1);
    int32_t pos = static_cast<int32_t>(prompt.size());
    for (int32_t i = 0; i < o.n_predict; ++i) {
        int32_t tok = argmax(last, ctx->n_vocab());
        generated.push_back(tok);
        if (!o.json) {
            std::printf("%s%d", i ? " " : "", tok);
            std::fflush(stdout);
        }
        if (i + 1 == o.n_predict) break;
        ctx->decode({{tok, 0, pos++, true}});
        last = ctx->logits(0);
    }
    if (o.json) {
        nlohmann::json j;
        j["prompt_tokens"] = prompt;
        j["generated_tokens"] = generated;
        std::printf("%s\n", j.dump().c_str());
    } else {
        std::printf("\n");
    }
    return 0;
}

}  // namespace

HF2Q_COMMAND(generate, "generate tokens from a prompt with a Gemma 4 GGUF model", run_generate);

}  // namespace hf2q::cli

// hf2q generate: run a prompt through the model and continue it.
//
// Three modes: text (-p TEXT or -f FILE, tokenized with the GGUF's tokenizer, one BOS,
// continuation streamed to stdout), token ids (--token-ids, used exactly as given,
// no tokenizer needed: ids out, optionally the prompt logits dumped) and many
// requests (--prompts FILE: one a line, generated together by continuous batching,
// runtime::BatchGenerator; results in request order).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "device_flags.h"
#include "sampling_flags.h"
#include "command.h"
#include "core/error.h"
#include "core/progress.h"
#include "gguf/gguf.h"
#include "hf2q/engine.h"
#include "chat_render.h"
#include "prompts_file.h"
#include "runtime/batch_generation.h"
#include "runtime/generation.h"
#include "tokenizer/jinja/template.h"
#include "tokenizer/tokenizer.h"

namespace hf2q::cli {
namespace {

struct GenerateOptions {
    std::string model;
    std::string prompt;
    std::string prompt_file;
    std::string token_ids;
    std::string prompts_file;
    int32_t parallel = 0;
    int32_t batch_tokens = 0;
    bool no_prefix_sharing = false;
    int32_t n_predict = 32;
    runtime::SamplerParams sampler;
    std::vector<std::string> stop;
    bool ignore_eos = false;
    bool special = false;
    std::string dump_logits;
    bool json = false;
    int32_t threads = 0;
    int32_t ctx_size = 0;
    int32_t ubatch = 512;
    std::string backend = "cpu";
    DeviceFlags device;
};

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

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot read prompt file '", path, "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) fail("failed reading prompt file '", path, "'");
    return ss.str();
}

void add_flags(ArgParser& p, GenerateOptions& o) {
    p.option("-m,--model", "FILE", "GGUF model to load", &o.model, true);
    p.option("-p,--prompt", "TEXT",
             "prompt text (tokenized with the model's tokenizer, BOS added once)", &o.prompt);
    p.option("-f,--file", "FILE", "read the prompt text from FILE", &o.prompt_file);
    p.option("--token-ids", "IDS",
             "prompt as comma-separated token ids, used exactly as given (no BOS added)",
             &o.token_ids);
    p.option("--prompts", "FILE",
             "many requests, one a line (text, a JSON string, or {\"prompt\": ...} / {\"token_ids\": [...]} / "
             "{\"messages\": [...]} with an optional \"n_predict\"), generated together; results in request "
             "order; request i samples with seed + i (docs/cli.md)",
             &o.prompts_file);
    p.option("-np,--parallel", "N",
             "with --prompts: requests generated at once (0: all of them, at most 64); each is a "
             "sequence of its own and the next request starts as soon as one ends",
             &o.parallel);
    p.option("--batch-tokens", "N",
             "with --prompts: most tokens one forward step takes (each running request's next token, "
             "then prompt chunks; 0: --ubatch-size)",
             &o.batch_tokens);
    p.flag("--no-prefix-sharing",
           "with --prompts: prefill every request's whole prompt, instead of the prefix all requests share once "
           "(each request then starts as a copy-on-write fork of it)",
           &o.no_prefix_sharing);
    p.option("-n,--n-predict", "N",
             "tokens to generate (-1: until end of generation or context full; text mode; "
             "with --prompts, each request's unless its line says)",
             &o.n_predict);
    add_sampling_flags(p, o.sampler);
    p.option("--stop", "TEXT", "stop when the output contains TEXT (repeatable; text mode)",
             &o.stop);
    p.flag("--ignore-eos", "do not stop at end-of-generation tokens (they are banned)",
           &o.ignore_eos);
    p.flag("--special", "print control tokens (e.g. <turn|>) as text", &o.special);
    p.option("--dump-logits", "FILE",
             "write float32 logits of every prompt position, [n_prompt][n_vocab] little-endian",
             &o.dump_logits);
    p.flag("--json",
           "print one JSON object {\"prompt_tokens\": [...], \"generated_tokens\": [...]} "
           "(text mode adds \"text\" and \"finish_reason\")",
           &o.json);
    p.option("-t,--threads", "N", "CPU threads (0: all cores)", &o.threads);
    p.option("-c,--ctx-size", "N", "context size (0: prompt + n-predict)", &o.ctx_size);
    p.option("-ub,--ubatch-size", "N", "tokens per forward micro-batch", &o.ubatch);
    p.option("--backend", "NAME", "cpu or cuda", &o.backend);
    add_device_flags(p, o.device);
}

// Positions a sequence needs for a prompt of n_prompt tokens and n_predict more (-c
// when given; for n_predict < 0, the training context up to 4,096, or the prompt).
int32_t context_size(const Model& model, const GenerateOptions& o, size_t n_prompt, int32_t n_predict) {
    if (o.ctx_size > 0) return o.ctx_size;
    if (n_predict >= 0)
        return static_cast<int32_t>(std::min<int64_t>(INT32_MAX, static_cast<int64_t>(n_prompt) + n_predict));
    const int64_t train = model.info().n_ctx_train > 0 ? model.info().n_ctx_train : 4096;
    return static_cast<int32_t>(std::max<int64_t>(static_cast<int64_t>(n_prompt), std::min<int64_t>(train, 4096)));
}

std::unique_ptr<Context> make_context(const Model& model, const GenerateOptions& o, size_t n_prompt,
                                      int32_t n_seq = 1, int32_t n_ctx = 0) {
    ContextOptions co;
    co.n_seq_max = n_seq;
    co.n_ctx = n_ctx > 0 ? n_ctx : context_size(model, o, n_prompt, o.n_predict);
    co.n_ubatch = o.ubatch;
    co.n_threads = o.threads;
    co.backend = parse_backend(o.backend);
    apply_device_flags(o.device, co);
    return Context::create(model, co);
}

runtime::GenerationParams generation_params(const GenerateOptions& o) {
    runtime::GenerationParams gp;
    gp.n_predict = o.n_predict;
    gp.sampler = o.sampler;
    gp.stop = o.stop;
    gp.ignore_eos = o.ignore_eos;
    gp.parse_output = false;  // a plain continuation: the raw text
    gp.show_special = o.special;
    gp.all_prompt_logits = !o.dump_logits.empty();
    return gp;
}

void print_timings(const runtime::GenerationResult& r) {
    const int32_t n_eval = r.n_prompt - r.n_prompt_cached;
    std::fprintf(stderr, "\nprompt eval: %6d tokens in %9.2f ms (%9.2f tokens/s)\n", n_eval,
                 r.prompt_seconds * 1e3, r.prompt_tokens_per_second());
    std::fprintf(stderr, "       eval: %6zu tokens in %9.2f ms (%9.2f tokens/s)  finish: %s\n",
                 r.tokens.size(), r.gen_seconds * 1e3, r.gen_tokens_per_second(),
                 runtime::finish_reason_name(r.finish_reason));
}

// Token ids in, token ids out; no tokenizer is read.
int run_token_ids(const GenerateOptions& o) {
    if (o.n_predict < 0) fail("--n-predict must not be negative with --token-ids");
    if (!o.stop.empty()) fail("--stop needs text mode (-p or -f): token-id mode has no tokenizer");
    std::vector<int32_t> prompt = parse_token_ids(o.token_ids);
    auto model = Model::load(o.model, load_options(o.device));
    auto ctx = make_context(*model, o, prompt.size());
    runtime::Generator gen(*ctx, nullptr);
    runtime::GenerationCallbacks cb;
    if (!o.dump_logits.empty())
        cb.on_prefill = [&](const Context& c, int32_t) {
            dump_logits(o.dump_logits, c, static_cast<int32_t>(prompt.size()));
        };
    size_t n_printed = 0;
    if (!o.json)
        cb.on_token = [&](int32_t tok) {
            std::printf("%s%d", n_printed++ ? " " : "", tok);
            std::fflush(stdout);
        };
    const runtime::GenerationResult r = gen.generate(prompt, generation_params(o), cb);
    if (o.json) {
        nlohmann::json j;
        j["prompt_tokens"] = prompt;
        j["generated_tokens"] = r.tokens;
        std::printf("%s\n", j.dump().c_str());
    } else {
        std::printf("\n");
    }
    return 0;
}

int run_text(const GenerateOptions& o) {
    if (!o.prompt.empty() && !o.prompt_file.empty())
        fail("give the prompt with -p or -f, not both");
    const std::string text = o.prompt_file.empty() ? o.prompt : read_text_file(o.prompt_file);
    auto file = gguf::File::open(o.model);
    if (!file->has("tokenizer.ggml.model"))
        fail("'", o.model, "' has no tokenizer (tokenizer.* metadata); use --token-ids");
    const tokenizer::Tokenizer tok(tokenizer::load_vocab(*file));
    file.reset();
    // Control-token text in the prompt (e.g. "<|turn>") becomes that token.
    const std::vector<int32_t> prompt =
        tok.encode(text, /*add_special=*/true, /*parse_special=*/true);
    if (prompt.empty()) fail("the prompt is empty and the tokenizer adds no BOS");
    auto model = Model::load(o.model, load_options(o.device));
    auto ctx = make_context(*model, o, prompt.size());
    runtime::Generator gen(*ctx, &tok);
    runtime::GenerationCallbacks cb;
    if (!o.dump_logits.empty())
        cb.on_prefill = [&](const Context& c, int32_t) {
            dump_logits(o.dump_logits, c, static_cast<int32_t>(prompt.size()));
        };
    if (!o.json)
        cb.on_content = [](std::string_view s) {
            std::fwrite(s.data(), 1, s.size(), stdout);
            std::fflush(stdout);
        };
    const runtime::GenerationResult r = gen.generate(prompt, generation_params(o), cb);
    if (o.json) {
        nlohmann::json j;
        j["prompt_tokens"] = prompt;
        j["generated_tokens"] = r.tokens;
        j["text"] = r.text;
        j["finish_reason"] = runtime::finish_reason_name(r.finish_reason);
        // Invalid UTF-8 (a random model's stray bytes) is replaced, not an error.
        std::printf("%s\n",
                    j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
        std::printf("\n");
        std::fflush(stdout);
    }
    print_timings(r);
    return 0;
}

// The requests of a prompts file: text lines tokenized (one BOS), ids as given,
// conversations rendered with the model's chat template (their replies parsed into
// content, reasoning and tool calls, as hf2q chat does); request i samples with
// seed + i, so its text does not depend on the others.
std::vector<runtime::BatchRequest> batch_requests(const std::vector<PromptLine>& lines,
                                                  const tokenizer::Tokenizer* tok, const GenerateOptions& o) {
    std::optional<jinja::Template> tmpl;  // parsed at the first conversation
    std::vector<runtime::BatchRequest> reqs;
    reqs.reserve(lines.size());
    for (const PromptLine& l : lines) {
        runtime::BatchRequest r;
        r.params = generation_params(o);
        if ((l.text || l.messages) && !tok)
            fail("prompts file line ", l.line,
                 ": text and conversations need the model's tokenizer (this GGUF has none); give "
                 "{\"token_ids\": [...]}");
        if (l.messages) {
            if (!tmpl) {
                if (tok->chat_template().empty())
                    fail("prompts file line ", l.line,
                         ": a conversation needs the model's chat template (this GGUF has no "
                         "tokenizer.chat_template)");
                tmpl.emplace(jinja::Template::parse(tok->chat_template(), "chat_template"));
            }
            const std::string text = render_chat(*tmpl, *tok, *l.messages, l.enable_thinking,
                                                 l.tools ? &*l.tools : nullptr);
            r.prompt = tok->encode(text, /*add_special=*/true, /*parse_special=*/true);  // its own BOS
            r.params.parse_output = true;
            r.params.parser.start_in_reasoning = text.ends_with(kOpenThought);
        } else if (l.text) {
            r.prompt = tok->encode(*l.text, /*add_special=*/true, /*parse_special=*/true);
        } else {
            r.prompt = l.token_ids;
        }
        if (r.prompt.empty()) fail("prompts file line ", l.line, ": the prompt is empty and the tokenizer adds no BOS");
        if (l.n_predict) r.params.n_predict = *l.n_predict;
        runtime::SamplerParams& sp = r.params.sampler;
        sp.seed = l.seed ? *l.seed : o.sampler.seed + reqs.size();
        if (l.temperature) sp.temperature = *l.temperature;
        if (l.top_k) sp.top_k = *l.top_k;
        if (l.top_p) sp.top_p = *l.top_p;
        if (l.min_p) sp.min_p = *l.min_p;
        if (l.stop) r.params.stop = *l.stop;
        reqs.push_back(std::move(r));
    }
    return reqs;
}

void print_batch_result(size_t i, const PromptLine& line, const runtime::BatchRequest& req,
                        const runtime::GenerationResult& r, bool text, bool json) {
    if (json) {
        nlohmann::json j;
        j["index"] = i;
        j["line"] = line.line;
        j["prompt_tokens"] = req.prompt;
        j["generated_tokens"] = r.tokens;
        if (text) j["text"] = r.text;
        if (req.params.parse_output) {  // a conversation: the reply as hf2q chat shows it
            j["content"] = r.content;
            j["reasoning"] = r.reasoning;
            nlohmann::json calls = nlohmann::json::array();
            for (const runtime::ToolCall& c : r.tool_calls)
                calls.push_back({{"name", c.name}, {"arguments", c.arguments}});
            j["tool_calls"] = calls;
        }
        j["finish_reason"] = runtime::finish_reason_name(r.finish_reason);
        std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
        std::printf("--- request %zu (line %zu): %zu prompt tokens, %zu generated, %s\n", i, line.line,
                    req.prompt.size(), r.tokens.size(), runtime::finish_reason_name(r.finish_reason));
        if (req.params.parse_output) {  // a conversation: the reply's content
            std::fwrite(r.content.data(), 1, r.content.size(), stdout);
        } else if (text) {
            std::fwrite(r.text.data(), 1, r.text.size(), stdout);
        } else {
            for (size_t k = 0; k < r.tokens.size(); ++k) std::printf("%s%d", k ? " " : "", r.tokens[k]);
        }
        std::printf("\n");
    }
    std::fflush(stdout);
}

// Many requests, generated together (runtime::BatchGenerator); each result is printed
// in request order as soon as it and those before it are done.
int run_prompts(const GenerateOptions& o) {
    if (!o.dump_logits.empty()) fail("--dump-logits takes one prompt: not with --prompts");
    if (o.parallel < 0) fail("--parallel ", o.parallel, " must be >= 0 (0: all requests, at most 64)");
    if (o.batch_tokens < 0) fail("--batch-tokens ", o.batch_tokens, " must be >= 0 (0: --ubatch-size)");
    const std::vector<PromptLine> lines = parse_prompts(read_text_file(o.prompts_file));
    std::optional<tokenizer::Tokenizer> tok;
    {
        auto file = gguf::File::open(o.model);
        if (file->has("tokenizer.ggml.model")) tok.emplace(tokenizer::load_vocab(*file));
    }
    if (!tok && !o.stop.empty()) fail("--stop needs the model's tokenizer (this GGUF has none)");
    const tokenizer::Tokenizer* tp = tok ? &*tok : nullptr;
    const std::vector<runtime::BatchRequest> reqs = batch_requests(lines, tp, o);
    const int32_t n_parallel = o.parallel > 0 ? std::min<int32_t>(o.parallel, static_cast<int32_t>(reqs.size()))
                                              : static_cast<int32_t>(std::min<size_t>(reqs.size(), 64));
    auto model = Model::load(o.model, load_options(o.device));
    int32_t n_ctx = 1;
    for (const runtime::BatchRequest& r : reqs)
        n_ctx = std::max(n_ctx, context_size(*model, o, r.prompt.size(), r.params.n_predict));
    // One sequence more holds the prompt prefix the requests share (BatchOptions::share_prefix).
    const bool share = !o.no_prefix_sharing && reqs.size() > 1;
    auto ctx = make_context(*model, o, 0, n_parallel + (share ? 1 : 0), n_ctx);
    runtime::BatchGenerator gen(*ctx, tp);

    std::vector<std::optional<runtime::GenerationResult>> done(reqs.size());  // until printed
    size_t printed = 0;
    // A bar on stderr while the results go to a file (on a terminal they show the progress).
    Progress progress("generate", reqs.size(), "requests", isatty(fileno(stdout)) == 0);
    runtime::BatchCallbacks cb;
    cb.on_done = [&](size_t i, const runtime::GenerationResult& r) {
        progress.add(1);
        done[i] = r;
        for (; printed < reqs.size() && done[printed]; ++printed) {
            print_batch_result(printed, lines[printed], reqs[printed], *done[printed], tp != nullptr, o.json);
            done[printed].reset();
        }
    };
    runtime::BatchOptions bo;
    bo.n_parallel = n_parallel;
    bo.max_batch_tokens = o.batch_tokens;
    bo.share_prefix = share;
    gen.run(reqs, bo, cb);
    progress.finish();
    const runtime::BatchStats& st = gen.stats();
    std::fprintf(stderr,
                 "\nbatch: %zu requests, %d at once at most (of %d sequences), %lld steps in %.2f s\n"
                 "       %lld prompt tokens decoded (a shared prefix of %d once), %lld generated\n"
                 "       %.2f generated tokens/s, %.2f tokens/s in all\n",
                 reqs.size(), st.max_running, n_parallel, static_cast<long long>(st.steps), st.seconds,
                 static_cast<long long>(st.prompt_tokens), st.shared_prefix,
                 static_cast<long long>(st.generated_tokens),
                 st.seconds > 0 ? static_cast<double>(st.generated_tokens) / st.seconds : 0.0,
                 st.seconds > 0 ? static_cast<double>(st.generated_tokens + st.prompt_tokens) / st.seconds : 0.0);
    return 0;
}

int run_generate(const std::vector<std::string>& args) {
    GenerateOptions o;
    o.sampler.temperature = 0.0f;  // deterministic unless asked
    ArgParser p("generate", "-m MODEL (-p TEXT | -f FILE | --token-ids IDS | --prompts FILE) [options]",
                "Run a prompt through a Gemma 4 GGUF model in one batched forward pass, then\n"
                "continue it token by token (greedy at --temp 0). Text mode streams the\n"
                "continuation to stdout and prints timings to stderr. --prompts runs many\n"
                "requests together (continuous batching: every step decodes each running\n"
                "request's next token and chunks of waiting prompts in one forward pass).");
    add_flags(p, o);
    if (!p.parse(args)) return 0;
    parse_backend(o.backend);  // fail early on a bad name or device flag
    check_device_flags(o.device);
    const int n_modes = !o.token_ids.empty() + (p.was_set("--prompt") || p.was_set("--file")) +
                        p.was_set("--prompts");
    if (n_modes != 1) fail("give exactly one of -p TEXT, -f FILE, --token-ids IDS or --prompts FILE");
    if (!p.was_set("--prompts") &&
        (p.was_set("--parallel") || p.was_set("--batch-tokens") || p.was_set("--no-prefix-sharing")))
        fail("--parallel, --batch-tokens and --no-prefix-sharing go with --prompts");
    runtime::validate(o.sampler);
    if (p.was_set("--prompts")) return run_prompts(o);
    return o.token_ids.empty() ? run_text(o) : run_token_ids(o);
}

}  // namespace

HF2Q_COMMAND(generate, "generate text or token ids from a prompt with a Gemma 4 GGUF model",
             run_generate);

}  // namespace hf2q::cli

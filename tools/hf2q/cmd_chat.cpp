// hf2q chat: interactive multi-turn chat with the model's own chat template.
//
// Each turn re-renders the whole conversation with the template, tokenizes it and lets
// runtime::Generator reuse the cached token prefix, so only the new tokens are decoded.
// Reasoning is shown apart from the answer; the answer alone goes into the history.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "device_flags.h"
#include "sampling_flags.h"
#include "chat_render.h"
#include "command.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "hf2q/engine.h"
#include "runtime/generation.h"
#include "tokenizer/jinja/template.h"
#include "tokenizer/tokenizer.h"

namespace hf2q::cli {
namespace {

struct ChatOptions {
    std::string model;
    std::string system;
    std::string template_file;
    bool think = false;
    int32_t n_predict = -1;
    runtime::SamplerParams sampler;
    int32_t threads = 0;
    int32_t ctx_size = 4096;
    int32_t ubatch = 512;
    std::string backend = "cpu";
    DeviceFlags device;
    bool verbose = false;
};

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot read template file '", path, "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void add_flags(ArgParser& p, ChatOptions& o) {
    p.option("-m,--model", "FILE", "GGUF model to load", &o.model, true);
    p.option("--system", "TEXT", "system prompt", &o.system);
    p.flag("--think", "start with thinking on (enable_thinking; toggle with /think on|off)",
           &o.think);
    p.option("--template", "FILE",
             "Jinja chat template to use instead of the GGUF's tokenizer.chat_template",
             &o.template_file);
    p.option("-n,--n-predict", "N", "max tokens per reply (-1: until end of turn or context full)",
             &o.n_predict);
    add_sampling_flags(p, o.sampler);
    p.option("-t,--threads", "N", "CPU threads (0: all cores)", &o.threads);
    p.option("-c,--ctx-size", "N", "context size in tokens (whole conversation)", &o.ctx_size);
    p.option("-ub,--ubatch-size", "N", "tokens per forward micro-batch", &o.ubatch);
    p.option("--backend", "NAME", "cpu or cuda", &o.backend);
    add_device_flags(p, o.device);
    p.flag("-v,--verbose", "print prompt/cache/speed statistics of each turn to stderr",
           &o.verbose);
}

// Streams one reply: reasoning dimmed on a terminal, in a [thinking] block otherwise.
class ReplyPrinter {
  public:
    explicit ReplyPrinter(bool tty) : tty_(tty) {}

    void reasoning(std::string_view s) {
        if (!in_reasoning_) {
            write(tty_ ? "\033[2m" : "[thinking]\n");
            in_reasoning_ = true;
        }
        write(s);
    }
    void content(std::string_view s) {
        close_reasoning();
        write(s);
    }
    void tool_call(const runtime::ToolCall& c) {
        close_reasoning();
        write("\n[tool call] " + c.name + " " + c.arguments.dump() + "\n");
    }
    void finish() {
        close_reasoning();
        write("\n");
    }

  private:
    void close_reasoning() {
        if (!in_reasoning_) return;
        write(tty_ ? "\033[0m\n" : "\n[/thinking]\n");
        in_reasoning_ = false;
    }
    static void write(std::string_view s) {
        std::fwrite(s.data(), 1, s.size(), stdout);
        std::fflush(stdout);
    }
    bool tty_;
    bool in_reasoning_ = false;
};

class ChatSession {
  public:
    ChatSession(const ChatOptions& o, const tokenizer::Tokenizer& tok, jinja::Template tmpl,
                Context& ctx)
        : o_(o), tok_(tok), tmpl_(std::move(tmpl)), gen_(ctx, &tok), think_(o.think) {
        reset_messages();
    }

    // Handles one input line; returns false to quit.
    bool handle(const std::string& line) {
        if (line.empty()) return true;
        if (line[0] == '/') return command(line);
        turn(line);
        return true;
    }

  private:
    void reset_messages() {
        messages_ = nlohmann::ordered_json::array();
        if (!o_.system.empty()) messages_.push_back({{"role", "system"}, {"content", o_.system}});
    }

    bool command(const std::string& line) {
        if (line == "/quit" || line == "/exit") return false;
        if (line == "/reset") {
            reset_messages();
            gen_.reset();
            std::printf("[conversation cleared]\n");
        } else if (line == "/think on" || line == "/think off") {
            think_ = line == "/think on";
            std::printf("[thinking %s]\n", think_ ? "on" : "off");
        } else if (line == "/think") {
            std::printf("[thinking is %s]\n", think_ ? "on" : "off");
        } else {
            std::printf("commands: /reset  /think on|off  /quit (or /exit)\n");
        }
        std::fflush(stdout);
        return true;
    }

    std::string render() const { return render_chat(tmpl_, tok_, messages_, think_); }

    void turn(const std::string& user) {
        messages_.push_back({{"role", "user"}, {"content", user}});
        ReplyPrinter out(isatty(STDOUT_FILENO) != 0);
        runtime::GenerationResult r;
        try {
            const std::string text = render();
            // The rendered text carries its own BOS; encode() does not add a second one.
            const std::vector<int32_t> prompt = tok_.encode(text, true, true);
            runtime::GenerationParams gp;
            gp.n_predict = o_.n_predict;
            gp.sampler = o_.sampler;
            gp.parse_output = true;
            gp.parser.start_in_reasoning = text.ends_with(kOpenThought);
            runtime::GenerationCallbacks cb;
            cb.on_reasoning = [&](std::string_view s) { out.reasoning(s); };
            cb.on_content = [&](std::string_view s) { out.content(s); };
            cb.on_tool_call = [&](const runtime::ToolCall& c) { out.tool_call(c); };
            r = gen_.generate(prompt, gp, cb);
        } catch (const Error& e) {
            // Template errors and a conversation that no longer fits end the turn, not the chat.
            messages_.erase(messages_.end() - 1);
            out.finish();
            std::printf("[error: %s; /reset starts a new conversation]\n", e.what());
            std::fflush(stdout);
            return;
        }
        out.finish();
        if (r.finish_reason == runtime::FinishReason::length &&
            gen_.cached().size() + 1 >= static_cast<size_t>(o_.ctx_size))
            std::printf("[context full: /reset starts a new conversation]\n");
        messages_.push_back({{"role", "assistant"}, {"content", r.content}});
        if (o_.verbose)
            std::fprintf(stderr,
                         "[prompt %d tokens (%d cached), %.2f tokens/s; reply %zu tokens, %.2f "
                         "tokens/s; %s]\n",
                         r.n_prompt, r.n_prompt_cached, r.prompt_tokens_per_second(),
                         r.tokens.size(), r.gen_tokens_per_second(),
                         runtime::finish_reason_name(r.finish_reason));
    }

    const ChatOptions& o_;
    const tokenizer::Tokenizer& tok_;
    jinja::Template tmpl_;
    runtime::Generator gen_;
    bool think_;
    nlohmann::ordered_json messages_;
};

int run_chat(const std::vector<std::string>& args) {
    ChatOptions o;
    o.sampler.temperature = 1.0f;  // Gemma 4's generation_config defaults
    o.sampler.top_k = 64;
    o.sampler.top_p = 0.95f;
    ArgParser p(
        "chat", "-m MODEL [options]",
        "Interactive chat with a Gemma 4 GGUF model using its chat template. Type a message\n"
        "per line; commands: /reset, /think on|off, /quit (or /exit). End of input exits.");
    add_flags(p, o);
    if (!p.parse(args)) return 0;
    parse_backend(o.backend);  // fail early on a bad name or device flag
    check_device_flags(o.device);
    if (o.ctx_size <= 0) fail("--ctx-size must be positive");
    runtime::validate(o.sampler);

    auto file = gguf::File::open(o.model);
    if (!file->has("tokenizer.ggml.model"))
        fail("'", o.model, "' has no tokenizer (tokenizer.* metadata)");
    const tokenizer::Tokenizer tok(tokenizer::load_vocab(*file));
    file.reset();
    std::string source;
    if (!o.template_file.empty()) {
        source = read_text_file(o.template_file);
    } else {
        source = tok.chat_template();
        if (source.empty())
            fail("'", o.model,
                 "' has no chat template (tokenizer.chat_template); give one with --template FILE");
    }
    jinja::Template tmpl =
        jinja::Template::parse(source, o.template_file.empty() ? "chat_template" : o.template_file);

    auto model = Model::load(o.model, load_options(o.device));
    ContextOptions co;
    co.n_ctx = o.ctx_size;
    co.n_ubatch = o.ubatch;
    co.n_threads = o.threads;
    co.backend = parse_backend(o.backend);
    apply_device_flags(o.device, co);
    auto ctx = Context::create(*model, co);
    if (o.verbose)
        std::fprintf(stderr, "hf2q chat: KV cache holds %lld tokens%s\n", static_cast<long long>(ctx->kv_capacity_tokens()),
                     weight_copies_note(*ctx).c_str());
    ChatSession chat(o, tok, std::move(tmpl), *ctx);

    const bool tty_in = isatty(STDIN_FILENO) != 0;
    std::string line;
    while (true) {
        if (tty_in) {
            std::printf("> ");
            std::fflush(stdout);
        }
        if (!std::getline(std::cin, line)) {
            if (tty_in) std::printf("\n");
            break;
        }
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (!chat.handle(line)) break;
    }
    return 0;
}

}  // namespace

HF2Q_COMMAND(chat, "interactive chat with a Gemma 4 GGUF model (its own chat template)", run_chat);

}  // namespace hf2q::cli

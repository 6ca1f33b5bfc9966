// hf2q template: render a chat template with a JSON context and print the text.
//
//   hf2q template (-m MODEL.gguf | --template FILE) --context CONTEXT.json
//
// Prints exactly the rendered text (no trailing newline). bos_token / eos_token default
// to the GGUF's tokens (tokenizer.ggml.bos_token_id / eos_token_id) with -m, else to
// "<bos>" / "<eos>", unless the context sets them.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "args.h"
#include "command.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/jinja/template.h"

namespace {

std::string read_text(const std::string& path, const char* what) {
    if (path == "-") {
        std::stringstream ss;
        ss << std::cin.rdbuf();
        return ss.str();
    }
    std::ifstream f(path, std::ios::binary);
    if (!f) hf2q::fail("cannot open ", what, " '", path, "'");
    std::stringstream ss;
    ss << f.rdbuf();
    if (f.bad()) hf2q::fail("cannot read ", what, " '", path, "'");
    return ss.str();
}

// The token text of `<key>` (a token id) in the GGUF's vocabulary, if both exist.
std::optional<std::string> gguf_token(const hf2q::gguf::File& f, const char* key) {
    const hf2q::gguf::Value* id = f.find(key);
    const hf2q::gguf::Value* tokens = f.find("tokenizer.ggml.tokens");
    if (!id || !tokens || id->is_array()) return std::nullopt;
    uint32_t i = id->as_u32(f.describe_key(key));
    const auto& list = tokens->as_string_array(f.describe_key("tokenizer.ggml.tokens"));
    if (i >= list.size())
        hf2q::fail(f.describe_key(key), ": token id ", i, " is outside the vocabulary of ",
                   list.size());
    return list[i];
}

int run_template(const std::vector<std::string>& args) {
    std::string model, template_file, context_file;
    hf2q::cli::ArgParser p("template", "(-m MODEL | --template FILE) --context CONTEXT.json",
                           "Render a chat template (Jinja2, as transformers' apply_chat_template) "
                           "and print the text.");
    p.option("-m,--model", "FILE", "GGUF model whose tokenizer.chat_template is rendered", &model);
    p.option("--template", "FILE", "Jinja template file to render", &template_file);
    p.option("--context", "FILE", "JSON object of template variables ('-' reads stdin)",
             &context_file);
    if (!p.parse(args)) return 0;
    if (model.empty() == template_file.empty())
        hf2q::fail("give exactly one of -m and --template (see --help)");

    nlohmann::ordered_json context = nlohmann::ordered_json::object();
    if (!context_file.empty()) {
        std::string text = read_text(context_file, "context file");
        try {
            context = nlohmann::ordered_json::parse(text);
        } catch (const nlohmann::json::exception& e) {
            hf2q::fail("context file '", context_file, "' is not valid JSON: ", e.what());
        }
        if (!context.is_object())
            hf2q::fail("context file '", context_file, "' must hold a JSON object");
    }

    std::string source, name, bos = "<bos>", eos = "<eos>";
    if (!model.empty()) {
        auto f = hf2q::gguf::File::open(model);
        source = f->get_string("tokenizer.chat_template");
        name = "tokenizer.chat_template";
        if (auto t = gguf_token(*f, "tokenizer.ggml.bos_token_id")) bos = *t;
        if (auto t = gguf_token(*f, "tokenizer.ggml.eos_token_id")) eos = *t;
    } else {
        source = read_text(template_file, "template file");
        name = template_file;
    }
    if (!context.contains("bos_token")) context["bos_token"] = bos;
    if (!context.contains("eos_token")) context["eos_token"] = eos;

    auto tmpl = hf2q::jinja::Template::parse(source, name);
    std::string out = tmpl.render(context);
    if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0)
        hf2q::fail("cannot write to stdout");
    return 0;
}

}  // namespace

HF2Q_COMMAND(template, "render a chat template with a JSON context", run_template);

// hf2q tokenize: print the token ids of a text as one JSON array, e.g. [2, 9259, 1902].
//
// Matches llama.cpp's `llama-tokenize --ids`: backslash escapes (\n, \t, \xHH, ...) in
// the input are processed unless --no-escape is given, special-token text is parsed
// unless --no-parse-special is given. Unlike llama-tokenize, BOS is only added with
// --add-bos.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "command.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/escapes.h"
#include "tokenizer/tokenizer.h"

namespace hf2q::cli {
namespace {

struct TokenizeOptions {
    std::string model;
    std::string prompt;
    std::string file;
    bool no_parse_special = false;
    bool add_bos = false;
    bool no_escape = false;
};

std::string read_whole_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot open '", path, "' for reading");
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) fail("failed reading '", path, "'");
    return ss.str();
}

int run_tokenize(const std::vector<std::string>& args) {
    TokenizeOptions o;
    ArgParser p("tokenize", "-m MODEL (-p TEXT | -f FILE) [options]",
                "Tokenize a text with a GGUF file's tokenizer and print the ids as one JSON\n"
                "array on stdout.");
    p.option("-m,--model", "FILE", "GGUF file (a model or a vocabulary-only file)", &o.model, true);
    p.option("-p,--prompt", "TEXT", "text to tokenize", &o.prompt);
    p.option("-f,--file", "FILE", "read the text to tokenize from FILE (bytes as they are)",
             &o.file);
    p.flag("--no-parse-special", "tokenize special-token text such as <|turn> as plain text",
           &o.no_parse_special);
    p.flag("--add-bos", "prepend the BOS token (exactly one, even if the text starts with it)",
           &o.add_bos);
    p.flag("--no-escape", "do not process backslash escapes (\\n, \\t, \\xHH, ...) in the text",
           &o.no_escape);
    if (!p.parse(args)) return 0;

    const bool has_prompt = p.was_set("--prompt");
    const bool has_file = p.was_set("--file");
    if (has_prompt == has_file) fail("give exactly one of -p TEXT and -f FILE");
    std::string text = has_prompt ? o.prompt : read_whole_file(o.file);
    if (!o.no_escape) text = tokenizer::process_escapes(text);

    auto file = gguf::File::open(o.model);
    tokenizer::Tokenizer tok(tokenizer::load_vocab(*file));
    const std::vector<tokenizer::TokenId> ids = tok.encode(text, o.add_bos, !o.no_parse_special);

    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i > 0) out += ", ";
        out += std::to_string(ids[i]);
    }
    out += "]\n";
    if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0) {
        fail("failed writing to stdout");
    }
    return 0;
}

}  // namespace

HF2Q_COMMAND(tokenize, "print the token ids of a text as a JSON array", run_tokenize);

}  // namespace hf2q::cli

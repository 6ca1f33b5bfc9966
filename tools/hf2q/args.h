// A small typed command-line parser for hf2q subcommands.
//
//   ArgParser p("generate", "-m MODEL [options]", "Generate text or token ids.");
//   p.option("-m,--model", "FILE", "GGUF model to load", &opts.model, /*required=*/true);
//   p.option("-n,--n-predict", "N", "tokens to generate", &opts.n_predict);
//   p.flag("--json", "print one JSON object", &opts.json);
//   if (!p.parse(args)) return 0;   // --help was printed
//
// Values are checked when parsed (numbers must parse fully and fit); unknown flags,
// missing values and missing required options throw hf2q::Error with a hint to use
// --help. Defaults shown in --help are the values the targets hold before parsing.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace hf2q::cli {

class ArgParser {
public:
    ArgParser(std::string command, std::string usage, std::string description);

    void flag(const std::string& names, const std::string& help, bool* out);
    template <class T>
    void option(const std::string& names, const std::string& metavar, const std::string& help,
                T* out, bool required = false) {
        add(names, metavar, help, Target{out}, required);
    }
    // Positional arguments, in order.
    void positional(const std::string& name, const std::string& help, std::string* out,
                    bool required = true);

    // Returns false when --help/-h was given (help printed to stdout).
    bool parse(const std::vector<std::string>& args);
    std::string help_text() const;
    bool was_set(const std::string& long_name) const;  // e.g. "--temp"

private:
    using Target = std::variant<bool*, std::string*, int32_t*, int64_t*, uint64_t*, float*,
                                double*, std::vector<std::string>*>;
    struct Opt {
        std::vector<std::string> names;
        std::string metavar, help, default_text;
        Target target;
        bool required = false;
        bool seen = false;
    };
    struct Pos {
        std::string name, help;
        std::string* out;
        bool required;
        bool seen = false;
    };
    void add(const std::string& names, const std::string& metavar, const std::string& help,
             Target t, bool required);
    void assign(Opt& o, const std::string& name, const std::string& value);

    std::string command_, usage_, description_;
    std::vector<Opt> opts_;
    std::vector<Pos> pos_;
};

// Splits "a,b,c" into parts (empty input gives an empty list).
std::vector<std::string> split_list(const std::string& s, char sep = ',');
// Parses a comma-separated list of integers; throws hf2q::Error naming `what`.
std::vector<int64_t> parse_int_list(const std::string& s, const std::string& what);

}  // namespace hf2q::cli
